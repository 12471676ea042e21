"""Bring-up held (status.gpu ``bringUpGpuSeconds``): the GPU-seconds a server's Pod held before it
was Ready, counted once per bring-up, apart from the held time it serves."""

from __future__ import annotations

from dataclasses import replace

from factories import H100_PLACEMENT, build_cluster_run, endpoint, present_for, ready_servers
from kubejury.records.gpu_usage import GpuUsage
from kubejury_operator.gpu_accounting import account
from kubejury_operator.observed import Observed

T0 = "2026-12-01T10:00:00Z"
T1 = "2026-12-01T10:00:10Z"
T2 = "2026-12-01T10:01:10Z"
T3 = "2026-12-01T10:02:00Z"
TP2 = replace(H100_PLACEMENT, tensor_parallel_size=2)


def ready(since: str, bringup: float) -> Observed:
    return Observed(
        deployments=ready_servers("m-a"),
        present=present_for("m-a"),
        servers_ready_since={"m-a": since},
        servers_bringup_seconds={"m-a": bringup},
    )


def test_a_bring_up_counts_its_gpus_times_creation_to_ready_once() -> None:
    run = build_cluster_run(models=[endpoint("model", "a", TP2)], judges=[endpoint("judge", "j")])
    first = account(run, ready(T0, 45.0), {"m-a": 1}, GpuUsage(), T1)
    a = first.by_name()["a"]
    assert a.bring_up_gpu_seconds == 2 * 45.0
    again = account(run, ready(T0, 45.0), {"m-a": 1}, first, T2).by_name()["a"]
    assert again.bring_up_gpu_seconds == 2 * 45.0  # the same bring-up, seen again: not counted twice
    assert again.held_gpu_seconds == 0.0  # held is the Ready time, kept apart


def test_a_second_bring_up_after_a_scale_down_adds_its_own() -> None:
    run = build_cluster_run(models=[endpoint("model", "a", TP2)], judges=[endpoint("judge", "j")])
    up = account(run, ready(T0, 45.0), {"m-a": 1}, GpuUsage(), T1)
    down = account(run, ready(T0, 45.0), {}, up, T2)  # scaled to zero: the interval closes
    back = account(run, ready(T3, 5.0), {"m-a": 1}, down, T3).by_name()["a"]
    assert back.bring_up_gpu_seconds == 2 * (45.0 + 5.0)
    assert GpuUsage((back,)).to_json()["bringUpGpuSeconds"] == 100.0
    assert GpuUsage.from_json(GpuUsage((back,)).to_json()).by_name()["a"].bring_up_gpu_seconds == 100.0
