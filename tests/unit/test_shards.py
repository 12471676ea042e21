"""Parquet shards (issue 26): one schema from the typed records, atomic append-only writes, resumption,
clear errors for shards that do not read, and the JSONL shards of runs made before them."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from factories import build_evalrun_yaml, model_entry, store_finished_run
from kubejury.cli import main
from kubejury.errors import InputError
from kubejury.files import shards
from kubejury.files.storage import LocalStorage, RunLayout, StorageError
from kubejury.files.tables import load_answers, load_judgments
from kubejury.records.results import (
    RESULTS_FORMAT,
    AnswerRecord,
    JudgmentRecord,
    TokenUsage,
    field_types,
    required_fields,
)
from kubejury.stages.judge import read_judgments
from kubejury.stages.runner import read_existing, read_records

PREFIX = "run/primary/judgments/j"


def judgment(qid: str, model: str = "m", score: float | None = 7.0, **fields: Any) -> JudgmentRecord:
    return JudgmentRecord(question_id=qid, model=model, series="primary", judge="j", score=score, **fields)


def answer(qid: str, **fields: Any) -> AnswerRecord:
    return AnswerRecord(question_id=qid, model="m", series="primary", **fields)


def shard_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# ------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize("record_type", [AnswerRecord, JudgmentRecord])
def test_the_shard_schema_is_the_typed_record_s_fields_in_order(record_type: type) -> None:
    schema = shards.arrow_schema(record_type)
    assert schema.names == [f.name for f in dataclasses.fields(record_type)]
    kinds = field_types(record_type)
    for column in schema:
        expected = {str: pa.string(), float: pa.float64(), int: pa.int64()}.get(kinds[column.name])
        if kinds[column.name] is TokenUsage:
            assert column.type == pa.struct(
                [("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64())]
            )
        else:
            assert column.type == expected
        assert column.nullable == (column.name not in required_fields(record_type))
    metadata = schema.metadata
    assert metadata[b"kubejury.record"] == shards.record_kind(record_type).encode()
    assert metadata[b"kubejury.format"] == str(RESULTS_FORMAT).encode()


def test_records_round_trip_through_a_shard_with_every_field() -> None:
    records = [
        answer(
            "q1",
            answer="Ответ",
            finish_reason="stop",
            usage=TokenUsage(12, 34),
            latency_s=1.5,
            attempts=2,
            server_version="b1",
            fingerprint="f" * 16,
            question_sha256="a" * 64,
            reused_from="board",
        ),
        answer("q2", error="HTTP 500", error_kind="http", usage=TokenUsage(None, 3)),
    ]
    table = shards.read_table(shards.encode(records), "mem")
    assert [AnswerRecord.from_json(row) for row in shards.table_rows(table, "mem")] == records


def test_a_shard_holds_one_kind_of_record_and_is_never_empty() -> None:
    with pytest.raises(TypeError, match="one kind of record"):
        shards.encode([answer("q1"), judgment("q1")])
    with pytest.raises(ValueError, match="never empty"):
        shards.encode([])


# ----------------------------------------------------------------------- writes and resumption


def test_stages_shards_are_parquet_named_by_sequence_and_read_back_in_order(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    first = shards.write_records(store, PREFIX, [judgment("q1"), judgment("q2")])
    second = shards.write_records(
        store, PREFIX, [judgment("q3", score=None, error="no score", error_kind="parse")]
    )
    assert shards.write_records(store, PREFIX, []) is None
    assert first is not None and second is not None
    assert first.rsplit("/", 1)[1].startswith("part-000000-") and first.endswith(".parquet")
    assert second.rsplit("/", 1)[1].startswith("part-000001-")
    assert [r.question_id for r in read_records(store, PREFIX, JudgmentRecord.from_json)] == [
        "q1",
        "q2",
        "q3",
    ]


def test_a_write_that_never_completed_leaves_nothing_a_reader_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStorage(tmp_path)
    shards.write_records(store, PREFIX, [judgment("q1")])

    def crash(*_: Any, **__: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr("kubejury.files.storage.os.replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        shards.write_records(store, PREFIX, [judgment("q2")])
    monkeypatch.undo()
    (tmp_path / PREFIX / ".tmp-crashed-part-000001-ab.parquet").write_bytes(b"PAR1 half")  # a killed writer's
    assert len(store.shard_keys(PREFIX)) == 1
    assert [r.question_id for r in read_records(store, PREFIX, JudgmentRecord.from_json)] == ["q1"]


async def test_a_stage_resumes_after_a_partial_write_from_what_was_stored(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    shards.write_records(store, PREFIX, [judgment("q1"), judgment("q2", score=None, error="timeout")])
    (tmp_path / PREFIX / ".tmp-killed-part.parquet").write_bytes(b"PAR1")
    stored, next_seq = await read_existing(store, PREFIX, JudgmentRecord.from_json)
    assert [r.question_id for r in stored] == ["q1", "q2"] and next_seq == 1
    shards.write_records(store, PREFIX, [judgment("q2")], seq=next_seq)  # the retry of q2
    final = list(read_records(store, PREFIX, JudgmentRecord.from_json))
    assert [(r.question_id, r.error) for r in final] == [("q1", None), ("q2", "timeout"), ("q2", None)]


# ----------------------------------------------------------------------------------- bad shards


@pytest.mark.parametrize(
    "damage",
    [lambda data: b"not parquet at all", lambda data: data[: len(data) // 2], lambda data: data[:-9]],
)
def test_a_corrupt_shard_is_refused_naming_the_file(tmp_path: Path, damage: Any) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes(f"{PREFIX}/part-000000-ab.parquet", damage(shards.encode([judgment("q1")])))
    with pytest.raises(InputError, match=r"part-000000-ab\.parquet: not a readable Parquet shard"):
        list(read_records(store, PREFIX, JudgmentRecord.from_json))
    with pytest.raises(InputError, match=r"part-000000-ab\.parquet: not a readable Parquet shard"):
        load_judgments(tmp_path / PREFIX)


def test_a_shard_with_a_wrongly_typed_column_is_refused_naming_record_and_field(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    table = pa.table({"question_id": ["q1", "q2"], "model": ["m", "m"], "latency_s": ["1.0", "slow"]})
    store.write_bytes("run/s/answers/m/part-000000-ab.parquet", shard_bytes(table))
    with pytest.raises(
        InputError, match=r"part-000000-ab\.parquet, record 1: answer record field 'latency_s'"
    ):
        list(read_records(store, "run/s/answers/m", AnswerRecord.from_json))
    with pytest.raises(InputError, match=r"field 'latency_s': column has type String, expected Float64"):
        load_answers(tmp_path / "run/s/answers/m")


def test_a_shard_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    table = shards.to_table([judgment("q1")])
    newer = table.replace_schema_metadata({**table.schema.metadata, b"kubejury.format": b"99"})
    store.write_bytes(f"{PREFIX}/part-000000-ab.parquet", shard_bytes(newer))
    with pytest.raises(InputError, match=r"record 1: judgment record field 'format': format 99 is newer"):
        list(read_records(store, PREFIX, JudgmentRecord.from_json))


def test_the_loader_names_the_shard_record_and_column_of_bad_values(tmp_path: Path) -> None:
    folder = tmp_path / "judgments"
    folder.mkdir()
    shards.write_file(folder / "a.parquet", [judgment("q1"), judgment("q2")])
    shards.write_file(folder / "b.parquet", [judgment("q3"), judgment("q4", score=11.0)])
    with pytest.raises(
        InputError, match=r"b\.parquet, record 2, field 'score': score 11\.0 is outside 0\.\.10"
    ):
        load_judgments(folder)
    (folder / "b.parquet").unlink()
    shards.write_file(folder / "b.parquet", [judgment("q1")])
    with pytest.raises(
        InputError, match=r"b\.parquet, record 1: duplicate judgment .* also at .*a\.parquet, record 1"
    ):
        load_judgments(folder)
    (folder / "b.parquet").unlink()
    pq.write_table(pa.table({"model": ["m"], "judge": ["j"], "score": [1.0]}), folder / "b.parquet")
    with pytest.raises(
        InputError, match=r"b\.parquet, field 'question_id': required judgment column is missing"
    ):
        load_judgments(folder)
    (folder / "b.parquet").unlink()
    shards.write_file(folder / "b.parquet", [answer("q9")])
    with pytest.raises(
        InputError, match=r"b\.parquet: this shard holds answer records, not judgment records"
    ):
        load_judgments(folder)


def test_parquet_and_jsonl_judgments_load_to_the_same_codes_and_scores(tmp_path: Path) -> None:
    records = [
        judgment(f"q{i}", model=m, score=None if i == 3 else float(i % 11), rationale="r")
        for m in ("beta", "alpha")
        for i in range(7)
    ]
    shards.write_file(tmp_path / "j.parquet", records)
    (tmp_path / "j.jsonl").write_bytes(b"".join(json.dumps(r.to_json()).encode() + b"\n" for r in records))
    columnar, lines = (
        load_judgments(tmp_path / "j.parquet", text=True),
        load_judgments(tmp_path / "j.jsonl", text=True),
    )
    assert (columnar.models, columnar.question_ids, columnar.judges) == (
        lines.models,
        lines.question_ids,
        lines.judges,
    )
    assert np.array_equal(columnar.model_code, lines.model_code)
    assert np.array_equal(columnar.score, lines.score, equal_nan=True)
    assert columnar.location(8) == (str(tmp_path / "j.parquet"), "record 9")
    assert lines.location(8) == (str(tmp_path / "j.jsonl"), "line 9")
    assert columnar.to_frame().equals(lines.to_frame())


def test_key_columns_a_shard_holds_one_value_of_are_coded_from_its_statistics_alike(tmp_path: Path) -> None:
    def records(series: str, judge: str) -> list[JudgmentRecord]:
        return [
            dataclasses.replace(
                judgment(f"q{i}", model=f"m{i % 2}", score=float(i)), series=series, judge=judge
            )
            for i in range(4)
        ]

    parquet, jsonl = tmp_path / "parquet", tmp_path / "jsonl"
    parquet.mkdir()
    jsonl.mkdir()
    for name, series, judge in (("a", "hot", "j2"), ("b", "cold", "j1"), ("c", "hot", "j1")):
        shards.write_file(parquet / f"{name}.parquet", records(series, judge))
        lines = b"".join(json.dumps(r.to_json()).encode() + b"\n" for r in records(series, judge))
        (jsonl / f"{name}.jsonl").write_bytes(lines)
    assert shards.constant_columns(str(parquet / "a.parquet"), ["series", "model", "judge"], "a") == {
        "series": "hot",
        "judge": "j2",
    }
    columnar, lines_read = load_judgments(parquet), load_judgments(jsonl)
    assert (
        (columnar.series, columnar.judges)
        == (lines_read.series, lines_read.judges)
        == (("hot", "cold"), ("j1", "j2"))
    )
    assert columnar.to_frame().equals(lines_read.to_frame())
    shards.write_file(parquet / "d.parquet", records("", "j1"))
    with pytest.raises(InputError, match=r"d\.parquet, record 1, field 'series': judgment field is empty"):
        load_judgments(parquet)


# ------------------------------------------------------------------- runs made before issue 26

QUESTIONS = 4


def write_spec(tmp_path: Path, name: str, models: list[str], **fields: Any) -> Path:
    bench = tmp_path / "bench.jsonl"
    if not bench.exists():
        rows = [
            {
                "id": f"q{i}",
                "domain": "law",
                "level": 1 + i % 2,
                "question": f"Question {i}?",
                "reference": "R",
            }
            for i in range(QUESTIONS)
        ]
        bench.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    spec = build_evalrun_yaml(
        name,
        benchmark={"uri": str(bench), "language": "en"},
        storage={"uri": str(tmp_path / "runs")},
        models=[model_entry(m, f"hf://org/{m}", parameters="7B") for m in models],
        judges=[model_entry("judge", "hf://org/judge", parameters="7B")],
        **fields,
    )
    file = tmp_path / f"{name}.yaml"
    file.write_text(spec, encoding="utf-8")
    return file


def test_a_run_with_jsonl_shards_aggregates_exports_and_is_reused(tmp_path: Path) -> None:
    board = write_spec(tmp_path, "board", ["alpha", "beta"])
    store_finished_run(board, tmp_path / "runs", jsonl=True)
    store = LocalStorage(tmp_path / "runs")
    assert {k.rsplit(".", 1)[1] for k in store.list("board/") if "/part-" in k} == {"jsonl"}
    assert main(["aggregate", "--evalrun", str(board)]) == 0
    assert store.exists("board/report/report.json")

    assert main(["export", str(tmp_path / "runs" / "board"), "--out", str(tmp_path / "export")]) == 0
    assert len(load_judgments(tmp_path / "export" / "judgments.jsonl")) == 2 * QUESTIONS

    grown = write_spec(tmp_path, "grown", ["alpha", "beta", "gamma"], reuse={"from": ["board"]})
    assert main(["reuse", "--evalrun", str(grown)]) == 0
    copied = [k for k in store.list("grown/") if "/part-" in k]
    assert copied and all(k.endswith(".parquet") for k in copied)
    layout = RunLayout("grown")
    assert len(shards.read_rows(store, layout.answers_prefix("primary", "alpha"))) == QUESTIONS


def test_put_shard_refuses_sequence_numbers_out_of_range(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="out of range"):
        LocalStorage(tmp_path).put_shard(PREFIX, b"x", suffix="parquet", seq=10**6)


def test_a_stage_s_records_read_column_wise_keep_what_the_stages_reader_keeps(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    older = [judgment("q1", score=None, error="HTTP 500"), judgment("q2", score=3.0)]
    store.write_jsonl_shard(PREFIX, [r.to_json() for r in older])  # an older run's shard
    later = [
        judgment("q1", score=6.0),
        judgment("q2", score=None, error="timeout"),  # a failed retry never hides a final record
        judgment("q3", score=None, error="no score", error_kind="parse"),
        judgment("q3", score=None, error="HTTP 503"),
        judgment("q4", score=None, error="HTTP 500"),
    ]
    shards.write_records(store, PREFIX, later)
    table = shards.stage_table(store, PREFIX, JudgmentRecord)
    assert table is not None and table.num_rows == 7
    frame = shards.latest_rows(table, ("question_id", "model"))
    by_reader = read_judgments(store, RunLayout("run"), "primary", "j")
    columnar = [JudgmentRecord.from_json(row) for row in frame.to_dicts()]
    assert sorted(columnar, key=lambda r: r.question_id) == by_reader  # in the order of the rows kept
    assert [(r.question_id, r.score, r.error) for r in by_reader] == [
        ("q1", 6.0, None),
        ("q2", 3.0, None),
        ("q3", None, "no score"),
        ("q4", None, "HTTP 500"),
    ]
    assert shards.stage_table(store, "run/primary/judgments/none", JudgmentRecord) is None


def test_fingerprint_witnesses_name_each_stage_digest_once(tmp_path: Path) -> None:
    records = [judgment(f"q{i}", fingerprint="a" if i < 3 else "b") for i in range(5)]
    frame = shards.latest_rows(shards.to_table(records), ("question_id", "model"))
    witnesses = shards.fingerprint_witnesses(frame)
    assert [(w.series, w.judge, w.fingerprint) for w in witnesses] == [
        ("primary", "j", "a"),
        ("primary", "j", "b"),
    ]


# ----------------------------------------------------------------------------------- compaction


def stage_shards(store: LocalStorage) -> list[JudgmentRecord]:
    """Three shards as a stage with a retried request leaves them; returns the records in order."""
    batches = [
        [judgment("q1"), judgment("q2", score=None, error="HTTP 500")],
        [judgment("q3", score=4.0), judgment("q2", score=5.0)],
        [judgment("q4", score=None, error="no score", error_kind="parse")],
    ]
    for batch in batches:
        shards.write_records(store, PREFIX, batch)
    return [record for batch in batches for record in batch]


def stored(store: LocalStorage) -> list[JudgmentRecord]:
    return list(read_records(store, PREFIX, JudgmentRecord.from_json))


def test_compaction_merges_a_stage_s_shards_into_one_after_them_with_every_record_in_order(
    tmp_path: Path,
) -> None:
    store = LocalStorage(tmp_path)
    records = stage_shards(store)
    parts = store.shard_keys(PREFIX)
    done = shards.compact(store, PREFIX)
    assert done.written is not None and done.records == len(records)
    assert sorted(done.deleted) == parts
    assert store.shard_keys(PREFIX) == [done.written]
    assert done.written.rsplit("/", 1)[1].startswith(f"part-{len(parts):06d}-")  # after every part
    assert stored(store) == records
    assert shards.merged_names(store.read_bytes(done.written)) == {p.rsplit("/", 1)[1] for p in parts}


def test_compaction_is_idempotent(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    records = stage_shards(store)
    first = shards.compact(store, PREFIX)
    again = shards.compact(store, PREFIX)
    assert again == shards.Compaction(None, ())
    assert store.shard_keys(PREFIX) == [first.written] and stored(store) == records
    assert shards.compact(store, "run/primary/judgments/none") == shards.Compaction(None, ())


def test_a_crash_between_write_and_delete_leaves_duplicates_readers_resolve_and_the_next_compaction_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStorage(tmp_path)
    records = stage_shards(store)
    before = read_judgments(store, RunLayout("run"), "primary", "j")

    def crash(*_: Any) -> int:
        raise OSError("killed")

    monkeypatch.setattr(store, "delete_keys", crash)
    with pytest.raises(OSError, match="killed"):
        shards.compact(store, PREFIX)
    monkeypatch.undo()
    assert len(store.shard_keys(PREFIX)) == 4  # the parts and the merged shard
    assert stored(store) == records + records
    assert read_judgments(store, RunLayout("run"), "primary", "j") == before
    table = shards.stage_table(store, PREFIX, JudgmentRecord)
    assert table is not None
    frame = shards.latest_rows(table, ("question_id", "model"))
    assert sorted(
        (JudgmentRecord.from_json(row) for row in frame.to_dicts()), key=lambda r: r.question_id
    ) == sorted(before, key=lambda r: r.question_id)

    merged = store.shard_keys(PREFIX)[-1]
    finish = shards.compact(store, PREFIX)
    assert finish.written is None and len(finish.deleted) == 3  # deleted, not merged again
    assert store.shard_keys(PREFIX) == [merged] and stored(store) == records


def test_a_stage_resumed_after_compaction_writes_after_the_merged_shard_and_compacts_again(
    tmp_path: Path,
) -> None:
    store = LocalStorage(tmp_path)
    records = stage_shards(store)
    shards.compact(store, PREFIX)
    existing = list(read_records(store, PREFIX, JudgmentRecord.from_json))
    next_seq = store.next_shard_seq(PREFIX)
    assert existing == records and next_seq == 4
    retry = [judgment("q5", score=2.0)]
    shards.write_records(store, PREFIX, retry, seq=next_seq)
    second = shards.compact(store, PREFIX)
    assert second.written is not None and store.shard_keys(PREFIX) == [second.written]
    assert second.written.rsplit("/", 1)[1].startswith("part-000005-")
    assert stored(store) == records + retry
    assert len(shards.merged_names(store.read_bytes(second.written))) == 5  # 3 parts, 1 merged, 1 new


def test_jsonl_shards_of_older_runs_are_left_as_they_are(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    older = store.write_jsonl_shard(PREFIX, [judgment("q0").to_json()])
    records = stage_shards(store)
    done = shards.compact(store, PREFIX)
    assert store.shard_keys(PREFIX) == [older, done.written]
    assert stored(store) == [judgment("q0"), *records]


class CompactingUnderfoot(LocalStorage):
    """A reader's storage under which another process compacts the folder right after the reader
    listed it, before it reads its first shard."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.compacted = False

    def read_bytes(self, key: str, *, max_bytes: int | None = None) -> bytes:
        if not self.compacted:
            self.compacted = True
            assert shards.compact(LocalStorage(self.root), PREFIX).written is not None
        return super().read_bytes(key, max_bytes=max_bytes)


