"""Kueue on the dev cluster: the real Kueue manager, installed from its own release manifests (issue 25).

Why it exists: on a shared GPU cluster EvalRuns are admitted by Kueue quotas, and kubejury's tests of
that must run against Kueue itself. ``scripts/build_kueue.sh`` builds the ``kueue`` manager from the Go
module proxy and renders the release manifests (``kubectl kustomize config/default``, what Kueue's
``make artifacts`` publishes); :func:`install_kueue` installs them on a running dev cluster.

Applied as the release has them: the CRDs, the ``kueue-system`` Namespace, the ServiceAccount, every
Role/ClusterRole and binding, the ConfigMap (holding the Configuration that actually runs, below) and
both webhook configurations with Kueue's own rules, selectors and ``failurePolicy: Fail``.

What differs, and why — DEVELOPMENT ONLY, as the chart's ``webhook.developmentURL`` is:

1. **The manager is a local process** (pid file ``pids/kueue.pid``, log ``logs/kueue.log``), as the
   operator is in ``make operator-up``: no image can be pulled here. It authenticates with a token of
   its ServiceAccount (TokenRequest, 24 h), so the release's RBAC is what the API server enforces.
2. **Webhooks at a loopback URL.** Admission webhooks and the CRDs' conversion webhook call
   ``https://127.0.0.1:<port><path>`` instead of the Service ``kueue-webhook-service``: there is no
   Service network here (no kube-proxy), and an Endpoint may not be a loopback address. ``caBundle`` is
   the cluster CA, which signed the manager's serving certificate (SAN 127.0.0.1).
3. **Kueue's internal cert management is off** (its rotator writes the certificate into a Secret for the
   Service name only and needs a kubelet to mount it). The certificate lives in ``<state>/kueue/certs``,
   the Configuration's ``webhook.certDir``. With internal certs off Kueue also reads a metrics
   certificate from the hard-coded ``/etc/kueue/metrics/certs`` (cmd/kueue/main.go; no flag or field
   moves it), so the manager runs under ``unshare --mount`` with that directory bind-mounted there —
   visible to Kueue alone. The empty mount point is created on the host if missing.
4. **The visibility API is off** (feature gate ``VisibilityOnDemand=false``; its APIServices are not
   applied): an aggregated API without a reachable server breaks discovery, and with it the namespace
   controller and the garbage collector, which Kueue needs to delete a Pod's Workload.
5. **Not applied** (:data:`NOT_APPLIED`): the Deployment, the Services, the APIServices and the empty
   webhook Secret. Leader election is off.

Integrations: ``batch/job``, ``deployment`` and ``pod`` (which ``deployment`` requires: each of a
Deployment's pods is its own Workload); ``manageJobsWithoutQueueName: false``, so only objects with the
``kueue.x-k8s.io/queue-name`` label are managed; ``waitForPodsReady`` off. Ready means: ``/readyz``
answers (the webhook server is up), the webhooks answer through the API server, a ClusterQueue
created through them becomes ``Active``, and the garbage collector collects Kueue's kinds (a fresh
cluster's collector watches new CRDs only from its next 30 s discovery resync; until then a deleted
Job's or Pod's Workload stays and keeps holding its quota).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shlex
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devcluster import processes
from devcluster.pki import Pki, issue_serving_cert
from devcluster.processes import ClusterError

if TYPE_CHECKING:
    from devcluster.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build_kueue.sh"
VERSION = "v0.17.0"
NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
#: The pid and log file name of the manager process (``pids/kueue.pid``, ``logs/kueue.log``).
PROCESS = "kueue"
CONFIG_KEY = "controller_manager_config.yaml"
#: Where Kueue reads its metrics certificate when internal cert management is off (hard-coded).
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"
FRAMEWORKS = ("batch/job", "deployment", "pod")
FIELD_MANAGER = "kubejury-devcluster"
PROBE_QUEUE = "kubejury-devcluster-probe"
GC_PROBE = "kubejury-devcluster-gc-probe"
TOKEN_DURATION = "24h"
START_TIMEOUT = float(os.environ.get("KUBEJURY_KUEUE_START_TIMEOUT", "180"))
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: Kinds of the release that are not applied, and why (module docstring, item 5).
NOT_APPLIED: Mapping[str, str] = {
    "Deployment": "the manager runs as a local process (no image can be pulled here)",
    "Service": "nothing runs behind it: the API server calls the webhooks at a loopback URL",
    "APIService": "the visibility API is off (an unreachable aggregated API breaks discovery)",
    "Secret": "the webhook certificate is issued here and read from disk (internal certs off)",
}


def build_kueue() -> Path:
    """The directory with ``bin/kueue`` and ``manifests/kueue.yaml``, building them first if needed
    (``make kueue-bins``); ``KUBEJURY_KUEUE_DIR`` names a directory to use instead."""
    return processes.built(BUILD_SCRIPT, "KUBEJURY_KUEUE_DIR")


# --- the release manifests (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """The rendered release manifests, sorted by what the installer does with them."""

    crds: list[dict[str, Any]]
    #: Namespace, ServiceAccount, RBAC and the ConfigMap, in the release's order.
    objects: list[dict[str, Any]]
    webhooks: list[dict[str, Any]]
    deployment: dict[str, Any]
    #: ``Kind/name`` of every object left out, for the log.
    skipped: list[str]


def split_release(documents: Iterable[Mapping[str, Any] | None]) -> Release:
    """Sort the release's objects; ClusterError when the Deployment or the ConfigMap is missing."""
    crds: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    webhooks: list[dict[str, Any]] = []
    deployments: list[dict[str, Any]] = []
    skipped: list[str] = []
    for document in documents:
        if not document:
            continue
        item = dict(document)
        kind = str(item.get("kind"))
        if kind == "CustomResourceDefinition":
            crds.append(item)
        elif kind in WEBHOOK_KINDS:
            webhooks.append(item)
        elif kind in NOT_APPLIED:
            if kind == "Deployment":
                deployments.append(item)
            skipped.append(f"{kind}/{item['metadata']['name']}")
        else:
            objects.append(item)
    if len(deployments) != 1 or not any(o["kind"] == "ConfigMap" for o in objects):
        raise ClusterError("Kueue's release manifests lack the manager Deployment or its ConfigMap")
    return Release(crds, objects, webhooks, deployments[0], skipped)


