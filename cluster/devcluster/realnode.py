"""A real Kubernetes node beside the KWOK ones: kubelet, containerd and runc running real containers.

Why it exists: KWOK proves the API side, but only a kubelet shows what users meet on day one of
``helm install``: images as a runtime unpacks them, pod security enforced by runc, volumes as the
kubelet mounts them, Service routing, cluster DNS, probes, OOM kills, ``kubectl logs`` and ``exec``.

The node is a network namespace the harness makes, like a kind node without Docker:

- ``kubejury-node<i>`` holds the node's address (a veth pair to the host, ``10.250.<i>.2/30``), the
  pod bridge (``10.245.<i>.0/24``), kube-proxy's iptables rules and the NetworkPolicy enforcer's.
  The host gets one route, the pod range via the node; the node has no default route, so nothing a
  pod sends can leave the machine, and deleting the namespace removes every rule with it.
- kubelet, containerd, kube-proxy and the enforcer run in that namespace (``nsenter --net``) but in
  the host's mount namespace, so the volumes the kubelet mounts are the ones runc sees.
- The API server listens on the host end of the veth (``10.250.<i>.1``); its ``kubernetes``
  Service endpoint is that address, so pods reach it through kube-proxy, as in any cluster. It
  reaches webhooks by their Service's endpoints (``--enable-aggregator-routing``): the host routes
  the pod range, not the Service range.
- Cluster DNS is CoreDNS as a Deployment in kube-system behind the ``kube-dns`` Service
  (``10.96.0.10``), answering only for ``cluster.local`` (no upstream: nothing leaves the machine).
- PersistentVolumes are static ``local`` volumes on the node (:func:`local_volume`): no provisioner
  image to build, and the kubelet applies ``fsGroup`` to them as it does to any real disk.

Stopping (:func:`stop_real_node`) kills the kubelet, every container process (found by the node's
cgroup root), the shims, containerd, then unmounts what they left under the state directory and
deletes the namespace.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster import processes
from devcluster.pki import ClientIdentity
from devcluster.processes import ClusterError

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build_node.sh"
NODE_NAME = "kj-real-0"
#: Every pod of the real node, and the node itself, carry this label (tests select on it).
REAL_NODE_LABEL = "kubejury.dev/real-node"
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
#: CoreDNS runs as non-root and binds 53 with NET_BIND_SERVICE, its image's file capability (as
#: upstream's manifests do; without the capability in the bounding set the exec itself is refused).
COREDNS_PORT = 53
RUNC = Path("/usr/sbin/runc")
#: Daemons of the node, in start order (stopped in reverse).
DAEMONS = ("containerd", "kubelet", "kube-proxy", "netpol")
#: The daemons a running real node must have (``attach`` checks them).
REQUIRED_DAEMONS = DAEMONS
MAX_NODES = 16
READY_TIMEOUT = float(os.environ.get("KUBEJURY_REAL_NODE_TIMEOUT", "240"))
#: Host programs the node needs at run time, with the Debian package that provides each.
HOST_PROGRAMS = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "iptables": "iptables",
    "ipset": "ipset",
    "conntrack": "conntrack",
    "runc": "runc",
}


# --- the binaries and images -------------------------------------------------------------------


@dataclass(frozen=True)
class NodeBins:
    """Where the node's programs and images are: ``bin/`` and ``images/`` of scripts/build_node.sh."""

    bin_dir: Path
    images_dir: Path

    def binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not path.exists():
            raise ClusterError(f"{path} is missing: run `make node-bins` (scripts/build_node.sh)")
        return path

    @property
    def cni_dir(self) -> Path:
        return self.bin_dir / "cni"

    def image(self, stem: str) -> Path:
        found = sorted(self.images_dir.glob(f"{stem}*.tar"))
        if not found:
            raise ClusterError(f"no {stem}*.tar in {self.images_dir}: run `make node-bins`")
        return found[-1]


