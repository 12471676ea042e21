"""Judgment, answer and expert records: from files to dense :class:`~kubejury.stats.cube.ScoreCube` s.

Judgments are the large input (millions of records). The stages store them as Parquet shards
(:mod:`kubejury.files.shards`), read here column by column — only the columns scoring needs, no
JSON parsed — and turned into integer codes at once; no Python code runs per record on the happy
path. JSONL (runs made before issue 26, ``kubejury export``, other tools) is still read, with
polars' columnar NDJSON reader. Validation is vectorised for both. Only when something is wrong
does the slow path run: a JSONL file is re-read line by line to name the exact line and field in
the error; a Parquet shard's error names the file, its record (``record N``, from 1) and the
column (docs/formats.md describes the formats and every error).

The polars schemas are not written here: each column's type comes from the field of
:class:`~kubejury.records.results.AnswerRecord` / :class:`~kubejury.records.results.JudgmentRecord`
of the same name (:func:`polars_schema`), the records the stages write; this module only chooses
which columns it reads.

``sources`` everywhere is a file (``*.parquet`` or JSONL), a directory (all its ``*.parquet`` and
``*.jsonl`` files, sorted by name; when it has none directly, those below it, as in a run's
``judgments/`` folder), a glob pattern, or a list of those.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import glob
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from kubejury.errors import InputError
from kubejury.files import shards
from kubejury.files.benchmark import Benchmark
from kubejury.records.results import (
    DEFAULT_SERIES,
    AnswerRecord,
    JudgmentRecord,
    TokenUsage,
    field_types,
    required_fields,
)
from kubejury.safe_input import MAX_INT_DIGITS, loads_json
from kubejury.stats.cube import FloatArray, ScoreCube
from kubejury.stats.experts import expert_score

Codes = npt.NDArray[np.int32]
Sources = str | Path | Sequence[str | Path]

SCORE_MIN, SCORE_MAX = 0.0, 10.0

#: A record field's value type → the polars type of its column (a record inside is a struct).
_POLARS_TYPES: dict[type, pl.DataType] = {str: pl.String(), float: pl.Float64(), int: pl.Int64()}
#: A record field's value type → the JSON type named by the slow path's messages.
_JSON_TYPES: dict[type, str] = {str: "string", float: "number", int: "integer", TokenUsage: "object"}


def polars_type(kind: type) -> pl.DataType:
    """The polars type of a record field whose values are ``kind`` (see :func:`field_types`)."""
    if dataclasses.is_dataclass(kind):
        return pl.Struct({name: polars_type(value) for name, value in field_types(kind).items()})
    if kind not in _POLARS_TYPES:
        raise TypeError(f"no polars column type for record values of type {kind.__name__}")
    return _POLARS_TYPES[kind]


def polars_schema(record_type: type) -> dict[str, pl.DataType]:
    """Every field of ``record_type`` (a record of :mod:`kubejury.records.results`) → its polars type."""
    return {name: polars_type(kind) for name, kind in field_types(record_type).items()}


def _columns(record_type: type, *names: str) -> dict[str, pl.DataType]:
    """The schema of the columns ``names`` of ``record_type`` (a name that is no field raises)."""
    schema = polars_schema(record_type)
    return {name: schema[name] for name in names}


# The columns each loader reads (the others are not needed to score, and a judgment's rationale is
# costly on large runs): their types are the records' own.
JUDGMENT_SCHEMA = _columns(JudgmentRecord, "question_id", "model", "series", "judge", "score")
JUDGMENT_TEXT_SCHEMA = _columns(JudgmentRecord, "rationale", "error")
ANSWER_SCHEMA = _columns(
    AnswerRecord, "question_id", "model", "series", "answer", "finish_reason", "usage", "latency_s", "error"
)


# ---------------------------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class KeyedRecords:
    """Records as integer codes into small dictionaries, plus where each record came from.

    ``series`` lists the distinct series in order of first appearance; ``models`` and
    ``question_ids`` are sorted. The ``*_code`` arrays index them. Records keep file order;
    ``offsets[k]`` is the index of the first record of ``sources[k]`` (with the total at the end),
    so :meth:`location` can name the file and line of any record when an error needs it.
    """

    sources: tuple[str, ...]
    offsets: tuple[int, ...]
    series: tuple[str, ...]
    models: tuple[str, ...]
    question_ids: tuple[str, ...]
    series_code: Codes
    model_code: Codes
    question_code: Codes

    def __len__(self) -> int:
        return int(self.series_code.shape[0])

    def location(self, record: int) -> tuple[str, str]:
        """(file, ``"line N"``) of record number ``record`` — reads the file; for error messages."""
        return _location(self.sources, self.offsets, record)


def _location(sources: Sequence[str], offsets: Sequence[int], record: int) -> tuple[str, str]:
    k = bisect.bisect_right(offsets, record) - 1
    k = min(max(k, 0), len(sources) - 1)
    if shards.file_kind(sources[k]) == "parquet" or not Path(sources[k]).is_file():
        # a Parquet file, or records read from storage (a run's folder): counted, not a file's lines
        return sources[k], f"record {record - offsets[k] + 1}"
    return sources[k], f"line {_line_number(sources[k], record - offsets[k])}"


@dataclass(frozen=True)
class Judgments(KeyedRecords):
    """Judgment records; ``score`` is NaN where the judge's score is null.

    ``text`` holds ``rationale`` and ``error`` (aligned with the records) when loaded with
    ``text=True``, else ``None``.
    """

    judges: tuple[str, ...]
    judge_code: Codes
    score: FloatArray
    text: pl.DataFrame | None = None

    def to_frame(self) -> pl.DataFrame:
        """The records as a polars DataFrame with string columns (convenient, not fast)."""
        frame = pl.DataFrame(
            {
                "series": _decode_codes(self.series, self.series_code),
                "model": _decode_codes(self.models, self.model_code),
                "question_id": _decode_codes(self.question_ids, self.question_code),
                "judge": _decode_codes(self.judges, self.judge_code),
                "score": pl.Series(self.score).fill_nan(None),
            }
        )
        return frame if self.text is None else pl.concat([frame, self.text], how="horizontal")


@dataclass(frozen=True)
class Answers(KeyedRecords):
    """Answer records; ``values`` holds, aligned with the records: ``answer_chars`` (length of the
    answer in characters, null when there is none), ``prompt_tokens``, ``completion_tokens``,
    ``latency_s``, ``finish_reason``, ``error`` and, when loaded with ``text=True``, ``answer``.
    """

    values: pl.DataFrame

    def to_frame(self) -> pl.DataFrame:
        keys = pl.DataFrame(
            {
                "series": _decode_codes(self.series, self.series_code),
                "model": _decode_codes(self.models, self.model_code),
                "question_id": _decode_codes(self.question_ids, self.question_code),
            }
        )
        return pl.concat([keys, self.values], how="horizontal")


@dataclass(frozen=True)
class Experts:
    """Expert scores: a frame with ``question_id``, ``model``, ``expert``, ``score`` (0..10) and
    ``series`` (null when the file has no series column or the cell is empty), plus ``line``."""

    source: str
    frame: pl.DataFrame


def _decode_codes(values: tuple[str, ...], codes: Codes) -> pl.Series:
    return pl.Series(values, dtype=pl.String).gather(pl.Series(codes))


# ---------------------------------------------------------------------------------------------
# Sources


def resolve_sources(sources: Sources, kind: str) -> list[str]:
    """Expand a file, directory, glob or list of those into an ordered list of files."""
    items: Sequence[str | Path] = [sources] if isinstance(sources, str | Path) else sources
    files: list[str] = []
    for item in items:
        text = str(item)
        path = Path(text)
        if path.is_dir():
            found = _record_files(path, "*") or _record_files(path, "**/*")
            if not found:
                raise InputError(text, f"directory has no *.parquet or *.jsonl {kind} files")
            files.extend(found)
        elif any(ch in text for ch in "*?["):
            found = sorted(p for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not found:
                raise InputError(text, f"no {kind} files match this pattern")
            files.extend(found)
        elif path.is_file():
            files.append(text)
        else:
            raise InputError(text, f"{kind} file not found")
    if not files:
        raise InputError(str(sources), f"no {kind} files given")
    return list(dict.fromkeys(files))


def _record_files(folder: Path, pattern: str) -> list[str]:
    """The ``*.parquet`` and ``*.jsonl`` files matching ``pattern`` under ``folder``, by name."""
    found = [p for suffix in ("parquet", "jsonl") for p in folder.glob(f"{pattern}.{suffix}")]
    return sorted(str(p) for p in found if p.is_file() and not p.name.startswith("."))


# ---------------------------------------------------------------------------------------------
# The slow path: exact line numbers and the first bad line, only when something is wrong.


def _nonblank_lines(source: str) -> Iterator[tuple[int, bytes]]:
    """(line number, content) of every non-blank line, in file order."""
    with open(source, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line


def _line_number(source: str, row: int) -> int:
    for index, (number, _) in enumerate(_nonblank_lines(source)):
        if index == row:
            return number
    return -1


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "object": (dict,),
}


_BOM = b"\xef\xbb\xbf"


_LONG_INT = re.compile(r'"([^"\\]+)"\s*:\s*-?\d{' + str(MAX_INT_DIGITS + 1) + ",}")


def _field_of(text: str) -> str | None:
    """The field whose value is an over-long integer on a line (for the message)."""
    match = _LONG_INT.search(text)
    return match.group(1) if match else None


def _find_bad_line(source: str, fields: Mapping[str, tuple[str, bool]], kind: str) -> InputError | None:
    """Check a JSONL file line by line against ``fields`` = {name: (type, required)}."""
    for number, raw in _nonblank_lines(source):
        location = f"line {number}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return InputError(source, f"not valid UTF-8 at byte {exc.start} of the line", location=location)
        if number == 1:
            text = text.removeprefix("\ufeff")  # a byte order mark, read as in benchmarks
        try:
            record = loads_json(text, source, location)
        except json.JSONDecodeError as exc:
            return InputError(source, f"invalid JSON: {exc.msg} (column {exc.colno})", location=location)
        except InputError as exc:
            return InputError(source, exc.detail, location=location, field=_field_of(text))
        if not isinstance(record, dict):
            return InputError(
                source, f"expected a JSON object, got {type(record).__name__}", location=location
            )
        for name, (expected, required) in fields.items():
            value: Any = record.get(name)
            if value is None:
                if required:
                    return InputError(
                        source, f"required {kind} field is missing or null", location=location, field=name
                    )
                continue
            if name in ("question_id",) and isinstance(value, int) and not isinstance(value, bool):
                continue
            well_typed = not isinstance(value, bool) and isinstance(value, _TYPES[expected])
            if not well_typed:
                return InputError(
                    source,
                    f"must be a {expected}, got {type(value).__name__} {value!r:.40}",
                    location=location,
                    field=name,
                )
            if name == "score" and not (
                math.isfinite(float(value)) and SCORE_MIN <= float(value) <= SCORE_MAX
            ):
                return InputError(source, f"score {value!r} is outside 0..10", location=location, field=name)
            if name == "latency_s" and not float(value) >= 0:
                return InputError(
                    source, "latency_s must be a non-negative number", location=location, field=name
                )
            if name == "usage" and isinstance(value, dict):
                for key in ("prompt_tokens", "completion_tokens"):
                    count = value.get(key)
                    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
                        return InputError(
                            source,
                            f"usage.{key} must be an integer, got {count!r:.40}",
                            location=location,
                            field="usage",
                        )
    return None


def _checked_fields(record_type: type, columns: Mapping[str, pl.DataType]) -> dict[str, tuple[str, bool]]:
    """What the slow path checks of each column read: {name: (JSON type, required)}, from the record."""
    kinds, required = field_types(record_type), required_fields(record_type)
    return {name: (_JSON_TYPES[kinds[name]], name in required) for name in columns}


JUDGMENT_FIELDS = _checked_fields(JudgmentRecord, {**JUDGMENT_SCHEMA, **JUDGMENT_TEXT_SCHEMA})
ANSWER_FIELDS = _checked_fields(AnswerRecord, ANSWER_SCHEMA)


_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {"judgment": JUDGMENT_FIELDS, "answer": ANSWER_FIELDS}


def _read_parquet(source: str, schema: Mapping[str, pl.DataType], kind: str) -> pl.DataFrame:
    """The columns ``schema`` of a Parquet shard, column-wise; a column it lacks is null (a
    required one is refused), one of another type is cast when that loses nothing, else refused."""
    stored = shards.metadata_schema(source, source)
    shards.check_kind(stored, source, kind)
    record_type = shards.RECORD_TYPES[kind]
    present = [name for name in schema if name in stored.names]
    for name in schema:
        if name not in present and name in required_fields(record_type):
            raise InputError(source, f"required {kind} column is missing", field=name)
    try:
        frame = pl.read_parquet(source, columns=present)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(source, f"not a readable Parquet shard: {exc}") from None
    return frame.select(_parquet_column(frame, name, dtype, source) for name, dtype in schema.items())


def _parquet_column(frame: pl.DataFrame, name: str, dtype: pl.DataType, source: str) -> pl.Series:
    if name not in frame.columns:
        return pl.Series(name, [None] * frame.height, dtype=dtype)
    column = frame[name]
    if column.dtype == dtype:
        return column
    numeric = dtype == pl.Float64() and column.dtype.is_numeric()
    identifier = name == "question_id" and column.dtype.is_integer()
    categorical = dtype == pl.String() and isinstance(column.dtype, pl.Categorical | pl.Enum)
    if numeric or identifier or categorical or isinstance(dtype, pl.Struct):
        try:
            return column.cast(dtype, strict=True)
        except pl.exceptions.PolarsError:
            pass
    raise InputError(source, f"column has type {column.dtype}, expected {dtype}", field=name)


def _read_ndjson(
    source: str, schema: Mapping[str, pl.DataType], fields: Mapping[str, tuple[str, bool]], kind: str
) -> pl.DataFrame:
    try:
        with open(source, "rb") as handle:
            bom = handle.read(3) == _BOM
        if bom:  # polars does not skip a byte order mark; benchmarks do, and so do we
            with open(source, "rb") as handle:
                return pl.read_ndjson(io.BytesIO(handle.read()[3:]), schema=dict(schema))
        return pl.scan_ndjson(source, schema=dict(schema)).collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        try:
            problem = _find_bad_line(source, fields, kind)
        except OSError as os_error:
            raise InputError(source, f"cannot read {kind} file: {os_error.strerror or os_error}") from None
        if problem is not None:
            raise problem from None
        raise InputError(source, f"cannot read {kind} file: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Encoding and validation, vectorised over all files at once


@dataclass(frozen=True)
class _Collected:
    frame: pl.DataFrame  # every file's records, in order (chunks are not copied together)
    sources: tuple[str, ...]
    offsets: tuple[int, ...]
    # Key columns not read because every file holds one value of them (Parquet statistics): each
    # file's value. A stage's shard holds one series, and one judge (judgments) or model (answers).
    constants: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def fail(self, record: int, message: str, field: str | None) -> InputError:
        source, location = _location(self.sources, self.offsets, record)
        return InputError(source, message, location=location, field=field)


_CONSTANT_CANDIDATES = ("series", "model", "judge")


def _constant_keys(files: list[str], schema: Mapping[str, pl.DataType]) -> dict[str, tuple[str, ...]]:
    """The key columns that every file — all Parquet — holds one value of, with each file's value."""
    if any(shards.file_kind(source) != "parquet" for source in files):
        return {}
    names = [name for name in _CONSTANT_CANDIDATES if name in schema]
    per_file = [shards.constant_columns(source, names, source) for source in files]
    return {
        name: tuple(found[name] for found in per_file) for name in names if all(name in f for f in per_file)
    }


