"""Start and stop the dev cluster: real etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, with KWOK simulating the nodes of a nodes file.

What is real here: the API server (RBAC and Node authorization, the admission chain of a normal
cluster incl. mutating/validating webhooks and ValidatingAdmissionPolicy, audit log), etcd, every
default controller (Job, Deployment/ReplicaSet, garbage collector, namespace, ServiceAccount and
token controllers, ...) and the scheduler. What is simulated, and nothing else:

1. The kubelet of every node: KWOK keeps nodes Ready (heartbeats, Leases) and marks scheduled pods
   Running and Ready — except pods owned by a Job, whose phase the test suite's kubelet runner sets
   from a real process's exit code (tests/e2e; see :mod:`devcluster.kwok_config`).
2. Model-server pods: Running/Ready by KWOK as above; stub servers answer for them (tests/e2e).
3. Cluster DNS, resolved to loopback by the test suite (tests/e2e).

All state lives in one directory (``.cluster/`` for ``make cluster-up``, a pytest tmp dir for the
session fixture): pki/, kubeconfig, audit.log, logs/, pids/, cluster.json. Every port is chosen free
at start, so several clusters can run side by side. Stopping kills only processes this directory's
pid files name and whose start time still matches (never by name).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devcluster import processes, realnode
from devcluster.kueue import KueueInstall, KueuePlan, apply_kueue_crds, build_kueue, install_kueue, stop_kueue
from devcluster.kwok_config import stages_dir, write_kwok_config
from devcluster.nodes import load_nodes
from devcluster.pki import (
    ADMIN,
    APISERVER_KUBELET_CLIENT,
    CONTROLLER_MANAGER,
    FRONT_PROXY_CLIENT,
    KWOK,
    SCHEDULER,
    ClientIdentity,
    Pki,
    ensure_client,
    ensure_pki,
)
from devcluster.processes import ClusterError as ClusterError

REPO = Path(__file__).resolve().parents[2]
DEFAULT_NODES_FILE = REPO / "cluster" / "nodes.yaml"
BUILD_SCRIPT = REPO / "scripts" / "build_kube.sh"

SERVICE_CIDR = "10.96.0.0/16"
#: The annotation every node of a nodes file carries (KWOK's own convention for the nodes it plays).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node=fake"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: Admission plugins on top of the API server's defaults (which already include NamespaceLifecycle,
#: LimitRanger, ServiceAccount, DefaultTolerationSeconds, PodSecurity, Priority, ResourceQuota,
#: MutatingAdmissionWebhook, ValidatingAdmissionWebhook and ValidatingAdmissionPolicy, listed
#: again here so the intent is visible).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "DefaultTolerationSeconds",
    "NodeRestriction",
    "OwnerReferencesPermissionEnforcement",
    "PodSecurity",
    "Priority",
    "ResourceQuota",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
)
#: Every request at Metadata level: user, verb, resource, namespace, name and response code.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
START_TIMEOUT = float(os.environ.get("KUBEJURY_CLUSTER_START_TIMEOUT", "240"))
STOP_TIMEOUT = processes.STOP_TIMEOUT
KUBECTL_TIMEOUT = 120.0


def build_bins() -> Path:
    """The directory with the built binaries, building them first if needed (``make kube-bins``)."""
    return processes.built(BUILD_SCRIPT, "KUBEJURY_KUBE_BIN")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Component:
    """One control-plane process: its name (log and pid file), binary and arguments."""

    name: str
    binary: str
    args: tuple[str, ...]


@dataclass
class Cluster:
    """A running dev cluster, started by :func:`start_cluster` or found by :func:`attach`."""

    state_dir: Path
    bin_dir: Path
    nodes_file: Path
    api_url: str
    ports: Mapping[str, int] = field(default_factory=dict)
    #: A real node runs beside the KWOK ones (:mod:`devcluster.realnode`; its state under node/).
    has_real_node: bool = False
    #: Kueue is installed and its manager runs (:mod:`devcluster.kueue`; its state under kueue/).
    kueue: KueueInstall | None = None

    def real_node(self) -> realnode.RealNode:
        """The real node of this cluster; ClusterError when it was started without one."""
        network = realnode.recorded_network(self.state_dir)
        if not self.has_real_node or network is None:
            raise ClusterError(
                f"{self.state_dir}: this cluster has no real node (start it with real_node=True)"
            )
        return realnode.RealNode(self.state_dir, network, realnode.build_node_bins())

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (client certificate in group system:masters)."""
        return self.state_dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: JSON lines, one per request at level Metadata."""
        return self.state_dir / "audit.log"

    @property
    def ca_file(self) -> Path:
        """The cluster CA (PEM): it signed the API server's serving certificate."""
        return self.state_dir / "pki" / "ca.crt"

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    def env(self) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing here and the cluster's binaries first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> str:
        """Run kubectl (as admin unless ``kubeconfig`` says otherwise); its stdout.

        Raises ClusterError naming the command and quoting stderr when it fails and ``check`` is true.
        """
        try:
            result = subprocess.run(
                [str(self.kubectl_path), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
                input=input,
                capture_output=True,
                text=True,
                check=False,
                timeout=KUBECTL_TIMEOUT,
            )
        except subprocess.TimeoutExpired as error:
            raise ClusterError(
                f"kubectl {' '.join(args)} did not finish in {KUBECTL_TIMEOUT:.0f}s"
            ) from error
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed (exit {result.returncode}): {result.stderr.strip()}"
            )
        return result.stdout

    def write_token_kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig at ``path`` that authenticates with a bearer token (e.g. ``kubectl create token``)."""
        config = _kubeconfig_with(self.api_url, self.ca_file, "token-user", {"token": token})
        return _write_private(path, yaml.safe_dump(config))

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (a last line still being written is left for the next read)."""
        try:
            text = self.audit_log.read_text()
        except FileNotFoundError:
            return []
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def get_json(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def stop(self) -> None:
        """Stop every process this cluster started (idempotent)."""
        stop_cluster(self.state_dir)


# --- state directory -------------------------------------------------------------------------------


COMPONENT_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def stop_cluster(state_dir: Path) -> list[str]:
    """Stop what ``state_dir``'s pid files name: Kueue's manager, a real node, then the control plane
    newest first; the names stopped."""
    stopped = ["kueue"] if stop_kueue(state_dir) else []
    stopped += realnode.stop_real_node(state_dir)
    for name in reversed(COMPONENT_ORDER):
        if processes.stop(state_dir, name, STOP_TIMEOUT):
            stopped.append(name)
    (state_dir / "cluster.json").unlink(missing_ok=True)
    return stopped


def attach(state_dir: Path) -> Cluster:
    """The cluster already running from ``state_dir`` (e.g. ``.cluster`` after ``make cluster-up``)."""
    info_path = state_dir / "cluster.json"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ClusterError(
            f"{info_path}: no running cluster here (run `make cluster-up`): {error}"
        ) from error
    names = (
        *COMPONENT_ORDER,
        *(realnode.REQUIRED_DAEMONS if info.get("real_node") else ()),
        *(("kueue",) if info.get("kueue") else ()),
    )
    down = [name for name in names if processes.running_pid(state_dir, name) is None]
    if down:
        raise ClusterError(f"{state_dir}: not running: {', '.join(down)} (run `make cluster-up` again)")
    return Cluster(
        state_dir=state_dir,
        bin_dir=Path(info["bin_dir"]),
        nodes_file=Path(info["nodes_file"]),
        api_url=info["api_url"],
        ports=dict(info["ports"]),
        has_real_node=bool(info.get("real_node", False)),
        kueue=KueueInstall.from_json(info["kueue"]) if info.get("kueue") else None,
    )


def _save(cluster: Cluster) -> None:
    """Record a started cluster in ``cluster.json`` (what :func:`attach` reads)."""
    info = {
        "bin_dir": str(cluster.bin_dir),
        "nodes_file": str(cluster.nodes_file),
        "api_url": cluster.api_url,
        "ports": dict(cluster.ports),
        "real_node": cluster.has_real_node,
        "kueue": cluster.kueue.to_json() if cluster.kueue else None,
    }
    (cluster.state_dir / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")


# --- configuration files ---------------------------------------------------------------------------


def _kubeconfig_with(
    api_url: str, ca_file: Path, user: str, credentials: Mapping[str, str]
) -> dict[str, Any]:
    ca_data = base64.b64encode(ca_file.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kubejury-dev", "cluster": {"server": api_url, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [{"name": "kubejury-dev", "context": {"cluster": "kubejury-dev", "user": user}}],
        "current-context": "kubejury-dev",
    }


def _kubeconfig(pki: Pki, who: ClientIdentity, api_url: str) -> dict[str, Any]:
    """A kubeconfig authenticating as ``who`` with its client certificate (embedded)."""
    credentials = {
        "client-certificate-data": base64.b64encode(pki.client_cert(who).read_bytes()).decode(),
        "client-key-data": base64.b64encode(pki.client_key(who).read_bytes()).decode(),
    }
    return _kubeconfig_with(api_url, pki.ca_cert, who.user, credentials)


def _write_private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def _components(
    state: Path,
    bin_dir: Path,
    pki: Pki,
    ports: Mapping[str, int],
    extra_args: Mapping[str, Sequence[str]] | None = None,
    *,
    real_node_host_ip: str | None = None,
) -> list[Component]:
    api_host = real_node_host_ip or "127.0.0.1"
    api_url = f"https://{api_host}:{ports['apiserver']}"
    kubeconfigs = state / "kubeconfigs"
    kubeconfigs.mkdir(exist_ok=True)
    configs: dict[str, Path] = {}
    for who in (CONTROLLER_MANAGER, SCHEDULER, KWOK):
        configs[who.file_stem] = _write_private(
            kubeconfigs / f"{who.file_stem}.yaml", yaml.safe_dump(_kubeconfig(pki, who, api_url))
        )
    audit_policy = state / "audit-policy.yaml"
    audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    kwok_config = write_kwok_config(stages_dir(bin_dir), state / "kwok.yaml")
    etcd_client = f"http://127.0.0.1:{ports['etcd']}"
    etcd_peer = f"http://127.0.0.1:{ports['etcd_peer']}"
    kcm = configs[CONTROLLER_MANAGER.file_stem]
    scheduler = configs[SCHEDULER.file_stem]
    components = [
        Component(
            "etcd",
            "etcd",
            (
                "--name=dev",
                f"--data-dir={state / 'etcd'}",
                f"--listen-client-urls={etcd_client}",
                f"--advertise-client-urls={etcd_client}",
                f"--listen-peer-urls={etcd_peer}",
                f"--initial-advertise-peer-urls={etcd_peer}",
                f"--initial-cluster=dev={etcd_peer}",
                "--log-level=warn",
                # A throw-away test store: no fsync keeps a shared 2-core machine responsive.
                "--unsafe-no-fsync=true",
            ),
        ),
        Component(
            "kube-apiserver",
            "kube-apiserver",
            (
                f"--etcd-servers={etcd_client}",
                f"--bind-address={api_host}",
                f"--advertise-address={api_host}",
                f"--secure-port={ports['apiserver']}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--authorization-mode=Node,RBAC",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={state / 'audit.log'}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--allow-privileged=true",
                *_node_facing_flags(pki, real_node_host_ip is not None),
                f"--cert-dir={state / 'pki' / 'apiserver-generated'}",
                # Aggregation layer: front-proxy CA and client, as kubeadm configures them.
                f"--requestheader-client-ca-file={pki.front_proxy_ca_cert}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
                f"--proxy-client-key-file={pki.front_proxy_client_key}",
                "--profiling=false",
            ),
        ),
        Component(
            "kube-controller-manager",
            "kube-controller-manager",
            (
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['controller_manager']}",
                f"--cert-dir={state / 'pki' / 'controller-manager-generated'}",
                "--leader-elect=false",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--cluster-name=kubejury-dev",
                "--profiling=false",
            ),
        ),
        Component(
            "kube-scheduler",
            "kube-scheduler",
            (
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
                f"--cert-dir={state / 'pki' / 'scheduler-generated'}",
                "--leader-elect=false",
                "--profiling=false",
            ),
        ),
        Component(
            "kwok",
            "kwok",
            (
                f"--kubeconfig={configs[KWOK.file_stem]}",
                f"--config={kwok_config}",
                *(
                    # A real node beside: KWOK plays only the nodes of the nodes file, which say so.
                    (
                        "--manage-all-nodes=false",
                        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}",
                    )
                    if real_node_host_ip
                    else ("--manage-all-nodes=true",)
                ),
                "--node-lease-duration-seconds=40",
                "--cidr=10.0.0.1/16",
                f"--server-address=127.0.0.1:{ports['kwok']}",
            ),
        ),
    ]
    extra = extra_args or {}
    unknown = sorted(set(extra) - {c.name for c in components})
    if unknown:
        raise ClusterError(f"extra arguments for unknown components: {', '.join(unknown)}")
    return [Component(c.name, c.binary, (*c.args, *extra.get(c.name, ()))) for c in components]