def build_node_bins() -> NodeBins:
    """The node's binaries and images, building them first if needed (``make node-bins``)."""
    root = processes.built(BUILD_SCRIPT, "KUBEJURY_NODE_DIR")
    return NodeBins(root / "bin", root / "images")


def missing_host_programs() -> list[str]:
    """Host programs the node needs that this machine lacks, each with its Debian package."""
    missing = []
    for program, package in HOST_PROGRAMS.items():
        if not any(Path(d, program).exists() for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin")):
            missing.append(f"{program} (Debian package {package})")
    return missing


def preflight() -> None:
    """Fail with what is missing before anything starts: root, host programs, cgroups."""
    problems = []
    if os.geteuid() != 0:
        problems.append("a real node needs root (network namespaces, mounts, cgroups)")
    problems += [f"missing {m}" for m in missing_host_programs()]
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        problems.append("no memory cgroup controller under /sys/fs/cgroup")
    if problems:
        raise ClusterError("cannot run a real node here: " + "; ".join(problems))


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    """Whether a node of a nodes file has GPUs (a real node replaces the CPU-only ones)."""
    capacity = node.get("status", {}).get("capacity", {}) or {}
    return any(key.endswith("/gpu") for key in capacity)


def image_name(archive: Path) -> str:
    """The name an OCI archive carries (``io.containerd.image.name``), as containerd will tag it."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ClusterError(f"{archive}: no index.json (not an OCI archive)")
        index = json.load(member)
    for manifest in index.get("manifests", []):
        annotations = manifest.get("annotations", {})
        name = annotations.get("io.containerd.image.name") or annotations.get(
            "org.opencontainers.image.ref.name"
        )
        if name:
            return str(name)
    raise ClusterError(f"{archive}: index.json names no image")


# --- the network ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeNetwork:
    """The namespace, addresses and names of one real node (index ``index`` on this machine)."""

    index: int

    @property
    def netns(self) -> str:
        return f"kubejury-node{self.index}"

    @property
    def host_link(self) -> str:
        return f"kjhost{self.index}"

    @property
    def node_link(self) -> str:
        return f"kjnode{self.index}"

    @property
    def bridge(self) -> str:
        return f"kjpods{self.index}"

    @property
    def host_ip(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.250.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.245.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def cgroup_root(self) -> str:
        return f"/kubejury-node{self.index}"

    def nsenter(self) -> list[str]:
        """The prefix that runs a program in the node's network namespace (host mounts and pids)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"]


def _run(argv: Sequence[str], *, check: bool = True, input: str | None = None) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False, input=input, timeout=120)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed (exit {result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _existing_netns() -> set[str]:
    return {
        line.split()[0] for line in _run(["ip", "netns", "list"], check=False).splitlines() if line.strip()
    }


def _network_file(state: Path) -> Path:
    return state / "node" / "network.json"


def recorded_network(state: Path) -> NodeNetwork | None:
    try:
        return NodeNetwork(int(json.loads(_network_file(state).read_text())["index"]))
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None


def create_network(state: Path) -> NodeNetwork:
    """Make the node's namespace and veth pair, with the first index no other cluster uses."""
    taken = _existing_netns()
    free = [i for i in range(MAX_NODES) if f"kubejury-node{i}" not in taken]
    if not free:
        raise ClusterError(
            f"all {MAX_NODES} real-node namespaces exist (ip netns list): stop other clusters with "
            "`make cluster-down` in their checkouts"
        )
    net = NodeNetwork(free[0])
    (state / "node").mkdir(parents=True, exist_ok=True)
    _network_file(state).write_text(json.dumps(asdict(net)) + "\n")
    ns = ["ip", "-n", net.netns]
    _run(["ip", "netns", "add", net.netns])
    _run(
        [
            "ip",
            "link",
            "add",
            net.host_link,
            "type",
            "veth",
            "peer",
            "name",
            net.node_link,
            "netns",
            net.netns,
        ]
    )
    _run(["ip", "addr", "add", f"{net.host_ip}/30", "dev", net.host_link])
    _run(["ip", "link", "set", net.host_link, "up"])
    _run([*ns, "addr", "add", f"{net.node_ip}/30", "dev", net.node_link])
    _run([*ns, "link", "set", net.node_link, "up"])
    _run([*ns, "link", "set", "lo", "up"])
    # The pod range is reached through the node (the API server calls webhooks and kubelets there).
    _run(["ip", "route", "replace", net.pod_cidr, "via", net.node_ip, "dev", net.host_link])
    for key, value in (("net.ipv4.ip_forward", "1"), ("net.ipv4.conf.all.route_localnet", "1")):
        _run([*net.nsenter(), "sysctl", "-q", "-w", f"{key}={value}"])
    return net


def delete_network(net: NodeNetwork) -> None:
    """Delete the namespace (its links, bridge, iptables rules and ipsets go with it)."""
    _run(["ip", "route", "del", net.pod_cidr], check=False)
    _run(["ip", "netns", "del", net.netns], check=False)
    _run(["ip", "link", "del", net.host_link], check=False)


# --- configuration files -------------------------------------------------------------------------


def _node_dir(state: Path, *parts: str) -> Path:
    path = state.joinpath("node", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def containerd_socket(state: Path) -> Path:
    return _node_dir(state, "run") / "containerd.sock"


def containerd_config(state: Path, bins: NodeBins) -> str:
    """containerd 2.x: the CRI plugin with runc (cgroupfs), CNI from our plugins, state under ``state``."""
    root = _node_dir(state, "containerd")
    cni_conf = _node_dir(state, "cni", "net.d")
    pause = image_name(bins.image("pause"))
    return f"""version = 3
root = '{root / "root"}'
state = '{root / "state"}'
[grpc]
  address = '{containerd_socket(state)}'
[ttrpc]
  address = '{containerd_socket(state)}.ttrpc'
[debug]
  level = 'warn'
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{pause}'
  [plugins.'io.containerd.cri.v1.runtime']
    # CAP_SYS_RESOURCE may be missing from the bounding set of the machine's own container: then no
    # process may lower oom_score_adj below 0, and containerd must not try.
    restrict_oom_score_adj = true
    # Pod network namespaces under the state directory, not /run/netns: stopping unmounts them.
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{RUNC}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{bins.cni_dir}']
      conf_dir = '{cni_conf}'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
"""


def cni_config(state: Path, net: NodeNetwork) -> dict[str, Any]:
    """The pod network: one bridge in the node's namespace, host-local addresses, portmap, loopback."""
    return {
        "cniVersion": "1.0.0",
        "name": "kubejury-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "isDefaultGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": net.pod_cidr, "gateway": net.pod_gateway}]],
                    "dataDir": str(_node_dir(state, "cni", "ipam")),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def kubelet_config(state: Path, net: NodeNetwork, ca_file: Path) -> dict[str, Any]:
    """KubeletConfiguration: x509 + webhook auth (as kubeadm sets it), cgroupfs, cgroup v1 allowed."""
    root = _node_dir(state, "kubelet")
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{containerd_socket(state)}",
        # PID 1 here is not systemd, and the machine mounts cgroup v1 controllers (hybrid layout).
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": net.cgroup_root,
        "failSwapOn": False,
        "address": net.node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "podLogsDir": str(_node_dir(state, "pod-logs")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        # Pods resolve through cluster DNS only: the host's resolv.conf would lead off the machine.
        "resolvConf": "",
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": CLUSTER_DOMAIN,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "staticPodPath": str(_node_dir(state, "kubelet", "manifests")),
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "tlsCertFile": "",
        "tlsPrivateKeyFile": "",
        "volumePluginDir": str(root / "volume-plugins"),
    }


def kube_proxy_config(state: Path, net: NodeNetwork, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "bindAddress": net.node_ip,
        "clusterCIDR": net.pod_cidr,
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
        # Leave the machine's conntrack table size alone (it is not ours to set).
        "conntrack": {"maxPerCore": 0},
    }


# --- start ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RealNode:
    """A started real node: its network, binaries and where its state lives."""

    state: Path
    network: NodeNetwork
    bins: NodeBins

    @property
    def name(self) -> str:
        return NODE_NAME

    def ctr(self, *args: str) -> str:
        """``ctr`` against the node's containerd, in the k8s.io namespace (the kubelet's images)."""
        ctr = self.bins.binary("ctr")
        return _run([str(ctr), "--address", str(containerd_socket(self.state)), "-n", "k8s.io", *args])

    def import_image(self, archive: Path) -> str:
        """Import an OCI archive into the node's containerd; the image's name."""
        name = image_name(archive)
        self.ctr("images", "import", "--no-unpack=false", str(archive))
        return name

    def volumes_dir(self) -> Path:
        return _node_dir(self.state, "volumes")


def _launch_in_node(
    state: Path,
    net: NodeNetwork,
    name: str,
    binary: Path,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> None:
    processes.launch(state, name, [*net.nsenter(), str(binary), *args], executable=binary, env=env)


def start_containerd(state: Path, net: NodeNetwork, bins: NodeBins) -> None:
    config = _node_dir(state, "containerd") / "config.toml"
    config.write_text(containerd_config(state, bins))
    (_node_dir(state, "cni", "net.d") / "10-kubejury.conflist").write_text(
        json.dumps(cni_config(state, net), indent=2)
    )
    env_path = f"{bins.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    os.environ["PATH"] = env_path  # the shim is found next to containerd
    _launch_in_node(state, net, "containerd", bins.binary("containerd"), ["--config", str(config)])
    socket = containerd_socket(state)
    ctr = bins.binary("ctr")

    def answers() -> bool:
        if not socket.exists():
            return False
        probe = subprocess.run(
            [str(ctr), "--address", str(socket), "version"], capture_output=True, check=False, timeout=10
        )
        return probe.returncode == 0

    processes.wait("containerd to answer", answers, state, ["containerd"], READY_TIMEOUT)


def _make_cgroup_root(cgroup_root: str) -> None:
    """The kubelet's cgroupRoot must exist in every mounted hierarchy before it starts."""
    base = Path("/sys/fs/cgroup")
    hierarchies = [base] if (base / "cgroup.controllers").exists() else []
    hierarchies += [d for d in base.iterdir() if d.is_dir() and not d.is_symlink()]
    for hierarchy in hierarchies:
        if (hierarchy / "cgroup.procs").exists():
            (hierarchy / cgroup_root.lstrip("/")).mkdir(exist_ok=True)


def start_kubelet(state: Path, net: NodeNetwork, bins: NodeBins, kubeconfig: Path, ca_file: Path) -> None:
    _make_cgroup_root(net.cgroup_root)
    config = _node_dir(state, "kubelet") / "config.yaml"
    config.write_text(yaml.safe_dump(kubelet_config(state, net, ca_file)))
    args = [
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={_node_dir(state, 'kubelet', 'root')}",
        f"--cert-dir={_node_dir(state, 'kubelet', 'pki')}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={net.node_ip}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=1",
    ]
    _launch_in_node(state, net, "kubelet", bins.binary("kubelet"), args)


def start_kube_proxy(state: Path, net: NodeNetwork, bins: NodeBins, kubeconfig: Path) -> None:
    config = _node_dir(state, "kube-proxy") / "config.yaml"
    config.write_text(yaml.safe_dump(kube_proxy_config(state, net, kubeconfig)))
    _launch_in_node(state, net, "kube-proxy", bins.binary("kube-proxy"), [f"--config={config}", "--v=1"])


def set_pod_cidr(kubectl: Callable[..., str], net: NodeNetwork) -> None:
    """Node.spec.podCIDR, which the NetworkPolicy enforcer and kube-proxy read (no IPAM controller here)."""
    patch = json.dumps({"spec": {"podCIDR": net.pod_cidr, "podCIDRs": [net.pod_cidr]}})
    kubectl("patch", "node", NODE_NAME, "--type=merge", "-p", patch)


#: The node's identities: the kubelet as the Node authorizer expects it, kube-proxy as the default
#: ``system:node-proxier`` binding names it.
KUBELET = ClientIdentity("kubelet-" + NODE_NAME, f"system:node:{NODE_NAME}", ("system:nodes",))
KUBE_PROXY = ClientIdentity("kube-proxy", "system:kube-proxy")
NETPOL = ClientIdentity("kube-router", "kubejury-dev:kube-router")
NODE_IDENTITIES = (KUBELET, KUBE_PROXY, NETPOL)


def _node_ready(kubectl: Callable[..., str]) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            node = json.loads(kubectl("get", "node", NODE_NAME, "-o", "json", check=False) or "{}")
        except json.JSONDecodeError:
            return False
        conditions = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    return ready


def _deployment_available(kubectl: Callable[..., str], namespace: str, name: str) -> Callable[[], bool]:
    def available() -> bool:
        out = kubectl(
            "get",
            "deployment",
            name,
            "-n",
            namespace,
            "-o",
            "jsonpath={.status.availableReplicas}",
            check=False,
        )
        return out.strip() not in ("", "0")

    return available


def start_real_node(
    state: Path,
    net: NodeNetwork,
    bins: NodeBins,
    *,
    kubeconfigs: Mapping[str, Path],
    ca_file: Path,
    kubectl: Callable[..., str],
    images: Sequence[Path] = (),
) -> RealNode:
    """Start containerd, import the images, start the kubelet (wait for Ready), kube-proxy, the
    NetworkPolicy enforcer and CoreDNS (wait until it answers); the node.

    ``kubeconfigs`` maps ``kubelet`` and ``kube-proxy`` to their kubeconfig files; ``kubectl`` runs
    kubectl as the admin (``Cluster.kubectl``). Raises :class:`ClusterError` naming the daemon and
    quoting its log when one exits or does not become ready.
    """
    node = RealNode(state, net, bins)
    start_containerd(state, net, bins)
    for archive in (bins.image("pause"), bins.image("coredns"), *images):
        node.import_image(archive)
    start_kubelet(state, net, bins, kubeconfigs["kubelet"], ca_file)
    processes.wait(
        f"node {NODE_NAME} to be Ready", _node_ready(kubectl), state, ["containerd", "kubelet"], READY_TIMEOUT
    )
    set_pod_cidr(kubectl, net)
    start_kube_proxy(state, net, bins, kubeconfigs["kube-proxy"])
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": netpol_rbac()})
    )
    start_netpol(state, net, bins, kubeconfigs["netpol"])
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": coredns_manifests(image_name(bins.image("coredns"))),
    }
    kubectl("apply", "-f", "-", input=json.dumps(listing))
    processes.wait(
        "CoreDNS (kube-system/coredns) to be available",
        _deployment_available(kubectl, "kube-system", "coredns"),
        state,
        ["containerd", "kubelet", "kube-proxy", "netpol"],
        READY_TIMEOUT,
    )
    return node


def netpol_rbac() -> list[dict[str, Any]]:
    """What kube-router's policy controller reads (nothing else: it writes only iptables and ipsets)."""
    name = "kubejury-dev:kube-router"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "pods", "nodes", "services", "endpoints"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": NETPOL.user}],
        },
    ]


def start_netpol(state: Path, net: NodeNetwork, bins: NodeBins, kubeconfig: Path) -> None:
    """NetworkPolicy, enforced by kube-router's policy controller alone (iptables + ipset) in the
    node's namespace. kube-network-policies cannot run here: the kernel has no nf_queue. Policies
    see pod addresses because the bridge hands its traffic to iptables (br_netfilter)."""
    _run([*net.nsenter(), "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"], check=False)
    args = [
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--health-port=0",  # its health server would listen on every address
        "--metrics-port=0",
        "--iptables-sync-period=1m",
        "-v=1",
    ]
    _launch_in_node(state, net, "netpol", bins.binary("kube-router"), args, env={"NODE_NAME": NODE_NAME})


# --- cluster DNS ---------------------------------------------------------------------------------


def coredns_manifests(image: str) -> list[dict[str, Any]]:
    """CoreDNS as a Deployment behind the kube-dns Service, with the RBAC its kubernetes plugin needs."""
    labels = {"k8s-app": "kube-dns"}
    corefile = (
        f".:{COREDNS_PORT} {{\n    errors\n    health :8080\n    ready :8181\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n        pods insecure\n    }}\n"
        "    cache 5\n}\n"
    )
    meta = {"name": "coredns", "namespace": "kube-system"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "kubejury-dev:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "kubejury-dev:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kubejury-dev:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": corefile}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "nodeSelector": {REAL_NODE_LABEL: "true"},
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": COREDNS_PORT, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": COREDNS_PORT, "protocol": "TCP"},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                },
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {
                "clusterIP": CLUSTER_DNS,
                "selector": labels,
                "ports": [
                    {"name": "dns", "port": 53, "targetPort": COREDNS_PORT, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "targetPort": COREDNS_PORT, "protocol": "TCP"},
                ],
            },
        },
    ]


