"""What the API server does with EvalRuns and the operator's writes, on a real control plane.

These behaviours come from kube-apiserver itself, so they are checked against it (the CRD as
generated, a real ResourceQuota, real merge patches of the status subresource):

* a started run's spec is immutable: the CRD's CEL transition rule refuses the edit at
  admission, with or without the operator's webhook (issue 10, finding 10);
* a change the API refuses (here a quota's 403) lands in the run's ``ApplyFailed`` condition,
  naming the object and quoting the API, and the status is still written (finding 6);
* a status read back after a merge patch has no ``None`` values, and the operator does not patch
  it again when nothing changed (finding 8).

Nothing is simulated here; the operator's handler is called directly with its real gateway.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import Cluster
from devcluster.cluster import ClusterError
from factories import build_evalrun
from kubejury_operator import apply
from kubejury_operator import status as st
from kubejury_operator.gateway import ApiCredentials, KubeGateway
from kubejury_operator.reconcile import Action, Plan

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "evalruns.kubejury.io.yaml"
NOW = "2026-11-30T20:00:00Z"


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: Cluster) -> Cluster:
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/evalruns.kubejury.io", "--timeout=60s")
    return kube_cluster


@pytest.fixture
def namespace(crd_installed: Cluster) -> Iterator[str]:
    name = f"evalrun-api-{uuid.uuid4().hex[:6]}"
    crd_installed.kubectl("create", "namespace", name)
    yield name
    crd_installed.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def credentials(crd_installed: Cluster) -> ApiCredentials:
    """A bearer token of a cluster-admin ServiceAccount, as the operator's gateway would use one."""
    crd_installed.kubectl("create", "serviceaccount", "api-tester", "-n", "kube-system", check=False)
    crd_installed.kubectl(
        "create",
        "clusterrolebinding",
        "api-tester",
        "--clusterrole=cluster-admin",
        "--serviceaccount=kube-system:api-tester",
        check=False,
    )
    token = crd_installed.kubectl("create", "token", "api-tester", "-n", "kube-system").strip()
    return ApiCredentials(server=crd_installed.api_url, token=token, ca_path=str(crd_installed.ca_file))


def create_run(cluster: Cluster, namespace: str, name: str = "run") -> dict[str, Any]:
    body = build_evalrun(name, namespace=namespace)
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    got: dict[str, Any] = cluster.get_json("evalrun", name, "-n", namespace)
    return got


def patch(cluster: Cluster, namespace: str, body: dict[str, Any], *extra: str) -> str:
    return cluster.kubectl(
        "patch", "evalrun", "run", "-n", namespace, "--type=merge", "-p", json.dumps(body), *extra
    )


ADDED_MODEL = {"name": "added", "source": "hf://org/added", "parameters": "8B"}


def test_a_started_runs_spec_edit_is_refused_by_the_api_server(
    crd_installed: Cluster, namespace: str
) -> None:
    cluster = crd_installed
    run = create_run(cluster, namespace)
    models = [*run["spec"]["models"], ADDED_MODEL]
    patch(cluster, namespace, {"spec": {"models": models}})  # still Pending: editing is fine
    patch(cluster, namespace, {"status": {"phase": "Generating", "startedAt": NOW}}, "--subresource=status")

    with pytest.raises(ClusterError) as refused:
        patch(cluster, namespace, {"spec": {"models": run["spec"]["models"]}})
    assert "spec is immutable once the run has started" in str(refused.value)
    stored = cluster.get_json("evalrun", "run", "-n", namespace)
    assert [m["name"] for m in stored["spec"]["models"]] == [m["name"] for m in models]

    patch(cluster, namespace, {"metadata": {"labels": {"team": "law"}}})  # metadata stays editable
    patch(cluster, namespace, {"status": {"phase": "Judging"}}, "--subresource=status")  # and status


async def test_a_quota_refusal_lands_in_a_condition_naming_the_job_and_the_status_is_written(
    crd_installed: Cluster, namespace: str, credentials: ApiCredentials
) -> None:
    cluster = crd_installed
    cluster.kubectl("create", "quota", "no-jobs", "-n", namespace, "--hard=count/jobs.batch=0")
    run = create_run(cluster, namespace)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "kj-run-gen-qwen-primary", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            }
        },
    }
    decided = Plan(
        actions=(Action("create", "Job", "kj-run-gen-qwen-primary", manifest=job),),
        status={"phase": "Provisioning", "observedGeneration": 1, "conditions": [], "startedAt": NOW},
        events=(),
    )
    async with KubeGateway(credentials) as gw:
        await apply.apply_plan(gw, run, decided, {}, logging.getLogger("test"))

    status = cluster.get_json("evalrun", "run", "-n", namespace)["status"]
    assert status["phase"] == "Provisioning"
    (failed,) = [c for c in status["conditions"] if c["type"] == st.APPLY_FAILED]
    assert failed["status"] == "True", failed
    assert failed["reason"] == "Forbidden", failed
    assert "create Job/kj-run-gen-qwen-primary" in failed["message"], failed
    assert "exceeded quota: no-jobs" in failed["message"], failed


class CountingGateway(KubeGateway):
    """The real gateway, counting status patches."""

    status_patches = 0

    async def patch_status(self, kind: str, namespace: str, name: str, status: Any) -> None:
        self.status_patches += 1
        await super().patch_status(kind, namespace, name, status)


async def test_an_unchanged_status_with_empty_fields_is_not_patched_again(
    crd_installed: Cluster, namespace: str, credentials: ApiCredentials
) -> None:
    cluster = crd_installed
    run = create_run(cluster, namespace)
    pending = {
        "phase": "Pending",
        "observedGeneration": 1,
        "conditions": [],
        "startedAt": None,  # what run_status writes before the run starts
        "completedAt": None,
        "stages": {"generation": {"done": 0, "total": 4}},
    }
    decided = Plan(actions=(), status=pending, events=())
    async with CountingGateway(credentials) as gw:
        await apply.apply_plan(gw, run, decided, {}, logging.getLogger("test"))
        for _ in range(3):  # later reconciles read the status back from the API
            stored = cluster.get_json("evalrun", "run", "-n", namespace)
            await apply.apply_plan(gw, stored, decided, stored["status"], logging.getLogger("test"))
        assert gw.status_patches == 1
