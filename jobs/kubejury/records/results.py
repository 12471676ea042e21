"""An answer and a judgment as stored: the typed records the stages write and every reader reads.

Why this module exists: the generation and judging Jobs write one JSON line per answer and per
judgment, and other processes (the judging Job reads answers, the aggregation Job reads both) read
them back. They used to be ``dict[str, Any]`` built in two stages, with their schema written again
in ``files/tables.py`` and in ``docs/formats.md``. Here each is one frozen type: the writer is
:meth:`AnswerRecord.to_json` / :meth:`JudgmentRecord.to_json`, the reader is ``from_json``, and the
tables' polars schemas are derived from the fields (:func:`field_types`).

Versions. Every line written now carries ``"format": 2`` (:data:`RESULTS_FORMAT`). Lines written
before the key existed are format 1; they hold the same keys (some may be missing: an older Job
wrote no ``server_version`` or ``fingerprint``), and :func:`_migrated` — the one place that knows
older formats — turns them into today's form before they are read. ``question_sha256``,
``input_sha256`` and ``reused_from`` were added to format 2 as optional keys (an older reader
ignores them); a record without the hashes is never copied into another run. A line of a newer format than
this kubejury knows is refused, naming the field.

Fields are in the order the stages have always written them (keyword-only, so a required field may
follow one with a default). Frozen dataclasses (with slots), like :class:`~kubejury.records.progress.ProgressRecord` and
:class:`~kubejury.records.gpu_usage.GpuUsage`: the records layer imports nothing heavy (the operator
imports it too), and a judging stage makes millions of these, where a dataclass is the cheap choice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Self, TypeVar, Union, get_args, get_origin, get_type_hints

#: The ``format`` every record written now carries; a line without the key is format 1.
RESULTS_FORMAT = 2
FORMAT_KEY = "format"
#: The series of a record that names none (absent or null in a hand-written file).
DEFAULT_SERIES = "default"


class RecordFormatError(ValueError):
    """A stored answer or judgment line that is not one; the message names the field."""


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one request as the server counted them (``None`` when it did not say)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerRecord:
    """One model's answer to one question under one series (``answer`` is ``None`` on failure)."""

    question_id: str
    model: str
    series: str = DEFAULT_SERIES
    answer: str | None = None
    finish_reason: str | None = None  # as the server reported it: stop, length, ...
    usage: TokenUsage | None = None
    latency_s: float | None = None  # seconds of the final attempt
    attempts: int | None = None  # requests made, retries included
    error: str | None = None  # None when fine, else what went wrong
    error_kind: str | None = None  # connection, http, rejected, timeout, malformed
    server_version: str | None = None  # the reply's system_fingerprint, when the server gives one
    fingerprint: str | None = None  # the stage's fingerprint digest (kubejury.records.fingerprint)
    question_sha256: str | None = None  # of the question text the model saw (question_sha256)
    reused_from: str | None = None  # the earlier run this record was copied from (issue 24)

    def to_json(self) -> dict[str, Any]:
        """The stored form: one key per field, plus ``format``; no ``fingerprint`` or
        ``reused_from`` key when unset."""
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnswerRecord:
        """Read a stored line of any format; a wrong field raises :class:`RecordFormatError`."""
        return _read(cls, "answer", data)

    def with_fingerprint(self, digest: str) -> Self:
        return dataclasses.replace(self, fingerprint=digest)


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgmentRecord:
    """One judge's verdict on one model's (anonymized) answer to one question under one series.

    ``score`` is ``None`` exactly when ``error`` is set; ``error_kind == "parse"`` means the judge
    replied but gave no valid score even after being re-asked.
    """

    question_id: str
    model: str
    series: str = DEFAULT_SERIES
    judge: str
    answer_id: str | None = None  # the opaque id the judge saw instead of the model's name
    score: float | None = None  # 0..10
    rationale: str | None = None
    error: str | None = None
    error_kind: str | None = None  # parse, or the request's error kind
    asks: int | None = None  # requests made to get a verdict (re-asks included)
    latency_s: float | None = None
    usage: TokenUsage | None = None
    fingerprint: str | None = None
    input_sha256: str | None = None  # of what the judge saw (judged_sha256): question, reference, answer
    reused_from: str | None = None  # the earlier run this record was copied from (issue 24)

    def to_json(self) -> dict[str, Any]:
        """The stored form: one key per field, plus ``format``; no ``fingerprint`` or
        ``reused_from`` key when unset."""
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JudgmentRecord:
        """Read a stored line of any format; a wrong field raises :class:`RecordFormatError`."""
        return _read(cls, "judgment", data)

    def with_fingerprint(self, digest: str) -> Self:
        return dataclasses.replace(self, fingerprint=digest)


ResultRecord = AnswerRecord | JudgmentRecord
R = TypeVar("R", AnswerRecord, JudgmentRecord)


def field_types(record_type: type) -> dict[str, type]:
    """Each field's JSON name → its value type with ``None`` taken away (``str``, ``float``,
    ``int`` or :class:`TokenUsage`), in field order: what the tables derive their schemas from.

    ``record_type`` is one of this module's records (:class:`TokenUsage` included)."""
    return {name: kind for name, (kind, _) in _plan(record_type).items()}


