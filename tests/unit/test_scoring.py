"""The study's method on hand-computed cubes, and its invariants as hypothesis properties."""

from __future__ import annotations

import dataclasses
import importlib
import math
import random
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import score_cube_by_id
from kubejury.errors import ConfigError
from kubejury.stats.cube import ScoreCube
from kubejury.stats.scoring import NO_TIER, ScoringConfig, TierRule, score_series
from kubejury.stats.series_compare import compare_series

NAN = math.nan

# (id, domain, level); "med" has no level-3 question; domains have unequal sizes.
QUESTIONS = [
    ("q1", "law", 1),
    ("q2", "law", 1),
    ("q3", "law", 2),
    ("q4", "law", 3),
    ("q5", "med", 1),
    ("q6", "med", 2),
    ("q7", "med", 2),
    ("q8", "law", 3),
]

# Scores by judge a, b, c. None = no record at all for (model, question).
ALPHA: dict[str, list[float] | None] = {
    "q1": [9, 8, 10],
    "q2": [7, NAN, NAN],  # a single judge: scored, but not in σ
    "q3": [8, 6, NAN],
    "q4": [6, 6, 6],
    "q5": [10, 10, 10],
    "q6": [5, 7, 9],
    "q7": [9, NAN, 9],
    "q8": [NAN, NAN, NAN],  # all judges null: unscored
}
BETA: dict[str, list[float] | None] = {
    "q1": [8, 8, 8],
    "q2": [8, 8, 8],
    "q3": [9, 9, 9],
    "q4": [9, 9, 9],
    "q5": None,  # never asked
    "q6": [6, 6, 6],
    "q7": None,
    "q8": [9, 9, 9],
}


def test_question_means_and_counts() -> None:
    s = score_series(score_cube_by_id(QUESTIONS, {"alpha": ALPHA, "beta": BETA}), ScoringConfig())
    assert s.n_scored.tolist() == [7, 6]
    assert s.n_unscored.tolist() == [1, 0]
    q1 = score_cube_by_id(QUESTIONS, {"alpha": ALPHA}).question_ids.index("q1")
    assert s.question_scores[0, q1] == pytest.approx(9.0)


def test_hand_computed_alpha() -> None:
    s = score_series(score_cube_by_id(QUESTIONS, {"alpha": ALPHA, "beta": BETA}), ScoringConfig())
    a = s.model_index("alpha")
    law, med = s.domains.index("law"), s.domains.index("med")
    # S_i(m, d): law L1 = (9 + 7)/2, law L2 = 7, law L3 = 6 (q8 unscored), med L1 = 10, med L2 = (7+9)/2.
    np.testing.assert_allclose(s.domain_level_scores[a, law], [8.0, 7.0, 6.0])
    np.testing.assert_allclose(s.domain_level_scores[a, med, :2], [10.0, 8.0])
    assert math.isnan(s.domain_level_scores[a, med, 2])
    # Score(m, d): mean over the domains that have the level.
    np.testing.assert_allclose(s.level_scores[a], [9.0, 7.5, 6.0])
    assert s.degradation[a] == pytest.approx(3.0)
    assert s.weighted[a] == pytest.approx((0.6 * 9 + 0.8 * 7.5 + 1.0 * 6) / 2.4)  # 7.25
    sigma = (math.sqrt(2 / 3) + 1.0 + 0.0 + 0.0 + math.sqrt(8 / 3) + 0.0) / 6
    assert s.judge_sigma[a] == pytest.approx(sigma)
    assert s.domain_weighted[a, law] == pytest.approx((0.6 * 8 + 0.8 * 7 + 6) / 2.4)
    # med has no level 3: weighted over the levels it has, normalised by their weights.
    assert s.domain_weighted[a, med] == pytest.approx((0.6 * 10 + 0.8 * 8) / 1.4)


def test_hand_computed_beta_and_tables() -> None:
    s = score_series(score_cube_by_id(QUESTIONS, {"alpha": ALPHA, "beta": BETA}), ScoringConfig())
    b = s.model_index("beta")
    np.testing.assert_allclose(s.level_scores[b], [8.0, 7.5, 9.0])
    assert s.degradation[b] == pytest.approx(-1.0)
    assert s.weighted[b] == pytest.approx(8.25)
    assert s.judge_sigma[b] == 0.0
    q5 = score_cube_by_id(QUESTIONS, {"beta": BETA}).question_ids.index("q5")
    assert math.isnan(s.question_scores[b, q5])  # never asked: absent, not unscored
    assert s.ranking == ("beta", "alpha")
    assert s.domain_leaders == {"law": "beta", "med": "alpha"}
    assert s.tiers == {"alpha": "C", "beta": "B"}


