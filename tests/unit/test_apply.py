"""Carrying out a plan (kubejury_operator.apply): waves of actions, refusals in ApplyFailed, the
status written only when due, Events — against the in-memory Kubernetes API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from kubejury_operator import status as st
from kubejury_operator.apply import apply_plan
from kubejury_operator.expectations import Expectations
from kubejury_operator.reconcile import Action, Plan
from kubejury_operator.status import Event
from kubejury_operator.testing import FakeKubeApi

LOG = logging.getLogger("test")
RUN: dict[str, Any] = {
    "apiVersion": "kubejury.io/v1alpha1",
    "kind": "EvalRun",
    "metadata": {"name": "r", "namespace": "evals", "uid": "u-1"},
}


class RecordingApi(FakeKubeApi):
    """The in-memory API, holding the run, that also keeps every status patch as it was sent."""

    def __init__(self, *objects: Mapping[str, Any]) -> None:
        super().__init__(RUN, *objects)
        self.patches: list[dict[str, Any]] = []

    async def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.patches.append(dict(status))
        await super().patch_status(kind, namespace, name, status)


def create(kind: str, name: str) -> Action:
    return Action("create", kind, name, {"kind": kind, "metadata": {"name": name, "namespace": "evals"}})


def _conditions(status: Mapping[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


async def test_a_plans_actions_go_out_concurrently_after_the_objects_the_others_use() -> None:
    """The API records when each request starts and ends: the ConfigMap and ServiceAccount are
    done before any Job is sent, and the Jobs are in flight together, not one after another. The
    status (what was observed) goes out with the first wave, once."""
    log: list[str] = []
    in_flight = 0
    most = 0

    class SlowApi(RecordingApi):
        async def create(self, manifest: Mapping[str, Any]) -> bool:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            log.append(f"start {manifest['kind']}")
            await asyncio.sleep(0.01)
            log.append(f"end {manifest['kind']}")
            in_flight -= 1
            return await super().create(manifest)

        async def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
            log.append("status")
            await super().patch_status(kind, namespace, name, status)

    decided = Plan(
        actions=(
            create("Job", "a"),
            create("ConfigMap", "spec"),
            create("Job", "b"),
            create("ServiceAccount", "sa"),
        ),
        status={"phase": "Provisioning"},
        events=(),
    )
    api = SlowApi()
    await apply_plan(api, RUN, decided, {}, LOG)
    first_job = log.index("start Job")
    assert log[:first_job].count("end ConfigMap") == 1 and log[:first_job].count("end ServiceAccount") == 1
    assert most == 2 and log.count("status") == 1
    assert log.index("status") < first_job
    assert {o["metadata"]["name"] for o in api.objects("Job", "evals")} == {"a", "b"}


async def test_a_refused_action_is_reported_by_a_second_patch_of_the_conditions_only() -> None:
    decided = Plan(
        actions=(create("Job", "a"),),
        status={"phase": "Generating", "placement": {"m": {"quantization": "fp8"}}},
        events=(),
    )
    api = RecordingApi()
    api.fail("create", kind="Job", message="exceeded quota: gpu")
    await apply_plan(api, RUN, decided, {}, LOG)
    assert [_conditions(p).get("ApplyFailed") for p in api.patches] == ["False", "True"]
    assert set(api.patches[1]) == {"conditions"}  # the placement is not sent again
    refused = next(c for c in api.patches[1]["conditions"] if c["type"] == "ApplyFailed")
    assert "exceeded quota: gpu" in refused["message"]

    # A run whose last reconcile was refused writes its status once, after the actions: the
    # condition does not flip to False and back.
    again = RecordingApi()
    again.fail("create", kind="Job", message="exceeded quota: gpu")
    previous = {
        **decided.status,
        "conditions": [{"type": "ApplyFailed", "status": "True", "reason": "Forbidden"}],
    }
    changed = Plan(actions=decided.actions, status={**decided.status, "phase": "Judging"}, events=())
    await apply_plan(again, RUN, changed, previous, LOG)
    assert len(again.patches) == 1 and _conditions(again.patches[0])["ApplyFailed"] == "True"
    assert again.patches[0]["phase"] == "Judging" and "placement" not in again.patches[0]


async def test_a_reconcile_that_moved_only_counters_writes_no_status_until_the_minor_interval() -> None:
    applied = {
        "type": "ApplyFailed",
        "status": "False",
        "reason": "Applied",
        "message": "The API server accepted every change",
    }
    previous = {
        "phase": "Generating",
        "progress": "1/10",
        "stages": {"generation": {"done": 1, "jobsDone": 0}},
        "conditions": [applied],
    }
    counters = Plan(
        actions=(),
        status={**previous, "progress": "2/10", "stages": {"generation": {"done": 2, "jobsDone": 0}}},
        events=(),
    )
    api = RecordingApi()
    assert not await apply_plan(api, RUN, counters, previous, LOG, since_written=1.0)
    assert api.patches == []
    assert await apply_plan(api, RUN, counters, previous, LOG, since_written=st.MINOR_STATUS_INTERVAL)
    assert len(api.patches) == 1 and api.patches[0]["progress"] == "2/10"
    crowded = RecordingApi()  # a hundred runs active: the counters wait their longer interval
    interval = st.minor_interval(100)
    assert not await apply_plan(
        crowded, RUN, counters, previous, LOG, since_written=60.0, minor_interval=interval
    )
    assert await apply_plan(
        crowded, RUN, counters, previous, LOG, since_written=interval, minor_interval=interval
    )


async def test_creates_and_scales_done_are_expected_until_the_caches_show_them() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "evals"},
        "spec": {"replicas": 1},
    }
    decided = Plan(
        actions=(create("Job", "a"), Action("scale", "Deployment", "d", replicas=0)),
        status={"phase": "Generating"},
        events=(),
    )
    expectations = Expectations()
    await apply_plan(RecordingApi(deployment), RUN, decided, {}, LOG, expectations)
    assert set(expectations.created) == {("Job", "a")}
    assert expectations.scaled["d"][1] == 0


async def test_an_event_that_cannot_be_posted_never_fails_the_reconcile() -> None:
    decided = Plan(
        actions=(),
        status={"phase": "Generating"},
        events=(Event("Normal", "Started", "the run started"), Event("Warning", "Slow", "slow")),
    )
    api = RecordingApi()
    assert await apply_plan(api, RUN, decided, {}, LOG)
    assert [e["reason"] for e in api.events()] == ["Started", "Slow"]
    refusing = RecordingApi()
    refusing.fail("post_event")
    assert await apply_plan(refusing, RUN, decided, {}, LOG)
    assert refusing.events() == [] and len(refusing.patches) == 1
