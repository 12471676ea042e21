"""Benchmark files: the questions, their domain and difficulty level, and the reference answers.

A benchmark is small (thousands of questions) and written by people, so loading favours precise
messages over speed: every problem is reported with the file, the line (JSONL, CSV) or row
(Parquet) and the field, before anything is generated or judged. The format is documented in
docs/formats.md. ``parse_benchmark`` takes bytes so that storage and HTTPS fetchers can hand over
what they downloaded without a temporary file.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kubejury.errors import InputError
from kubejury.safe_input import MAX_INT_DIGITS, loads_json, split_lines

log = logging.getLogger(__name__)

Format = Literal["jsonl", "csv", "parquet"]

REQUIRED_FIELDS: tuple[str, ...] = ("id", "domain", "level", "question", "reference")
KNOWN_FIELDS: frozenset[str] = frozenset((*REQUIRED_FIELDS, "metadata"))

_SUFFIXES: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


@dataclass(frozen=True)
class Question:
    """One benchmark question. ``level`` is a positive integer (1 basic, 2 advanced, 3 expert)."""

    id: str
    domain: str
    level: int
    question: str
    reference: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Benchmark:
    """The questions of one benchmark file, in file order.

    ``domains`` is in order of first appearance, ``levels`` ascending. ``warnings`` holds the
    non-fatal findings of loading (e.g. unknown columns); they were also logged.
    """

    questions: tuple[Question, ...]
    source: str
    warnings: tuple[str, ...] = ()

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(q.domain for q in self.questions))

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(sorted({q.level for q in self.questions}))

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(q.id for q in self.questions)

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}

    def filter(
        self,
        domains: Iterable[str] | None = None,
        levels: Iterable[int] | None = None,
        limit_per_cell: int | None = None,
    ) -> Benchmark:
        """A sub-benchmark: only the given domains and levels, and at most ``limit_per_cell``
        questions per (domain, level) cell — the first ones in file order, so the result is
        deterministic. ``None`` means no restriction.
        """
        if limit_per_cell is not None and limit_per_cell < 0:
            raise ValueError(f"limit_per_cell must be non-negative, got {limit_per_cell}")
        keep_domains = None if domains is None else set(domains)
        keep_levels = None if levels is None else set(levels)
        taken: dict[tuple[str, int], int] = {}
        kept: list[Question] = []
        for q in self.questions:
            if keep_domains is not None and q.domain not in keep_domains:
                continue
            if keep_levels is not None and q.level not in keep_levels:
                continue
            cell = (q.domain, q.level)
            if limit_per_cell is not None and taken.get(cell, 0) >= limit_per_cell:
                continue
            taken[cell] = taken.get(cell, 0) + 1
            kept.append(q)
        return Benchmark(questions=tuple(kept), source=self.source, warnings=self.warnings)


def detect_format(data: bytes, source: str) -> Format:
    """The format from the file name's suffix, else from the content (Parquet magic, ``{``, CSV)."""
    suffix = Path(source.split("?", 1)[0]).suffix.lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if data[:4] == b"PAR1":
        return "parquet"
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    return "jsonl" if head.startswith(b"{") else "csv"


