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
from kubejury.records.placement import (
    DOES_NOT_FIT,
    MAX_EVENT_MESSAGE,
    NOT_DEPLOYED,
    PLACED_ON_CPU,
    PLACED_ON_GPU,
    PLACEMENT_CODES,
    Placement,
    placement_event_messages,
    placement_notes,
)
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
    bare = Placement(
        runtime="openai",
        quantization="",
        tensor_parallel_size=0,
        reason="nothing to deploy",
        code=NOT_DEPLOYED,
    )
    assert bare.to_json() == {
        "reason": "NotDeployed",
        "runtime": "openai",
        "quantization": "",
        "tensorParallelSize": 0,
    }


@pytest.mark.parametrize(
    ("placement", "code"),
    [
        (
            Placement(runtime="vllm", quantization="fp8", tensor_parallel_size=1, gpu_product="L4"),
            PLACED_ON_GPU,
        ),
        (Placement(runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0), PLACED_ON_CPU),
        (
            Placement(runtime="vllm", quantization="bf16", tensor_parallel_size=0, schedulable=False),
            DOES_NOT_FIT,
        ),
        (
            Placement(runtime="openai", quantization="", tensor_parallel_size=0, code=NOT_DEPLOYED),
            NOT_DEPLOYED,
        ),
    ],
)
def test_the_status_reason_is_a_code_of_where_the_server_runs_or_why_not(
    placement: Placement, code: str
) -> None:
    assert placement.reason_code == code
    assert placement.to_json()["reason"] == code and code in PLACEMENT_CODES
    assert " " not in code and code[:1].isupper()  # a CamelCase reason, as Kubernetes conditions have


def test_the_status_entry_has_no_prose_and_writes_schedulable_only_when_false() -> None:
    unfit = Placement(
        runtime="vllm",
        quantization="bf16",
        tensor_parallel_size=0,
        schedulable=False,
        reason="Unschedulable: model 'big' needs about 300 GiB; the largest GPU node has 8 × L4",
        memory_gib=300.04,
    )
    assert unfit.to_json() == {
        "reason": "DoesNotFit",
        "runtime": "vllm",
        "quantization": "bf16",
        "tensorParallelSize": 0,
        "schedulable": False,
        "memoryGiB": 300.0,
    }


def test_a_status_written_before_issue_26_with_prose_reads_with_its_prose_and_a_derived_code() -> None:
    old = {
        "schedulable": True,
        "runtime": "vllm",
        "quantization": "fp8",
        "tensorParallelSize": 1,
        "gpuProduct": "NVIDIA-H100",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100"},
        "reason": "Hopper (CC 9.0): online FP8 of the bf16 checkpoint; TP 1",
    }
    read = Placement.from_json(old, name="m")
    assert read.reason == old["reason"] and read.reason_code == PLACED_ON_GPU
    assert read.to_json()["reason"] == PLACED_ON_GPU
    external = Placement.from_json(
        {
            "runtime": "openai",
            "quantization": "",
            "tensorParallelSize": 0,
            "gpuProduct": None,
            "reason": "existing OpenAI-compatible endpoint https://api: nothing is deployed",
        },
        name="gpt",
    )
    assert external.reason_code == NOT_DEPLOYED and external.gpu_product is None


def test_a_lean_entry_reads_back_with_its_code_and_no_prose() -> None:
    read = Placement.from_json(
        {
            "reason": "DoesNotFit",
            "runtime": "vllm",
            "quantization": "bf16",
            "tensorParallelSize": 0,
            "schedulable": False,
            "memoryGiB": 300.0,
        }
    )
    assert (read.reason, read.reason_code, read.schedulable, read.memory_gib) == (
        "",
        DOES_NOT_FIT,
        False,
        300.0,
    )


def test_placement_events_carry_the_prose_under_1_kib_each_and_read_back_per_name() -> None:
    placements = [
        Placement(
            name=f"model-{i}",
            runtime="vllm",
            quantization="fp8",
            tensor_parallel_size=1,
            reason=f"why {i} " * 30,
        )
        for i in range(12)
    ]
    messages = placement_event_messages(placements)
    assert len(messages) > 1 and all(len(m) <= MAX_EVENT_MESSAGE for m in messages)
    assert placement_notes(messages) == {p.name: p.reason for p in placements}


def test_a_later_placement_event_replaces_an_earlier_ones_line_and_other_events_are_ignored() -> None:
    first = placement_event_messages(
        [Placement(name="m", runtime="vllm", quantization="", tensor_parallel_size=1, reason="old")]
    )
    later = placement_event_messages(
        [Placement(name="m", runtime="vllm", quantization="", tensor_parallel_size=1, reason="new")]
    )
    assert placement_notes([*first, "Generating answers.", *later]) == {"m": "new"}
    assert (
        placement_event_messages(
            [Placement(name="m", runtime="vllm", quantization="", tensor_parallel_size=1)]
        )
        == []
    )


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
