"""The sequential simulation itself: its populations have the W they claim, and on a small run the
naive peeking rule throws out a true best model more often than the spending rule (the property the
benchmark's table shows at scale; this test fails if the spending rule loses its protection); for
the goal comparisons, peeking with the fixed run's TOST calls twins different, and a pair at the
margin equivalent, more often than the spending rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kubejury.stats.scoring import ScoringConfig
from kubejury.stats.sequential import Budget, PairOutcome
from kubejury.testing.calibration import Rate, equal_shape, population_truth
from kubejury.testing.sequential import (
    COMPARISON_MARGIN,
    COMPARISONS,
    POPULATIONS,
    STUDY_W,
    _wrong_claim,
    naive_levels,
    population,
    rate_text,
    simulate,
    simulate_comparison,
)

SMALL = equal_shape(30, domains=8)  # 8 domains × 3 levels × 30: half the study, same cell size


@pytest.mark.parametrize("name", sorted(POPULATIONS))
def test_populations_have_their_target_w(name: str) -> None:
    pop = population(POPULATIONS[name], n_domains=16)
    truth = population_truth(pop, equal_shape(30), ScoringConfig()).weighted
    assert truth.tolist() == pytest.approx(list(POPULATIONS[name]), abs=1e-6)


def test_study_population_keeps_the_published_spacing() -> None:
    assert len(STUDY_W) == 15 and STUDY_W[:5] == (9.33, 9.28, 9.28, 9.27, 9.09) and STUDY_W[-1] == 8.17
    assert POPULATIONS["near-tie"][0] == POPULATIONS["near-tie"][1] == max(POPULATIONS["near-tie"])
    easy = POPULATIONS["easy"]
    assert easy[0] - max(easy[1:]) == pytest.approx(0.35)


def test_naive_rule_excludes_a_true_best_more_often_than_the_spending_rule() -> None:
    naive = simulate("near-tie", 60, seed=7, shape=SMALL, naive=True)
    spending = simulate("near-tie", 60, seed=7, shape=SMALL)
    assert naive.wrong_group.value > spending.wrong_group.value
    assert naive.wrong_group.value >= 0.05  # peeking at six looks errs well above its nominal 5%
    assert spending.coverage.value >= 0.94
    assert spending.used.value < 1.0 and naive.used.value < spending.used.value


def test_easy_population_saves_most_of_the_questions() -> None:
    result = simulate("easy", 20, seed=3, shape=SMALL)
    assert result.saving.value >= 0.5 and result.wrong_group.value == 0.0
    assert result.used_quantiles["0.95"] <= 0.5
    assert result.questions_per_model[0] <= SMALL.n_questions


def test_naive_levels_spend_the_full_alpha_at_every_look() -> None:
    levels = naive_levels(4, 0.95)
    assert levels.alpha.tolist() == pytest.approx([0.05] * 4) and not levels.per_pair


def test_a_wrong_verdict_is_counted() -> None:
    truth = np.array([9.0, 8.9, 9.0])
    models = ("a", "b", "c")

    def pair(a: str, b: str, verdict: str, margin: float = 0.05) -> PairOutcome:
        return PairOutcome(a, b, margin, verdict, 1, 0.0, (0.0, 0.0))  # type: ignore[arg-type]

    assert _wrong_claim((pair("a", "b", "a-better"), pair("a", "c", "equivalent")), models, truth) == 0.0
    assert _wrong_claim((pair("a", "b", "b-better"),), models, truth) == 1.0
    assert _wrong_claim((pair("a", "c", "a-better"),), models, truth) == 1.0  # a tie is not "better"
    assert _wrong_claim((pair("a", "b", "equivalent"),), models, truth) == 1.0  # 0.1 apart, margin 0.05
    assert _wrong_claim((pair("a", "b", "equivalent", margin=0.1),), models, truth) == 1.0  # at the margin


def test_comparison_cases_put_their_pair_at_the_margin_at_zero_and_between() -> None:
    assert COMPARISONS["at-margin"].difference == pytest.approx(COMPARISON_MARGIN)
    assert COMPARISONS["twins"].difference == 0.0
    assert COMPARISONS["half-margin"].difference == pytest.approx(COMPARISON_MARGIN / 2)
    assert all(c.margin == COMPARISON_MARGIN for c in COMPARISONS.values())


def test_naive_tost_at_every_look_calls_twins_different_more_often_than_the_spending_rule() -> None:
    twins = COMPARISONS["twins"]
    naive = simulate_comparison(twins, 150, seed=11, shape=SMALL, naive=True, confidence=0.90)
    spending = simulate_comparison(twins, 150, seed=11, shape=SMALL)
    assert naive.wrong.value > spending.wrong.value and naive.wrong.value >= 0.05
    assert spending.wrong.value <= 0.05 and spending.undecided.value <= 0.05
    assert spending.coverage.value >= 0.94
    assert naive.verdicts["equivalent"] + naive.verdicts["a-better"] + naive.verdicts[
        "b-better"
    ] == pytest.approx(1.0)


def test_at_the_margin_naive_tost_says_equivalent_more_often_than_the_spending_rule() -> None:
    case = COMPARISONS["at-margin"]
    naive = simulate_comparison(case, 150, seed=11, shape=SMALL, naive=True, confidence=0.90)
    spending = simulate_comparison(case, 150, seed=11, shape=SMALL)
    assert spending.wrong.value < naive.wrong.value and spending.wrong.value <= 0.05
    assert spending.verdicts["equivalent"] == spending.wrong.value  # at the margin only "equivalent" is wrong


def test_a_comparison_stops_the_models_outside_its_pair_at_the_first_look() -> None:
    result = simulate_comparison(COMPARISONS["twins"], 5, seed=2, shape=SMALL)
    first_look = 0.1 * SMALL.n_questions
    outside = (len(STUDY_W) - 2) * first_look / (len(STUDY_W) * SMALL.n_questions)
    assert result.used_quantiles["0.05"] >= outside
    assert result.pair_questions_quantiles["0.5"] > first_look and result.used.value < 0.5


def test_full_ranking_rule_reports_verdict_errors_not_groups() -> None:
    result = simulate("easy", 3, seed=1, shape=SMALL, budget=Budget(goal="full-ranking"))
    assert math.isnan(result.wrong_group.value) and not math.isnan(result.wrong_claim.value)


def test_rate_text_bounds_a_zero_by_the_rule_of_three() -> None:
    assert rate_text(Rate(0.0, 0.0), 1000) == "0.0 (≤ 0.30)"
    assert rate_text(Rate(0.25, 0.01)) == "25.0 ± 1.0"
    assert rate_text(Rate(0.995, 0.0004)) == "99.50 ± 0.04"
