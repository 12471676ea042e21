"""Simulated benchmarks with known population scores: do kubejury's intervals hold their level?

An interval is only worth printing if it covers the value it claims to cover as often as it says.
This module builds a population whose true W, D, Score per level and per-domain W are known
exactly, draws fresh benchmarks from it, runs them through the same code as
``kubejury report --format json`` (``analyse_cubes`` → ``build_report``, in-process) and counts:

* coverage: how often each 95% interval in report.json contains the population value;
* false separation: how often two models of equal quality get ``prob_better`` outside
  [α/2, 1 − α/2] (the report calls them different);
* power: how often a model whose population W is higher by 0.2 or 0.5 is separated from the
  reference in the right direction, next to the power the report itself predicts.

The population (see :class:`Population`): domain and level effects, a question difficulty shared
by every model, a model × question interaction, three judges with fixed biases and independent
noise, scores rounded to 0.5 and clipped to 0–10, and a few null judge scores. Population values
are exact, not Monte Carlo: a judge's raw score in a cell is normal, so the expectation of the
rounded, clipped score is a finite sum of normal probabilities (:func:`expected_judge_score`).

Used by ``benchmarks/calibration.py`` (the full table) and by a bounded unit test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from kubejury.files.benchmark import Benchmark, Question
from kubejury.report.aggregate import analyse_cubes
from kubejury.report.json_report import build_report
from kubejury.stats.cube import FloatArray, IntArray, ScoreCube
from kubejury.stats.scoring import (
    ScoringConfig,
    degradation_from_levels,
    level_scores_from_cells,
    weighted_mean_over_levels,
)

SERIES = "sim"
LEVELS = (1, 2, 3)
REFERENCE = "ref"
# Models of the same quality as the reference (equal-model pairs: ref/twin-a, ref/twin-b, twin-a/twin-b).
TWINS = ("twin-a", "twin-b")
# Models whose population W exceeds the reference's by exactly this much.
BETTER = {"plus-0.2": 0.2, "plus-0.5": 0.5}


@dataclass(frozen=True)
class Shape:
    """A benchmark design: ``cells[i, d]`` questions in domain i at level ``LEVELS[d]``."""

    name: str
    cells: IntArray  # (domains, levels)

    @property
    def n_questions(self) -> int:
        return int(self.cells.sum())

    @property
    def description(self) -> str:
        sizes = np.unique(self.cells)
        per_cell = str(int(sizes[0])) if sizes.size == 1 else f"{int(sizes.min())}–{int(sizes.max())}"
        return f"{self.cells.shape[0]} domains × {self.cells.shape[1]} levels, {per_cell} per cell"


def equal_shape(per_cell: int, domains: int = 16) -> Shape:
    """Every (domain, level) cell holds ``per_cell`` questions (2 = the quickstart, 30 = the study)."""
    return Shape(f"{per_cell} per cell", np.full((domains, len(LEVELS)), per_cell, dtype=np.int64))


def unequal_shape(seed: int = 7, domains: int = 16, sizes: Sequence[int] = (1, 1, 2, 3, 5, 8, 12)) -> Shape:
    """Cells of unequal size drawn once from ``sizes`` (including single-question cells)."""
    rng = np.random.default_rng(seed)
    cells = rng.choice(np.asarray(sizes, dtype=np.int64), size=(domains, len(LEVELS)))
    return Shape("unequal cells", cells.astype(np.int64))


@dataclass(frozen=True)
class Population:
    """Where the simulated scores come from (all on the 0–10 judge scale).

    A judge's raw score of model m on question q in domain i at level d is
    ``base[m] + domain_effect[i] + level_effect[d] − difficulty(q) + interaction(m, q) +
    judge_bias[j] + noise``, with difficulty ~ N(0, difficulty_sd[d]), interaction ~
    N(0, interaction_sd) and noise ~ N(0, judge_noise_sd), all independent; it is then rounded to
    0.5 and clipped to 0–10. A judge score is null with probability ``null_rate``.
    """

    base: Mapping[str, float]
    domain_effect: FloatArray
    level_effect: FloatArray = field(default_factory=lambda: np.array([0.0, -0.4, -0.9]))
    difficulty_sd: FloatArray = field(default_factory=lambda: np.array([0.7, 0.8, 0.9]))
    interaction_sd: float = 0.5
    judge_bias: FloatArray = field(default_factory=lambda: np.array([0.3, -0.2, 0.0]))
    judge_noise_sd: float = 0.6
    null_rate: float = 0.01

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.base)


def expected_judge_score(mean: FloatArray, sd: FloatArray) -> FloatArray:
    """E[clip(round(2x)/2, 0, 10)] for x ~ N(mean, sd), exactly (elementwise)."""
    mean, sd = np.broadcast_arrays(np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64))
    edges = np.arange(0.25, 10.0, 0.5)  # between consecutive half-points 0, 0.5, …, 10
    cdf = special.ndtr((edges[:, None] - mean.ravel()[None, :]) / sd.ravel()[None, :])
    # E = Σ_k v_k·P(v_k) with v_k = k/2 = Σ over the edges of 0.5·P(x > edge).
    expected = (0.5 * (1.0 - cdf)).sum(axis=0)
    return np.asarray(expected.reshape(mean.shape), dtype=np.float64)


def population_cell_means(population: Population, n_domains: int) -> FloatArray:
    """The population mean question score of each model in each cell, (models, domains, levels).

    S(q) is the mean of the non-null judge scores; nulls are independent of everything and equally
    likely for every judge, so by symmetry E[S(q)] is the mean of the judges' expected scores.
    """
    base = np.array([population.base[m] for m in population.models])
    raw_sd = np.sqrt(
        population.difficulty_sd**2 + population.interaction_sd**2 + population.judge_noise_sd**2
    )
    mean = (
        base[:, None, None, None]
        + population.domain_effect[None, :n_domains, None, None]
        + population.level_effect[None, None, :, None]
        + population.judge_bias[None, None, None, :]
    )
    sd = np.broadcast_to(raw_sd[None, None, :, None], mean.shape)
    return np.asarray(expected_judge_score(mean, sd).mean(axis=-1), dtype=np.float64)


@dataclass(frozen=True)
class Truth:
    """Population values of the report's statistics, indexed like a ScoreCube of the shape."""

    models: tuple[str, ...]
    weighted: FloatArray  # (M,)
    degradation: FloatArray  # (M,)
    level_scores: FloatArray  # (M, L)
    domain_weighted: FloatArray  # (M, Dn)


