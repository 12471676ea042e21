"""The GPU usage record: one JSON form for status, the aggregation Job and the report."""

from __future__ import annotations

import pytest

from kubejury.records.gpu_usage import (
    GpuUsage,
    GpuUsageError,
    ServerGpuUsage,
    merge_intervals,
    report_section,
)

T0 = "2026-12-01T10:00:00Z"
T1 = "2026-12-01T10:30:00Z"
T2 = "2026-12-01T11:00:00Z"


def test_what_the_operator_writes_the_report_reads_back() -> None:
    usage = GpuUsage(
        (
            ServerGpuUsage("a", "model", 4, "NVIDIA-H100-80GB-HBM3", 7200.0, 3600.0),
            ServerGpuUsage("j", "judge", 1, None, 0.0, 0.0, ready_since=T0, in_use_since=T1),
        )
    )
    assert GpuUsage.from_json(usage.to_json()) == usage
    assert usage.open and usage.to_json()["idleShare"] is None  # no idle share while a server is up
    assert usage.held_at(T2) == 7200 + 3600 and usage.used_at(T2) == 3600 + 1800
    assert usage.idle_share_at(T2) == pytest.approx(1 - 5400 / 10800)


def test_used_never_exceeds_held_for_a_gpu_server() -> None:
    server = ServerGpuUsage("a", "model", 2, None, 100.0, 500.0)
    assert server.used_at(T0) == 100.0


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"servers": {"a": {"gpus": -1}}}, "gpu.servers.a.gpus"),
        ({"servers": {"a": {"heldGpuSeconds": "lots"}}}, "gpu.servers.a.heldGpuSeconds"),
        ({"servers": {"a": {"readySince": "yesterday"}}}, "gpu.servers.a.readySince"),
        ({"servers": ["a"]}, "gpu.servers"),
    ],
)
def test_a_broken_document_is_refused_naming_the_field(document: dict[str, object], field: str) -> None:
    with pytest.raises(GpuUsageError, match=field.replace(".", r"\.")):
        GpuUsage.from_json(document)


def test_overlapping_intervals_count_once_and_the_running_part_stays_open() -> None:
    closed, open_start = merge_intervals([(T0, T1), ("2026-12-01T10:10:00Z", T1)], T2)
    assert (closed, open_start) == (1800.0, None)
    closed, open_start = merge_intervals([(T0, "2026-12-01T10:10:00Z"), (T1, None)], T2)
    assert (closed, open_start) == (600.0, T1)


def test_the_report_section_gives_gpu_hours_and_quality_per_gpu_hour_of_models_only() -> None:
    usage = GpuUsage(
        (
            ServerGpuUsage("a", "model", 4, None, 4 * 3600.0, 4 * 3240.0),
            ServerGpuUsage("j", "judge", 8, None, 8 * 1800.0, 8 * 1620.0),
        )
    )
    section = report_section(usage, T2, {"a": 8.0}, "status.gpu")
    assert section["servers"]["a"]["held_gpu_hours"] == 4.0
    assert section["servers"]["a"]["weighted_per_gpu_hour"] == 2.0
    assert section["servers"]["j"]["weighted_per_gpu_hour"] is None
    assert section["idle_share"] == pytest.approx(0.1)