def required_fields(record_type: type) -> tuple[str, ...]:
    """The fields a line must give (not missing, not null)."""
    if record_type not in _REQUIRED:
        _REQUIRED[record_type] = tuple(
            f.name for f in fields(record_type) if f.default is dataclasses.MISSING
        )
    return _REQUIRED[record_type]


_REQUIRED: dict[type, tuple[str, ...]] = {}


# ------------------------------------------------------------------------------ writing


_OMITTED_WHEN_UNSET = frozenset({"fingerprint", "question_sha256", "input_sha256", "reused_from"})


def question_sha256(question: str) -> str:
    """What determines an answer besides its stage's fingerprint: the question text the model saw."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()


def judged_sha256(question: str, reference: str, answer: str) -> str:
    """What determines a judgment besides its judge's fingerprint: what the judge saw — the
    question, the reference and the anonymized answer (never the model's name, nor the order)."""
    canonical = json.dumps([question, reference, answer], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _to_json(record: ResultRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if value is None and f.name in _OMITTED_WHEN_UNSET:
            continue  # a stage without a fingerprint wrote no such key; most records are not copies
        out[f.name] = value.to_json() if isinstance(value, TokenUsage) else value
    out[FORMAT_KEY] = RESULTS_FORMAT
    return out


# ------------------------------------------------------------------------------ reading


def _migrated(kind: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` in today's format, whatever format it was written in (the one place for that)."""
    version = data.get(FORMAT_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordFormatError(f"{kind} record field {FORMAT_KEY!r}: {version!r} is not a format number")
    if version > RESULTS_FORMAT:
        raise RecordFormatError(
            f"{kind} record field {FORMAT_KEY!r}: format {version} is newer than this kubejury reads "
            f"({RESULTS_FORMAT}); read it with the kubejury that wrote it"
        )
    # Format 1 (no "format" key) has today's keys; the ones an older Job did not write are read as
    # absent, which every field allows but the required keys. Nothing to rewrite yet.
    return data


def _read(record_type: type[R], kind: str, data: Mapping[str, Any]) -> R:
    current = _migrated(kind, data)
    values: dict[str, Any] = {}
    for name, (expected, convert) in _plan(record_type).items():
        value = current.get(name)
        if value is None:
            continue
        # The common case costs one type check; the converter runs only for anything else.
        values[name] = value if type(value) is expected else convert(kind, name, value)
    for name in required_fields(record_type):
        if name not in values:
            raise RecordFormatError(f"{kind} record field {name!r}: required, but missing or null")
    return record_type(**values)


Converter = Callable[[str, str, Any], Any]
"""``(kind, field, value)`` → the field's value, or :class:`RecordFormatError` naming the field."""


def _wrong(kind: str, name: str, value: Any, expected: str) -> RecordFormatError:
    return RecordFormatError(
        f"{kind} record field {name!r}: must be {expected}, got {type(value).__name__} {value!r:.40}"
    )


def _text(kind: str, name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _wrong(kind, name, value, "a string")


def _number(kind: str, name: str, value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise _wrong(kind, name, value, "a number")


def _integer(kind: str, name: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _wrong(kind, name, value, "an integer")


def _usage(kind: str, name: str, value: Any) -> TokenUsage:
    if not isinstance(value, Mapping):
        raise _wrong(kind, name, value, "an object")
    counts = {
        key: None if value.get(key) is None else _integer(kind, f"{name}.{key}", value.get(key))
        for key in ("prompt_tokens", "completion_tokens")
    }  # other keys a server may add are not kept
    return TokenUsage(**counts)


def _question_id(kind: str, name: str, value: Any) -> str:
    """A question id; a JSON integer is its decimal string, as benchmarks read it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _text(kind, name, value)


_CONVERTERS: dict[type, Converter] = {str: _text, float: _number, int: _integer, TokenUsage: _usage}


_PLANS: dict[type, dict[str, tuple[type, Converter]]] = {}


def _plan(record_type: type) -> dict[str, tuple[type, Converter]]:
    """Field → (value type, converter), from the annotations: a new field needs no new reader."""
    if record_type not in _PLANS:
        _PLANS[record_type] = _plan_of(record_type)
    return _PLANS[record_type]


def _plan_of(record_type: type) -> dict[str, tuple[type, Converter]]:
    hints = get_type_hints(record_type)
    plan: dict[str, tuple[type, Converter]] = {}
    for f in fields(record_type):
        kind = _without_none(f.name, hints[f.name])
        if kind not in _CONVERTERS:
            raise TypeError(f"{record_type.__name__}.{f.name}: no reader for values of type {kind!r}")
        plan[f.name] = (kind, _question_id if f.name == "question_id" else _CONVERTERS[kind])
    return plan


def _without_none(name: str, annotation: Any) -> type:
    """``X`` of ``X`` or ``X | None``; anything else (a union of two types) is refused."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"field {name!r}: {annotation!r} is not one type or None")
        annotation = rest[0]
    if not isinstance(annotation, type):
        raise TypeError(f"field {name!r}: {annotation!r} is not a type")
    return annotation
