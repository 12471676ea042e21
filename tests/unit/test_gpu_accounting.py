"""GPU accounting in the planner: held from a server's Ready Pod to its scale-down, used while its
Jobs run, kept in status.gpu, handed to the aggregation Job."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from factories import (
    BASE_PRESENT,
    H100_PLACEMENT,
    JOB_DONE,
    RUN_SERIES,
    build_cluster_run,
    endpoint,
    generation_jobs,
    judge_jobs,
    present_for,
    ready_servers,
)
from kubejury.records.gpu_usage import GPU_USAGE_ENV, GpuUsage
from kubejury_operator import vocabulary as vocab
from kubejury_operator.observed import (
    JobState,
    Observed,
    job_state,
    servers_bringup_seconds,
    servers_ready_since,
)
from kubejury_operator.reconcile import plan
from kubejury_operator.status import MINOR_STATUS_INTERVAL, due_patch, status_changed

T0 = "2026-12-01T10:00:00Z"
T1 = "2026-12-01T10:00:10Z"
T2 = "2026-12-01T10:01:10Z"
T3 = "2026-12-01T10:01:20Z"
T4 = "2026-12-01T10:05:00Z"
TP4 = replace(H100_PLACEMENT, tensor_parallel_size=4)
ONE_SERIES = RUN_SERIES[:1]


def one_model_run(**kwargs: Any) -> Any:
    run = build_cluster_run(models=[endpoint("model", "a", TP4)], judges=[endpoint("judge", "j")], **kwargs)
    return replace(run, series=ONE_SERIES)


def server(usage: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = usage["servers"][name]
    return found


def test_held_time_runs_from_the_ready_pod_to_the_scale_down_times_the_gpus() -> None:
    run = one_model_run()
    up = Observed(
        deployments=ready_servers("m-a"), present=present_for("m-a"), servers_ready_since={"m-a": T0}
    )
    first = plan(run, up, {}, T1)
    a = server(first.status["gpu"], "a")
    assert a["readySince"] == T0 and a["heldGpuSeconds"] == 0 and a["gpus"] == 4
    assert a["gpuProduct"] == "NVIDIA-H100-80GB-HBM3" and a["role"] == "model"

    finished = JobState(succeeded=True, server="m-a", started_at=T1, finished_at=T2)
    generated = replace(up, jobs=generation_jobs(["a"], finished, ONE_SERIES))
    down = plan(run, generated, first.status, T3)
    assert ("Deployment", vocab.workload_name("r", "m-a"), 0) in {
        (a.kind, a.name, a.replicas) for a in down.actions
    }
    a = server(down.status["gpu"], "a")
    assert a["readySince"] is None
    assert a["heldGpuSeconds"] == 4 * 80  # T0 → T3 on 4 GPUs
    assert a["usedGpuSeconds"] == 4 * 60  # the Job ran T1 → T2


def test_a_running_job_is_an_open_interval_and_the_status_does_not_change_while_nothing_starts_or_stops() -> (
    None
):
    run = one_model_run()
    running = JobState(server="m-a", started_at=T1)
    observed = Observed(
        deployments=ready_servers("m-a"),
        present=present_for("m-a"),
        servers_ready_since={"m-a": T0},
        jobs=generation_jobs(["a"], running, ONE_SERIES),
    )
    first = plan(run, observed, {}, T2)
    a = server(first.status["gpu"], "a")
    assert a["inUseSince"] == T1 and a["usedGpuSeconds"] == 0
    usage = GpuUsage.from_json(first.status["gpu"])
    assert usage.used_at(T3) == 4 * 70 and usage.held_at(T3) == 4 * 80
    later = plan(run, observed, first.status, T4)
    assert not status_changed(first.status, later.status)  # no patch per tick for a growing counter


def test_jobs_on_one_server_at_once_count_once_and_finished_time_is_never_lowered() -> None:
    run = replace(
        build_cluster_run(models=[endpoint("model", "a", TP4)], judges=[endpoint("judge", "j")]),
        series=RUN_SERIES,
    )
    both = {
        vocab.generation_job_name("r", "a", RUN_SERIES[0]): JobState(
            succeeded=True, server="m-a", started_at=T0, finished_at=T2
        ),
        vocab.generation_job_name("r", "a", RUN_SERIES[1]): JobState(server="m-a", started_at=T1),
    }
    observed = Observed(
        deployments=ready_servers("m-a"),
        present=present_for("m-a"),
        servers_ready_since={"m-a": T0},
        jobs=both,
    )
    first = plan(run, observed, {}, T3)
    a = server(first.status["gpu"], "a")
    assert a["inUseSince"] == T0 and a["usedGpuSeconds"] == 0  # one open segment from T0
    closed = {
        name: JobState(succeeded=True, server="m-a", started_at=T0 if i == 0 else T1, finished_at=T2)
        for i, name in enumerate(both)
    }
    second = plan(run, replace(observed, jobs=closed), first.status, T3)
    assert server(second.status["gpu"], "a")["usedGpuSeconds"] == 4 * 70  # T0 → T2 once, not 70 + 60
    deleted = plan(run, replace(observed, jobs={}), second.status, T4)  # someone deleted the Jobs
    assert server(deleted.status["gpu"], "a")["usedGpuSeconds"] == 4 * 70


def test_a_judge_sharing_a_models_server_is_one_server_and_external_endpoints_have_none() -> None:
    model = endpoint("model", "a", key="shared")
    run = build_cluster_run(
        models=[model, endpoint("model", "api", runtime="openai")], judges=[replace(model, name="a-judge")]
    )
    result = plan(run, Observed(servers_ready_since={}), {}, T0)
    assert set(result.status["gpu"]["servers"]) == {"a"}
    assert result.status["gpu"]["servers"]["a"]["role"] == "model+judge"


def test_the_aggregation_job_carries_the_runs_final_gpu_usage() -> None:
    run = one_model_run()
    gen_done = JobState(succeeded=True, server="m-a", started_at=T1, finished_at=T2)
    judge_done = JobState(succeeded=True, server="j-j", started_at=T2, finished_at=T3)
    observed = Observed(
        deployments=ready_servers("j-j"),
        present=present_for("j-j") | BASE_PRESENT,
        servers_ready_since={"j-j": T1},
        jobs={
            **generation_jobs(["a"], gen_done, ONE_SERIES),
            **judge_jobs(["j"], judge_done, ONE_SERIES, complete=1),
        },
    )
    previous = {"gpu": {"servers": {"a": {"role": "model", "gpus": 4, "heldGpuSeconds": 320.0}}}}
    result = plan(run, observed, previous, T4)
    agg = next(a for a in result.actions if a.kind == "Job" and a.name == vocab.aggregation_job_name("r"))
    assert agg.manifest is not None
    env = {
        e["name"]: e.get("value") for e in agg.manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    usage = GpuUsage.from_json(json.loads(str(env[GPU_USAGE_ENV])))
    assert not usage.open  # the judge's server is scaled down in this same reconcile
    assert usage.by_name()["j"].held_gpu_seconds == 1 * (300 - 10)  # T1 → T4 on 1 GPU
    assert usage.by_name()["j"].used_gpu_seconds == 10
    assert usage.by_name()["a"].held_gpu_seconds == 320
    assert result.status["gpu"]["idleShare"] == round(1 - (240 + 10) / (320 + 290), 4)
    assert result.status["gpu"] == usage.to_json()


def test_ready_since_comes_from_ready_server_pods_not_from_job_pods_or_terminating_ones() -> None:
    def pod(component: str, key: str, ready_at: str, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"labels": {vocab.LABEL_COMPONENT: component, vocab.LABEL_ENDPOINT: key}}
        if deleting:
            meta["deletionTimestamp"] = T4
        return {
            "metadata": meta,
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]},
        }

    pods = [
        pod("server", "m-a", T1),
        pod("server", "m-a", T0),
        pod("generate", "m-b", T0),
        pod("server", "m-c", T0, deleting=True),
    ]
    assert servers_ready_since(pods) == {"m-a": T0}


def test_job_state_reads_the_server_label_and_the_jobs_start_and_end() -> None:
    labels = {vocab.LABEL_USES_SERVER: "m-a"}
    complete = {
        "metadata": {"labels": labels},
        "status": {
            "startTime": T0,
            "completionTime": T2,
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    assert job_state(complete) == JOB_DONE.__class__(
        succeeded=True, server="m-a", started_at=T0, finished_at=T2
    )
    failed = {
        "metadata": {"labels": labels},
        "status": {
            "startTime": T0,
            "conditions": [{"type": "Failed", "status": "True", "reason": "X", "lastTransitionTime": T3}],
        },
    }
    assert job_state(failed).finished_at == T3
    running = {"metadata": {"labels": labels}, "status": {"startTime": T0}}
    assert job_state(running).finished_at is None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies the operator's status patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def test_a_closed_interval_is_gone_from_the_stored_status_after_the_merge_patch() -> None:
    run = one_model_run()
    up = Observed(
        deployments=ready_servers("m-a"), present=present_for("m-a"), servers_ready_since={"m-a": T0}
    )
    stored = merge_patch({}, plan(run, up, {}, T1).status)
    assert GpuUsage.from_json(stored["gpu"]).open
    finished = JobState(succeeded=True, server="m-a", started_at=T1, finished_at=T2)
    down = plan(run, replace(up, jobs=generation_jobs(["a"], finished, ONE_SERIES)), stored, T3)
    stored = merge_patch(stored, down.status)
    assert not GpuUsage.from_json(stored["gpu"]).open, stored["gpu"]
    assert stored["gpu"]["idleShare"] == round(1 - 60 / 80, 4)


def lingering_statuses(
    bring_up_seconds: float = 0.0,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The statuses of a one-model run whose server became Ready at T0 (after ``bring_up_seconds``
    of bring-up), whose Job ran T1 → T2, and whose Pod is still Ready after its scale-down: planned
    at T1 (serving), T3 (scaled down) and T4 (the Pod still Ready)."""
    run = one_model_run()
    up = Observed(
        deployments=ready_servers("m-a"),
        present=present_for("m-a"),
        servers_ready_since={"m-a": T0},
        servers_bringup_seconds={"m-a": bring_up_seconds},
    )
    first = plan(run, up, {}, T1).status
    finished = JobState(succeeded=True, server="m-a", started_at=T1, finished_at=T2)
    lingering = replace(up, jobs=generation_jobs(["a"], finished, ONE_SERIES))  # not wanted, Pod still Ready
    down = plan(run, lingering, first, T3).status
    return first, down, plan(run, lingering, down, T4).status


