"""A realistic mix of GPU and CPU nodes for the scale benchmark, as a Kubernetes NodeList.

Why this module exists: the benchmark needs hundreds of nodes that look to placement and to the
scheduler like a real GPU fleet — seven GPU products with the labels NVIDIA GPU Feature Discovery
puts on each node, the ``nvidia.com/gpu=present:NoSchedule`` taint, ``nvidia.com/gpu`` capacity and
allocatable — plus untainted CPU nodes for the Job pods, in the same shape as ``cluster/nodes.yaml``
(the dev cluster's nodes file format, docs/testing.md). :func:`node_list` is pure; the mix is
scaled to any node count by largest remainders, so a smoke run with 50 nodes keeps every pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ZONES = ("zone-a", "zone-b", "zone-c")
GFD_TIMESTAMP = "1764460800"


@dataclass(frozen=True)
class NodeType:
    """One pool of identical nodes: what GFD says about its GPUs and what the node offers."""

    prefix: str  # node names are <prefix>-<index>
    share: int  # nodes of this type in the 500-node mix
    instance_type: str
    cpu: int  # cores (capacity)
    memory_gi: int  # GiB (capacity)
    pods: int
    product: str = ""  # nvidia.com/gpu.product; "" for a CPU node
    gpu_memory_mib: int = 0  # nvidia.com/gpu.memory (per GPU)
    gpus: int = 0
    family: str = ""
    compute: tuple[int, int] = (0, 0)
    mig_capable: bool = False

    @property
    def is_gpu(self) -> bool:
        return bool(self.product)


#: The 500-node mix: mostly Hopper, a Blackwell pool, the Ampere fleet of the previous generation,
#: Ada inference nodes (L40S, L4), and CPU nodes where the Job pods run (they ask for no GPU).
NODE_TYPES: tuple[NodeType, ...] = (
    NodeType(
        "gpu-h100",
        110,
        "p5.48xlarge",
        192,
        2048,
        110,
        "NVIDIA-H100-80GB-HBM3",
        81559,
        8,
        "hopper",
        (9, 0),
        True,
    ),
    NodeType(
        "gpu-h200", 40, "p5e.48xlarge", 192, 2048, 110, "NVIDIA-H200", 143771, 8, "hopper", (9, 0), True
    ),
    NodeType(
        "gpu-b200",
        30,
        "p6-b200.48xlarge",
        192,
        2048,
        110,
        "NVIDIA-B200",
        183359,
        8,
        "blackwell",
        (10, 0),
        True,
    ),
    NodeType(
        "gpu-a100-80",
        60,
        "p4de.24xlarge",
        96,
        1152,
        110,
        "NVIDIA-A100-SXM4-80GB",
        81920,
        8,
        "ampere",
        (8, 0),
        True,
    ),
    NodeType(
        "gpu-a100-40",
        60,
        "p4d.24xlarge",
        96,
        1152,
        110,
        "NVIDIA-A100-SXM4-40GB",
        40960,
        8,
        "ampere",
        (8, 0),
        True,
    ),
    NodeType("gpu-l40s", 60, "g6e.12xlarge", 48, 384, 110, "NVIDIA-L40S", 46068, 4, "ada-lovelace", (8, 9)),
    NodeType("gpu-l4", 70, "g6.12xlarge", 48, 192, 110, "NVIDIA-L4", 23034, 4, "ada-lovelace", (8, 9)),
    NodeType("cpu", 70, "m7i.8xlarge", 32, 128, 110),
)
REFERENCE_TOTAL = sum(t.share for t in NODE_TYPES)  # 500


def counts(total: int, types: Sequence[NodeType] = NODE_TYPES) -> dict[str, int]:
    """Nodes per type for ``total`` nodes: the mix's shares scaled by largest remainders, and at
    least one node of every type when ``total`` allows it (a small smoke cluster keeps each pool)."""
    if total < 1:
        raise ValueError(f"a node mix needs at least one node, not {total}")
    reference = sum(t.share for t in types)
    exact = {t.prefix: t.share * total / reference for t in types}
    result = {name: math.floor(value) for name, value in exact.items()}
    if total >= len(types):
        for name in result:
            result[name] = max(result[name], 1)
    by_remainder = sorted(exact, key=lambda name: (result[name] - exact[name], name))
    i = 0
    while sum(result.values()) < total:
        result[by_remainder[i % len(by_remainder)]] += 1
        i += 1
    by_size = sorted(result, key=lambda name: (-result[name], name))
    i = 0
    while sum(result.values()) > total:  # the minimum of one per type overshot: take from the largest
        name = by_size[i % len(by_size)]
        if result[name] > 1:
            result[name] -= 1
        i += 1
    return result


def node(kind: NodeType, index: int) -> dict[str, Any]:
    """One Node as a nodes file holds it (labels, taints, capacity/allocatable; KWOK does the rest)."""
    name = f"{kind.prefix}-{index}"
    labels: dict[str, str] = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": kind.instance_type,
        "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
        "type": "kwok",
    }
    capacity: dict[str, str] = {
        "cpu": str(kind.cpu),
        "memory": f"{kind.memory_gi}Gi",
        "pods": str(kind.pods),
        "ephemeral-storage": "1Ti",
    }
    allocatable: dict[str, str] = {
        "cpu": f"{kind.cpu * 1000 - 500}m",
        "memory": f"{kind.memory_gi - 8}Gi",
        "pods": str(kind.pods),
        "ephemeral-storage": "950Gi",
    }
    spec: dict[str, Any] = {}
    if kind.is_gpu:
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": kind.product,
                "nvidia.com/gpu.memory": str(kind.gpu_memory_mib),
                "nvidia.com/gpu.count": str(kind.gpus),
                "nvidia.com/gpu.family": kind.family,
                "nvidia.com/gpu.compute.major": str(kind.compute[0]),
                "nvidia.com/gpu.compute.minor": str(kind.compute[1]),
                "nvidia.com/gpu.machine": kind.instance_type,
                "nvidia.com/gpu.replicas": "1",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/cuda.driver.major": "580",
                "nvidia.com/cuda.driver.minor": "95",
                "nvidia.com/cuda.driver.rev": "05",
                "nvidia.com/cuda.driver-version.full": "580.95.05",
                "nvidia.com/cuda.runtime.major": "13",
                "nvidia.com/cuda.runtime.minor": "0",
                "nvidia.com/mig.capable": "true" if kind.mig_capable else "false",
                "nvidia.com/gfd.timestamp": GFD_TIMESTAMP,
            }
        )
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(kind.gpus)
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def node_list(total: int = REFERENCE_TOTAL, types: Sequence[NodeType] = NODE_TYPES) -> dict[str, Any]:
    """The NodeList of ``total`` nodes in the mix's proportions."""
    per_type = counts(total, types)
    items = [node(kind, i) for kind in types for i in range(per_type[kind.prefix])]
    return {"apiVersion": "v1", "kind": "NodeList", "items": items}


def gpus_by_product(nodes: Mapping[str, Any]) -> dict[str, int]:
    """Allocatable GPUs per product of a NodeList (the fleet's capacity per pool)."""
    found: dict[str, int] = {}
    for item in nodes.get("items") or []:
        product = (item["metadata"].get("labels") or {}).get("nvidia.com/gpu.product")
        if product:
            gpus = int((item["status"].get("allocatable") or {}).get("nvidia.com/gpu", 0))
            found[product] = found.get(product, 0) + gpus
    return found
