"""The roofline, on cases computed by hand: decode is bound by memory or compute, batches by KV room.

Round numbers (1 TB/s, 1 PFLOP/s, efficiencies of 1) keep every expected value checkable on paper;
one case uses the H100's datasheet figures and the stated default efficiencies.
"""

from __future__ import annotations

import functools

import pytest

from kubejury.placement.gpu_specs import gpu_spec
from kubejury.placement.roofline import (
    Efficiency,
    Server,
    batch_size,
    decode_step,
    prefill_seconds,
    stage_time,
    weight_bytes_read,
)

PERFECT = Efficiency(bandwidth=1.0, compute=1.0)


# A 1B model on one GPU; a test's keywords replace these and are type-checked as Server's.
server = functools.partial(
    Server,
    total_params=1e9,
    active_params=1e9,
    weight_bytes=2e9,  # 1B parameters in bf16
    kv_bytes_per_token=1e5,
    gpus=1,
    bandwidth=1e12,  # 1 TB/s
    peak_flops=1e15,  # 1 PFLOP/s
    kv_capacity_bytes=1e10,
    max_sequences=1024,
)


def test_single_sequence_decode_reads_every_weight_once_per_token() -> None:
    step = decode_step(server(), batch=1, context_tokens=0, efficiency=PERFECT)
    assert step.memory_seconds == pytest.approx(2e-3)  # 2 GB at 1 TB/s
    assert step.compute_seconds == pytest.approx(2e-6)  # 2 GFLOP at 1 PFLOP/s
    assert step.bound == "memory"
    assert step.tokens_per_second == pytest.approx(500)


def test_kv_cache_reads_add_to_the_weights() -> None:
    # 10 sequences × 1,000 tokens × 100 kB = 1 GB on top of 2 GB of weights
    step = decode_step(server(), batch=10, context_tokens=1000, efficiency=PERFECT)
    assert step.memory_seconds == pytest.approx(3e-3)
    assert step.tokens_per_second == pytest.approx(10 / 3e-3)


def test_large_batches_become_compute_bound() -> None:
    # 4,000 sequences: 2 × 1e9 × 4000 = 8e12 FLOP → 8 ms; weights 2 ms, no context
    step = decode_step(server(max_sequences=8192), batch=4000, context_tokens=0, efficiency=PERFECT)
    assert step.compute_seconds == pytest.approx(8e-3)
    assert step.bound == "compute"
    assert step.tokens_per_second == pytest.approx(4000 / 8e-3)


def test_efficiencies_scale_the_peaks() -> None:
    step = decode_step(
        server(), batch=1, context_tokens=0, efficiency=Efficiency(bandwidth=0.5, compute=0.25)
    )
    assert step.memory_seconds == pytest.approx(4e-3)
    assert step.compute_seconds == pytest.approx(8e-6)


def test_tensor_parallelism_divides_both_bounds() -> None:
    one = decode_step(server(), batch=8, context_tokens=500, efficiency=PERFECT)
    four = decode_step(server(gpus=4), batch=8, context_tokens=500, efficiency=PERFECT)
    assert four.memory_seconds == pytest.approx(one.memory_seconds / 4)
    assert four.compute_seconds == pytest.approx(one.compute_seconds / 4)


def test_mixture_of_experts_reads_its_active_share_at_batch_one_and_more_as_batches_grow() -> None:
    moe = server(total_params=100e9, active_params=10e9, weight_bytes=100e9)
    assert weight_bytes_read(moe, 1) == pytest.approx(10e9)  # exactly the active parameters
    assert weight_bytes_read(moe, 2) == pytest.approx(100e9 * (1 - 0.9**2))  # 19 GB
    assert weight_bytes_read(moe, 1000) == pytest.approx(100e9, rel=1e-9)  # every expert touched
    dense = server()
    assert weight_bytes_read(dense, 1) == weight_bytes_read(dense, 64) == pytest.approx(2e9)


