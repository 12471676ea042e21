"""The stages' shared machinery: which stored record counts, and shard batching order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kubejury.files.storage import LocalStorage
from kubejury.stages.runner import Record, ShardWriter, StageOptions, is_final, latest_by_key


def test_is_final() -> None:
    assert is_final({"error": None})
    assert is_final({"error": "no [[N]]", "error_kind": "parse"})
    assert not is_final({"error": "HTTP 500", "error_kind": "http"})


def test_latest_final_record_wins() -> None:
    records: list[Record] = [
        {"q": "a", "error": "HTTP 500", "error_kind": "http", "n": 1},
        {"q": "b", "error": None, "n": 2},
        {"q": "a", "error": None, "n": 3},
        {
            "q": "a",
            "error": "timeout",
            "error_kind": "timeout",
            "n": 4,
        },  # a later failure does not erase a success
        {"q": "c", "error": "x", "error_kind": "http", "n": 5},
        {"q": "c", "error": "y", "error_kind": "http", "n": 6},
    ]
    out = latest_by_key(records, lambda r: r["q"])
    assert {k: r["n"] for k, r in out.items()} == {"a": 3, "b": 2, "c": 6}


async def test_shard_writer_batches_in_item_order(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    writer = ShardWriter(storage, "run/s/answers/m", first_seq=3, options=StageOptions(flush_records=3))
    for index in (5, 1, 4, 0, 2):
        writer.add(index, {"i": index})
    await asyncio.sleep(0)
    await writer.close()
    keys = storage.shard_keys("run/s/answers/m")
    assert [k.rsplit("/", 1)[1][:11] for k in keys] == ["part-000003", "part-000004"]
    assert [r["i"] for r in storage.read_jsonl("run/s/answers/m")] == [1, 4, 5, 0, 2]
    assert writer.keys == keys
