"""Bootstrap confidence intervals and pairwise comparisons the study did not compute.

The study ranks models whose weighted scores differ by a few hundredths and says itself that it
cannot tell whether those differences are real. This module answers that with a stratified
cluster bootstrap over questions, calibrated so that its 95% intervals cover 95% of the time at
the benchmark sizes people run (see docs/method.md, "Uncertainty", and benchmarks/calibration.py):

* a question is the cluster: all its judges move together, for every model at once (so the
  comparison between two models is paired: both are scored on the same resampled questions);
* resampling is stratified by (domain, level) cell: each cell keeps its number of questions, so
  every replicate has the benchmark's design and formulas (2)–(6) mean the same thing in it;
* each replicate cell mean's deviation from the observed one is rescaled by √(n/(n − 1)) (plain
  resampling of n out of n shrinks the variance by (n − 1)/n: half of it at n = 2), and a cell
  with a single question borrows deviations from the other cells of its level
  (:mod:`kubejury.stats.strata`);
* intervals are estimate ± t·SE with SE the replicates' standard deviation and t Student's
  quantile at the statistic's design degrees of freedom (few small cells know their own variance
  poorly; percentile intervals ignore that and are too narrow); ``prob_better`` is the matching
  t probability, so "called different" and "the gap's interval excludes 0" are the same event;
* it is seeded (numpy ``Generator``) and therefore reproducible; series over the same questions
  get the same replicates, so differences between series are paired as well;
* it is vectorised: each cell's replicate draws are a (B, n) matrix of counts, and the cell's
  sums for every replicate and model are one matrix product.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
from scipy import special

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
from kubejury.stats.strata import Design, DesignDegrees, degrees_of_freedom, design_of

# Scores live on the judges' 0–10 scale: an interval of a score (or of D, a difference of two)
# never needs to reach beyond it, and a t interval near 10 otherwise would.
SCORE_RANGE = (0.0, 10.0)
DIFFERENCE_RANGE = (-10.0, 10.0)

# The W differences the report's power sentence speaks of (points on the 0–10 scale) and the
# detection probability whose smallest difference it also gives.
POWER_DIFFERENCES = (0.2, 0.5)
POWER_TARGET = 0.8

# Differences and standard errors this small are rounding noise: two models with the same scores
# on every question are tied, not separated by their last bit.
TIE = 1e-9


@dataclass(frozen=True)
class Power:
    """How likely this benchmark's design is to separate two models whose W differs by δ.

    ``paired_se``: the median over model pairs of the bootstrap standard error of W_a − W_b;
    ``df``: the design degrees of freedom of W. ``detection[δ]`` is the probability that the
    interval of the difference excludes 0 on the right side when the true difference is δ,
    (estimate − δ)/SE being Student's t with ``df``; ``detectable`` is the smallest δ detected with
    probability ``target``.
    """

    paired_se: float
    df: float
    confidence: float
    detection: dict[float, float]
    target: float
    detectable: float

    def to_dict(self) -> dict[str, object]:
        return {
            "paired_se": self.paired_se,
            "df": None if math.isinf(self.df) else self.df,
            "confidence": self.confidence,
            "detection": {f"{delta:g}": p for delta, p in self.detection.items()},
            "target": self.target,
            "detectable": self.detectable,
        }


@dataclass(frozen=True)
class SeriesUncertainty:
    """Bootstrap results for one series; arrays indexed like :class:`~kubejury.stats.scoring.SeriesScores`.

    Intervals ``[low, high]`` at ``confidence`` are estimate ± t·SE: SE is the standard deviation
    of the (rescaled) replicates in which the statistic is defined, t Student's quantile at the
    statistic's design degrees of freedom (``df``); scores are clipped to 0–10. NaN where the
    estimate is undefined or fewer than two replicates define it. ``prob_better[i, j]`` is the t
    probability that model i's W exceeds model j's: T_df((W_i − W_j)/SE(W_i − W_j)) (0.5 on the
    diagonal and for exact ties). ``leading_group`` lists, best first, the top model and every model
    whose W the bootstrap cannot separate from it: the interval of ``W(top) − W(model)`` contains 0.
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
    # Score(m, d) and per-domain W in every replicate, (B, M, L) and (B, M, Dn): paired differences
    # at each level and per domain (kubejury.stats.equivalence) take them from here.
    level_replicates: FloatArray | None = None
    domain_weighted_replicates: FloatArray | None = None
    replicate_key: tuple[int, int, int] | None = None
    df: DesignDegrees | None = None
    power: Power | None = None

    def model_index(self, model: str) -> int:
        return self.models.index(model)


