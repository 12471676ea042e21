"""Credentials out of everything kubejury writes: the one redaction function.

Why this module exists: a model server or proxy may echo request headers in an error body, and an
endpoint URL may carry ``user:password@``. Whatever kubejury writes — answer and judgment records,
progress records, stderr, the operator's Events and status — passes through :func:`redact` at the
write site, so a secret that reached a message never reaches storage or the API server (issue 11,
finding 5). Pure, vocabulary level: the engine and the operator both use it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MASK", "redact", "redact_known", "redact_tree"]

MASK = "***"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host  ->  scheme://user:***@host
    (re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^/\s@]+@"), rf"\g<head>:{MASK}@"),
    # Authorization: Bearer x / Basic x, and the bare scheme anywhere
    (re.compile(r"(?i)\b(?P<head>bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), rf"\g<head> {MASK}"),
    # header or field named like a key: "x-api-key": "v", api_key=v, "authorization": "v", token: v
    (
        re.compile(
            r"(?i)(?P<head>[\"']?\b(?:x-api-key|api[_-]?key|authorization|access[_-]?token|secret[_-]?access[_-]?key"
            r"|aws_secret_access_key|aws_session_token|password|passwd|hf_token|token)[\"']?\s*[:=]\s*[\"']?)"
            r"(?!bearer\b|basic\b)[^\s\"',}&]+"
        ),
        rf"\g<head>{MASK}",
    ),
    # well-known key shapes: OpenAI/Anthropic-style sk-…, Hugging Face hf_…, AWS access key ids
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), f"sk-{MASK}"),
    (re.compile(r"\bhf_[A-Za-z0-9]{10,}"), f"hf_{MASK}"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials masked: URL passwords, bearer/basic tokens, values of key-like
    fields, well-known key shapes, and any of ``secrets`` (exact values known to the caller)."""
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, MASK)
    return _redact_short(text) if len(text) <= _REMEMBERED_LENGTH else _redact_patterns(text)


def redact_known(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with only the exact ``secrets`` masked. For text that is itself the data — a model's
    answer, judged as written — where a credential-*shaped* phrase ("Authorization: Bearer <token>"
    in an answer about proxies) is content, but the run's own key echoed back is a leak."""
    for value in sorted({v for v in secrets if v and len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def _redact_patterns(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


# The patterns' answers for short strings are remembered: the operator redacts every string of a
# run's status on each write, and nearly all of them (names, reasons, timestamps) repeat.
_REMEMBERED_LENGTH = 256
_redact_short = functools.lru_cache(maxsize=16384)(_redact_patterns)


def redact_tree(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """Every string inside ``value`` (dicts, lists, tuples) redacted; keys are kept."""
    known = tuple(secrets)
    if isinstance(value, str):
        return redact(value, known)
    if isinstance(value, Mapping):
        return {k: redact_tree(v, known) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(v, known) for v in value]
    return value
