"""GPU placement, table-tested on real products: quantization and tensor-parallel size per node pool.

Node objects are built the way NVIDIA GPU Feature Discovery labels them (product, memory in MiB,
count, compute capability) with ``nvidia.com/gpu`` allocatable, as ``kubectl get nodes -o json``
prints them. Memory figures are those the products report (e.g. H100 80GB: 81559 MiB).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from factories import CONTROL_PLANE_TAINT, GPU_TAINT, TEAM_B_TAINT, toleration
from kubejury.config.spec import ModelSpec, parse_evalrun
from kubejury.placement.gpu_nodes import GPU_RESOURCE, NodeInfo, gpu_pools, parse_node, parse_node_list
from kubejury.placement.planner import Placement, place_model, plan_placements

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nodes"


def gpu_node(
    product: str,
    mib: int,
    cc: tuple[int, int] | None,
    count: int,
    *,
    name: str | None = None,
    cc_prefix: str = "nvidia.com/gpu.compute",
    memory: str = "1000Gi",
    unschedulable: bool = False,
    extra_taints: Sequence[dict[str, str]] = (),
) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(mib),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": "undefined",  # as Blackwell shows with older GFD; must not matter
    }
    if cc is not None:
        labels[f"{cc_prefix}.major"] = str(cc[0])
        labels[f"{cc_prefix}.minor"] = str(cc[1])
    return {
        "kind": "Node",
        "metadata": {"name": name or f"{product.lower()}-0", "labels": labels},
        "spec": {
            "unschedulable": unschedulable,
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, *extra_taints],
        },
        "status": {"allocatable": {GPU_RESOURCE: str(count), "memory": memory, "cpu": "96"}},
    }


def cpu_node(
    name: str = "cpu-0", memory: str = "64Gi", taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux"}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"memory": memory, "cpu": "16"}},
    }


CLUSTERS: dict[str, list[dict[str, Any]]] = {
    "H100-80GB x8": [gpu_node("NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8)],
    "H200 x8": [gpu_node("NVIDIA-H200", 143771, (9, 0), 8)],
    "L40S x4": [gpu_node("NVIDIA-L40S", 46068, (8, 9), 4)],
    "A100-40GB x8": [gpu_node("NVIDIA-A100-SXM4-40GB", 40960, (8, 0), 8)],
    "A100-80GB x8": [gpu_node("NVIDIA-A100-SXM4-80GB", 81920, (8, 0), 8)],
    "A10 x1": [gpu_node("NVIDIA-A10G", 23028, (8, 6), 1)],
    "A10 x4": [gpu_node("NVIDIA-A10G", 23028, (8, 6), 4)],
    "L4 x4": [gpu_node("NVIDIA-L4", 23034, (8, 9), 4)],
    "B200 x8": [gpu_node("NVIDIA-B200", 183359, (10, 0), 8)],
    "RTX PRO 6000 x8": [gpu_node("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, (12, 0), 8)],
    "no GPU": [cpu_node(memory="64Gi")],
}

MODELS: dict[str, dict[str, Any]] = {
    # gpt-oss-120b: 117B total, 5.1B active, MXFP4 checkpoint.
    "gpt-oss-120b": {"source": "hf://openai/gpt-oss-120b", "parameters": "117B-A5.1B", "checkpoint": "mxfp4"},
    "qwen3.5-27b": {"source": "hf://Qwen/Qwen3.5-27B", "parameters": "27B"},
    "gemma-4-31b": {"source": "hf://google/gemma-4-31b-it", "parameters": "31B"},
    "dense-9b": {"source": "hf://example/dense-9B", "parameters": "9B"},
    "llama-70b": {"source": "hf://meta-llama/Llama-3.3-70B-Instruct", "parameters": "70B"},
    "qwq-32b-q4km": {
        "source": "hf://Qwen/QwQ-32B-GGUF",
        "parameters": "32B",
        "runtime": "llamacpp",
        "quantization": "Q4_K_M",
    },
}

U = None  # Unschedulable
# (cluster, model) -> (quantization, tensor-parallel size) or U.
# Reasoning behind the less obvious rows:
# - Hopper/Ada/Blackwell run bf16 checkpoints as online FP8; Ampere keeps bf16 when it fits on a node.
# - gpt-oss keeps MXFP4 everywhere (native on Hopper+, Marlin path on Ampere/Ada).
# - 70B FP8 is ~68 GiB of weights: over one H100's 0.9 × 79.6 GiB with KV cache, so TP 2.
# - A10 x1 cannot hold 27B+ even in FP8; a 9B in bf16 does not fit a single A10, FP8 weight-only does.
# - GGUF goes to llama.cpp on one GPU of any pool, and to the CPU node when there is no GPU.
EXPECTED: dict[tuple[str, str], tuple[str, int] | None] = {
    ("H100-80GB x8", "gpt-oss-120b"): ("mxfp4", 1),
    ("H100-80GB x8", "qwen3.5-27b"): ("fp8", 1),
    ("H100-80GB x8", "gemma-4-31b"): ("fp8", 1),
    ("H100-80GB x8", "dense-9b"): ("fp8", 1),
    ("H100-80GB x8", "llama-70b"): ("fp8", 2),
    ("H100-80GB x8", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("H200 x8", "gpt-oss-120b"): ("mxfp4", 1),
    ("H200 x8", "qwen3.5-27b"): ("fp8", 1),
    ("H200 x8", "gemma-4-31b"): ("fp8", 1),
    ("H200 x8", "dense-9b"): ("fp8", 1),
    ("H200 x8", "llama-70b"): ("fp8", 1),
    ("H200 x8", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("L40S x4", "gpt-oss-120b"): ("mxfp4", 2),
    ("L40S x4", "qwen3.5-27b"): ("fp8", 1),
    ("L40S x4", "gemma-4-31b"): ("fp8", 1),
    ("L40S x4", "dense-9b"): ("fp8", 1),
    ("L40S x4", "llama-70b"): ("fp8", 4),
    ("L40S x4", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("A100-40GB x8", "gpt-oss-120b"): ("mxfp4", 2),
    ("A100-40GB x8", "qwen3.5-27b"): ("bf16", 2),
    ("A100-40GB x8", "gemma-4-31b"): ("bf16", 4),
    ("A100-40GB x8", "dense-9b"): ("bf16", 1),
    ("A100-40GB x8", "llama-70b"): ("bf16", 8),
    ("A100-40GB x8", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("A100-80GB x8", "gpt-oss-120b"): ("mxfp4", 1),
    ("A100-80GB x8", "qwen3.5-27b"): ("bf16", 1),
    ("A100-80GB x8", "gemma-4-31b"): ("bf16", 1),
    ("A100-80GB x8", "dense-9b"): ("bf16", 1),
    ("A100-80GB x8", "llama-70b"): ("bf16", 4),
    ("A100-80GB x8", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("A10 x1", "gpt-oss-120b"): U,
    ("A10 x1", "qwen3.5-27b"): U,
    ("A10 x1", "gemma-4-31b"): U,
    ("A10 x1", "dense-9b"): ("fp8", 1),
    ("A10 x1", "llama-70b"): U,
    ("A10 x1", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("A10 x4", "gpt-oss-120b"): ("mxfp4", 4),
    ("A10 x4", "qwen3.5-27b"): ("bf16", 4),
    ("A10 x4", "gemma-4-31b"): ("bf16", 4),
    ("A10 x4", "dense-9b"): ("bf16", 2),
    ("A10 x4", "llama-70b"): U,
    ("A10 x4", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("L4 x4", "gpt-oss-120b"): ("mxfp4", 4),
    ("L4 x4", "qwen3.5-27b"): ("fp8", 2),
    ("L4 x4", "gemma-4-31b"): ("fp8", 4),
    ("L4 x4", "dense-9b"): ("fp8", 1),
    ("L4 x4", "llama-70b"): U,
    ("L4 x4", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("B200 x8", "gpt-oss-120b"): ("mxfp4", 1),
    ("B200 x8", "qwen3.5-27b"): ("fp8", 1),
    ("B200 x8", "gemma-4-31b"): ("fp8", 1),
    ("B200 x8", "dense-9b"): ("fp8", 1),
    ("B200 x8", "llama-70b"): ("fp8", 1),
    ("B200 x8", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("RTX PRO 6000 x8", "gpt-oss-120b"): ("mxfp4", 1),
    ("RTX PRO 6000 x8", "qwen3.5-27b"): ("fp8", 1),
    ("RTX PRO 6000 x8", "gemma-4-31b"): ("fp8", 1),
    ("RTX PRO 6000 x8", "dense-9b"): ("fp8", 1),
    ("RTX PRO 6000 x8", "llama-70b"): ("fp8", 1),
    ("RTX PRO 6000 x8", "qwq-32b-q4km"): ("q4_k_m", 1),
    ("no GPU", "gpt-oss-120b"): U,
    ("no GPU", "qwen3.5-27b"): U,
    ("no GPU", "gemma-4-31b"): U,
    ("no GPU", "dense-9b"): U,
    ("no GPU", "llama-70b"): U,
    ("no GPU", "qwq-32b-q4km"): ("q4_k_m", 0),
}


def model(name: str, **fields: Any) -> ModelSpec:
    return ModelSpec.model_validate({"name": name, **fields})


def nodes_of(objs: list[dict[str, Any]]) -> list[NodeInfo]:
    return [parse_node(o) for o in objs]


def test_table_is_complete() -> None:
    assert set(EXPECTED) == {(c, m) for c in CLUSTERS for m in MODELS}


@pytest.mark.parametrize(("cluster", "name"), sorted(EXPECTED))
def test_placement_table(cluster: str, name: str) -> None:
    placement = place_model(model(name, **MODELS[name]), nodes_of(CLUSTERS[cluster]))
    expected = EXPECTED[(cluster, name)]
    if expected is None:
        assert not placement.schedulable, placement.reason
        assert placement.reason.startswith("Unschedulable:")
        assert repr(name) in placement.reason  # names the model
        assert "GiB" in placement.reason  # and the memory needed
        assert placement.memory_gib is not None and placement.memory_gib > 0
        return
    assert placement.schedulable, placement.reason
    assert (placement.quantization, placement.tensor_parallel_size) == expected, placement.reason
    runtime = MODELS[name].get("runtime", "vllm")
    assert placement.runtime == runtime
    if expected[1] > 0:
        product = CLUSTERS[cluster][0]["metadata"]["labels"]["nvidia.com/gpu.product"]
        assert placement.gpu_product == product
        assert placement.node_selector == {"nvidia.com/gpu.product": product}
        assert {
            "key": "nvidia.com/gpu",
            "operator": "Equal",
            "value": "present",
            "effect": "NoSchedule",
        } in placement.tolerations
    else:
        assert placement.gpu_product is None and placement.node_selector == {}
    # --quantization fp8 exactly when a bf16 checkpoint is quantized online
    wants_flag = placement.quantization == "fp8" and runtime == "vllm"
    assert (placement.vllm_args == ["--quantization", "fp8"]) == wants_flag


def test_unschedulable_names_memory_and_largest_node() -> None:
    placement = place_model(model("llama-70b", **MODELS["llama-70b"]), nodes_of(CLUSTERS["L4 x4"]))
    assert "needs about 88 GiB" in placement.reason
    assert "largest GPU node has 4 × NVIDIA-L4" in placement.reason
    cpu_only = place_model(model("llama-70b", **MODELS["llama-70b"]), nodes_of(CLUSTERS["no GPU"]))
    assert "no schedulable GPU nodes" in cpu_only.reason and "llamacpp" in cpu_only.reason


def test_blackwell_runs_nvfp4_checkpoints_natively() -> None:
    nvfp4 = model("qwen-nvfp4", source="hf://nvidia/Qwen3-32B-FP4", parameters="32B", checkpoint="nvfp4")
    b200 = place_model(nvfp4, nodes_of(CLUSTERS["B200 x8"]))
    assert (b200.quantization, b200.tensor_parallel_size, b200.vllm_args) == ("nvfp4", 1, [])
    assert "native NVFP4" in b200.reason
    hopper = place_model(nvfp4, nodes_of(CLUSTERS["H100-80GB x8"]))
    assert hopper.quantization == "nvfp4" and "weight-only" in hopper.reason


def test_prequantized_fp8_needs_no_flag() -> None:
    fp8 = model("m", source="hf://a/b-FP8", parameters="27B", checkpoint="fp8")
    placement = place_model(fp8, nodes_of(CLUSTERS["H100-80GB x8"]))
    assert (placement.quantization, placement.vllm_args) == ("fp8", [])


def test_explicit_quantization_honoured() -> None:
    bf16 = model("q", source="hf://Qwen/Qwen3.5-27B", parameters="27B", quantization="bf16")
    placement = place_model(bf16, nodes_of(CLUSTERS["H100-80GB x8"]))
    assert (placement.quantization, placement.tensor_parallel_size) == ("bf16", 1)
    assert "explicit" in placement.reason
    fp8 = model("q", source="hf://Qwen/Qwen3.5-27B", parameters="27B", quantization="FP8")
    ampere = place_model(fp8, nodes_of(CLUSTERS["A100-80GB x8"]))
    assert (ampere.quantization, ampere.vllm_args) == ("fp8", ["--quantization", "fp8"])
    assert "weight-only" in ampere.reason


def test_explicit_quantization_rejected_with_reason() -> None:
    bf16_70b = model("big", source="hf://a/b", parameters="70B", quantization="bf16")
    placement = place_model(bf16_70b, nodes_of(CLUSTERS["L4 x4"]))
    assert not placement.schedulable
    assert "'big'" in placement.reason and "as bf16" in placement.reason
    t4 = [gpu_node("Tesla-T4", 15360, (7, 5), 4)]
    old = place_model(model("small", source="hf://a/b", parameters="1B", quantization="fp8"), nodes_of(t4))
    assert not old.schedulable and "below 8.0" in old.reason


def test_gguf_prefers_small_gpus_and_auto_picks_the_best_type_that_fits() -> None:
    mixed = nodes_of([*CLUSTERS["H200 x8"], *CLUSTERS["L4 x4"], cpu_node()])
    auto = model("qwq", source="hf://Qwen/QwQ-32B-GGUF", parameters="32B", runtime="llamacpp")
    placement = place_model(auto, mixed)
    assert (placement.gpu_product, placement.quantization, placement.tensor_parallel_size) == (
        "NVIDIA-L4",
        "q4_k_m",
        1,
    )
    on_h200 = place_model(auto, nodes_of(CLUSTERS["H200 x8"]))
    assert on_h200.quantization == "q8_0"
    ollama = model("o", source="ollama://qwen3:32b-q6_K", parameters="32B", runtime="ollama")
    assert place_model(ollama, nodes_of(CLUSTERS["no GPU"])).quantization == "q6_k"


def test_vllm_prefers_fewest_gpus_then_smallest() -> None:
    mixed = nodes_of([*CLUSTERS["H200 x8"], *CLUSTERS["L4 x4"], *CLUSTERS["L40S x4"]])
    placement = place_model(model("q", **MODELS["qwen3.5-27b"]), mixed)
    assert (placement.gpu_product, placement.tensor_parallel_size) == ("NVIDIA-L40S", 1)
    big = place_model(model("l", **MODELS["llama-70b"]), mixed)
    assert (big.gpu_product, big.tensor_parallel_size) == ("NVIDIA-H200", 1)


def test_gguf_too_big_for_cpu_node_is_unschedulable() -> None:
    huge = model("huge", source="hf://a/b-GGUF", parameters="400B", runtime="llamacpp", quantization="q4_k_m")
    placement = place_model(huge, nodes_of([cpu_node(memory="64Gi")]))
    assert not placement.schedulable
    assert "'huge'" in placement.reason and "64 GiB" in placement.reason


def test_tainted_and_cordoned_nodes_are_skipped() -> None:
    control_plane = cpu_node(
        "cp",
        memory="512Gi",
        taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
    )
    gguf = model("g", source="hf://a/b-GGUF", parameters="8B", runtime="llamacpp")
    assert not place_model(gguf, nodes_of([control_plane])).schedulable
    cordoned = gpu_node("NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8, unschedulable=True)
    assert not place_model(model("m", **MODELS["dense-9b"]), nodes_of([cordoned])).schedulable


def test_resource_hints_override_the_estimate() -> None:
    forced = model("m", source="hf://a/b", parameters="9B", resources={"gpus": 4})
    assert place_model(forced, nodes_of(CLUSTERS["H100-80GB x8"])).tensor_parallel_size == 4
    too_many = model("m", source="hf://a/b", parameters="9B", resources={"gpus": 8})
    assert not place_model(too_many, nodes_of(CLUSTERS["L4 x4"])).schedulable
    sized = model("m", source="hf://a/b", parameters="9B", resources={"gpuMemoryGiB": 100})
    assert place_model(sized, nodes_of(CLUSTERS["H100-80GB x8"])).tensor_parallel_size == 2


def test_unknown_size_is_placed_but_says_memory_is_unchecked() -> None:
    unsized = model("m", source="hf://a/b")
    placement = place_model(unsized, nodes_of(CLUSTERS["H100-80GB x8"]))
    assert placement.schedulable and "memory not checked" in placement.reason


def test_pools_with_the_same_product_get_distinct_selectors() -> None:
    nodes = nodes_of(
        [
            gpu_node("NVIDIA-A100-SXM4-80GB", 81920, (8, 0), 8, name="a"),
            gpu_node("NVIDIA-A100-SXM4-80GB", 81920, (8, 0), 2, name="b"),
        ]
    )
    assert len(gpu_pools(nodes)) == 2
    placement = place_model(model("m", **MODELS["dense-9b"]), nodes)
    assert placement.node_selector["nvidia.com/gpu.count"] in ("2", "8")


def test_openai_endpoints_are_not_deployed() -> None:
    remote = model("ds", runtime="openai", source="https://api.deepseek.com/v1")
    placement = place_model(remote, [])
    assert placement.schedulable and placement.runtime == "openai" and placement.tensor_parallel_size == 0
    assert "nothing is deployed" in placement.reason


def test_plan_covers_models_and_judges() -> None:
    run = parse_evalrun(
        {
            "metadata": {"name": "r"},
            "spec": {
                "benchmark": {"uri": "b.jsonl"},
                "models": [
                    {"name": "qwen3.5-27b", **MODELS["qwen3.5-27b"]},
                    {"name": "gpt-oss-120b", **MODELS["gpt-oss-120b"]},
                ],
                "judges": [
                    {"name": "gpt-oss-120b", **MODELS["gpt-oss-120b"], "sameAs": "gpt-oss-120b"},
                    {"name": "tiny", "runtime": "llamacpp"},
                ],
            },
        }
    )
    plans = plan_placements(run.spec, nodes_of(CLUSTERS["H100-80GB x8"]))
    assert list(plans) == ["qwen3.5-27b", "gpt-oss-120b", "tiny"]
    assert all(isinstance(p, Placement) for p in plans.values())
    assert plans["tiny"].quantization == "q4_k_m"  # the embedded Gemma-3 270M


def test_small_gguf_models_stay_off_gpus_when_cpu_nodes_exist() -> None:
    cluster = json.loads((EXAMPLES / "h100-cluster.json").read_text())
    nodes = parse_node_list(cluster)
    tiny = model("tiny", runtime="llamacpp")  # the embedded Gemma-3 270M
    placement = place_model(tiny, nodes)
    assert (placement.tensor_parallel_size, placement.gpu_product, placement.quantization) == (
        0,
        None,
        "q4_k_m",
    )
    assert "GPUs are kept for larger models" in placement.reason
    pinned = model("tiny", runtime="llamacpp", resources={"gpus": 1})
    assert place_model(pinned, nodes).gpu_product == "NVIDIA-H100-80GB-HBM3"
    larger = model("qwq", **MODELS["qwq-32b-q4km"])
    assert place_model(larger, nodes).gpu_product == "NVIDIA-H100-80GB-HBM3"


# ------------------------------------------------------------------ taints: team reservations hold

TEAM_B_TOLERATION = toleration("dedicated", "team-b")


def h100_reserved_for_team_b_and_a_free_l4() -> list[NodeInfo]:
    """An H100 node another team reserved (``dedicated=team-b:NoSchedule``) and a free L4 node."""
    return nodes_of(
        [
            gpu_node(
                "NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8, name="team-b-h100", extra_taints=[TEAM_B_TAINT]
            ),
            gpu_node("NVIDIA-L4", 23034, (8, 9), 4, name="free-l4"),
        ]
    )


def test_a_gpu_pool_reserved_for_another_team_is_not_used_when_the_chart_does_not_tolerate_its_taint() -> (
    None
):
    placement = place_model(
        model("llama-70b", **MODELS["llama-70b"]), h100_reserved_for_team_b_and_a_free_l4()
    )
    assert not placement.schedulable  # the free L4s are too small; the team's H100s are not ours
    assert "team-b-h100" in placement.reason and "dedicated=team-b:NoSchedule" in placement.reason
    assert "gpuTolerations" in placement.reason  # says how an administrator may allow it
    small = place_model(model("dense-9b", **MODELS["dense-9b"]), h100_reserved_for_team_b_and_a_free_l4())
    assert small.gpu_product == "NVIDIA-L4"
    assert [t["key"] for t in small.tolerations] == ["nvidia.com/gpu"]


def test_a_gguf_model_is_not_placed_on_a_reserved_gpu_pool_either() -> None:
    gguf = model("qwq", **MODELS["qwq-32b-q4km"])
    reserved = nodes_of([gpu_node("NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8, extra_taints=[TEAM_B_TAINT])])
    assert not place_model(gguf, reserved).schedulable
    allowed = place_model(gguf, reserved, chart_tolerations=[TEAM_B_TOLERATION])
    assert allowed.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert TEAM_B_TOLERATION in allowed.tolerations


def test_with_the_chart_tolerating_the_team_taint_its_nodes_are_used_and_carry_that_toleration_only() -> None:
    placement = place_model(
        model("llama-70b", **MODELS["llama-70b"]),
        h100_reserved_for_team_b_and_a_free_l4(),
        chart_tolerations=[TEAM_B_TOLERATION, toleration("other-team", "x")],
    )
    assert placement.gpu_product == "NVIDIA-H100-80GB-HBM3", placement.reason
    assert list(placement.tolerations) == [
        toleration("dedicated", "team-b"),
        toleration("nvidia.com/gpu", "present"),
    ]


def test_the_control_plane_taint_is_never_tolerated_on_a_gpu_node() -> None:
    on_control_plane = nodes_of(
        [
            gpu_node(
                "NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8, name="cp-gpu", extra_taints=[CONTROL_PLANE_TAINT]
            )
        ]
    )
    for chart in ([], [TEAM_B_TOLERATION]):
        placement = place_model(model("m", **MODELS["dense-9b"]), on_control_plane, chart_tolerations=chart)
        assert not placement.schedulable
        assert "node-role.kubernetes.io/control-plane:NoSchedule" in placement.reason
        assert not any(t.get("key") == CONTROL_PLANE_TAINT["key"] for t in placement.tolerations)


def test_a_node_with_one_tolerated_and_one_untolerated_taint_is_not_used() -> None:
    both = nodes_of(
        [
            gpu_node(
                "NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8, extra_taints=[TEAM_B_TAINT, CONTROL_PLANE_TAINT]
            )
        ]
    )
    placement = place_model(model("m", **MODELS["dense-9b"]), both, chart_tolerations=[TEAM_B_TOLERATION])
    assert not placement.schedulable


def test_the_gpu_taint_is_tolerated_and_a_soft_taint_needs_no_toleration() -> None:
    soft = {"key": "x", "value": "y", "effect": "PreferNoSchedule"}
    node = gpu_node("NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 8, extra_taints=[soft])
    placement = place_model(model("m", **MODELS["dense-9b"]), nodes_of([node]))
    assert placement.schedulable, placement.reason
    assert list(placement.tolerations) == [toleration(GPU_TAINT["key"], GPU_TAINT["value"])]


def test_plan_placements_passes_the_chart_tolerations_to_every_model_and_judge() -> None:
    run = parse_evalrun(
        {
            "metadata": {"name": "r"},
            "spec": {
                "benchmark": {"uri": "b.jsonl"},
                "models": [{"name": "big", **MODELS["llama-70b"]}],
                "judges": [{"name": "judge", **MODELS["llama-70b"]}],
            },
        }
    )
    nodes = h100_reserved_for_team_b_and_a_free_l4()
    assert not any(p.schedulable for p in plan_placements(run.spec, nodes).values())
    allowed = plan_placements(run.spec, nodes, chart_tolerations=[TEAM_B_TOLERATION])
    assert all(p.gpu_product == "NVIDIA-H100-80GB-HBM3" for p in allowed.values())
