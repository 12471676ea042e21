"""A model server as the roofline sees it: the precision its matrix products run in, and its numbers."""

from __future__ import annotations

import pytest

from kubejury.config.spec import ModelSpec
from kubejury.placement.server_model import (
    VLLM_MAX_SEQUENCES,
    VLLM_MAX_SEQUENCES_LARGE,
    compute_precision,
    server_facts,
    startup_seconds,
)
from kubejury.records.placement import Placement


@pytest.mark.parametrize(
    ("quantization", "cc", "runtime", "precision"),
    [
        ("fp8", "9.0", "vllm", "fp8"),  # Hopper: FP8 tensor cores
        ("fp8", "8.9", "vllm", "fp8"),  # Ada
        ("fp8", "8.0", "vllm", "bf16"),  # Ampere: weight-only FP8
        ("nvfp4", "10.0", "vllm", "fp4"),  # Blackwell: native NVFP4
        ("nvfp4", "9.0", "vllm", "bf16"),  # Hopper: Marlin weight-only
        ("mxfp4", "9.0", "vllm", "bf16"),
        ("mxfp4", "10.0", "vllm", "fp8"),
        ("bf16", "10.0", "vllm", "bf16"),
        ("awq", "9.0", "vllm", "bf16"),
        ("q4_k_m", "9.0", "llamacpp", "bf16"),
        ("fp8", None, "vllm", "bf16"),
    ],
)
def test_compute_precision(quantization: str, cc: str | None, runtime: str, precision: str) -> None:
    assert compute_precision(quantization, cc, runtime) == precision


def placement(product: str, tp: int = 1, quantization: str = "fp8", cc: str = "9.0") -> Placement:
    return Placement(
        name="m",
        runtime="vllm",
        quantization=quantization,
        tensor_parallel_size=tp,
        gpu_product=product,
        compute_capability=cc,
    )


def test_an_fp8_model_on_an_h100_is_sized_as_the_planner_sizes_it() -> None:
    model = ModelSpec(name="m", source="hf://org/m", parameters="8B")
    facts = server_facts(model, placement("NVIDIA-H100-80GB-HBM3"))
    assert facts.server is not None
    assert facts.weight_bytes == pytest.approx(8e9 * 1.0 * 1.05)  # FP8: 1 byte per parameter, × 1.05
    assert facts.server.kv_bytes_per_token == pytest.approx(128 * 1024)  # the planner's 8B anchor
    assert facts.server.peak_flops == pytest.approx(1979e12)  # FP8 tensor cores, dense
    assert facts.server.max_sequences == VLLM_MAX_SEQUENCES_LARGE  # ≥ 70 GiB and not an A100
    # KV room: 0.9 × 81,559 MiB − weights − 2 GiB
    expected = 0.9 * 81559 * 2**20 - 8e9 * 1.05 - 2 * 2**30
    assert facts.server.kv_capacity_bytes == pytest.approx(expected)
    assert startup_seconds(facts) == pytest.approx(120 + 8.4)


def test_a100s_keep_vllms_smaller_sequence_limit() -> None:
    model = ModelSpec(name="m", source="hf://org/m", parameters="8B")
    facts = server_facts(model, placement("NVIDIA-A100-SXM4-80GB", quantization="bf16", cc="8.0"))
    assert facts.server is not None and facts.server.max_sequences == VLLM_MAX_SEQUENCES


def test_no_estimate_without_a_size_a_known_gpu_or_a_server() -> None:
    sized = ModelSpec(name="m", source="hf://org/m", parameters="8B")
    unsized = ModelSpec(name="m", source="hf://org/m")
    assert "parameters" in server_facts(unsized, placement("NVIDIA-H100-80GB-HBM3")).note
    assert "gpu_specs" in server_facts(sized, placement("NVIDIA-Imaginary-9000")).note
    hosted = Placement(name="m", runtime="openai", quantization="auto", tensor_parallel_size=0)
    assert server_facts(sized, hosted).server is None


def test_a_placement_read_back_from_status_gives_the_same_server() -> None:
    """The operator estimates from placements recorded in status (no compute capability there)."""
    model = ModelSpec(name="m", source="hf://org/m", parameters="27B")
    fresh = placement("NVIDIA-H100-80GB-HBM3", quantization="fp8", cc="9.0")
    read_back = Placement.from_json(fresh.to_json(), name="m")
    assert read_back.compute_capability is None
    assert server_facts(model, read_back) == server_facts(model, fresh)
    assert server_facts(model, read_back).precision == "fp8"