def test_a_reader_that_listed_before_a_compaction_still_reads_every_record(tmp_path: Path) -> None:
    records = stage_shards(LocalStorage(tmp_path))
    assert stored(CompactingUnderfoot(tmp_path)) == records
    for _ in range(2):
        records += [judgment(f"x{len(records)}")]
        shards.write_records(LocalStorage(tmp_path), PREFIX, records[-1:])
    table = shards.stage_table(CompactingUnderfoot(tmp_path), PREFIX, JudgmentRecord)
    assert table is not None
    assert [JudgmentRecord.from_json(row) for row in table.to_pylist()] == records


def test_readers_see_every_stored_record_while_a_stage_writes_and_compacts(tmp_path: Path) -> None:
    """Writer, compactor and reader on the same folder at once: each read holds every record
    written before it started (duplicates allowed), whatever the interleaving."""
    import threading

    store = LocalStorage(tmp_path)
    written: list[str] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def keep_compacting() -> None:
        while not stop.is_set():
            try:
                shards.compact(LocalStorage(tmp_path), PREFIX)
            except BaseException as exc:  # reported by the test thread
                failures.append(exc)
                return

    compactor = threading.Thread(target=keep_compacting)
    compactor.start()
    try:
        for i in range(40):
            shards.write_records(store, PREFIX, [judgment(f"q{i}")], seq=i)
            written.append(f"q{i}")
            expected = set(written)
            seen = {
                r.question_id for r in read_records(LocalStorage(tmp_path), PREFIX, JudgmentRecord.from_json)
            }
            assert expected <= seen
    finally:
        stop.set()
        compactor.join()
    assert not failures
    shards.compact(store, PREFIX)
    assert len(store.shard_keys(PREFIX)) == 1
    assert sorted(r.question_id for r in stored(store)) == sorted(written)


