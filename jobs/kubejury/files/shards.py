"""Answers and judgments as Parquet shards: the one writer and the one reader of the stages' records.

Why this module exists: a run's records were JSON lines, and reading 10 M judgments back was
parsing 1.7 GB of JSON (issue 26). The stages now write each batch as a Parquet shard
(``part-<seq>-<uuid>.parquet``, zstd): columnar, typed, dictionary-encoded, about 70× smaller than
the JSON on the benchmark's data, and read column by column without parsing anything
(docs/formats.md says why Parquet and not Arrow IPC, with the measurements).

One definition. The shard's Arrow schema is derived here from the typed records of
:mod:`kubejury.records.results` (:func:`arrow_schema`: one column per field, in field order,
required fields not nullable, ``usage`` a struct); the writer (:func:`encode`) and every reader —
the stages' resumption (:func:`rows`), ``kubejury aggregate``'s column-wise read of a run's
judgments (:func:`stage_frame`, :func:`latest_rows`), the columnar loader
(:mod:`kubejury.files.tables`) and ``kubejury export`` — use it. The file's key-value metadata
says which record it holds (``kubejury.record``: ``answer`` or ``judgment``) and its format
(``kubejury.format``, :data:`~kubejury.records.results.RESULTS_FORMAT`), so the records' one
migration (:func:`kubejury.records.results._migrated`) applies to shards as it does to JSON lines.

Older runs. A run made before issue 26 holds JSONL shards; :func:`rows` reads both kinds, shard by
shard in sequence order, so such a run still resumes, aggregates, reports and lends its records to
reuse, and a resumed one simply continues with Parquet shards after its JSONL ones.

Writes are atomic and append-only as before (:meth:`~kubejury.files.storage.Storage.put_shard`).
Bad shards — not Parquet, truncated, a column of the wrong type — raise
:class:`~kubejury.errors.InputError` naming the shard (and the record and field when one is wrong).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from kubejury.errors import InputError
from kubejury.files.storage import Storage, parse_jsonl, shard_seq, shard_suffix
from kubejury.records.results import (
    DEFAULT_SERIES,
    FORMAT_KEY,
    RESULTS_FORMAT,
    AnswerRecord,
    JudgmentRecord,
    RecordFormatError,
    ResultRecord,
    TokenUsage,
    field_types,
    required_fields,
)

SUFFIX = "parquet"
"""The suffix of the shards the stages write."""
KIND_METADATA = b"kubejury.record"
FORMAT_METADATA = b"kubejury.format"
COMPRESSION = "zstd"

#: The record each shard kind holds.
RECORD_TYPES: dict[str, type[ResultRecord]] = {"answer": AnswerRecord, "judgment": JudgmentRecord}
_KINDS: dict[type, str] = {record_type: kind for kind, record_type in RECORD_TYPES.items()}

#: A record field's value type → the Arrow type of its column (a record inside is a struct).
_ARROW_TYPES: dict[type, pa.DataType] = {str: pa.string(), float: pa.float64(), int: pa.int64()}


def record_kind(record_type: type) -> str:
    """``answer`` or ``judgment``: what a shard of ``record_type`` says it holds."""
    if record_type not in _KINDS:
        raise TypeError(f"{record_type.__name__} is not a stored record type")
    return _KINDS[record_type]


def arrow_type(kind: type) -> pa.DataType:
    """The Arrow type of a record field whose values are ``kind`` (see ``field_types``)."""
    if kind is TokenUsage:
        return pa.struct([pa.field(name, arrow_type(value)) for name, value in field_types(kind).items()])
    if kind not in _ARROW_TYPES:
        raise TypeError(f"no Arrow column type for record values of type {kind.__name__}")
    return _ARROW_TYPES[kind]


_SCHEMAS: dict[type, pa.Schema] = {}


def arrow_schema(record_type: type) -> pa.Schema:
    """The shard schema of ``record_type``: every field in order, required ones not nullable, and
    the metadata naming the record kind and format."""
    if record_type not in _SCHEMAS:
        required = set(required_fields(record_type))
        columns = [
            pa.field(name, arrow_type(kind), nullable=name not in required)
            for name, kind in field_types(record_type).items()
        ]
        metadata = {
            KIND_METADATA: record_kind(record_type).encode(),
            FORMAT_METADATA: str(RESULTS_FORMAT).encode(),
        }
        _SCHEMAS[record_type] = pa.schema(columns, metadata=metadata)
    return _SCHEMAS[record_type]


# ----------------------------------------------------------------------------------- writing


def _column(records: Sequence[ResultRecord], name: str) -> list[Any]:
    values = [getattr(record, name) for record in records]
    if values and any(isinstance(v, TokenUsage) for v in values):
        return [v.to_json() if isinstance(v, TokenUsage) else v for v in values]
    return values


def to_table(records: Sequence[ResultRecord]) -> pa.Table:
    """Records of one type as an Arrow table of their shard schema."""
    record_type = type(records[0])
    schema = arrow_schema(record_type)
    for record in records:
        if type(record) is not record_type:
            raise TypeError(
                f"a shard holds one kind of record: {type(record).__name__} among {record_type.__name__}"
            )
    return pa.table({name: _column(records, name) for name in schema.names}, schema=schema)


def encode(records: Sequence[ResultRecord]) -> bytes:
    """One Parquet shard holding ``records`` (all of one type, at least one)."""
    if not records:
        raise ValueError("no records: a shard is never empty")
    sink = io.BytesIO()
    pq.write_table(to_table(records), sink, compression=COMPRESSION)
    return sink.getvalue()


def write_records(
    storage: Storage, prefix: str, records: Sequence[ResultRecord], *, seq: int | None = None
) -> str | None:
    """Write ``records`` as one new immutable Parquet shard under the folder ``prefix`` (see
    :meth:`~kubejury.files.storage.Storage.put_shard`); ``None`` when there are no records."""
    if not records:
        return None
    return storage.put_shard(prefix, encode(records), suffix=SUFFIX, seq=seq)


def write_file(path: str | Path, records: Sequence[ResultRecord]) -> None:
    """Write ``records`` as one Parquet file at ``path`` (a scratch file for the aggregation)."""
    pq.write_table(to_table(records), str(path), compression=COMPRESSION)


# ----------------------------------------------------------------------------------- reading


def read_table(data: bytes | str, source: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A Parquet shard (its bytes, or a file path) as an Arrow table; anything that is not one
    raises :class:`InputError` naming ``source``."""
    try:
        handle = pq.ParquetFile(io.BytesIO(data) if isinstance(data, bytes) else data)
        return handle.read(columns=list(columns) if columns is not None else None)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(source, f"not a readable Parquet shard: {exc}") from None


