"""The objects ``kubejury plan --manifests`` renders, applied to a real control plane.

What a Service routes to and which Pods the scheduler leaves Pending come from the API server's
label selection and the real kube-scheduler, not from our builders, so they are checked here: a
model server's Service must select its server Pod and never a Job Pod, and a Job Pod the scheduler
cannot place must not be reported as a model server waiting for a node. Simulated, as everywhere on
this cluster: the kubelets (KWOK runs the server Pod; Job Pods are left to the scheduler alone).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import Cluster
from factories import build_evalrun_yaml, model_entry
from kubejury_operator import vocabulary as vocab
from kubejury_operator.observed import pod_scheduling_problems
from kubejury_operator.preview import render

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
    name = f"rendered-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def test_services_select_servers_only_and_a_waiting_job_pod_is_not_a_waiting_server(
    kube_cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        build_evalrun_yaml(
            "labels",
            models=[model_entry("small", "hf://Qwen/Qwen3-8B", parameters="8B")],
            judges=[model_entry("judge", "https://judge.example.com/v1", runtime="openai")],
            storage={"uri": "s3://results/runs"},
        ),
        encoding="utf-8",
    )
    # A Job Pod no node can hold (10000 CPUs), beside a server Pod that fits a GPU node.
    settings = {"KUBEJURY_JOB_RESOURCES": json.dumps({"requests": {"cpu": "10000"}})}
    objects = render(str(run_file), kube_cluster.get_json("nodes"), settings, namespace)
    wanted = [o for o in objects if o["kind"] in ("ConfigMap", "ServiceAccount", "Deployment", "Service")]
    wanted += [
        o
        for o in objects
        if o["kind"] == "Job" and o["metadata"]["labels"][vocab.LABEL_COMPONENT] == "generate"
    ]
    for obj in wanted:
        obj["metadata"].pop("ownerReferences")  # no EvalRun here: the garbage collector would delete them
    kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(wanted))

    run_selector = (
        f"{vocab.LABEL_RUN}=labels,{vocab.LABEL_MANAGED_BY}={vocab.MANAGED_BY}"  # what the operator lists
    )

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = kube_cluster.get_json("pods", "-n", namespace, "-l", run_selector)[
            "items"
        ]
        return items

    def settled() -> list[dict[str, Any]] | None:
        found = pods()
        by_component = {p["metadata"]["labels"][vocab.LABEL_COMPONENT]: p for p in found}
        server, job = by_component.get("server"), by_component.get("generate")
        if server and job and server["status"].get("phase") == "Running" and _unschedulable(job):
            return found
        return None

    found = wait_for("a Running server Pod and an unschedulable Job Pod", settled)
    assert pod_scheduling_problems(found) == {}, "a Job Pod waiting for a node was reported as a server"

    (service,) = [o for o in wanted if o["kind"] == "Service"]
    selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
    selected = kube_cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
    assert [p["metadata"]["labels"][vocab.LABEL_COMPONENT] for p in selected] == ["server"]