def population_truth(population: Population, shape: Shape, config: ScoringConfig) -> Truth:
    """The statistics of the population: the study's formulas applied to population cell means.

    Every domain counts equally at each level whatever its number of questions (formula (2)), so
    the population value does not depend on the cell sizes, only on which cells exist.
    """
    cells = population_cell_means(population, shape.cells.shape[0])
    cells = np.where(shape.cells[None, :, :] > 0, cells, np.nan)
    weights = np.array([config.level_weights[lv] for lv in LEVELS], dtype=np.float64)
    level = level_scores_from_cells(cells)
    present = np.flatnonzero(shape.cells.sum(axis=0) > 0).astype(np.int64)
    return Truth(
        models=population.models,
        weighted=weighted_mean_over_levels(level, weights),
        degradation=degradation_from_levels(level, present),
        level_scores=level,
        domain_weighted=weighted_mean_over_levels(cells, weights),
    )


def standard_population(
    seed: int = 2026, n_domains: int = 16, config: ScoringConfig | None = None
) -> Population:
    """The population of the calibration table: a reference model, two of equal quality, and two
    whose population W is higher by exactly 0.2 and 0.5 (their base is solved for numerically,
    because rounding and clipping make W non-linear in the base)."""
    config = config or ScoringConfig()
    rng = np.random.default_rng(seed)
    domain_effect = rng.normal(0.0, 0.4, n_domains)
    ref_base = 7.6
    base = {REFERENCE: ref_base, **{twin: ref_base for twin in TWINS}}
    probe = Population(base={REFERENCE: ref_base}, domain_effect=domain_effect)
    shape = equal_shape(1, n_domains)
    ref_w = float(population_truth(probe, shape, config).weighted[0])
    for name, delta in BETTER.items():
        low, high = ref_base, ref_base + 3 * delta + 0.5
        for _ in range(60):  # bisection: W is increasing in the base
            mid = (low + high) / 2
            w = float(population_truth(Population({"x": mid}, domain_effect), shape, config).weighted[0])
            low, high = (mid, high) if w < ref_w + delta else (low, mid)
        base[name] = (low + high) / 2
    return Population(base=base, domain_effect=domain_effect)


