"""How wrong is ``kubejury plan --estimate``? The roofline against published vLLM runs.

Run ``python benchmarks/roofline_vs_published.py`` (from the repository, with the project's
virtualenv). For each published run below it builds the model and the node the way ``kubejury
plan`` does (spec → placement → :func:`kubejury.placement.server_model.server_facts`), asks the
roofline (:func:`kubejury.placement.roofline.stage_time`) how long the run's tokens take at its
concurrency, and compares that with the run's measured duration. Nothing is fitted: the
efficiencies are the stated defaults. Figures go to ``benchmarks/results/roofline_vs_published.md``.

The published runs are vLLM's own ``vllm bench serve`` on a single node, reported with the exact
commands, token totals and durations by GPUStack's performance lab (cited per row). Where a run
sends all its requests at once, its duration is mostly the ramp-up and the drain of one wave of
requests rather than steady-state throughput; the table says which regime each row is in.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubejury.config.spec import ModelSpec
from kubejury.placement.gpu_nodes import parse_node
from kubejury.placement.planner import place_model
from kubejury.placement.roofline import stage_time
from kubejury.placement.server_model import server_facts

RESULTS = Path(__file__).resolve().parent / "results" / "roofline_vs_published.md"
LAB = "https://github.com/gpustack/gpustack/blob/main/docs/performance-lab"

#: GFD labels and memory (MiB) of the GPUs the runs used.
GPUS = {
    "H100": ("NVIDIA-H100-80GB-HBM3", 81559, (9, 0)),
    "A100-80GB": ("NVIDIA-A100-SXM4-80GB", 81920, (8, 0)),
}


@dataclass(frozen=True)
class Published:
    """One published vLLM benchmark run: what ran, its token totals and its measured duration."""

    label: str
    model: dict[str, Any]  # EvalRun model entry
    gpu: str
    tp: int
    requests: int
    input_tokens: int
    output_tokens: int
    concurrency: int  # requests in flight at most (all of them when the run sends them at once)
    seconds: float
    vllm: str
    source: str


QWEN3_8B = {"name": "qwen3-8b", "source": "hf://Qwen/Qwen3-8B", "parameters": "8.2B", "quantization": "bf16"}
QWEN3_14B = {
    "name": "qwen3-14b",
    "source": "hf://Qwen/Qwen3-14B",
    "parameters": "14.8B",
    "quantization": "bf16",
}
QWEN3_32B = {
    "name": "qwen3-32b",
    "source": "hf://Qwen/Qwen3-32B",
    "parameters": "32.8B",
    "quantization": "bf16",
}
GPT_OSS = {
    "name": "gpt-oss-120b",
    "source": "hf://openai/gpt-oss-120b",
    "parameters": "117B-A5.1B",
    "checkpoint": "mxfp4",
}

RUNS: tuple[Published, ...] = (
    Published(
        "Qwen3-8B BF16, ShareGPT, 4 in flight",
        QWEN3_8B,
        "H100",
        1,
        100,
        23_260,
        22_061,
        4,
        44.40,
        "0.11.0",
        f"{LAB}/qwen3-8b/h100-latency.md",
    ),
    Published(
        # 66 GB of BF16 weights leave little room: placement needs maxModelLen ≤ 2048 to fit, which
        # is all ShareGPT asks (vllm bench keeps prompt + output ≤ 2048 tokens)
        "Qwen3-32B BF16, ShareGPT, 1000 at once",
        {**QWEN3_32B, "maxModelLen": 2048},
        "H100",
        1,
        1000,
        217_393,
        201_422,
        1000,
        178.01,
        "0.11.0",
        f"{LAB}/qwen3-32b/h100.md",
    ),
    Published(
        "Qwen3-14B BF16, random 4000 in / 200 out, 500 at once",
        QWEN3_14B,
        "H100",
        1,
        500,
        1_997_942,
        99_803,
        500,
        227.57,
        "0.11.0",
        f"{LAB}/qwen3-14b/h100.md",
    ),
    Published(
        "Qwen3-14B BF16, random 4000 in / 200 out, 500 at once",
        QWEN3_14B,
        "A100-80GB",
        1,
        500,
        1_997_942,
        99_783,
        500,
        407.05,
        "0.11.0",
        f"{LAB}/qwen3-14b/a100.md",
    ),
    Published(
        "Qwen3-14B BF16, ShareGPT, 1000 at once",
        QWEN3_14B,
        "H100",
        1,
        1000,
        217_393,
        201_648,
        1000,
        63.53,
        "0.11.0",
        f"{LAB}/qwen3-14b/h100.md",
    ),
    Published(
        "Qwen3-14B BF16, ShareGPT, 1000 at once",
        QWEN3_14B,
        "A100-80GB",
        1,
        1000,
        217_393,
        201_605,
        1000,
        106.82,
        "0.11.0",
        f"{LAB}/qwen3-14b/a100.md",
    ),
    Published(
        "gpt-oss-120b MXFP4, ShareGPT, 1000 at once",
        GPT_OSS,
        "H100",
        1,
        1000,
        215_312,
        195_544,
        1000,
        67.40,
        "0.10.2",
        f"{LAB}/gpt-oss-120b/h100.md",
    ),
    Published(
        "gpt-oss-120b MXFP4, ShareGPT, 1000 at once",
        GPT_OSS,
        "H100",
        2,
        1000,
        215_312,
        196_205,
        1000,
        25.65,
        "0.10.2",
        f"{LAB}/gpt-oss-120b/h100.md",
    ),
    Published(
        "gpt-oss-120b MXFP4, ShareGPT, 1000 at once",
        GPT_OSS,
        "H100",
        4,
        1000,
        215_312,
        196_174,
        1000,
        17.32,
        "0.10.2",
        f"{LAB}/gpt-oss-120b/h100.md",
    ),
)


def node(gpu: str) -> dict[str, Any]:
    """An 8-GPU node labelled as GPU Feature Discovery labels it."""
    product, mib, (major, minor) = GPUS[gpu]
    return {
        "kind": "Node",
        "metadata": {
            "name": f"{gpu.lower()}-node",
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(mib),
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.compute.major": str(major),
                "nvidia.com/gpu.compute.minor": str(minor),
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "1000Gi", "cpu": "96"}},
    }


@dataclass(frozen=True)
class Row:
    run: Published
    predicted: float
    batch: int
    bound: str
    regime: str

    @property
    def error(self) -> float:
        """Predicted over measured duration, minus one (negative: the estimate is too short)."""
        return self.predicted / self.run.seconds - 1


def predict(run: Published) -> Row:
    model = ModelSpec.model_validate({**run.model, "resources": {"gpus": run.tp}})
    placement = place_model(model, [parse_node(node(run.gpu))])
    facts = server_facts(model, placement)
    if facts.server is None:
        raise SystemExit(f"{run.label}: no estimate ({facts.note or placement.reason})")
    timing = stage_time(
        facts.server,
        requests=run.requests,
        prompt_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        in_flight=run.concurrency,
    )
    # A steady state needs several waves of requests through the batch; one or two waves are
    # mostly ramp-up and drain.
    regime = "steady" if run.requests >= 4 * timing.step.batch else "one burst"
    return Row(run, timing.seconds, timing.step.batch, timing.step.bound, regime)


def report(rows: list[Row]) -> str:
    lines = [
        "# The roofline against published vLLM runs",
        "",
        "Generated by `python benchmarks/roofline_vs_published.py`: every row is a published",
        "`vllm bench serve` run (source linked), re-estimated by the same code as",
        "`kubejury plan --estimate` (placement → roofline, default efficiencies, nothing fitted).",
        "Error = estimated / measured duration − 1 (negative: the estimate is too short).",
        "",
        "| run | GPUs | vLLM | requests | in / out tokens | batch (bound) | regime | measured s | estimated s | error |",
        "|---|---|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for row in rows:
        r = row.run
        lines.append(
            f"| [{r.label}]({r.source}) | {r.tp} × {r.gpu} | {r.vllm} | {r.requests} | "
            f"{r.input_tokens:,} / {r.output_tokens:,} | {row.batch} ({row.bound}) | {row.regime} | "
            f"{r.seconds:.1f} | {row.predicted:.1f} | {row.error:+.0%} |"
        )
    lines.append("")
    for regime in ("steady", "one burst"):
        errors = [row.error for row in rows if row.regime == regime]
        if errors:
            lines.append(
                f"- **{regime}** ({len(errors)} runs): mean absolute error {statistics.fmean(map(abs, errors)):.0%}, "
                f"range {min(errors):+.0%} … {max(errors):+.0%}"
            )
    errors = [row.error for row in rows]
    lines.append(
        f"- **all** ({len(errors)} runs): mean absolute error {statistics.fmean(map(abs, errors)):.0%}, "
        f"median {statistics.median(errors):+.0%}"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--no-write", action="store_true", help="print only; do not update benchmarks/results/"
    )
    args = parser.parse_args(argv)
    text = report([predict(run) for run in RUNS])
    sys.stdout.write(text)
    if not args.no_write:
        RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