def _collect(files: list[str], schema: Mapping[str, pl.DataType], kind: str) -> _Collected:
    frames: list[pl.DataFrame] = []
    offsets = [0]
    constants = _constant_keys(files, schema)
    read = {name: dtype for name, dtype in schema.items() if name not in constants}
    for source in files:
        if shards.file_kind(source) == "parquet":
            frame = _read_parquet(source, read, kind)
        else:
            frame = _read_ndjson(source, read, _FIELDS[kind], kind)
        offsets.append(offsets[-1] + frame.height)
        if frame.height:
            frames.append(frame)
    if not frames:
        raise InputError(", ".join(files), f"no {kind} records: the file(s) are empty")
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, rechunk=False)
    return _Collected(frame=frame, sources=tuple(files), offsets=tuple(offsets), constants=constants)


def _first_row(column: pl.Series, value: str | None) -> int:
    hits = column.is_null() if value is None else column == value
    return int(hits.arg_true()[0])


def _encode(
    collected: _Collected, names: Sequence[str], kind: str
) -> dict[str, tuple[tuple[str, ...], Codes]]:
    """Dictionary and codes of each key column, validated through its distinct values (cheap); the
    columns are hashed side by side (polars runs one select's expressions in parallel), and a
    column that each file holds one value of is not hashed at all.

    ``series`` keeps first-appearance order (null → ``"default"``); other dictionaries are sorted.
    """
    out = {name: _encode_constant(collected, name, kind) for name in names if name in collected.constants}
    names = [name for name in names if name not in collected.constants]
    frame = collected.frame
    nulls = frame.select(pl.col(name).null_count() for name in names).row(0) if names else ()
    columns: dict[str, pl.Series] = {}
    for name, count in zip(names, nulls, strict=True):
        column = frame[name]
        if count:
            if name != "series":
                raise collected.fail(
                    _first_row(column, None), f"required {kind} field is missing or null", name
                )
            column = column.fill_null(DEFAULT_SERIES)
        columns[name] = column
    keys = pl.DataFrame(columns)
    uniques = keys.select(pl.col(name).unique(maintain_order=name == "series").implode() for name in names)
    values = {name: _dictionary(collected, keys[name], uniques[name][0].to_list(), kind) for name in names}
    many = [name for name in names if len(values[name]) > 1]
    coded = keys.select(pl.col(name).cast(pl.Enum(values[name])).to_physical() for name in many)
    for name in names:
        if name in many:
            codes = coded[name].to_numpy().astype(np.int32, copy=False)
        else:
            codes = np.zeros(keys.height, dtype=np.int32)
        out[name] = (values[name], codes)
    return out


