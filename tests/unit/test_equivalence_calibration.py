"""TOST keeps its error rates: a bounded run of benchmarks/equivalence_calibration.py.

Benchmarks of the quickstart's shape (2 questions per cell) are drawn from a population with a
reference, an equal twin and a model better by exactly the margin, and run through the report's
code. The bands are nominal ± 3 binomial standard errors of the replication count. The same
assertion applied to a wrong reading of equivalence ("not significantly different") fails, which
is what shows that the check can fail.
"""

from __future__ import annotations

import pytest

from kubejury.stats.equivalence import ALPHA
from kubejury.stats.scoring import ScoringConfig
from kubejury.testing.calibration import binomial_band, equal_shape
from kubejury.testing.equivalence_calibration import ShapeResult, calibrate_equivalence

REPLICATIONS = 150
TOST = "TOST (the report's verdict)"
FALLACY = "not significantly different (wrong)"


@pytest.fixture(scope="module")
def result() -> ShapeResult:
    return calibrate_equivalence(
        equal_shape(2), REPLICATIONS, seed=910_000, config=ScoringConfig(bootstrap_samples=400)
    )


def test_the_population_differs_by_exactly_the_margin(result: ShapeResult) -> None:
    assert result.true_difference["zero"] == pytest.approx(0.0, abs=1e-9)
    assert result.true_difference["margin"] == pytest.approx(result.margin, abs=1e-6)


def test_equivalent_is_rarely_said_at_the_margin(result: ShapeResult) -> None:
    _, high = binomial_band(ALPHA, result.replications)
    assert result.equivalent["margin"][TOST].value <= high


def test_the_wrong_rule_fails_the_same_check(result: ShapeResult) -> None:
    # "Not significantly different" calls a pair that truly differs by the margin equivalent
    # whenever the benchmark is too small to see it: far above α at this size.
    _, high = binomial_band(ALPHA, result.replications)
    assert result.equivalent["margin"][FALLACY].value > high


def test_equal_models_are_rarely_called_different(result: ShapeResult) -> None:
    _, high = binomial_band(ALPHA, result.replications)
    assert result.different["zero"].value <= high


def test_equal_models_are_called_equivalent_more_often_than_models_at_the_margin(result: ShapeResult) -> None:
    assert result.equivalent["zero"][TOST].value > 5 * max(result.equivalent["margin"][TOST].value, 0.02)
