"""Bootstrap confidence intervals and pairwise comparisons the study did not compute.

The study ranks models whose weighted scores differ by a few hundredths and says itself that it
cannot tell whether those differences are real. This module answers that with a stratified
cluster bootstrap over questions (see docs/method.md, "Uncertainty"):

* a question is the cluster: all its judges move together, for every model at once (so the
  comparison between two models is paired: both are scored on the same resampled questions);
* resampling is stratified by (domain, level) cell: each cell keeps its number of questions, so
  every replicate has the benchmark's design and formulas (2)–(6) mean the same thing in it;
* it is seeded (numpy ``Generator``) and therefore reproducible; series over the same questions
  get the same replicates, so differences between series are paired as well;
* it is vectorised: each cell's replicate draws are a (B, n) matrix of counts, and the cell's
  sums for every replicate and model are one matrix product.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from kubejury.errors import ConfigError
from kubejury.stats.cube import FloatArray, IntArray, ScoreCube
from kubejury.stats.scoring import (
    ScoringConfig,
    SeriesScores,
    cell_index,
    degradation_from_levels,
    level_scores_from_cells,
    level_weights_for,
    present_levels,
    score_series,
    weighted_mean_over_levels,
)


@dataclass(frozen=True)
class SeriesUncertainty:
    """Bootstrap results for one series; arrays indexed like :class:`~kubejury.stats.scoring.SeriesScores`.

    Intervals are percentile intervals ``[low, high]`` at ``confidence`` over the replicates in
    which the statistic is defined; NaN where it is defined in none. ``prob_better[i, j]`` is the share of
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
    # W of every model in every replicate, (B, M), and what identifies the replicates: series with
    # equal ``replicate_key`` were scored on the same resampled questions (paired).
    weighted_replicates: FloatArray | None = None
    replicate_key: tuple[int, int, int] | None = None

    def model_index(self, model: str) -> int:
        return self.models.index(model)


@dataclass(frozen=True)
class QuestionResample:
    """Replicate draws of the benchmark's questions, stratified by (domain, level) cell.

    ``members[k]`` are the question indices of the k-th cell and ``counts[k]`` a (B, n_k) matrix:
    how often each of them is drawn in each replicate (every row sums to n_k). One resample can
    serve every series of a run that shares the benchmark: the series are then paired too.
    """

    samples: int
    seed: int
    cells: IntArray  # (Q,) cell of each question, as given
    members: tuple[IntArray, ...]
    counts: tuple[FloatArray, ...]

    @property
    def key(self) -> tuple[int, int, int]:
        """(samples, seed, checksum of the design): equal keys mean identical replicates."""
        return (
            self.samples,
            self.seed,
            zlib.crc32(np.ascontiguousarray(self.cells, dtype=np.int64).tobytes()),
        )


def resample_questions(cells: IntArray, samples: int, seed: int) -> QuestionResample:
    """Draw ``samples`` replicates: within a cell of n questions, n uniform draws with replacement."""
    if samples < 1:
        raise ConfigError(f"bootstrap_samples must be at least 1, got {samples}")
    rng = np.random.default_rng(int(seed))
    members: list[IntArray] = []
    blocks: list[FloatArray] = []
    for cell in np.unique(cells).tolist():
        idx = np.flatnonzero(cells == cell).astype(np.int64)
        n = int(idx.shape[0])
        draws = rng.integers(0, n, size=(samples, n), dtype=np.int64)
        draws += np.arange(samples, dtype=np.int64)[:, None] * n
        block = np.bincount(draws.ravel(), minlength=samples * n).reshape(samples, n)
        members.append(idx)
        blocks.append(block.astype(np.float64))
    return QuestionResample(
        samples=samples, seed=int(seed), cells=cells.copy(), members=tuple(members), counts=tuple(blocks)
    )


