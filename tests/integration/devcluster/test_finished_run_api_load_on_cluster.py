"""A finished EvalRun costs no API request, counted in the real API server's audit log.

The operator's handlers run in kopf in this process (a reconcile every second), against a real
kube-apiserver, with a ServiceAccount token of their own so that the audit log tells their
requests apart. An EvalRun whose status says it finished is left alone: no list of children, no
Secret read, no status patch, however many timer ticks pass (issue 10 findings 8 and 14). Nothing
is simulated; the run's status is written with kubectl as the operator would have left it.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from devcluster import Cluster
from factories import build_evalrun
from kubejury_operator import handlers, kopf_setup

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "evalruns.kubejury.io.yaml"
ACCOUNT = "kj-load-operator"
USER = f"system:serviceaccount:kube-system:{ACCOUNT}"


def operator_token(cluster: Cluster) -> str:
    cluster.kubectl("create", "serviceaccount", ACCOUNT, "-n", "kube-system", check=False)
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        ACCOUNT,
        "--clusterrole=cluster-admin",
        f"--serviceaccount=kube-system:{ACCOUNT}",
        check=False,
    )
    return cluster.kubectl("create", "token", ACCOUNT, "-n", "kube-system").strip()


@pytest.fixture
def interval() -> float:
    return 1.0


@pytest.fixture
def start_operator(kube_cluster: Cluster, interval: float) -> Iterator[Callable[[], None]]:
    """Starts kopf with kubejury's handlers, in a thread, reconciling every ``interval`` seconds."""
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/evalruns.kubejury.io", "--timeout=60s")
    env = {
        "KUBEJURY_KUBE_SERVER": kube_cluster.api_url,
        "KUBEJURY_KUBE_TOKEN": operator_token(kube_cluster),
        "KUBEJURY_KUBE_INSECURE": "true",  # loopback dev cluster; the token is what the audit log names
    }
    registry = handlers.register(kopf.OperatorRegistry(), interval=interval, env=env)
    stop = threading.Event()

    def main() -> None:
        asyncio.run(kopf.operator(registry=registry, clusterwide=True, standalone=True, stop_flag=stop))

    thread = threading.Thread(target=main, daemon=True)
    try:
        yield thread.start
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=30)


def stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def requests_in(cluster: Cluster, namespace: str, since: float) -> collections.Counter[str]:
    return collections.Counter(
        f"{e.get('verb')} {(e.get('objectRef') or {}).get('resource')}"
        for e in cluster.audit_events()
        if (e.get("user") or {}).get("username") == USER
        and (e.get("objectRef") or {}).get("namespace") == namespace
        and stamp(e["stageTimestamp"]) > since
    )


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def kopf_took_on(run: dict[str, Any]) -> bool:
    """kopf has written its finalizer (since issue 26 it stores no diff-base annotation)."""
    return kopf_setup.FINALIZER in (run["metadata"].get("finalizers") or [])


def test_a_finished_run_makes_no_api_request_over_many_reconcile_intervals(
    kube_cluster: Cluster, start_operator: Callable[[], None]
) -> None:
    namespace = f"load-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", namespace)
    try:
        body = build_evalrun("done", namespace=namespace)
        kube_cluster.kubectl("create", "-f", "-", input=json.dumps(body))
        finished = {
            "phase": "Succeeded",
            "observedGeneration": 1,
            "startedAt": "2026-11-30T20:00:00Z",
            "completedAt": "2026-11-30T20:30:00Z",
            "summary": {"ranking": ["qwen"]},
            "conditions": [],
        }
        kube_cluster.kubectl(
            "patch", "evalrun", "done", "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": finished}),
        )  # fmt: skip
        start_operator()  # the run is finished before the operator first sees it
        wait_for(  # kopf has taken the run on: its finalizer is written
            "kopf's finalizer",
            lambda: kopf_took_on(kube_cluster.get_json("evalrun", "done", "-n", namespace)),
        )
        time.sleep(3.0)
        annotations = kube_cluster.get_json("evalrun", "done", "-n", namespace)["metadata"].get("annotations")
        assert "kubejury.io/last-handled-configuration" not in (annotations or {})  # the lean EvalRun
        since = time.time()
        time.sleep(8.0)  # eight reconcile intervals
        assert requests_in(kube_cluster, namespace, since) == collections.Counter()
        status = kube_cluster.get_json("evalrun", "done", "-n", namespace)["status"]
        assert status["phase"] == "Succeeded" and status["summary"] == {"ranking": ["qwen"]}
    finally:
        kube_cluster.kubectl("patch", "evalrun", "done", "-n", namespace, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_an_active_run_reads_its_children_and_the_nodes_from_watches_not_lists(
    kube_cluster: Cluster, start_operator: Callable[[], None]
) -> None:
    """Children and Nodes come from kopf's watch-fed indexes: while a run is being reconciled every
    second, the operator lists nothing, neither in the run's namespace nor Nodes cluster-wide."""
    namespace = f"load-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", namespace)
    try:
        body = build_evalrun("active", namespace=namespace)
        kube_cluster.kubectl("create", "-f", "-", input=json.dumps(body))
        start_operator()
        wait_for(  # the first reconciles created the run's children
            "the run's spec ConfigMap",
            lambda: kube_cluster.kubectl(
                "get", "configmap", "-n", namespace, "-o", "name", check=False
            ).strip(),
        )
        time.sleep(2.0)
        since = time.time()
        time.sleep(8.0)  # eight reconcile intervals
        seen = requests_in(kube_cluster, namespace, since)
        lists = {k: v for k, v in seen.items() if k.startswith(("list ", "watch "))}
        assert lists == {}, seen
        node_lists = [
            e
            for e in kube_cluster.audit_events()
            if (e.get("user") or {}).get("username") == USER
            and e.get("verb") == "list"
            and (e.get("objectRef") or {}).get("resource") == "nodes"
            and stamp(e["stageTimestamp"]) > since
        ]
        assert node_lists == []
        status = kube_cluster.get_json("evalrun", "active", "-n", namespace).get("status") or {}
        assert status.get("phase") not in (None, "Failed"), status  # reconciled all along
    finally:
        kube_cluster.kubectl("patch", "evalrun", "active", "-n", namespace, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.mark.parametrize("interval", [120.0])
def test_a_childs_change_reconciles_its_run_without_waiting_for_the_timer(
    kube_cluster: Cluster, start_operator: Callable[[], None]
) -> None:
    """With a 120 s timer, the servers' Deployments becoming ready (KWOK readies their Pods) make
    the operator reconcile the run and create its generation Job within seconds."""
    namespace = f"load-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", namespace)
    try:
        body = build_evalrun("events", namespace=namespace)
        kube_cluster.kubectl("create", "-f", "-", input=json.dumps(body))
        start_operator()
        created = time.monotonic()
        wait_for(
            "the generation Job",
            lambda: kube_cluster.kubectl(
                "get",
                "jobs",
                "-n",
                namespace,
                "-l",
                "kubejury.io/component=generate",
                "-o",
                "name",
                check=False,
            ).strip(),
            timeout=60.0,
        )
        assert time.monotonic() - created < 60.0  # the timer's second tick is 120 s away
    finally:
        kube_cluster.kubectl("patch", "evalrun", "events", "-n", namespace, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
