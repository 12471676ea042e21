"""The operator refuses an EvalRun with ``spec.budget`` (sequential waves run in local mode only):
the admission webhook names the field, and without the webhook the reconciler marks the run
Failed with the same message instead of asking every question."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

from factories import build_evalrun
from kubejury_operator import reconciler
from kubejury_operator.gateway import ApiCredentials
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.testing import FakeKubeApi
from kubejury_operator.validation import admission_message, validate_evalrun

LOG = logging.getLogger("test")


def budgeted_run() -> dict[str, Any]:
    run = build_evalrun(budget={"goal": "leading-group", "maxQuestions": 100})
    run["metadata"].update(uid="u-1", generation=1)
    return run


def test_admission_refuses_a_budget_naming_the_field() -> None:
    message = admission_message(validate_evalrun(budgeted_run()))
    assert "spec.budget: sequential budgets run in local mode only" in message


def test_a_run_without_a_budget_is_admitted() -> None:
    run = budgeted_run()
    del run["spec"]["budget"]
    assert validate_evalrun(run) == []


async def test_without_the_webhook_the_reconciler_marks_a_budgeted_run_failed() -> None:
    run = budgeted_run()
    api = FakeKubeApi(run)
    runtime = OperatorRuntime(
        settings=WorkloadSettings(), credentials=ApiCredentials(server="https://127.0.0.1:1")
    )
    runtime._gateway = api
    with pytest.raises(kopf.PermanentError, match=r"spec\.budget: sequential budgets"):
        await reconciler.reconcile(runtime, run, LOG)
    status = api.objects("EvalRun", "evals")[0]["status"]
    assert status["phase"] == "Failed"
    assert not [c for c in api.calls if c.verb == "create"]
