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
from kubejury_operator import reconciler, run_storage
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
