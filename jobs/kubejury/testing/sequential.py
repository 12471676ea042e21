"""Simulated sequential runs with known population scores: do the stopping rules keep their promises?

A sequential evaluation is only worth its savings if its intervals still hold and it does not
throw out the best model. This module draws fresh benchmarks from populations whose W is known
exactly (the generator of :mod:`kubejury.testing.calibration`: domain and level effects, a shared
question difficulty, a model × question interaction, three judges with biases and noise, scores
rounded to 0.5 and clipped, 1% nulls), replays the looks of :func:`kubejury.stats.sequential.evaluate`
on them, and counts coverage of the final intervals, a wrong leading group (a true best model
out), the questions used, and the same for the naive rule (stop at the first look where a fixed
95% interval separates: no spending, no multiplicity), which must fail where the real rule holds.

Populations (:func:`population`): ``study`` has the 15 published W spacings of the study (9.33,
9.28, 9.28, 9.27, 9.09, the rest evenly down to 8.17, the lowest W it names); ``easy`` one clear
leader (the same models, all but the first 0.3 lower); ``near-tie`` two equal top models.

The goal ``comparisons`` (:func:`simulate_comparison`, cases :data:`COMPARISONS`) names one pair
among the 15: a pair whose true W difference equals its margin (a wrong verdict is "equivalent")
and a twin pair with no difference (a wrong verdict is "different"); it counts wrong and undecided
verdicts, coverage of the pair's difference interval and the questions used.
Used by ``benchmarks/sequential_calibration.py`` and by a bounded unit test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kubejury.stats.cube import FloatArray
from kubejury.stats.scoring import ScoringConfig, cell_index, question_means
from kubejury.stats.sequential import (
    Budget,
    Comparison,
    LookLevels,
    PairOutcome,
    evaluate,
    plan_order,
    spending_levels,
)
from kubejury.testing.calibration import (
    LEVELS,
    Population,
    Rate,
    Shape,
    draw_benchmark,
    equal_shape,
    population_truth,
    rate,
    standard_population,
)

# The study's published W (Table 4 as quoted in its text): the top four, Qwen3.5-9B and the
# lowest it names; the nine it does not quote are spaced evenly between the last two.
STUDY_TOP = (9.33, 9.28, 9.28, 9.27)
STUDY_REST = tuple(float(w) for w in np.round(np.linspace(9.09, 8.17, 11), 3))
STUDY_W = STUDY_TOP + STUDY_REST
EASY_GAP = 0.3
POPULATIONS = {
    "study": STUDY_W,
    "easy": (STUDY_W[0], *(w - EASY_GAP for w in STUDY_W[1:])),
    "near-tie": (STUDY_W[0], STUDY_W[0], *STUDY_W[2:4], *STUDY_REST),
}
# Two W closer than this are the same quality (a tie for the best).
TIE = 1e-6


def population(targets: tuple[float, ...], seed: int = 2026, n_domains: int = 16) -> Population:
    """A population whose models' W are exactly ``targets`` (bases solved by bisection: rounding
    and clipping make W non-linear in the base), with the calibration's domain effects, judges
    and noise."""
    config = ScoringConfig()
    domain_effect = standard_population(seed, n_domains, config).domain_effect
    shape = equal_shape(1, n_domains)
    names = [f"m{k:02d}" for k in range(len(targets))]
    goal = np.asarray(targets, dtype=np.float64)
    low, high = np.full(goal.shape, 5.0), np.full(goal.shape, 12.0)
    for _ in range(50):
        mid = (low + high) / 2
        w = population_truth(
            Population(dict(zip(names, mid.tolist(), strict=True)), domain_effect), shape, config
        )
        below = w.weighted < goal
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    return Population(
        base=dict(zip(names, ((low + high) / 2).tolist(), strict=True)), domain_effect=domain_effect
    )


def naive_levels(n_looks: int, confidence: float) -> LookLevels:
    """The naive rule: every look uses the fixed interval at ``confidence``, no multiplicity."""
    return LookLevels(alpha=np.full(n_looks, 1.0 - confidence), per_pair=False)


@dataclass(frozen=True)
class Replication:
    """One simulated sequential run under one rule: per model what happened, and the run's verdict."""

    covered: FloatArray  # (M,) final interval (at the stopping look) contains the true W
    running_covered: FloatArray  # (M,) the intersection over the model's looks contains it
    questions: FloatArray  # (M,) questions answered
    wrong_group: float  # 1 when a true best model is out (goal leading-group)
    wrong_claim: float  # 1 when a decided pair's verdict contradicts the truth (pairwise goals)
    group_size: float
    width: FloatArray  # (M,) width of the final interval