def shard_format(table: pa.Table, source: str) -> int:
    """The record format a shard's metadata states (format 2 when it states none)."""
    metadata = table.schema.metadata or {}
    raw = metadata.get(FORMAT_METADATA)
    if raw is None:
        return RESULTS_FORMAT
    try:
        return int(raw)
    except ValueError:
        raise InputError(
            source, f"shard metadata {FORMAT_METADATA.decode()} is {raw!r:.40}, not a number"
        ) from None


def table_rows(table: pa.Table, source: str) -> Iterator[dict[str, Any]]:
    """The records of a shard as mappings in the records' JSON form, with the shard's format."""
    version = shard_format(table, source)
    for row in table.to_pylist():
        row[FORMAT_KEY] = version
        yield row


MAX_RELISTS = 10
"""How often a reader lists a folder again when shards it listed vanished (compactions under way)."""


def shard_data(storage: Storage, prefix: str) -> Iterator[tuple[str, bytes]]:
    """(key, bytes) of every shard under ``prefix``, in sequence order, safe against a concurrent
    :func:`compact`: a shard listed and then deleted was merged into a compacted shard written
    before the deletion, so the folder is listed again and the shards not read yet are read (the
    compacted one among them; its records repeat ones already read, which every reader's
    latest-per-key keeps once). Nothing stored is ever missed."""
    seen: set[str] = set()
    for _ in range(MAX_RELISTS):
        vanished = False
        for key in storage.shard_keys(prefix):
            if key in seen:
                continue
            try:
                data = storage.read_bytes(key)
            except FileNotFoundError:
                vanished = True
                break
            seen.add(key)
            yield key, data
        if not vanished:
            return
    raise InputError(
        storage.uri_for(prefix), f"shards vanished while being read, {MAX_RELISTS} listings in a row"
    )


