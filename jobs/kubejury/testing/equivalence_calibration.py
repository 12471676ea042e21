"""Simulated benchmarks for the equivalence verdict: does TOST keep its error rates?

A verdict "equivalent within ±Δ" is only worth printing if it is rarely given when the models truly
differ by Δ. This module draws fresh benchmarks from the populations of
:mod:`kubejury.testing.calibration` (domain and level effects, a question difficulty shared by the
models, a model × question interaction, three judges with biases and noise, scores rounded to 0.5),
with three models: a reference, a twin of the same quality, and a model whose population W is
higher by exactly the margin. Each benchmark goes through ``analyse_cubes`` → ``build_document``
(the code of ``kubejury report``) with two comparisons, twin − reference (true difference 0) and
at-margin − reference (true difference Δ), and its report.json's ``comparisons`` are read back:

* at the margin, the rate of ``equivalent`` is TOST's type I error (target ≤ α = 5%);
* at zero, the rate of ``equivalent`` is its power, and the rate of ``different`` the difference
  test's type I error (target ≤ 5%);
* the same intervals judged by wrong rules — "not significantly different" (the 95% interval
  contains 0) or "the estimate is inside the margin" — show what the test guards against, and the
  "95% interval inside the margin" rule what a needlessly strict one costs in power.

Used by ``benchmarks/equivalence_calibration.py`` (the table) and a bounded unit test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from kubejury.records.report import ComparisonEntry
from kubejury.report.aggregate import analyse_cubes
from kubejury.report.json_report import build_document
from kubejury.stats.equivalence import DEFAULT_MARGIN, ComparisonRequest
from kubejury.stats.scoring import ScoringConfig
from kubejury.testing.calibration import (
    SERIES,
    Population,
    Rate,
    Shape,
    draw_benchmark,
    equal_shape,
    population_truth,
    rate,
)

REFERENCE = "ref"
TWIN = "twin"  # the reference's quality: a true difference of 0
AT_MARGIN = "at-margin"  # population W higher than the reference's by exactly the margin
PAIRS = {"zero": (TWIN, REFERENCE), "margin": (AT_MARGIN, REFERENCE)}

Rule = Callable[[ComparisonEntry], bool]
"""Says "equivalent" or not from one comparison of report.json."""


def _ci_inside(interval: list[float] | None, margin: float) -> bool:
    return interval is not None and -margin < interval[0] and interval[1] < margin


def _contains_zero(interval: list[float] | None) -> bool:
    return interval is not None and interval[0] <= 0.0 <= interval[1]


RULES: Mapping[str, Rule] = {
    "TOST (the report's verdict)": lambda c: c.verdict == "equivalent",
    "95% interval inside the margin": lambda c: (
        c.weighted is not None and _ci_inside(c.weighted.ci95, c.margin)
    ),
    "not significantly different (wrong)": lambda c: (
        c.weighted is not None and _contains_zero(c.weighted.ci95)
    ),
    "estimate inside the margin (wrong)": lambda c: (
        c.weighted is not None and c.weighted.difference is not None and abs(c.weighted.difference) < c.margin
    ),
}


def equivalence_population(
    margin: float = DEFAULT_MARGIN, seed: int = 2026, n_domains: int = 16, config: ScoringConfig | None = None
) -> Population:
    """The reference, its twin, and a model whose population W is higher by exactly ``margin``
    (its base solved by bisection: rounding and clipping make W non-linear in the base)."""
    config = config or ScoringConfig()
    domain_effect = np.random.default_rng(seed).normal(0.0, 0.4, n_domains)
    ref_base = 7.6
    shape = equal_shape(1, n_domains)

    def weighted(base: float) -> float:
        return float(population_truth(Population({"x": base}, domain_effect), shape, config).weighted[0])

    target = weighted(ref_base) + margin
    low, high = ref_base, ref_base + 3 * margin + 0.5
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if weighted(mid) < target else (low, mid)
    return Population(
        base={REFERENCE: ref_base, TWIN: ref_base, AT_MARGIN: (low + high) / 2}, domain_effect=domain_effect
    )


@dataclass(frozen=True)
class Replication:
    """One benchmark's comparisons, keyed like :data:`PAIRS`."""

    comparisons: Mapping[str, ComparisonEntry]


def run_replication(
    population: Population, shape: Shape, config: ScoringConfig, margin: float, seed: int
) -> Replication:
    """Draw one benchmark (seeded), run the report's code with both comparisons and read them back."""
    bench, cube = draw_benchmark(population, shape, np.random.default_rng(seed))
    requests = [ComparisonRequest(a, b, margin) for a, b in PAIRS.values()]
    document = build_document(analyse_cubes(bench, {SERIES: cube}, config, comparisons=requests))
    entries = document.series[SERIES].comparisons
    return Replication(dict(zip(PAIRS, entries, strict=True)))


@dataclass(frozen=True)
class ShapeResult:
    """Rates over the replications of one shape: ``equivalent[pair][rule]``, ``different[pair]``,
    and the median number of questions the report said an equivalence decision needs."""

    shape: Shape
    replications: int
    margin: float
    equivalent: Mapping[str, Mapping[str, Rate]]
    different: Mapping[str, Rate]
    undecided: Mapping[str, Rate]
    questions_needed: float
    true_difference: Mapping[str, float]

    def to_dict(self) -> dict[str, object]:
        return {
            "shape": self.shape.name,
            "questions": self.shape.n_questions,
            "replications": self.replications,
            "margin": self.margin,
            "true_difference": dict(self.true_difference),
            "equivalent": {
                p: {r: v.to_dict() for r, v in rules.items()} for p, rules in self.equivalent.items()
            },
            "different": {p: v.to_dict() for p, v in self.different.items()},
            "undecided": {p: v.to_dict() for p, v in self.undecided.items()},
            "questions_needed_median": self.questions_needed,
        }


def calibrate_equivalence(
    shape: Shape,
    replications: int,
    seed: int,
    config: ScoringConfig | None = None,
    margin: float = DEFAULT_MARGIN,
    population: Population | None = None,
) -> ShapeResult:
    """Run ``replications`` benchmarks of ``shape`` (seeds ``seed``, ``seed + 1``, …) and count."""
    config = config or ScoringConfig()
    population = population or equivalence_population(margin, n_domains=shape.cells.shape[0], config=config)
    truth = population_truth(population, shape, config)
    w = dict(zip(truth.models, truth.weighted.tolist(), strict=True))
    runs = [run_replication(population, shape, config, margin, seed + r) for r in range(replications)]

    def share(pair: str, test: Rule) -> Rate:
        return rate(np.array([float(test(run.comparisons[pair])) for run in runs]))

    needed = [
        float(q.equivalent)
        for run in runs
        if (q := run.comparisons["zero"].questions_needed) is not None and q.equivalent is not None
    ]
    return ShapeResult(
        shape=shape,
        replications=replications,
        margin=margin,
        equivalent={pair: {name: share(pair, rule) for name, rule in RULES.items()} for pair in PAIRS},
        different={pair: share(pair, lambda c: c.different) for pair in PAIRS},
        undecided={pair: share(pair, lambda c: c.verdict == "undecided") for pair in PAIRS},
        questions_needed=float(np.median(needed)) if needed else float("nan"),
        true_difference={pair: w[a] - w[b] for pair, (a, b) in PAIRS.items()},
    )
