"""kubejury.records.placement: a placement crosses from one reconcile to a later one through
``status.placement``: what the operator records, it reads back — and builds the very same server
from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kubejury.config.spec import parse_evalrun
from kubejury.placement.planner import parse_node_list, plan_placements
from kubejury.records.placement import Placement
from kubejury_operator import manifests as mf
from kubejury_operator import settings as opsettings
from kubejury_operator.cluster_run import cluster_run

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("example", "nodes"),
    [
        ("evalrun-study.yaml", "mixed-cluster.json"),
        ("evalrun-study.yaml", "h100-cluster.json"),
        ("evalrun-kind-cpu.yaml", "cpu-only.json"),
    ],
)
def test_recorded_placement_reads_back_into_the_same_servers(example: str, nodes: str) -> None:
    body = yaml.safe_load((REPO / "examples" / example).read_text())
    body["metadata"]["uid"] = "u-1"
    evalrun = parse_evalrun(body)
    node_list = json.loads((REPO / "examples" / "nodes" / nodes).read_text())["items"]
    decided = plan_placements(evalrun.spec, parse_node_list(node_list))
    recorded = json.loads(json.dumps({n: p.to_json() for n, p in decided.items()}))  # through etcd
    read_back = {n: Placement.from_json(entry, name=n) for n, entry in recorded.items()}
    assert {n: p.to_json() for n, p in read_back.items()} == recorded
    settings = opsettings.WorkloadSettings()
    first = cluster_run(body, evalrun, decided, settings)
    later = cluster_run(body, evalrun, read_back, settings)
    for before, after in zip(first.models + first.judges, later.models + later.judges, strict=True):
        if before.in_cluster:
            assert mf.model_deployment(first.ref, after, 1, settings) == mf.model_deployment(
                first.ref, before, 1, settings
            )


def test_a_placement_recorded_before_optional_fields_existed_reads_with_defaults() -> None:
    old = Placement.from_json({"runtime": "vllm", "quantization": "bf16", "tensorParallelSize": 2}, name="m")
    assert old.schedulable and old.tensor_parallel_size == 2 and old.name == "m"
    assert old.vllm_args == () and old.node_selector == {}


def test_a_placement_without_tolerations_or_vllm_args_writes_neither_key() -> None:
    bare = Placement(runtime="openai", quantization="", tensor_parallel_size=0, reason="nothing to deploy")
    assert bare.to_json() == {
        "schedulable": True,
        "runtime": "openai",
        "quantization": "",
        "tensorParallelSize": 0,
        "gpuProduct": None,
        "nodeSelector": {},
        "reason": "nothing to deploy",
    }


def test_tolerations_and_vllm_args_survive_the_status_round_trip() -> None:
    placed = Placement(
        name="m",
        runtime="vllm",
        quantization="fp8",
        tensor_parallel_size=1,
        gpu_product="NVIDIA-H100",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100"},
        tolerations=({"key": "gpu", "operator": "Exists"},),
        vllm_args=("--quantization", "fp8"),
    )
    assert Placement.from_json(json.loads(json.dumps(placed.to_json())), name="m") == placed
