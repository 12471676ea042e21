"""The progress record crosses from a stage Job to the operator: what one writes, the other reads.

The writer is the stages' :class:`ProgressTracker` (its JSON goes to storage under the key
:class:`RunLayout` gives it); the reader is the operator's progress collection. These tests feed
the writer's output to the reader, so the two cannot drift apart again (the operator once ignored
the ``succeeded`` state every stage writes, and finished work looked unfinished).
"""

from __future__ import annotations

import json

import pytest

from kubejury.records.progress import (
    ProgressRecord,
    ProgressRecordError,
    merge_shards,
    parse_progress_file_name,
    progress_file_name,
)
from kubejury.stages.progress import ProgressTracker
from kubejury_operator.observed import collect_progress


def finished_tracker(state: str = "succeeded") -> ProgressTracker:
    tracker = ProgressTracker("generate", "primary", "qwen3.5-27b", total=4, resumed=1)
    tracker.advance()
    tracker.advance(error=True)
    tracker.advance(parse_failure=True)
    tracker.retried(5)
    tracker.finish("succeeded" if state == "succeeded" else "failed", "" if state == "succeeded" else "boom")
    return tracker


def test_what_the_stage_writes_the_operator_reads_field_for_field() -> None:
    tracker = finished_tracker()
    stored = json.loads(json.dumps(tracker.record()))  # through storage: JSON text
    record = ProgressRecord.from_json(stored)
    assert ProgressRecord.from_json(record.to_json()) == record
    assert (record.done, record.total, record.resumed) == (4, 4, 1)
    assert (record.errors, record.parse_failures, record.retries) == (1, 1, 5)
    assert record.complete and not record.running
    assert record.to_json() == stored


def test_a_failed_or_running_stage_is_not_complete() -> None:
    assert not ProgressRecord.from_json(finished_tracker("failed").record()).complete
    running = ProgressTracker("judge", "primary", "j", total=3)
    assert ProgressRecord.from_json(running.record()).running


def test_a_mistyped_field_is_named() -> None:
    with pytest.raises(ProgressRecordError, match="'done'"):
        ProgressRecord.from_json({"done": "7"})
    with pytest.raises(ProgressRecordError, match="'done'"):
        ProgressRecord.from_json({"done": True})


@pytest.mark.parametrize("shard", [None, (0, 3), (12, 16)])
def test_file_name_format_and_parse_are_inverse(shard: tuple[int, int] | None) -> None:
    name = progress_file_name("generate", "qwen3.5-27b", shard)
    parsed = parse_progress_file_name(f"run/primary/progress/{name}")
    assert parsed is not None
    assert (parsed.stage, parsed.name, parsed.shard) == ("generate", "qwen3.5-27b", shard)


def test_a_file_that_is_no_progress_record_is_ignored() -> None:
    assert parse_progress_file_name("run/primary/progress/other.json") is None
    assert parse_progress_file_name("run/primary/progress/generate-m.txt") is None


def test_the_operator_reads_the_stage_records_at_the_keys_the_stage_writes() -> None:
    from kubejury.files.storage import RunLayout

    layout = RunLayout("r")
    entries = []
    for index in range(2):
        tracker = ProgressTracker("generate", "primary", "m1", total=5)
        for _ in range(5):
            tracker.advance()
        tracker.finish("succeeded")
        entries.append(
            ("primary", layout.progress_key("primary", "generate", "m1", (index, 2)), tracker.record())
        )
    judge = ProgressTracker("judge", "primary", "j", total=10)
    entries.append(("primary", layout.progress_key("primary", "judge", "j"), judge.record()))
    progress = collect_progress(entries)
    assert progress[("generate", "primary", "m1")].complete
    assert progress[("generate", "primary", "m1")].done == 10
    assert progress[("judge", "primary", "j")].running
    # one shard of two reported: not complete
    assert not collect_progress(entries[:1])[("generate", "primary", "m1")].complete


def test_merging_shards() -> None:
    done = ProgressRecord(done=5, total=5, rate_per_s=1.0, state="succeeded")
    running = ProgressRecord(done=2, total=5, rate_per_s=2.0, state="running")
    failed = ProgressRecord(done=1, total=5, state="failed", message="boom")
    assert merge_shards([done, done], 2).complete
    assert merge_shards([done, running], 2).running
    assert merge_shards([done, running], 2).rate_per_s == 3.0
    assert merge_shards([done, failed], 2).state == "failed"
    assert merge_shards([done, failed], 2).message == "boom"
    assert not merge_shards([done], 2).complete


def test_the_counters_of_a_stage_are_one_type_the_record_extends_under_the_same_json_names() -> None:
    from dataclasses import fields

    from kubejury.records.progress import StageCounts

    counts = StageCounts(total=9, done=5, resumed=2, errors=1, parse_failures=1, retries=3)
    record = ProgressRecord(
        total=9, done=5, resumed=2, errors=1, parse_failures=1, retries=3, stage="judge", name="j"
    )
    assert record.counters() == counts.counters()
    assert isinstance(record, StageCounts) and record.written == 3
    assert {f.name for f in fields(StageCounts)} <= set(record.to_json())
    assert {k: record.to_json()[k] for k in counts.counters()} == counts.counters()


def test_stage_counts_grow_by_one_record_or_by_retries_and_add_up_across_shards() -> None:
    from kubejury.records.progress import StageCounts

    start = StageCounts(total=4, done=1, resumed=1)
    grown = start.advanced().advanced(error=True).advanced(error=True, parse_failure=True).retried(2)
    assert grown == StageCounts(total=4, done=4, resumed=1, errors=2, parse_failures=1, retries=2)
    assert start == StageCounts(total=4, done=1, resumed=1), "counts are values: growing makes new ones"
    assert StageCounts.added([grown, start]) == StageCounts(
        total=8, done=5, resumed=2, errors=2, parse_failures=1, retries=2
    )


def test_a_tracker_s_counts_are_what_its_record_stores() -> None:
    tracker = finished_tracker()
    assert tracker.counts.counters() == {k: tracker.record()[k] for k in tracker.counts.counters()}
