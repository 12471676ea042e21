"""Tests for kubejury_operator.metrics: cumulative observations become counters, cardinality stays
bounded (series vanish with their run), and the HTTP endpoint serves the registry."""

from __future__ import annotations

import functools
import socket
import urllib.request
from collections.abc import Iterator

import pytest

from kubejury.records.progress import ProgressRecord
from kubejury_operator import metrics
from kubejury_operator.metrics import REGISTRY, RunObservation, StageProgress


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    metrics._reset_for_tests()
    yield
    metrics._reset_for_tests()


def value(metric: str, /, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def series_with(namespace: str, name: str) -> list[str]:
    """Every exposed sample that carries this run's labels."""
    found = []
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.labels.get("namespace") == namespace and sample.labels.get("name") == name:
                found.append(sample.name)
    return found


# A run's observation with these three defaults; the keywords a test gives are type-checked as RunObservation's.
obs = functools.partial(RunObservation, namespace="ns", name="run", phase="Generating")


def test_runs_by_phase_counts_live_runs() -> None:
    metrics.observe_run(obs(name="a", phase="Generating"))
    metrics.observe_run(obs(name="b", phase="Generating"))
    metrics.observe_run(obs(name="c", phase="Succeeded"))
    assert value("kubejury_runs", phase="Generating") == 2
    assert value("kubejury_runs", phase="Succeeded") == 1
    assert value("kubejury_runs", phase="Failed") == 0
    metrics.observe_run(obs(name="a", phase="Judging"))
    assert value("kubejury_runs", phase="Generating") == 1
    assert value("kubejury_runs", phase="Judging") == 1


def test_unknown_phase_is_folded() -> None:
    metrics.observe_run(obs(phase="Weird"))
    assert value("kubejury_runs", phase="Unknown") == 1
    assert value("kubejury_runs", phase="Weird") is None


def test_progress_and_eta_gauges() -> None:
    metrics.observe_run(obs(progress={"generation": StageProgress(10, 4608)}, eta_seconds=120.0))
    assert value("kubejury_run_progress_items", namespace="ns", name="run", stage="generation") == 10
    assert value("kubejury_run_total_items", namespace="ns", name="run", stage="generation") == 4608
    assert value("kubejury_run_eta_seconds", namespace="ns", name="run") == 120.0
    metrics.observe_run(obs(eta_seconds=None))
    assert value("kubejury_run_eta_seconds", namespace="ns", name="run") is None


def test_first_observation_is_a_baseline_then_deltas_count() -> None:
    metrics.observe_run(obs(generated={"qwen": 100}, judged={"glm": 5}))
    assert value("kubejury_items_generated_total", namespace="ns", name="run", model="qwen") == 0
    metrics.observe_run(obs(generated={"qwen": 130, "gemma": 7}, judged={"glm": 9}))
    assert value("kubejury_items_generated_total", namespace="ns", name="run", model="qwen") == 30
    # a model that first appears after the run was seen counts in full
    assert value("kubejury_items_generated_total", namespace="ns", name="run", model="gemma") == 7
    assert value("kubejury_items_judged_total", namespace="ns", name="run", judge="glm") == 4
    # a count going down (records rewritten) never decrements
    metrics.observe_run(obs(generated={"qwen": 50}))
    assert value("kubejury_items_generated_total", namespace="ns", name="run", model="qwen") == 30
    metrics.observe_run(obs(generated={"qwen": 60}))
    assert value("kubejury_items_generated_total", namespace="ns", name="run", model="qwen") == 40


def test_error_kinds_are_bounded() -> None:
    metrics.observe_run(obs())
    metrics.observe_run(
        obs(request_errors={("qwen", "timeout"): 2, ("qwen", "ECONNRESET 10.0.0.1"): 1, ("qwen", "x"): 1})
    )
    assert (
        value("kubejury_request_errors_total", namespace="ns", name="run", endpoint="qwen", kind="timeout")
        == 2
    )
    assert (
        value("kubejury_request_errors_total", namespace="ns", name="run", endpoint="qwen", kind="other") == 2
    )
    kinds = {
        s.labels["kind"] for m in REGISTRY.collect() if m.name == "kubejury_request_errors" for s in m.samples
    }
    assert kinds <= set(metrics.ERROR_KINDS)


def test_parse_failures_and_stage_durations() -> None:
    before = value("kubejury_stage_duration_seconds_count", stage="generation") or 0.0
    metrics.observe_run(obs(parse_failures={"glm": 1}))
    metrics.observe_run(obs(parse_failures={"glm": 4}, stage_durations={"generation": 900.0}))
    metrics.observe_run(obs(parse_failures={"glm": 4}, stage_durations={"generation": 900.0}))
    assert value("kubejury_judge_parse_failures_total", namespace="ns", name="run", judge="glm") == 3
    # observed once, not on every reconcile
    assert value("kubejury_stage_duration_seconds_count", stage="generation") == before + 1


def test_stage_duration_of_a_run_seen_finished_at_startup_is_not_recounted() -> None:
    before = value("kubejury_stage_duration_seconds_count", stage="judging") or 0.0
    metrics.observe_run(obs(stage_durations={"judging": 60.0}))
    assert value("kubejury_stage_duration_seconds_count", stage="judging") == before


def test_unknown_stage_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        metrics.observe_run(obs(progress={"question-17": StageProgress(1, 2)}))
    with pytest.raises(ValueError, match="unknown stage"):
        metrics.observe_stage_duration("nope", 1.0)


def test_forget_run_removes_every_series_of_the_run() -> None:
    full = functools.partial(
        obs,
        progress={"generation": StageProgress(1, 2), "judging": StageProgress(0, 2)},
        eta_seconds=5.0,
        generated={"m": 1},
        judged={"j": 1},
        request_errors={("m", "timeout"): 1},
        parse_failures={"j": 1},
    )
    metrics.observe_run(full())
    metrics.observe_run(full(name="other"))
    assert series_with("ns", "run")
    metrics.forget_run("ns", "run")
    assert series_with("ns", "run") == []
    assert series_with("ns", "other")
    assert ("ns", "run") not in metrics.known_runs()
    assert value("kubejury_runs", phase="Generating") == 1
    metrics.forget_run("ns", "run")  # idempotent


def test_track_reconcile_counts_errors_and_reraises() -> None:
    calls = value("kubejury_reconcile_total", handler="t") or 0.0
    errors = value("kubejury_reconcile_errors_total", handler="t") or 0.0
    with metrics.track_reconcile("t"):
        pass
    with pytest.raises(RuntimeError), metrics.track_reconcile("t"):
        raise RuntimeError("boom")
    assert value("kubejury_reconcile_total", handler="t") == calls + 2
    assert value("kubejury_reconcile_errors_total", handler="t") == errors + 1
    assert (value("kubejury_reconcile_duration_seconds_count", handler="t") or 0) >= 2


def test_metric_names_lists_exposed_sample_names() -> None:
    names = metrics.metric_names()
    for expected in (
        "kubejury_runs",
        "kubejury_items_generated_total",
        "kubejury_stage_duration_seconds_bucket",
        "kubejury_run_eta_seconds",
    ):
        assert expected in names
    assert "kubejury_items_generated" in names  # family name
    assert "kubejury_nonexistent" not in names


def test_metrics_server_serves_the_registry_on_loopback() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.set_build_info("9.9.9-test")
    metrics.start_metrics_server(port, addr="127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        body = reply.read().decode()
    assert 'kubejury_build_info{version="9.9.9-test"} 1.0' in body
    assert "kubejury_runs{" in body


def test_observation_from_status_and_progress_records() -> None:
    """ETA from the rates the running stages report; durations from the conditions' transitions."""
    status = {
        "phase": "Judging",
        "startedAt": "2026-11-30T01:00:00Z",
        "stages": {"generation": {"done": 40, "total": 40}, "judging": {"done": 20, "total": 80}},
        "conditions": [
            {"type": "GenerationComplete", "status": "True", "lastTransitionTime": "2026-11-30T01:10:00Z"},
            {"type": "JudgingComplete", "status": "False", "lastTransitionTime": "2026-11-30T01:00:00Z"},
        ],
    }
    progress = {
        ("generate", "primary", "qwen"): ProgressRecord.from_json(
            {"done": 40, "total": 40, "state": "succeeded"}
        ),
        ("judge", "primary", "j"): ProgressRecord.from_json(
            {"done": 20, "total": 80, "errors": 2, "parse_failures": 1, "rate_per_s": 2.0, "state": "running"}
        ),
    }
    obs = metrics.observation("ns", "r", status, progress)
    assert obs.generated == {"qwen": 40} and obs.judged == {"j": 20}
    assert obs.parse_failures == {"j": 1}
    assert obs.request_errors == {("j", "other"): 2}
    assert obs.eta_seconds == 30.0  # 60 items left at 2/s
    assert obs.stage_durations == {"generation": 600.0}
    assert obs.progress["judging"].total == 80


def test_gpu_seconds_come_from_status_gpu_and_grow_with_the_open_interval_at_scrape_time() -> None:
    from kubejury.records.gpu_usage import GpuUsage, ServerGpuUsage

    usage = GpuUsage(
        (
            ServerGpuUsage("qwen", "model", 4, None, 400.0, 300.0),
            ServerGpuUsage("judge", "judge", 2, None, 0.0, 0.0, ready_since="2026-01-01T00:00:00Z"),
        )
    )
    status = {"phase": "Generating", "gpu": usage.to_json()}
    metrics.observe_run(metrics.observation("ns", "r", status, {}))
    labels = {"namespace": "ns", "name": "r", "model": "qwen", "role": "model"}
    assert value("kubejury_gpu_held_seconds_total", **labels) == 400.0
    assert value("kubejury_gpu_used_seconds_total", **labels) == 300.0
    judge = {"namespace": "ns", "name": "r", "model": "judge", "role": "judge"}
    first = value("kubejury_gpu_held_seconds_total", **judge)
    assert first is not None and first > 2 * 3600  # Ready since January: counted up to this scrape
    assert "kubejury_gpu_held_seconds_total" in metrics.metric_labels()
    metrics.forget_run("ns", "r")
    assert value("kubejury_gpu_held_seconds_total", **labels) is None


def test_an_observation_reads_the_status_record_the_same_as_its_written_json() -> None:
    from kubejury.records.run_status import RunStatus

    status = {
        "phase": "Aggregating",
        "startedAt": "2026-11-30T01:00:00Z",
        "stages": {"generation": {"done": 40, "total": 40}, "judging": {"done": 80, "total": 80}},
        "conditions": [
            {"type": "GenerationComplete", "status": "True", "lastTransitionTime": "2026-11-30T01:10:00Z"},
            {"type": "JudgingComplete", "status": "True", "lastTransitionTime": "2026-11-30T01:40:00Z"},
        ],
    }
    from_json = metrics.observation("ns", "r", status, {})
    assert metrics.observation("ns", "r", RunStatus.from_json(status), {}) == from_json
    assert from_json.stage_durations == {"generation": 600.0, "judging": 1800.0}


def test_a_stage_duration_with_a_time_that_is_no_timestamp_is_left_out_not_an_error() -> None:
    status = {
        "startedAt": "soon",
        "conditions": [
            {"type": "GenerationComplete", "status": "True", "lastTransitionTime": "2026-11-30T01:10:00Z"},
            {"type": "JudgingComplete", "status": "True", "lastTransitionTime": "2026-11-30T01:40:00+00:00"},
        ],
    }
    assert metrics.stage_durations(status) == {"judging": 1800.0}
