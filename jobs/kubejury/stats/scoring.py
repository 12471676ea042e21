"""The study's scoring method, exactly, on a :class:`~kubejury.stats.cube.ScoreCube`.

Formulas (1)–(5) of the study plus its domain leaders, ranking and tiers, vectorised over the
cube so that millions of judgments cost a few numpy reductions. Every choice the study left open
(unscored questions, domains without questions at a level, the weight normalisation, ties) is
settled here once and documented in docs/method.md; an independent implementation of that
document must give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kubejury.errors import ConfigError
from kubejury.stats.cube import BoolArray, FloatArray, IntArray, ScoreCube

DEFAULT_LEVEL_WEIGHTS: dict[int, float] = {1: 0.6, 2: 0.8, 3: 1.0}

# Two values within this absolute distance of each other are a tie (for ranking and domain
# leaders), so that the order does not depend on floating-point summation order.
TIE_TOLERANCE = 1e-9

# The tier of a model that no rule matches (only possible when the rules have no catch-all).
NO_TIER = "-"


@dataclass(frozen=True)
class TierRule:
    """A model earns ``tier`` when every given bound holds (``None`` = no bound).

    Bounds are inclusive: ``W >= min_weighted``, ``D <= max_degradation``, ``σ <= max_sigma``.
    A bound on a value that is undefined (NaN, e.g. σ with a single judge) does not hold.
    """

    tier: str
    min_weighted: float | None = None
    max_degradation: float | None = None
    max_sigma: float | None = None

    def matches(self, weighted: float, degradation: float, sigma: float) -> bool:
        if self.min_weighted is not None and not weighted >= self.min_weighted:
            return False
        if self.max_degradation is not None and not degradation <= self.max_degradation:
            return False
        return self.max_sigma is None or sigma <= self.max_sigma


DEFAULT_TIERS: tuple[TierRule, ...] = (
    TierRule("S", min_weighted=9.0, max_degradation=0.4, max_sigma=0.5),
    TierRule("A", min_weighted=8.5, max_degradation=0.7, max_sigma=0.7),
    TierRule("B", min_weighted=7.5, max_degradation=1.2),
    TierRule("C"),
)


@dataclass(frozen=True)
class ScoringConfig:
    level_weights: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_LEVEL_WEIGHTS))
    tiers: tuple[TierRule, ...] = DEFAULT_TIERS
    bootstrap_samples: int = 2000
    confidence: float = 0.95
    seed: int = 0
    primary_series: str | None = None  # None: the first series seen (spec order)


@dataclass(frozen=True)
class SeriesScores:
    """Everything formulas (1)–(5) and the study's tables give for one series.

    Arrays are indexed like the cube: models (M), ``cube.domains`` (Dn), ``cube.levels`` (L).
    NaN marks "no scored question there".
    """

    series: str
    models: tuple[str, ...]
    domains: tuple[str, ...]
    levels: tuple[int, ...]
    question_scores: FloatArray  # (M, Q) S(q), NaN if unscored or absent
    domain_level_scores: FloatArray  # (M, Dn, L) S_i(m, d)
    level_scores: FloatArray  # (M, L) Score(m, d)
    weighted: FloatArray  # (M,) W(m)
    domain_weighted: FloatArray  # (M, Dn)
    degradation: FloatArray  # (M,) D(m) = Score(lowest) - Score(highest)
    judge_sigma: FloatArray  # (M,) σ(m)
    n_scored: IntArray  # (M,)
    n_unscored: IntArray  # (M,)
    ranking: tuple[str, ...]  # by W descending (ties: name)
    domain_leaders: dict[str, str]
    tiers: dict[str, str]

    def model_index(self, model: str) -> int:
        return self.models.index(model)


def level_weight_vector(levels: Sequence[int], weights: Mapping[int, float], series: str = "") -> FloatArray:
    """The weight of each level, in ``levels`` order; a level without a weight is a ConfigError."""
    missing = [lvl for lvl in levels if lvl not in weights]
    if missing:
        where = f" in series '{series}'" if series else ""
        raise ConfigError(
            f"level(s) {', '.join(map(str, missing))} occur in the data{where} but have no weight; "
            f"configured weights: {dict(sorted(weights.items()))}. Add a weight for every level."
        )
    vector = np.array([float(weights[lvl]) for lvl in levels], dtype=np.float64)
    if np.any(~np.isfinite(vector)) or np.any(vector < 0) or (len(vector) and vector.sum() <= 0):
        raise ConfigError(f"level weights must be non-negative with a positive sum, got {dict(weights)}")
    return vector


def question_means(cube: ScoreCube) -> tuple[FloatArray, IntArray]:
    """S(q) per (model, question) — formula (1) — and the number of non-null judge scores.

    Loops over the (few) judges so that the temporaries are (M, Q), not (M, Q, J).
    """
    shape = cube.scores.shape[:2]
    total = np.zeros(shape)
    n_valid = np.zeros(shape, dtype=np.int64)
    for j in range(cube.n_judges):
        column = cube.scores[:, :, j]
        valid = ~np.isnan(column)
        n_valid += valid
        total += np.where(valid, column, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(n_valid > 0, total / np.maximum(n_valid, 1), np.nan)
    return means, n_valid


def judge_sigma(cube: ScoreCube, means: FloatArray, n_valid: IntArray) -> FloatArray:
    """σ(m) — formula (4): mean over questions with ≥2 judge scores of their population std."""
    squares = np.zeros(cube.scores.shape[:2])
    for j in range(cube.n_judges):
        dev = cube.scores[:, :, j] - means
        squares += np.where(np.isnan(dev), 0.0, dev * dev)
    eligible = n_valid >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(squares / np.maximum(n_valid, 1))
    count = eligible.sum(axis=1)
    total = np.where(eligible, std, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def cell_index(cube: ScoreCube) -> IntArray:
    """Each question's (domain, level) cell as one integer ``domain * L + level``."""
    return (cube.question_domain * len(cube.levels) + cube.question_level).astype(np.int64)


