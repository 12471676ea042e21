"""Fixtures for the e2e tests on the real control plane (docs/testing.md, "The e2e suite").

One cluster per session (``kube_cluster``, devcluster), one helm release and operator process per
test module (``kube_operator``, :mod:`operator_up`; uninstalled after the module) with the simulated
kubelet and stub model servers beside it (:mod:`kubelet_runner` names every simulated part). Each test works in its own namespace.
At the end of the session the API load per EvalRun, read from the audit log, is printed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_kube import API_LOAD, QUALITY, api_load_table
from kubeapi import KubeApi, KubeConfig
from operator_up import OperatorState, down, helm_uninstall, up

from devcluster import Cluster

#: Seconds between two reconciles of one EvalRun (the chart's default is 15; tests want minutes).
RECONCILE_INTERVAL_S = 2.0


@pytest.fixture(scope="module")
def kube_operator(kube_cluster: Cluster) -> Iterator[OperatorState]:
    """helm install + the operator as the chart's ServiceAccount + the simulated kubelet, per test
    module; afterwards the release is uninstalled, so the tests that share the cluster later (its
    own releases, its own admission policies) never meet a webhook whose operator has stopped."""
    # Never under /tmp: every Job pod mounts an emptyDir over /tmp, and its volumes live here.
    # One per cluster, shared with `make operator-up` on the same cluster (its volumes' host paths
    # are in the cluster's PersistentVolumes), and never under /tmp, which Job pods mount over.
    state_dir = kube_cluster.state_dir.resolve()
    work = state_dir
    if state_dir.is_relative_to("/tmp"):
        digest = hashlib.sha1(str(state_dir).encode()).hexdigest()[:10]
        work = Path.home() / ".cache" / "kubejury" / "e2e" / f"work-{digest}"
    try:
        state = asyncio.run(
            up(
                kube_cluster.state_dir,
                work_dir=work,
                reconcile_interval=RECONCILE_INTERVAL_S,
                quality=QUALITY,
            )
        )
        API_LOAD.audit_log = kube_cluster.audit_log
        yield state
    finally:
        down(work)
        helm_uninstall(kube_cluster.kubeconfig)
        if work != state_dir and not os.environ.get("KUBEJURY_E2E_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
async def api(kube_cluster: Cluster) -> AsyncIterator[KubeApi]:
    """The API as the cluster admin (the tests' own view; the operator has only its token)."""
    async with KubeApi(KubeConfig.load(kube_cluster.kubeconfig)) as client:
        yield client


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Issue 8, test 8: API requests per minute per EvalRun, by verb and resource (a figure, no assert)."""
    if API_LOAD.audit_log is None or not API_LOAD.runs:
        return
    terminalreporter.section("kubejury operator API load per EvalRun (audit log)")
    for line in api_load_table(API_LOAD.audit_log, API_LOAD.runs):
        terminalreporter.write_line(line)