# --- volumes -------------------------------------------------------------------------------------


def local_volume(
    node: RealNode,
    name: str,
    *,
    size: str,
    storage_class: str,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
) -> dict[str, Any]:
    """A static ``local`` PersistentVolume on the real node, its directory made under the state dir."""
    path = node.volumes_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {REAL_NODE_LABEL: "true"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(access_modes),
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "local": {"path": str(path)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}
                            ]
                        }
                    ]
                }
            },
        },
    }


# --- stop ----------------------------------------------------------------------------------------


def _cgroup_pids(cgroup_root: str) -> set[int]:
    """Every pid in the node's cgroup tree, in any hierarchy (v1 controllers or the unified one)."""
    pids: set[int] = set()
    base = Path("/sys/fs/cgroup")
    roots = [base / cgroup_root.lstrip("/")] + [
        d / cgroup_root.lstrip("/") for d in base.iterdir() if d.is_dir()
    ]
    for root in roots:
        if not root.is_dir():
            continue
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def _pids_mentioning(text: str) -> set[int]:
    """Processes whose command line contains ``text`` (the containerd shims of our socket)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (proc / "cmdline").read_bytes():
                found.add(int(proc.name))
    return found


def _kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _mounts_under(prefix: Path) -> Iterator[str]:
    text = Path("/proc/self/mountinfo").read_text()
    points = [line.split()[4] for line in text.splitlines()]
    yield from sorted((p for p in points if p.startswith(str(prefix))), key=len, reverse=True)


def _remove_cgroups(cgroup_root: str) -> None:
    base = Path("/sys/fs/cgroup")
    for top in [base, *[d for d in base.iterdir() if d.is_dir()]]:
        root = top / cgroup_root.lstrip("/")
        if root.is_dir():
            for directory in sorted(
                (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()


def stop_real_node(state: Path) -> list[str]:
    """Stop the real node of ``state`` (if any), containers included; the names of what was stopped."""
    net = recorded_network(state)
    stopped = [name for name in reversed(DAEMONS) if name != "containerd" and processes.stop(state, name)]
    if net is not None:
        _kill_all(_cgroup_pids(net.cgroup_root))
    socket = containerd_socket(state) if (state / "node").is_dir() else None
    if socket is not None:
        shims = _pids_mentioning(str(socket))
        _kill_all(shims - {processes.running_pid(state, "containerd") or -1})
    if processes.stop(state, "containerd"):
        stopped.append("containerd")
    if net is not None or (state / "node").is_dir():
        time.sleep(0.5)
        for point in _mounts_under(state / "node"):
            _run(["umount", "-l", point], check=False)
    if net is not None:
        _remove_cgroups(net.cgroup_root)
        delete_network(net)
        _network_file(state).unlink(missing_ok=True)
        stopped.append(f"node network {net.netns}")
    return stopped
