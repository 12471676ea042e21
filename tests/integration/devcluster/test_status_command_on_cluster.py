"""``kubejury status`` and the operator's login, against a real API server, with exec-plugin users.

Real here: kube-apiserver with the CRD as generated, the status subresource patched by the admin
(no operator runs — the status is the one an operator would write), RBAC enforcing a namespaced
viewer Role, TokenRequest issuing the ServiceAccount token. The "cloud login helper" is a small
script named in the kubeconfig's ``user.exec`` (as EKS's ``aws eks get-token``, GKE's
``gke-gcloud-auth-plugin`` or an OIDC helper are): it prints an ``ExecCredential`` carrying that
token and records that it ran, so the tests prove the credential came through the plugin.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from devcluster import Cluster
from factories import build_evalrun
from kubejury.records.placement import PLACEMENT_EVENT_REASON, Placement, placement_event_messages
from kubejury_operator import handlers
from kubejury_operator.gateway import ApiCredentials, KubeGateway, event_manifest

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "evalruns.kubejury.io.yaml"
KUBEJURY = [sys.executable, "-m", "kubejury.cli"]
NOW = "2026-11-30T20:00:00Z"

STATUS: dict[str, Any] = {
    "phase": "Succeeded",
    "observedGeneration": 1,
    "progress": "48/48",
    "startedAt": "2026-11-30T19:50:00Z",
    "completedAt": NOW,
    "stages": {
        "generation": {
            "done": 24,
            "total": 24,
            "jobsDone": 2,
            "jobs": 2,
            "models": {"m1": {"done": 24, "total": 24}},
        },
        "judging": {"done": 24, "total": 24, "jobsDone": 2, "jobs": 2},
        "aggregation": {"done": 1, "total": 1},
    },
    "placement": {
        "m1": Placement(
            runtime="vllm",
            quantization="fp16",
            tensor_parallel_size=1,
            gpu_product="NVIDIA-L4",
            reason="fits one L4",
        ).to_json(),
    },
    "conditions": [
        {
            "type": "Succeeded",
            "status": "True",
            "reason": "ReportReady",
            "message": "The aggregated report is ready.",
            "lastTransitionTime": NOW,
            "observedGeneration": 1,
        },
    ],
    "summary": {
        "primarySeries": "primary",
        "reportUri": "s3://results/runs/ranked/report.html",
        "leader": "m1",
        "ranking": [
            {
                "rank": 1,
                "model": "m1",
                "weighted": 4.25,
                "weightedCI": [4.0, 4.5],
                "degradation": 0.1,
                "sigma": 0.3,
                "tier": "A",
            }
        ],
        "domainLeaders": {"law": "m1"},
    },
}


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: Cluster) -> Cluster:
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/evalruns.kubejury.io", "--timeout=60s")
    return kube_cluster


@pytest.fixture(scope="module")
def namespace(crd_installed: Cluster) -> Iterator[str]:
    name = f"status-cmd-{uuid.uuid4().hex[:6]}"
    crd_installed.kubectl("create", "namespace", name)
    yield name
    crd_installed.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def ranked_run(crd_installed: Cluster, namespace: str) -> str:
    """An EvalRun whose status an operator finished, written through the status subresource."""
    body = build_evalrun("ranked", namespace=namespace)
    crd_installed.kubectl("create", "-f", "-", input=json.dumps(body))
    crd_installed.kubectl(
        "patch",
        "evalrun",
        "ranked",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": STATUS}),
    )
    return "ranked"


def exec_plugin_kubeconfig(cluster: Cluster, token: str, directory: Path) -> tuple[Path, Path]:
    """A kubeconfig whose user is an exec plugin printing ``token``; and the file the plugin
    appends a line to each time it runs."""
    calls = directory / "plugin-calls.log"
    plugin = directory / "token-plugin.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(calls)!r}, 'a').write(os.environ.get('KUBERNETES_EXEC_INFO', '-')[:40] + '\\n')\n"
        f"sys.stdout.write(json.dumps({credential!r}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    path = cluster.write_token_kubeconfig("unused", directory / "exec-kubeconfig")
    config = yaml.safe_load(path.read_text())
    config["users"] = [
        {
            "name": "exec-user",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": str(plugin),
                    "args": [],
                    "interactiveMode": "Never",
                    "provideClusterInfo": False,
                }
            },
        }
    ]
    config["contexts"][0]["context"]["user"] = "exec-user"
    path.write_text(yaml.safe_dump(config))
    return path, calls


@pytest.fixture(scope="module")
def viewer_exec(
    crd_installed: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """An exec-plugin kubeconfig of a ServiceAccount that may only read EvalRuns in ``namespace``."""
    cluster = crd_installed
    cluster.kubectl("create", "serviceaccount", "viewer", "-n", namespace)
    cluster.kubectl(
        "create",
        "role",
        "evalrun-viewer",
        "-n",
        namespace,
        "--verb=get,list,watch",
        "--resource=evalruns.kubejury.io",
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "evalrun-viewer",
        "-n",
        namespace,
        "--role=evalrun-viewer",
        f"--serviceaccount={namespace}:viewer",
    )
    token = cluster.kubectl("create", "token", "viewer", "-n", namespace).strip()
    return exec_plugin_kubeconfig(cluster, token, tmp_path_factory.mktemp("exec-viewer"))


def kubejury_status(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run(
        [*KUBEJURY, "status", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_status_as_admin_tells_the_story_of_a_finished_run(
    crd_installed: Cluster, namespace: str, ranked_run: str
) -> None:
    result = kubejury_status(ranked_run, "-n", namespace, kubeconfig=crd_installed.kubeconfig)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"EvalRun {namespace}/ranked   phase: Succeeded   progress: 48/48")
    assert "judging      24/24  100.0%  2/2" in out
    assert "1× NVIDIA-L4" in out
    assert "Per model and judge\n  name  generation\n  m1    24/24\n" in out  # kept by the API server
    assert "Succeeded  True    ReportReady" in out
    assert "1     m1     4.250  [4.000, 4.500]  0.100  0.300  A" in out
    assert "report: s3://results/runs/ranked/report.html" in out


def test_status_shows_the_placement_prose_from_the_runs_placement_event(
    crd_installed: Cluster, namespace: str, ranked_run: str
) -> None:
    run = json.loads(crd_installed.kubectl("get", "evalrun", ranked_run, "-n", namespace, "-o", "json"))
    placed = Placement(
        name="m1", runtime="vllm", quantization="fp16", tensor_parallel_size=1, reason="fits one L4 at fp16"
    )
    for message in placement_event_messages([placed]):  # as the operator's gateway posts it
        event = event_manifest(run, "Normal", PLACEMENT_EVENT_REASON, message)
        crd_installed.kubectl("create", "-f", "-", input=json.dumps(event))
    result = kubejury_status(ranked_run, "-n", namespace, kubeconfig=crd_installed.kubeconfig)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.strip().startswith("m1 ") and "L4" in line)
    assert row.rstrip().endswith("fits one L4 at fp16")


def test_status_through_an_exec_plugin_user_bound_to_a_viewer_role(
    namespace: str, ranked_run: str, viewer_exec: tuple[Path, Path]
) -> None:
    kubeconfig, calls = viewer_exec
    result = kubejury_status(ranked_run, "-n", namespace, kubeconfig=kubeconfig)
    assert result.returncode == 0, result.stderr
    assert "Ranking (series primary)" in result.stdout
    assert "placed on GPUs" in result.stdout  # may not read Events: the code's meaning
    assert calls.read_text().count("\n") >= 1, "the token must come from the exec plugin"

    elsewhere = kubejury_status(ranked_run, "-n", "default", kubeconfig=kubeconfig)
    assert elsewhere.returncode == 2
    assert "refused to show EvalRun default/ranked: 403" in elsewhere.stderr
    missing = kubejury_status("no-such-run", "-n", namespace, kubeconfig=kubeconfig)
    assert missing.returncode == 2 and f"EvalRun {namespace}/no-such-run not found" in missing.stderr


def test_status_watch_follows_the_run_until_it_finishes(crd_installed: Cluster, namespace: str) -> None:
    cluster = crd_installed
    cluster.kubectl("create", "-f", "-", input=json.dumps(build_evalrun("watched", namespace=namespace)))
    running = {
        "phase": "Judging",
        "progress": "30/48",
        "stages": {"judging": {"done": 6, "total": 24, "jobsDone": 0, "jobs": 2}},
    }
    cluster.kubectl(
        "patch",
        "evalrun",
        "watched",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": running}),
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    watcher = subprocess.Popen(
        [*KUBEJURY, "status", "watched", "-n", namespace, "--watch", "--kubeconfig", str(cluster.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert watcher.stdout is not None
        first = watcher.stdout.readline()
        assert "phase: Judging" in first
        cluster.kubectl(
            "patch",
            "evalrun",
            "watched",
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": STATUS}),
        )
        out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, err
    assert "phase: Succeeded" in out and "Ranking (series primary)" in out


async def test_the_operator_logs_in_through_an_exec_plugin_kubeconfig(
    crd_installed: Cluster, namespace: str, ranked_run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kopf's login via the ``kubernetes`` client (what the operator's login handler uses when no
    in-cluster account exists) runs the exec plugin, and the gateway reads the API with the result."""
    cluster = crd_installed
    cluster.kubectl("create", "serviceaccount", "exec-operator", "-n", namespace)
    cluster.kubectl(
        "create",
        "rolebinding",
        "exec-operator",
        "-n",
        namespace,
        "--clusterrole=view",
        f"--serviceaccount={namespace}:exec-operator",
    )
    cluster.kubectl(
        "create",
        "role",
        "exec-operator-evalruns",
        "-n",
        namespace,
        "--verb=get,list,watch",
        "--resource=evalruns.kubejury.io",
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "exec-operator-evalruns",
        "-n",
        namespace,
        "--role=exec-operator-evalruns",
        f"--serviceaccount={namespace}:exec-operator",
    )
    token = cluster.kubectl("create", "token", "exec-operator", "-n", namespace).strip()
    kubeconfig, calls = exec_plugin_kubeconfig(cluster, token, tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    # The client reads KUBECONFIG once, when it is first imported (an operator process has it in its
    # environment from the start); this process may have imported it already.
    import kubernetes.config.kube_config

    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    info = handlers.login(
        kopf.Memo(), {}, logger=logging.getLogger("test-login"), settings=kopf.OperatorSettings()
    )
    assert info is not None
    assert info.server == cluster.api_url and info.token == token
    assert calls.read_text().count("\n") >= 1, "the login must run the exec plugin"

    gateway = KubeGateway(ApiCredentials.from_connection_info(info))
    try:
        run = await gateway.get("EvalRun", namespace, ranked_run)
    finally:
        await gateway.close()
    assert run is not None and run["status"]["phase"] == "Succeeded"
