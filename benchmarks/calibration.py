"""Calibration of kubejury's intervals: coverage, false separation and power, by simulation.

Run ``python benchmarks/calibration.py`` (from the repository, with the project's virtualenv).
For each benchmark shape it draws ``--replications`` fresh benchmarks from a population whose
scores are known exactly (``kubejury.testing.calibration``), runs each through the code of
``kubejury report --format json`` in-process (``analyse_cubes`` → ``build_report``) and checks
report.json against the population:

* coverage of the 95% intervals of W, D, Score per level and per-domain W (targets 93–97%);
* how often two models of equal quality are called different (prob_better outside 2.5–97.5%;
  target ≤ 6%);
* how often models whose W is higher by 0.2 and by 0.5 are separated from the reference (power),
  next to the power report.json predicts for itself.

Seeds are fixed (replication r of every shape uses seed ``--seed + r``), so a rerun gives the
same table. Each figure comes with its Monte Carlo standard error over replications. Results are
written to ``benchmarks/results/calibration.md`` and ``calibration.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

# One BLAS thread: the per-replication products are small and a spinning second thread only
# competes with the other jobs on the two shared cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from kubejury.stats.scoring import ScoringConfig
from kubejury.testing.calibration import (
    BETTER,
    LEVELS,
    Rate,
    Shape,
    ShapeResult,
    calibrate,
    equal_pairs,
    equal_shape,
    unequal_shape,
)

RESULTS = Path(__file__).resolve().parent / "results"


def use_normal_quantile() -> None:
    """Ablation: keep the rescaled replicates but give every statistic infinite degrees of freedom
    (estimate ± z·SE instead of ± t·SE), to measure what the t quantile contributes."""
    import numpy as np

    from kubejury.stats import uncertainty
    from kubejury.stats.strata import DesignDegrees

    design_degrees = getattr(uncertainty, "degrees_of_freedom")  # noqa: B009 (patched below)

    def infinite(*args: Any, **kwargs: Any) -> DesignDegrees:
        found = design_degrees(*args, **kwargs)
        return DesignDegrees(
            weighted=float("inf"),
            levels=np.full_like(found.levels, np.inf),
            degradation=float("inf"),
            domain_weighted=np.full_like(found.domain_weighted, np.inf),
        )

    setattr(uncertainty, "degrees_of_freedom", infinite)  # noqa: B010 (an ablation patches the module)


SHAPES = {
    "2": lambda: equal_shape(2),
    "6": lambda: equal_shape(6),
    "30": lambda: equal_shape(30),
    "unequal": lambda: unequal_shape(),
}


def pct(rate: Rate, replications: int | None = None) -> str:
    """A rate in percent ± its Monte Carlo error; a rate of exactly 0 or 1 (sample error 0) gets
    the rule-of-three 95% bound 3/R instead."""
    if replications and rate.se == 0.0 and rate.value in (0.0, 1.0):
        bound = 100 * 3.0 / replications
        return f"{100 * rate.value:.1f} (≥ {100 - bound:.1f})" if rate.value else f"0.0 (≤ {bound:.1f})"
    return f"{100 * rate.value:.1f} ± {100 * rate.se:.1f}"


def row(result: ShapeResult) -> str:
    levels = " | ".join(pct(r) for r in result.coverage_levels)
    power = " | ".join(
        pct(measured, result.replications)
        + ("" if math.isnan(predicted.value) else f" (report: {100 * predicted.value:.0f})")
        for measured, predicted in zip(result.power, result.predicted_power, strict=True)
    )
    return (
        f"| {result.shape.name} ({result.shape.n_questions} q) | {result.replications} "
        f"| {pct(result.coverage_weighted)} | {pct(result.coverage_degradation)} | {levels} "
        f"| {pct(result.coverage_domains)} | {pct(result.false_separation)} | {power} "
        f"| {result.variance_ratio:.2f} ± {result.variance_ratio * math.sqrt(2.0 / (result.replications - 1)):.2f} |"
    )


def describe_cells(shape: Shape) -> str:
    counts: dict[int, int] = {}
    for size in shape.cells.ravel().tolist():
        counts[int(size)] = counts.get(int(size), 0) + 1
    return ", ".join(f"{n} cells of {size}" for size, n in sorted(counts.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replications", type=int, default=400)
    parser.add_argument("--seed", type=int, default=150_000)
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    parser.add_argument("--samples", type=int, default=ScoringConfig().bootstrap_samples)
    parser.add_argument("--out", type=Path, default=RESULTS / "calibration.md")
    parser.add_argument(
        "--normal-quantile",
        action="store_true",
        help="ablation: ± z·SE instead of ± t·SE (write it elsewhere with --out)",
    )
    args = parser.parse_args()
    if args.normal_quantile:
        use_normal_quantile()

    config = ScoringConfig(bootstrap_samples=args.samples)
    names = args.shape or ["2", "6", "30", "unequal"]
    results: list[ShapeResult] = []
    started = time.perf_counter()
    for name in names:
        shape = SHAPES[name]()
        t = time.perf_counter()
        result = calibrate(shape, args.replications, seed=args.seed, config=config)
        results.append(result)
        print(f"[{shape.name}] {time.perf_counter() - t:.0f} s: {json.dumps(result.to_dict())}", flush=True)
    elapsed = time.perf_counter() - started

    unequal = [r.shape for r in results if r.shape.name == "unequal cells"]
    header = (
        "| shape | replications | W covers | D covers | "
        + " | ".join(f"Score({lv}) covers" for lv in LEVELS)
        + " | per-domain W covers | equal models called different | "
        + " | ".join(f"ΔW = {d} separated" for d in BETTER.values())
        + " | bootstrap var ÷ true var of W |"
    )
    ablation = " --normal-quantile" if args.normal_quantile else ""
    text = [
        "# Interval calibration" + (" — ablation: normal quantile instead of t" if ablation else ""),
        "",
        f"Measured by `python benchmarks/calibration.py --replications {args.replications}{ablation}` (seeds"
        f" {args.seed} + r for replication r of every shape; {args.samples} bootstrap samples per report).",
        "Every replication draws a fresh benchmark from a population with known W, D, Score and per-domain W",
        "(`kubejury.testing.calibration`: domain and level effects, question difficulty shared by the models,",
        "a model × question interaction, three judges with fixed biases and noise, scores rounded to 0.5 and",
        "clipped to 0–10, 1% null judge scores; population values computed exactly), and runs it through",
        "`analyse_cubes` → `build_report`, the code of `kubejury report --format json`, in-process.",
        "",
        "- Coverage: share of 95% intervals in report.json that contain the population value, over the five",
        "  models (and the levels / the 16 domains). Targets 93–97%.",
        "- Equal models called different: three models of equal quality (three pairs); share of pairs whose",
        "  `prob_better` is outside 2.5–97.5%. Target ≤ 6%.",
        "- ΔW separated (power): share of runs in which a model whose population W is higher by ΔW has",
        "  `prob_better` over the reference above 97.5%; in brackets the detection probability report.json",
        "  predicts for itself (its `power` block), averaged over the runs.",
        "- ± is one Monte Carlo standard error over replications (each replication is one unit; its value",
        "  averages the models, levels or domains it covers).",
        "- Last column: mean bootstrap variance of the reference model's W ÷ the variance of its estimate",
        "  across the replications (1 = the bootstrap's spread is the real one); its error is that of a sample",
        "  variance, √(2/(R − 1)) relative.",
        f"- Shapes: 16 domains × 3 levels; unequal cells: {describe_cells(unequal[0]) if unequal else 'not run'}.",
        f"- Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}; {elapsed:.0f} s in all.",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
        *[row(r) for r in results],
        "",
    ]
    document: dict[str, Any] = {
        "command": f"python benchmarks/calibration.py --replications {args.replications}{ablation}",
        "seed": args.seed,
        "bootstrap_samples": args.samples,
        "equal_pairs": [list(p) for p in equal_pairs()],
        "results": [r.to_dict() for r in results],
        "elapsed_s": elapsed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print("\n".join(text))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
