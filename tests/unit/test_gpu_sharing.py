"""Placement on shared GPUs (time-slicing, MPS), MIG slices, and GPU nodes nothing describes.

A time-sliced or MPS GPU is advertised as several ``nvidia.com/gpu``; a MIG slice is one
``nvidia.com/gpu`` that is a fraction of a GPU. Tensor parallelism across either fails, so a model
gets TP 1 there or another pool. The labels are the ones NVIDIA GPU Feature Discovery writes.
"""

from __future__ import annotations

from typing import Any

from kubejury.config.spec import ModelSpec
from kubejury.placement.gpu_nodes import GPU_RESOURCE, gpu_pools, parse_node
from kubejury.placement.planner import place_model


def node(name: str, labels: dict[str, str], gpus: int) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {GPU_RESOURCE: str(gpus), "memory": "1000Gi", "cpu": "96"}},
    }


H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
}
TIME_SLICED = {  # 8 GPUs × 4 replicas: 32 allocatable, product renamed by GFD
    **H100,
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
    "nvidia.com/gpu.count": "8",
}
MIG = {  # mig.strategy single, all-3g.40gb on 8 × A100-80GB: 16 slices
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
}


def model(name: str, **fields: Any) -> ModelSpec:
    return ModelSpec.model_validate({"name": name, "source": f"hf://org/{name}", **fields})


def test_sharing_and_mig_are_read_from_gfd_labels_with_each_devices_own_memory() -> None:
    shared = parse_node(node("ts-0", TIME_SLICED, 32))
    assert (shared.gpu_sharing, shared.gpu_memory_mib) == ("time-slicing", 81559 // 4)
    assert parse_node(
        node("ts-1", {**H100, "nvidia.com/gpu.product": "NVIDIA-L4-SHARED"}, 8)
    ).gpu_sharing == ("time-slicing")
    assert (
        parse_node(node("mps-0", {**H100, "nvidia.com/gpu.sharing-strategy": "mps"}, 8)).gpu_sharing == "mps"
    )
    slice_ = parse_node(node("mig-0", MIG, 16))
    assert (slice_.gpu_sharing, slice_.gpu_memory_mib) == ("mig", 40000)  # not the whole A100's 80 GB
    assert parse_node(node("h100-0", H100, 8)).gpu_sharing is None
    (pool,) = gpu_pools([shared])
    assert not pool.whole_gpus and "time-sliced" in pool.describe()


def test_a_model_needing_tensor_parallelism_is_never_placed_on_shared_or_mig_devices() -> None:
    big = model("big", parameters="70B", quantization="fp8")  # ~70 GiB of weights: TP 2+ on 40 GB
    for labels, gpus in ((TIME_SLICED, 32), (MIG, 16)):
        placement = place_model(big, [parse_node(node("n", labels, gpus))])
        assert not placement.schedulable, placement
        assert "not whole GPUs" in placement.reason and "no tensor parallelism" in placement.reason
    whole = place_model(big, [parse_node(node("mig", MIG, 16)), parse_node(node("whole", H100, 8))])
    assert whole.schedulable and whole.gpu_product == "NVIDIA-H100-80GB-HBM3"
    fixed = place_model(
        model("two", parameters="8B", resources={"gpus": 2}), [parse_node(node("n", MIG, 16))]
    )
    assert not fixed.schedulable and "no tensor parallelism" in fixed.reason


def test_a_small_model_fits_one_mig_slice_with_tp_1() -> None:
    placement = place_model(model("small", parameters="8B"), [parse_node(node("mig", MIG, 16))])
    assert placement.schedulable and placement.tensor_parallel_size == 1, placement
    assert placement.node_selector["nvidia.com/gpu.product"] == MIG["nvidia.com/gpu.product"]


def test_gpu_nodes_without_gfd_labels_get_a_message_saying_how_to_describe_them() -> None:
    bare = node("gpu-a", {}, 4)
    placement = place_model(model("qwen", parameters="8B"), [parse_node(bare)])
    assert not placement.schedulable
    assert "gpu-a" in placement.reason and "GPU Feature Discovery" in placement.reason
    assert "kubectl label node gpu-a nvidia.com/gpu.product=" in placement.reason
    described = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034"}
    assert place_model(model("qwen", parameters="8B"), [parse_node(node("gpu-a", described, 4))]).schedulable
