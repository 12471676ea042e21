"""``make operator-up`` / ``make operator-down``: the chart installed by helm, the operator as its ServiceAccount.

Why this module exists: the operator must be tested as it is really installed. ``up``:

1. creates the results volume the chart's file:// storage mode uses (a hostPath
   PersistentVolume under ``<state>/volumes/`` pre-bound to the claim ``kubejury-results`` in the
   release namespace; :func:`ensure_results_claim` adds the same claim in other namespaces);
2. runs ``helm upgrade --install`` of ``charts/kubejury`` into namespace ``kubejury`` with the real
   helm binary, watching every namespace, with the one development-only value
   ``webhook.developmentURL=https://127.0.0.1:<port>`` (no cluster network: the API server calls
   the webhook on loopback, over TLS, with the chart-generated CA);
3. asks the TokenRequest API for a token of the chart's ServiceAccount and writes a kubeconfig
   with it (``<state>/operator/kubeconfig``): the operator holds no other credential, so the
   chart's RBAC is what the API server enforces;
4. starts ``kubejury-operator`` as a local process built from the chart's own Deployment pod
   template (:mod:`podexec`: its args, its ``envFrom`` settings ConfigMap, its webhook-TLS Secret and
   results claim mounted at the template's paths in a private mount namespace). Host-level
   overrides, because the process shares the host's network: the liveness and metrics ports are
   free ports, and ``KUBEJURY_RECONCILE_INTERVAL`` may be shortened for tests;
5. starts the simulated kubelet and stub model servers (``kubelet_runner``).

KWOK also runs the chart's operator Deployment pod (Running on a KWOK node, nothing behind it);
the process above is the operator. ``down`` stops the processes from their pid files (checking
each pid's command line first), never by name.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import podexec
from kubeapi import ApiError, KubeApi, KubeConfig

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubejury"
RELEASE = "kubejury"
NAMESPACE = "kubejury"
RESULTS_CLAIM = "kubejury-results"
RESULTS_MOUNT = "/var/lib/kubejury/results"
HELM = Path(os.environ.get("HELM", str(Path.home() / ".cache" / "kubejury" / "bin" / "helm")))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class OperatorState:
    """What ``up`` started, saved as ``<state>/operator/state.json`` for ``down`` and the tests."""

    state_dir: str  # the cluster's (admin kubeconfig)
    work_dir: str  # ours: operator/, kubelet/, volumes/ — never under /tmp (Job pods mount /tmp)
    webhook_port: int
    liveness_port: int
    metrics_port: int
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    operator_pid: int = 0
    agent_pid: int = 0
    helm_values: dict[str, str] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return Path(self.work_dir) / "operator"

    @property
    def results_dir(self) -> Path:
        return Path(self.work_dir) / "volumes" / RESULTS_CLAIM

    @property
    def kubelet_dir(self) -> Path:
        return Path(self.work_dir) / "kubelet"

    @property
    def operator_log(self) -> Path:
        return self.dir / "operator.log"

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "state.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, work_dir: Path) -> OperatorState | None:
        path = work_dir / "operator" / "state.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))


# ------------------------------------------------------------------------------ cluster objects


async def ensure_results_claim(api: KubeApi, namespace: str, host_dir: Path) -> None:
    """A claim ``kubejury-results`` in ``namespace``, bound to a hostPath volume on ``host_dir``."""
    await ensure_host_claim(api, namespace, RESULTS_CLAIM, host_dir, labels={"kubejury.io/e2e": "results"})


async def ensure_host_claim(
    api: KubeApi, namespace: str, claim_name: str, host_dir: Path, labels: dict[str, str] | None = None
) -> None:
    """A ReadWriteMany claim ``claim_name`` in ``namespace``, pre-bound to a hostPath volume on
    ``host_dir`` (the volume named ``<claim>-<namespace>``), once it is Bound."""
    host_dir.mkdir(parents=True, exist_ok=True)
    pv_name = f"{claim_name}-{namespace}"
    with contextlib.suppress(ApiError):
        await api.create("namespaces", None, {"metadata": {"name": namespace}})
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": labels or {}},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(host_dir), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim_name},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "10Gi"}},
        },
    }
    for resource, ns, body in (("persistentvolumes", None, pv), ("persistentvolumeclaims", namespace, pvc)):
        try:
            await api.create(resource, ns, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
    existing = await api.get("persistentvolumes", None, pv_name)
    if (existing or {}).get("spec", {}).get("hostPath", {}).get("path") != str(host_dir):
        raise RuntimeError(
            f"PersistentVolume {pv_name} points at another directory than {host_dir}; this cluster was "
            "used with another work directory: start a fresh cluster (make cluster-down cluster-up)"
        )
    for _ in range(120):  # the PV controller binds the pre-bound pair
        claim = await api.get("persistentvolumeclaims", namespace, claim_name)
        if (claim or {}).get("status", {}).get("phase") == "Bound":
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"claim {namespace}/{claim_name} was not bound")


def helm_install(kubeconfig: Path, values: dict[str, str]) -> None:
    argv = [str(HELM), "upgrade", "--install", RELEASE, str(CHART), "--namespace", NAMESPACE]
    argv += ["--create-namespace", "--kubeconfig", str(kubeconfig)]
    for key, value in values.items():
        # --set parses numbers, booleans and {a,b} lists; a URL's ":" must stay a string.
        argv += ["--set-string" if "://" in value else "--set", f"{key}={value}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"helm failed ({done.returncode}): {done.stderr.strip()}")


def helm_uninstall(kubeconfig: Path) -> None:
    """Remove the release (its webhook configuration and admission policies with it), so a cluster
    shared with later tests is not left calling a webhook whose operator has stopped."""
    argv = [str(HELM), "uninstall", RELEASE, "--namespace", NAMESPACE, "--kubeconfig", str(kubeconfig)]
    argv += ["--ignore-not-found", "--wait", "--timeout", "120s"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"helm uninstall failed ({done.returncode}): {done.stderr.strip()}")


async def service_account_token(api: KubeApi, name: str, hours: int = 24) -> str:
    """A token of ``kubejury/<name>`` from the TokenRequest API (what ``kubectl create token`` does)."""
    for _ in range(60):
        if await api.get("serviceaccounts", NAMESPACE, name) is not None:
            break
        await asyncio.sleep(0.5)
    answer = await api.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": hours * 3600},
        },
    )
    return str(answer["status"]["token"])


async def operator_process(
    api: KubeApi, state: OperatorState, sa_kubeconfig: Path, reconcile_interval: float | None
) -> podexec.ProcessSpec:
    """The chart's operator container as a local process (module docstring, step 4)."""
    deployment = await api.get("deployments", NAMESPACE, f"{RELEASE}-operator")
    if deployment is None:
        raise RuntimeError(f"helm did not create Deployment {NAMESPACE}/{RELEASE}-operator")
    template = deployment["spec"]["template"]
    pod = {
        "metadata": {"name": f"{RELEASE}-operator-local", "namespace": NAMESPACE},
        "spec": template["spec"],
    }
    refs, _claims = podexec.references(pod)
    data: dict[tuple[str, str], dict[str, str] | None] = {}
    for kind, name in refs:
        obj = await api.get("secrets" if kind == "Secret" else "configmaps", NAMESPACE, name)
        if obj is None:
            data[(kind, name)] = None
        else:
            data[(kind, name)] = (
                podexec.decoded_secret(obj) if kind == "Secret" else dict(obj.get("data") or {})
            )
    container = dict(template["spec"]["containers"][0])
    container["args"] = [
        f"--liveness=http://127.0.0.1:{state.liveness_port}/healthz" if a.startswith("--liveness") else a
        for a in container.get("args") or []
    ]
    overrides = {
        "KUBECONFIG": str(sa_kubeconfig),
        "KUBEJURY_METRICS_PORT": str(state.metrics_port),
        "KUBEJURY_WEBHOOK_ADDR": "127.0.0.1",
    }
    if reconcile_interval is not None:
        overrides["KUBEJURY_RECONCILE_INTERVAL"] = str(reconcile_interval)
    container["env"] = [
        *(container.get("env") or []),
        *({"name": k, "value": v} for k, v in overrides.items()),
    ]
    return podexec.process_spec(
        pod,
        container,
        lookup=lambda kind, _ns, name: data.get((kind, name)),
        pod_dir=str(state.dir / "pod"),
        claim_path=lambda _ns, claim: str(state.results_dir),
        base_env={
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        },
        keep_visible=(sys.prefix, str(REPO)),  # a checkout under /tmp stays visible under the pod's /tmp
    )


