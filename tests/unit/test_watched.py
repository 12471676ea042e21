"""The watch-fed caches' index entries: a run's children under (namespace, run label), nothing else."""

from __future__ import annotations

from typing import Any

from kubejury_operator import manifests as mf
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab
from kubejury_operator import watched


def test_a_child_is_indexed_under_its_namespace_and_run_label() -> None:
    job = {
        "metadata": {"name": "kj-r-aggregate", "namespace": "evals", "labels": vocab.labels("r", "aggregate")}
    }
    assert watched.child_entry(job) == {("evals", "r"): {"kind": None, "status": {}, **job}}


def test_objects_of_other_managers_or_without_a_run_are_not_indexed() -> None:
    foreign = {"metadata": {"name": "x", "namespace": "evals", "labels": {vocab.LABEL_RUN: "r"}}}
    runless = {
        "metadata": {"name": "y", "namespace": "evals", "labels": {vocab.LABEL_MANAGED_BY: vocab.MANAGED_BY}}
    }
    assert watched.child_entry(foreign) is None and watched.child_entry(runless) is None


def test_caches_answer_like_a_list_and_are_absent_without_every_index() -> None:
    pod = {"metadata": {"name": "p", "namespace": "evals", "labels": vocab.labels("r", "server")}}
    indexes: dict[str, dict[Any, list[dict[str, Any]]]] = {
        name: {} for name in watched.CHILD_INDEXES.values()
    }
    indexes[watched.CHILD_INDEXES["Pod"]] = {("evals", "r"): [pod]}
    indexes[watched.NODE_INDEX] = {None: [{"metadata": {"name": "n"}}]}
    caches = watched.Caches.from_handler_kwargs(indexes)
    assert caches is not None
    assert caches.children_of("Pod", "evals", "r") == [pod]
    assert caches.children_of("Job", "evals", "r") == []
    assert [n["metadata"]["name"] for n in caches.all_nodes()] == ["n"]
    assert watched.Caches.from_handler_kwargs({}) is None


def test_a_childs_run_is_its_evalrun_owner_and_a_run_being_deleted_is_not_reconciled() -> None:
    owner = {
        "apiVersion": f"{vocab.API_GROUP}/{vocab.API_VERSION}",
        "kind": "EvalRun",
        "name": "r",
        "uid": "u",
    }
    job = {"metadata": {"name": "j", "namespace": "evals", "ownerReferences": [owner]}}
    assert watched.owner_run(job) == ("evals", "r")
    assert watched.owner_run({"metadata": {"name": "j", "namespace": "evals"}}) is None
    run = {"metadata": {"name": "r", "namespace": "evals"}}
    index = watched.evalrun_entry(run)
    assert watched.latest_run({k: [v] for k, v in index.items()}, ("evals", "r")) == run
    deleting = {"metadata": {**run["metadata"], "deletionTimestamp": "2026-11-30T20:00:00Z"}}
    assert watched.latest_run({("evals", "r"): [deleting]}, ("evals", "r")) is None
    assert watched.latest_run({}, ("evals", "r")) is None


