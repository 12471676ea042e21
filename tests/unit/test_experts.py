"""Expert validation against the panel's S(q): hand-computed fixture, unmatched accounting, inputs."""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from factories import score_cube
from kubejury.errors import InputError
from kubejury.stats.cube import ScoreCube
from kubejury.stats.experts import PanelScores, agreement_stats, expert_agreement, expert_score
from kubejury.stats.scoring import ScoringConfig

NAN = math.nan


def make_cube() -> ScoreCube:
    """Two models × four questions (q1, q2 law; q3, q4 med) × two judges.

    Panel S(q):   q1  q2  q3  q4
        a          8   6   4   unscored (both judges null)
        b         10   2   5   7
    """
    scores = np.array(
        [
            [[8, 8], [5, 7], [4, NAN], [NAN, NAN]],
            [[10, 10], [2, 2], [6, 4], [7, 7]],
        ],
        dtype=np.float64,
    )
    questions = (("q1", "law", 1), ("q2", "law", 1), ("q3", "med", 1), ("q4", "med", 1))
    return score_cube(scores, models=("a", "b"), judges=("j1", "j2"), questions=questions)


ROWS: dict[str, list[object]] = {
    "question_id": ["q1", "q2", "q1", "q3", "q4", "q2", "q3", "q1"],
    "model": ["a", "a", "b", "a", "a", "b", "b", "a"],
    "expert": ["e1", "e1", "e2", "e2", "e1", "e2", "e1", "e1"],
    "score": [9, 6, 9, 5, 7, None, 3, 1],
    "series": [None, "default", "default", None, None, None, None, "other"],
}


def test_hand_computed_fixture() -> None:
    result = expert_agreement(make_cube(), pl.DataFrame(ROWS))
    assert result.applicable
    assert result.n_rows == 8
    assert result.n_other_series == 1
    assert result.n_matched == 5
    assert result.unmatched == {"panel_unscored": 1, "expert_score_null": 1}
    assert result.n_unmatched == 2
    assert [(r.row, r.reason) for r in result.unmatched_examples] == [
        (5, "panel_unscored"),
        (6, "expert_score_null"),
    ]
    assert result.n_matched + result.n_unmatched + result.n_other_series == result.n_rows
    # matched: expert [9, 6, 9, 5, 3] vs panel [8, 6, 10, 4, 5]; differences [1, 0, -1, 1, -2]
    expert = np.array([9.0, 6, 9, 5, 3])
    panel = np.array([8.0, 6, 10, 4, 5])
    overall = result.overall
    assert overall.n == 5
    assert overall.mean_bias == pytest.approx(-0.2)
    assert overall.mae == pytest.approx(1.0)
    assert overall.pearson == pytest.approx(stats.pearsonr(expert, panel)[0])
    assert overall.spearman == pytest.approx(stats.spearmanr(expert, panel)[0])
    law, med = result.per_domain["law"], result.per_domain["med"]
    assert law.n == 3
    assert (law.mean_bias, law.mae) == pytest.approx((0.0, 2 / 3))
    assert med.n == 2
    assert (med.mean_bias, med.mae) == pytest.approx((-0.5, 1.5))
    assert med.pearson == pytest.approx(-1.0)
    e1, e2 = result.per_expert["e1"], result.per_expert["e2"]
    assert e1.n == 3
    assert (e1.mean_bias, e1.mae) == pytest.approx((-1 / 3, 1.0))
    assert e2.n == 2
    assert (e2.mean_bias, e2.mae) == pytest.approx((0.0, 1.0))
    payload = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert payload["unmatched"]["panel_unscored"] == 1
    assert payload["per_domain"]["med"]["n"] == 2


def test_kappa_against_sklearn() -> None:
    metrics = importlib.import_module("sklearn.metrics")
    rng = np.random.default_rng(4)
    panel = rng.uniform(0, 10, size=100)
    expert = np.clip(panel + rng.normal(0, 1.5, size=100), 0, 10)
    expected = metrics.cohen_kappa_score(
        np.floor(expert + 0.5).astype(int),
        np.floor(panel + 0.5).astype(int),
        weights="quadratic",
        labels=list(range(11)),
    )
    assert agreement_stats(expert, panel).kappa_quadratic == pytest.approx(expected)


def test_plain_sequences_without_series_column() -> None:
    rows = {key: value for key, value in ROWS.items() if key != "series"}
    result = expert_agreement(PanelScores.from_cube(make_cube()), rows)
    assert result.n_other_series == 0
    assert result.n_matched == 6  # the "other" series row now applies: (q1, a) → 1 vs 8
    assert result.overall.mean_bias == pytest.approx((-1 - 7) / 6)


def test_nothing_matches() -> None:
    result = expert_agreement(
        make_cube(), {"question_id": ["q4"], "model": ["a"], "expert": ["e"], "score": [3]}
    )
    assert not result.applicable
    assert result.unmatched["panel_unscored"] == 1
    assert result.overall.n == 0 and math.isnan(result.overall.pearson)
    assert result.per_domain == {} and result.per_expert == {}
    json.dumps(result.to_dict(), allow_nan=False)