def _encode_constant(collected: _Collected, name: str, kind: str) -> tuple[tuple[str, ...], Codes]:
    """Dictionary and codes of a key column each file holds one value of: one code per file, repeated."""
    per_file = collected.constants[name]
    if "" in per_file:
        hint = f" (omit the field for '{DEFAULT_SERIES}')" if name == "series" else ""
        raise collected.fail(collected.offsets[per_file.index("")], f"{kind} field is empty{hint}", name)
    distinct = list(dict.fromkeys(per_file))
    values = tuple(distinct) if name == "series" else tuple(sorted(distinct))
    position = {value: code for code, value in enumerate(values)}
    sizes = [end - start for start, end in zip(collected.offsets, collected.offsets[1:], strict=False)]
    codes = np.repeat(np.array([position[v] for v in per_file], dtype=np.int32), sizes)
    return values, codes


def _dictionary(collected: _Collected, column: pl.Series, distinct: list[str], kind: str) -> tuple[str, ...]:
    """The checked dictionary of one key column: sorted, but ``series`` in first-appearance order."""
    name = column.name
    if any(v.startswith(("{", "[")) for v in distinct):
        # polars stores a JSON object or array given for a string field as its text; find the line.
        for source in collected.sources:
            if shards.file_kind(source) == "parquet":
                continue  # a Parquet string column holds strings, whatever they start with
            problem = _find_bad_line(source, _FIELDS[kind], kind)
            if problem is not None:
                raise problem
    if "" in distinct:
        hint = f" (omit the field for '{DEFAULT_SERIES}')" if name == "series" else ""
        raise collected.fail(_first_row(column, ""), f"{kind} field is empty{hint}", name)
    return tuple(distinct) if name == "series" else tuple(sorted(distinct))


