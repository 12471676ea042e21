"""The real node's configuration and its daemons' bookkeeping, without starting anything.

What :mod:`devcluster.realnode` writes decides whether the kubelet starts on this machine's cgroup
layout, whether pods stay on the machine and whether the API server may call the kubelet; these
tests pin each of those choices. The node itself runs in ``tests/e2e/test_real_pods_e2e.py``.
"""

from __future__ import annotations

import ipaddress
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from devcluster import processes, realnode
from devcluster.oci_image import ImageConfig, ImageFile, write_image
from devcluster.realnode import NodeBins, NodeNetwork

NET = NodeNetwork(3)


def test_each_node_index_gets_its_own_namespace_links_and_ranges() -> None:
    other = NodeNetwork(4)
    assert (NET.netns, NET.host_link, NET.node_link, NET.bridge) == (
        "kubejury-node3",
        "kjhost3",
        "kjnode3",
        "kjpods3",
    )
    assert {NET.netns, NET.host_link, NET.pod_cidr, NET.cgroup_root}.isdisjoint(
        {other.netns, other.host_link, other.pod_cidr, other.cgroup_root}
    )
    assert all(len(name) <= 15 for name in (NET.host_link, NET.node_link, NET.bridge))  # IFNAMSIZ


def test_host_and_node_share_a_slash_30_and_the_pod_gateway_is_in_the_pod_range() -> None:
    link = ipaddress.ip_network(f"{NET.host_ip}/30", strict=False)
    assert ipaddress.ip_address(NET.node_ip) in link
    assert ipaddress.ip_address(NET.pod_gateway) in ipaddress.ip_network(NET.pod_cidr)
    assert not ipaddress.ip_network(NET.pod_cidr).overlaps(ipaddress.ip_network("10.96.0.0/16"))


def test_commands_run_in_the_nodes_network_namespace_but_the_hosts_mounts() -> None:
    prefix = NET.nsenter()
    assert prefix[:2] == ["nsenter", "--net=/run/netns/kubejury-node3"]
    assert not any(flag.startswith(("--mount", "-m")) for flag in prefix)


def test_the_kubelet_runs_on_cgroup_v1_with_cgroupfs_and_authorizes_every_caller(tmp_path: Path) -> None:
    config = realnode.kubelet_config(tmp_path, NET, tmp_path / "ca.crt")
    assert (config["cgroupDriver"], config["failCgroupV1"], config["cgroupRoot"]) == (
        "cgroupfs",
        False,
        "/kubejury-node3",
    )
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["readOnlyPort"] == 0 and config["address"] == NET.node_ip


def test_pods_resolve_through_cluster_dns_only(tmp_path: Path) -> None:
    config = realnode.kubelet_config(tmp_path, NET, tmp_path / "ca.crt")
    assert config["resolvConf"] == "" and config["clusterDNS"] == [realnode.CLUSTER_DNS]


def test_the_pod_network_is_one_bridge_in_the_node_with_addresses_from_the_nodes_range(
    tmp_path: Path,
) -> None:
    bridge = realnode.cni_config(tmp_path, NET)["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == "kjpods3" and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": NET.pod_cidr, "gateway": NET.pod_gateway}]]
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(tmp_path)


def write_archive(path: Path, name: str) -> Path:
    program = path.parent / "program"
    program.write_bytes(b"#!/bin/sh\n")
    write_image(
        path, name, [ImageFile(program, PurePosixPath("/bin/program"), 0o755)], ImageConfig(("/bin/program",))
    )
    return path


def test_containerd_keeps_its_state_and_pod_namespaces_under_the_state_directory(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    write_archive(images / "pause-3.10.1.tar", "registry.k8s.io/pause:3.10.1")
    config = realnode.containerd_config(tmp_path / "state", NodeBins(tmp_path / "bin", images))
    assert f"root = '{tmp_path / 'state'}" in config and "netns_mounts_under_state_dir = true" in config
    assert "sandbox = 'registry.k8s.io/pause:3.10.1'" in config
    assert "restrict_oom_score_adj = true" in config and "SystemdCgroup = false" in config


def test_an_archive_is_imported_under_the_name_it_carries(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "image.tar", "kubejury.local/thing:1.0")
    assert realnode.image_name(archive) == "kubejury.local/thing:1.0"


def test_a_missing_binary_or_image_names_the_make_target_that_builds_it(tmp_path: Path) -> None:
    bins = NodeBins(tmp_path / "bin", tmp_path / "images")
    with pytest.raises(processes.ClusterError, match="make node-bins"):
        bins.binary("kubelet")
    with pytest.raises(processes.ClusterError, match="make node-bins"):
        bins.image("pause")


def node(capacity: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"capacity": capacity}}


def test_a_real_node_replaces_the_cpu_only_nodes_and_keeps_the_gpu_ones() -> None:
    assert realnode.is_gpu_node(node({"cpu": "8", "nvidia.com/gpu": "8"}))
    assert not realnode.is_gpu_node(node({"cpu": "8"}))


def test_coredns_answers_only_the_cluster_domain_as_non_root_with_one_added_capability() -> None:
    manifests = {m["kind"]: m for m in realnode.coredns_manifests("kubejury.local/coredns:1.15.0")}
    assert "forward" not in manifests["ConfigMap"]["data"]["Corefile"]  # nothing leaves the machine
    assert manifests["Service"]["spec"]["clusterIP"] == realnode.CLUSTER_DNS
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["NET_BIND_SERVICE"],
    }


def test_a_local_volume_is_pinned_to_the_real_node_and_made_under_the_state_dir(tmp_path: Path) -> None:
    real = realnode.RealNode(tmp_path, NET, NodeBins(tmp_path / "bin", tmp_path / "images"))
    volume = realnode.local_volume(real, "results", size="1Gi", storage_class="")
    path = Path(volume["spec"]["local"]["path"])
    assert path.is_dir() and path.is_relative_to(tmp_path)
    term = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term["values"] == [realnode.NODE_NAME]


def test_a_daemon_is_found_by_its_pid_file_and_stopped(tmp_path: Path) -> None:
    processes.launch(tmp_path, "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    assert processes.running_pid(tmp_path, "sleeper") is not None
    started = time.monotonic()
    assert processes.stop(tmp_path, "sleeper") is True
    assert time.monotonic() - started < 10
    assert processes.running_pid(tmp_path, "sleeper") is None
    assert processes.stop(tmp_path, "sleeper") is False
