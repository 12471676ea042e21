"""The stages' shared machinery: which stored record counts, and shard batching order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kubejury.errors import InputError
from kubejury.files.shards import read_rows, write_records
from kubejury.files.storage import LocalStorage
from kubejury.records.progress import StageCounts
from kubejury.records.results import AnswerRecord
from kubejury.stages.runner import (
    ShardWriter,
    StageOptions,
    StageSummary,
    compact_stage,
    is_final,
    latest_by_key,
    read_records,
)


def answer(qid: str, error: str | None = None, kind: str | None = None, n: int = 0) -> AnswerRecord:
    """An answer record told apart from its namesakes by ``attempts`` (``n``)."""
    return AnswerRecord(question_id=qid, model="m", error=error, error_kind=kind, attempts=n)


def test_is_final() -> None:
    assert is_final(answer("a"))
    assert is_final(answer("a", "no [[N]]", "parse"))
    assert not is_final(answer("a", "HTTP 500", "http"))


def test_latest_final_record_wins() -> None:
    records = [
        answer("a", "HTTP 500", "http", n=1),
        answer("b", n=2),
        answer("a", n=3),
        answer("a", "timeout", "timeout", n=4),  # a later failure does not erase a success
        answer("c", "x", "http", n=5),
        answer("c", "y", "http", n=6),
    ]
    out = latest_by_key(records, lambda r: r.question_id)
    assert {k: r.attempts for k, r in out.items()} == {"a": 3, "b": 2, "c": 6}


async def test_shard_writer_batches_in_item_order_and_stores_each_record_s_json_form(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    writer: ShardWriter[AnswerRecord] = ShardWriter(
        storage, "run/s/answers/m", first_seq=3, options=StageOptions(flush_records=3)
    )
    for index in (5, 1, 4, 0, 2):
        writer.add(index, answer(f"q{index}", n=index))
    await asyncio.sleep(0)
    await writer.close()
    keys = storage.shard_keys("run/s/answers/m")
    assert [k.rsplit("/", 1)[1][:11] for k in keys] == ["part-000003", "part-000004"]
    assert all(k.endswith(".parquet") for k in keys)
    stored = list(read_rows(storage, "run/s/answers/m"))
    assert [r["attempts"] for r in stored] == [1, 4, 5, 0, 2]
    assert [AnswerRecord.from_json(r) for r in stored] == [answer(f"q{i}", n=i) for i in (1, 4, 5, 0, 2)]
    assert writer.keys == keys


def test_a_stage_summary_reports_the_counts_its_tracker_kept() -> None:
    summary = StageSummary("judge", "primary", "j", counts=StageCounts(total=5, done=4, resumed=1, errors=1))
    assert (summary.total, summary.resumed, summary.written, summary.errors) == (5, 1, 3, 1)
    assert not summary.complete
    summary.counts = summary.counts.advanced()
    assert summary.complete and summary.written == 4


def test_a_stored_line_that_is_no_record_of_the_stage_is_refused_naming_shard_record_and_field(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path)
    good = answer("q1").to_json()
    storage.write_jsonl_shard("run/s/answers/m", [good, {**good, "question_id": "q2", "latency_s": "slow"}])
    with pytest.raises(InputError, match=r"part-.*\.jsonl, record 2: answer record field 'latency_s'"):
        list(read_records(storage, "run/s/answers/m", AnswerRecord.from_json))
    storage.write_jsonl_shard("run/s/answers/ok", [good])
    assert list(read_records(storage, "run/s/answers/ok", AnswerRecord.from_json)) == [answer("q1")]


def test_records_of_an_older_run_s_jsonl_shards_and_of_parquet_shards_read_in_sequence_order(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path)
    storage.write_jsonl_shard("run/s/answers/m", [answer("q1", n=1).to_json()])
    write_records(storage, "run/s/answers/m", [answer("q2", n=2), answer("q1", n=3)])
    stored = list(read_records(storage, "run/s/answers/m", AnswerRecord.from_json))
    assert stored == [answer("q1", n=1), answer("q2", n=2), answer("q1", n=3)]


async def test_a_completed_stage_s_shards_are_compacted_unless_turned_off(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    prefix = "r/s/answers/m"
    for n in range(3):
        write_records(store, prefix, [answer(f"q{n}", n=n)])
    before = read_rows(store, prefix)
    assert await compact_stage(store, prefix, StageOptions(compact=False)) is None
    assert len(store.shard_keys(prefix)) == 3
    done = await compact_stage(store, prefix, StageOptions())
    assert done is not None and store.shard_keys(prefix) == [done.written]
    assert read_rows(store, prefix) == before