def local_client_config(client_config: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """A webhook ``clientConfig`` that calls ``base_url`` + the Service's path, trusting ``ca_bundle``."""
    service = client_config.get("service")
    if service is None:
        raise ClusterError(f"expected a Service reference in a Kueue webhook, got {dict(client_config)}")
    return {"url": f"{base_url}{service.get('path', '')}", "caBundle": ca_bundle}


def with_local_conversion(crd: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """The CRD with its conversion webhook (if any) called at ``base_url``."""
    local = copy.deepcopy(dict(crd))
    webhook = (local["spec"].get("conversion") or {}).get("webhook")
    if webhook is not None:
        webhook["clientConfig"] = local_client_config(webhook["clientConfig"], base_url, ca_bundle)
    return local


def with_local_webhooks(configuration: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """A webhook configuration whose every webhook is called at ``base_url``; all else as released."""
    local = copy.deepcopy(dict(configuration))
    for webhook in local.get("webhooks") or []:
        webhook["clientConfig"] = local_client_config(webhook["clientConfig"], base_url, ca_bundle)
    return local


@dataclass(frozen=True)
class Ports:
    """The manager's loopback ports: webhook server (HTTPS), metrics (HTTPS), health probes (HTTP)."""

    webhook: int
    metrics: int
    health: int


def release_configuration(release: Release) -> dict[str, Any]:
    """The Kueue Configuration the release's ConfigMap carries."""
    config_map = next(o for o in release.objects if o["kind"] == "ConfigMap")
    parsed = yaml.safe_load(config_map["data"][CONFIG_KEY])
    if not isinstance(parsed, dict):
        raise ClusterError(f"Kueue's ConfigMap key {CONFIG_KEY} is not a Configuration")
    return parsed


def manager_configuration(released: Mapping[str, Any], ports: Ports, cert_dir: Path) -> dict[str, Any]:
    """The release's Configuration as a local process runs it (module docstring); the rest is kept
    (client QPS/burst, controller concurrency)."""
    config = copy.deepcopy(dict(released))
    config.pop("waitForPodsReady", None)
    config.update(
        {
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
            "metrics": {**(config.get("metrics") or {}), "bindAddress": f"127.0.0.1:{ports.metrics}"},
            "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
            "leaderElection": {**(config.get("leaderElection") or {}), "leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(FRAMEWORKS)},
            "featureGates": {**(config.get("featureGates") or {}), "VisibilityOnDemand": False},
        }
    )
    return config


def with_configuration(release: Release, configuration: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The release's objects with the ConfigMap holding ``configuration`` (what really runs)."""
    objects = []
    for item in release.objects:
        if item["kind"] == "ConfigMap":
            item = {**item, "data": {CONFIG_KEY: yaml.safe_dump(dict(configuration), sort_keys=False)}}
        objects.append(item)
    return objects


def manager_args(deployment: Mapping[str, Any]) -> list[str]:
    """The release's manager arguments other than ``--config`` (its path is ours)."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    manager = next(c for c in containers if c["name"] == "manager")
    return [a for a in manager.get("args") or [] if not a.startswith("--config")]


def manager_argv(
    binary: Path, args: Sequence[str], config: Path, kubeconfig: Path, cert_dir: Path
) -> list[str]:
    """The manager in a private mount namespace with ``cert_dir`` at :data:`METRICS_CERT_DIR`.

    ``unshare`` and ``sh`` both exec, so the pid started is the manager's.
    """
    script = (
        f"mkdir -p {METRICS_CERT_DIR} && mount --bind {shlex.quote(str(cert_dir))} {METRICS_CERT_DIR}"
        ' && exec "$@"'
    )
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        *args,
    ]


def probe_queue() -> dict[str, Any]:
    """An empty ClusterQueue: created through Kueue's webhooks, Active once its controller runs."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": PROBE_QUEUE},
        "spec": {},
    }


def condition_status(item: Mapping[str, Any], kind: str) -> str | None:
    """The status (``"True"``, ``"False"``, ...) of condition ``kind`` of a Kueue object, or None."""
    for condition in (item.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


# --- installing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KueueInstall:
    """Kueue running on a dev cluster: the build used and the manager's loopback ports."""

    build_dir: str
    webhook_port: int
    metrics_port: int
    health_port: int

    @property
    def binary(self) -> Path:
        return Path(self.build_dir) / "bin" / "kueue"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KueueInstall:
        return cls(
            build_dir=str(data["build_dir"]),
            webhook_port=int(data["webhook_port"]),
            metrics_port=int(data["metrics_port"]),
            health_port=int(data["health_port"]),
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_release(build_dir: Path) -> Release:
    path = build_dir / "manifests" / "kueue.yaml"
    try:
        return split_release(yaml.safe_load_all(path.read_text()))
    except OSError as error:
        raise ClusterError(
            f"{path}: Kueue's manifests are missing (run `make kueue-bins`): {error}"
        ) from error


def _apply(cluster: Cluster, items: Sequence[Mapping[str, Any]]) -> None:
    listing = {"apiVersion": "v1", "kind": "List", "items": list(items)}
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        input=json.dumps(listing),
    )


def _apply_crds(cluster: Cluster, crds: Sequence[Mapping[str, Any]]) -> None:
    _apply(cluster, crds)
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)


def _service_account_kubeconfig(cluster: Cluster, work: Path) -> Path:
    token = cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, f"--duration={TOKEN_DURATION}"
    ).strip()
    return cluster.write_token_kubeconfig(token, work / "kubeconfig")


def _issue_certificate(cluster: Cluster, cert_dir: Path) -> Path:
    """tls.crt/tls.key for 127.0.0.1 (and the Service name), signed by the cluster CA."""
    issue_serving_cert(
        Pki(cluster.state_dir / "pki"),
        cert_dir / "tls.crt",
        cert_dir / "tls.key",
        "kueue-webhook",
        (f"kueue-webhook-service.{NAMESPACE}.svc",),
        ("127.0.0.1",),
    )
    return cert_dir


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _probe_queue_active(cluster: Cluster) -> Callable[[], bool]:
    def active() -> bool:
        found = cluster.kubectl(
            "get",
            "clusterqueues.kueue.x-k8s.io",
            PROBE_QUEUE,
            "-o",
            "json",
            "--ignore-not-found",
            check=False,
        )
        if not found.strip():
            cluster.kubectl("create", "-f", "-", input=json.dumps(probe_queue()), check=False)
            return False
        return condition_status(json.loads(found), "Active") == "True"

    return active


def _collected_by_gc(cluster: Cluster) -> Callable[[], bool]:
    """Whether the garbage collector already watches Kueue's kinds: a LocalQueue owned by a deleted
    ConfigMap is gone. The collector picks up new CRDs at its 30 s discovery resync, and until then
    a deleted Job's or Pod's Workload stays and holds its quota (Kueue frees it on deletion)."""
    for kind in ("configmap", "localqueues.kueue.x-k8s.io"):  # leftovers of an earlier attempt
        cluster.kubectl("delete", kind, GC_PROBE, "-n", NAMESPACE, "--ignore-not-found")
    owner = json.loads(cluster.kubectl("create", "configmap", GC_PROBE, "-n", NAMESPACE, "-o", "json"))
    dependent = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {
            "name": GC_PROBE,
            "namespace": NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": GC_PROBE, "uid": owner["metadata"]["uid"]}
            ],
        },
        "spec": {"clusterQueue": PROBE_QUEUE},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(dependent))
    cluster.kubectl("delete", "configmap", GC_PROBE, "-n", NAMESPACE)

    def collected() -> bool:
        found = cluster.kubectl(
            "get", "localqueues.kueue.x-k8s.io", GC_PROBE, "-n", NAMESPACE, "-o", "name", "--ignore-not-found"
        )
        return not found.strip()

    return collected


def _remove_webhooks(cluster: Cluster, webhooks: Sequence[Mapping[str, Any]]) -> None:
    """Delete Kueue's webhook configurations: with the manager gone, ``Fail`` would refuse every Job."""
    for item in webhooks:
        cluster.kubectl(
            "delete", str(item["kind"]).lower(), item["metadata"]["name"], "--ignore-not-found", check=False
        )


@dataclass(frozen=True)
class KueuePlan:
    """What is fixed before the manager starts: the build, its release, the ports and the CA bundle
    the webhooks (and the CRDs' conversion webhook) are called with."""

    build: Path
    release: Release
    ports: Ports
    ca_bundle: str

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.webhook}"