def load_benchmark(path: str | Path, fmt: Format | None = None) -> Benchmark:
    """Read and validate a benchmark file (JSONL, CSV or Parquet)."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(source, "benchmark file not found") from None
    except OSError as exc:
        raise InputError(source, f"cannot read benchmark file: {exc.strerror or exc}") from None
    return parse_benchmark(data, source, fmt)


def parse_benchmark(data: bytes, source: str, fmt: Format | None = None) -> Benchmark:
    """Validate benchmark bytes; ``source`` names them in messages; ``fmt`` None = detect."""
    if not data.strip():
        raise InputError(source, "benchmark file is empty: expected at least one question")
    fmt = fmt or detect_format(data, source)
    records: Iterable[tuple[str, Mapping[str, Any]]]
    if fmt == "parquet":
        records = _parquet_records(data, source)
    else:
        text = _decode(data, source)
        records = _jsonl_records(text, source) if fmt == "jsonl" else _csv_records(text, source)
    return _validate(records, source, csv_mode=fmt == "csv")


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            source,
            f"not valid UTF-8 at byte offset {exc.start} (byte 0x{data[exc.start]:02x}); save the file as UTF-8",
            location=f"line {line}",
        ) from None


def _jsonl_records(text: str, source: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for number, line in split_lines(text):
        if not line.strip():
            continue
        try:
            record = loads_json(line, source, f"line {number}")
        except json.JSONDecodeError as exc:
            raise InputError(
                source, f"invalid JSON: {exc.msg} (column {exc.colno})", location=f"line {number}"
            ) from None
        if not isinstance(record, dict):
            raise InputError(
                source,
                f"expected a JSON object per line, got {type(record).__name__}",
                location=f"line {number}",
            )
        yield f"line {number}", record


def _csv_records(text: str, source: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    # A field may be as long as the file, as in JSONL (the default cap is 128 KiB).
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(source, "benchmark file is empty: expected a header row") from None
    except csv.Error as exc:
        raise InputError(source, f"unreadable CSV: {exc}", location="line 1") from None
    header = [h.strip() for h in header]
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(source, "column appears twice in the header", location="line 1", field=name)
        seen.add(name)
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(source, f"unreadable CSV: {exc}", location=f"line {start}") from None
        location = f"line {start}"
        start = reader.line_num + 1
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(
                source, f"row has {len(row)} columns but the header has {len(header)}", location=location
            )
        yield location, dict(zip(header, row, strict=True))


def _parquet_records(data: bytes, source: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise InputError(source, f"not a readable Parquet file: {exc}") from None
    for number, record in enumerate(table.to_pylist(), start=1):
        yield f"row {number}", record


def _text_field(record: Mapping[str, Any], name: str, source: str, location: str) -> str:
    value = record.get(name)
    if name == "id" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(source, "required field is missing or empty", location=location, field=name)
    if not isinstance(value, str):
        raise InputError(
            source, f"must be a string, got {type(value).__name__} {value!r}", location=location, field=name
        )
    return value if name in ("question", "reference") else value.strip()


def _level(record: Mapping[str, Any], source: str, location: str, csv_mode: bool) -> int:
    value = record.get("level")
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(source, "required field is missing or empty", location=location, field="level")
    if csv_mode and isinstance(value, str) and value.strip().isdigit():
        if len(value.strip()) > MAX_INT_DIGITS:
            raise InputError(
                source, f"an integer of {len(value.strip())} digits", location=location, field="level"
            )
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(
            source,
            f"must be a positive integer (1 basic, 2 advanced, 3 expert, ...), got {value!r}",
            location=location,
            field="level",
        )
    return value


def _metadata(record: Mapping[str, Any], source: str, location: str, csv_mode: bool) -> dict[str, Any]:
    value = record.get("metadata")
    if value is None or (csv_mode and isinstance(value, str) and not value.strip()):
        return {}
    if csv_mode and isinstance(value, str):
        try:
            value = loads_json(value, source, location)
        except json.JSONDecodeError as exc:
            raise InputError(
                source,
                f"must be a JSON object written as text: {exc.msg}",
                location=location,
                field="metadata",
            ) from None
    if not isinstance(value, dict):
        raise InputError(
            source, f"must be an object, got {type(value).__name__}", location=location, field="metadata"
        )
    return value


def _validate(records: Iterable[tuple[str, Mapping[str, Any]]], source: str, *, csv_mode: bool) -> Benchmark:
    questions: list[Question] = []
    first_seen: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for location, record in records:
        for name in record:
            if name not in KNOWN_FIELDS and name not in unknown:
                unknown[name] = location
        qid = _text_field(record, "id", source, location)
        if qid in first_seen:
            raise InputError(
                source,
                f"duplicate question id {qid!r}: first at {first_seen[qid]}, again at {location}",
                location=location,
                field="id",
            )
        first_seen[qid] = location
        questions.append(
            Question(
                id=qid,
                domain=_text_field(record, "domain", source, location),
                level=_level(record, source, location, csv_mode),
                question=_text_field(record, "question", source, location),
                reference=_text_field(record, "reference", source, location),
                metadata=_metadata(record, source, location, csv_mode),
            )
        )
    if not questions:
        raise InputError(source, "benchmark file is empty: expected at least one question")
    warnings = tuple(
        f"{source}, {location}: unknown field '{name}' ignored (known: {', '.join(sorted(KNOWN_FIELDS))})"
        for name, location in unknown.items()
    )
    for message in warnings:
        log.warning("%s", message)
    return Benchmark(questions=tuple(questions), source=source, warnings=warnings)