def _check_range(
    collected: _Collected, name: str, low: float, high: float | None, message: str
) -> FloatArray:
    """The column as float64 (NaN for null), after checking low <= value (<= high)."""
    column = collected.frame[name]
    bad = (column < low) | column.is_nan()
    if high is not None:
        bad = bad | (column > high)
    bad = bad.fill_null(False)
    if bad.any():
        row = int(bad.arg_true()[0])
        raise collected.fail(row, message.format(value=column[row]), name)
    return column.fill_null(np.nan).to_numpy().astype(np.float64, copy=False)


def _duplicates(keys: list[Codes], sizes: list[int]) -> tuple[int, int] | None:
    """Indices (earlier, later) of two records with the same key, or None: the pair whose later
    record comes first, paired with that key's previous occurrence."""
    n = int(keys[0].shape[0]) if keys else 0
    if n < 2:
        return None
    flat = keys[0].astype(np.int64)
    space = max(sizes[0], 1)
    for key, size in zip(keys[1:], sizes[1:], strict=True):
        flat *= max(size, 1)
        flat += key
        space *= max(size, 1)
    if space <= max(4 * n, 1 << 24):
        seen = np.zeros(space, dtype=np.bool_)
        seen[flat] = True
        if int(np.count_nonzero(seen)) == n:
            return None  # as many distinct keys as records: the common case, one scatter and a count
        del seen
        counts = np.bincount(flat, minlength=space)
        if counts.max(initial=0) <= 1:
            return None
        candidates = np.flatnonzero(counts[flat] > 1)  # the error path from here on
    else:
        candidates = np.arange(n)
    order = candidates[np.argsort(flat[candidates], kind="stable")]
    same = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if same.size == 0:
        return None
    # The pair whose second record comes first in the files (the first repeat a reader meets).
    return min(((int(order[i]), int(order[i + 1])) for i in same), key=lambda pair: pair[1])


