"""The real Kueue v0.17.0 works on the dev cluster: it admits Jobs and Deployment pods against quota.

Issue 25 tests kubejury's EvalRuns against a real Kueue; this file proves the Kueue they run against is
real and working here before any of kubejury is involved. One cluster with Kueue installed (session
fixture ``kueue_cluster``: the release manifests of ``scripts/build_kueue.sh``, the manager a local
process, see ``devcluster.kueue``) serves every test; each test makes its own ClusterQueue, LocalQueue
and namespace. Quota admission never looks at nodes, so KWOK's GPU nodes are enough; the real scheduler
then places what Kueue admitted on the H100 nodes its ResourceFlavor names.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster import Cluster, ClusterError, install_kueue, processes, start_cluster
from devcluster.kueue import NAMESPACE, PROCESS, SERVICE_ACCOUNT, condition_status

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

H100 = "NVIDIA-H100-80GB-HBM3"  # the product label cluster/nodes.yaml gives the KWOK H100 nodes
KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
GPU = "nvidia.com/gpu"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def create(cluster: Cluster, item: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    where = ["-n", namespace] if namespace else []
    created: dict[str, Any] = json.loads(
        cluster.kubectl("create", *where, "-f", "-", "-o", "json", input=json.dumps(item))
    )
    return created


@dataclass(frozen=True)
class Flavors:
    h100: str
    cpu: str


@dataclass(frozen=True)
class Queue:
    namespace: str
    cluster_queue: str
    local_queue: str


@pytest.fixture(scope="module")
def flavors(kueue_cluster: Cluster) -> Iterator[Flavors]:
    """An H100 flavour (the KWOK H100 nodes' product label, tolerating their GPU taint) and a CPU one."""
    suffix = uuid.uuid4().hex[:6]
    names = Flavors(h100=f"h100-{suffix}", cpu=f"cpu-{suffix}")
    create(
        kueue_cluster,
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": names.h100},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": H100},
                "tolerations": [
                    {"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"}
                ],
            },
        },
    )
    create(kueue_cluster, {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": names.cpu}})
    yield names
    kueue_cluster.kubectl("delete", "resourceflavors.kueue.x-k8s.io", names.h100, names.cpu, "--wait=false")


@pytest.fixture
def make_queue(kueue_cluster: Cluster, flavors: Flavors) -> Iterator[Callable[[int], Queue]]:
    """A namespace with a LocalQueue on a new ClusterQueue of ``gpus`` H100 GPUs (and 16 CPUs, 64 GiB)."""
    made: list[Queue] = []

    def make(gpus: int) -> Queue:
        suffix = uuid.uuid4().hex[:6]
        queue = Queue(namespace=f"kueue-{suffix}", cluster_queue=f"gpus-{suffix}", local_queue="team")
        kueue_cluster.kubectl("create", "namespace", queue.namespace)
        made.append(queue)
        create(kueue_cluster, cluster_queue(queue.cluster_queue, flavors, gpus))
        create(
            kueue_cluster,
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": queue.local_queue},
                "spec": {"clusterQueue": queue.cluster_queue},
            },
            queue.namespace,
        )
        wait_for(
            f"ClusterQueue {queue.cluster_queue} to be Active",
            lambda: condition_status(cluster_queue_now(kueue_cluster, queue), "Active") == "True",
        )
        return queue

    yield make
    for queue in made:
        kueue_cluster.kubectl("delete", "namespace", queue.namespace, "--wait=false")
        kueue_cluster.kubectl("delete", "clusterqueues.kueue.x-k8s.io", queue.cluster_queue, "--wait=false")


def cluster_queue(name: str, flavors: Flavors, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": flavors.cpu,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "16"},
                                {"name": "memory", "nominalQuota": "64Gi"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": flavors.h100, "resources": [{"name": GPU, "nominalQuota": str(gpus)}]}
                    ],
                },
            ],
        },
    }


def pod_spec(gpus: int) -> dict[str, Any]:
    requests = {"cpu": "100m", "memory": "64Mi", **({GPU: str(gpus)} if gpus else {})}
    return {
        "containers": [
            {
                "name": "main",
                "image": "kubejury.local/never-pulled:0",
                "command": ["true"],
                "resources": {"requests": requests, "limits": {GPU: str(gpus)} if gpus else {}},
            }
        ]
    }


