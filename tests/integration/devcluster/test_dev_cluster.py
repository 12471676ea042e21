"""The dev cluster is a real control plane: its nodes, scheduler, controllers, RBAC and audit log.

Starts the cluster from the default nodes file (session fixture ``kube_cluster``) and checks what the
operator's tests rely on. Simulated here, as everywhere on this cluster: the nodes' kubelets (KWOK).
KWOK makes Deployment pods Running and Ready but leaves Job pods alone (the e2e suite's kubelet runner
runs them), which one test below asserts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import Cluster, load_nodes

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def namespace(kube_cluster: Cluster) -> Iterator[str]:
    """A namespace of its own per run, so the tests also pass on a long-lived ``make cluster-up`` cluster."""
    name = f"devcluster-smoke-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def gpu_pool(kube_cluster: Cluster, product_part: str) -> list[dict[str, Any]]:
    """Nodes of the nodes file whose GFD product label contains ``product_part``."""
    return [
        n
        for n in load_nodes(kube_cluster.nodes_file)
        if product_part in n["metadata"]["labels"].get("nvidia.com/gpu.product", "")
    ]


def test_every_node_of_the_file_is_ready_with_its_gpu_labels_taints_and_capacity(
    kube_cluster: Cluster,
) -> None:
    wanted = {n["metadata"]["name"]: n for n in load_nodes(kube_cluster.nodes_file)}
    live = {n["metadata"]["name"]: n for n in kube_cluster.get_json("nodes")["items"]}
    assert set(live) == set(wanted)
    for name, node in live.items():
        ready = [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready == ["True"], name
        expected = wanted[name]
        for key, value in expected["metadata"].get("labels", {}).items():
            assert node["metadata"]["labels"].get(key) == value, (name, key)
        assert node["status"]["allocatable"] == expected["status"]["allocatable"], name
        taints = {(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints", [])}
        for taint in expected["spec"].get("taints", []):
            assert (taint["key"], taint.get("value"), taint["effect"]) in taints, name
    gpu_nodes = [n for n in wanted.values() if "nvidia.com/gpu" in n["status"]["allocatable"]]
    assert {n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in gpu_nodes} >= {
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-A100-SXM4-40GB",
        "NVIDIA-L4",
        "NVIDIA-B200",
    }
    assert all(
        ("nvidia.com/gpu", "present", "NoSchedule")
        in {(t["key"], t.get("value"), t["effect"]) for t in n["spec"]["taints"]}
        for n in gpu_nodes
    )


def gpu_deployment(name: str, namespace: str, product: str, gpus: int) -> dict[str, Any]:
    """A model-server-like Deployment: GPU limit, GFD product nodeSelector, GPU taint toleration."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": product},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "server",
                            "image": "vllm/vllm-openai:latest",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def test_gpu_deployment_is_scheduled_on_a_matching_node_and_becomes_ready(
    kube_cluster: Cluster, namespace: str
) -> None:
    l4_nodes = {n["metadata"]["name"]: n for n in gpu_pool(kube_cluster, "L4")}
    product = next(iter(l4_nodes.values()))["metadata"]["labels"]["nvidia.com/gpu.product"]
    kube_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(gpu_deployment("gpu-server", namespace, product, 1))
    )

    def available() -> bool:
        status = kube_cluster.get_json("deployment", "gpu-server", "-n", namespace).get("status", {})
        return bool(status.get("readyReplicas") == 1)

    wait_for("the GPU Deployment to be ready", available)
    (pod,) = kube_cluster.get_json("pods", "-n", namespace, "-l", "app=gpu-server")["items"]
    assert pod["spec"]["nodeName"] in l4_nodes
    assert pod["status"]["phase"] == "Running"

    # The garbage collector removes the ReplicaSet and its pods once the Deployment is gone.
    kube_cluster.kubectl("delete", "deployment", "gpu-server", "-n", namespace, "--wait=false")
    wait_for(
        "the garbage collector to remove the Deployment's pods",
        lambda: (
            not kube_cluster.get_json("pods,replicasets", "-n", namespace, "-l", "app=gpu-server")["items"]
        ),
    )


def test_a_pod_needing_more_gpus_than_any_matching_node_has_stays_unschedulable(
    kube_cluster: Cluster, namespace: str
) -> None:
    l4_nodes = gpu_pool(kube_cluster, "L4")
    product = l4_nodes[0]["metadata"]["labels"]["nvidia.com/gpu.product"]
    most = max(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in l4_nodes)
    kube_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(gpu_deployment("too-big", namespace, product, most + 1))
    )

    def unschedulable_pod() -> list[dict[str, Any]]:
        pods = kube_cluster.get_json("pods", "-n", namespace, "-l", "app=too-big")["items"]
        return [
            p
            for p in pods
            if any(c.get("reason") == "Unschedulable" for c in p.get("status", {}).get("conditions", []))
        ]

    (pending,) = wait_for("the scheduler to report the pod unschedulable", unschedulable_pod)
    assert "Insufficient nvidia.com/gpu" in json.dumps(pending["status"]["conditions"])
    assert not pending["spec"].get("nodeName")
    kube_cluster.kubectl("delete", "deployment", "too-big", "-n", namespace)