def replicate(
    pop: Population,
    truth_w: FloatArray,
    shape: Shape,
    budget: Budget,
    seed: int,
    naive: bool = False,
) -> Replication:
    """Draw one benchmark (seeded), replay the looks and score the outcome against the truth."""
    rng = np.random.default_rng(seed)
    _, cube = draw_benchmark(pop, shape, rng)
    scores, _ = question_means(cube)
    order = plan_order(cell_index(cube), len(cube.domains), len(cube.levels), _seeded(budget, seed))
    levels = (
        naive_levels(order.n_looks, budget.confidence) if naive else spending_levels(order, budget.confidence)
    )
    weights = np.array([ScoringConfig().level_weights[lv] for lv in LEVELS])
    result = evaluate(cube.models, scores, order, budget, weights, levels=levels)
    low = np.array([m.interval[0] for m in result.models])
    high = np.array([m.interval[1] for m in result.models])
    r_low = np.array([m.running_interval[0] for m in result.models])
    r_high = np.array([m.running_interval[1] for m in result.models])
    best = np.flatnonzero(truth_w >= truth_w.max() - TIE)
    group = set(result.leading_group)
    return Replication(
        covered=((low <= truth_w) & (truth_w <= high)).astype(np.float64),
        running_covered=((r_low <= truth_w) & (truth_w <= r_high)).astype(np.float64),
        questions=np.array([m.questions for m in result.models], dtype=np.float64),
        wrong_group=float(any(cube.models[i] not in group for i in best)) if group else math.nan,
        wrong_claim=_wrong_claim(result.pairs, cube.models, truth_w) if result.pairs else math.nan,
        group_size=float(len(group)),
        width=high - low,
    )


def _wrong_claim(pairs: tuple[PairOutcome, ...], models: tuple[str, ...], truth_w: FloatArray) -> float:
    """1.0 when some decided pair says the wrong thing: a-better with W_a ≤ W_b (or b-better with
    W_b ≤ W_a), or equivalent with |W_a − W_b| at or beyond its margin (TOST's null hypothesis is
    |W_a − W_b| ≥ margin, so a pair exactly at the margin is not equivalent)."""
    for pair in pairs:
        true = float(truth_w[models.index(pair.a)] - truth_w[models.index(pair.b)])
        wrong = (
            (pair.verdict == "a-better" and true <= TIE)
            or (pair.verdict == "b-better" and true >= -TIE)
            or (pair.verdict == "equivalent" and abs(true) >= pair.margin - TIE)
        )
        if wrong:
            return 1.0
    return 0.0


def _seeded(budget: Budget, seed: int) -> Budget:
    """The budget with the question order's seed of this replication."""
    return Budget(
        confidence=budget.confidence,
        goal=budget.goal,
        margin=budget.margin,
        max_questions=budget.max_questions,
        min_per_cell=budget.min_per_cell,
        looks=budget.looks,
        seed=seed,
        comparisons=budget.comparisons,
    )


@dataclass(frozen=True)
class RuleResult:
    """One rule on one population over ``replications`` seeded runs."""

    population: str
    rule: str
    replications: int
    coverage: Rate  # per replication: share of models whose final interval covers
    all_covered: Rate  # every model's final interval covers
    running_coverage: Rate
    wrong_group: Rate
    wrong_claim: Rate
    used: Rate  # questions answered ÷ (models × questions), mean over replications
    used_quantiles: dict[str, float]
    group_size: float
    mean_width: float
    best_width: float  # median width of the first (best) model's final interval
    questions_per_model: tuple[float, ...]  # median per model, in the population's order

    @property
    def saving(self) -> Rate:
        return Rate(1.0 - self.used.value, self.used.se)

    def to_dict(self) -> dict[str, Any]:
        return {
            "population": self.population,
            "rule": self.rule,
            "replications": self.replications,
            "coverage": self.coverage.to_dict(),
            "all_covered": self.all_covered.to_dict(),
            "running_coverage": self.running_coverage.to_dict(),
            "wrong_group": self.wrong_group.to_dict(),
            "wrong_claim": self.wrong_claim.to_dict(),
            "used": self.used.to_dict(),
            "saving": self.saving.to_dict(),
            "used_quantiles": self.used_quantiles,
            "mean_group_size": self.group_size,
            "mean_width": self.mean_width,
            "median_width_of_the_best": self.best_width,
            "median_questions_per_model": list(self.questions_per_model),
        }


QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def simulate(
    name: str,
    replications: int,
    seed: int,
    budget: Budget | None = None,
    shape: Shape | None = None,
    naive: bool = False,
) -> RuleResult:
    """Run ``replications`` sequential runs (seeds ``seed``, ``seed + 1``, …) on population ``name``."""
    budget = budget or Budget()
    shape = shape or equal_shape(30)
    pop = population(POPULATIONS[name], n_domains=shape.cells.shape[0])
    truth_w = population_truth(pop, shape, ScoringConfig()).weighted
    runs = [replicate(pop, truth_w, shape, budget, seed + r, naive) for r in range(replications)]
    total = float(shape.n_questions * len(truth_w))
    used = np.array([r.questions.sum() / total for r in runs])
    return RuleResult(
        population=name,
        rule=("naive" if naive else "spending") + f" ({budget.goal})",
        replications=replications,
        coverage=rate(np.array([r.covered.mean() for r in runs])),
        all_covered=rate(np.array([r.covered.min() for r in runs])),
        running_coverage=rate(np.array([r.running_covered.mean() for r in runs])),
        wrong_group=rate(np.array([r.wrong_group for r in runs])),
        wrong_claim=rate(np.array([r.wrong_claim for r in runs])),
        used=rate(used),
        used_quantiles={f"{q:g}": float(np.quantile(used, q)) for q in QUANTILES},
        group_size=float(np.mean([r.group_size for r in runs])),
        mean_width=float(np.mean([r.width.mean() for r in runs])),
        best_width=float(np.median([r.width[0] for r in runs])),
        questions_per_model=tuple(float(v) for v in np.median(np.stack([r.questions for r in runs]), axis=0)),
    )


def rate_text(r: Rate, replications: int = 0) -> str:
    """A rate in percent ± one Monte Carlo standard error; exactly 0 or 1 over ``replications``
    runs gets the rule-of-three 95% bound 3/R instead of a zero error."""
    if replications and r.se == 0.0 and r.value in (0.0, 1.0):
        bound = 300.0 / replications
        return f"0.0 (≤ {bound:.2f})" if r.value == 0.0 else f"100.0 (≥ {100 - bound:.2f})"
    if math.isnan(r.se):
        return f"{100 * r.value:.1f}"
    if 100 * r.se < 0.05:  # keep the error visible: ± 0.0 would read as exact
        return f"{100 * r.value:.2f} ± {100 * r.se:.2f}"
    return f"{100 * r.value:.1f} ± {100 * r.se:.1f}"


# ----------------------------------------------------------------------------------------------
# Goal "comparisons": one named pair among the study's models.

# The default comparison margin of spec.comparisons (kubejury.stats.equivalence.DEFAULT_MARGIN).
COMPARISON_MARGIN = 0.25
# The study's W with the fifth model moved to exactly one margin (half a margin) below the first.
MARGIN_W = (*STUDY_W[:4], STUDY_W[0] - COMPARISON_MARGIN, *STUDY_W[5:])
HALF_MARGIN_W = (*STUDY_W[:4], STUDY_W[0] - COMPARISON_MARGIN / 2, *STUDY_W[5:])


@dataclass(frozen=True)
class ComparisonCase:
    """A population and its named pair (indices ``a``, ``b``) with the pair's margin."""

    name: str
    targets: tuple[float, ...]
    a: int
    b: int
    margin: float = COMPARISON_MARGIN

    @property
    def difference(self) -> float:
        return self.targets[self.a] - self.targets[self.b]


COMPARISONS: dict[str, ComparisonCase] = {
    "at-margin": ComparisonCase("at-margin", MARGIN_W, 0, 4),  # W 9.33 vs 9.08: wrong = equivalent
    "twins": ComparisonCase("twins", STUDY_W, 1, 2),  # W 9.28 vs 9.28: wrong = different
    # W 9.33 vs 9.205, the slowest to decide: a-better and equivalent are both right, b-better wrong
    "half-margin": ComparisonCase("half-margin", HALF_MARGIN_W, 0, 4),
}