def _raise_duplicate(records: KeyedRecords, pair: tuple[int, int], what: str) -> None:
    first_file, first_line = records.location(pair[0])
    second_file, second_line = records.location(pair[1])
    where = f"{first_line}" if first_file == second_file else f"{first_file}, {first_line}"
    raise InputError(
        second_file, f"duplicate {what}: also at {where}; each must appear once", location=second_line
    )


class _KeyedFields(TypedDict):
    """The :class:`KeyedRecords` fields, typed so that a table's constructor checks them."""

    sources: tuple[str, ...]
    offsets: tuple[int, ...]
    series: tuple[str, ...]
    models: tuple[str, ...]
    question_ids: tuple[str, ...]
    series_code: Codes
    model_code: Codes
    question_code: Codes


_KEY_LABELS = {"series": "series", "model": "model", "question_id": "question", "judge": "judge"}


@dataclass(frozen=True)
class _KeyedRead:
    """What judgments and answers share: the records read from every file and their key columns
    (series, model, question_id, then the table's own keys) encoded, in that order."""

    kind: str
    collected: _Collected
    keys: dict[str, tuple[tuple[str, ...], Codes]]

    def keyed_fields(self) -> _KeyedFields:
        """The :class:`KeyedRecords` fields, for the table's constructor."""
        (series, series_code), (models, model_code), (question_ids, question_code) = (
            self.keys[name] for name in ("series", "model", "question_id")
        )
        return {
            "sources": self.collected.sources,
            "offsets": self.collected.offsets,
            "series": series,
            "models": models,
            "question_ids": question_ids,
            "series_code": series_code,
            "model_code": model_code,
            "question_code": question_code,
        }

    def check_unique(self, records: KeyedRecords) -> None:
        """Each key must appear once: an error names both places of the first repeat."""
        pair = _duplicates(
            [codes for _, codes in self.keys.values()], [len(v) for v, _ in self.keys.values()]
        )
        if pair is not None:
            key = ", ".join(
                f"{_KEY_LABELS[name]} {values[int(codes[pair[0]])]!r}"
                for name, (values, codes) in self.keys.items()
            )
            _raise_duplicate(records, pair, f"{self.kind} ({key})")