def test_kwok_does_not_run_job_pods(kube_cluster: Cluster, namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "left-alone", "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "stage", "image": "kubejury:dev", "command": ["true"]}],
                }
            },
        },
    }
    kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(job))

    def scheduled_pod() -> dict[str, Any] | None:
        pods = kube_cluster.get_json("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=left-alone")
        scheduled = [p for p in pods["items"] if p["spec"].get("nodeName")]
        return scheduled[0] if scheduled else None

    pod = wait_for("the Job controller to create a pod and the scheduler to place it", scheduled_pod)
    time.sleep(5)  # KWOK acts within a second on pods it manages
    pod = kube_cluster.get_json("pod", pod["metadata"]["name"], "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert not pod["status"].get("containerStatuses")
    status = kube_cluster.get_json("job", "left-alone", "-n", namespace).get("status", {})
    assert not status.get("succeeded") and not status.get("failed")


def test_rbac_denies_an_unprivileged_user_and_the_audit_log_records_it(
    kube_cluster: Cluster, namespace: str
) -> None:
    assert kube_cluster.kubectl("auth", "can-i", "list", "pods", "-n", namespace).strip() == "yes"
    denied = kube_cluster.kubectl(
        "auth", "can-i", "list", "pods", "-n", namespace, "--as=mallory", check=False
    )
    assert denied.strip() == "no"
    result = kube_cluster.kubectl("get", "secrets", "-n", namespace, "--as=mallory", check=False)
    assert result == ""

    def audit_denial() -> list[dict[str, Any]]:
        return [
            e
            for e in kube_cluster.audit_events()
            if e.get("impersonatedUser", {}).get("username") == "mallory"
            and e.get("verb") == "list"
            and e.get("objectRef", {}).get("resource") == "secrets"
            and e.get("objectRef", {}).get("namespace") == namespace
            and e.get("responseStatus", {}).get("code") == 403
        ]

    (event,) = wait_for("the audit log to record the 403", audit_denial, timeout=30)
    assert event["user"]["username"] == "kubernetes-admin"
    assert event["level"] == "Metadata"


def test_service_account_tokens_are_issued_and_authenticate(
    kube_cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    wait_for(
        "the ServiceAccount controller to create the namespace's default ServiceAccount",
        lambda: kube_cluster.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False),
    )
    token = kube_cluster.kubectl("create", "token", "default", "-n", namespace).strip()
    config = kube_cluster.write_token_kubeconfig(token, tmp_path / "sa-kubeconfig")
    whoami = json.loads(kube_cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=config))
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:default"


def test_the_api_server_reports_the_pinned_kubernetes_release(kube_cluster: Cluster) -> None:
    """Charts' kubeVersion constraints and clients read this; an unstamped build says v0.0.0-master."""
    go_mod = (Path(__file__).resolve().parents[3] / "cluster" / "kube" / "go.mod").read_text()
    (pinned,) = [
        line.split()[1] for line in go_mod.splitlines() if line.strip().startswith("k8s.io/kubernetes v")
    ]
    versions = json.loads(kube_cluster.kubectl("version", "-o", "json"))
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert versions["clientVersion"]["gitVersion"] == pinned
    assert versions["serverVersion"]["minor"] == pinned.split(".")[1]


def test_kubectl_get_nodes_output_is_a_nodes_file(kube_cluster: Cluster, tmp_path: Path) -> None:
    """What a real cluster prints can start the dev cluster: same nodes, labels, taints and resources."""
    dumped = tmp_path / "nodes.json"
    dumped.write_text(kube_cluster.kubectl("get", "nodes", "-o", "json"))
    original = {n["metadata"]["name"]: n for n in load_nodes(kube_cluster.nodes_file)}
    reloaded = {n["metadata"]["name"]: n for n in load_nodes(dumped)}
    assert set(reloaded) == set(original)
    for name, node in reloaded.items():
        assert original[name]["metadata"]["labels"].items() <= node["metadata"]["labels"].items()
        assert node["spec"].get("taints", []) == original[name]["spec"].get("taints", [])
        assert node["status"]["allocatable"] == original[name]["status"]["allocatable"]
        assert set(node["status"]) == {"capacity", "allocatable"}
