"""One model server as the roofline sees it: bytes, parameters, GPUs and their peaks.

Why this module exists: the estimate needs, for the server placement chose, the numbers the
roofline (:mod:`kubejury.placement.roofline`) takes — weight bytes at the chosen quantization,
KV bytes per token, KV room, the engine's sequence limit, and the GPU's bandwidth and peak at the
precision the model computes in (:mod:`kubejury.placement.gpu_specs`). It uses the planner's own
memory constants, so the estimate and the placement never disagree about a model's size. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubejury.config.spec import ModelSpec
from kubejury.modelinfo import parse_active_parameters, parse_parameters
from kubejury.placement.gpu_nodes import GIB, known_gpu
from kubejury.placement.gpu_specs import GpuSpec, gpu_spec
from kubejury.placement.planner import (
    BYTES_PER_PARAM,
    GGUF_ASSUMED,
    KV_BYTES_PER_TOKEN_8B,
    VLLM_OVERHEAD_GIB_PER_GPU,
    VLLM_WEIGHT_FACTOR,
)
from kubejury.placement.roofline import Server
from kubejury.records.placement import Placement
from kubejury.runtimes import VLLM, recorded_runtime

VLLM_MAX_SEQUENCES_LARGE = 1024
VLLM_MAX_SEQUENCES = 256
#: Parallel sequences of a GGUF server (llama-server and Ollama pick up to 4 when memory allows).
GGUF_SLOTS = 4
#: Bring-up of a model server: fixed (scheduling, engine start, CUDA graphs) + weights read from the cache.
STARTUP_FIXED_SECONDS = 120.0
WEIGHT_LOAD_BYTES_PER_SECOND = 1e9
#: A CPU node serving a GGUF model (no datasheet: a modest server's sustained memory bandwidth).
CPU_NODE = GpuSpec("CPU node (assumed)", 0, 50, 1.0, None, None, "assumption: 50 GB/s, 1 TFLOP/s")


def compute_precision(quantization: str, compute_capability: str | None, runtime: str) -> str:
    """The tensor precision the model's matrix products run in on this GPU.

    FP8 on Ada/Hopper/Blackwell (CC ≥ 8.9); NVFP4 natively on Blackwell (CC ≥ 10); gpt-oss's
    MXFP4 weights with FP8 activations on Blackwell; everything else — weight-only formats (AWQ,
    GPTQ, FP8/NVFP4/MXFP4 before their native GPUs, GGUF) and bf16 — computes in BF16.
    """
    try:
        major, minor = (int(part) for part in (compute_capability or "0.0").split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    cc = (major, minor)
    serving = recorded_runtime(runtime)
    if serving is None or not serving.low_precision_kernels:
        return "bf16"
    if quantization == "fp8" and cc >= (8, 9):
        return "fp8"
    if quantization == "nvfp4" and cc >= (10, 0):
        return "fp4"
    if quantization == "mxfp4" and cc >= (10, 0):
        return "fp8"
    return "bf16"


@dataclass(frozen=True)
class ServerFacts:
    """A model server's roofline inputs, or why there are none."""

    server: Server | None
    weight_bytes: float = 0.0
    gpus: int = 0
    device: str | None = None
    precision: str | None = None
    note: str = ""


def server_facts(model: ModelSpec, placement: Placement) -> ServerFacts:
    """The roofline's view of the server placement chose for ``model`` (or the reason for none)."""
    serving = recorded_runtime(placement.runtime)  # a placement may be read back from status
    if serving is not None and serving.external:
        return ServerFacts(None, note="hosted endpoint: uses none of your GPUs; tokens only")
    if not placement.schedulable:
        return ServerFacts(None, note="unschedulable: nothing to estimate")
    try:
        total = parse_parameters(model.parameters)
        active = parse_active_parameters(model.parameters)
    except ValueError:
        total = active = None
    if total is None or active is None:
        return ServerFacts(None, note="no size: set parameters (e.g. '27B' or '117B-A5.1B') for an estimate")
    vllm = serving is VLLM
    bytes_per_param = BYTES_PER_PARAM.get(placement.quantization, BYTES_PER_PARAM[GGUF_ASSUMED])
    weights = total * bytes_per_param * (VLLM_WEIGHT_FACTOR if vllm else 1.0)
    kv_per_token = KV_BYTES_PER_TOKEN_8B * math.sqrt(active / 8e9)
    gpus = placement.tensor_parallel_size
    if gpus <= 0:
        device = CPU_NODE
        gpus_for_roofline = 1
        memory_per_gpu = 0.0
    else:
        found = gpu_spec(placement.gpu_product)
        if found is None:
            return ServerFacts(
                None,
                gpus=gpus,
                note=f"no datasheet figures for {placement.gpu_product!r}: add it to kubejury.placement.gpu_specs",
            )
        device = found
        gpus_for_roofline = gpus
        known = known_gpu(placement.gpu_product)
        memory_per_gpu = known[1] * float(1 << 20) if known else found.memory_gb * 1e9
    if vllm:
        capacity = (
            model.gpu_memory_utilization * memory_per_gpu * gpus
            - weights
            - VLLM_OVERHEAD_GIB_PER_GPU * GIB * gpus
        )
        large = memory_per_gpu >= 70 * GIB and "a100" not in (placement.gpu_product or "").lower()
        max_sequences = VLLM_MAX_SEQUENCES_LARGE if large else VLLM_MAX_SEQUENCES
    else:
        capacity = kv_per_token * model.max_model_len  # llama.cpp: one --ctx-size context shared by its slots
        max_sequences = GGUF_SLOTS
    # The product's compute capability from the known-products table first: a placement read back
    # from an EvalRun's status has no compute capability, and the operator orders bring-up by this
    # estimate on every pass — the same placement must always give the same numbers.
    known_cc = known_gpu(placement.gpu_product)
    cc = f"{known_cc[0][0]}.{known_cc[0][1]}" if known_cc else placement.compute_capability
    precision = compute_precision(placement.quantization, cc, placement.runtime)
    server = Server(
        total_params=total,
        active_params=active,
        weight_bytes=weights,
        kv_bytes_per_token=kv_per_token,
        gpus=gpus_for_roofline,
        bandwidth=device.bandwidth,
        peak_flops=device.peak_flops(precision),
        kv_capacity_bytes=max(capacity, kv_per_token),
        max_sequences=max_sequences,
    )
    return ServerFacts(server, weights, max(0, gpus), device.name, precision)


def startup_seconds(facts: ServerFacts) -> float:
    """Bring-up of a server: :data:`STARTUP_FIXED_SECONDS` + weights at :data:`WEIGHT_LOAD_BYTES_PER_SECOND`."""
    return STARTUP_FIXED_SECONDS + facts.weight_bytes / WEIGHT_LOAD_BYTES_PER_SECOND
