"""Bootstrap confidence intervals and pairwise comparisons the study did not compute.

The study ranks models whose weighted scores differ by a few hundredths and says itself that it
cannot tell whether those differences are real. This module answers that with a stratified
cluster bootstrap over questions (see docs/method.md, "Uncertainty"):

* a question is the cluster: all its judges move together, for every model at once (so the
  comparison between two models is paired: both are scored on the same resampled questions);
* resampling is stratified by (domain, level) cell: each cell keeps its number of questions, so
  every replicate has the benchmark's design and formulas (2)–(6) mean the same thing in it;
* it is seeded (numpy ``Generator``) and therefore reproducible;
* it is vectorised: replicate question counts form a (B, Q) matrix and every per-cell sum for
  every replicate and model is one matrix product per cell.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np

from kubejury.cube import FloatArray, IntArray, ScoreCube
from kubejury.errors import ConfigError
from kubejury.scoring import (
    ScoringConfig,
    SeriesScores,
    cell_index,
    level_scores_from_cells,
    question_means,
    score_series,
    weighted_mean_over_levels,
)


@dataclass(frozen=True)
class SeriesUncertainty:
    """Bootstrap results for one series; arrays indexed like :class:`~kubejury.scoring.SeriesScores`.

    Intervals are percentile intervals ``[low, high]`` at ``confidence``; NaN where the statistic
    is undefined in too many replicates (or in the data). ``prob_better[i, j]`` is the share of
    replicates in which model i's W exceeds model j's (ties count one half; the diagonal is 0.5).
    ``leading_group`` lists, best first, the top model and every model whose W the bootstrap
    cannot separate from it: the interval of ``W(top) − W(model)`` contains 0.
    """

    series: str
    models: tuple[str, ...]
    domains: tuple[str, ...]
    levels: tuple[int, ...]
    samples: int
    confidence: float
    seed: int
    weighted_ci: FloatArray  # (M, 2)
    level_ci: FloatArray  # (M, L, 2)
    degradation_ci: FloatArray  # (M, 2)
    domain_weighted_ci: FloatArray  # (M, Dn, 2)
    prob_better: FloatArray  # (M, M)
    gap_to_top_ci: FloatArray  # (M, 2): interval of W(top) − W(m); [0, 0] for the top model
    leading_group: tuple[str, ...]

    def model_index(self, model: str) -> int:
        return self.models.index(model)


def series_seed(seed: int, series: str) -> np.random.Generator:
    """The generator for one series: the configured seed mixed with a stable hash of the name."""
    return np.random.default_rng([int(seed), zlib.crc32(series.encode("utf-8"))])


def resample_counts(cells: IntArray, samples: int, rng: np.random.Generator) -> FloatArray:
    """(B, Q) matrix: how often each question is drawn in each replicate, stratified by cell.

    Within a cell of n questions each replicate draws n questions uniformly with replacement.
    """
    n_questions = cells.shape[0]
    counts = np.zeros((samples, n_questions), dtype=np.float64)
    for cell in np.unique(cells).tolist():
        members = np.flatnonzero(cells == cell)
        n = members.shape[0]
        draws = rng.integers(0, n, size=(samples, n))
        flat = draws + (np.arange(samples)[:, None] * n)
        per_cell = np.bincount(flat.ravel(), minlength=samples * n).reshape(samples, n)
        counts[:, members] = per_cell
    return counts


def _percentile_interval(values: FloatArray, confidence: float, axis: int = 0) -> FloatArray:
    """Percentile interval along ``axis`` ignoring NaN replicates; result has a trailing axis of 2."""
    alpha = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN, as intended
        low = np.nanquantile(values, alpha, axis=axis)
        high = np.nanquantile(values, 1.0 - alpha, axis=axis)
    return np.stack([low, high], axis=-1).astype(np.float64)


def bootstrap_series(
    cube: ScoreCube, config: ScoringConfig, scores: SeriesScores | None = None
) -> SeriesUncertainty:
    """Bootstrap one series with ``config.bootstrap_samples`` replicates and ``config.seed``."""
    samples = int(config.bootstrap_samples)
    if samples < 1:
        raise ConfigError(f"bootstrap_samples must be at least 1, got {samples}")
    if not 0.0 < config.confidence < 1.0:
        raise ConfigError(f"confidence must be between 0 and 1, got {config.confidence}")
    if scores is None:
        scores = score_series(cube, config)
    n_models, n_domains, n_levels = cube.n_models, len(cube.domains), len(cube.levels)
    weights = np.array([float(config.level_weights.get(lvl, 0.0)) for lvl in cube.levels], dtype=np.float64)

    means, n_valid = question_means(cube)
    scored = n_valid > 0
    values = np.where(scored, means, 0.0)  # (M, Q)
    present = scored.astype(np.float64)
    cells = cell_index(cube)
    rng = series_seed(config.seed, cube.series)
    counts = resample_counts(cells, samples, rng)  # (B, Q)

    # Per replicate, model and cell: Σ count·S(q) and Σ count·[scored]; one product per cell.
    n_cells = n_domains * n_levels
    cell_means = np.full((samples, n_models, n_cells), np.nan, dtype=np.float64)
    for cell in np.unique(cells).tolist():
        members = np.flatnonzero(cells == cell)
        block = counts[:, members]
        total = block @ values[:, members].T  # (B, M)
        if np.all(present[:, members]):
            weight = np.broadcast_to(block.sum(axis=1, dtype=np.float64)[:, None], total.shape)
        else:
            weight = block @ present[:, members].T
        with np.errstate(invalid="ignore", divide="ignore"):
            cell_means[:, :, cell] = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan)
    del counts

    domain_level = cell_means.reshape(samples, n_models, n_domains, n_levels)
    level = level_scores_from_cells(domain_level)  # (B, M, L)
    weighted = weighted_mean_over_levels(level, weights)  # (B, M)
    degradation = level[:, :, 0] - level[:, :, -1] if n_levels else np.full((samples, n_models), np.nan)
    domain_weighted = weighted_mean_over_levels(domain_level, weights)  # (B, M, Dn)

    # Paired comparisons: the same replicate for every model.
    a = weighted[:, :, None]
    b = weighted[:, None, :]
    both = ~np.isnan(a) & ~np.isnan(b)
    wins = np.where(both, (a > b) + 0.5 * (a == b), 0.0).sum(axis=0)
    n_both = both.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        prob_better = np.where(n_both > 0, wins / np.maximum(n_both, 1), np.nan)

    gap_ci = np.full((n_models, 2), np.nan)
    leading: tuple[str, ...] = ()
    if n_models and not np.isnan(scores.weighted).all():
        top = cube.model_index(scores.ranking[0])
        gap_ci = _percentile_interval(weighted[:, top][:, None] - weighted, config.confidence)
        gap_ci[top] = 0.0
        leading = tuple(
            m
            for m in scores.ranking
            if (i := cube.model_index(m)) == top or (gap_ci[i, 0] <= 0.0 <= gap_ci[i, 1])
        )

    return SeriesUncertainty(
        series=cube.series,
        models=cube.models,
        domains=cube.domains,
        levels=cube.levels,
        samples=samples,
        confidence=float(config.confidence),
        seed=int(config.seed),
        weighted_ci=_percentile_interval(weighted, config.confidence),
        level_ci=_percentile_interval(level, config.confidence),
        degradation_ci=_percentile_interval(degradation, config.confidence),
        domain_weighted_ci=_percentile_interval(domain_weighted, config.confidence),
        prob_better=prob_better.astype(np.float64),
        gap_to_top_ci=gap_ci,
        leading_group=leading,
    )