def draw_benchmark(
    population: Population, shape: Shape, rng: np.random.Generator
) -> tuple[Benchmark, ScoreCube]:
    """One fresh benchmark of ``shape`` from ``population``: its questions and every judge score."""
    n_domains = shape.cells.shape[0]
    domains = tuple(f"domain-{i:02d}" for i in range(n_domains))
    q_domain: list[int] = []
    q_level: list[int] = []
    for d in range(len(LEVELS)):  # the cube's order: level, domain, id
        for i in range(n_domains):
            q_domain += [i] * int(shape.cells[i, d])
            q_level += [d] * int(shape.cells[i, d])
    qd = np.array(q_domain, dtype=np.int64)
    ql = np.array(q_level, dtype=np.int64)
    n_q, models = qd.shape[0], population.models
    n_m, n_j = len(models), population.judge_bias.shape[0]
    base = np.array([population.base[m] for m in models])
    difficulty = rng.normal(0.0, 1.0, n_q) * population.difficulty_sd[ql]
    interaction = rng.normal(0.0, population.interaction_sd, (n_m, n_q))
    noise = rng.normal(0.0, population.judge_noise_sd, (n_m, n_q, n_j))
    raw = (
        (
            (base[:, None] + population.domain_effect[qd][None, :] + population.level_effect[ql][None, :])
            - difficulty[None, :]
            + interaction
        )[:, :, None]
        + population.judge_bias[None, None, :]
        + noise
    )
    scores = np.clip(np.round(raw * 2.0) / 2.0, 0.0, 10.0)
    scores[rng.random(scores.shape) < population.null_rate] = np.nan
    ids = tuple(f"q{k:05d}" for k in range(n_q))
    cube = ScoreCube(
        series=SERIES,
        models=models,
        judges=tuple(f"judge-{j}" for j in range(n_j)),
        question_ids=ids,
        domains=domains,
        levels=LEVELS,
        question_domain=qd,
        question_level=ql,
        scores=scores,
        has_record=np.ones((n_m, n_q), dtype=bool),
    )
    questions = tuple(
        Question(id=ids[k], domain=domains[qd[k]], level=LEVELS[ql[k]], question="?", reference="-")
        for k in range(n_q)
    )
    return Benchmark(questions=questions, source="simulated"), cube


def _covers(interval: Any, value: float) -> float:
    """1.0 if the report's ``[low, high]`` contains ``value``, 0.0 if not, NaN without interval."""
    if interval is None or math.isnan(value):
        return math.nan
    return 1.0 if interval[0] <= value <= interval[1] else 0.0


@dataclass(frozen=True)
class Replication:
    """What one simulated benchmark's report.json says, scored against the population.

    Coverage entries are per model (and per level / domain): 1 covered, 0 missed, NaN no interval.
    ``called_different``: per equal-model pair, whether prob_better left [α/2, 1 − α/2].
    ``separated``: per better model, whether prob_better(better, ref) exceeded 1 − α/2.
    ``predicted_power``: the report's own detection probability for each difference in BETTER.
    ``bootstrap_var_w`` / ``estimate_w``: the replicate variance of the reference's W and its
    estimate, to compare the bootstrap's variance with the spread across benchmarks.
    """

    weighted: FloatArray  # (M,)
    degradation: FloatArray  # (M,)
    levels: FloatArray  # (M, L)
    domains: FloatArray  # (M, Dn)
    called_different: FloatArray  # (pairs,)
    separated: FloatArray  # (len(BETTER),)
    predicted_power: FloatArray  # (len(BETTER),)
    estimate_w: float
    bootstrap_var_w: float


def equal_pairs() -> list[tuple[str, str]]:
    group = (REFERENCE, *TWINS)
    return [(a, b) for k, a in enumerate(group) for b in group[k + 1 :]]


def run_replication(
    population: Population, shape: Shape, truth: Truth, config: ScoringConfig, seed: int
) -> Replication:
    """Draw one benchmark (seeded), run the report's code on it and score its report.json."""
    rng = np.random.default_rng(seed)
    bench, cube = draw_benchmark(population, shape, rng)
    analysis = analyse_cubes(bench, {SERIES: cube}, config)
    document = build_report(analysis)
    series = document["series"][SERIES]
    models = series["models"]
    alpha = (1.0 - config.confidence) / 2.0
    weighted = np.array(
        [_covers(models[m]["weighted_ci95"], truth.weighted[k]) for k, m in enumerate(truth.models)]
    )
    degradation = np.array(
        [_covers(models[m]["degradation_ci95"], truth.degradation[k]) for k, m in enumerate(truth.models)]
    )
    levels = np.array(
        [
            [
                _covers(models[m]["levels_ci95"][str(lv)], truth.level_scores[k, li])
                for li, lv in enumerate(LEVELS)
            ]
            for k, m in enumerate(truth.models)
        ]
    )
    domains = np.array(
        [
            [
                _covers(models[m]["domains"][dom]["weighted_ci95"], truth.domain_weighted[k, di])
                for di, dom in enumerate(cube.domains)
            ]
            for k, m in enumerate(truth.models)
        ]
    )
    prob = series["prob_better"]
    called = np.array(
        [float(not alpha <= prob[a][b] <= 1.0 - alpha) for a, b in equal_pairs()], dtype=np.float64
    )
    separated = np.array([float(prob[name][REFERENCE] > 1.0 - alpha) for name in BETTER], dtype=np.float64)
    power = series.get("power") or {}
    detect = power.get("detection") or {}
    predicted = np.array([_predicted(detect, delta) for delta in BETTER.values()], dtype=np.float64)
    unc = analysis.series[SERIES].uncertainty
    ref = cube.model_index(REFERENCE)
    var_w = math.nan
    if unc is not None and unc.weighted_replicates is not None:
        var_w = float(np.nanvar(unc.weighted_replicates[:, ref], ddof=1))
    return Replication(
        weighted=weighted,
        degradation=degradation,
        levels=levels,
        domains=domains,
        called_different=called,
        separated=separated,
        predicted_power=predicted,
        estimate_w=float(analysis.series[SERIES].scores.weighted[ref]),
        bootstrap_var_w=var_w,
    )


