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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from devcluster import Cluster
from factories import build_evalrun
from kubejury_operator import handlers

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
def running_operator(kube_cluster: Cluster) -> Iterator[None]:
    """kopf with kubejury's handlers, in a thread, reconciling every second."""
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/evalruns.kubejury.io", "--timeout=60s")
    env = {
        "KUBEJURY_KUBE_SERVER": kube_cluster.api_url,
        "KUBEJURY_KUBE_TOKEN": operator_token(kube_cluster),
        "KUBEJURY_KUBE_INSECURE": "true",  # loopback dev cluster; the token is what the audit log names
    }
    registry = handlers.register(kopf.OperatorRegistry(), interval=1.0, env=env)
    stop = threading.Event()

    def main() -> None:
        asyncio.run(kopf.operator(registry=registry, clusterwide=True, standalone=True, stop_flag=stop))

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
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


def test_a_finished_run_makes_no_api_request_over_many_reconcile_intervals(
    kube_cluster: Cluster, running_operator: None
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
        wait_for(  # kopf has seen the run: its finalizer is on
            "the operator's finalizer",
            lambda: (
                handlers.FINALIZER
                in (
                    kube_cluster.get_json("evalrun", "done", "-n", namespace)["metadata"].get("finalizers")
                    or []
                )
            ),
        )
        time.sleep(2.0)
        since = time.time()
        time.sleep(8.0)  # eight reconcile intervals
        assert requests_in(kube_cluster, namespace, since) == collections.Counter()
        status = kube_cluster.get_json("evalrun", "done", "-n", namespace)["status"]
        assert status["phase"] == "Succeeded" and status["summary"] == {"ranking": ["qwen"]}
    finally:
        kube_cluster.kubectl("patch", "evalrun", "done", "-n", namespace, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
