"""Progress records of a stage: counts, rate, the JSON the operator reads, and the local rich view."""

from __future__ import annotations

import dataclasses
import datetime
import io
import time
from typing import Any

import pytest
from rich.console import Console

from kubejury.records.timestamps import KUBERNETES_TIME_FORMAT
from kubejury.stages.progress import ProgressTracker, RichProgressView


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def update(self, record: dict[str, Any]) -> None:
        self.records.append(record)


def test_counts_and_record_fields() -> None:
    view = Recorder()
    tracker = ProgressTracker("generate", "primary", "qwen", total=10, resumed=4, view=view)
    assert tracker.counts.done == 4
    tracker.advance()
    tracker.advance(error=True)
    tracker.advance(error=True, parse_failure=True)
    tracker.retried(2)
    tracker.show()
    record = view.records[-1]
    assert record["done"] == 7 and record["resumed"] == 4 and record["total"] == 10
    assert record["errors"] == 2 and record["parse_failures"] == 1 and record["retries"] == 2
    assert record["state"] == "running"
    assert record["updated_at"].endswith("Z") and record["started_at"].endswith("Z")
    assert set(record) == {
        "stage",
        "series",
        "name",
        "total",
        "done",
        "resumed",
        "errors",
        "parse_failures",
        "retries",
        "rate_per_s",
        "state",
        "message",
        "started_at",
        "updated_at",
        "fingerprint",
    }
    tracker.finish("failed", "server gone")
    assert tracker.record()["state"] == "failed" and tracker.record()["message"] == "server gone"


def test_a_trackers_times_are_kubernetes_times_in_utc_to_the_second() -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    record = ProgressTracker("generate", "primary", "qwen", total=1).record()
    after = datetime.datetime.now(datetime.UTC)
    for key in ("started_at", "updated_at"):
        stamped = datetime.datetime.strptime(record[key], KUBERNETES_TIME_FORMAT).replace(tzinfo=datetime.UTC)
        assert before <= stamped <= after, key


def test_rate_counts_only_this_attempt() -> None:
    tracker = ProgressTracker("judge", "primary", "j", total=100, resumed=50)
    time.sleep(0.05)
    assert tracker.rate_per_s == 0.0
    for _ in range(10):
        tracker.advance()
    assert 0 < tracker.rate_per_s < 10 / 0.05 + 1


def test_rich_view_draws_one_bar_per_stage() -> None:
    out = io.StringIO()
    view = RichProgressView(console=Console(file=out, force_terminal=True, width=120))
    with view:
        for name in ("a", "b"):
            tracker = ProgressTracker("generate", "primary", name, total=3, view=view)
            tracker.advance()
            tracker.show()
            tracker.advance(error=True)
            tracker.finish("succeeded")
            tracker.show()
    assert len(view._tasks) == 2
    task = view._progress.tasks[0]
    assert task.completed == 2 and task.total == 3
    assert "generate" in out.getvalue() and "primary" in out.getvalue()


def test_a_tracker_refuses_a_counter_it_does_not_keep_instead_of_losing_it() -> None:
    tracker = ProgressTracker("generate", "primary", "qwen", total=3)
    tracker.counts = dataclasses.replace(
        tracker.counts, done=3
    )  # how the scale benchmark's fast kubelet finishes a stage
    assert tracker.record()["done"] == 3
    not_a_counter = "written"  # a property of the counts, not a counter to set
    with pytest.raises(AttributeError):
        setattr(tracker, not_a_counter, 3)
