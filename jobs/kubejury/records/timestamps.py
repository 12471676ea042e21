"""Kubernetes timestamps: the one formatter and the one parser every record and the operator use.

Why this module exists: Kubernetes writes times as RFC 3339 in UTC with whole seconds and a ``Z``
(``2026-12-01T03:04:05Z``), and the records that cross a process (``status.gpu``, progress records,
conditions, report.json's ``generated_at``) compare and subtract such strings. The format used to be
spelt in four places; a reader and a writer that disagree on it (an offset instead of ``Z``, fractions
of a second) would make one process misread another's times. Here it is defined once.
"""

from __future__ import annotations

import datetime

#: The format Kubernetes writes (``metav1.Time``): UTC, whole seconds, a literal ``Z``.
KUBERNETES_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_time(value: datetime.datetime) -> str:
    """``value`` as Kubernetes writes a time; an aware time is converted to UTC first."""
    return value.astimezone(datetime.UTC).strftime(KUBERNETES_TIME_FORMAT)


def parse_time(value: str | None) -> datetime.datetime | None:
    """An RFC 3339 timestamp (``2026-12-01T03:04:05Z``, fractions and offsets accepted) as an aware
    datetime; a time without an offset is taken as UTC; ``None`` and ``""`` stay ``None``.

    Raises ``ValueError`` for text that is not a timestamp.
    """
    if not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    parsed = datetime.datetime.fromisoformat(text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def now_time() -> str:
    """The current time, formatted by :func:`format_time`."""
    return format_time(datetime.datetime.now(datetime.UTC))


def seconds_between(start: str | None, end: str | None) -> float:
    """Seconds from ``start`` to ``end``: 0 when either is missing or ``end`` is earlier."""
    begin, finish = parse_time(start), parse_time(end)
    if begin is None or finish is None:
        return 0.0
    return max(0.0, (finish - begin).total_seconds())