def job(name: str, gpus: int, queue: str | None) -> dict[str, Any]:
    """A plain Job, not suspended by us: Kueue's webhook suspends it when it names a queue."""
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", **pod_spec(gpus)}},
        },
    }


def deployment(name: str, gpus: int, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(gpus)},
        },
    }


def cluster_queue_now(cluster: Cluster, queue: Queue) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get_json("clusterqueues.kueue.x-k8s.io", queue.cluster_queue)
    return found


def workload_of(cluster: Cluster, namespace: str, owner_uid: str) -> dict[str, Any] | None:
    """The Workload Kueue made for a Job or Pod (label ``kueue.x-k8s.io/job-uid``), once it exists."""
    items = cluster.get_json(
        "workloads.kueue.x-k8s.io", "-n", namespace, "-l", f"{JOB_UID_LABEL}={owner_uid}"
    )["items"]
    return items[0] if items else None


def workload_condition(cluster: Cluster, namespace: str, owner_uid: str, kind: str) -> dict[str, Any] | None:
    workload = workload_of(cluster, namespace, owner_uid) or {}
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            found: dict[str, Any] = condition
            return found
    return None


def admitted(cluster: Cluster, namespace: str, owner_uid: str) -> bool:
    condition = workload_condition(cluster, namespace, owner_uid, "Admitted")
    return bool(condition and condition["status"] == "True")


def reserved(cluster: Cluster, queue: Queue, flavor: str, resource: str) -> str | None:
    """``status.flavorsReservation`` of the ClusterQueue for one flavour and resource."""
    for usage in cluster_queue_now(cluster, queue).get("status", {}).get("flavorsReservation") or []:
        if usage["name"] == flavor:
            for item in usage.get("resources") or []:
                if item["name"] == resource:
                    return str(item["total"])
    return None


def counts(cluster: Cluster, queue: Queue) -> tuple[int, int]:
    """The ClusterQueue's (admittedWorkloads, pendingWorkloads)."""
    status = cluster_queue_now(cluster, queue).get("status") or {}
    return int(status.get("admittedWorkloads", 0)), int(status.get("pendingWorkloads", 0))


def pods_of(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return items


def test_kueue_v0_17_0_runs_from_its_release_manifests_with_webhooks_at_a_loopback_url(
    kueue_cluster: Cluster,
) -> None:
    install = kueue_cluster.kueue
    assert install is not None
    assert processes.running_pid(kueue_cluster.state_dir, PROCESS) is not None
    log = (kueue_cluster.state_dir / "logs" / f"{PROCESS}.log").read_text()
    assert '"gitVersion":"v0.17.0"' in log
    base = f"https://127.0.0.1:{install.webhook_port}/"
    ca_bundle = base64.b64encode(kueue_cluster.ca_file.read_bytes()).decode()
    crds = [c for c in kueue_cluster.get_json("crd")["items"] if c["spec"]["group"] == "kueue.x-k8s.io"]
    assert len(crds) == 11
    for crd in crds:
        assert condition_status(crd, "Established") == "True", crd["metadata"]["name"]
    converted = {
        c["metadata"]["name"].split(".")[0] for c in crds if c["spec"]["conversion"]["strategy"] == "Webhook"
    }
    assert converted == {"clusterqueues", "cohorts", "localqueues", "multikueueclusters", "workloads"}
    for crd in crds:
        if crd["metadata"]["name"].split(".")[0] in converted:
            assert crd["spec"]["conversion"]["webhook"]["clientConfig"] == {
                "url": f"{base}convert",
                "caBundle": ca_bundle,
            }
    for kind, count in (("mutatingwebhookconfiguration", 21), ("validatingwebhookconfiguration", 22)):
        webhooks = kueue_cluster.get_json(
            kind, f"kueue-{kind.replace('webhookconfiguration', '')}-webhook-configuration"
        )["webhooks"]
        assert len(webhooks) == count
        for webhook in webhooks:
            assert webhook["clientConfig"]["url"].startswith(base), webhook["name"]
            assert webhook["clientConfig"]["caBundle"] == ca_bundle
            assert webhook["failurePolicy"] == "Fail"
        pod_hook = next(w for w in webhooks if w["name"].endswith("pod.kb.io"))
        assert pod_hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "kube-system",
            "kueue-system",
        ]