@dataclass(frozen=True)
class ComparisonResult:
    """One rule on one named pair over ``replications`` seeded runs."""

    case: str
    rule: str
    replications: int
    true_difference: float
    margin: float
    wrong: Rate  # a decided verdict contradicting the truth
    undecided: Rate  # no verdict when every question is asked
    verdicts: dict[str, float]  # share of runs per verdict
    coverage: Rate  # the pair's interval at its deciding look contains the true difference (decided runs)
    used: Rate  # questions answered ÷ (models × questions)
    used_quantiles: dict[str, float]
    pair_questions_quantiles: dict[str, float]  # questions the pair's models answered

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "rule": self.rule,
            "replications": self.replications,
            "true_difference": self.true_difference,
            "margin": self.margin,
            "wrong_verdict": self.wrong.to_dict(),
            "undecided": self.undecided.to_dict(),
            "verdicts": self.verdicts,
            "pair_interval_covers": self.coverage.to_dict(),
            "used": self.used.to_dict(),
            "saving": {"value": 1.0 - self.used.value, "se": self.used.se},
            "used_quantiles": self.used_quantiles,
            "pair_questions_quantiles": self.pair_questions_quantiles,
        }


def simulate_comparison(
    case: ComparisonCase,
    replications: int,
    seed: int,
    shape: Shape | None = None,
    naive: bool = False,
    confidence: float = 0.95,
) -> ComparisonResult:
    """Run ``replications`` sequential runs of goal ``comparisons`` on ``case`` (seeds ``seed + r``);
    ``naive``: the fixed interval at ``confidence`` at every look, no spending."""
    shape = shape or equal_shape(30)
    pop = population(case.targets, n_domains=shape.cells.shape[0])
    truth_w = population_truth(pop, shape, ScoringConfig()).weighted
    names = list(pop.base)
    budget = Budget(
        confidence=confidence,
        goal="comparisons",
        comparisons=(Comparison(names[case.a], names[case.b], case.margin),),
    )
    runs = [_compare_once(pop, truth_w, shape, budget, seed + r, naive) for r in range(replications)]
    pairs = [p for p, _ in runs]
    true = float(truth_w[case.a] - truth_w[case.b])
    decided = [p for p in pairs if p.verdict != "undecided"]
    total = float(shape.n_questions * len(truth_w))
    used = np.array([q.sum() / total for _, q in runs])
    pair_q = np.array([max(q[case.a], q[case.b]) for _, q in runs])
    return ComparisonResult(
        case=case.name,
        rule=("naive" if naive else "spending") + f" ({confidence:g})",
        replications=replications,
        true_difference=true,
        margin=case.margin,
        wrong=rate(np.array([_wrong_claim((p,), (p.a, p.b), np.array([true, 0.0])) for p in pairs])),
        undecided=rate(np.array([float(p.verdict == "undecided") for p in pairs])),
        verdicts={v: float(np.mean([p.verdict == v for p in pairs])) for v in VERDICTS},
        coverage=rate(
            np.array([float(p.interval[0] <= true <= p.interval[1]) for p in decided] or [math.nan])
        ),
        used=rate(used),
        used_quantiles={f"{q:g}": float(np.quantile(used, q)) for q in QUANTILES},
        pair_questions_quantiles={f"{q:g}": float(np.quantile(pair_q, q)) for q in QUANTILES},
    )


VERDICTS = ("a-better", "b-better", "equivalent", "undecided")


def _compare_once(
    pop: Population, truth_w: FloatArray, shape: Shape, budget: Budget, seed: int, naive: bool
) -> tuple[PairOutcome, FloatArray]:
    """One seeded run of the comparisons goal: the named pair's outcome and questions per model."""
    rng = np.random.default_rng(seed)
    _, cube = draw_benchmark(pop, shape, rng)
    scores, _ = question_means(cube)
    order = plan_order(cell_index(cube), len(cube.domains), len(cube.levels), _seeded(budget, seed))
    levels = (
        naive_levels(order.n_looks, budget.confidence) if naive else spending_levels(order, budget.confidence)
    )
    weights = np.array([ScoringConfig().level_weights[lv] for lv in LEVELS])
    result = evaluate(cube.models, scores, order, budget, weights, levels=levels)
    return result.pairs[0], np.array([m.questions for m in result.models], dtype=np.float64)