def apply_kueue_crds(cluster: Cluster, build_dir: Path | None = None) -> KueuePlan:
    """Choose the manager's ports and apply Kueue's CRDs, conversion webhook at the loopback URL.

    :func:`~devcluster.cluster.start_cluster` calls this before kube-controller-manager starts: the
    garbage collector then watches Kueue's kinds from its first discovery instead of its first 30 s
    resync, and :func:`install_kueue` does not wait for it.
    """
    build = (build_dir or build_kueue()).resolve()
    ports = Ports(webhook=_free_port(), metrics=_free_port(), health=_free_port())
    plan = KueuePlan(
        build, load_release(build), ports, base64.b64encode(cluster.ca_file.read_bytes()).decode()
    )
    crds = [with_local_conversion(crd, plan.base_url, plan.ca_bundle) for crd in plan.release.crds]
    _apply_crds(cluster, crds)
    return plan


def install_kueue(
    cluster: Cluster,
    build_dir: Path | None = None,
    timeout: float = START_TIMEOUT,
    *,
    plan: KueuePlan | None = None,
) -> KueueInstall:
    """Install Kueue on the running ``cluster`` and start its manager; returns once Kueue is ready.

    ``plan``: the CRDs were applied already (:func:`apply_kueue_crds`). On failure the manager is
    stopped, its webhook configurations are deleted (so the cluster keeps admitting Jobs and Pods),
    and ClusterError quotes the manager's log.
    """
    plan = plan or apply_kueue_crds(cluster, build_dir)
    release, ports, state, work = plan.release, plan.ports, cluster.state_dir, cluster.state_dir / "kueue"
    work.mkdir(parents=True, exist_ok=True)
    cert_dir = _issue_certificate(cluster, work / "certs")
    configuration = manager_configuration(release_configuration(release), ports, cert_dir)
    config_path = work / "config.yaml"
    config_path.write_text(yaml.safe_dump(configuration, sort_keys=False))
    _apply(cluster, with_configuration(release, configuration))
    kubeconfig = _service_account_kubeconfig(cluster, work)
    binary = plan.build / "bin" / "kueue"
    if not binary.exists():
        raise ClusterError(f"{binary} is missing: run `make kueue-bins`")
    argv = manager_argv(binary, manager_args(release.deployment), config_path, kubeconfig, cert_dir)
    processes.stop(state, PROCESS)
    processes.launch(state, PROCESS, argv, executable=binary)
    try:
        _wait_ready(cluster, plan, timeout)
    except BaseException:
        _remove_webhooks(cluster, release.webhooks)
        processes.stop(state, PROCESS)
        raise
    return KueueInstall(str(plan.build), ports.webhook, ports.metrics, ports.health)