def test_a_job_asking_8_gpus_is_admitted_and_one_asking_4_more_waits_until_the_first_is_gone(
    kueue_cluster: Cluster, make_queue: Callable[[int], Queue], flavors: Flavors
) -> None:
    queue = make_queue(8)
    ns = queue.namespace
    first = create(kueue_cluster, job("first", 8, queue.local_queue), ns)
    uid = first["metadata"]["uid"]
    assert first["spec"]["suspend"] is True  # Kueue's mutating webhook suspended it
    wait_for("the 8-GPU Job's Workload to be Admitted", lambda: admitted(kueue_cluster, ns, uid))
    workload = workload_of(kueue_cluster, ns, uid)
    assert workload is not None
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == queue.cluster_queue
    assert admission["podSetAssignments"][0]["flavors"] == {
        GPU: flavors.h100,
        "cpu": flavors.cpu,
        "memory": flavors.cpu,
    }
    wait_for(
        "Kueue to unsuspend it",
        lambda: kueue_cluster.get_json("job", "first", "-n", ns)["spec"]["suspend"] is False,
    )
    # Its pod carries the flavour's node label and toleration, and the real scheduler puts it on an H100.
    pod = wait_for(
        "its pod to be scheduled",
        lambda: [p for p in pods_of(kueue_cluster, ns, "job-name=first") if p["spec"].get("nodeName")],
    )[0]
    assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == H100
    assert pod["spec"]["nodeName"].startswith("gpu-h100-")

    second = create(kueue_cluster, job("second", 4, queue.local_queue), ns)
    second_uid = second["metadata"]["uid"]
    pending = wait_for(
        "the 4-GPU Job to be pending for quota",
        lambda: workload_condition(kueue_cluster, ns, second_uid, "QuotaReserved"),
    )
    assert pending["status"] == "False"
    assert pending["reason"] == "Pending"
    assert (
        f"insufficient unused quota for {GPU} in flavor {flavors.h100}, 4 more needed" in pending["message"]
    )
    assert kueue_cluster.get_json("job", "second", "-n", ns)["spec"]["suspend"] is True
    assert pods_of(kueue_cluster, ns, "job-name=second") == []
    # The ClusterQueue's status follows (Kueue updates it asynchronously): 8 of 8 GPUs reserved.
    wait_for(
        "the ClusterQueue to count 1 admitted and 1 pending", lambda: counts(kueue_cluster, queue) == (1, 1)
    )
    assert reserved(kueue_cluster, queue, flavors.h100, GPU) == "8"

    kueue_cluster.kubectl("delete", "job", "first", "-n", ns, "--cascade=background")
    wait_for(
        "the 4-GPU Job to be admitted once the quota is free", lambda: admitted(kueue_cluster, ns, second_uid)
    )
    wait_for("the reservation to be 4 GPUs", lambda: reserved(kueue_cluster, queue, flavors.h100, GPU) == "4")


