"""The operator admits and runs an EvalRun with ``spec.budget`` (issue 27): the admission webhook
accepts it, and the reconciler places it and reads its ``sequential.json`` — nothing is refused,
and no budget is silently ignored (the planner's looks: test_reconcile_budget.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from factories import build_evalrun, watched_caches
from kubejury_operator import reconciler, run_storage
from kubejury_operator.gateway import ApiCredentials
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.testing import FakeKubeApi
from kubejury_operator.validation import validate_evalrun

LOG = logging.getLogger("test")
REPO = Path(__file__).resolve().parents[2]


def budgeted_run() -> dict[str, Any]:
    run = build_evalrun(budget={"goal": "leading-group", "maxQuestions": 100})
    run["metadata"].update(uid="u-1", generation=1)
    return run


def test_admission_accepts_a_budget() -> None:
    assert validate_evalrun(budgeted_run()) == []


async def test_the_reconciler_runs_a_budgeted_run_and_reads_its_sequential_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    monkeypatch.setattr(run_storage, "read_progress_and_summary", lambda *a, **k: ({}, None))
    monkeypatch.setattr(run_storage, "read_sequential_document", lambda *a, **k: reads.append("read"))
    run = budgeted_run()
    api = FakeKubeApi(run)
    runtime = OperatorRuntime(
        settings=WorkloadSettings(), credentials=ApiCredentials(server="https://127.0.0.1:1")
    )
    runtime._gateway = api
    nodes = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    caches = watched_caches(nodes=nodes)
    phase = await reconciler.reconcile(runtime, run, LOG, caches)
    assert phase == "Provisioning"
    status = api.objects("EvalRun", "evals")[0]["status"]
    # before the first look: the goal, nothing decided (a null "looks" is dropped by the merge patch)
    assert status["budget"] == {"goal": "leading-group", "looksDone": 0, "models": {}}
    assert {c.kind for c in api.calls if c.verb == "create"} >= {"Deployment", "Service"}
    await reconciler.reconcile(runtime, api.objects("EvalRun", "evals")[0], LOG, caches)
    assert reads == ["read"]  # read once: no look Job has succeeded since