def _node_facing_flags(pki: Pki, real_node: bool) -> tuple[str, ...]:
    """The API server towards nodes: its kubelet client certificate, the node's InternalIP, and
    with a real node the ``kubernetes`` Service endpoint kept (lease reconciler) and Services of
    webhooks reached through their endpoints (the host routes the pod range, not the Service one)."""
    flags = (
        f"--kubelet-client-certificate={pki.client_cert(APISERVER_KUBELET_CLIENT)}",
        f"--kubelet-client-key={pki.client_key(APISERVER_KUBELET_CLIENT)}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
    )
    if real_node:
        return (*flags, "--endpoint-reconciler-type=lease", "--enable-aggregator-routing=true")
    # No kubelets and no pod network: nothing may reach the advertised endpoint anyway.
    return (*flags, "--endpoint-reconciler-type=none")


# --- readiness -------------------------------------------------------------------------------------


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _admin_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.client_cert(ADMIN)), str(pki.client_key(ADMIN)))
    return context


def _unverified_tls() -> ssl.SSLContext:
    """For kube-controller-manager/scheduler /healthz: they serve a self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _health_check(name: str, pki: Pki, ports: Mapping[str, int], api_url: str) -> Callable[[], bool]:
    if name == "etcd":
        return lambda: _http_ok(f"http://127.0.0.1:{ports['etcd']}/health")
    if name == "kube-apiserver":
        tls = _admin_tls(pki)
        return lambda: _http_ok(f"{api_url}/readyz", tls)
    if name == "kube-controller-manager":
        return lambda: _http_ok(f"https://127.0.0.1:{ports['controller_manager']}/healthz", _unverified_tls())
    if name == "kube-scheduler":
        return lambda: _http_ok(f"https://127.0.0.1:{ports['scheduler']}/healthz", _unverified_tls())
    return lambda: _http_ok(f"http://127.0.0.1:{ports['kwok']}/healthz")


def _launch(state: Path, bin_dir: Path, component: Component) -> None:
    binary = bin_dir / component.binary
    if not binary.exists():
        raise ClusterError(f"{binary} is missing: run `make kube-bins`")
    processes.launch(state, component.name, [str(binary), *component.args])


def _nodes_ready(cluster: Cluster, names: set[str]) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            items = cluster.get_json("nodes")["items"]
        except (ClusterError, json.JSONDecodeError, KeyError):
            return False
        ready_names = {
            item["metadata"]["name"]
            for item in items
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in item["status"].get("conditions", [])
            )
        }
        return names <= ready_names

    return ready


def start_cluster(
    nodes_file: Path = DEFAULT_NODES_FILE,
    state_dir: Path = REPO / ".cluster",
    *,
    bin_dir: Path | None = None,
    extra_args: Mapping[str, Sequence[str]] | None = None,
    real_node: bool = False,
    images: Sequence[Path] = (),
    kueue: bool = False,
) -> Cluster:
    """Start (or find already running) a dev cluster in ``state_dir`` with the nodes of ``nodes_file``.

    Returns once the API server is ready, the controllers and scheduler are healthy, every node is
    Ready and the ``default`` ServiceAccount exists. On failure, stops what it started and raises
    :class:`ClusterError` naming the component and quoting its log. ``extra_args`` appends flags to
    components by name (e.g. ``{"kube-controller-manager": ["--kube-api-qps=100"]}`` for the
    scale benchmark); the tests and ``make cluster-up`` pass none. A running cluster is reused
    whatever its flags were, so pass ``extra_args`` to a fresh state directory.

    ``real_node``: one real node beside the KWOK ones (:mod:`devcluster.realnode`), with the OCI
    archives ``images`` imported into its containerd. It replaces the nodes file's CPU-only nodes,
    so that every CPU pod runs for real; the GPU nodes stay simulated.

    ``kueue``: Kueue installed from its release manifests, its manager running as a local process
    (:mod:`devcluster.kueue`). A running cluster without it gets it installed in place; one with it is
    reused as it is either way.
    """
    state = state_dir.resolve()
    nodes_path = nodes_file.resolve()
    nodes = load_nodes(nodes_path)  # bad input fails before anything starts
    bins = bin_dir or build_bins()
    kueue_dir = build_kueue() if kueue else None  # built before anything starts, as the binaries are
    node_bins = None
    if real_node:
        realnode.preflight()
        node_bins = realnode.build_node_bins()
        nodes = [n for n in nodes if realnode.is_gpu_node(n)]
    with contextlib.suppress(ClusterError):
        running = attach(state)
        if (
            running.nodes_file == nodes_path
            and running.bin_dir == bins
            and running.has_real_node == real_node
        ):
            if kueue and running.kueue is None:
                running.kueue = install_kueue(running, kueue_dir)
                _save(running)
            return running
    stop_cluster(state)  # leftovers of a half-started cluster, or one of other nodes or binaries
    for sub in ("logs", "pids"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    shutil.rmtree(state / "etcd", ignore_errors=True)
    (state / "audit.log").unlink(missing_ok=True)
    try:
        network = realnode.create_network(state) if real_node else None
        host_ip = network.host_ip if network else None
        pki = ensure_pki(state / "pki", extra_ips=(host_ip,) if host_ip else ())
        ports = {
            name: _free_port()
            for name in ("etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok")
        }
        api_url = f"https://{host_ip or '127.0.0.1'}:{ports['apiserver']}"
        _write_private(state / "kubeconfig", yaml.safe_dump(_kubeconfig(pki, ADMIN, api_url)))
        cluster = Cluster(
            state_dir=state,
            bin_dir=bins,
            nodes_file=nodes_path,
            api_url=api_url,
            ports=ports,
            has_real_node=real_node,
        )
        started: list[str] = []
        kueue_plan: KueuePlan | None = None
        for component in _components(state, bins, pki, ports, extra_args, real_node_host_ip=host_ip):
            _launch(state, bins, component)
            started.append(component.name)
            processes.wait(
                f"{component.name} to be healthy",
                _health_check(component.name, pki, ports, api_url),
                state,
                started,
                START_TIMEOUT,
            )
            if component.name == "kube-apiserver" and kueue_dir is not None:
                # Before kube-controller-manager: its garbage collector then watches Kueue's kinds at once.
                kueue_plan = apply_kueue_crds(cluster, kueue_dir)
        listing = {"apiVersion": "v1", "kind": "List", "items": nodes}
        cluster.kubectl("create", "-f", "-", input=json.dumps(listing))
        names = {node["metadata"]["name"] for node in nodes}
        processes.wait(
            f"{len(names)} nodes from {nodes_path} to be Ready",
            _nodes_ready(cluster, names),
            state,
            started,
            START_TIMEOUT,
        )

        def default_service_account() -> bool:
            return bool(
                cluster.kubectl(
                    "get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False
                )
            )

        processes.wait(
            "the default ServiceAccount (controller-manager)",
            default_service_account,
            state,
            started,
            START_TIMEOUT,
        )
        if network is not None and node_bins is not None:
            kubeconfigs = {}
            for key, who in (
                ("kubelet", realnode.KUBELET),
                ("kube-proxy", realnode.KUBE_PROXY),
                ("netpol", realnode.NETPOL),
            ):
                ensure_client(pki, who)
                kubeconfigs[key] = _write_private(
                    state / "kubeconfigs" / f"{who.file_stem}.yaml",
                    yaml.safe_dump(_kubeconfig(pki, who, api_url)),
                )
            realnode.start_real_node(
                state,
                network,
                node_bins,
                kubeconfigs=kubeconfigs,
                ca_file=pki.ca_cert,
                kubectl=cluster.kubectl,
                images=images,
            )
        if kueue:
            cluster.kueue = install_kueue(cluster, kueue_dir, plan=kueue_plan)
    except BaseException:
        stop_cluster(state)
        raise
    _save(cluster)
    return cluster