def _wait_ready(cluster: Cluster, plan: KueuePlan, timeout: float) -> None:
    """/readyz, then the webhook configurations, then a ClusterQueue through them, then the collector."""
    state = cluster.state_dir
    processes.wait(
        "Kueue's manager to be ready (/readyz)",
        lambda: _http_ok(f"http://127.0.0.1:{plan.ports.health}/readyz"),
        state,
        [PROCESS],
        timeout,
    )
    _apply(cluster, [with_local_webhooks(w, plan.base_url, plan.ca_bundle) for w in plan.release.webhooks])
    processes.wait(
        f"ClusterQueue {PROBE_QUEUE} (created through Kueue's webhooks) to be Active",
        _probe_queue_active(cluster),
        state,
        [PROCESS],
        timeout,
    )
    processes.wait(
        "the garbage collector to collect Kueue's kinds (its discovery resync, up to 30 s)",
        _collected_by_gc(cluster),
        state,
        [PROCESS],
        timeout,
    )
    cluster.kubectl("delete", "clusterqueues.kueue.x-k8s.io", PROBE_QUEUE, "--wait=false")


def stop_kueue(state_dir: Path) -> bool:
    """Stop the Kueue manager this state directory's pid file names; whether it was running."""
    return processes.stop(state_dir, PROCESS)