def _predicted(detection: Mapping[str, Any], delta: float) -> float:
    for key, value in detection.items():
        if abs(float(key) - delta) < 1e-9 and value is not None:
            return float(value)
    return math.nan


@dataclass(frozen=True)
class Rate:
    """A Monte Carlo proportion and its standard error (over replications)."""

    value: float
    se: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "se": self.se}


def rate(per_replication: FloatArray) -> Rate:
    """Mean of per-replication values in [0, 1] (NaN ignored) and its standard error.

    Each replication's value may average several correlated trials (models, domains); treating
    the replication as the unit gives an honest error. With one 0/1 trial per replication the
    error is the binomial √(p(1−p)/R), but computed from the sample (ddof=1).
    """
    values = per_replication[~np.isnan(per_replication)]
    if values.size == 0:
        return Rate(math.nan, math.nan)
    se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan
    return Rate(float(values.mean()), se)


@dataclass(frozen=True)
class ShapeResult:
    """The calibration of one shape over ``replications`` seeded benchmarks."""

    shape: Shape
    replications: int
    coverage_weighted: Rate
    coverage_degradation: Rate
    coverage_levels: tuple[Rate, ...]
    coverage_domains: Rate
    false_separation: Rate
    power: tuple[Rate, ...]  # one per BETTER entry
    predicted_power: tuple[Rate, ...]  # the report's own figure, averaged
    variance_ratio: float  # mean bootstrap variance of W / variance of Ŵ across benchmarks

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape.name,
            "description": self.shape.description,
            "questions": self.shape.n_questions,
            "replications": self.replications,
            "coverage": {
                "weighted": self.coverage_weighted.to_dict(),
                "degradation": self.coverage_degradation.to_dict(),
                "levels": {str(lv): r.to_dict() for lv, r in zip(LEVELS, self.coverage_levels, strict=True)},
                "domain_weighted": self.coverage_domains.to_dict(),
            },
            "false_separation": self.false_separation.to_dict(),
            "power": {str(d): r.to_dict() for d, r in zip(BETTER.values(), self.power, strict=True)},
            "predicted_power": {
                str(d): r.to_dict() for d, r in zip(BETTER.values(), self.predicted_power, strict=True)
            },
            "variance_ratio": self.variance_ratio,
        }


def calibrate(
    shape: Shape,
    replications: int,
    seed: int,
    config: ScoringConfig | None = None,
    population: Population | None = None,
) -> ShapeResult:
    """Run ``replications`` benchmarks of ``shape`` (seeds ``seed``, ``seed + 1``, …) and summarise."""
    config = config or ScoringConfig()
    population = population or standard_population(n_domains=shape.cells.shape[0], config=config)
    truth = population_truth(population, shape, config)
    runs = [run_replication(population, shape, truth, config, seed + r) for r in range(replications)]

    def per_rep(values: list[FloatArray]) -> FloatArray:
        return np.array([np.nanmean(v) if np.any(~np.isnan(v)) else np.nan for v in values])

    estimates = np.array([r.estimate_w for r in runs])
    spread = float(np.var(estimates, ddof=1)) if len(runs) > 1 else math.nan
    boot = float(np.nanmean([r.bootstrap_var_w for r in runs]))
    return ShapeResult(
        shape=shape,
        replications=replications,
        coverage_weighted=rate(per_rep([r.weighted for r in runs])),
        coverage_degradation=rate(per_rep([r.degradation for r in runs])),
        coverage_levels=tuple(rate(per_rep([r.levels[:, li] for r in runs])) for li in range(len(LEVELS))),
        coverage_domains=rate(per_rep([r.domains for r in runs])),
        false_separation=rate(per_rep([r.called_different for r in runs])),
        power=tuple(rate(np.array([r.separated[k] for r in runs])) for k in range(len(BETTER))),
        predicted_power=tuple(
            rate(np.array([r.predicted_power[k] for r in runs])) for k in range(len(BETTER))
        ),
        variance_ratio=boot / spread if spread > 0 else math.nan,
    )


def binomial_band(level: float, replications: int, z: float = 3.0) -> tuple[float, float]:
    """The range a proportion with true value ``level`` stays in over ``replications`` 0/1 trials,
    ± ``z`` binomial standard errors (z = 3: left by chance about 3 times in 1,000)."""
    half = z * math.sqrt(level * (1.0 - level) / replications)
    return level - half, level + half