def test_a_deployment_pod_is_gated_until_its_workload_is_admitted_then_runs_on_an_h100_node(
    kueue_cluster: Cluster, make_queue: Callable[[int], Queue], flavors: Flavors
) -> None:
    queue = make_queue(4)
    ns = queue.namespace
    holder = create(kueue_cluster, job("holder", 4, queue.local_queue), ns)
    wait_for(
        "the Job holding the 4 GPUs to be admitted",
        lambda: admitted(kueue_cluster, ns, holder["metadata"]["uid"]),
    )

    create(kueue_cluster, deployment("server", 4, queue.local_queue), ns)
    pod = wait_for("the server's pod", lambda: pods_of(kueue_cluster, ns, "app=server"))[0]
    assert ADMISSION_GATE in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    pod_uid = pod["metadata"]["uid"]
    pending = wait_for(
        "the pod's Workload to be pending",
        lambda: workload_condition(kueue_cluster, ns, pod_uid, "QuotaReserved"),
    )
    assert (pending["status"], pending["reason"]) == ("False", "Pending")
    assert not kueue_cluster.get_json("pod", pod["metadata"]["name"], "-n", ns)["spec"].get("nodeName")

    kueue_cluster.kubectl("delete", "job", "holder", "-n", ns, "--cascade=background")
    wait_for("the pod's Workload to be admitted", lambda: admitted(kueue_cluster, ns, pod_uid))

    def running_ungated() -> dict[str, Any] | None:
        now: dict[str, Any] = kueue_cluster.get_json("pod", pod["metadata"]["name"], "-n", ns)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in now["status"].get("conditions") or []
        )
        return now if ready and not now["spec"].get("schedulingGates") else None

    ungated = wait_for("the pod to be ungated, scheduled and Ready", running_ungated)
    assert ungated["spec"]["nodeName"].startswith("gpu-h100-")
    assert ungated["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == H100
    wait_for("the reservation to be 4 GPUs", lambda: reserved(kueue_cluster, queue, flavors.h100, GPU) == "4")


def test_a_job_naming_a_local_queue_that_does_not_exist_is_held_with_a_condition_saying_so(
    kueue_cluster: Cluster, make_queue: Callable[[int], Queue]
) -> None:
    ns = make_queue(8).namespace
    orphan = create(kueue_cluster, job("orphan", 1, "no-such-queue"), ns)
    held = wait_for(
        "the Workload's condition",
        lambda: workload_condition(kueue_cluster, ns, orphan["metadata"]["uid"], "QuotaReserved"),
    )
    assert (held["status"], held["reason"]) == ("False", "Inadmissible")
    assert held["message"] == "LocalQueue no-such-queue doesn't exist"
    assert orphan["spec"]["suspend"] is True


def test_a_job_without_the_queue_name_label_is_left_to_run_as_before(
    kueue_cluster: Cluster, make_queue: Callable[[int], Queue]
) -> None:
    ns = make_queue(8).namespace
    plain = create(kueue_cluster, job("plain", 0, None), ns)
    assert plain["spec"]["suspend"] is False
    wait_for("the Job controller to create its pod", lambda: pods_of(kueue_cluster, ns, "job-name=plain"))
    assert workload_of(kueue_cluster, ns, plain["metadata"]["uid"]) is None


def test_the_manager_acts_as_its_service_account_and_the_release_rbac_refuses_it_nothing(
    kueue_cluster: Cluster,
) -> None:
    user = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
    events = [e for e in kueue_cluster.audit_events() if e.get("user", {}).get("username") == user]
    assert events, "no request of Kueue's ServiceAccount in the audit log"
    # RBAC's verdict, not the response code: creating in a namespace being deleted is a 403 too.
    refused = [
        (e["verb"], e.get("objectRef", {}).get("resource"), e.get("objectRef", {}).get("namespace"))
        for e in events
        if e.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid"
    ]
    assert refused == []


def test_a_manager_that_exits_is_named_with_its_log_and_leaves_no_webhook_behind(
    kueue_cluster: Cluster, tmp_path: Path
) -> None:
    """A cluster of its own: Kueue's webhooks fail closed, so a failed install must not leave them."""
    assert kueue_cluster.kueue is not None
    build = tmp_path / "kueue-broken"
    (build / "bin").mkdir(parents=True)
    shutil.copytree(Path(kueue_cluster.kueue.build_dir) / "manifests", build / "manifests")
    (build / "bin" / "kueue").write_text("#!/bin/sh\necho 'kueue: cannot start here' >&2\nexit 3\n")
    (build / "bin" / "kueue").chmod(0o755)
    cluster = start_cluster(state_dir=tmp_path / "state")
    try:
        with pytest.raises(ClusterError, match=r"(?s)kueue exited while waiting.*cannot start here"):
            install_kueue(cluster, build, timeout=60)
        assert processes.running_pid(cluster.state_dir, PROCESS) is None
        hooks = [
            item["metadata"]["name"]
            for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
            for item in cluster.get_json(kind)["items"]
        ]
        assert not [name for name in hooks if name.startswith("kueue-")]
        # Jobs are admitted as before.
        cluster.kubectl("create", "-n", "default", "-f", "-", input=json.dumps(job("after", 0, None)))
    finally:
        cluster.stop()
