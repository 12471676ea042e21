"""The intervals in report.json hold their level: a bounded run of benchmarks/calibration.py.

Fresh benchmarks are drawn from a population whose W, D, Score and per-domain W are known exactly
(kubejury.testing.calibration) and run through analyse_cubes → build_report, the code of
``kubejury report --format json``. The acceptance bands are computed from the replication count:
nominal ± 3 binomial standard errors of that many 0/1 trials (a replication's value averages
several models or domains, which only makes it less noisy than one trial). The shapes are the
quickstart's (2 questions per cell, where plain resampling covered 82%) and unequal cells with
single-question cells (where it covered 68%).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kubejury.stats.scoring import ScoringConfig
from kubejury.testing.calibration import (
    BETTER,
    Shape,
    ShapeResult,
    binomial_band,
    calibrate,
    equal_shape,
    expected_judge_score,
    unequal_shape,
)

REPLICATIONS = 200
CONFIDENCE = 0.95


@pytest.fixture(scope="module", params=[equal_shape(2), unequal_shape()], ids=lambda s: s.name)
def calibrated(request: pytest.FixtureRequest) -> ShapeResult:
    shape: Shape = request.param
    return calibrate(shape, REPLICATIONS, seed=900_000, config=ScoringConfig(confidence=CONFIDENCE))


def test_intervals_cover_the_population_values(calibrated: ShapeResult) -> None:
    low, high = binomial_band(CONFIDENCE, calibrated.replications)
    coverages = {
        "W": calibrated.coverage_weighted.value,
        "D": calibrated.coverage_degradation.value,
        **{f"Score({k + 1})": r.value for k, r in enumerate(calibrated.coverage_levels)},
        "per-domain W": calibrated.coverage_domains.value,
    }
    outside = {name: round(c, 3) for name, c in coverages.items() if not low <= c <= high}
    assert not outside, f"coverage outside [{low:.3f}, {high:.3f}]: {outside}"


def test_equal_models_are_rarely_called_different(calibrated: ShapeResult) -> None:
    _, high = binomial_band(1.0 - CONFIDENCE, calibrated.replications)
    assert calibrated.false_separation.value <= high


def test_the_reported_power_matches_the_power_observed(calibrated: ShapeResult) -> None:
    # The report predicts its own detection probability from its paired SE; over the replications
    # its average must agree with how often the better model was in fact separated, within the
    # binomial noise of the observed rate (plus the noise of the average, which is smaller).
    for k, delta in enumerate(BETTER.values()):
        observed, predicted = calibrated.power[k].value, calibrated.predicted_power[k].value
        p = min(max(observed, 0.05), 0.95)
        tolerance = (
            3.0 * math.sqrt(p * (1 - p) / calibrated.replications) + 3.0 * calibrated.predicted_power[k].se
        )
        assert abs(predicted - observed) <= tolerance, (delta, observed, predicted)


def test_the_population_expectation_is_exact() -> None:
    # Against brute force: E[clip(round(2x)/2, 0, 10)] for x ~ N(9.4, 1.3) (clipping matters).
    draws = np.random.default_rng(1).normal(9.4, 1.3, 2_000_000)
    brute = np.clip(np.round(draws * 2) / 2, 0, 10).mean()
    exact = float(expected_judge_score(np.array([9.4]), np.array([1.3]))[0])
    assert exact == pytest.approx(brute, abs=0.003)
