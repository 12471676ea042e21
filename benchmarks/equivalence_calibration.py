"""Error rates of the equivalence verdict (TOST) at the margin and at zero difference, by simulation.

Run ``python benchmarks/equivalence_calibration.py`` (from the repository, with the project's
virtualenv). For each benchmark shape it draws ``--replications`` fresh benchmarks from a population
of :mod:`kubejury.testing.calibration` with a reference model, a twin of equal quality and a model
whose population W is higher by exactly the margin (``kubejury.testing.equivalence_calibration``),
runs each through the code of ``kubejury report`` in-process with the two comparisons, and counts
what report.json's ``comparisons`` say:

* at a true difference equal to the margin: how often the pair is called *equivalent* (TOST's
  type I error; target ≤ 5%), next to wrong rules on the same intervals;
* at a true difference of 0: how often it is called *equivalent* (power) and how often *different*
  (the difference test's type I error; target ≤ 5%).

Seeds are fixed (replication r of every shape uses seed ``--seed + r``); each rate comes with its
Monte Carlo standard error. Results: ``benchmarks/results/equivalence.md`` and ``equivalence.json``.
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

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small products; the two cores are shared

from kubejury.stats.equivalence import DEFAULT_MARGIN
from kubejury.stats.scoring import ScoringConfig
from kubejury.testing.calibration import Rate, equal_shape, unequal_shape
from kubejury.testing.equivalence_calibration import RULES, ShapeResult, calibrate_equivalence

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = {
    "2": lambda: equal_shape(2),
    "6": lambda: equal_shape(6),
    "30": lambda: equal_shape(30),
    "unequal": lambda: unequal_shape(),
}


def pct(rate: Rate, replications: int) -> str:
    """A rate in percent ± one Monte Carlo standard error; 0 or 1 exactly gets the rule of three."""
    if rate.se == 0.0 and rate.value in (0.0, 1.0):
        bound = 100 * 3.0 / replications
        return f"{100 * rate.value:.1f} (≥ {100 - bound:.1f})" if rate.value else f"0.0 (≤ {bound:.1f})"
    return f"{100 * rate.value:.1f} ± {100 * rate.se:.1f}"


def error_row(result: ShapeResult) -> str:
    r = result.replications
    rules = " | ".join(pct(result.equivalent["margin"][name], r) for name in RULES)
    return (
        f"| {result.shape.name} ({result.shape.n_questions} q) | {r} | {rules} "
        f"| {pct(result.different['zero'], r)} |"
    )


def power_row(result: ShapeResult) -> str:
    r = result.replications
    rules = " | ".join(pct(result.equivalent["zero"][name], r) for name in RULES)
    return (
        f"| {result.shape.name} ({result.shape.n_questions} q) | {rules} "
        f"| {pct(result.undecided['zero'], r)} | {pct(result.different['margin'], r)} "
        f"| {result.questions_needed:.0f} |"
    )


def load_average() -> str:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replications", type=int, default=400)
    parser.add_argument("--seed", type=int, default=270_000)
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    parser.add_argument("--samples", type=int, default=ScoringConfig().bootstrap_samples)
    parser.add_argument("--out", type=Path, default=RESULTS / "equivalence.md")
    args = parser.parse_args()

    config = ScoringConfig(bootstrap_samples=args.samples)
    load_before = load_average()
    started = time.perf_counter()
    results: list[ShapeResult] = []
    for name in args.shape or ["2", "6", "30", "unequal"]:
        shape = SHAPES[name]()
        t = time.perf_counter()
        result = calibrate_equivalence(
            shape, args.replications, seed=args.seed, config=config, margin=args.margin
        )
        results.append(result)
        print(f"[{shape.name}] {time.perf_counter() - t:.0f} s: {json.dumps(result.to_dict())}", flush=True)
    elapsed = time.perf_counter() - started

    rule_heads = " | ".join(RULES)
    command = f"python benchmarks/equivalence_calibration.py --replications {args.replications}"
    text = [
        "# Equivalence verdict (TOST): error rates by simulation",
        "",
        f"Measured by `{command}` (seeds {args.seed} + r for replication r of every shape; {args.samples}"
        f" bootstrap samples per report; margin Δ = {args.margin} W points).",
        "Every replication draws a fresh benchmark from a population of `kubejury.testing.calibration`",
        "(16 domains × 3 levels, domain and level effects, a question difficulty shared by the models, a",
        "model × question interaction of SD 0.5, three judges with biases +0.3/−0.2/0 and noise SD 0.6,",
        "scores rounded to 0.5 and clipped to 0–10, 1% null scores) with three models: a reference, a twin",
        "of equal quality, and a model whose population W is higher by exactly Δ. It goes through",
        "`analyse_cubes` → `build_document` (the code of `kubejury report`) with two comparisons, twin −",
        "reference (true difference 0) and at-margin − reference (true difference Δ), and the verdicts in",
        "report.json's `comparisons` are counted. ± is one Monte Carlo standard error.",
        "",
        "Rules judged on the same intervals: **TOST** (the report's verdict: the 90% interval inside ±Δ,",
        "i.e. both one-sided tests at α = 5%); the 95% interval inside ±Δ (a valid but stricter test, at",
        "2.5% per side); **not significantly different** (the 95% interval contains 0) and **the estimate",
        "inside ±Δ**, both wrong readings of equivalence.",
        "",
        "## At a true difference equal to the margin: share called equivalent (target ≤ 5%)",
        "",
        f"| shape | replications | {rule_heads} | called different at a true difference of 0 (target ≤ 5%) |",
        "|---|---|" + "---|" * len(RULES) + "---|",
        *[error_row(r) for r in results],
        "",
        "## At a true difference of 0: share called equivalent (power), and decisions",
        "",
        f"| shape | {rule_heads} | undecided at 0 | called different at Δ | questions needed (report, median) |",
        "|---|" + "---|" * len(RULES) + "---|---|---|",
        *[power_row(r) for r in results],
        "",
        '"Questions needed" is the report\'s own figure for 80% probability of *equivalent* at a true',
        "difference of 0, n = Q·((z₀.₉₅ + z₀.₉)·SE/Δ)², the median over replications; where it is at or",
        "below the shape's questions the measured TOST power at 0 should be about 80% or more.",
        "",
        f"Machine: {os.cpu_count()} CPUs shared with other jobs, load average {load_before} at the start"
        f" and {load_average()} at the end; Python {platform.python_version()}; {elapsed:.0f} s in all.",
        "",
    ]
    document: dict[str, Any] = {
        "command": command,
        "seed": args.seed,
        "bootstrap_samples": args.samples,
        "margin": args.margin,
        "rules": list(RULES),
        "results": [r.to_dict() for r in results],
        "elapsed_s": elapsed,
        "load_average": {"start": load_before, "end": load_average()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print("\n".join(text))
    print(f"written {args.out}")
    return 0 if all(math.isfinite(r.questions_needed) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
