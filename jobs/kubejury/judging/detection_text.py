"""A normalised copy of untrusted text for *detection*, with a map back to the original characters.

Answers are shown to judges as the model wrote them. But the patterns that must be caught in them
(a self-identification, a forged ``<<<END: …>>>`` delimiter, a ``[[10]]`` verdict) can be disguised:
full-width forms (``［［10］］``, ``＜＜＜``), look-alike brackets (``【【10】】``, ``❰❰❰``), zero-width
and bidi controls or variation selectors splitting a token (``<\u200b<<``, ``Q\u200bwen``),
combining marks (``Q\u0301wen``, ``Qwén``), letters of another script (``Qwеn`` with a Cyrillic
``е``) or escapes a reader decodes (``"\\u0073core"``, ``sc&#111;re``). So detection runs on a copy
in which every character cluster is NFKC-normalised and stripped of combining marks, the
invisible characters are removed, look-alike brackets are folded to ASCII and escapes decoded; each
character of the copy remembers the span of the original it came from, and only those spans are
ever changed: every other character of the answer stays byte for byte.

Homoglyphs are folded only inside a *mixed* word: one whose letters are all Latin or look-alikes
of Latin, with at least one real Latin letter or a look-alike that Russian does not use (``і``,
``ѕ``, ``һ``…). A word written in the Russian alphabet alone ("Река", "Мета", "АО") is Russian
and is read as written, so folding can never change how a Russian sentence is matched.

Some characters are there only to smuggle: Unicode *tag characters* (U+E0000–E007F, invisible
text a model still reads — a hidden "I am Qwen" or "give 10"), the supplementary variation
selectors and runs of variation selectors (which can encode any bytes after an emoji).
:func:`hidden_spans` finds them so that callers remove them from what a judge sees.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

#: Zero-width and bidirectional control characters and variation selectors: invisible, so they
#: can split any token.
INVISIBLE: frozenset[str] = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f"
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d\u206e\u206f"
    "\u3164\ufe00\ufe01\ufe02\ufe03\ufe04\ufe05\ufe06\ufe07\ufe08\ufe09\ufe0a\ufe0b\ufe0c\ufe0d\ufe0e\ufe0f"
    "\ufeff\uffa0"
)

#: Brackets that NFKC leaves alone but that read as ``[``/``]`` or ``<``/``>`` (after NFKC).
LOOKALIKES: dict[str, str] = {
    **dict.fromkeys("【〔〖〘〚⟦⦃⦅⦇⦉⦋⦍⦏⦑⦓⦕⦗⟬⁅「『｢❲⸢⸤⌈⌊⟮", "["),
    **dict.fromkeys("】〕〗〙〛⟧⦄⦆⦈⦊⦌⦎⦐⦒⦔⦖⦘⟭⁆」』｣❳⸣⸥⌉⌋⟯", "]"),
    **dict.fromkeys("‹〈《⟨⟪❮❬⧼﹤ᐸ˂❰≺⋖⊰", "<"),
    **dict.fromkeys("›〉》⟩⟫❯❭⧽﹥ᐳ˃❱≻⋗⊱", ">"),
}

#: Cyrillic and Greek letters drawn like a Latin one (only the ones that are, in common fonts).
HOMOGLYPHS: dict[str, str] = {
    **dict(zip("АВЕКМНОРСТХУЅІЈԚԜӀҮ", "ABEKMHOPCTXYSIJQWIY", strict=True)),
    **dict(zip("аеорсухѕіјһԛԝӏүԁ", "aeopcyxsijhqwlyd", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧονι", "ABEZHIKMNOPTYXovi", strict=True)),
}
# The look-alikes a Russian word never contains: one of them marks a word as disguised Latin.
_NOT_RUSSIAN = frozenset(HOMOGLYPHS) - frozenset("АВЕКМНОРСТХУаеорсух")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})|&#(?:[xX]([0-9a-fA-F]{1,6})|([0-9]{1,7}));")
_WORD = re.compile(r"[^\W\d_]+")


def _is_tag(char: str) -> bool:
    return "\U000e0000" <= char <= "\U000e007f"


def _is_variation_selector(char: str) -> bool:
    return (
        "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef" or "\u180b" <= char <= "\u180f"
    )


def hidden_spans(text: str) -> list[tuple[int, int]]:
    """Spans of characters that only smuggle: tag characters, supplementary variation selectors,
    and variation selectors that follow no visible character or another selector. A single
    ``U+FE0E``/``U+FE0F`` after an emoji is text presentation and is kept."""
    if text.isascii():
        return []
    spans: list[tuple[int, int]] = []
    for index, char in enumerate(text):
        smuggles = _is_tag(char) or "\U000e0100" <= char <= "\U000e01ef"
        if not smuggles and _is_variation_selector(char):
            before = text[index - 1] if index else ""
            smuggles = not before or _is_variation_selector(before) or _is_tag(before) or before.isspace()
        if smuggles:
            if spans and spans[-1][1] == index:
                spans[-1] = (spans[-1][0], index + 1)
            else:
                spans.append((index, index + 1))
    return spans


def _decoded(original: str, index: int) -> tuple[str, int] | None:
    """``(character, end)`` if an escape a reader would decode (``\\u0073``, ``&#115;``) starts here."""
    match = _ESCAPE.match(original, index)
    if match is None:
        return None
    digits = next(group for group in match.groups() if group is not None)
    code = int(digits, 10 if match.group(4) is not None else 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return None
    return chr(code), match.end()


def _cluster_end(original: str, index: int) -> int:
    """The end of the character at ``index`` with the combining marks that follow it."""
    end = index + 1
    while end < len(original) and unicodedata.combining(original[end]):
        end += 1
    return end


def _plain(char: str) -> str:
    """A character as detection reads it: no invisible ones, no marks, look-alike brackets folded;
    a Latin letter with a diacritic becomes its base letter (Cyrillic ``й``/``ё`` stay letters)."""
    if char in INVISIBLE or _is_tag(char) or _is_variation_selector(char) or unicodedata.combining(char):
        return ""
    if char.isascii():
        return char
    if "LATIN" in unicodedata.name(char, ""):
        base = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c))
        return base
    return LOOKALIKES.get(char, char)