def test_the_aggregation_reads_only_its_columns_and_keeps_unique_keys_as_stored(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_jsonl_shard(PREFIX, [judgment("q2", rationale="older", fingerprint="f").to_json()])
    shards.write_records(store, PREFIX, [judgment("q1", rationale="long text", fingerprint="f")])
    table = shards.stage_table(store, PREFIX, JudgmentRecord, shards.AGGREGATION_COLUMNS)
    assert table is not None and table.column_names == list(shards.AGGREGATION_COLUMNS)
    assert "rationale" not in shards.AGGREGATION_COLUMNS
    frame = shards.latest_rows(table, ("question_id", "model"))
    assert frame["question_id"].to_list() == ["q2", "q1"]  # every key once: storage order, as read
    assert shards.fingerprint_witnesses(frame)[0].fingerprint == "f"


def test_the_aggregation_s_frame_is_the_column_wise_table_and_refuses_what_it_refuses(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_jsonl_shard(PREFIX, [judgment("q2", score=None, error="HTTP 500").to_json()])
    shards.write_records(store, PREFIX, [judgment("q1"), judgment("q2", score=4.0)])
    columns = shards.AGGREGATION_COLUMNS
    frame = shards.stage_frame(store, PREFIX, JudgmentRecord, columns)
    table = shards.stage_table(store, PREFIX, JudgmentRecord, columns)
    assert frame is not None and table is not None
    assert frame.equals(shards.latest_rows(table, ("question_id", "model", "error")))  # every row
    assert shards.latest_rows(frame, ("question_id", "model")).equals(
        shards.latest_rows(table, ("question_id", "model"))
    )
    assert shards.stage_frame(store, "run/primary/judgments/none", JudgmentRecord, columns) is None
    bad = pa.table({"question_id": ["q9"], "model": ["m"], "judge": ["j"], "score": ["high"]})
    key = store.put_shard(PREFIX, shard_bytes(bad), suffix="parquet")
    with pytest.raises(InputError, match="do not fit the judgment schema") as info:
        shards.stage_frame(store, PREFIX, JudgmentRecord, columns)
    assert info.value.source == store.uri_for(key)
