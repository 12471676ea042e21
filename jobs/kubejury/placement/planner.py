"""GPU placement: which nodes, which quantization and how many GPUs each model gets.

Pure and table-tested (``tests/unit/test_placement.py``). The operator calls :func:`plan_placements`
with the nodes it sees; ``kubejury plan`` calls it with ``kubectl get nodes -o json`` so a user
sees the same decisions before applying a run.

Inputs are the labels NVIDIA GPU Feature Discovery puts on GPU nodes — ``nvidia.com/gpu.product``,
``nvidia.com/gpu.memory`` (MiB per GPU), ``nvidia.com/gpu.count``, ``nvidia.com/gpu.compute.major``
/ ``.minor`` (or ``nvidia.com/cuda.compute.major`` / ``.minor``) — and allocatable
``nvidia.com/gpu``. ``nvidia.com/gpu.family`` is not used: it reads "undefined" on Blackwell with
older GFD releases; compute capability (CC) decides. When CC or memory labels are missing, a
table of known products fills them in.

Nodes are parsed and grouped into *pools* (same product, memory and GPUs per node) by
:mod:`kubejury.placement.gpu_nodes`. A model runs on one
node (tensor parallelism only; no multi-node pipeline parallelism). Placement tolerates the GPU
taint (``nvidia.com/gpu``) and the chart's tolerations, nothing else: a GPU node with any other
NoSchedule/NoExecute taint (``dedicated=team-b``, the control plane) is not chosen, so a team's
reservation holds against EvalRuns.

Quantization with ``quantization: auto`` (runtime vllm), by the pool's compute capability:

=====================  =================================================================
CC ≥ 10 (Blackwell)    NVFP4 for NVFP4 checkpoints, MXFP4 for MXFP4 checkpoints (gpt-oss),
                       else FP8 (``--quantization fp8`` on a bf16/fp16 checkpoint, none on an
                       FP8 checkpoint).
9.x (Hopper), 8.9      FP8 the same way; gpt-oss loads its native MXFP4 with no flag; NVFP4
(Ada)                  checkpoints run weight-only (vLLM's Marlin FP4 kernels).
8.0, 8.6 (Ampere)      bf16 when it fits on one node (Ampere has no FP8 tensor cores, so FP8
                       saves memory, not time); otherwise FP8 weight-only (``--quantization
                       fp8``, vLLM's Marlin W8A16 path). gpt-oss: MXFP4 through vLLM's Ampere
                       (Marlin) path. FP8 and NVFP4 checkpoints: weight-only, no flag.
< 8.0                  not used for vLLM (no bf16); GGUF runtimes may use it.
=====================  =================================================================

Pre-quantized AWQ/GPTQ checkpoints run as they are (CC ≥ 8.0). An explicit quantization is
honoured where a pool supports it and rejected with the reason otherwise.

GGUF runtimes (llamacpp, ollama) go to small GPUs or CPU nodes: small models (at most
``CPU_PREFERRED_GIB``, 4 GiB, e.g. the embedded Gemma-3 270M or a 3B Q4) to CPU nodes (untainted,
no GPU) when there are any; others to the pool with the fewest and then smallest GPUs that holds
the model, and to CPU nodes when no GPU pool does. With
``quantization: auto`` and a source the runtime can pick a file from (``hf://`` repo,
``ollama://`` tag without a type), the best of Q8_0, Q6_K, Q5_K_M, Q4_K_M that fits is chosen
(Q4_K_M on CPU nodes: memory bandwidth bounds CPU decoding); a fixed file keeps its type (read
from the file name, else assumed Q4_K_M for the memory estimate).

Memory fit (all in GiB): ``weights + KV cache + overhead ≤ utilization × GPU memory × TP`` with
the smallest TP in {1, 2, 4, 8} not above the node's allocatable GPUs:

* weights = parameters × bytes per parameter (``BYTES_PER_PARAM``) × 1.05 for vLLM formats
  (embeddings, norms and the LM head stay in higher precision); GGUF sizes already include that.
* KV cache: per-token size from a heuristic fitted to common GQA models (Llama-3-8B 128 KiB,
  Qwen2.5-32B 256 KiB, Llama-3-70B 320 KiB): ``128 KiB × sqrt(P / 8e9)`` with P the *active*
  parameters when given (``"117B-A5.1B"``; mixtures of experts have small attention), in 16-bit.
  vLLM reserves ``KV_SEQUENCES`` (4) full ``maxModelLen`` sequences — enough for dozens of
  concurrent short answers; llama.cpp allocates one ``--ctx-size`` context.
* overhead: 2 GiB per GPU for vLLM (CUDA context, activations, CUDA graphs), 1 GiB per GPU for
  llama.cpp; CPU nodes: 1 GiB, against 90% of the node's allocatable memory.
* utilization: the model's ``gpuMemoryUtilization`` (default 0.9) for vLLM, 0.95 for llama.cpp.

``resources.gpuMemoryGiB`` replaces the whole estimate; ``resources.gpus`` fixes the TP.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kubejury.config.embedded_models import embedded_model
from kubejury.config.spec import EvalRunSpec, ModelSpec, is_gguf_type, normalize_quantization
from kubejury.modelinfo import parse_active_parameters, parse_parameters
from kubejury.placement.gpu_nodes import (
    GIB,
    GpuPool,
    NodeInfo,
    Toleration,
    cpu_nodes,
    gpu_pools,
    matches_selector,
    pool_node_selector,
    reserved_gpu_text,
    tolerations_for,
    undescribed_gpu_text,
    usable_gpu_nodes,
)
from kubejury.placement.gpu_nodes import GPU_RESOURCE as GPU_RESOURCE
from kubejury.placement.gpu_nodes import KNOWN_GPUS as KNOWN_GPUS
from kubejury.placement.gpu_nodes import known_gpu as known_gpu
from kubejury.placement.gpu_nodes import parse_node as parse_node
from kubejury.placement.gpu_nodes import parse_node_list as parse_node_list
from kubejury.placement.gpu_nodes import parse_quantity as parse_quantity
from kubejury.records.placement import Placement as Placement
from kubejury.runtimes import VLLM, judge_placement_key, runtime_of

TP_SIZES: tuple[int, ...] = (1, 2, 4, 8)

#: Bytes per parameter of each weight format (GGUF: llama.cpp's bits per weight / 8).
BYTES_PER_PARAM: dict[str, float] = {
    "f32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "f16": 2.0,
    "fp8": 1.0,
    "nvfp4": 0.5625,
    "mxfp4": 0.53,
    "awq": 0.5625,
    "gptq": 0.5625,
    "q8_0": 1.0625,
    "q6_k": 0.82,
    "q5_k_m": 0.71,
    "q5_k_s": 0.69,
    "q5_1": 0.75,
    "q5_0": 0.6875,
    "q4_k_m": 0.606,
    "q4_k_s": 0.57,
    "q4_1": 0.625,
    "q4_0": 0.5625,
    "q3_k_l": 0.53,
    "q3_k_m": 0.49,
    "q3_k_s": 0.44,
    "q2_k": 0.42,
    "iq4_xs": 0.53,
    "iq4_nl": 0.5625,
    "iq3_m": 0.46,
    "iq3_s": 0.43,
    "iq3_xs": 0.41,
    "iq3_xxs": 0.38,
    "iq2_m": 0.34,
    "iq2_s": 0.31,
    "iq2_xs": 0.29,
    "iq2_xxs": 0.26,
    "iq1_m": 0.22,
    "iq1_s": 0.2,
    "tq2_0": 0.26,
    "tq1_0": 0.21,
}

VLLM_WEIGHT_FACTOR = 1.05
KV_BYTES_PER_TOKEN_8B = 128 * 1024
KV_SEQUENCES = 4
VLLM_OVERHEAD_GIB_PER_GPU = 2.0
LLAMACPP_OVERHEAD_GIB_PER_GPU = 1.0
LLAMACPP_GPU_UTILIZATION = 0.95
CPU_OVERHEAD_GIB = 1.0
CPU_MEMORY_FRACTION = 0.9
#: GGUF models needing at most this much go to CPU nodes first (GPUs are kept for larger models).
CPU_PREFERRED_GIB = 4.0
MIN_VLLM_CC = (8, 0)

#: GGUF types ``auto`` may choose on GPUs, best first; and on CPU nodes.
GGUF_AUTO_GPU: tuple[str, ...] = ("q8_0", "q6_k", "q5_k_m", "q4_k_m")
GGUF_AUTO_CPU: tuple[str, ...] = ("q4_k_m",)
GGUF_ASSUMED = "q4_k_m"

_GGUF_IN_NAME = re.compile(r"(?<![a-z0-9])(i?q\d_[a-z0-9_]+|q\d_\d|f16|bf16|f32|mxfp4)(?![a-z0-9])", re.I)


# ----------------------------------------------------------------------------------------------
# The decision
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Estimate:
    weights_gib: float
    kv_gib: float
    overhead_per_gpu_gib: float
    override_gib: float | None = None

    def need(self, gpus: int) -> float:
        if self.override_gib is not None:
            return self.override_gib
        return self.weights_gib + self.kv_gib + self.overhead_per_gpu_gib * max(1, gpus)

    def text(self, gpus: int, label: str) -> str:
        if self.override_gib is not None:
            return f"{self.override_gib:.1f} GiB (resources.gpuMemoryGiB)"
        return (
            f"{self.need(gpus):.1f} GiB (weights {self.weights_gib:.1f} GiB as {label} + KV cache "
            f"{self.kv_gib:.1f} GiB + overhead {self.overhead_per_gpu_gib * max(1, gpus):.1f} GiB)"
        )


@dataclass(frozen=True)
class _Option:
    """One quantization a pool can run: name, vLLM args, and why (for the reason text)."""

    quantization: str
    args: tuple[str, ...]
    why: str


def _kv_bytes_per_token(model: ModelSpec) -> float | None:
    try:
        active = parse_active_parameters(model.parameters)
    except ValueError:
        return None
    if active is None:
        return None
    return KV_BYTES_PER_TOKEN_8B * math.sqrt(active / 8e9)


def _estimate(model: ModelSpec, fmt: str, *, vllm: bool) -> _Estimate | None:
    hint = model.resources.gpu_memory_gib
    if hint is not None:
        return _Estimate(0.0, 0.0, 0.0, override_gib=hint)
    params = parse_parameters(model.parameters)
    kv_per_token = _kv_bytes_per_token(model)
    if params is None or kv_per_token is None:
        return None
    bytes_per_param = BYTES_PER_PARAM.get(fmt, BYTES_PER_PARAM[GGUF_ASSUMED])
    factor = VLLM_WEIGHT_FACTOR if vllm else 1.0
    weights = params * bytes_per_param * factor / GIB
    sequences = KV_SEQUENCES if vllm else 1
    kv = kv_per_token * model.max_model_len * sequences / GIB
    overhead = VLLM_OVERHEAD_GIB_PER_GPU if vllm else LLAMACPP_OVERHEAD_GIB_PER_GPU
    return _Estimate(weights, kv, overhead)


def _vllm_options(model: ModelSpec, cc: tuple[int, int]) -> tuple[list[_Option], str | None]:
    """Quantizations to try on a pool of this CC, best first; or a reason why none applies."""
    checkpoint = model.checkpoint or "bf16"
    quant = model.quantization
    ada_or_newer = cc >= (8, 9)
    blackwell = cc >= (10, 0)
    if cc < MIN_VLLM_CC:
        return [], f"CC {cc[0]}.{cc[1]} is below 8.0 (vLLM needs bf16-capable GPUs)"
    if quant != "auto":
        fp8_note = "FP8 (W8A8)" if ada_or_newer else "FP8 weight-only (Marlin W8A16 on Ampere)"
        if quant == "fp8":
            args = ("--quantization", "fp8") if checkpoint in ("bf16", "fp16") else ()
            return [_Option("fp8", args, f"explicit {fp8_note}")], None
        if quant == "nvfp4":
            how = "native NVFP4" if blackwell else "NVFP4 weight-only (Marlin FP4; native needs CC ≥ 10)"
            return [_Option("nvfp4", (), f"explicit {how}")], None
        if quant == "mxfp4":
            return [_Option("mxfp4", (), "explicit MXFP4 (checkpoint format, no flag)")], None
        if quant in ("bf16", "fp16"):
            dtype = "bfloat16" if quant == "bf16" else "float16"
            return [_Option(quant, ("--dtype", dtype), f"explicit {quant}")], None
        return [_Option(quant, (), f"explicit {quant.upper()} checkpoint")], None
    # auto
    if checkpoint == "mxfp4":
        path = "native MXFP4" if cc >= (9, 0) else "MXFP4 weight-only through vLLM's Marlin path (Ampere/Ada)"
        return [
            _Option("mxfp4", (), f"MXFP4 checkpoint (gpt-oss style): {path}, no --quantization flag")
        ], None
    if checkpoint == "nvfp4":
        how = "native NVFP4 on Blackwell" if blackwell else "NVFP4 weight-only (Marlin FP4) before Blackwell"
        return [_Option("nvfp4", (), f"NVFP4 checkpoint: {how}")], None
    if checkpoint in ("awq", "gptq"):
        return [_Option(checkpoint, (), f"pre-quantized {checkpoint.upper()} checkpoint")], None
    if checkpoint == "fp8":
        how = "native FP8" if ada_or_newer else "FP8 weight-only (Marlin) on Ampere"
        return [_Option("fp8", (), f"pre-quantized FP8 checkpoint: {how}")], None
    # bf16 / fp16 checkpoint
    if ada_or_newer:
        arch = "Blackwell" if blackwell else ("Hopper" if cc >= (9, 0) else "Ada")
        return [
            _Option(
                "fp8",
                ("--quantization", "fp8"),
                f"{arch} (CC {cc[0]}.{cc[1]}): online FP8 of the {checkpoint} checkpoint",
            )
        ], None
    return [
        _Option(
            checkpoint, (), f"Ampere (CC {cc[0]}.{cc[1]}): {checkpoint} as released (no FP8 tensor cores)"
        ),
        _Option(
            "fp8",
            ("--quantization", "fp8"),
            f"Ampere (CC {cc[0]}.{cc[1]}): {checkpoint} does not fit, FP8 weight-only (Marlin W8A16)",
        ),
    ], None


def _tp_sizes(model: ModelSpec, pool: GpuPool) -> list[int]:
    """GPU counts to try on one node of ``pool``. Shared GPUs (time-slicing, MPS) and MIG slices
    get 1 only: tensor parallelism across replicas of one GPU or across slices fails."""
    most = pool.gpus_per_node if pool.whole_gpus else 1
    if model.resources.gpus is not None:
        return [model.resources.gpus] if model.resources.gpus <= most else []
    return [tp for tp in TP_SIZES if tp <= most]


def _too_few_gpus(model: ModelSpec, pool: GpuPool) -> str:
    if not pool.whole_gpus:
        return f"{pool.product}: {pool.describe()} are not whole GPUs, so only 1 per model server (no tensor parallelism)"
    return f"{pool.product}: {pool.gpus_per_node} GPU(s) per node < resources.gpus"


@dataclass(frozen=True)
class _Candidate:
    pool: GpuPool | None
    option: _Option
    gpus: int
    need_gib: float | None


def _largest_text(pools: Sequence[GpuPool]) -> str:
    if not pools:
        return "there are no schedulable GPU nodes"
    largest = max(pools, key=lambda p: (p.memory_mib * p.gpus_per_node, p.memory_mib))
    total = largest.memory_gib * largest.gpus_per_node
    return f"the largest GPU node has {largest.describe()} = {total:.0f} GiB"


def _unschedulable(model: ModelSpec, runtime: str, quant: str, reason: str, need: float | None) -> Placement:
    return Placement(
        name=model.name,
        schedulable=False,
        runtime=runtime,
        quantization=quant,
        tensor_parallel_size=0,
        gpu_product=None,
        reason=f"Unschedulable: {reason}",
        memory_gib=need,
    )


def _unused_gpus_text(nodes: Sequence[NodeInfo], chart_tolerations: Sequence[Toleration]) -> str:
    """Why some GPU nodes were not considered: undescribed, or tainted for someone else."""
    return undescribed_gpu_text(nodes) + reserved_gpu_text(nodes, chart_tolerations)


def _place_vllm(
    model: ModelSpec, nodes: Sequence[NodeInfo], chart_tolerations: Sequence[Toleration]
) -> Placement:
    usable = usable_gpu_nodes(nodes, chart_tolerations)
    pools = gpu_pools(n for n in usable if matches_selector(n, model.node_selector))
    all_pools = gpu_pools(nodes)
    first_quant = (
        model.quantization
        if model.quantization != "auto"
        else ("fp8" if model.checkpoint in ("bf16", "fp16") else (model.checkpoint or "bf16"))
    )
    if not pools:
        where = " matching spec nodeSelector" if model.node_selector else ""
        estimate = _estimate(model, first_quant, vllm=True)
        need = estimate.need(1) if estimate else None
        need_text = f" It needs about {need:.0f} GiB of GPU memory." if need else ""
        return _unschedulable(
            model,
            VLLM.name,
            first_quant,
            f"model {model.name!r} (runtime vllm) needs NVIDIA GPUs, and there are no schedulable GPU nodes{where}."
            f"{need_text} On CPU-only clusters use runtime llamacpp with a GGUF quantization (e.g. q4_k_m)."
            + _unused_gpus_text(nodes, chart_tolerations),
            need,
        )
    candidates: list[_Candidate] = []
    rejections: list[str] = []
    best_need: float | None = None
    unknown_size = False
    for pool in pools:
        if pool.compute_capability is None:
            rejections.append(f"{pool.product}: unknown compute capability (no GFD labels)")
            continue
        options, why_not = _vllm_options(model, pool.compute_capability)
        if why_not:
            rejections.append(f"{pool.product}: {why_not}")
            continue
        sizes = _tp_sizes(model, pool)
        if not sizes:
            rejections.append(_too_few_gpus(model, pool))
            continue
        placed = False
        for option in options:
            estimate = _estimate(model, option.quantization, vllm=True)
            if estimate is None:
                unknown_size = True
                candidates.append(_Candidate(pool, option, sizes[0], None))
                placed = True
                break
            for tp in sizes:
                need = estimate.need(tp)
                capacity = model.gpu_memory_utilization * pool.memory_gib * tp
                if need <= capacity:
                    candidates.append(_Candidate(pool, option, tp, need))
                    placed = True
                    break
            if placed:
                break
            top = sizes[-1]
            need = estimate.need(top)
            best_need = need if best_need is None else min(best_need, need)
            rejections.append(
                f"{pool.product}: needs {estimate.text(top, option.quantization)}, "
                f"usable {model.gpu_memory_utilization * pool.memory_gib * top:.1f} GiB on {top} GPU(s)"
                + ("" if pool.whole_gpus else " (not whole GPUs, so no tensor parallelism)")
            )
    if not candidates:
        need_text = f"about {best_need:.0f} GiB of GPU memory" if best_need else "GPUs it cannot get"
        return _unschedulable(
            model,
            VLLM.name,
            first_quant,
            f"model {model.name!r} needs {need_text} on one node, and {_largest_text(pools)}. Tried: "
            + "; ".join(rejections)
            + _unused_gpus_text(nodes, chart_tolerations),
            best_need,
        )
    if unknown_size:
        # No size: take the biggest GPUs (first pool), TP as small as allowed; say memory is unchecked.
        chosen = next(c for c in candidates if c.need_gib is None)
    else:
        chosen = min(
            candidates,
            key=lambda c: (
                c.gpus,
                c.pool.memory_gib * c.gpus if c.pool else 0.0,
                -(c.pool.compute_capability or (0, 0))[0] if c.pool else 0,
                c.pool.product if c.pool else "",
            ),
        )
    chosen_pool = chosen.pool
    assert chosen_pool is not None
    pool = chosen_pool
    estimate = _estimate(model, chosen.option.quantization, vllm=True)
    if chosen.need_gib is None or estimate is None:
        fit = "memory not checked: set parameters (e.g. '27B') or resources.gpuMemoryGiB"
    else:
        fit = (
            f"needs {estimate.text(chosen.gpus, chosen.option.quantization)} ≤ "
            f"{model.gpu_memory_utilization:g} × {pool.memory_gib:.1f} GiB × {chosen.gpus}"
        )
    return Placement(
        name=model.name,
        schedulable=True,
        runtime=VLLM.name,
        quantization=chosen.option.quantization,
        tensor_parallel_size=chosen.gpus,
        gpu_product=pool.product,
        node_selector={**pool_node_selector(pool, all_pools), **model.node_selector},
        tolerations=tolerations_for(pool.nodes, chart_tolerations),
        vllm_args=list(chosen.option.args),
        reason=f"{chosen.option.why}; TP {chosen.gpus} on {pool.describe()}: {fit}",
        memory_gib=chosen.need_gib,
        compute_capability=pool.cc_text,
    )


def _gguf_fixed_type(model: ModelSpec) -> str | None:
    """The GGUF type of a fixed file (embedded model, file path, tagged Ollama model), if any."""
    embedded = embedded_model(model.source)
    if embedded is not None and model.gguf_path is None:
        return embedded.quantization
    name = model.gguf_path or (model.source or "")
    if (
        model.gguf_path
        or name.startswith(("file://", "pvc://", "s3://"))
        or (name.startswith("ollama://") and ":" in name)
    ):
        match = _GGUF_IN_NAME.search(name.rsplit("/", 1)[-1])
        return match[1].lower() if match else GGUF_ASSUMED
    if name.startswith("ollama://"):
        return GGUF_ASSUMED  # an untagged Ollama model pulls the library's default (Q4_K_M)
    return None  # a hf:// repo of GGUF files: the planner chooses


def _cpu_placement(
    model: ModelSpec, cpus: Sequence[NodeInfo], types: Sequence[str], note: str
) -> tuple[Placement | None, float | None, NodeInfo | None]:
    """A CPU-node placement when the biggest untainted CPU node holds the model; else the smallest need."""
    best_need: float | None = None
    biggest = max(cpus, key=lambda n: n.memory_bytes or 0, default=None)
    if biggest is None:
        return None, None, None
    ram_gib = (biggest.memory_bytes or 0) / GIB
    for gguf in types:
        estimate = _estimate(model, gguf, vllm=False)
        need = estimate.need(1) if estimate else None
        if need is not None:
            best_need = need if best_need is None else min(best_need, need)
        if need is None or biggest.memory_bytes is None or need <= CPU_MEMORY_FRACTION * ram_gib:
            fit = (
                f"needs {estimate.text(1, gguf)} of RAM ≤ {CPU_MEMORY_FRACTION:g} × {ram_gib:.0f} GiB allocatable"
                if estimate and biggest.memory_bytes is not None
                else "memory not checked"
            )
            placement = Placement(
                name=model.name,
                schedulable=True,
                runtime=model.runtime,
                quantization=gguf,
                tensor_parallel_size=0,
                gpu_product=None,
                node_selector=dict(model.node_selector),
                reason=f"GGUF {gguf.upper()} on CPU nodes ({note}; largest has {ram_gib:.0f} GiB): {fit}",
                memory_gib=need,
            )
            return placement, need, biggest
    return None, best_need, biggest


def _place_gguf(
    model: ModelSpec, nodes: Sequence[NodeInfo], chart_tolerations: Sequence[Toleration]
) -> Placement:
    runtime = model.runtime
    explicit = model.quantization if model.quantization != "auto" else None
    fixed = explicit or _gguf_fixed_type(model)
    gpu_types = [fixed] if fixed else list(GGUF_AUTO_GPU)
    cpu_types = [fixed] if fixed else list(GGUF_AUTO_CPU)
    eligible = [n for n in nodes if matches_selector(n, model.node_selector)]
    pools = gpu_pools(usable_gpu_nodes(eligible, chart_tolerations))
    all_pools = gpu_pools(nodes)
    cpus = cpu_nodes(eligible)
    small = _estimate(model, cpu_types[0], vllm=False)
    if small is not None and small.need(1) <= CPU_PREFERRED_GIB and model.resources.gpus is None:
        placed, _, _ = _cpu_placement(
            model, cpus, cpu_types, f"needs ≤ {CPU_PREFERRED_GIB:g} GiB: GPUs are kept for larger models"
        )
        if placed is not None:
            return placed
    candidates: list[_Candidate] = []
    for pool in pools:
        done = False
        for gpus in _tp_sizes(model, pool):
            for gguf in gpu_types:
                estimate = _estimate(model, gguf, vllm=False)
                need = estimate.need(gpus) if estimate else None
                if need is None or need <= LLAMACPP_GPU_UTILIZATION * pool.memory_gib * gpus:
                    candidates.append(_Candidate(pool, _Option(gguf, (), ""), gpus, need))
                    done = True
                    break
            if done:
                break
    if candidates:
        chosen = min(
            candidates,
            key=lambda c: (c.gpus, c.pool.memory_mib if c.pool else 0, c.pool.product if c.pool else ""),
        )
        chosen_pool = chosen.pool
        assert chosen_pool is not None
        pool = chosen_pool
        gguf = chosen.option.quantization
        estimate = _estimate(model, gguf, vllm=False)
        how = "as given" if fixed else "best GGUF type that fits"
        fit = (
            f"needs {estimate.text(chosen.gpus, gguf)} ≤ {LLAMACPP_GPU_UTILIZATION:g} × {pool.memory_gib:.1f} GiB × {chosen.gpus}"
            if estimate
            else "memory not checked: set parameters (e.g. '32B')"
        )
        return Placement(
            name=model.name,
            schedulable=True,
            runtime=runtime,
            quantization=gguf,
            tensor_parallel_size=chosen.gpus,
            gpu_product=pool.product,
            node_selector={**pool_node_selector(pool, all_pools), **model.node_selector},
            tolerations=tolerations_for(pool.nodes, chart_tolerations),
            reason=(
                f"GGUF {gguf.upper()} ({how}) on the smallest GPUs that hold it: {chosen.gpus} GPU(s) on a node "
                f"with {pool.describe()}; {fit}"
            ),
            memory_gib=chosen.need_gib,
            compute_capability=pool.cc_text,
        )
    gpu_note = "no GPU pool holds it" if pools else "no GPU nodes"
    placed, best_need, biggest = _cpu_placement(model, cpus, cpu_types, gpu_note)
    if placed is not None:
        return placed
    if best_need is None:
        estimate = _estimate(model, (gpu_types or cpu_types)[-1], vllm=False)
        best_need = estimate.need(1) if estimate else None
    need_text = f"about {best_need:.0f} GiB" if best_need is not None else "more memory than any node has"
    cpu_text = (
        f"the largest CPU node has {(biggest.memory_bytes or 0) / GIB:.0f} GiB allocatable"
        if biggest
        else "no untainted CPU nodes"
    )
    return _unschedulable(
        model,
        runtime,
        (cpu_types or gpu_types)[-1],
        f"model {model.name!r} (GGUF, runtime {runtime}) needs {need_text}; {_largest_text(pools)} and {cpu_text}."
        + _unused_gpus_text(nodes, chart_tolerations),
        best_need,
    )


def place_model(
    model: ModelSpec, nodes: Sequence[NodeInfo], chart_tolerations: Sequence[Toleration] = ()
) -> Placement:
    """The placement of one model or judge on these nodes (pure).

    ``chart_tolerations`` are the tolerations the chart gives model servers on GPU nodes
    (``inference.gpuTolerations``, ``KUBEJURY_GPU_TOLERATIONS``). A GPU node with a
    NoSchedule/NoExecute taint that is neither the GPU taint nor tolerated by them (another team's
    ``dedicated=…``, the control plane) is never chosen, and nothing else is ever tolerated.
    """
    serving = runtime_of(model.runtime)
    if serving.external:
        return Placement(
            name=model.name,
            schedulable=True,
            runtime=serving.name,
            quantization=model.quantization,
            tensor_parallel_size=0,
            gpu_product=None,
            reason=f"existing OpenAI-compatible endpoint {model.source}: nothing is deployed",
        )
    if serving.serves_gguf:
        return _place_gguf(model, nodes, chart_tolerations)
    if is_gguf_type(model.quantization) and model.quantization not in ("bf16", "mxfp4"):
        return _unschedulable(
            model,
            VLLM.name,
            normalize_quantization(model.quantization),
            f"GGUF quantization {model.quantization} needs runtime llamacpp or ollama",
            None,
        )
    return _place_vllm(model, nodes, chart_tolerations)


def plan_placements(
    spec: EvalRunSpec, nodes: Sequence[NodeInfo], chart_tolerations: Sequence[Toleration] = ()
) -> dict[str, Placement]:
    """Placements of every model then every judge, keyed by name (``chart_tolerations``: see
    :func:`place_model`; none by default, so only the GPU taint is tolerated).

    A judge with the same name as a model and the same placement shares the entry; a judge whose
    name is taken by a different model is keyed ``"<name> (judge)"``.
    """
    plans: dict[str, Placement] = {}
    for model in spec.models:
        plans[model.name] = place_model(model, nodes, chart_tolerations)
    for judge in spec.judges:
        placement = place_model(judge, nodes, chart_tolerations)
        if judge.name in plans and plans[judge.name] != placement:
            plans[judge_placement_key(judge.name)] = placement
        else:
            plans[judge.name] = placement
    return plans
