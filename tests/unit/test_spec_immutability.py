"""A started run's spec is immutable, at admission: the webhook says what the CRD's CEL rule
says (the API server's own refusal is in tests/integration/devcluster/test_evalrun_api_on_cluster.py)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from factories import as_kopf_body, build_evalrun, model_entry
from kubejury_operator import crd, handlers


def started(run: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(run), "status": {"phase": "Generating", "startedAt": "2026-11-30T20:00:00Z"}}


async def test_the_webhook_refuses_a_spec_edit_of_a_started_run() -> None:
    old = started(build_evalrun())
    new = build_evalrun(models=[*old["spec"]["models"], model_entry("added", parameters="8B")])
    with pytest.raises(kopf.AdmissionError) as refused:
        await handlers.validate(body=as_kopf_body(new), old=old, memo=SimpleNamespace())
    assert "spec is immutable once the run has started" in str(refused.value)


async def test_a_pending_run_may_be_edited_and_a_started_one_may_change_its_metadata() -> None:
    pending = build_evalrun()
    edited = build_evalrun(models=[*pending["spec"]["models"], model_entry("added", parameters="8B")])
    await handlers.validate(body=as_kopf_body(edited), old=pending, memo=SimpleNamespace())
    relabelled = {**build_evalrun(), "metadata": {**build_evalrun()["metadata"], "labels": {"team": "law"}}}
    await handlers.validate(
        body=as_kopf_body(relabelled), old=started(build_evalrun()), memo=SimpleNamespace()
    )


def test_the_webhook_and_the_crd_rule_give_the_same_message() -> None:
    rule = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]
    assert "oldSelf.status.startedAt" in rule["rule"] and "self.spec == oldSelf.spec" in rule["rule"]
    old, new = started(build_evalrun()), build_evalrun(maxConcurrentModels=2)
    assert crd.spec_edit_refusal(old, new) == rule["message"]