def rows(storage: Storage, prefix: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(shard URI, record number from 1, record) of every shard under ``prefix``, Parquet and
    JSONL alike, in sequence order: the mappings the records' ``from_json`` reads."""
    for key, data in shard_data(storage, prefix):
        source = storage.uri_for(key)
        records = (
            parse_jsonl(data, source)
            if shard_suffix(key) == "jsonl"
            else table_rows(read_table(data, source), source)
        )
        for number, record in enumerate(records, start=1):
            yield source, number, record


def read_rows(storage: Storage, prefix: str) -> list[dict[str, Any]]:
    """Every stored record under ``prefix`` as a mapping (both shard kinds), in shard order."""
    return [record for _, _, record in rows(storage, prefix)]


def file_kind(path: str) -> str:
    """``parquet`` or ``jsonl``: how a records file given on the command line is read."""
    return "parquet" if path.endswith((".parquet", ".pq")) else "jsonl"


def stated_kind(table_or_schema: pa.Table | pa.Schema) -> str | None:
    """The record kind a shard's metadata states, if any."""
    schema = table_or_schema.schema if isinstance(table_or_schema, pa.Table) else table_or_schema
    raw = (schema.metadata or {}).get(KIND_METADATA)
    return raw.decode() if raw is not None else None


def check_kind(schema: pa.Schema, source: str, expected: str) -> None:
    """Refuse a shard that states it holds the other kind of record (judgments given as answers)."""
    stated = stated_kind(schema)
    if stated is not None and stated != expected:
        raise InputError(source, f"this shard holds {stated} records, not {expected} records")


def metadata_schema(path: str, source: str) -> pa.Schema:
    """The Arrow schema of a Parquet file, read from its footer only."""
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(source, f"not a readable Parquet shard: {exc}") from None


def conform(table: pa.Table, record_type: type, columns: Sequence[str] | None = None) -> pa.Table:
    """``table`` with the shard schema of ``record_type`` (only its ``columns`` when given): its
    columns cast to the fields' types, in field order, and the fields it lacks as nulls (for tools
    that write shards from a frame)."""
    schema = arrow_schema(record_type)
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns], metadata=schema.metadata)
    columns = [
        table[field.name].cast(field.type)
        if field.name in table.column_names
        else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def constant_columns(path: str, names: Sequence[str], source: str) -> dict[str, str]:
    """The string columns among ``names`` that hold one value in every record of the Parquet file
    at ``path``, and that value — known from the footer's statistics alone (every row group's
    minimum equals its maximum, no nulls), so such a column need not be read. A stage's shard
    holds one series, and one model (answers) or one judge (judgments)."""
    try:
        metadata = pq.read_metadata(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(source, f"not a readable Parquet shard: {exc}") from None
    if metadata.num_row_groups == 0 or metadata.num_rows == 0:
        return {}
    positions = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    out: dict[str, str] = {}
    for name in names:
        if name not in positions:
            continue
        values: set[object] = set()
        for group in range(metadata.num_row_groups):
            column = metadata.row_group(group).column(positions[name])
            stats = column.statistics
            exact = (
                stats is not None
                and getattr(stats, "is_min_exact", True)
                and getattr(stats, "is_max_exact", True)
            )
            if not (exact and stats.has_min_max and stats.null_count == 0 and stats.min == stats.max):
                break
            values.add(stats.min)
        else:
            if len(values) == 1 and isinstance(value := values.pop(), str):
                out[name] = value
    return out


# ------------------------------------------------------------------ a stage's records, columnar


AGGREGATION_COLUMNS = (
    "question_id",
    "model",
    "series",
    "judge",
    "score",
    "error",
    "error_kind",
    "fingerprint",
)
"""The judgment columns ``kubejury aggregate`` reads: the keys and score it scores, ``error`` and
``error_kind`` for the latest final record per key, ``fingerprint`` for the stale-records check —
not the rationale, most of a shard's bytes."""


def stage_table(
    storage: Storage,
    prefix: str,
    record_type: type[ResultRecord],
    columns: Sequence[str] | None = None,
) -> pa.Table | None:
    """Every record under ``prefix`` (shard order) as one table of ``record_type``'s shard schema —
    only its ``columns`` when given, the others not read — read column-wise from Parquet shards (an
    older run's JSONL shards through the typed reader); ``None`` when there is none. A shard that
    does not read, or whose columns do not fit the schema, raises :class:`InputError` naming it (a
    JSONL one also the record and field)."""
    tables = []
    for key, data in shard_data(storage, prefix):
        source = storage.uri_for(key)
        if shard_suffix(key) == "jsonl":
            records = stage_table_of_jsonl(data, source, record_type, columns)
            if records is not None:
                tables.append(records)
            continue
        table = _read_columns(data, source, columns)
        check_kind(table.schema, source, record_kind(record_type))
        try:
            tables.append(conform(table, record_type, columns))
        except (pa.ArrowException, ValueError) as exc:
            raise InputError(
                source, f"columns do not fit the {record_kind(record_type)} schema: {exc}"
            ) from None
    return pa.concat_tables(tables) if tables else None


def stage_frame(
    storage: Storage, prefix: str, record_type: type[ResultRecord], columns: Sequence[str]
) -> pl.DataFrame | None:
    """The ``columns`` of every record under ``prefix`` (shard order) as one polars frame of the
    shard schema's types — what :func:`stage_table` reads, through polars' Parquet reader (several
    times faster than Arrow's on these shards, and no conversion after); ``None`` when there is
    none. The same shards are refused, naming them."""
    types = _polars_types(record_type)
    frames = []
    for key, data in shard_data(storage, prefix):
        source = storage.uri_for(key)
        if shard_suffix(key) == "jsonl":
            table = stage_table_of_jsonl(data, source, record_type, columns)
            if table is not None:
                frames.append(_frame(table))
            continue
        try:
            stored = pq.read_schema(io.BytesIO(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise InputError(source, f"not a readable Parquet shard: {exc}") from None
        check_kind(stored, source, record_kind(record_type))
        present = [name for name in columns if name in stored.names]
        try:
            frame = pl.read_parquet(io.BytesIO(data), columns=present)
            frames.append(
                frame.select(
                    pl.col(name).cast(types[name], strict=True)
                    if name in present
                    else pl.lit(None, types[name]).alias(name)
                    for name in columns
                )
            )
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(
                source, f"columns do not fit the {record_kind(record_type)} schema: {exc}"
            ) from None
    return pl.concat(frames, rechunk=False) if frames else None


def stage_table_of_jsonl(
    data: bytes, source: str, record_type: type[ResultRecord], columns: Sequence[str] | None
) -> pa.Table | None:
    """The records of an older run's JSONL shard through the typed reader (errors name the record
    and field), as a table of the shard schema (its ``columns`` when given)."""
    records = [_typed(record_type, row, source, n) for n, row in enumerate(parse_jsonl(data, source), 1)]
    return conform(to_table(records), record_type, columns) if records else None


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _polars_types(record_type: type) -> dict[str, pl.DataType]:
    """The polars type of each shard column of ``record_type`` (as polars reads the shard)."""
    return dict(_frame(arrow_schema(record_type).empty_table()).schema)


def _read_columns(data: bytes, source: str, columns: Sequence[str] | None) -> pa.Table:
    """The ``columns`` a shard has (all when ``None``), with the shard's metadata."""
    if columns is None:
        return read_table(data, source)
    try:
        names = set(pq.read_schema(io.BytesIO(data)).names)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(source, f"not a readable Parquet shard: {exc}") from None
    return read_table(data, source, [name for name in columns if name in names])


def _typed(record_type: type[ResultRecord], row: dict[str, Any], source: str, number: int) -> ResultRecord:
    try:
        return record_type.from_json(row)
    except RecordFormatError as exc:
        raise InputError(source, str(exc), location=f"record {number}") from None


def latest_rows(table: pa.Table | pl.DataFrame, key: Sequence[str]) -> pl.DataFrame:
    """One row per ``key``: the latest final record, else the latest — what
    :func:`kubejury.stages.runner.latest_by_key` keeps, column-wise, in the storage order of the rows
    kept (not of each key's first record, as there). When the keys' hashes are all distinct, every
    key is once (a compacted folder without retries, the common case) and the rows are kept as
    they are; equal hashes (a repeated key, or a collision) take the full selection."""
    final = pl.col("error").is_null() | (pl.col("error_kind") == "parse").fill_null(False)
    frame = table if isinstance(table, pl.DataFrame) else _frame(table)
    if frame.select(pl.struct(*key).hash().n_unique()).item() == frame.height:
        return frame
    return (
        frame.with_row_index("_row")
        .sort(final, "_row")
        .unique(subset=list(key), keep="last", maintain_order=True)
        .sort("_row")
        .drop("_row")
    )


def write_frame(path: str | Path, frame: pl.DataFrame, record_type: type[ResultRecord]) -> None:
    """Write ``frame`` (columns of ``record_type``) as one Parquet file of its shard schema."""
    pq.write_table(conform(frame.to_arrow(), record_type), str(path), compression=COMPRESSION)


def fingerprint_witnesses(frame: pl.DataFrame) -> list[JudgmentRecord]:
    """One judgment per distinct (series, judge, fingerprint) of ``frame``: all a fingerprint check
    (:func:`kubejury.provenance.stale_records`) reads of judgments, without a record per row."""
    distinct = frame.select("series", "judge", "fingerprint").unique(maintain_order=True)
    return [
        JudgmentRecord(
            question_id="*", model="*", series=series or DEFAULT_SERIES, judge=judge, fingerprint=digest
        )
        for series, judge, digest in distinct.iter_rows()
    ]


# ------------------------------------------------------------------------------------ compaction

COMPACTED_METADATA = b"kubejury.compacted"
"""Metadata of a compacted shard: the file names of every shard whose records it holds (one a line)."""
ROW_GROUP_ROWS = 128 * 1024
"""Records per row group of a compacted shard (a stage's shards are one small row group each)."""


@dataclass(frozen=True)
class Compaction:
    """What one :func:`compact` did: the compacted shard written (``None``: nothing to merge) and
    the shards deleted (merged now, or by an earlier compaction that stopped before deleting)."""

    written: str | None
    deleted: tuple[str, ...]
    records: int = 0


def merged_names(data: bytes) -> set[str]:
    """The shard file names a compacted shard says it holds (empty for a stage's own shard)."""
    try:
        metadata = pq.read_schema(io.BytesIO(data)).metadata or {}
    except (pa.ArrowException, OSError, ValueError):
        return set()
    raw = metadata.get(COMPACTED_METADATA)
    return set(raw.decode().split("\n")) - {""} if raw else set()


def _name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def compact(storage: Storage, prefix: str) -> Compaction:
    """Merge the Parquet shards under ``prefix`` into one, then delete them: called when a stage's
    work for its (model or judge, series) is complete.

    Safe for concurrent readers and for resumption, on disk and on S3, because nothing is ever
    rewritten in place:

    1. the merged shard is written (atomically, as every shard) with a sequence number after every
       shard there, holding their records in storage order, and naming them in its metadata;
    2. only then are those shards deleted.

    A reader that lists between 1 and 2 sees every record twice, which latest-per-key already
    resolves; one that lists before 1 and reads after 2 finds a shard gone and lists again
    (:func:`shard_data`). A crash between 1 and 2 leaves shards the merged one names: the next
    compaction deletes them without merging them again. A stage resumed afterwards writes after the
    merged shard. JSONL shards (runs made before issue 26) and shards of another record format are
    left as they are; a shard that vanishes meanwhile (another compaction) stops this one unchanged.
    """
    keys = storage.shard_keys(prefix)
    loaded: list[tuple[str, bytes]] = []
    for key in keys:
        if shard_suffix(key) != SUFFIX:
            continue
        try:
            loaded.append((key, storage.read_bytes(key)))
        except FileNotFoundError:
            return Compaction(None, ())
    covered: set[str] = set()
    for _, data in loaded:
        covered |= merged_names(data)
    stale = tuple(key for key, _ in loaded if _name(key) in covered)
    live = [(key, data) for key, data in loaded if _name(key) not in covered]
    if len(live) <= 1:
        storage.delete_keys(stale)
        return Compaction(None, stale)
    merged, records = _merge(live, covered | {_name(key) for key, _ in live}, storage)
    if merged is None:
        return Compaction(None, ())
    seq = max(shard_seq(key) for key in keys) + 1
    written = storage.put_shard(prefix, merged, suffix=SUFFIX, seq=seq)
    deleted = (*stale, *(key for key, _ in live))
    storage.delete_keys(deleted)
    return Compaction(written, deleted, records)


def _merge(live: list[tuple[str, bytes]], names: set[str], storage: Storage) -> tuple[bytes | None, int]:
    """One Parquet file of the records of ``live`` (in order) in row groups of
    :data:`ROW_GROUP_ROWS`, naming ``names``; ``None`` when the shards are not all of one record
    type and of this format (they are then left as they are)."""
    first = read_table(live[0][1], storage.uri_for(live[0][0]))
    kind = stated_kind(first)
    if kind not in RECORD_TYPES:
        return None, 0
    record_type = RECORD_TYPES[kind]
    schema = arrow_schema(record_type)
    metadata = {**(schema.metadata or {}), COMPACTED_METADATA: "\n".join(sorted(names)).encode()}
    sink = io.BytesIO()
    pending: list[pa.Table] = []
    count = held = 0
    with pq.ParquetWriter(sink, schema.with_metadata(metadata), compression=COMPRESSION) as writer:
        for key, data in live:
            source = storage.uri_for(key)
            table = first if key == live[0][0] else read_table(data, source)
            if stated_kind(table) != kind or shard_format(table, source) != RESULTS_FORMAT:
                return None, 0
            pending.append(conform(table, record_type))
            held += table.num_rows
            if held >= ROW_GROUP_ROWS:
                writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
                count, pending, held = count + held, [], 0
        if pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
            count += held
    return sink.getvalue(), count
