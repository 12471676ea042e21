"""Hostile EvalRuns on the real control plane: admission refuses each, and the local tools say the same.

Why this module exists: a tenant holding only the chart's ``evalrun-editor`` role tried these specs
(issues 28 and 29). The API server must refuse each through the chart's admission webhook, and
``kubejury validate`` and ``kubejury plan --manifests``, given the installed chart's settings
ConfigMap as ``--settings``, must refuse the same body with the same text: a preview that shows
objects the operator would never create, or says "ok" to what admission refuses, is trusted the way
``helm template`` is, and misleads (issue 28, section 1).

The cases are :data:`factories.HOSTILE_SPECS`, one list: add a case there and every test here (and
the local tools' unit tests) runs it. Creation is
a dry run (``dryRun=All``): admission runs as for a real create, and nothing is stored, even when a
case is (wrongly) admitted.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_kube import RESULTS_URI, ensure_namespace, gpu_evalrun
from kubeapi import ApiError, KubeApi, path_of
from operator_up import NAMESPACE, RELEASE, OperatorState

from factories import HOSTILE_SPECS, Mutation
from kubejury.cli import main

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

TENANT = "e2e-tenant-refusals"
SETTINGS_CONFIGMAP = f"{RELEASE}-settings"  # the release is named like the chart: no "-kubejury"
WEBHOOK_DENIED = "denied the request: "

#: The cases, shared with the unit tests of both local tools (tests/factories.py).
HOSTILE = HOSTILE_SPECS


def benign_run(name: str) -> dict[str, Any]:
    """A run the installed chart admits: results and benchmark on its results claim (the claim and
    ``file://`` root the chart allows), weights from Hugging Face, no flag, the chart's Job image."""
    return gpu_evalrun(name, TENANT, "http://127.0.0.1:9/v1")


def hostile_run(label: str, mutate: Mutation) -> dict[str, Any]:
    body = copy.deepcopy(benign_run(f"hostile-{label}"))
    mutate(body)
    return body


async def admission_answer(api: KubeApi, body: dict[str, Any]) -> str | None:
    """The webhook's refusal of ``body`` (the text after "denied the request: "), or ``None`` when
    the API server admits it. Dry run: nothing is stored."""
    try:
        await api.request("POST", path_of("evalruns", TENANT), body, params={"dryRun": "All"})
    except ApiError as rejected:
        message = rejected.message
        assert WEBHOOK_DENIED in message, f"refused, but not by the admission webhook: {message}"
        return message.split(WEBHOOK_DENIED, 1)[1]
    return None


@pytest.fixture
async def cluster_files(api: KubeApi, kube_operator: OperatorState, tmp_path: Path) -> dict[str, Path]:
    """The installed chart's settings ConfigMap and the cluster's nodes, as a user saves them with
    kubectl, for ``--settings`` and ``--nodes``."""
    await ensure_namespace(api, TENANT)
    configmap = await api.get("configmaps", NAMESPACE, SETTINGS_CONFIGMAP)
    assert configmap is not None, f"the chart installed no ConfigMap {NAMESPACE}/{SETTINGS_CONFIGMAP}"
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump(configmap), encoding="utf-8")
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"items": await api.list("nodes")}), encoding="utf-8")
    return {"settings": settings, "nodes": nodes}


def run_validate(
    body: dict[str, Any], files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    run = files["settings"].parent / "run.yaml"
    run.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    code = main(["validate", "--settings", str(files["settings"]), str(run)])
    return code, capsys.readouterr().err


def run_plan(
    body: dict[str, Any], files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[Any], str]:
    run = files["settings"].parent / "run.yaml"
    run.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    argv = ["plan", "--evalrun", str(run), "--nodes", str(files["nodes"]), "--manifests"]
    code = main([*argv, "--settings", str(files["settings"])])
    captured = capsys.readouterr()
    return code, [d for d in yaml.safe_load_all(captured.out) if d], captured.err


async def test_the_benign_run_is_admitted_and_both_tools_pass_it_under_the_installed_charts_settings(
    api: KubeApi, cluster_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run("benign")
    assert body["spec"]["storage"]["uri"] == RESULTS_URI
    assert await admission_answer(api, body) is None
    code, err = run_validate(body, cluster_files, capsys)
    assert code == 0, err
    code, objects, err = run_plan(body, cluster_files, capsys)
    assert code == 0 and objects, err


@pytest.mark.parametrize(("label", "mutate", "field"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_each_hostile_run_is_refused_by_admission_naming_its_field_and_the_chart_value(
    label: str,
    mutate: Mutation,
    field: str,
    api: KubeApi,
    cluster_files: dict[str, Path],
) -> None:
    answer = await admission_answer(api, hostile_run(label, mutate))
    assert answer is not None, f"{label}: the API server admitted it"
    assert f"{field}: " in answer, answer
    assert "add it to the chart value security." in answer, answer


@pytest.mark.parametrize(("label", "mutate", "field"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_validate_and_plan_refuse_each_hostile_run_with_admissions_exact_text(
    label: str,
    mutate: Mutation,
    field: str,
    api: KubeApi,
    cluster_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = hostile_run(label, mutate)
    answer = await admission_answer(api, body)
    assert answer is not None, f"{label}: the API server admitted it"
    code, err = run_validate(body, cluster_files, capsys)
    assert code != 0, f"{label}: validate said ok"
    assert answer in err, f"validate: {err}\nadmission: {answer}"
    code, objects, err = run_plan(body, cluster_files, capsys)
    assert code != 0 and not objects, f"{label}: plan --manifests printed {len(objects)} object(s)"
    assert answer in err, f"plan: {err}\nadmission: {answer}"
