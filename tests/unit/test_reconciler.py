"""One reconcile of one run (kubejury_operator.reconciler), end to end on the in-memory Kubernetes
API and watch-fed caches holding the sample H100 node list: nothing is listed, what was just
created is not created again before the caches show it, a settled run costs no request."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import kopf
import pytest

from factories import build_evalrun, watched_caches
from kubejury_operator import apply, reconciler, run_storage
from kubejury_operator import status as st
from kubejury_operator.gateway import ApiCredentials
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.testing import FakeKubeApi
from kubejury_operator.watched import Caches

REPO = Path(__file__).resolve().parents[2]
LOG = logging.getLogger("test")


def h100_caches() -> Caches:
    """Caches with the sample H100 cluster's Nodes and no child of any run."""
    return watched_caches(
        nodes=json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    )


def runtime_on(api: FakeKubeApi) -> OperatorRuntime:
    runtime = OperatorRuntime(
        settings=WorkloadSettings(), credentials=ApiCredentials(server="https://127.0.0.1:1")
    )
    runtime._gateway = api
    return runtime


@pytest.fixture
def no_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Storage answers with no progress record yet (the reconcile's storage side has its own tests)."""
    monkeypatch.setattr(run_storage, "read_progress_and_summary", lambda *a, **k: ({}, None))


def pending_run() -> dict[str, Any]:
    run = build_evalrun()
    run["metadata"].update(uid="u-1", generation=1)
    return run


@pytest.mark.usefixtures("no_storage")
async def test_a_new_run_is_placed_created_and_its_status_written_without_a_list() -> None:
    run = pending_run()
    api = FakeKubeApi(run)
    runtime = runtime_on(api)
    phase = await reconciler.reconcile(runtime, run, LOG, h100_caches())
    created = {(c.kind, c.name) for c in api.calls if c.verb == "create"}
    assert {kind for kind, _ in created} >= {"ConfigMap", "ServiceAccount", "Deployment", "Service"}
    assert not [c for c in api.calls if c.verb in ("list_objects", "list_nodes")]
    stored = api.objects("EvalRun", "evals")[0]["status"]
    assert stored["phase"] == phase and set(stored["placement"]) == {"qwen", "judge"}
    memory = runtime.memory(("evals", "r"))
    assert memory.status_written_at is not None and memory.expectations


@pytest.mark.usefixtures("no_storage")
async def test_counters_wait_the_interval_of_the_runs_active_now(monkeypatch: pytest.MonkeyPatch) -> None:
    run = pending_run()
    runtime = runtime_on(FakeKubeApi(run))
    for k in range(99):
        runtime.memory(("others", f"r{k}")).active = True
    intervals: list[float] = []

    async def spy(*args: Any) -> bool:
        intervals.append(args[-1])
        return await apply.apply_plan(*args)

    monkeypatch.setattr(reconciler, "apply_plan", spy)
    await reconciler.reconcile(runtime, run, LOG, h100_caches())
    assert runtime.memory(("evals", "r")).active  # placed, not finished: the hundredth active run
    assert intervals == [st.minor_interval(100)]


@pytest.mark.usefixtures("no_storage")
async def test_what_was_just_created_is_not_created_again_before_the_caches_show_it() -> None:
    run = pending_run()
    api = FakeKubeApi(run)
    runtime = runtime_on(api)
    caches = h100_caches()
    await reconciler.reconcile(runtime, run, LOG, caches)
    creates = sum(1 for c in api.calls if c.verb == "create")
    again = api.objects("EvalRun", "evals")[0]  # the run with the status just written
    await reconciler.reconcile(runtime, again, LOG, caches)
    assert sum(1 for c in api.calls if c.verb == "create") == creates


async def test_a_settled_run_costs_no_request() -> None:
    run = pending_run()
    run["status"] = {"phase": "Failed", "observedGeneration": 1}
    api = FakeKubeApi(run)
    assert await reconciler.reconcile(runtime_on(api), run, LOG, h100_caches()) == "Failed"
    assert api.calls == []


async def test_a_valid_run_is_not_planned_without_the_watch_fed_caches() -> None:
    api = FakeKubeApi(pending_run())
    with pytest.raises(kopf.TemporaryError, match="caches"):
        await reconciler.reconcile(runtime_on(api), pending_run(), LOG)
    assert not [c for c in api.calls if c.verb in ("create", "patch_status")]


async def test_an_invalid_spec_is_marked_failed_once_per_generation() -> None:
    run = build_evalrun(judges=[])
    run["metadata"].update(uid="u-1", generation=1)
    api = FakeKubeApi(run)
    runtime = runtime_on(api)
    with pytest.raises(kopf.PermanentError, match="invalid EvalRun spec"):
        await reconciler.reconcile(runtime, run, LOG)
    failed = api.objects("EvalRun", "evals")[0]
    assert failed["status"]["phase"] == "Failed"
    calls = len(api.calls)
    assert await reconciler.reconcile(runtime, failed, LOG) == "Failed"  # reported: settled
    assert len(api.calls) == calls


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    """A Deployment as the watch shows it once its replica is Ready."""
    return {**obj, "status": {"replicas": 1, "readyReplicas": 1}}


def failed_for_good(job: dict[str, Any]) -> dict[str, Any]:
    """A Job as the watch shows it once its backoff limit is spent."""
    condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    return {**job, "status": {"conditions": [condition], "failed": 4}}


def oom_pod_of(job: dict[str, Any]) -> dict[str, Any]:
    """A Pod of ``job`` whose container the kernel killed at the Job's memory limit."""
    meta = job["metadata"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-abcde",
            "namespace": meta["namespace"],
            "labels": {
                **job["spec"]["template"]["metadata"]["labels"],
                "batch.kubernetes.io/job-name": meta["name"],
            },
        },
        "spec": {"containers": [{"name": container["name"], "resources": container["resources"]}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": container["name"], "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
            ],
        },
    }


def pod_lists(api: FakeKubeApi) -> int:
    return sum(1 for c in api.calls if c.verb == "list_objects" and c.kind == "Pod")


@pytest.mark.usefixtures("no_storage")
async def test_an_oom_killed_job_is_replaced_with_twice_its_memory_and_named_in_a_condition() -> None:
    run = pending_run()
    api = FakeKubeApi(run)
    runtime = runtime_on(api)
    nodes = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    await reconciler.reconcile(runtime, run, LOG, h100_caches())  # servers, Services, spec, account
    children = [*api.objects("ConfigMap"), *api.objects("ServiceAccount"), *api.objects("Service")]
    children += [ready(d) for d in api.objects("Deployment")]
    await reconciler.reconcile(runtime, api.objects("EvalRun")[0], LOG, watched_caches(children, nodes))
    (job,) = api.objects("Job")  # the generation Job, its server Ready
    assert pod_lists(api) == 0  # nothing has failed: no Pod is read
    api.put(oom_pod_of(job))

    caches = watched_caches([*children, failed_for_good(job)], nodes)
    phase = await reconciler.reconcile(runtime, api.objects("EvalRun")[0], LOG, caches)

    assert phase == "Generating" and pod_lists(api) == 1
    replacement = next(j for j in api.objects("Job") if j["metadata"]["name"] != job["metadata"]["name"])
    resources = replacement["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["memory"] == "4Gi"  # the chart's default 2Gi, doubled
    status = api.objects("EvalRun")[0]["status"]
    healthy = next(c for c in status["conditions"] if c["type"] == "JobsHealthy")
    assert healthy["reason"] == "OOMKilled" and job["metadata"]["name"] in healthy["message"]
    assert [e["type"] for e in api.events("OOMKilled")] == ["Warning"]
