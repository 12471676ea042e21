"""Node parsing and pools: GFD labels, allocatable GPUs, taints, and the known-product fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import CONTROL_PLANE_TAINT, TEAM_B_TAINT, toleration
from kubejury.placement.gpu_nodes import (
    GPU_RESOURCE,
    GPU_TOLERATIONS_ENV,
    chart_tolerations_from_env,
    cpu_nodes,
    gpu_pools,
    known_gpu,
    parse_node,
    parse_node_list,
    parse_quantity,
    tolerates,
    tolerations_for,
    untolerated_taints,
    usable_gpu_nodes,
)


def gpu_node(
    product: str,
    mib: int,
    cc: tuple[int, int] | None,
    count: int,
    *,
    name: str = "gpu-0",
    cc_prefix: str = "nvidia.com/gpu.compute",
    family: str = "undefined",
) -> dict[str, Any]:
    """A Node as GFD labels it (``family`` "undefined" as on Blackwell with older GFD)."""
    labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(mib),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": family,
    }
    if cc is not None:
        labels[f"{cc_prefix}.major"] = str(cc[0])
        labels[f"{cc_prefix}.minor"] = str(cc[1])
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {GPU_RESOURCE: str(count), "memory": "1000Gi"}},
    }


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodes"


def test_compute_capability_decides_not_family() -> None:
    # Same Blackwell node without gpu.compute labels but with cuda.compute ones.
    node = gpu_node(
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, (12, 0), 8, cc_prefix="nvidia.com/cuda.compute"
    )
    info = parse_node(node)
    assert info.compute_capability == (12, 0)
    # No compute-capability labels at all: the known-product table fills in.
    bare = parse_node(gpu_node("NVIDIA-H100-80GB-HBM3", 81559, None, 8))
    assert bare.compute_capability == (9, 0)
    assert known_gpu("NVIDIA-A100-SXM4-80GB") == ((8, 0), 81920)
    assert known_gpu("Tesla-T4") == ((7, 5), 15360)
    assert known_gpu("Mystery-GPU") is None


def test_example_node_lists_parse() -> None:
    h100 = parse_node_list(json.loads((EXAMPLES / "h100-cluster.json").read_text()))
    assert [p.describe() for p in gpu_pools(h100)] == ["8 × NVIDIA-H100-80GB-HBM3 (79.6 GiB, CC 9.0)"]
    cpu = parse_node_list(json.loads((EXAMPLES / "cpu-only.json").read_text()))
    assert gpu_pools(cpu) == []
    with pytest.raises(ValueError, match="Node"):
        parse_node_list({"kind": "List", "items": [{"kind": "Pod"}]})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64Gi", 64 * 2**30),
        ("500m", 0.5),
        ("8", 8.0),
        ("128G", 128e9),
        ("1Ki", 1024.0),
        ("x", None),
        (None, None),
    ],
)
def test_parse_quantity(text: object, value: float | None) -> None:
    assert parse_quantity(text) == value


def test_allocatable_gpus_win_over_the_count_label() -> None:
    node = gpu_node("NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8)
    node["status"]["allocatable"][GPU_RESOURCE] = "4"  # e.g. four GPUs held by another device plugin config
    assert parse_node(node).gpus == 4
    del node["status"]["allocatable"][GPU_RESOURCE]  # no device plugin data: GFD's count is used
    assert parse_node(node).gpus == 8


def test_pools_group_by_product_memory_and_count() -> None:
    nodes = [
        parse_node(gpu_node("NVIDIA-L4", 23034, (8, 9), 4, name="l4-a")),
        parse_node(gpu_node("NVIDIA-L4", 23034, (8, 9), 4, name="l4-b")),
        parse_node(gpu_node("NVIDIA-L4", 23034, (8, 9), 1, name="l4-small")),
        parse_node(gpu_node("NVIDIA-H200", 143771, (9, 0), 8, name="h200")),
    ]
    pools = gpu_pools(nodes)
    assert [(p.product, p.gpus_per_node, len(p.nodes)) for p in pools] == [
        ("NVIDIA-H200", 8, 1),
        ("NVIDIA-L4", 4, 2),
        ("NVIDIA-L4", 1, 1),
    ]


def test_cpu_nodes_exclude_tainted_and_cordoned() -> None:
    def cpu(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "kind": "Node",
            "metadata": {"name": name},
            "spec": spec,
            "status": {"allocatable": {"memory": "64Gi"}},
        }

    nodes = [
        parse_node(cpu("plain")),
        parse_node(
            cpu("cp", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])
        ),
        parse_node(cpu("soft", taints=[{"key": "x", "effect": "PreferNoSchedule"}])),
        parse_node(cpu("cordoned", unschedulable=True)),
    ]
    assert [n.name for n in cpu_nodes(nodes)] == ["plain", "soft"]


def with_taints(node: dict[str, Any], *taints: dict[str, str]) -> dict[str, Any]:
    """``node`` with ``taints`` added to the ones it has."""
    return {**node, "spec": {**node["spec"], "taints": [*node["spec"]["taints"], *taints]}}


def test_tolerations_cover_the_gpu_taint_of_the_pool() -> None:
    node = parse_node(gpu_node("NVIDIA-L4", 23034, (8, 9), 4))
    assert tolerations_for([node]) == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "present"}
    ]


def test_tolerations_never_cover_a_team_or_control_plane_taint_the_chart_does_not_list() -> None:
    node = parse_node(with_taints(gpu_node("NVIDIA-L4", 23034, (8, 9), 4), TEAM_B_TAINT, CONTROL_PLANE_TAINT))
    assert tolerations_for([node]) == [toleration("nvidia.com/gpu", "present")]
    listed = [toleration("dedicated", "team-b")]
    assert tolerations_for([node], listed) == [
        toleration("dedicated", "team-b"),
        toleration("nvidia.com/gpu", "present"),
    ]


def test_a_gpu_node_with_a_taint_the_chart_does_not_tolerate_is_not_usable() -> None:
    free = parse_node(gpu_node("NVIDIA-L4", 23034, (8, 9), 4, name="free"))
    team = parse_node(with_taints(gpu_node("NVIDIA-L4", 23034, (8, 9), 4, name="team"), TEAM_B_TAINT))
    cp = parse_node(with_taints(gpu_node("NVIDIA-L4", 23034, (8, 9), 4, name="cp"), CONTROL_PLANE_TAINT))
    assert [n.name for n in usable_gpu_nodes([free, team, cp], ())] == ["free"]
    assert [n.name for n in usable_gpu_nodes([free, team, cp], [toleration("dedicated")])] == ["free", "team"]
    assert untolerated_taints(cp, [toleration("dedicated")]) == [CONTROL_PLANE_TAINT]


@pytest.mark.parametrize(
    ("chart_toleration", "tolerated"),
    [
        (toleration("dedicated", "team-b"), True),
        (toleration("dedicated"), True),  # Exists: any value
        ({"key": "dedicated", "value": "team-b"}, True),  # operator defaults to Equal
        ({"key": "dedicated", "operator": "Exists"}, True),  # no effect: every effect
        (toleration("dedicated", "team-a"), False),  # another value
        (toleration("dedicated", "team-b", effect="NoExecute"), False),  # another effect
        (toleration("reserved", "team-b"), False),  # another key
        ({"operator": "Exists"}, True),  # no key, Exists: every taint (the administrator's choice)
        ({"operator": "Equal", "value": "team-b"}, False),  # no key needs Exists
        ({"key": "dedicated", "operator": "Lt", "value": "team-b"}, False),  # not a taint operator
    ],
)
def test_a_chart_toleration_tolerates_a_taint_as_kubernetes_decides(
    chart_toleration: dict[str, str], tolerated: bool
) -> None:
    assert tolerates(chart_toleration, TEAM_B_TAINT) is tolerated


def test_the_charts_gpu_tolerations_are_read_from_its_settings_variable() -> None:
    listed = [toleration("dedicated", "team-b")]
    assert chart_tolerations_from_env({GPU_TOLERATIONS_ENV: json.dumps(listed)}) == tuple(listed)
    assert chart_tolerations_from_env({}) == () == chart_tolerations_from_env({GPU_TOLERATIONS_ENV: ""})


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ('{"key": "dedicated"}', "KUBEJURY_GPU_TOLERATIONS must be a JSON list"),
        ('["dedicated"]', r"KUBEJURY_GPU_TOLERATIONS\[0\] must be an object"),
        ("[{", "KUBEJURY_GPU_TOLERATIONS is not JSON"),
    ],
)
def test_unreadable_chart_gpu_tolerations_are_an_error_naming_the_variable(raw: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        chart_tolerations_from_env({GPU_TOLERATIONS_ENV: raw})
