"""When the operator writes a run's status: at once for what a reader acts on, at most every
``MINOR_STATUS_INTERVAL`` seconds for counters (``kubejury_operator.status.due_patch``) — longer
when many runs are active, so that counters of all runs together cost the API server a bounded
number of writes per second (``kubejury_operator.status.minor_interval``)."""

from __future__ import annotations

from typing import Any

import pytest

from kubejury_operator import status as st


def stored(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "phase": "Generating",
        "progress": "10/100",
        "conditions": [
            {
                "type": "Generated",
                "status": "False",
                "reason": "Generating",
                "message": "Generation jobs done 1/4",
            }
        ],
        "stages": {"generation": {"done": 10, "total": 100, "jobsDone": 1, "jobs": 4}},
        "gpu": {
            "servers": {
                "qwen": {
                    "gpus": 1,
                    "readySince": "2026-12-01T10:00:00Z",
                    "heldGpuSeconds": 0.0,
                    "inUseSince": None,
                    "usedGpuSeconds": 30.0,
                    "heldUntil": None,
                    "bringUpSeconds": 20.0,
                }
            },
            "heldGpuSeconds": 0.0,
            "idleShare": None,
        },
    }
    return {**base, **changes}


def counters_moved() -> dict[str, Any]:
    previous = stored()
    conditions = [{**previous["conditions"][0], "message": "Generation jobs done 1/4, items 20/100"}]
    stages = {"generation": {"done": 20, "total": 100, "jobsDone": 1, "jobs": 4}}
    return stored(progress="20/100", conditions=conditions, stages=stages)


def test_counters_alone_wait_for_the_minor_interval() -> None:
    assert not st.due_patch(stored(), counters_moved(), since_written=2.0)
    assert st.due_patch(stored(), counters_moved(), since_written=st.MINOR_STATUS_INTERVAL)


@pytest.mark.parametrize(("active", "seconds"), [(0, 15.0), (1, 15.0), (15, 15.0), (30, 30.0), (100, 100.0)])
def test_counters_of_many_active_runs_share_one_budget_of_writes_per_second(
    active: int, seconds: float
) -> None:
    assert st.minor_interval(active) == pytest.approx(seconds)
    assert active / st.minor_interval(active) <= st.MINOR_WRITES_PER_SECOND


def test_at_a_hundred_active_runs_counters_wait_the_longer_interval_and_decisions_do_not() -> None:
    interval = st.minor_interval(100)
    assert not st.due_patch(stored(), counters_moved(), since_written=60.0, interval=interval)
    assert st.due_patch(stored(), counters_moved(), since_written=interval, interval=interval)
    assert st.due_patch(stored(), stored(phase="Judging"), since_written=0.5, interval=interval)


def test_a_status_this_process_never_wrote_is_written_at_once() -> None:
    assert st.due_patch(stored(), counters_moved(), since_written=None)


def test_an_unchanged_status_is_never_written() -> None:
    assert not st.due_patch(stored(), stored(), since_written=None)


def test_a_job_done_a_phase_or_a_condition_is_written_at_once() -> None:
    done = counters_moved()
    done["stages"]["generation"]["jobsDone"] = 2
    assert st.due_patch(stored(), done, since_written=0.5)
    assert st.due_patch(stored(), stored(phase="Judging"), since_written=0.5)
    flipped = [{**stored()["conditions"][0], "status": "True", "reason": "AllAnswersGenerated"}]
    assert st.due_patch(stored(), stored(conditions=flipped), since_written=0.5)


def test_a_held_interval_closing_is_written_at_once_a_jobs_in_use_time_waits() -> None:
    closed = stored()
    closed["gpu"]["servers"]["qwen"] |= {"readySince": None, "heldGpuSeconds": 60.0}
    assert st.due_patch(stored(), closed, since_written=0.5)
    in_use = stored()
    in_use["gpu"]["servers"]["qwen"] |= {"inUseSince": "2026-12-01T10:00:40Z"}
    assert not st.due_patch(stored(), in_use, since_written=0.5)


@pytest.mark.parametrize(
    ("stored", "generation", "settled"),
    [
        ({"phase": "Succeeded", "observedGeneration": 1, "summary": {"ranking": []}}, 1, True),
        ({"phase": "Failed", "observedGeneration": 1}, 1, True),
        ({"phase": "Succeeded", "observedGeneration": 1}, 1, False),  # the summary is still to read
        ({"phase": "Failed", "observedGeneration": 1}, 2, False),  # the spec changed since
        ({"phase": "Judging", "observedGeneration": 1, "summary": {"ranking": []}}, 1, False),
        (
            {
                "phase": "Failed",
                "observedGeneration": 1,
                "conditions": [
                    {
                        "type": "ApplyFailed",
                        "status": "True",
                        "reason": "Forbidden",
                        "message": "create Job kj-r-aggregate: forbidden",
                        "lastTransitionTime": "2026-12-01T11:00:00Z",
                    }
                ],
            },
            1,
            False,  # a refused change is tried again
        ),
    ],
)
def test_a_run_is_settled_only_when_finished_for_this_generation_with_nothing_refused(
    stored: dict[str, Any], generation: int, settled: bool
) -> None:
    assert st.settled(stored, generation) is settled


def test_a_status_patch_with_only_a_counter_changed_sends_only_that_counter() -> None:
    moved = stored()
    moved["stages"] = {"generation": {**moved["stages"]["generation"], "done": 11}}
    assert st.status_patch(stored(), moved) == {"stages": {"generation": {"done": 11}}}


def test_a_nested_key_gone_is_deleted_and_a_changed_list_is_sent_whole() -> None:
    before = stored()
    after = stored(conditions=[{**before["conditions"][0], "message": "Generation jobs done 2/4"}])
    del after["gpu"]["servers"]["qwen"]["bringUpSeconds"]
    patch = st.status_patch(before, after)
    assert patch == {
        "conditions": after["conditions"],  # a merge patch can only replace a list
        "gpu": {"servers": {"qwen": {"bringUpSeconds": None}}},
    }
    stored_after = st._without_nulls(after)  # as the API server keeps it: no nulls
    assert st._without_nulls(st.merge_patched(st._without_nulls(before), patch)) == stored_after


def test_the_full_format_of_the_benchmarks_before_design_sends_changed_top_level_keys_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(st, "FULL_STATUS", True)
    moved = stored()
    moved["stages"] = {"generation": {**moved["stages"]["generation"], "done": 11}}
    assert st.status_patch(stored(), moved) == {"stages": moved["stages"]}


def test_merge_patched_is_what_the_api_server_stores() -> None:
    document = {"a": {"b": 1, "c": 2}, "d": [1], "e": 1}
    assert st.merge_patched(document, {"a": {"b": None, "x": {"y": None, "z": 3}}, "d": [2], "e": None}) == {
        "a": {"c": 2, "x": {"z": 3}},
        "d": [2],
    }
