"""Judgment, answer and expert records: from files to dense :class:`~kubejury.cube.ScoreCube` s.

Judgments are the large input (millions of records), so they are read with polars' columnar
NDJSON reader and turned into integer codes at once; no Python code runs per record on the
happy path. Validation is vectorised too. Only when something is wrong does the slow path run:
the file is re-read line by line to name the exact line and field in the error (docs/formats.md
describes the formats and every error).

``sources`` everywhere is a file, a directory (all its ``*.jsonl`` files, sorted by name), a glob
pattern, or a list of those.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from kubejury.benchmark import Benchmark
from kubejury.cube import FloatArray, ScoreCube
from kubejury.errors import InputError

Codes = npt.NDArray[np.int32]
Sources = str | Path | Sequence[str | Path]

DEFAULT_SERIES = "default"
SCORE_MIN, SCORE_MAX = 0.0, 10.0

JUDGMENT_SCHEMA: dict[str, pl.DataType] = {
    "question_id": pl.String(),
    "model": pl.String(),
    "series": pl.String(),
    "judge": pl.String(),
    "score": pl.Float64(),
}
JUDGMENT_TEXT_SCHEMA: dict[str, pl.DataType] = {"rationale": pl.String(), "error": pl.String()}
ANSWER_SCHEMA: dict[str, pl.DataType] = {
    "question_id": pl.String(),
    "model": pl.String(),
    "series": pl.String(),
    "answer": pl.String(),
    "finish_reason": pl.String(),
    "usage": pl.Struct({"prompt_tokens": pl.Int64(), "completion_tokens": pl.Int64()}),
    "latency_s": pl.Float64(),
    "error": pl.String(),
}


# ---------------------------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class KeyedRecords:
    """Records as integer codes into small dictionaries, plus where each record came from.

    ``series``, ``models`` and ``question_ids`` list the distinct values in order of first
    appearance; ``*_code`` arrays index them. ``source_index`` indexes ``sources`` and ``row`` is
    the record's 0-based position among the non-blank lines of its file (see :meth:`location`).
    """

    sources: tuple[str, ...]
    series: tuple[str, ...]
    models: tuple[str, ...]
    question_ids: tuple[str, ...]
    series_code: Codes
    model_code: Codes
    question_code: Codes
    source_index: Codes
    row: Codes

    def __len__(self) -> int:
        return int(self.row.shape[0])

    def location(self, record: int) -> tuple[str, str]:
        """(file, ``"line N"``) of record number ``record`` — reads the file; for error messages."""
        source = self.sources[int(self.source_index[record])]
        return source, f"line {_line_number(source, int(self.row[record]))}"


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
            found = sorted(str(p) for p in path.glob("*.jsonl"))
            if not found:
                raise InputError(text, f"directory has no *.jsonl {kind} files")
            files.extend(found)
        elif any(ch in text for ch in "*?["):
            found = sorted(glob.glob(text, recursive=True))
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


_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "number": (int, float), "object": (dict,)}


def _find_bad_line(source: str, fields: Mapping[str, tuple[str, bool]], kind: str) -> InputError | None:
    """Check a JSONL file line by line against ``fields`` = {name: (type, required)}."""
    for number, raw in _nonblank_lines(source):
        location = f"line {number}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return InputError(source, f"not valid UTF-8 at byte {exc.start} of the line", location=location)
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            return InputError(source, f"invalid JSON: {exc.msg} (column {exc.colno})", location=location)
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


JUDGMENT_FIELDS: dict[str, tuple[str, bool]] = {
    "question_id": ("string", True),
    "model": ("string", True),
    "series": ("string", False),
    "judge": ("string", True),
    "score": ("number", False),
    "rationale": ("string", False),
    "error": ("string", False),
}
ANSWER_FIELDS: dict[str, tuple[str, bool]] = {
    "question_id": ("string", True),
    "model": ("string", True),
    "series": ("string", False),
    "answer": ("string", False),
    "finish_reason": ("string", False),
    "usage": ("object", False),
    "latency_s": ("number", False),
    "error": ("string", False),
}


_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {"judgment": JUDGMENT_FIELDS, "answer": ANSWER_FIELDS}


def _read_ndjson(
    source: str, schema: Mapping[str, pl.DataType], fields: Mapping[str, tuple[str, bool]], kind: str
) -> pl.DataFrame:
    try:
        return pl.scan_ndjson(source, schema=dict(schema)).collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        problem = _find_bad_line(source, fields, kind)
        if problem is not None:
            raise problem from None
        raise InputError(source, f"cannot read {kind} file: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Encoding


class _Dictionary:
    """Distinct strings in order of first appearance, and their codes."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.index: dict[str, int] = {}

    def encode(self, column: pl.Series, distinct: Sequence[str]) -> Codes:
        for value in distinct:
            if value not in self.index:
                self.index[value] = len(self.values)
                self.values.append(value)
        codes = column.cast(pl.Enum(self.values)).to_physical().cast(pl.Int32)
        return codes.to_numpy().astype(np.int32, copy=False)