def _read_keyed(sources: Sources, kind: str, schema: Mapping[str, pl.DataType], *own_keys: str) -> _KeyedRead:
    """Read the ``kind`` (``"judgment"`` or ``"answer"``) files of ``sources`` and encode their keys."""
    collected = _collect(resolve_sources(sources, f"{kind}s"), schema, kind)
    keys = _encode(collected, ("series", "model", "question_id", *own_keys), kind)
    return _KeyedRead(kind, collected, keys)


def load_judgments(sources: Sources, *, text: bool = False) -> Judgments:
    """Read and validate judgment files, Parquet shards or JSONL (see docs/formats.md).

    ``text=True`` also keeps ``rationale`` and ``error`` (costs memory on large runs).
    """
    schema = {**JUDGMENT_SCHEMA, **(JUDGMENT_TEXT_SCHEMA if text else {})}
    return _judgments(_collect(resolve_sources(sources, "judgments"), schema, "judgment"), text=text)


def judgments_from_frames(parts: Sequence[tuple[str, pl.DataFrame]]) -> Judgments:
    """Judgments already read into frames (``kubejury aggregate``'s latest record per key of each
    (series, judge) folder of a run's storage), validated and encoded as :func:`load_judgments`
    does, without a file in between. ``parts``: (name, frame) in order; errors name the part and
    ``record N`` in it. A key column that every part holds one value of is not hashed (as the
    loader does with a shard's statistics)."""
    offsets = [0]
    for _, frame in parts:
        offsets.append(offsets[-1] + frame.height)
    names = tuple(name for name, _ in parts)
    if not offsets[-1]:
        raise InputError(", ".join(names), "no judgment records")
    per_part = [_single_values(frame) for _, frame in parts]
    constants = {
        key: tuple(found[key] for found in per_part)
        for key in _CONSTANT_CANDIDATES
        if key in JUDGMENT_SCHEMA and all(key in found for found in per_part)
    }
    frames = [
        frame.select(
            _parquet_column(frame, column, dtype, name)
            for column, dtype in JUDGMENT_SCHEMA.items()
            if column not in constants
        )
        for name, frame in parts
        if frame.height
    ]
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, rechunk=False)
    return _judgments(
        _Collected(frame=frame, sources=names, offsets=tuple(offsets), constants=constants), text=False
    )


def _single_values(frame: pl.DataFrame) -> dict[str, str]:
    """The string key columns of ``frame`` that hold one value and no null, and that value."""
    names = [
        name for name in _CONSTANT_CANDIDATES if name in frame.columns and frame[name].dtype == pl.String
    ]
    if not frame.height or not names:
        return {}
    counts = frame.select(
        *(pl.col(name).n_unique().alias(f"{name}:n") for name in names),
        *(pl.col(name).null_count().alias(f"{name}:null") for name in names),
        *(pl.col(name).first().alias(name) for name in names),
    ).row(0, named=True)
    return {name: counts[name] for name in names if counts[f"{name}:n"] == 1 and counts[f"{name}:null"] == 0}


def _judgments(collected: _Collected, *, text: bool) -> Judgments:
    """Encode, check and assemble judgments read by :func:`load_judgments` or given as a frame."""
    read = _KeyedRead("judgment", collected, _encode(collected, _JUDGMENT_KEYS, "judgment"))
    judges, judge_code = read.keys["judge"]
    score = _check_range(collected, "score", SCORE_MIN, SCORE_MAX, "score {value!r} is outside 0..10")
    result = Judgments(
        **read.keyed_fields(),
        judges=judges,
        judge_code=judge_code,
        score=score,
        text=collected.frame.select("rationale", "error") if text else None,
    )
    read.check_unique(result)
    return result


