"""Judge agreement: hand-computed fixtures, edge cases, and cross-checks against independent code."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from factories import score_cube
from kubejury.stats.agreement import (
    average_ranks,
    icc2,
    json_value,
    judge_agreement,
    leave_one_out_deltas,
    pearson,
    quadratic_weighted_kappa,
    round_scores,
    spearman,
    value_counts,
)

NAN = math.nan


# Shrout & Fleiss (1979), Table 2: 6 targets rated by 4 judges.
SHROUT_FLEISS = np.array(
    [[9, 2, 5, 8], [6, 1, 3, 2], [8, 4, 6, 8], [7, 1, 2, 6], [10, 5, 6, 9], [6, 2, 4, 7]], dtype=np.float64
)


def test_icc_matches_shrout_fleiss_published_values() -> None:
    single, average = icc2(SHROUT_FLEISS)
    # The paper reports ICC(2,1) = .29 and ICC(2,4) = .62.
    assert single == pytest.approx(0.29, abs=0.005)
    assert average == pytest.approx(0.62, abs=0.005)


def test_icc_hand_computed_anova() -> None:
    # 3 units × 2 raters: [[1,2],[3,3],[5,7]]. grand mean 3.5; row means 1.5, 3, 6; col means 3, 4.
    # SSR = 2·(4+0.25+6.25) = 21, SSC = 3·(0.25+0.25) = 1.5, SST = 6.25+2.25+0.25+0.25+2.25+12.25 = 23.5
    # SSE = 1; MSR = 10.5, MSC = 1.5, MSE = 0.5.
    # ICC(2,1) = 10 / (10.5 + 0.5 + 2·1/3) = 10/11.6667; ICC(2,2) = 10 / (10.5 + 1/3)
    single, average = icc2(np.array([[1, 2], [3, 3], [5, 7]], dtype=np.float64))
    assert single == pytest.approx(10 / (11 + 2 / 3))
    assert average == pytest.approx(10 / (10.5 + 1 / 3))


def test_icc_undefined_cases_are_nan() -> None:
    assert all(math.isnan(v) for v in icc2(np.full((4, 3), 7.0)))
    assert all(math.isnan(v) for v in icc2(np.array([[1.0, 2.0]])))
    assert all(math.isnan(v) for v in icc2(np.array([[1.0], [2.0]])))


def test_icc_is_nan_when_a_denominator_is_zero_up_to_rounding() -> None:
    # MSR + (MSC - MSE)/n is 0 in exact arithmetic here and ~1e-16 in floating point: ICC(2,k) was
    # 7.9e15 instead of undefined (found by the order-invariance property test).
    single, average = icc2(np.array([[0.0, 4.0], [4.0, 3.0], [7.0, 2.0]]))
    assert math.isnan(average)
    assert single == pytest.approx(-1.0)


def test_icc_against_pingouin() -> None:
    pingouin = importlib.import_module("pingouin")
    pandas = importlib.import_module("pandas")
    rng = np.random.default_rng(3)
    truth = rng.normal(6, 2, size=40)
    ratings = truth[:, None] + rng.normal(0, 1, size=(40, 3)) + np.array([0.0, 0.5, -0.3])
    long = pandas.DataFrame(
        {
            "unit": np.repeat(np.arange(40), 3),
            "rater": np.tile(np.arange(3), 40),
            "score": ratings.ravel(),
        }
    )
    table = pingouin.intraclass_corr(data=long, targets="unit", raters="rater", ratings="score").set_index(
        "Type"
    )
    # pingouin labels two-way random absolute agreement "ICC2"/"ICC2k" (older) or "ICC(A,1)"/"ICC(A,k)".
    icc_single_label = "ICC2" if "ICC2" in table.index else "ICC(A,1)"
    icc_average_label = "ICC2k" if "ICC2k" in table.index else "ICC(A,k)"
    single, average = icc2(ratings)
    assert single == pytest.approx(float(table.loc[icc_single_label, "ICC"]), abs=1e-9)
    assert average == pytest.approx(float(table.loc[icc_average_label, "ICC"]), abs=1e-9)


def test_kappa_hand_computed_table() -> None:
    # a = [0,1,2], b = [0,2,2]: Σw·O = 1 (one pair one apart); expected table from marginals
    # gives Σw·E = 4·2/3 + 1/3 + 2/3 + 4/3 = 5, so kappa = 1 - 1/5.
    assert quadratic_weighted_kappa(np.array([0.0, 1, 2]), np.array([0.0, 2, 2])) == pytest.approx(0.8)


def test_kappa_rounds_half_up_and_clips() -> None:
    assert round_scores(np.array([0.5, 1.49, 2.5, 9.6, 10.0, -0.2])).tolist() == [1, 1, 3, 10, 10, 0]
    # 7.6 and 8.4 both round to 8: perfect agreement after rounding.
    assert quadratic_weighted_kappa(np.array([7.6, 3.0, 5.0]), np.array([8.4, 3.2, 4.9])) == pytest.approx(
        1.0
    )


def test_kappa_constant_identical_raters_is_undefined() -> None:
    assert math.isnan(quadratic_weighted_kappa(np.array([7.0, 7.0]), np.array([7.0, 7.0])))
    assert math.isnan(quadratic_weighted_kappa(np.array([]), np.array([])))


def test_kappa_against_sklearn() -> None:
    metrics = importlib.import_module("sklearn.metrics")
    rng = np.random.default_rng(5)
    a = rng.integers(0, 11, size=200).astype(np.float64)
    b = np.clip(a + rng.integers(-2, 3, size=200), 0, 10).astype(np.float64)
    expected = metrics.cohen_kappa_score(
        a.astype(int), b.astype(int), weights="quadratic", labels=list(range(11))
    )
    assert quadratic_weighted_kappa(a, b) == pytest.approx(expected, abs=1e-12)


def test_correlations_against_scipy() -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    y[:5] = y[5]  # ties
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert math.isnan(pearson(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))
    assert math.isnan(spearman(np.array([1.0]), np.array([2.0])))


def test_alpha_hand_computed_and_single_rating_units_ignored() -> None:
    # Two judges on 3 answers (1,1), (2,2), (3,4); a fourth answer only judge 1 scored.
    # n = 6 pairable values; D_o = (2·1)/6; D_e = 2·41/(6·5); alpha = 1 - (1/3)/(41/15) = 36/41.
    cube = score_cube([[[1, 1], [2, 2], [3, 4], [5, NAN]]])
    result = judge_agreement(cube)
    assert result.applicable
    assert result.krippendorff_alpha == pytest.approx(36 / 41)
    assert result.n_alpha_units == 3
    assert result.n_complete_units == 3
    assert result.n_units == 4


def test_pairwise_matrices_on_pairwise_complete_units_match_scipy() -> None:
    rng = np.random.default_rng(7)
    base = rng.uniform(2, 10, size=(4, 30))
    scores = np.stack([base, base + rng.normal(0, 1, base.shape), base * 0.5 + 3], axis=-1)
    scores[0, :7, 1] = NAN  # judge 1 misses some answers
    scores[2, 3:6, 2] = NAN
    cube = score_cube(scores)
    result = judge_agreement(cube)
    ratings = scores.reshape(-1, 3)
    for a in range(3):
        for b in range(3):
            both = ~np.isnan(ratings[:, a]) & ~np.isnan(ratings[:, b])
            assert result.pair_n[a][b] == int(both.sum())
            assert result.pearson[a][b] == pytest.approx(
                stats.pearsonr(ratings[both, a], ratings[both, b])[0]
            )
            assert result.spearman[a][b] == pytest.approx(
                stats.spearmanr(ratings[both, a], ratings[both, b])[0]
            )
    assert result.pair_n[0][1] == 120 - 7
    assert result.kappa_quadratic[0][0] == pytest.approx(1.0)
    assert result.n_complete_units == 120 - 7 - 3


def test_judge_summaries_bias_against_the_other_judges() -> None:
    # Answer 1: A=8, B=6, C=7. Answer 2: A=9, B null, C=5. Answer 3: only A scored.
    cube = score_cube([[[8, 6, 7], [9, NAN, 5], [4, NAN, NAN]]], judges=("A", "B", "C"))
    result = judge_agreement(cube)
    by_name = {s.judge: s for s in result.per_judge}
    # A: (8 - 6.5) and (9 - 5) → mean 2.75 over 2 answers (answer 3 has no other judge).
    assert by_name["A"].bias_vs_others == pytest.approx(2.75)
    assert by_name["A"].n_bias == 2
    assert by_name["A"].mean_score == pytest.approx(7.0)
    # B: 6 - 7.5.
    assert by_name["B"].bias_vs_others == pytest.approx(-1.5)
    assert by_name["B"].n_null == 2
    assert by_name["B"].n_scored == 1
    # C: (7 - 7) and (5 - 9) → -2.
    assert by_name["C"].bias_vs_others == pytest.approx(-2.0)
    assert by_name["C"].n_units == 3


def test_leave_one_out_deltas_shape_and_nan() -> None:
    deltas = leave_one_out_deltas(np.array([[8.0, 6.0, 7.0], [4.0, NAN, NAN]]))
    assert deltas[0].tolist() == pytest.approx([1.5, -1.5, 0.0])
    assert np.isnan(deltas[1]).all()


def test_answers_without_record_are_not_units() -> None:
    cube = score_cube([[[8, 6], [9, 5]], [[NAN, NAN], [7, 7]]])
    cube = dataclasses.replace(cube, has_record=np.array([[True, True], [False, True]]))
    assert judge_agreement(cube).n_units == 3


def test_one_judge_is_not_applicable() -> None:
    cube = score_cube([[[8], [9]], [[5], [NAN]]])
    result = judge_agreement(cube)
    assert not result.applicable
    assert "2 judges" in (result.reason or "")
    assert math.isnan(result.krippendorff_alpha)
    assert result.per_judge[0].n_scored == 3
    assert result.per_judge[0].n_null == 1
    assert math.isnan(result.per_judge[0].bias_vs_others)
    payload = result.to_dict()
    json.dumps(payload, allow_nan=False)
    assert payload["krippendorff_alpha"] is None
    assert payload["applicable"] is False


def test_constant_scores_give_undefined_statistics_not_errors() -> None:
    cube = score_cube(np.full((2, 3, 3), 9.0))
    result = judge_agreement(cube)
    assert result.applicable
    assert math.isnan(result.krippendorff_alpha)
    assert math.isnan(result.icc2_1)
    assert math.isnan(result.pearson[0][1])
    assert math.isnan(result.kappa_quadratic[0][1])
    assert all(s.bias_vs_others == 0.0 for s in result.per_judge)
    json.dumps(result.to_dict(), allow_nan=False)


def test_all_null_judge() -> None:
    rng = np.random.default_rng(1)
    scores = rng.uniform(0, 10, size=(3, 5, 3))
    scores[:, :, 2] = NAN
    result = judge_agreement(score_cube(scores))
    assert result.per_judge[2].n_scored == 0
    assert result.per_judge[2].n_null == 15
    assert math.isnan(result.per_judge[2].mean_score)
    assert result.n_complete_units == 0
    assert math.isnan(result.icc2_1)
    assert result.pair_n[0][2] == 0
    assert math.isnan(result.spearman[0][2])
    # alpha still uses the two working judges
    two = judge_agreement(score_cube(scores[:, :, :2]))
    assert result.krippendorff_alpha == pytest.approx(two.krippendorff_alpha)
    json.dumps(result.to_dict(), allow_nan=False)


def test_no_pairable_unit_gives_nan_alpha() -> None:
    result = judge_agreement(score_cube([[[3, NAN], [NAN, 4]]]))
    assert math.isnan(result.krippendorff_alpha)
    assert result.n_alpha_units == 0


def test_alpha_rises_with_agreement() -> None:
    rng = np.random.default_rng(2)
    truth = rng.uniform(0, 10, size=(5, 40, 1))
    close = judge_agreement(score_cube(truth + rng.normal(0, 0.3, size=(5, 40, 3))))
    far = judge_agreement(score_cube(truth + rng.normal(0, 3.0, size=(5, 40, 3))))
    assert close.krippendorff_alpha > far.krippendorff_alpha
    assert close.icc2_1 > far.icc2_1


def test_json_value_conversions() -> None:
    assert json_value((np.float64(1.5), NAN, np.int64(3), (np.inf, None))) == [1.5, None, 3, [None, None]]
    assert json_value({"a": np.bool_(True)}) == {"a": True}
    with pytest.raises(TypeError):
        json_value(object())


def test_alpha_equals_the_package_on_raw_reliability_data() -> None:
    krippendorff = importlib.import_module("krippendorff")
    rng = np.random.default_rng(12)
    scores = np.round(rng.uniform(0, 10, size=(4, 25, 1)) + rng.normal(0, 1, size=(4, 25, 3)), 1)
    scores[rng.random(scores.shape) < 0.2] = NAN
    ratings = scores.reshape(-1, 3)
    expected = krippendorff.alpha(reliability_data=ratings.T, level_of_measurement="interval")
    assert judge_agreement(score_cube(scores)).krippendorff_alpha == pytest.approx(expected, abs=1e-12)


def test_value_counts_rows_and_domain() -> None:
    counts, domain = value_counts(np.array([[1.0, 1.0, NAN], [2.5, 1.0, 2.5]]))
    assert domain.tolist() == [1.0, 2.5]
    assert counts.tolist() == [[2, 0], [1, 2]]


def test_alpha_on_a_seeded_sample_of_units() -> None:
    rng = np.random.default_rng(4)
    truth = rng.uniform(0, 10, size=(10, 300, 1))
    cube = score_cube(np.round(truth + rng.normal(0, 1.0, size=(10, 300, 3))))
    full = judge_agreement(cube, max_alpha_units=None)
    sampled = judge_agreement(cube, max_alpha_units=1000, seed=1)
    assert not full.alpha_sampled and full.n_alpha_units == 3000
    assert sampled.alpha_sampled and sampled.n_alpha_units == 1000
    assert sampled.krippendorff_alpha == pytest.approx(full.krippendorff_alpha, abs=0.03)
    assert sampled == judge_agreement(cube, max_alpha_units=1000, seed=1)
    assert sampled.icc2_1 == full.icc2_1  # only alpha is sampled


def test_average_ranks_match_scipy_rankdata() -> None:
    rng = np.random.default_rng(13)
    x = np.round(rng.uniform(0, 10, size=500))
    np.testing.assert_allclose(average_ranks(x), stats.rankdata(x))
    assert average_ranks(np.array([3.0, 1.0, 3.0])).tolist() == [2.5, 1.0, 2.5]


def test_no_units_at_all() -> None:
    cube = score_cube(np.zeros((2, 2, 3)))
    cube = dataclasses.replace(cube, has_record=np.zeros((2, 2), dtype=np.bool_))
    result = judge_agreement(cube)
    assert result.n_units == 0 and result.n_alpha_units == 0
    assert math.isnan(result.krippendorff_alpha) and math.isnan(result.icc2_k)
    assert all(s.n_scored == 0 for s in result.per_judge)
    json.dumps(result.to_dict(), allow_nan=False)


score_matrices = arrays(
    np.float64,
    st.tuples(st.integers(3, 12), st.integers(2, 4)),
    elements=st.integers(0, 10).map(float),
)


@settings(max_examples=40, deadline=None)
@given(score_matrices, st.randoms(use_true_random=False), st.integers(-3, 3))
def test_statistics_invariant_under_unit_order_and_shift(
    ratings: np.ndarray, random: Any, shift: int
) -> None:
    order = list(range(ratings.shape[0]))
    random.shuffle(order)
    base = judge_agreement(score_cube(ratings[None, :, :]))
    shuffled = judge_agreement(score_cube(ratings[None, order, :]))
    shifted = judge_agreement(score_cube(ratings[None, :, :] + shift))
    for other in (shuffled, shifted):
        for name in ("krippendorff_alpha", "icc2_1", "icc2_k"):
            a, b = getattr(base, name), getattr(other, name)
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-9)
        np.testing.assert_allclose(base.spearman, other.spearman, atol=1e-9)
        np.testing.assert_allclose(base.pearson, other.pearson, atol=1e-9)
    np.testing.assert_allclose(base.kappa_quadratic, shuffled.kappa_quadratic, atol=1e-9)
    assert np.allclose(base.pearson, np.transpose(base.pearson), equal_nan=True)
    assert np.allclose(base.kappa_quadratic, np.transpose(base.kappa_quadratic), equal_nan=True)