# ---------------------------------------------------------------------------------- processes


def _alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and is ours (its command line names ``marker``; a zombie is not alive,
    and an empty command line — mid-``exec`` — counts as ours)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return not cmdline.strip() or marker in cmdline


def start_operator(state: OperatorState) -> int:
    """Start (or restart) the operator process from the saved spec; returns its pid."""
    with state.operator_log.open("ab") as out:
        process = subprocess.Popen(
            state.argv,
            env=state.env,
            cwd=str(state.dir),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    state.operator_pid = process.pid
    state.save()
    return process.pid


def wait_operator_ready(state: OperatorState, timeout_s: float = 90.0) -> None:
    """Until kopf's liveness endpoint and (when the chart enables it) the webhook port answer."""
    webhook = state.helm_values.get("webhook.enabled", "true") != "false"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(state.operator_pid, "kubejury-operator"):
            tail = state.operator_log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the operator exited; log tail:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{state.liveness_port}/healthz", timeout=2):
                pass
            if webhook:
                with socket.create_connection(("127.0.0.1", state.webhook_port), timeout=2):
                    pass
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the operator was not ready in {timeout_s}s; see {state.operator_log}")


def kill_operator(state: OperatorState, sig: signal.Signals = signal.SIGKILL) -> None:
    if state.operator_pid and _alive(state.operator_pid, "kubejury-operator"):
        os.killpg(state.operator_pid, sig)
        for _ in range(100):
            if not _alive(state.operator_pid, "kubejury-operator"):
                break
            time.sleep(0.1)


def start_agent(state: OperatorState, kubeconfig: Path, quality: dict[str, int]) -> int:
    state.kubelet_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve().parent / "kubelet_runner.py")]
    argv += [
        "--kubeconfig",
        str(kubeconfig),
        "--workdir",
        str(state.kubelet_dir),
        "--quality",
        json.dumps(quality),
    ]
    with (state.kubelet_dir / "agent.log").open("ab") as out:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    state.agent_pid = process.pid
    state.save()
    return process.pid


