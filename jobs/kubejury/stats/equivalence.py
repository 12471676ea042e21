"""Is model a as good as model b? Paired differences and the TOST equivalence verdict.

The question a quantization raises (does Q4_K_M lose anything that matters against Q6_K?) is
answered by an equivalence test, not a difference test: "not significantly different" only says
the benchmark was too small to see a difference. This module gives, for a named pair of models of
one series, the paired difference a − b in W, in Score at each level and per domain, each with its
interval, and a verdict at a margin Δ in W points (docs/method.md, "Equivalence"):

* the intervals are those of :mod:`kubejury.stats.uncertainty` applied to the difference: the same
  stratified cluster bootstrap replicates (both models scored on the same resampled questions, so
  the pairing is kept), estimate ± t_ν·SE with ν the statistic's design degrees of freedom;
* **equivalent** when the 90% interval of the W difference lies inside (−Δ, Δ): both one-sided
  tests of TOST (Schuirmann 1987) reject at α = 0.05; **different** when the 95% interval excludes
  0 (the project's two-sided test, the same event as ``prob_better`` leaving [2.5%, 97.5%]);
  **undecided** when neither holds. When both hold (a real difference smaller than the margin) the
  verdict is *equivalent* and ``different`` is also true;
* the questions a decision at Δ would need, from the observed SE: SE scales as 1/√n for the same
  design, so n = Q·((z₁₋α + z₁₋β/₂)·SE/Δ)² questions give "equivalent" with probability 1 − β
  when the true difference is 0, and n = Q·((z₁₋α/₂ + z₁₋β)·SE/Δ)² give "different" with
  probability 1 − β when it is Δ (β = 0.2).

Pure: arrays in, frozen results out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import special

from kubejury.stats.cube import FloatArray
from kubejury.stats.scoring import SeriesScores
from kubejury.stats.uncertainty import SeriesUncertainty, replicate_se, t_quantile

#: Level of each one-sided test of TOST, and of the two-sided difference test (1 − α = 95%).
ALPHA = 0.05
#: Probability of reaching the decision that the questions-needed figures plan for.
DECISION_POWER = 0.8
#: The margin proposed for pairs of one checkpoint in two precisions, in W points (0–10 scale).
DEFAULT_MARGIN = 0.25

Verdict = Literal["equivalent", "different", "undecided"]
Origin = Literal["spec", "automatic"]


@dataclass(frozen=True)
class ComparisonRequest:
    """A pair to compare: the difference is ``a − b``; ``margin`` in W points; ``origin`` says
    whether the spec named it or it was proposed (same checkpoint, two precisions)."""

    a: str
    b: str
    margin: float = DEFAULT_MARGIN
    origin: Origin = "spec"


@dataclass(frozen=True)
class PairedDifference:
    """One paired difference a − b with its SE (over the bootstrap replicates), the design degrees
    of freedom of the statistic and its 90% and 95% intervals (NaN where undefined)."""

    estimate: float
    se: float
    df: float
    ci90: tuple[float, float]
    ci95: tuple[float, float]


@dataclass(frozen=True)
class QuestionsNeeded:
    """Questions (in this benchmark's design) for a decision at the margin with probability
    ``power``: ``equivalent`` if the true difference were 0, ``different`` if it were the margin."""

    equivalent: int | None
    different: int | None
    power: float = DECISION_POWER


@dataclass(frozen=True)
class ComparisonResult:
    """The comparison of a pair in one series; ``reason`` says why nothing was computed."""

    request: ComparisonRequest
    series: str
    n_questions: int
    weighted: PairedDifference | None = None
    verdict: Verdict | None = None
    equivalent: bool = False
    different: bool = False
    levels: dict[int, PairedDifference] = field(default_factory=dict)
    domains: dict[str, PairedDifference] = field(default_factory=dict)
    needed: QuestionsNeeded | None = None
    reason: str | None = None


def _nan_pair() -> tuple[float, float]:
    return (math.nan, math.nan)


def paired_difference(estimate: float, replicates: FloatArray, df: float) -> PairedDifference:
    """estimate ± t_ν·SE at 90% and 95%, SE the standard deviation of the replicate differences."""
    se = float(replicate_se(np.asarray(replicates, dtype=np.float64)))
    if not (math.isfinite(estimate) and math.isfinite(se)):
        return PairedDifference(estimate, se, df, _nan_pair(), _nan_pair())

    def interval(alpha: float) -> tuple[float, float]:
        half = float(t_quantile(df, 1.0 - alpha)) * se
        return (estimate - half, estimate + half)

    return PairedDifference(estimate, se, df, interval(2.0 * ALPHA), interval(ALPHA))


def is_equivalent(difference: PairedDifference, margin: float) -> bool:
    """TOST at α: the 90% interval lies strictly inside (−margin, margin)."""
    low, high = difference.ci90
    return math.isfinite(low) and math.isfinite(high) and -margin < low and high < margin


def is_different(difference: PairedDifference) -> bool:
    """The two-sided test at α: the 95% interval excludes 0."""
    low, high = difference.ci95
    return math.isfinite(low) and math.isfinite(high) and (low > 0.0 or high < 0.0)


def verdict_of(difference: PairedDifference, margin: float) -> Verdict:
    """equivalent (TOST) before different (two-sided test), else undecided."""
    if is_equivalent(difference, margin):
        return "equivalent"
    if is_different(difference):
        return "different"
    return "undecided"


def questions_needed(
    se: float, n_questions: int, margin: float, power: float = DECISION_POWER
) -> QuestionsNeeded:
    """The questions of this design a decision at ``margin`` needs (module docstring): SE·√(Q/n)
    is the SE at n questions; normal quantiles (large-sample approximation)."""
    if not (math.isfinite(se) and se > 0 and n_questions > 0 and margin > 0):
        return QuestionsNeeded(None, None, power)
    beta = 1.0 - power
    z = special.ndtri
    equivalent = n_questions * ((z(1.0 - ALPHA) + z(1.0 - beta / 2.0)) * se / margin) ** 2
    different = n_questions * ((z(1.0 - ALPHA / 2.0) + z(1.0 - beta)) * se / margin) ** 2
    return QuestionsNeeded(math.ceil(float(equivalent)), math.ceil(float(different)), power)


def _undefined(request: ComparisonRequest, series: str, n_questions: int, reason: str) -> ComparisonResult:
    return ComparisonResult(request=request, series=series, n_questions=n_questions, reason=reason)


def compare_pair(
    request: ComparisonRequest,
    scores: SeriesScores,
    uncertainty: SeriesUncertainty | None,
    n_questions: int,
) -> ComparisonResult:
    """The comparison of ``request`` in one series (``n_questions``: questions judged in it)."""
    series = scores.series
    missing = [m for m in (request.a, request.b) if m not in scores.models]
    if missing:
        return _undefined(request, series, n_questions, f"not evaluated in this series: {', '.join(missing)}")
    if uncertainty is None or uncertainty.weighted_replicates is None or uncertainty.df is None:
        return _undefined(request, series, n_questions, "no bootstrap (bootstrap samples 0): no interval")
    i, j = scores.models.index(request.a), scores.models.index(request.b)
    u, v = uncertainty.models.index(request.a), uncertainty.models.index(request.b)
    dof = uncertainty.df
    reps = uncertainty.weighted_replicates
    weighted = paired_difference(
        float(scores.weighted[i] - scores.weighted[j]), reps[:, u] - reps[:, v], dof.weighted
    )
    levels: dict[int, PairedDifference] = {}
    if uncertainty.level_replicates is not None:
        lr = uncertainty.level_replicates
        for k, level in enumerate(scores.levels):
            estimate = float(scores.level_scores[i, k] - scores.level_scores[j, k])
            levels[level] = paired_difference(estimate, lr[:, u, k] - lr[:, v, k], float(dof.levels[k]))
    domains: dict[str, PairedDifference] = {}
    if uncertainty.domain_weighted_replicates is not None:
        dr = uncertainty.domain_weighted_replicates
        for k, domain in enumerate(scores.domains):
            estimate = float(scores.domain_weighted[i, k] - scores.domain_weighted[j, k])
            domains[domain] = paired_difference(
                estimate, dr[:, u, k] - dr[:, v, k], float(dof.domain_weighted[k])
            )
    defined = math.isfinite(weighted.ci90[0])
    return ComparisonResult(
        request=request,
        series=series,
        n_questions=n_questions,
        weighted=weighted,
        verdict=verdict_of(weighted, request.margin) if defined else None,
        equivalent=is_equivalent(weighted, request.margin),
        different=is_different(weighted),
        levels=levels,
        domains=domains,
        needed=questions_needed(weighted.se, n_questions, request.margin),
        reason=None if defined else "W of a model is undefined or has no interval",
    )


def compare_pairs(
    requests: Sequence[ComparisonRequest],
    scores: SeriesScores,
    uncertainty: SeriesUncertainty | None,
    n_questions: int,
) -> tuple[ComparisonResult, ...]:
    """:func:`compare_pair` for every request, in order."""
    return tuple(compare_pair(r, scores, uncertainty, n_questions) for r in requests)