_JUDGMENT_KEYS = ("series", "model", "question_id", "judge")


def load_answers(sources: Sources, *, text: bool = False) -> Answers:
    """Read and validate answer files, Parquet shards or JSONL (see docs/formats.md).

    ``text=True`` also keeps the ``answer`` text itself; its length is always kept.
    """
    read = _read_keyed(sources, "answer", ANSWER_SCHEMA)
    collected = read.collected
    _check_range(collected, "latency_s", 0.0, None, "latency_s must be a non-negative number, got {value!r}")
    values = collected.frame.select(
        pl.col("answer").str.len_chars().cast(pl.Float64).alias("answer_chars"),
        pl.col("usage").struct.field("prompt_tokens").alias("prompt_tokens"),
        pl.col("usage").struct.field("completion_tokens").alias("completion_tokens"),
        pl.col("latency_s"),
        pl.col("finish_reason"),
        pl.col("error"),
        *([pl.col("answer")] if text else []),
    )
    result = Answers(**read.keyed_fields(), values=values)
    read.check_unique(result)
    return result


# ---------------------------------------------------------------------------------------------
# Experts (small, written by people: read row by row for exact messages)

EXPERT_COLUMNS: tuple[str, ...] = ("question_id", "model", "expert", "score")


def load_experts(path: str | Path) -> Experts:
    """Read an expert-scores CSV: ``question_id, model, expert, score`` and optional ``series``."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(source, "experts file not found") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            source, f"not valid UTF-8 at byte offset {exc.start}", location=f"line {line}"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [h.strip() for h in next(reader, [])]
    if not header:
        raise InputError(
            source, "experts file is empty: expected a header row with " + ", ".join(EXPERT_COLUMNS)
        )
    for name in EXPERT_COLUMNS:
        if name not in header:
            raise InputError(
                source, "required column is missing from the header", location="line 1", field=name
            )
    rows: dict[str, list[Any]] = {name: [] for name in (*EXPERT_COLUMNS, "series", "line")}
    seen: dict[tuple[str | None, str, str, str], int] = {}
    start = reader.line_num + 1
    for row in reader:
        line = start
        start = reader.line_num + 1
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(
                source,
                f"row has {len(row)} columns but the header has {len(header)}",
                location=f"line {line}",
            )
        record = {name: cell.strip() for name, cell in zip(header, row, strict=True)}
        for name in ("question_id", "model", "expert", "score"):
            if not record[name]:
                raise InputError(source, "required field is empty", location=f"line {line}", field=name)
        try:
            score = expert_score(record["score"])
        except ValueError as exc:
            raise InputError(source, str(exc), location=f"line {line}", field="score") from None
        if not (SCORE_MIN <= score <= SCORE_MAX):
            raise InputError(
                source, f"score {score:g} is outside 0..10", location=f"line {line}", field="score"
            )
        series = record.get("series") or None
        key = (series, record["model"], record["question_id"], record["expert"])
        if key in seen:
            raise InputError(
                source,
                f"duplicate expert score (expert {key[3]!r}, model {key[1]!r}, question {key[2]!r}): also at line {seen[key]}",
                location=f"line {line}",
            )
        seen[key] = line
        for name in ("question_id", "model", "expert"):
            rows[name].append(record[name])
        rows["score"].append(score)
        rows["series"].append(series)
        rows["line"].append(line)
    if not rows["line"]:
        raise InputError(source, "experts file has a header but no rows")
    frame = pl.DataFrame(
        rows,
        schema={
            "question_id": pl.String,
            "model": pl.String,
            "expert": pl.String,
            "score": pl.Float64,
            "series": pl.String,
            "line": pl.Int64,
        },
    )
    return Experts(source=source, frame=frame)


# ---------------------------------------------------------------------------------------------
# Cubes


def _question_lookup(benchmark: Benchmark, records: KeyedRecords, kind: str) -> tuple[list[Any], Codes]:
    """Questions in cube order (level, domain, id) and a map from record question codes to them."""
    ordered = sorted(benchmark.questions, key=lambda q: (q.level, q.domain, q.id))
    position = {q.id: i for i, q in enumerate(ordered)}
    lookup = np.array([position.get(qid, -1) for qid in records.question_ids], dtype=np.int32)
    unknown = np.flatnonzero(lookup < 0)
    if unknown.size:
        code = int(unknown[0])
        record = int(np.flatnonzero(records.question_code == code)[0])
        source, location = records.location(record)
        raise InputError(
            source,
            f"{kind} names question {records.question_ids[code]!r}, which is not in the benchmark {benchmark.source}",
            location=location,
            field="question_id",
        )
    return ordered, lookup


_T = TypeVar("_T", bound=np.generic)


Selector = slice | npt.NDArray[np.bool_]


def _select(values: npt.NDArray[_T], selector: Selector) -> npt.NDArray[_T]:
    return values[selector]


def _series_selectors(codes: Codes, n_series: int) -> list[Selector]:
    """How to pick each series' records: slices (no copy) when records are grouped by series, as
    they are when every file holds one series; boolean masks otherwise."""
    if n_series == 1:
        return [slice(None)]
    if codes.shape[0] and bool(np.all(codes[1:] >= codes[:-1])):
        bounds = np.searchsorted(codes, np.arange(n_series + 1), side="left").tolist()
        return [slice(bounds[k], bounds[k + 1]) for k in range(n_series)]
    return [codes == k for k in range(n_series)]


def build_cubes(
    benchmark: Benchmark, judgments: Judgments, answers: Answers | None = None
) -> dict[str, ScoreCube]:
    """One cube per series (first-appearance order); models and judges sorted by name.

    The questions are all of the benchmark's, ordered by (level, domain, id); a question a model
    was not judged on has ``has_record`` False. Answers, when given, add ``answer_chars``,
    ``completion_tokens`` and ``latency_s`` per (model, question).
    """
    ordered, q_lookup = _question_lookup(benchmark, judgments, "judgment")
    a_lookup = _question_lookup(benchmark, answers, "answer")[1] if answers is not None else None
    domains = tuple(sorted({q.domain for q in ordered}))
    levels = tuple(sorted({q.level for q in ordered}))
    question_domain = np.array([domains.index(q.domain) for q in ordered], dtype=np.int64)
    question_level = np.array([levels.index(q.level) for q in ordered], dtype=np.int64)
    question_ids = tuple(q.id for q in ordered)
    n_q = len(ordered)

    answer_columns: dict[str, FloatArray] = {}
    if answers is not None:
        for name in ("answer_chars", "completion_tokens", "latency_s"):
            column = answers.values[name].cast(pl.Float64).fill_null(np.nan)
            answer_columns[name] = column.to_numpy().astype(np.float64, copy=False)

    cubes: dict[str, ScoreCube] = {}
    selectors = _series_selectors(judgments.series_code, len(judgments.series))
    for s, series in enumerate(judgments.series):
        mask = selectors[s]
        model_codes = _select(judgments.model_code, mask)
        judge_codes = _select(judgments.judge_code, mask)
        present_models = np.flatnonzero(np.bincount(model_codes, minlength=len(judgments.models)))
        present_judges = np.flatnonzero(np.bincount(judge_codes, minlength=len(judgments.judges)))
        models = tuple(sorted(judgments.models[i] for i in present_models))
        judges = tuple(sorted(judgments.judges[i] for i in present_judges))
        model_map = np.full(len(judgments.models), -1, dtype=np.int64)
        model_map[present_models] = [models.index(judgments.models[i]) for i in present_models]
        judge_map = np.full(len(judgments.judges), -1, dtype=np.int64)
        judge_map[present_judges] = [judges.index(judgments.judges[i]) for i in present_judges]
        n_m, n_j = len(models), len(judges)

        mq = model_map[model_codes] * n_q + q_lookup[_select(judgments.question_code, mask)]
        scores = np.full(n_m * n_q * n_j, np.nan)
        scores[mq * n_j + judge_map[judge_codes]] = _select(judgments.score, mask)
        has_record = np.zeros(n_m * n_q, dtype=bool)
        has_record[mq] = True

        extra: dict[str, FloatArray | None] = {
            "answer_chars": None,
            "completion_tokens": None,
            "latency_s": None,
        }
        if answers is not None and a_lookup is not None and series in answers.series:
            a_mask = answers.series_code == answers.series.index(series)
            by_name = {name: i for i, name in enumerate(models)}
            a_model_map = np.array([by_name.get(name, -1) for name in answers.models], dtype=np.int64)
            a_models = a_model_map[answers.model_code[a_mask]]
            keep = a_models >= 0
            flat = a_models[keep] * n_q + a_lookup[answers.question_code[a_mask][keep]]
            for name in extra:
                values = np.full(n_m * n_q, np.nan)
                values[flat] = answer_columns[name][a_mask][keep]
                extra[name] = values.reshape(n_m, n_q)

        cubes[series] = ScoreCube(
            series=series,
            models=models,
            judges=judges,
            question_ids=question_ids,
            domains=domains,
            levels=levels,
            question_domain=question_domain,
            question_level=question_level,
            scores=scores.reshape(n_m, n_q, n_j),
            has_record=has_record.reshape(n_m, n_q),
            answer_chars=extra["answer_chars"],
            completion_tokens=extra["completion_tokens"],
            latency_s=extra["latency_s"],
        )
    return cubes