def test_study_normalisation_would_cap_at_eight() -> None:
    perfect = {qid: [10.0, 10.0, 10.0] for qid, _, _ in QUESTIONS}
    s = score_series(score_cube_by_id(QUESTIONS, {"p": perfect}), ScoringConfig())
    assert s.weighted[0] == pytest.approx(10.0)
    # The study's printed "/3" would give 2.4 * 10 / 3 = 8 for a perfect model.
    assert s.weighted[0] * 2.4 / 3 == pytest.approx(8.0)


def test_level_without_weight_is_config_error() -> None:
    questions = [*QUESTIONS, ("q9", "law", 4)]
    judged = score_cube_by_id(questions, {"alpha": {**ALPHA, "q9": [5.0, 5.0, 5.0]}})
    with pytest.raises(ConfigError, match="level"):
        score_series(judged, ScoringConfig())
    s = score_series(judged, ScoringConfig(level_weights={1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0}))
    assert s.levels == (1, 2, 3, 4)
    assert s.degradation[0] == pytest.approx(9.0 - 5.0)  # lowest level 1, highest level 4
    assert s.weighted[0] == pytest.approx((9.0 + 7.5 + 6.0 + 2 * 5.0) / 5.0)


def test_level_never_judged_is_not_present() -> None:
    # The benchmark has a level-4 question nobody was asked (e.g. filtered out of the run): it
    # needs no weight and D still compares levels 1 and 3.
    cube = score_cube_by_id([*QUESTIONS, ("q9", "law", 4)], {"alpha": ALPHA})
    s = score_series(cube, ScoringConfig())
    assert s.levels == (1, 2, 3, 4)
    assert math.isnan(s.level_scores[0, 3])
    assert s.degradation[0] == pytest.approx(3.0)
    assert s.weighted[0] == pytest.approx(7.25)


def test_ties_rank_by_name_and_leader_by_overall_w() -> None:
    same = {"q1": [8.0, 8.0, 8.0], "q2": [6.0, 6.0, 6.0]}
    questions = [("q1", "law", 1), ("q2", "med", 1)]
    zed = {"q1": [8.0, 8.0, 8.0], "q2": [6.0, 6.0, 6.0]}
    better_med = {"q1": [8.0, 8.0, 8.0], "q2": [7.0, 7.0, 7.0]}
    s = score_series(
        score_cube_by_id(questions, {"zed": zed, "amy": same, "bob": better_med}), ScoringConfig()
    )
    assert s.ranking == ("bob", "amy", "zed")
    # law: all three tie at 8 → higher overall W (bob), then name.
    assert s.domain_leaders["law"] == "bob"
    assert s.domain_leaders["med"] == "bob"


def test_tiers_first_matching_rule_and_undefined_sigma() -> None:
    questions = [("q1", "law", 1), ("q2", "law", 3)]
    single_judge = {"q1": [9.5], "q2": [9.4]}
    rules = (TierRule("S", min_weighted=9.0, max_sigma=0.5), TierRule("A", min_weighted=9.0))
    s = score_series(
        score_cube_by_id(questions, {"m": single_judge}, judges=("a",)), ScoringConfig(tiers=rules)
    )
    assert math.isnan(s.judge_sigma[0])
    assert s.tiers == {"m": "A"}  # a σ bound cannot hold when σ is undefined
    low = {"q1": [1.0], "q2": [1.0]}
    s = score_series(score_cube_by_id(questions, {"m": low}, judges=("a",)), ScoringConfig(tiers=rules))
    assert s.tiers == {"m": NO_TIER}


def test_model_with_no_scores_ranks_last() -> None:
    questions = [("q1", "law", 1)]
    s = score_series(
        score_cube_by_id(questions, {"aa": {"q1": [NAN, NAN, NAN]}, "zz": {"q1": [1.0, 2.0, 3.0]}}),
        ScoringConfig(),
    )
    assert s.ranking == ("zz", "aa")
    assert math.isnan(s.weighted[0]) and s.n_unscored[0] == 1
    assert s.domain_leaders == {"law": "zz"}