def test_the_cache_keeps_what_the_observers_read_and_nothing_else() -> None:
    """Observed from the trimmed entry exactly as from the whole object; templates are dropped."""
    from kubejury.records.placement import Placement
    from kubejury_operator.observed import (
        deployment_state,
        job_state,
        pod_scheduling_problems,
        servers_bringup_seconds,
        servers_ready_since,
    )

    ref = vocab.RunRef("r", "evals", "uid-1")
    placement = Placement(runtime="vllm", quantization="fp8", tensor_parallel_size=1, gpu_product="NVIDIA-L4")
    endpoint = vocab.Endpoint(
        key="m-a", name="a", source="hf://o/a", served_model="a", runtime="vllm", placement=placement
    )
    deployment = mf.model_deployment(ref, endpoint, 1, opsettings.WorkloadSettings())
    deployment["status"] = {
        "readyReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
    }
    job = mf.aggregation_job(ref, opsettings.WorkloadSettings(), vocab.JobStorage(uri="s3://b/runs"))
    job["metadata"]["labels"][vocab.LABEL_USES_SERVER] = "m-a"
    job["status"] = {
        "startTime": "2026-12-01T10:00:00Z",
        "completionTime": "2026-12-01T10:01:00Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    pod = {
        "kind": "Pod",
        "metadata": {
            **deployment["spec"]["template"]["metadata"],
            "name": "p",
            "namespace": "evals",
            "creationTimestamp": "2026-12-01T09:58:00Z",
        },
        "spec": deployment["spec"]["template"]["spec"],
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}],
        },
    }
    (dep_entry,) = (watched.child_entry(deployment) or {}).values()
    (job_entry,) = (watched.child_entry(job) or {}).values()
    (pod_entry,) = (watched.child_entry(pod) or {}).values()
    assert deployment_state(dep_entry) == deployment_state(deployment)
    assert job_state(job_entry) == job_state(job) and job_state(job_entry).finished_at is not None
    for read in (pod_scheduling_problems, servers_ready_since, servers_bringup_seconds):
        assert read([pod_entry]) == read([pod])
    assert servers_bringup_seconds([pod_entry]) == {"m-a": 120.0}
    assert "template" not in dep_entry.get("spec", {}) and "spec" not in pod_entry
    assert len(str(pod_entry)) < len(str(pod)) / 2


def test_only_model_servers_pods_are_watched_and_indexed() -> None:
    server = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "evals", "labels": vocab.labels("r", "server")},
    }
    job_pod = {
        "kind": "Pod",
        "metadata": {"name": "q", "namespace": "evals", "labels": vocab.labels("r", "generate")},
    }
    assert watched.pod_entry(server) == watched.child_entry(server) and watched.pod_entry(job_pod) is None
    selectors = watched.watch_label_selectors()
    assert selectors[("", "v1", "pods")] == (
        f"{vocab.LABEL_MANAGED_BY}={vocab.MANAGED_BY},{vocab.LABEL_COMPONENT}=server"
    )
    assert selectors[("batch", "v1", "jobs")] == f"{vocab.LABEL_MANAGED_BY}={vocab.MANAGED_BY}"
    assert set(selectors) == {watched.RESOURCES[kind] for kind in watched.CHILD_INDEXES}


def test_a_node_is_kept_as_placement_reads_it_without_its_heartbeats() -> None:
    import json
    from pathlib import Path

    from kubejury.placement.gpu_nodes import parse_node

    path = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "mixed-cluster.json"
    for node in json.loads(path.read_text())["items"]:
        node = {**node, "status": {**node.get("status", {}), "conditions": [{"type": "Ready"}]}}
        (entry,) = watched.node_entry(node).values()
        assert parse_node(entry) == parse_node(node)
        assert "conditions" not in entry["status"]


def test_a_childs_change_matters_only_when_what_the_planner_reads_of_it_changes() -> None:
    job = {"kind": "Job", "metadata": {"name": "j"}, "status": {"active": 1}}
    more_pods = {**job, "status": {"active": 2, "ready": 1}}
    done = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert watched.trigger_state("Job", job) == watched.trigger_state("Job", more_pods)
    assert watched.trigger_state("Job", job) != watched.trigger_state("Job", done)
    dep = {"kind": "Deployment", "spec": {"replicas": 1}, "status": {"replicas": 1}}
    available = {**dep, "status": {"replicas": 1, "availableReplicas": 0, "updatedReplicas": 1}}
    ready = {**dep, "status": {"readyReplicas": 1}}
    assert watched.trigger_state("Deployment", dep) == watched.trigger_state("Deployment", available)
    assert watched.trigger_state("Deployment", dep) != watched.trigger_state("Deployment", ready)