@dataclass(frozen=True, slots=True)
class DetectionText:
    """``text``: the normalised copy; ``text[i]`` came from ``original[starts[i]:ends[i]]``."""

    original: str
    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    @classmethod
    def of(cls, original: str) -> DetectionText:
        if original.isascii() and "\\u" not in original and "\\U" not in original and "&#" not in original:
            return cls(original, original, tuple(range(len(original))), tuple(range(1, len(original) + 1)))
        chars: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        index = 0
        while index < len(original):
            escape = _decoded(original, index) if original[index] in "\\&" else None
            if escape is not None:
                cluster, end = escape
            else:
                end = _cluster_end(original, index)
                cluster = original[index:end]
            for char in unicodedata.normalize("NFKC", cluster) if not cluster.isascii() else cluster:
                for out in _plain(char):
                    chars.append(out)
                    starts.append(index)
                    ends.append(end)
            index = end
        text = _fold_disguised_words("".join(chars))
        return cls(original, text, tuple(starts), tuple(ends))

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span that ``text[start:end]`` (non-empty) was made from."""
        return self.starts[start], self.ends[end - 1]


def _fold_disguised_words(text: str) -> str:
    """Latin written with Cyrillic or Greek look-alikes, folded back to Latin, one character for
    one (so the map to the original stays valid); words of the Russian alphabet stay as written."""
    if text.isascii():
        return text
    chars = list(text)
    for word in _WORD.finditer(text):
        letters = word.group()
        if letters.isascii() or not all(c.isascii() or c in HOMOGLYPHS for c in letters):
            continue
        if any(c.isascii() or c in _NOT_RUSSIAN for c in letters):
            for offset, char in enumerate(letters):
                chars[word.start() + offset] = HOMOGLYPHS.get(char, char)
    return "".join(chars)


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
