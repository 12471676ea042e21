"""Where a run's servers go (kubejury_operator.placing): placed on the sample node lists while
Pending, read back from the status after."""

from __future__ import annotations

import json
from pathlib import Path

from factories import build_evalrun
from kubejury.config.spec import parse_evalrun
from kubejury_operator.placing import compute_placements, pinned_placements

REPO = Path(__file__).resolve().parents[2]


def test_placements_from_the_nodes_kubectl_returns() -> None:
    nodes = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    decisions = compute_placements(parse_evalrun(build_evalrun()), nodes)
    assert set(decisions) == {"qwen", "judge"}
    assert decisions["qwen"].schedulable
    assert decisions["qwen"].quantization == "fp8"
    assert decisions["qwen"].node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_pinned_placement_only_after_pending() -> None:
    evalrun = parse_evalrun(build_evalrun())
    recorded = {
        name: {"schedulable": True, "runtime": "vllm", "quantization": "bf16", "tensorParallelSize": 2}
        for name in ("qwen", "judge")
    }
    assert pinned_placements({"phase": "Pending", "placement": recorded}, evalrun) is None
    pinned = pinned_placements({"phase": "Generating", "placement": recorded}, evalrun)
    assert pinned is not None and pinned["qwen"].tensor_parallel_size == 2
    assert (
        pinned_placements({"phase": "Generating", "placement": {"qwen": recorded["qwen"]}}, evalrun) is None
    )


def test_placements_use_gpu_nodes_tainted_for_a_team_only_when_the_chart_tolerates_the_taint() -> None:
    nodes = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    for node in nodes:
        if "nvidia.com/gpu" in node["status"]["allocatable"]:
            node["spec"]["taints"].append({"key": "dedicated", "value": "team-b", "effect": "NoSchedule"})
    evalrun = parse_evalrun(build_evalrun())
    assert not compute_placements(evalrun, nodes)["qwen"].schedulable
    team_b = {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}
    allowed = compute_placements(evalrun, nodes, (team_b,))["qwen"]
    assert allowed.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert team_b in allowed.tolerations