def test_batch_is_capped_by_requests_server_limit_and_kv_room() -> None:
    s = server(kv_capacity_bytes=1e9, max_sequences=256)
    assert batch_size(s, in_flight=4, context_tokens=10) == 4  # few requests
    # 1 GB of KV room / (100 kB × 1,000 tokens) = 10 sequences
    assert batch_size(s, in_flight=64, context_tokens=1000) == 10
    assert batch_size(s, in_flight=10_000, context_tokens=1) == 256  # the server's own limit
    assert batch_size(server(kv_capacity_bytes=0.0), in_flight=64, context_tokens=1000) == 1


def test_prefill_is_two_flops_per_active_parameter_per_token() -> None:
    # 2 × 1e9 × 1e6 tokens = 2e15 FLOP at 1 PFLOP/s × 0.5 = 4 s; on 2 GPUs 2 s
    assert prefill_seconds(server(), 1e6, Efficiency(compute=0.5)) == pytest.approx(4.0)
    assert prefill_seconds(server(gpus=2), 1e6, Efficiency(compute=0.5)) == pytest.approx(2.0)
    moe = server(total_params=100e9, active_params=10e9, weight_bytes=100e9)
    assert prefill_seconds(moe, 1e6, PERFECT) == pytest.approx(20.0)


def test_a_stage_is_prefill_plus_decode_at_the_steady_batch() -> None:
    # 100 requests, 200 prompt + 400 answer tokens each: context = 200 + 400 / 2 = 400 tokens;
    # batch 10 (in flight); step = (2 GB + 10 × 400 × 100 kB = 0.4 GB) / 1 TB/s = 2.4 ms
    timing = stage_time(
        server(), requests=100, prompt_tokens=20_000, output_tokens=40_000, in_flight=10, efficiency=PERFECT
    )
    assert timing.step.batch == 10
    assert timing.step.seconds == pytest.approx(2.4e-3)
    assert timing.decode_seconds == pytest.approx(40_000 / (10 / 2.4e-3))  # 9.6 s
    assert timing.prefill_seconds == pytest.approx(2 * 1e9 * 20_000 / 1e15)
    assert timing.seconds == pytest.approx(timing.prefill_seconds + timing.decode_seconds)


def test_no_requests_take_no_time() -> None:
    assert stage_time(server(), requests=0, prompt_tokens=0, output_tokens=0, in_flight=8).seconds == 0.0


def test_h100_with_stated_efficiencies() -> None:
    """An 8B dense model in bf16 (16 GB) at batch 1 on an H100 SXM: 16e9 / (3.35e12 × 0.75) = 6.37 ms."""
    h100 = gpu_spec("NVIDIA-H100-80GB-HBM3")
    assert h100 is not None
    s = server(
        total_params=8e9,
        active_params=8e9,
        weight_bytes=16e9,
        bandwidth=h100.bandwidth,
        peak_flops=h100.peak_flops("bf16"),
    )
    step = decode_step(s, batch=1, context_tokens=0)
    assert step.seconds == pytest.approx(16e9 / (3.35e12 * 0.75))
    assert step.tokens_per_second == pytest.approx(157.0, abs=0.1)


def test_impossible_servers_are_refused() -> None:
    with pytest.raises(ValueError, match="active_params"):
        server(active_params=2e9)
    with pytest.raises(ValueError, match="bandwidth"):
        server(bandwidth=0.0)


def test_a_cached_prompt_prefix_costs_no_prefill_but_is_still_read() -> None:
    plain = stage_time(server(), requests=100, prompt_tokens=20_000, output_tokens=40_000, in_flight=10)
    cached = stage_time(
        server(),
        requests=100,
        prompt_tokens=20_000,
        output_tokens=40_000,
        in_flight=10,
        cached_prompt_tokens=15_000,
    )
    assert cached.prefill_seconds == pytest.approx(plain.prefill_seconds / 4)  # 5,000 of 20,000 computed
    assert cached.decode_seconds == pytest.approx(plain.decode_seconds)  # same context, same KV reads