def down(work_dir: Path) -> None:
    state = OperatorState.load(work_dir)
    if state is None:
        return
    for pid, marker in ((state.operator_pid, "kubejury-operator"), (state.agent_pid, "kubelet_runner.py")):
        if pid and _alive(pid, marker):
            os.killpg(pid, signal.SIGTERM)
            for _ in range(100):
                if not _alive(pid, marker):
                    break
                time.sleep(0.1)
            if _alive(pid, marker):
                os.killpg(pid, signal.SIGKILL)
    state.operator_pid = state.agent_pid = 0
    state.save()


async def up(
    state_dir: Path,
    *,
    work_dir: Path | None = None,
    reconcile_interval: float | None = None,
    quality: dict[str, int] | None = None,
    extra_values: dict[str, str] | None = None,
    start_kubelet: bool = True,
) -> OperatorState:
    """Install the chart and start the operator and the node agent (module docstring)."""
    work_dir = work_dir or state_dir
    if work_dir.resolve().is_relative_to("/tmp"):
        raise ValueError(f"work_dir {work_dir} is under /tmp, which every Job pod mounts over")
    down(work_dir)
    kubeconfig = state_dir / "kubeconfig"
    admin = KubeConfig.load(kubeconfig)
    state = OperatorState(
        state_dir=str(state_dir),
        work_dir=str(work_dir),
        webhook_port=free_port(),
        liveness_port=free_port(),
        metrics_port=free_port(),
    )
    state.dir.mkdir(parents=True, exist_ok=True)
    state.helm_values = {
        "webhook.port": str(state.webhook_port),
        "webhook.developmentURL": f"https://127.0.0.1:{state.webhook_port}",
        "storage.resultsClaimName": RESULTS_CLAIM,
        "storage.resultsMountPath": RESULTS_MOUNT,
        **(extra_values or {}),
    }
    async with KubeApi(admin) as api:
        await ensure_results_claim(api, NAMESPACE, state.results_dir)
        await asyncio.to_thread(helm_install, kubeconfig, state.helm_values)
        token = await service_account_token(api, f"{RELEASE}")
        sa_kubeconfig = state.dir / "kubeconfig"
        sa_kubeconfig.write_text(admin.with_token(token).to_yaml("kubejury-operator"))
        sa_kubeconfig.chmod(0o600)
        spec = await operator_process(api, state, sa_kubeconfig, reconcile_interval)
    for directory in spec.directories:
        Path(directory).mkdir(parents=True, exist_ok=True)
    for file, text in spec.files.items():
        Path(file).parent.mkdir(parents=True, exist_ok=True)
        Path(file).write_text(text, encoding="utf-8")
    state.argv = podexec.wrapped_argv(spec)
    state.env = spec.env
    state.save()
    start_operator(state)
    if start_kubelet:
        start_agent(state, kubeconfig, quality or {})
    wait_operator_ready(state)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="kubejury: helm install + the operator as its ServiceAccount"
    )
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--state", type=Path, default=REPO / ".cluster")
    parser.add_argument("--reconcile-interval", type=float, default=None)
    args = parser.parse_args(argv)
    state_dir = args.state.resolve()
    if args.command == "down":
        down(state_dir)
        return 0
    state = asyncio.run(up(state_dir, reconcile_interval=args.reconcile_interval))
    print(f"operator pid {state.operator_pid} (log {state.operator_log}); node agent pid {state.agent_pid}")
    print(
        f"webhook https://127.0.0.1:{state.webhook_port}; metrics http://127.0.0.1:{state.metrics_port}/metrics"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