# ---------------------------------------------------------------------------------------------
# Properties

score_value = st.one_of(st.none(), st.integers(0, 10).map(float))
question_rows = st.lists(
    st.tuples(
        st.sampled_from(["law", "med", "tax"]),
        st.integers(1, 3),
        st.lists(score_value, min_size=3, max_size=3),
    ),
    min_size=1,
    max_size=25,
)


def cube_from_rows(rows: Sequence[tuple[str, int, Sequence[float | None]]], models: int = 2) -> ScoreCube:
    questions = [(f"q{i:03d}", d, lvl) for i, (d, lvl, _) in enumerate(rows)]
    data: dict[str, dict[str, list[float] | None]] = {}
    for m in range(models):
        data[f"m{m}"] = {
            f"q{i:03d}": [NAN if v is None else min(10.0, v + m) for v in row]
            for i, (_, _, row) in enumerate(rows)
        }
    return score_cube_by_id(questions, data)


@settings(max_examples=60, deadline=None)
@given(question_rows, st.randoms(use_true_random=False))
def test_invariant_under_question_order(
    rows: list[tuple[str, int, list[float | None]]], rnd: random.Random
) -> None:
    base = score_series(cube_from_rows(rows), ScoringConfig())
    questions = [(f"q{i:03d}", d, lvl) for i, (d, lvl, _) in enumerate(rows)]
    data = {
        f"m{m}": {
            f"q{i:03d}": [NAN if v is None else min(10.0, v + m) for v in row]
            for i, (_, _, row) in enumerate(rows)
        }
        for m in range(2)
    }
    shuffled = list(questions)
    rnd.shuffle(shuffled)
    judges_reversed = {
        m: {q: (None if r is None else r[::-1]) for q, r in d.items()} for m, d in data.items()
    }
    other = score_series(score_cube_by_id(shuffled, judges_reversed), ScoringConfig())
    np.testing.assert_allclose(base.weighted, other.weighted, equal_nan=True)
    np.testing.assert_allclose(base.degradation, other.degradation, equal_nan=True)
    np.testing.assert_allclose(base.judge_sigma, other.judge_sigma, equal_nan=True)
    assert base.ranking == other.ranking and base.tiers == other.tiers


@settings(max_examples=80, deadline=None)
@given(question_rows)
def test_weighted_between_min_and_max_level_score(rows: list[tuple[str, int, list[float | None]]]) -> None:
    s = score_series(cube_from_rows(rows), ScoringConfig())
    for m in range(len(s.models)):
        defined = s.level_scores[m][~np.isnan(s.level_scores[m])]
        if defined.size == 0:
            assert math.isnan(s.weighted[m])
        else:
            assert defined.min() - 1e-9 <= s.weighted[m] <= defined.max() + 1e-9


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["law", "med"]), st.integers(1, 3)), min_size=1, max_size=20))
def test_all_ten_gives_ten(cells: list[tuple[str, int]]) -> None:
    rows = [(d, lvl, [10.0, 10.0, 10.0]) for d, lvl in cells]
    s = score_series(cube_from_rows(rows, models=1), ScoringConfig())
    assert s.weighted[0] == pytest.approx(10.0)
    assert s.degradation[0] == pytest.approx(0.0)
    assert s.judge_sigma[0] == 0.0


