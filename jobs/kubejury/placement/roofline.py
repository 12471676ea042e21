"""How fast one model server turns prompt and answer tokens into time: a roofline.

Why this module exists: ``kubejury plan --estimate`` must say, before a run, how many GPU-hours it
will take. The honest way to know without running is the roofline — each phase of inference is
bound either by how fast the GPU reads memory or by how fast it multiplies, and the slower bound
sets the time. Pure arithmetic on stated inputs; the error against published vLLM throughput is
measured and stated in ``docs/placement.md`` (``benchmarks/roofline_vs_published.py``).

**Decode** (one new token for each of ``B`` sequences per step) reads all the weights it uses and
each sequence's KV cache once per step, and does ``2 × active parameters`` FLOPs per token::

    memory time  = (weight bytes read(B) + B × context × KV bytes per token) / (TP × bandwidth × η_bw)
    compute time = 2 × active parameters × B / (TP × peak FLOP/s × η_compute)
    step time    = max(memory time, compute time);   decode tokens/s = B / step time

``weight bytes read(1)`` is the active parameters × bytes per parameter (a mixture of experts
reads only its routed experts). With ``B`` tokens routed independently, the share of weights some
token touches is ``1 − (1 − active/total)^B``: exactly the active share at ``B = 1``, all of them for
large batches. Dense models always read everything.

**Batch** ``B`` = the requests in flight, capped by the server's sequence limit (vLLM's
``max_num_seqs``) and by how many sequences' KV cache fits beside the weights::

    B = min(in flight, max sequences, KV capacity / (KV bytes per token × context))

with context = mean prompt + half the mean answer (sequences are, on average, half-way through
their answers).

**Prefill** (the prompt) is compute-bound: ``2 × active parameters × prompt tokens / (TP × peak
FLOP/s × η_compute)``. Attention's own FLOPs (quadratic in context) are left out: they matter only
for prompts beyond ~8K tokens, and kubejury's prompts are a question, or a question, reference
and answer.

A prompt prefix every request shares (the judging template's opening) is computed once and then
served from vLLM's prefix cache (on by default): it costs no prefill. A stage's time is prefill time + decode time (vLLM interleaves them, so this errs long when decode
is memory-bound and prefill could hide under it). The efficiencies are stated, not fitted:
η_bw = 0.75 (single-stream decode reaches ~77% of HBM bandwidth in the measurement cited in the
docs), η_compute = 0.5 (large GEMMs in serving engines commonly reach about half of dense peak).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Efficiency:
    """Shares of the datasheet peaks a serving engine reaches (stated assumptions)."""

    bandwidth: float = 0.75
    compute: float = 0.5


DEFAULT_EFFICIENCY = Efficiency()


@dataclass(frozen=True)
class Server:
    """One model server as the roofline sees it.

    ``weight_bytes`` is what the weights occupy (all experts); ``kv_capacity_bytes`` is the memory
    left for KV cache across the tensor-parallel group; ``bandwidth`` (bytes/s) and ``peak_flops``
    are per GPU, the latter at the precision the model computes in.
    """

    total_params: float
    active_params: float
    weight_bytes: float
    kv_bytes_per_token: float
    gpus: int
    bandwidth: float
    peak_flops: float
    kv_capacity_bytes: float
    max_sequences: int

    def __post_init__(self) -> None:
        for name in ("total_params", "active_params", "weight_bytes", "bandwidth", "peak_flops"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.active_params > self.total_params:
            raise ValueError("active_params cannot exceed total_params")
        if self.gpus < 1 or self.max_sequences < 1:
            raise ValueError("gpus and max_sequences must be at least 1")


def weight_bytes_read(server: Server, batch: int) -> float:
    """Bytes of weights one decode step of ``batch`` sequences reads (see the module docstring)."""
    share = server.active_params / server.total_params
    touched = 1.0 - (1.0 - share) ** max(1, batch)
    return server.weight_bytes * touched


def batch_size(server: Server, in_flight: int, context_tokens: float) -> int:
    """Sequences decoded together: in flight, capped by the server's limit and by KV-cache room."""
    per_sequence = server.kv_bytes_per_token * max(1.0, context_tokens)
    fits = math.floor(server.kv_capacity_bytes / per_sequence) if per_sequence > 0 else server.max_sequences
    return max(1, min(in_flight, server.max_sequences, fits))


@dataclass(frozen=True)
class DecodeStep:
    """One decode step: its time, the two bounds, and the batch it serves."""

    batch: int
    memory_seconds: float
    compute_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.memory_seconds, self.compute_seconds)

    @property
    def bound(self) -> Literal["memory", "compute"]:
        return "memory" if self.memory_seconds >= self.compute_seconds else "compute"

    @property
    def tokens_per_second(self) -> float:
        return self.batch / self.seconds


def decode_step(
    server: Server, batch: int, context_tokens: float, efficiency: Efficiency = DEFAULT_EFFICIENCY
) -> DecodeStep:
    """Time of one decode step of ``batch`` sequences holding ``context_tokens`` each."""
    read = weight_bytes_read(server, batch) + batch * context_tokens * server.kv_bytes_per_token
    memory = read / (server.gpus * server.bandwidth * efficiency.bandwidth)
    flops = 2.0 * server.active_params * batch
    compute = flops / (server.gpus * server.peak_flops * efficiency.compute)
    return DecodeStep(batch=batch, memory_seconds=memory, compute_seconds=compute)


def prefill_seconds(server: Server, tokens: float, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> float:
    """Time to read ``tokens`` prompt tokens (compute-bound)."""
    return 2.0 * server.active_params * tokens / (server.gpus * server.peak_flops * efficiency.compute)


@dataclass(frozen=True)
class StageTime:
    """Time one server needs for a batch job of requests, and why."""

    prefill_seconds: float
    decode_seconds: float
    step: DecodeStep

    @property
    def seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds


def stage_time(
    server: Server,
    *,
    requests: int,
    prompt_tokens: float,
    output_tokens: float,
    in_flight: int,
    cached_prompt_tokens: float = 0.0,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> StageTime:
    """Prefill and decode time for ``requests`` requests totalling these prompt and output tokens,
    sent with at most ``in_flight`` outstanding at once. ``cached_prompt_tokens`` of the prompts are
    a prefix the server has already computed (vLLM's prefix cache): they cost no prefill, but their
    KV cache is read like the rest."""
    if requests <= 0:
        return StageTime(0.0, 0.0, decode_step(server, 1, 0.0, efficiency))
    mean_prompt = prompt_tokens / requests
    mean_output = output_tokens / requests
    context = mean_prompt + mean_output / 2
    batch = batch_size(server, min(in_flight, requests), context)
    step = decode_step(server, batch, context, efficiency)
    return StageTime(
        prefill_seconds=prefill_seconds(server, max(0.0, prompt_tokens - cached_prompt_tokens), efficiency),
        decode_seconds=output_tokens / step.tokens_per_second,
        step=step,
    )