@dataclass(frozen=True)
class QuestionResample:
    """Replicate draws of the benchmark's questions, stratified by (domain, level) cell.

    ``members[k]`` are the question indices of the k-th cell and ``counts[k]`` a (B, n_k) matrix:
    how often each of them is drawn in each replicate (every row sums to n_k). ``donors[k]`` is
    None for a cell of two or more questions; for a single-question cell it is a (B,) vector of
    the donor question whose residual stands in for the cell's deviation in each replicate
    (:mod:`kubejury.stats.strata`), or an empty vector when there is nothing to borrow from. One
    resample can serve every series of a run that shares the benchmark: the series are then
    paired too.
    """

    samples: int
    seed: int
    cells: IntArray  # (Q,) cell of each question, as given
    members: tuple[IntArray, ...]
    counts: tuple[FloatArray, ...]
    design: Design | None = None
    donors: tuple[IntArray | None, ...] = ()

    @property
    def key(self) -> tuple[int, int, int]:
        """(samples, seed, checksum of the design): equal keys mean identical replicates."""
        return (
            self.samples,
            self.seed,
            zlib.crc32(np.ascontiguousarray(self.cells, dtype=np.int64).tobytes()),
        )


def resample_questions(cells: IntArray, samples: int, seed: int, n_levels: int = 1) -> QuestionResample:
    """Draw ``samples`` replicates: within a cell of n questions, n uniform draws with replacement;
    for a single-question cell, a donor from its level's pool in every replicate. ``n_levels``
    (cells are ``domain * n_levels + level``) says which cells share a level."""
    if samples < 1:
        raise ConfigError(f"bootstrap_samples must be at least 1, got {samples}")
    rng = np.random.default_rng(int(seed))
    design = design_of(cells, n_levels)
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
    pool_of = {cell: pool for pool in design.pools for cell in pool.cells}
    donors: list[IntArray | None] = []
    for idx in members:
        pool = pool_of.get(int(cells[idx[0]])) if idx.shape[0] == 1 else None
        if idx.shape[0] != 1:
            donors.append(None)
        elif pool is None or pool.donors.size == 0:
            donors.append(np.empty(0, dtype=np.int64))
        else:
            donors.append(pool.donors[rng.integers(0, pool.donors.shape[0], size=samples)])
    return QuestionResample(
        samples=samples,
        seed=int(seed),
        cells=cells.copy(),
        members=tuple(members),
        counts=tuple(blocks),
        design=design,
        donors=tuple(donors),
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


def replicate_se(values: FloatArray) -> FloatArray:
    """Standard deviation over axis 0 of the replicates that are defined (ddof 1); NaN below two."""
    valid = ~np.isnan(values)
    n = valid.sum(axis=0)
    filled = np.where(valid, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = filled.sum(axis=0) / np.maximum(n, 1)
        squares = np.where(valid, (values - mean) ** 2, 0.0).sum(axis=0)
        return np.where(n >= 2, np.sqrt(squares / np.maximum(n - 1, 1)), np.nan)


def t_quantile(df: FloatArray | float, confidence: float) -> FloatArray:
    """Student's two-sided quantile at ``confidence`` (normal for infinite df; NaN df → normal)."""
    q = 0.5 + confidence / 2.0
    df_arr = np.asarray(df, dtype=np.float64)
    finite = np.isfinite(df_arr) & (df_arr > 0)
    return np.asarray(
        np.where(finite, special.stdtrit(np.where(finite, df_arr, 1.0), q), special.ndtri(q)),
        dtype=np.float64,
    )


def t_cdf(x: FloatArray | float, df: float) -> FloatArray:
    """Student's t distribution function at ``df`` (normal for infinite or undefined df)."""
    if math.isfinite(df) and df > 0:
        return np.asarray(special.stdtr(df, x), dtype=np.float64)
    return np.asarray(special.ndtr(x), dtype=np.float64)


def t_interval(
    estimate: FloatArray,
    replicates: FloatArray,
    df: FloatArray | float,
    confidence: float,
    bounds: tuple[float, float] | None = None,
) -> FloatArray:
    """estimate ± t(df)·SE(replicates), clipped to ``bounds``; a trailing axis of 2.

    ``df`` broadcasts against ``estimate``. NaN where the estimate or the SE is undefined.
    """
    se = replicate_se(replicates)
    half = t_quantile(df, confidence) * se
    low, high = estimate - half, estimate + half
    if bounds is not None:
        low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    out = np.stack([low, high], axis=-1).astype(np.float64)
    out[np.isnan(estimate) | np.isnan(se)] = np.nan
    return out


def t_probability_positive(difference: FloatArray, se: FloatArray, df: float) -> FloatArray:
    """P(true difference > 0) read as T_df(difference / SE); with SE = 0 the sign decides (0.5 at 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = difference / se
    probability = t_cdf(ratio, df)
    sign = np.where(difference > TIE, 1.0, np.where(difference < -TIE, 0.0, 0.5))
    out = np.where(se > TIE * 1e-3, probability, sign)
    return np.asarray(np.where(np.isnan(difference) | np.isnan(se), np.nan, out), dtype=np.float64)


def detection_probability(delta: float, se: float, df: float, confidence: float) -> float:
    """The chance that a paired interval excludes 0 on the right side when the true difference
    is ``delta``: P(T > t* − δ/SE) with T Student's t at ``df``, t* the interval's quantile."""
    if not (math.isfinite(se) and se > 0):
        return math.nan
    critical = float(t_quantile(df, confidence))
    return float(1.0 - t_cdf(critical - delta / se, df))


def series_power(paired_se: float, df: float, confidence: float) -> Power | None:
    """The :class:`Power` of a design whose typical paired SE of W differences is ``paired_se``."""
    if not (math.isfinite(paired_se) and paired_se > 0):
        return None
    critical = float(t_quantile(df, confidence))
    # t* + t_target: the difference whose estimate clears t*·SE with probability ``target``.
    reach = float(t_quantile(df, 2.0 * POWER_TARGET - 1.0))
    return Power(
        paired_se=paired_se,
        df=df,
        confidence=confidence,
        detection={d: detection_probability(d, paired_se, df, confidence) for d in POWER_DIFFERENCES},
        target=POWER_TARGET,
        detectable=paired_se * (critical + reach),
    )


def _residuals(values: FloatArray, scored: FloatArray, design: Design, n_groups: int) -> FloatArray:
    """Each scored question's deviation from the mean of its residual group (cell, or level when
    the pool collapses cells), rescaled by √(g/(g − 1)); 0 where unscored. Shape (M, Q)."""
    residual = np.zeros_like(values)
    for pool in design.pools:
        if pool.donors.size == 0:
            continue
        groups = pool.centre
        sums = np.zeros((values.shape[0], n_groups))
        counts = np.zeros((values.shape[0], n_groups))
        np.add.at(sums.T, groups, values[:, pool.donors].T)
        np.add.at(counts.T, groups, scored[:, pool.donors].T)
        size = np.bincount(groups, minlength=n_groups).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / np.maximum(counts, 1.0)
            scale = np.sqrt(size / np.maximum(size - 1.0, 1.0))
        deviation = (values[:, pool.donors] - means[:, groups]) * scale[groups][None, :]
        residual[:, pool.donors] = np.where(scored[:, pool.donors] > 0, deviation, 0.0)
    return residual


def bootstrap_series(
    cube: ScoreCube,
    config: ScoringConfig,
    scores: SeriesScores | None = None,
    resample: QuestionResample | None = None,
) -> SeriesUncertainty:
    """Bootstrap one series with ``config.bootstrap_samples`` replicates and ``config.seed``.

    Pass the same ``resample`` (from :func:`resample_questions` on ``cell_index(cube)`` and
    ``len(cube.levels)``) to every series of a run to draw the replicates once; without it they
    are drawn from ``config.seed``, which gives the same replicates anyway for series over the
    same questions.
    """
    if not 0.0 < config.confidence < 1.0:
        raise ConfigError(f"confidence must be between 0 and 1, got {config.confidence}")
    if scores is None:
        scores = score_series(cube, config)
    n_models, n_domains, n_levels = cube.n_models, len(cube.domains), len(cube.levels)
    weights = level_weights_for(cube, config)

    cells = cell_index(cube)
    if resample is None:
        resample = resample_questions(cells, int(config.bootstrap_samples), config.seed, n_levels)
    elif not np.array_equal(resample.cells, cells):
        raise ValueError("the resample was drawn for a different question design than this cube's")
    design = resample.design
    if design is None or design.n_levels != n_levels:
        design = design_of(cells, n_levels)
        resample = resample_questions(cells, resample.samples, resample.seed, n_levels)
    samples = resample.samples
    scored = ~np.isnan(scores.question_scores)
    values = np.where(scored, scores.question_scores, 0.0)  # (M, Q)
    present = scored.astype(np.float64)
    n_cells = n_domains * n_levels
    observed = scores.domain_level_scores.reshape(n_models, n_cells)
    scale = design.scale
    residual = _residuals(values, present, design, design.n_cells + n_levels) if design.pools else None

    # Per replicate, model and cell: Σ count·S(q) and Σ count·[scored]; one product per cell. The
    # replicate mean's deviation from the observed cell mean is rescaled by √(n/(n − 1)).
    cell_means = np.full((samples, n_models, n_cells), np.nan, dtype=np.float64)
    for members, block, donors in zip(
        resample.members, resample.counts, resample.donors or (None,) * len(resample.members), strict=True
    ):
        cell = int(cells[members[0]])
        centre = observed[:, cell][None, :]
        if donors is not None:  # a single question: borrowed deviations (or none to borrow)
            borrowed = residual[:, donors].T if residual is not None and donors.size else 0.0
            cell_means[:, :, cell] = centre + borrowed
            continue
        total = block @ values[:, members].T  # (B, M)
        member_present = present[:, members]
        if member_present.all():
            weight: FloatArray = np.full(total.shape, float(members.shape[0]))
        else:
            weight = block @ member_present.T
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan)
        cell_means[:, :, cell] = centre + scale[cell] * (means - centre)

    domain_level = cell_means.reshape(samples, n_models, n_domains, n_levels)
    level = level_scores_from_cells(domain_level)  # (B, M, L)
    weighted = weighted_mean_over_levels(level, weights)  # (B, M)
    degradation = degradation_from_levels(level, present_levels(cube))  # (B, M)
    domain_weighted = weighted_mean_over_levels(domain_level, weights)  # (B, M, Dn)
    dof = degrees_of_freedom(design, n_domains, weights, present_levels(cube))

    # Paired comparisons: the same replicate for every model.
    difference = scores.weighted[:, None] - scores.weighted[None, :]
    pair_se = replicate_se(weighted[:, :, None] - weighted[:, None, :])
    prob_better = t_probability_positive(difference, pair_se, dof.weighted)
    np.fill_diagonal(prob_better, 0.5)

    gap_ci = np.full((n_models, 2), np.nan)
    leading: tuple[str, ...] = ()
    if n_models and not np.isnan(scores.weighted).all():
        top = cube.model_index(scores.ranking[0])
        gap_ci = t_interval(
            scores.weighted[top] - scores.weighted,
            weighted[:, top][:, None] - weighted,
            dof.weighted,
            config.confidence,
        )
        gap_ci[top] = 0.0
        leading = tuple(
            m
            for m in scores.ranking
            if (i := cube.model_index(m)) == top or (gap_ci[i, 0] <= 0.0 <= gap_ci[i, 1])
        )
    off_diagonal = pair_se[~np.eye(n_models, dtype=bool)]
    off_diagonal = off_diagonal[np.isfinite(off_diagonal)]
    power = (
        series_power(float(np.median(off_diagonal)), dof.weighted, config.confidence)
        if off_diagonal.size
        else None
    )

    return SeriesUncertainty(
        series=cube.series,
        models=cube.models,
        domains=cube.domains,
        levels=cube.levels,
        samples=samples,
        confidence=float(config.confidence),
        seed=resample.seed,
        weighted_ci=t_interval(scores.weighted, weighted, dof.weighted, config.confidence, SCORE_RANGE),
        level_ci=t_interval(scores.level_scores, level, dof.levels[None, :], config.confidence, SCORE_RANGE),
        degradation_ci=t_interval(
            scores.degradation, degradation, dof.degradation, config.confidence, DIFFERENCE_RANGE
        ),
        domain_weighted_ci=t_interval(
            scores.domain_weighted,
            domain_weighted,
            dof.domain_weighted[None, :],
            config.confidence,
            SCORE_RANGE,
        ),
        prob_better=prob_better,
        gap_to_top_ci=gap_ci,
        leading_group=leading,
        weighted_replicates=weighted,
        level_replicates=level,
        domain_weighted_replicates=domain_weighted,
        replicate_key=resample.key,
        df=dof,
        power=power,
    )