def _first_row(column: pl.Series, value: str | None) -> int:
    hits = column.is_null() if value is None else column == value
    return int(hits.arg_true()[0])


def _encode_column(
    frame: pl.DataFrame, name: str, dictionary: _Dictionary, required: bool, source: str, kind: str
) -> Codes:
    """Codes of one key column; null / empty values are found from its distinct values (cheap)."""
    column = frame[name]
    distinct = column.unique(maintain_order=True).to_list()
    if None in distinct:
        if required:
            row = _first_row(column, None)
            raise InputError(
                source,
                f"required {kind} field is missing or null",
                location=f"line {_line_number(source, row)}",
                field=name,
            )
        column = column.fill_null(DEFAULT_SERIES)
        distinct = [DEFAULT_SERIES if v is None else v for v in distinct]
    if any(v.startswith(("{", "[")) for v in distinct):
        # polars stores a JSON object or array given for a string field as its text; find the line.
        problem = _find_bad_line(source, _FIELDS[kind], kind)
        if problem is not None:
            raise problem
    if "" in distinct:
        row = _first_row(column, "")
        hint = f" (omit the field for '{DEFAULT_SERIES}')" if name == "series" else ""
        raise InputError(
            source,
            f"{kind} field is empty{hint}",
            location=f"line {_line_number(source, row)}",
            field=name,
        )
    return dictionary.encode(column, distinct)


def _duplicates(keys: list[Codes], sizes: list[int]) -> tuple[int, int] | None:
    """Indices (first, second) of a pair of records with equal keys, or None."""
    n = int(keys[0].shape[0]) if keys else 0
    if n < 2:
        return None
    flat = np.zeros(n, dtype=np.int64)
    space = 1
    for key, size in zip(keys, sizes, strict=True):
        flat = flat * max(size, 1) + key
        space *= max(size, 1)
    if space <= max(4 * n, 1 << 24):
        counts = np.bincount(flat, minlength=space)
        if counts.max(initial=0) <= 1:
            return None
        bad = np.flatnonzero(counts[flat] > 1)
        first = int(bad[0])
        second = int(bad[1:][flat[bad[1:]] == flat[first]][0])
        return first, second
    order = np.argsort(flat, kind="stable")
    same = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if same.size == 0:
        return None
    pairs = sorted((int(order[i]), int(order[i + 1])) for i in same)
    return pairs[0]


@dataclass
class _Collected:
    series: _Dictionary
    models: _Dictionary
    questions: _Dictionary
    codes: dict[str, list[Codes]]
    sources: list[str]


def _collect(
    files: list[str],
    schema: Mapping[str, pl.DataType],
    fields: Mapping[str, tuple[str, bool]],
    required: Sequence[str],
    kind: str,
    extra_keys: Mapping[str, _Dictionary],
) -> tuple[_Collected, list[pl.DataFrame]]:
    collected = _Collected(_Dictionary(), _Dictionary(), _Dictionary(), {}, files)
    frames: list[pl.DataFrame] = []
    dictionaries = {
        "series": collected.series,
        "model": collected.models,
        "question_id": collected.questions,
        **extra_keys,
    }
    for index, source in enumerate(files):
        frame = _read_ndjson(source, schema, fields, kind)
        if frame.height == 0:
            continue
        for name, dictionary in dictionaries.items():
            codes = _encode_column(frame, name, dictionary, name in required, source, kind)
            collected.codes.setdefault(name, []).append(codes)
        collected.codes.setdefault("source_index", []).append(np.full(frame.height, index, dtype=np.int32))
        collected.codes.setdefault("row", []).append(np.arange(frame.height, dtype=np.int32))
        frames.append(frame.drop(list(dictionaries)))
    if not frames:
        raise InputError(", ".join(files), f"no {kind} records: the file(s) are empty")
    return collected, frames


def _concat(parts: list[Codes]) -> Codes:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _raise_duplicate(records: KeyedRecords, pair: tuple[int, int], what: str) -> None:
    first_file, first_line = records.location(pair[0])
    second_file, second_line = records.location(pair[1])
    where = f"{first_line}" if first_file == second_file else f"{first_file}, {first_line}"
    raise InputError(
        second_file,
        f"duplicate {what}: also at {where}; each must appear once",
        location=second_line,
    )


