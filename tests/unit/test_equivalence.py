"""Paired differences and the TOST verdict: equivalent, different or undecided, and what it needs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from factories import paired_cube
from kubejury.stats.cube import ScoreCube
from kubejury.stats.equivalence import (
    ALPHA,
    ComparisonRequest,
    ComparisonResult,
    PairedDifference,
    compare_pair,
    is_different,
    is_equivalent,
    paired_difference,
    questions_needed,
    verdict_of,
)
from kubejury.stats.scoring import ScoringConfig, score_series
from kubejury.stats.uncertainty import bootstrap_series, t_quantile

CONFIG = ScoringConfig(bootstrap_samples=600, seed=5)


def compared(cube: ScoreCube, request: ComparisonRequest, config: ScoringConfig = CONFIG) -> ComparisonResult:
    scores = score_series(cube, config)
    uncertainty = bootstrap_series(cube, config, scores) if config.bootstrap_samples else None
    return compare_pair(request, scores, uncertainty, cube.n_questions)


def difference(estimate: float, se: float, df: float = 40.0) -> PairedDifference:
    """A difference whose two replicates have standard deviation ``se``."""
    half = se / math.sqrt(2.0)
    return paired_difference(estimate, np.array([estimate - half, estimate + half]), df)


def test_intervals_are_estimate_plus_minus_t_se_at_90_and_95() -> None:
    d = difference(0.1, 0.05)
    assert d.se == pytest.approx(0.05)
    assert d.ci90[1] - d.estimate == pytest.approx(float(t_quantile(40.0, 0.90)) * 0.05)
    assert d.ci95[1] - d.estimate == pytest.approx(float(t_quantile(40.0, 0.95)) * 0.05)


@pytest.mark.parametrize(
    ("estimate", "se", "verdict", "different"),
    [
        (0.02, 0.05, "equivalent", False),  # 90% interval [-0.06, 0.10] inside ±0.25, 95% contains 0
        (0.15, 0.04, "equivalent", True),  # both: a real difference (95% [0.07, 0.23]) inside the margin
        (0.50, 0.10, "different", True),  # the 95% interval excludes 0, the 90% one leaves the band
        (-0.30, 0.05, "different", True),  # the same below zero
        (0.10, 0.10, "undecided", False),  # the 95% interval contains 0, the 90% one crosses 0.25
    ],
)
def test_the_verdict_rule(estimate: float, se: float, verdict: str, different: bool) -> None:
    d = difference(estimate, se)
    assert verdict_of(d, 0.25) == verdict
    assert is_different(d) is different
    assert is_equivalent(d, 0.25) is (verdict == "equivalent")


def test_tost_is_the_90_percent_interval_not_the_95() -> None:
    # Upper 90% bound inside the margin, upper 95% bound outside: TOST at α = 0.05 says equivalent.
    se = 0.1
    estimate = 0.25 - float(t_quantile(40.0, 0.90)) * se - 0.005
    d = difference(estimate, se)
    assert d.ci90[1] < 0.25 < d.ci95[1]
    assert verdict_of(d, 0.25) == "equivalent"


def test_an_undefined_interval_decides_nothing() -> None:
    d = paired_difference(0.0, np.array([0.0]), 10.0)  # one replicate: no SE
    assert verdict_of(d, 0.25) == "undecided"
    assert not is_equivalent(d, 0.25) and not is_different(d)


def test_identical_models_are_equivalent_and_not_different() -> None:
    cube = paired_cube([0.0, 0.0], noise=0.0)
    result = compared(cube, ComparisonRequest("m0", "m1", 0.25))
    assert result.weighted is not None
    assert result.weighted.estimate == pytest.approx(0.0)
    assert result.verdict == "equivalent" and result.equivalent and not result.different


def test_a_large_gap_is_different_and_not_equivalent() -> None:
    result = compared(paired_cube([0.0, -1.5]), ComparisonRequest("m0", "m1", 0.25))
    assert result.weighted is not None and result.weighted.estimate > 1.0
    assert result.verdict == "different" and result.different and not result.equivalent


def test_the_difference_is_paired_on_the_same_replicates() -> None:
    # The question difficulty both models share cancels in the difference: its SE is far below
    # the SE of two independent W's (√(SE_a² + SE_b²)).
    cube = paired_cube([0.0, -0.1], noise=0.3)
    scores = score_series(cube, CONFIG)
    unc = bootstrap_series(cube, CONFIG, scores)
    result = compare_pair(ComparisonRequest("m0", "m1"), scores, unc, cube.n_questions)
    assert unc.weighted_replicates is not None and result.weighted is not None
    unpaired = math.sqrt(float(np.var(unc.weighted_replicates, axis=0, ddof=1).sum()))
    assert result.weighted.se < 0.5 * unpaired


def test_levels_and_domains_are_reported_and_add_up_to_w() -> None:
    cube = paired_cube([0.0, -0.3])
    result = compared(cube, ComparisonRequest("m0", "m1"))
    assert sorted(result.levels) == [1, 2, 3]
    assert sorted(result.domains) == ["law", "med", "tax"]
    weights = CONFIG.level_weights
    weighted = sum(weights[lv] * d.estimate for lv, d in result.levels.items()) / sum(weights.values())
    assert result.weighted is not None and weighted == pytest.approx(result.weighted.estimate)
    for d in [*result.levels.values(), *result.domains.values()]:
        assert d.ci95[0] <= d.estimate <= d.ci95[1]


def test_questions_needed_follows_the_stated_formula() -> None:
    needed = questions_needed(se=0.1, n_questions=100, margin=0.25)
    z = special.ndtri
    assert needed.equivalent == math.ceil(100 * ((z(1 - ALPHA) + z(0.9)) * 0.1 / 0.25) ** 2)
    assert needed.different == math.ceil(100 * ((z(1 - ALPHA / 2) + z(0.8)) * 0.1 / 0.25) ** 2)
    # At the planned size, TOST at a true difference of 0 says equivalent 80% of the time (normal).
    assert needed.equivalent is not None
    se_n = 0.1 * math.sqrt(100 / needed.equivalent)
    power = 2 * special.ndtr(0.25 / se_n - z(1 - ALPHA)) - 1
    assert power == pytest.approx(0.8, abs=0.01)
    # Half the SE, a quarter of the questions; no SE, no figure.
    assert questions_needed(0.05, 100, 0.25).equivalent == pytest.approx(needed.equivalent / 4, abs=1)
    assert questions_needed(math.nan, 100, 0.25).equivalent is None


def test_a_model_missing_from_the_series_or_no_bootstrap_gives_a_reason() -> None:
    cube = paired_cube([0.0, 0.0])
    missing = compared(cube, ComparisonRequest("m0", "nope"))
    assert missing.verdict is None and missing.reason is not None and "nope" in missing.reason
    off = compared(cube, ComparisonRequest("m0", "m1"), ScoringConfig(bootstrap_samples=0))
    assert off.verdict is None and off.reason is not None and "bootstrap" in off.reason