@settings(max_examples=60, deadline=None)
@given(question_rows, st.floats(-5.0, 5.0, allow_nan=False))
def test_constant_shift_moves_w_and_keeps_d(
    rows: list[tuple[str, int, list[float | None]]], shift: float
) -> None:
    cube = cube_from_rows(rows)
    shifted = dataclasses.replace(cube, scores=cube.scores + shift)
    a, b = score_series(cube, ScoringConfig()), score_series(shifted, ScoringConfig())
    np.testing.assert_allclose(b.weighted, a.weighted + shift, atol=1e-9, equal_nan=True)
    np.testing.assert_allclose(b.degradation, a.degradation, atol=1e-9, equal_nan=True)
    np.testing.assert_allclose(b.judge_sigma, a.judge_sigma, atol=1e-9, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# Cross-check with an independent pandas implementation of docs/method.md, steps 1–6


def pandas_reference(cube: ScoreCube) -> dict[str, dict[str, float]]:
    """W, D and σ per model, written from docs/method.md with pandas groupby, not from scoring.py."""
    pd = importlib.import_module("pandas")
    rows = []
    for m, model in enumerate(cube.models):
        for q, qid in enumerate(cube.question_ids):
            for j, judge in enumerate(cube.judges):
                if cube.has_record[m, q]:
                    value = cube.scores[m, q, j]
                    rows.append(
                        {
                            "model": model,
                            "question": qid,
                            "judge": judge,
                            "domain": cube.domains[cube.question_domain[q]],
                            "level": cube.levels[cube.question_level[q]],
                            "score": None if math.isnan(value) else float(value),
                        }
                    )
    frame = pd.DataFrame(rows)
    per_q = frame.groupby(["model", "question", "domain", "level"])["score"].agg(["mean", "count"])
    per_q["std0"] = frame.groupby(["model", "question", "domain", "level"])["score"].std(ddof=0)
    per_q = per_q.reset_index()
    scored = per_q[per_q["count"] > 0]
    cell = scored.groupby(["model", "domain", "level"])["mean"].mean().reset_index()
    level = cell.groupby(["model", "level"])["mean"].mean().reset_index()
    level["w"] = level["level"].map({1: 0.6, 2: 0.8, 3: 1.0})
    out: dict[str, dict[str, float]] = {}
    for model, group in level.groupby("model"):
        by_level = dict(zip(group["level"], group["mean"], strict=True))
        lo, hi = min(cube.levels), max(cube.levels)
        out[str(model)] = {
            "W": float((group["w"] * group["mean"]).sum() / group["w"].sum()),
            "D": by_level.get(lo, math.nan) - by_level.get(hi, math.nan),
        }
    sigma = per_q[per_q["count"] >= 2].groupby("model")["std0"].mean()
    for model in out:
        out[model]["sigma"] = float(sigma.get(model, math.nan))
    return out


@settings(max_examples=25, deadline=None)
@given(question_rows)
def test_matches_independent_pandas_implementation(rows: list[tuple[str, int, list[float | None]]]) -> None:
    cube = cube_from_rows(rows, models=3)
    s = score_series(cube, ScoringConfig())
    reference = pandas_reference(cube)
    for m, model in enumerate(s.models):
        if model not in reference:
            assert math.isnan(s.weighted[m])
            continue
        assert s.weighted[m] == pytest.approx(reference[model]["W"], nan_ok=True)
        assert s.degradation[m] == pytest.approx(reference[model]["D"], nan_ok=True)
        assert s.judge_sigma[m] == pytest.approx(reference[model]["sigma"], nan_ok=True)


# ---------------------------------------------------------------------------------------------
# Series comparison (Table 7)


def test_compare_series() -> None:
    questions = [("q1", "law", 1), ("q2", "law", 3)]
    base = {"a": {"q1": [9.0], "q2": [8.0]}, "b": {"q1": [7.0], "q2": [7.0]}, "c": {"q1": [5.0], "q2": [5.0]}}
    hot = {"a": {"q1": [8.0], "q2": [8.0]}, "b": {"q1": [7.5], "q2": [7.5]}}
    other = {"c": {"q1": [6.0], "q2": [6.0]}, "d": {"q1": [1.0], "q2": [1.0]}}
    config = ScoringConfig()
    scores = {
        "t0": score_series(score_cube_by_id(questions, base, judges=("j",), series="t0"), config),
        "t08": score_series(score_cube_by_id(questions, hot, judges=("j",), series="t08"), config),
        "rp": score_series(score_cube_by_id(questions, other, judges=("j",), series="rp"), config),
    }
    table = compare_series(scores)
    assert table.primary == "t0" and table.series == ("t0", "t08", "rp")
    assert table.models == ("a", "b", "c")  # d is in one series only
    w_a = (0.6 * 9 + 1.0 * 8) / 1.6
    np.testing.assert_allclose(table.weighted[0], [w_a, 8.0, np.nan])
    np.testing.assert_allclose(table.difference[0], [0.0, 8.0 - w_a, np.nan])
    np.testing.assert_allclose(table.difference[2], [0.0, np.nan, 1.0])
    assert table.mean_difference()["t08"] == pytest.approx(((8.0 - w_a) + 0.5) / 2)
    swapped = compare_series(scores, primary="t08")
    assert swapped.series[0] == "t08" and swapped.models == ("a", "b", "c")
    with pytest.raises(ConfigError):
        compare_series(scores, primary="nope")