def cell_sums(
    values: FloatArray, weights: FloatArray, cells: IntArray, n_cells: int
) -> tuple[FloatArray, FloatArray]:
    """Per-model sums of ``values`` and of ``weights`` over each cell, shapes (M, n_cells).

    ``values`` must already be 0 where ``weights`` is 0. A one-hot (Q, n_cells) matrix turns the
    grouping into one matrix product, which numpy hands to BLAS.
    """
    onehot = np.zeros((cells.shape[0], n_cells), dtype=np.float64)
    onehot[np.arange(cells.shape[0]), cells] = 1.0
    return values @ onehot, weights @ onehot


def weighted_mean_over_levels(values: FloatArray, level_weights: FloatArray) -> FloatArray:
    """Σ_d w_d·x_d / Σ_d w_d over the levels where x is defined (last axis = levels)."""
    defined = ~np.isnan(values)
    w = np.where(defined, level_weights, 0.0)
    num = np.where(defined, values, 0.0) * w
    den = w.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num.sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)


def level_scores_from_cells(cell_means: FloatArray) -> FloatArray:
    """Score(m, d) — formula (2): mean over domains with a defined S_i(m, d); (..., Dn, L) → (..., L)."""
    defined = ~np.isnan(cell_means)
    count = defined.sum(axis=-2)
    total = np.where(defined, cell_means, 0.0).sum(axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _tied_with_best(candidates: Sequence[int], values: FloatArray) -> list[int]:
    """The candidates within TIE_TOLERANCE of the best (largest) value among them.

    An absolute tolerance measured from the best, not rounding: two means that are equal in exact
    arithmetic can differ in their last bit and straddle a rounding edge.
    """
    best = max(float(values[i]) for i in candidates)
    return [i for i in candidates if best - float(values[i]) <= TIE_TOLERANCE]


def rank_models(models: Sequence[str], weighted: FloatArray) -> tuple[str, ...]:
    """Models by W descending; ties (within TIE_TOLERANCE of the best remaining) by name; undefined W last."""
    remaining = [i for i in range(len(models)) if not math.isnan(float(weighted[i]))]
    order: list[int] = []
    while remaining:
        tied = _tied_with_best(remaining, weighted)
        order.extend(sorted(tied, key=lambda i: models[i]))
        tied_set = set(tied)
        remaining = [i for i in remaining if i not in tied_set]
    undefined = [i for i in range(len(models)) if math.isnan(float(weighted[i]))]
    order.extend(sorted(undefined, key=lambda i: models[i]))
    return tuple(models[i] for i in order)


def domain_leaders(
    models: Sequence[str], domains: Sequence[str], domain_weighted: FloatArray, weighted: FloatArray
) -> dict[str, str]:
    """The model with the highest per-domain weighted score; ties: higher overall W, then name.

    A domain in which no model has a defined score has no leader (no key).
    """
    leaders: dict[str, str] = {}
    for d, domain in enumerate(domains):
        candidates = [i for i in range(len(models)) if not math.isnan(float(domain_weighted[i, d]))]
        if not candidates:
            continue
        tied = _tied_with_best(candidates, domain_weighted[:, d])
        with_w = [i for i in tied if not math.isnan(float(weighted[i]))]
        if with_w:
            tied = _tied_with_best(with_w, weighted)
        leaders[domain] = models[min(tied, key=lambda i: models[i])]
    return leaders


def assign_tiers(
    models: Sequence[str],
    weighted: FloatArray,
    degradation: FloatArray,
    sigma: FloatArray,
    rules: Sequence[TierRule],
) -> dict[str, str]:
    """Each model's tier: the first rule (in order) whose bounds all hold; NO_TIER when none does."""
    tiers: dict[str, str] = {}
    for i, model in enumerate(models):
        tiers[model] = next(
            (r.tier for r in rules if r.matches(float(weighted[i]), float(degradation[i]), float(sigma[i]))),
            NO_TIER,
        )
    return tiers


def present_levels(cube: ScoreCube) -> IntArray:
    """Indices (into ``cube.levels``, ascending) of the levels with at least one judgment record.

    These are the levels "present in the data": they need a weight, and D compares the lowest and
    the highest of them. A level of the benchmark that was never judged (e.g. filtered out of the
    run) is not present.
    """
    asked = cube.has_record.any(axis=0)
    return np.unique(cube.question_level[asked]).astype(np.int64)


def degradation_from_levels(level_scores: FloatArray, present: IntArray) -> FloatArray:
    """D = Score(lowest present level) − Score(highest present level); last axis = levels."""
    if present.size == 0:
        return np.full(level_scores.shape[:-1], np.nan)
    return np.asarray(level_scores[..., present[0]] - level_scores[..., present[-1]], dtype=np.float64)


def level_weights_for(cube: ScoreCube, config: ScoringConfig) -> FloatArray:
    """The weight of each of ``cube.levels`` (0 for levels not present); ConfigError when a present
    level has no configured weight."""
    present = present_levels(cube)
    level_weight_vector([cube.levels[i] for i in present.tolist()], config.level_weights, cube.series)
    return np.array([float(config.level_weights.get(lvl, 0.0)) for lvl in cube.levels], dtype=np.float64)


def score_series(cube: ScoreCube, config: ScoringConfig) -> SeriesScores:
    """Apply the study's method (docs/method.md, steps 1–8) to one series."""
    n_models, n_levels, n_domains = cube.n_models, len(cube.levels), len(cube.domains)
    weights = level_weights_for(cube, config)

    # (1) S(q); unscored = has records but no usable score.
    means, n_valid = question_means(cube)
    scored: BoolArray = n_valid > 0
    n_scored = scored.sum(axis=1).astype(np.int64)
    n_unscored = (cube.has_record & ~scored).sum(axis=1).astype(np.int64)

    # (2) S_i(m, d) over scored questions of each (domain, level) cell.
    sums, counts = cell_sums(
        np.where(scored, means, 0.0), scored.astype(np.float64), cell_index(cube), n_domains * n_levels
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        cell_means = np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)
    domain_level = cell_means.reshape(n_models, n_domains, n_levels)

    # (3) Score(m, d); (4) D; (5) σ; (6) W; (7) per-domain W.
    level = level_scores_from_cells(domain_level)
    degradation = degradation_from_levels(level, present_levels(cube))
    sigma = judge_sigma(cube, means, n_valid)
    weighted = weighted_mean_over_levels(level, weights)
    domain_weighted = weighted_mean_over_levels(domain_level, weights)

    # (8) ranking, leaders, tiers.
    return SeriesScores(
        series=cube.series,
        models=cube.models,
        domains=cube.domains,
        levels=cube.levels,
        question_scores=means,
        domain_level_scores=domain_level,
        level_scores=level,
        weighted=weighted,
        domain_weighted=domain_weighted,
        degradation=degradation,
        judge_sigma=sigma,
        n_scored=n_scored,
        n_unscored=n_unscored,
        ranking=rank_models(cube.models, weighted),
        domain_leaders=domain_leaders(cube.models, cube.domains, domain_weighted, weighted),
        tiers=assign_tiers(cube.models, weighted, degradation, sigma, config.tiers),
    )