def test_a_pod_still_ready_after_its_scale_down_is_not_counted_twice() -> None:
    _first, down, later = lingering_statuses()
    assert server(down["gpu"], "a")["heldGpuSeconds"] == 4 * 80
    a = server(later["gpu"], "a")
    assert a["heldGpuSeconds"] == 4 * (80 + 220)  # only T3 → T4 added: the Pod really still holds GPUs
    assert a["readySince"] is None and a["heldUntil"] == T4


def test_a_pod_still_ready_after_its_scale_down_adds_its_bring_up_once() -> None:
    first, down, later = lingering_statuses(bring_up_seconds=30.0)
    assert server(first["gpu"], "a")["bringUpGpuSeconds"] == 4 * 30
    assert server(down["gpu"], "a")["bringUpGpuSeconds"] == 4 * 30
    assert server(later["gpu"], "a")["bringUpGpuSeconds"] == 4 * 30  # the same Ready transition, seen again


def test_a_lingering_pods_held_time_waits_like_a_counter_its_scale_down_does_not() -> None:
    first, down, later = lingering_statuses()
    assert due_patch(first, down, since_written=0.5)  # the interval closes: at once
    assert status_changed(down, later)  # held time still grows while the Pod holds GPUs
    assert not due_patch(down, later, since_written=0.5)  # … written with the next write
    assert due_patch(down, later, since_written=MINOR_STATUS_INTERVAL)


def test_bring_up_time_is_pod_creation_to_ready_of_ready_server_pods() -> None:
    def pod(component: str) -> dict[str, Any]:
        return {
            "metadata": {
                "creationTimestamp": T0,
                "labels": {vocab.LABEL_COMPONENT: component, vocab.LABEL_ENDPOINT: "m-a"},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": T2}]},
        }

    assert servers_bringup_seconds([pod("server"), pod("generate")]) == {"m-a": 70.0}
    run = one_model_run()
    observed = Observed(
        deployments=ready_servers("m-a"),
        present=present_for("m-a"),
        servers_ready_since={"m-a": T2},
        servers_bringup_seconds={"m-a": 70.0},
    )
    usage = GpuUsage.from_json(plan(run, observed, {}, T3).status["gpu"])
    assert usage.by_name()["a"].bring_up_seconds == 70.0 and usage.lead_seconds == 70.0
