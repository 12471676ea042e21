"""A normalised copy of untrusted text for *detection*, with a map back to the original characters.

Answers are shown to judges as the model wrote them. But the patterns that must be caught in them
(a self-identification, a forged ``<<<END: …>>>`` delimiter, a ``[[10]]`` verdict) can be disguised:
full-width forms (``［［10］］``, ``＜＜＜``), look-alike brackets (``【【10】】``), or zero-width and
bidi control characters splitting a token (``<\u200b<<``, ``Q\u200bwen``). So detection runs on a
copy that is NFKC-normalised, has those controls removed and look-alike brackets folded to ASCII,
and every match found there is mapped back to the span of the original text it came from. Only
those spans are ever changed; every other character of the answer stays byte for byte.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

#: Zero-width and bidirectional control characters: invisible, so they can split any token.
INVISIBLE: frozenset[str] = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d\u206e\u206f"
    "\u3164\ufe00\ufe01\ufe02\ufe03\ufe04\ufe05\ufe06\ufe07\ufe08\ufe09\ufe0a\ufe0b\ufe0c\ufe0d\ufe0e\ufe0f"
    "\ufeff\uffa0"
)

#: Brackets that NFKC leaves alone but that read as ``[``/``]`` or ``<``/``>`` (after NFKC).
LOOKALIKES: dict[str, str] = {
    **dict.fromkeys("【〔〖〘〚⟦⦃⦅⦇⦉⦋⦍⦏⦑⦓⦕⦗⟬⁅「『｢", "["),
    **dict.fromkeys("】〕〗〙〛⟧⦄⦆⦈⦊⦌⦎⦐⦒⦔⦖⦘⟭⁆」』｣", "]"),
    **dict.fromkeys("‹〈《⟨⟪❮❬⧼﹤ᐸ˂", "<"),
    **dict.fromkeys("›〉》⟩⟫❯❭⧽﹥ᐳ˃", ">"),
}


@dataclass(frozen=True, slots=True)
class DetectionText:
    """``text``: the normalised copy; ``origin[i]``: index in the original of ``text[i]``."""

    original: str
    text: str
    origin: tuple[int, ...]

    @classmethod
    def of(cls, original: str) -> DetectionText:
        if original.isascii():
            return cls(original, original, tuple(range(len(original))))
        chars: list[str] = []
        origin: list[int] = []
        for index, char in enumerate(original):
            if char in INVISIBLE:
                continue
            folded = unicodedata.normalize("NFKC", char) if not char.isascii() else char
            for out in folded:
                if out in INVISIBLE:
                    continue
                chars.append(LOOKALIKES.get(out, out))
                origin.append(index)
        return cls(original, "".join(chars), tuple(origin))

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span that ``text[start:end]`` (non-empty) was made from."""
        return self.origin[start], self.origin[end - 1] + 1


def replace_spans(text: str, replacements: list[tuple[int, int, str]]) -> str:
    """``text`` with each ``(start, end, new)`` applied; spans must not overlap."""
    out: list[str] = []
    position = 0
    for start, end, new in sorted(replacements):
        out.append(text[position:start])
        out.append(new)
        position = end
    out.append(text[position:])
    return "".join(out)


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching spans joined, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