def percentile_interval(values: FloatArray, confidence: float) -> FloatArray:
    """Percentile interval over axis 0 ignoring NaN replicates (numpy's "linear" definition).

    Vectorised (one sort) instead of ``np.nanquantile``, which loops in Python over every column
    that holds a NaN. The result has the remaining axes and a trailing axis of 2.
    """
    alpha = (1.0 - confidence) / 2.0
    ordered = np.sort(values, axis=0)  # NaN sorts last
    valid = (~np.isnan(values)).sum(axis=0)
    bounds = []
    for q in (alpha, 1.0 - alpha):
        pos = q * np.maximum(valid - 1, 0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(valid - 1, 0))
        frac = pos - lo
        low_v = np.take_along_axis(ordered, lo[None, ...], axis=0)[0]
        high_v = np.take_along_axis(ordered, hi[None, ...], axis=0)[0]
        bounds.append(np.where(valid > 0, low_v + (high_v - low_v) * frac, np.nan))
    return np.stack(bounds, axis=-1).astype(np.float64)


def bootstrap_series(
    cube: ScoreCube,
    config: ScoringConfig,
    scores: SeriesScores | None = None,
    resample: QuestionResample | None = None,
) -> SeriesUncertainty:
    """Bootstrap one series with ``config.bootstrap_samples`` replicates and ``config.seed``.

    Pass the same ``resample`` (from :func:`resample_questions` on ``cell_index(cube)``) to every
    series of a run to draw the replicates once; without it they are drawn from ``config.seed``,
    which gives the same replicates anyway for series over the same questions.
    """
    if not 0.0 < config.confidence < 1.0:
        raise ConfigError(f"confidence must be between 0 and 1, got {config.confidence}")
    if scores is None:
        scores = score_series(cube, config)
    n_models, n_domains, n_levels = cube.n_models, len(cube.domains), len(cube.levels)
    weights = level_weights_for(cube, config)

    cells = cell_index(cube)
    if resample is None:
        resample = resample_questions(cells, int(config.bootstrap_samples), config.seed)
    elif not np.array_equal(resample.cells, cells):
        raise ValueError("the resample was drawn for a different question design than this cube's")
    samples = resample.samples
    scored = ~np.isnan(scores.question_scores)
    values = np.where(scored, scores.question_scores, 0.0)  # (M, Q)
    present = scored.astype(np.float64)

    # Per replicate, model and cell: Σ count·S(q) and Σ count·[scored]; one product per cell.
    n_cells = n_domains * n_levels
    cell_means = np.full((samples, n_models, n_cells), np.nan, dtype=np.float64)
    for members, block in zip(resample.members, resample.counts, strict=True):
        cell = int(cells[members[0]])
        total = block @ values[:, members].T  # (B, M)
        member_present = present[:, members]
        if member_present.all():
            weight: FloatArray = np.full(total.shape, float(members.shape[0]))
        else:
            weight = block @ member_present.T
        with np.errstate(invalid="ignore", divide="ignore"):
            cell_means[:, :, cell] = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan)

    domain_level = cell_means.reshape(samples, n_models, n_domains, n_levels)
    level = level_scores_from_cells(domain_level)  # (B, M, L)
    weighted = weighted_mean_over_levels(level, weights)  # (B, M)
    degradation = degradation_from_levels(level, present_levels(cube))  # (B, M)
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
        gap_ci = percentile_interval(weighted[:, top][:, None] - weighted, config.confidence)
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
        seed=resample.seed,
        weighted_ci=percentile_interval(weighted, config.confidence),
        level_ci=percentile_interval(level, config.confidence),
        degradation_ci=percentile_interval(degradation, config.confidence),
        domain_weighted_ci=percentile_interval(domain_weighted, config.confidence),
        prob_better=prob_better.astype(np.float64),
        gap_to_top_ci=gap_ci,
        leading_group=leading,
        weighted_replicates=weighted,
        replicate_key=resample.key,
    )