def test_empty_table() -> None:
    empty = pl.DataFrame(
        {"question_id": [], "model": [], "expert": [], "score": []},
        schema={"question_id": pl.Utf8, "model": pl.Utf8, "expert": pl.Utf8, "score": pl.Float64},
    )
    result = expert_agreement(make_cube(), empty)
    assert result.n_rows == 0 and not result.applicable


def test_missing_column_is_an_input_error() -> None:
    with pytest.raises(InputError) as error:
        expert_agreement(
            make_cube(), {"question_id": ["q1"], "model": ["a"], "score": [3]}, source="experts.csv"
        )
    assert error.value.field == "expert"
    assert "experts.csv" in str(error.value)


def test_non_numeric_score_is_an_input_error() -> None:
    rows = {"question_id": ["q1"], "model": ["a"], "expert": ["e"], "score": ["high"]}
    with pytest.raises(InputError) as error:
        expert_agreement(make_cube(), pl.DataFrame(rows))
    assert error.value.field == "score"


def test_panel_from_series_scores_matches_cube() -> None:
    from kubejury.stats.scoring import score_series

    cube = make_cube()
    scores = score_series(cube, ScoringConfig(level_weights={1: 1.0}))
    from_scores = PanelScores.from_series_scores(scores, cube)
    from_cube = PanelScores.from_cube(cube)
    np.testing.assert_allclose(from_scores.scores, from_cube.scores, equal_nan=True)
    assert from_scores.question_domains == ("law", "law", "med", "med")


def test_constant_scores_give_undefined_correlations() -> None:
    stats_ = agreement_stats(np.array([7.0, 7.0, 7.0]), np.array([6.0, 7.0, 8.0]))
    assert math.isnan(stats_.pearson)
    assert stats_.mae == pytest.approx(2 / 3)
    assert stats_.to_dict()["pearson"] is None


# ----------------------------------------------------------------------------- issue 29: unknown names
# and numbers Python reads but people do not write are errors naming the file and line.


def file_rows(**changes: list[object]) -> pl.DataFrame:
    """Three expert rows as load_experts gives them (with their file lines), with ``changes``."""
    rows: dict[str, list[object]] = {
        "question_id": ["q1", "q2", "q3"],
        "model": ["a", "a", "b"],
        "expert": ["e1", "e1", "e2"],
        "score": [9.0, 6.0, 5.0],
        "series": [None, None, None],
        "line": [2, 3, 5],
    }
    rows.update(changes)
    return pl.DataFrame(rows)


def test_an_expert_row_naming_a_question_the_benchmark_lacks_is_an_error_naming_file_and_line() -> None:
    with pytest.raises(InputError) as error:
        expert_agreement(make_cube(), file_rows(question_id=["q1", "q9", "q3"]), source="experts.csv")
    assert error.value.source == "experts.csv"
    assert error.value.location == "line 3"
    assert error.value.field == "question_id"
    assert "'q9'" in str(error.value)


def test_an_expert_row_naming_a_model_the_panel_did_not_judge_is_an_error_naming_file_and_line() -> None:
    with pytest.raises(InputError) as error:
        expert_agreement(make_cube(), file_rows(model=["a", "a", "zz"]), source="experts.csv")
    assert (error.value.source, error.value.location, error.value.field) == ("experts.csv", "line 5", "model")
    assert "'zz'" in str(error.value) and "a, b" in str(error.value)


def test_rows_of_another_series_are_not_checked_against_this_series() -> None:
    rows = file_rows(model=["a", "a", "zz"], series=[None, None, "other"])
    result = expert_agreement(make_cube(), rows, source="experts.csv")
    assert (result.n_other_series, result.n_matched) == (1, 2)


def test_rows_given_without_file_lines_are_named_by_their_data_row() -> None:
    rows: dict[str, list[object]] = {
        "question_id": ["q1", "nope"],
        "model": ["a", "a"],
        "expert": ["e", "e"],
        "score": [3, 4],
    }
    with pytest.raises(InputError) as error:
        expert_agreement(make_cube(), rows, source="experts")
    assert error.value.location == "row 2"


@pytest.mark.parametrize(
    ("text", "value"), [("7", 7.0), ("6.5", 6.5), (" 10 ", 10.0), ("0", 0.0), ("-1", -1.0)]
)
def test_an_expert_score_is_a_plain_decimal_number(text: str, value: float) -> None:
    assert expert_score(text) == value


@pytest.mark.parametrize("text", ["1_0", "1e1", "nan", "inf", "0x1", "\u0661\u0660", "6,5", ".5", "", "ten"])
def test_an_expert_score_python_reads_but_people_do_not_write_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="plain decimal"):
        expert_score(text)


@pytest.mark.parametrize("text", ["1_0", "1e1", "nan"])
def test_expert_scores_given_as_text_must_be_plain_decimal_numbers(text: str) -> None:
    rows = {"question_id": ["q1"], "model": ["a"], "expert": ["e"], "score": [text]}
    with pytest.raises(InputError) as error:
        expert_agreement(make_cube(), rows, source="experts")
    assert error.value.field == "score" and error.value.location == "row 1"
