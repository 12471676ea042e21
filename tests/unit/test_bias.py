"""Self-preference, leave-one-judge-out and verbosity bias on small hand-built cubes."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math

import numpy as np
import pytest
from scipy import stats

from factories import score_cube
from kubejury.stats.bias import (
    judge_deltas,
    leave_one_judge_out,
    related_models,
    self_preference,
    verbosity_bias,
    within_question_correlation,
    without_judge,
)
from kubejury.stats.cube import ScoreCube
from kubejury.stats.scoring import ScoringConfig, SeriesScores

NAN = math.nan


make_cube = functools.partial(score_cube, series="s1")  # the bias tests' series name


def reference_scorer(cube: ScoreCube, config: ScoringConfig) -> SeriesScores:
    """A tiny independent stand-in for the study's scoring on one-level, one-domain cubes.

    S(q) = mean of non-null judge scores; W = mean of S(q) (one level, one domain); ranking by W
    descending, ties by name. Fields the tests do not read are filled with placeholders.
    """
    assert len(cube.levels) == 1 and len(cube.domains) == 1
    m = cube.n_models
    s_q = np.array(
        [
            [
                np.mean([v for v in cube.scores[i, q] if not math.isnan(v)] or [NAN])
                for q in range(cube.n_questions)
            ]
            for i in range(m)
        ]
    )
    weighted = np.array([np.mean([v for v in row if not math.isnan(v)] or [NAN]) for row in s_q])
    order = sorted(range(m), key=lambda i: (-weighted[i], cube.models[i]))
    empty = np.zeros(m)
    return SeriesScores(
        series=cube.series,
        models=cube.models,
        domains=cube.domains,
        levels=cube.levels,
        question_scores=s_q,
        domain_level_scores=weighted[:, None, None],
        level_scores=weighted[:, None],
        weighted=weighted,
        domain_weighted=weighted[:, None],
        degradation=empty,
        judge_sigma=empty,
        n_scored=np.zeros(m, dtype=np.int64),
        n_unscored=np.zeros(m, dtype=np.int64),
        ranking=tuple(cube.models[i] for i in order),
        domain_leaders={},
        tiers={},
    )


# ------------------------------------------------------------------------------------------------
# self-preference
# ------------------------------------------------------------------------------------------------

MODELS = ("alpha-120b", "alpha-20b", "beta-9b", "gamma-27b")
JUDGES = ("alpha-120b-judge", "deep", "other")


def offset_cube(offsets: dict[str, float], n_questions: int = 6) -> ScoreCube:
    """The two other judges agree on a base score; judge 0 adds ``offsets[model]`` to it."""
    rng = np.random.default_rng(0)
    base = rng.uniform(3, 8, size=(len(MODELS), n_questions))
    scores = np.stack([base + np.array([offsets[m] for m in MODELS])[:, None], base, base], axis=-1)
    return make_cube(scores, models=MODELS, judges=JUDGES)


def test_related_models_same_as_and_family() -> None:
    cube = offset_cube(dict.fromkeys(MODELS, 0.0))
    relations = related_models(
        cube,
        "alpha-120b-judge",
        judge_same_as={"alpha-120b-judge": "alpha-120b"},
        judge_family={},
        model_family={"alpha-120b": "Alpha", "alpha-20b": " alpha ", "beta-9b": "beta"},
    )
    assert relations == {"alpha-120b": "same_as", "alpha-20b": "family"}
    assert (
        related_models(cube, "deep", judge_same_as={}, judge_family={"deep": "delta"}, model_family={}) == {}
    )


def test_self_preference_hand_computed_offsets() -> None:
    cube = offset_cube({"alpha-120b": 2.0, "alpha-20b": 1.0, "beta-9b": 0.5, "gamma-27b": 0.5})
    result = self_preference(
        cube,
        judge_same_as={"alpha-120b-judge": "alpha-120b"},
        model_family={"alpha-120b": "alpha", "alpha-20b": "alpha"},
        n_bootstrap=200,
    )
    assert result.applicable
    by_model = {pair.model: pair for pair in result.pairs}
    assert set(by_model) == {"alpha-120b", "alpha-20b"}
    same = by_model["alpha-120b"]
    assert same.relation == "same_as"
    # Judge 0 minus the mean of the other two is exactly the offset on every answer.
    assert same.related.mean == pytest.approx(2.0)
    assert same.related.n == 6
    assert (same.related.ci_low, same.related.ci_high) == pytest.approx((2.0, 2.0))
    assert same.baseline.mean == pytest.approx(0.5)
    assert same.baseline.n == 12
    assert same.difference.mean == pytest.approx(1.5)
    assert (same.difference.ci_low, same.difference.ci_high) == pytest.approx((1.5, 1.5))
    assert by_model["alpha-20b"].relation == "family"
    assert by_model["alpha-20b"].difference.mean == pytest.approx(0.5)
    json.dumps(result.to_dict(), allow_nan=False)


def test_self_preference_ratio_over_missing_answers() -> None:
    # Judge 0 vs the mean of the judges present: answer (0,0): 9 - 7 = 2; (0,1): 6 - 5 = 1 (judge 2 null);
    # (0,2): judge 0 null → not counted. Baseline model 1: (1,0): 4 - 5 = -1; (1,1) only judge 0 → not counted.
    scores: list[list[list[float]]] = [
        [[9, 7, 7], [6, 5, NAN], [NAN, 4, 4]],
        [[4, 5, 5], [8, NAN, NAN], [3, 3, 3]],
    ]
    cube = make_cube(scores, models=("self", "x"), judges=("me", "a", "b"))
    result = self_preference(cube, judge_same_as={"me": "self"}, n_bootstrap=50)
    (pair,) = result.pairs
    assert pair.related.mean == pytest.approx(1.5)
    assert pair.related.n == 2
    assert pair.baseline.mean == pytest.approx(-0.5)  # (-1 + 0) / 2
    assert pair.baseline.n == 2
    assert pair.difference.mean == pytest.approx(2.0)
    deltas = judge_deltas(cube)
    assert deltas[0, 1, 0] == pytest.approx(1.0)
    assert math.isnan(deltas[1, 1, 0])


def test_self_preference_ci_width_matches_normal_theory_and_is_seeded() -> None:
    rng = np.random.default_rng(42)
    n_q = 400
    base = rng.uniform(3, 8, size=(2, n_q))
    own = base.copy()
    own[0] += 1.0 + rng.normal(0, 1.0, size=n_q)  # delta ~ N(1, 1) on the related model
    scores = np.stack([own, base, base], axis=-1)
    cube = make_cube(scores, models=("self", "x"), judges=("me", "a", "b"))
    first = self_preference(cube, judge_same_as={"me": "self"}, n_bootstrap=1000, seed=7)
    again = self_preference(cube, judge_same_as={"me": "self"}, n_bootstrap=1000, seed=7)
    assert first == again
    (pair,) = first.pairs
    width = pair.related.ci_high - pair.related.ci_low
    sd = float(np.std(own[0] - base[0], ddof=1))
    assert width == pytest.approx(2 * 1.96 * sd / math.sqrt(n_q), rel=0.2)
    assert pair.related.ci_low < pair.related.mean < pair.related.ci_high
    assert pair.difference.ci_low > 0.5


def test_self_preference_not_applicable_cases() -> None:
    one = make_cube([[[5], [6]]], models=("self",), judges=("me",))
    result = self_preference(one, judge_same_as={"me": "self"})
    assert not result.applicable and "2 judges" in (result.reason or "")
    cube = offset_cube(dict.fromkeys(MODELS, 0.0))
    none = self_preference(cube, judge_same_as={"ghost": "nobody"})
    assert not none.applicable
    assert any("ghost" in note for note in none.notes)
    assert any("nobody" in note for note in none.notes)
    json.dumps(none.to_dict(), allow_nan=False)


def test_self_preference_all_models_related_has_no_baseline() -> None:
    cube = make_cube([[[8, 6], [7, 7]]], models=("self",), judges=("me", "a"))
    (pair,) = self_preference(cube, judge_same_as={"me": "self"}, n_bootstrap=20).pairs
    assert pair.related.mean == pytest.approx(1.0)
    assert math.isnan(pair.baseline.mean) and pair.baseline.n == 0
    assert math.isnan(pair.difference.mean) and math.isnan(pair.difference.ci_low)
    json.dumps(pair.to_dict(), allow_nan=False)


# ------------------------------------------------------------------------------------------------
# leave one judge out
# ------------------------------------------------------------------------------------------------


def test_without_judge_drops_one_column() -> None:
    cube = make_cube(np.arange(12, dtype=float).reshape(2, 2, 3))
    reduced = without_judge(cube, "j1")
    assert reduced.judges == ("j0", "j2")
    assert reduced.scores[:, :, 1].tolist() == cube.scores[:, :, 2].tolist()
    assert reduced.has_record is cube.has_record


def test_leave_one_judge_out_hand_computed() -> None:
    # Model means per judge (one question each): judge k decides the order between a and b.
    #        j0  j1  j2
    # a       9   9   3   → W 7.0
    # b       6   6   8   → W 6.67
    # c       1   1   1   → W 1
    cube = make_cube([[[9, 9, 3]], [[6, 6, 8]], [[1, 1, 1]]], models=("a", "b", "c"))
    result = leave_one_judge_out(cube, scorer=reference_scorer)
    assert result.applicable
    assert result.full_ranking == ("a", "b", "c")
    by_judge = {removal.judge: removal for removal in result.removals}
    # Without j0: a = 6, b = 7 → b, a, c (a and b swap).
    assert by_judge["j0"].ranking == ("b", "a", "c")
    assert by_judge["j0"].max_rank_change == 1
    assert by_judge["j0"].most_moved == ("a", "b")
    assert by_judge["j0"].kendall_tau == pytest.approx(1 / 3)
    assert by_judge["j0"].weighted == pytest.approx((6.0, 7.0, 1.0))
    # Without j2: a = 9, b = 6 → unchanged.
    assert by_judge["j2"].ranking == ("a", "b", "c")
    assert by_judge["j2"].kendall_tau == pytest.approx(1.0)
    assert by_judge["j2"].max_rank_change == 0
    assert by_judge["j2"].most_moved == ()
    assert result.full_weighted == pytest.approx((7.0, 20 / 3, 1.0))
    json.dumps(result.to_dict(), allow_nan=False)


def test_leave_one_judge_out_kendall_matches_scipy_on_random_panel() -> None:
    rng = np.random.default_rng(3)
    scores = rng.uniform(0, 10, size=(8, 5, 4))
    cube = make_cube(scores)
    result = leave_one_judge_out(cube, scorer=reference_scorer)
    full = reference_scorer(cube, ScoringConfig())
    for removal in result.removals:
        reduced = reference_scorer(without_judge(cube, removal.judge), ScoringConfig())
        expected = stats.kendalltau(full.weighted, reduced.weighted).statistic  # no ties in W here
        assert removal.kendall_tau == pytest.approx(expected)


def test_leave_one_judge_out_one_judge() -> None:
    result = leave_one_judge_out(make_cube([[[5.0]]]), scorer=reference_scorer)
    assert not result.applicable
    assert result.removals == ()


def test_leave_one_judge_out_with_the_real_scorer() -> None:
    cube = make_cube([[[9, 9, 3]], [[6, 6, 8]], [[1, 1, 1]]], models=("a", "b", "c"))
    result = leave_one_judge_out(cube, ScoringConfig(level_weights={1: 1.0}))
    assert result.full_ranking == ("a", "b", "c")
    assert {r.judge: r.ranking for r in result.removals}["j0"] == ("b", "a", "c")


# ------------------------------------------------------------------------------------------------
# verbosity
# ------------------------------------------------------------------------------------------------


def test_within_question_correlation_hand_computed() -> None:
    # q0: longer → higher; q1: longer → lower, by the same amounts. Pooled residuals cancel.
    lengths = np.array([[100.0, 1000.0], [200.0, 1100.0], [300.0, 1200.0]])
    scores = np.array([[5.0, 9.0], [6.0, 8.0], [7.0, 7.0]])
    both = within_question_correlation(lengths, scores, "j")
    assert both.pearson == pytest.approx(0.0, abs=1e-12)
    assert both.n == 6 and both.n_questions == 2
    first = within_question_correlation(lengths[:, :1], scores[:, :1], "j")
    assert first.pearson == pytest.approx(1.0)
    assert first.spearman == pytest.approx(1.0)
    # Without demeaning, q1's longer answers and higher scores would look positively correlated.
    assert stats.pearsonr(lengths.ravel(), scores.ravel())[0] > 0


def test_within_question_correlation_skips_single_model_questions() -> None:
    lengths = np.array([[100.0, 50.0], [300.0, NAN]])
    scores = np.array([[4.0, 9.0], [8.0, 1.0]])
    result = within_question_correlation(lengths, scores, "j")
    assert result.n == 2 and result.n_questions == 1
    assert result.pearson == pytest.approx(1.0)


def test_verbosity_bias_against_pandas_groupby() -> None:
    pandas = importlib.import_module("pandas")
    rng = np.random.default_rng(9)
    m, q = 6, 30
    lengths = rng.uniform(100, 2000, size=(m, q))
    scores = np.stack([5 + lengths / 1000 + rng.normal(0, 1, (m, q)), rng.uniform(0, 10, (m, q))], axis=-1)
    scores[0, :4, 1] = NAN
    lengths[2, 5] = NAN
    cube = make_cube(scores, answer_chars=lengths)
    result = verbosity_bias(cube)
    assert result.applicable
    for j, item in enumerate(result.per_judge):
        frame = pandas.DataFrame(
            {"q": np.tile(np.arange(q), m), "len": lengths.ravel(), "score": scores[:, :, j].ravel()}
        ).dropna()
        frame = frame[frame.groupby("q")["q"].transform("size") >= 2]
        x = frame["len"] - frame.groupby("q")["len"].transform("mean")
        y = frame["score"] - frame.groupby("q")["score"].transform("mean")
        assert item.n == len(frame)
        assert item.pearson == pytest.approx(stats.pearsonr(x, y)[0])
        assert item.spearman == pytest.approx(stats.spearmanr(x, y)[0])
    assert result.per_judge[0].pearson > 0.3
    assert result.panel is not None and result.panel.judge is None
    json.dumps(result.to_dict(), allow_nan=False)


def test_verbosity_bias_without_lengths() -> None:
    cube = make_cube([[[5.0, 6.0]]])
    assert not verbosity_bias(cube).applicable
    nan_lengths = dataclasses.replace(cube, answer_chars=np.full((1, 1), NAN))
    result = verbosity_bias(nan_lengths)
    assert not result.applicable
    json.dumps(result.to_dict(), allow_nan=False)


def test_verbosity_bias_constant_scores_is_nan() -> None:
    cube = make_cube(np.full((3, 2, 2), 7.0), answer_chars=np.array([[1.0, 2], [3, 4], [5, 9]]))
    result = verbosity_bias(cube)
    assert math.isnan(result.per_judge[0].pearson)
    assert json.loads(json.dumps(result.to_dict(), allow_nan=False))["per_judge"][0]["pearson"] is None


def test_baseline_uses_only_models_related_to_no_judge() -> None:
    # Judge "me" is model "self"; judge "a" is model "a-model". Judge "me" gives +1 to "self",
    # +0 to the neutral "x"; judge "a" gives +3 to its own model, which pushes "me"'s delta there to
    # -1.5 (= 5 - mean(8, 5)). Those answers must not count in "me"'s baseline.
    base = np.full((3, 4), 5.0)
    me = base + np.array([1.0, 0.0, 0.0])[:, None]
    a = base + np.array([0.0, 0.0, 3.0])[:, None]
    scores = np.stack([me, a, base], axis=-1)
    cube = make_cube(scores, models=("self", "x", "a-model"), judges=("me", "a", "b"))
    result = self_preference(cube, judge_same_as={"me": "self", "a": "a-model"}, n_bootstrap=50)
    by_judge = {pair.judge: pair for pair in result.pairs}
    assert by_judge["me"].baseline.mean == pytest.approx(0.0)
    assert by_judge["me"].baseline.n == 4
    # With "a-model" in the baseline it would be (0 + -1.5) / 2 = -0.75 and the difference 1.75.
    assert by_judge["me"].difference.mean == pytest.approx(1.0)
    assert by_judge["a"].related.mean == pytest.approx(3.0)
    assert by_judge["a"].baseline.mean == pytest.approx(0.0)


def test_note_when_two_judges_share_a_related_model() -> None:
    cube = offset_cube(dict.fromkeys(MODELS, 0.0))
    result = self_preference(
        cube,
        judge_family={"alpha-120b-judge": "alpha", "deep": "alpha"},
        model_family={"alpha-120b": "alpha"},
        n_bootstrap=20,
    )
    assert {pair.judge for pair in result.pairs} == {"alpha-120b-judge", "deep"}
    assert any("understated" in note for note in result.notes)


def test_two_judges_each_an_evaluated_model_get_the_cross_baseline() -> None:
    # The quickstart's shape: two models, each also a judge, no neutral model. Judge "g" is model
    # "gm" and adds 2 to it; judge "s" is model "sm" and adds 1 to it; "g" is 0.5 more lenient
    # everywhere. With only two judges the cross design identifies the SUM of the two
    # self-preferences (2 + 1 = 3), net of leniency, for both judges — and the notes say so.
    base = np.full((2, 5), 5.0)
    g = base + 0.5 + np.array([2.0, 0.0])[:, None]
    s = base + np.array([0.0, 1.0])[:, None]
    cube = make_cube(np.stack([g, s], axis=-1), models=("gm", "sm"), judges=("g", "s"))
    result = self_preference(cube, judge_same_as={"g": "gm", "s": "sm"}, n_bootstrap=50)
    by_judge = {pair.judge: pair for pair in result.pairs}
    assert by_judge["g"].related.mean == pytest.approx(2.5)  # leniency 0.5 + own 2
    assert by_judge["g"].baseline.mean == pytest.approx(-0.5)  # leniency 0.5 - the other's 1
    assert by_judge["g"].difference.mean == pytest.approx(3.0)
    assert by_judge["s"].difference.mean == pytest.approx(3.0)
    assert by_judge["g"].baseline.n == 5 and not math.isnan(by_judge["g"].difference.ci_low)
    assert any("no evaluated model is related to no judge" in note and "sum" in note for note in result.notes)
    json.dumps(result.to_dict(), allow_nan=False)
