"""Which lane each of the gateway's requests waits in (kubejury_operator.lanes): a status patch and
a scale as decisions, everything else (Events too) as work. The requests go to a
closed loopback port; only the lane each asked for is read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kubejury_operator import metrics
from kubejury_operator.gateway import MAX_CONNECTIONS, ApiCredentials, GatewayError, KubeGateway
from kubejury_operator.lanes import Lane, Lanes


class RecordingLanes(Lanes):
    """Lanes that remember which lane each request asked for."""

    def __init__(self) -> None:
        super().__init__(MAX_CONNECTIONS)
        self.asked: list[Lane] = []

    @asynccontextmanager
    async def slot(self, lane: Lane) -> AsyncIterator[None]:
        self.asked.append(lane)
        async with super().slot(lane):
            yield


RUN = {"apiVersion": "kubejury.io/v1alpha1", "kind": "EvalRun", "metadata": {"name": "r", "namespace": "ns"}}


def observed(lane: str) -> float:
    return metrics.REGISTRY.get_sample_value("kubejury_api_queue_seconds_count", {"lane": lane}) or 0.0


async def test_status_patches_and_scales_are_decisions_the_rest_work() -> None:
    before = {lane: observed(lane) for lane in ("decision", "work")}
    async with KubeGateway(ApiCredentials(server="http://127.0.0.1:1"), timeout_s=5.0) as gateway:
        lanes = gateway._lanes = RecordingLanes()
        calls = (
            gateway.patch_status("EvalRun", "ns", "r", {"phase": "Judging"}),
            gateway.scale("Deployment", "ns", "kj-r-qwen", 0),
            gateway.post_event(RUN, "Normal", "Placed", "placed"),
            gateway.create(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}
            ),
            gateway.get("Job", "ns", "kj-r-gen"),
            gateway.delete("Job", "ns", "kj-r-gen"),
        )
        for call in calls:
            with pytest.raises(GatewayError):
                await call
    assert lanes.asked == [Lane.DECISION, Lane.DECISION, Lane.WORK, Lane.WORK, Lane.WORK, Lane.WORK]
    assert lanes.in_flight == 0
    # each request's wait is in the metrics under its lane, also when the API did not answer
    assert {lane: observed(lane) - n for lane, n in before.items()} == {"decision": 2, "work": 4}