def load_judgments(sources: Sources, *, text: bool = False) -> Judgments:
    """Read and validate judgment JSONL files (see docs/formats.md).

    ``text=True`` also keeps ``rationale`` and ``error`` (costs memory on large runs).
    """
    files = resolve_sources(sources, "judgments")
    schema = {**JUDGMENT_SCHEMA, **(JUDGMENT_TEXT_SCHEMA if text else {})}
    judges = _Dictionary()
    collected, frames = _collect(
        files, schema, JUDGMENT_FIELDS, ("question_id", "model", "judge"), "judgment", {"judge": judges}
    )
    scores: list[FloatArray] = []
    for index, frame in enumerate(frames):
        score = frame["score"]
        bad = ((score < SCORE_MIN) | (score > SCORE_MAX) | score.is_nan()).fill_null(False)
        if bad.any():
            row = int(bad.arg_true()[0])
            source = files[int(collected.codes["source_index"][index][0])]
            raise InputError(
                source,
                f"score {score[row]!r} is outside 0..10",
                location=f"line {_line_number(source, row)}",
                field="score",
            )
        scores.append(score.fill_null(np.nan).to_numpy().astype(np.float64, copy=False))
    codes = {name: _concat(parts) for name, parts in collected.codes.items()}
    result = Judgments(
        sources=tuple(files),
        series=tuple(collected.series.values),
        models=tuple(collected.models.values),
        question_ids=tuple(collected.questions.values),
        series_code=codes["series"],
        model_code=codes["model"],
        question_code=codes["question_id"],
        source_index=codes["source_index"],
        row=codes["row"],
        judges=tuple(judges.values),
        judge_code=codes["judge"],
        score=scores[0] if len(scores) == 1 else np.concatenate(scores),
        text=pl.concat([f.select("rationale", "error") for f in frames]) if text else None,
    )
    pair = _duplicates(
        [result.series_code, result.model_code, result.question_code, result.judge_code],
        [len(result.series), len(result.models), len(result.question_ids), len(result.judges)],
    )
    if pair is not None:
        s, m, q, j = (
            int(a[pair[0]])
            for a in (result.series_code, result.model_code, result.question_code, result.judge_code)
        )
        _raise_duplicate(
            result,
            pair,
            f"judgment (series {result.series[s]!r}, model {result.models[m]!r}, question {result.question_ids[q]!r}, "
            f"judge {result.judges[j]!r})",
        )
    return result


def load_answers(sources: Sources, *, text: bool = False) -> Answers:
    """Read and validate answer JSONL files (see docs/formats.md).

    ``text=True`` also keeps the ``answer`` text itself; its length is always kept.
    """
    files = resolve_sources(sources, "answers")
    collected, frames = _collect(files, ANSWER_SCHEMA, ANSWER_FIELDS, ("question_id", "model"), "answer", {})
    values = pl.concat(
        [
            f.select(
                pl.col("answer").str.len_chars().cast(pl.Float64).alias("answer_chars"),
                pl.col("usage").struct.field("prompt_tokens").alias("prompt_tokens"),
                pl.col("usage").struct.field("completion_tokens").alias("completion_tokens"),
                pl.col("latency_s"),
                pl.col("finish_reason"),
                pl.col("error"),
                *([pl.col("answer")] if text else []),
            )
            for f in frames
        ]
    )
    for index, frame in enumerate(frames):
        latency = frame["latency_s"]
        bad = ((latency < 0) | latency.is_nan()).fill_null(False)
        if bad.any():
            row = int(bad.arg_true()[0])
            source = files[int(collected.codes["source_index"][index][0])]
            raise InputError(
                source,
                "latency_s must be a non-negative number",
                location=f"line {_line_number(source, row)}",
                field="latency_s",
            )
    codes = {name: _concat(parts) for name, parts in collected.codes.items()}
    result = Answers(
        sources=tuple(files),
        series=tuple(collected.series.values),
        models=tuple(collected.models.values),
        question_ids=tuple(collected.questions.values),
        series_code=codes["series"],
        model_code=codes["model"],
        question_code=codes["question_id"],
        source_index=codes["source_index"],
        row=codes["row"],
        values=values,
    )
    pair = _duplicates(
        [result.series_code, result.model_code, result.question_code],
        [len(result.series), len(result.models), len(result.question_ids)],
    )
    if pair is not None:
        s, m, q = (int(a[pair[0]]) for a in (result.series_code, result.model_code, result.question_code))
        _raise_duplicate(
            result,
            pair,
            f"answer (series {result.series[s]!r}, model {result.models[m]!r}, question {result.question_ids[q]!r})",
        )
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
            score = float(record["score"])
        except ValueError:
            raise InputError(
                source,
                f"score must be a number, got {record['score']!r}",
                location=f"line {line}",
                field="score",
            ) from None
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


def _select(values: npt.NDArray[_T], mask: npt.NDArray[np.bool_] | None) -> npt.NDArray[_T]:
    return values if mask is None else values[mask]


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

    cubes: dict[str, ScoreCube] = {}
    for s, series in enumerate(judgments.series):
        mask = judgments.series_code == s if len(judgments.series) > 1 else None
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
                column = answers.values[name].cast(pl.Float64).fill_null(np.nan).to_numpy()[a_mask][keep]
                values = np.full(n_m * n_q, np.nan)
                values[flat] = column
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
