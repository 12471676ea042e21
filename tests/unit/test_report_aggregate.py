"""aggregate.analyse_cubes on hand-built cubes: edge cases every report must survive."""

from __future__ import annotations

import datetime as dt
import json
import math
import re

import jsonschema
import pytest

from factories import score_cube
from kubejury.errors import InputError
from kubejury.files.benchmark import Benchmark, Question
from kubejury.report import render_all
from kubejury.report.aggregate import Analysis, analyse_cubes, null_counts_from_cube
from kubejury.report.json_report import load_schema
from kubejury.stats.cube import ScoreCube
from kubejury.stats.scoring import ScoringConfig

QUESTIONS = (
    Question("q1", "Law", 1, "?", "!"),
    Question("q2", "Law", 2, "?", "!"),
    Question("q3", "Med", 1, "?", "!"),
    Question("q4", "Med", 2, "?", "!"),
)
BENCHMARK = Benchmark(QUESTIONS, "bench.jsonl")
CONFIG = ScoringConfig(level_weights={1: 1.0, 2: 1.0}, bootstrap_samples=40)


# The same questions in cube order, (level, domain, id).
CUBE_QUESTIONS = (("q1", "Law", 1), ("q3", "Med", 1), ("q2", "Law", 2), ("q4", "Med", 2))


def cube(
    series: str, models: tuple[str, ...], judges: tuple[str, ...], scores: list[list[list[float]]]
) -> ScoreCube:
    return score_cube(scores, series=series, models=models, judges=judges, questions=CUBE_QUESTIONS)


def test_hand_computed_values_reach_report_json() -> None:
    nan = math.nan
    one = cube(
        "s",
        ("a", "b"),
        ("j1", "j2"),
        [
            [[8, 10], [6, 6], [4, nan], [7, 9]],  # a: S = 9, 6, 4, 8
            [[5, 5], [5, 5], [5, 5], [nan, nan]],  # b: last answer unscored
        ],
    )
    analysis = analyse_cubes(
        BENCHMARK, {"s": one}, CONFIG, generated_at=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    )
    doc = json.loads(render_all(analysis)["report.json"])
    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)
    a = doc["series"]["s"]["models"]["a"]
    # Level 1: Law 9, Med 6 -> 7.5; level 2: Law 4, Med 8 -> 6; W = (7.5 + 6) / 2; D = 1.5.
    assert a["levels"] == {"1": 7.5, "2": 6.0}
    assert a["weighted"] == 6.75 and a["degradation"] == 1.5
    # σ over answers with two scores: q1 (8, 10) -> 1, q3 (6, 6) -> 0, q4 (7, 9) -> 1.
    assert a["judge_sigma"] == pytest.approx(2 / 3, abs=1e-4)
    assert a["domains"]["Law"]["weighted"] == 6.5 and a["domains"]["Med"]["weighted"] == 7.0
    b = doc["series"]["s"]["models"]["b"]
    assert b["n_unscored"] == 1 and b["n_scored"] == 3
    assert b["levels"] == {"1": 5.0, "2": 5.0}  # level 2 has only Law scored
    assert doc["series"]["s"]["ranking"] == ["a", "b"]
    assert doc["series"]["s"]["domain_leaders"] == {"Law": "a", "Med": "a"}
    # Null counts come from the cube when the loader gave none: j2 misses q2 of a, both miss q4 of b.
    assert doc["series"]["s"]["judges"]["parse_failures"] == {"j1": 1, "j2": 2}
    assert doc["generated_at"] == "2026-01-02T03:04:05Z"


def test_one_judge_one_series_no_sizes_still_renders() -> None:
    single = cube("only", ("a", "b"), ("j",), [[[9], [8], [7], [6]], [[5], [5], [5], [5]]])
    analysis = analyse_cubes(BENCHMARK, {"only": single}, CONFIG)
    files = render_all(analysis)
    doc = json.loads(files["report.json"])
    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)
    series = doc["series"]["only"]
    assert series["judges"]["applicable"] is False and series["judges"]["krippendorff_alpha"] is None
    assert series["models"]["a"]["judge_sigma"] is None  # no answer has two judges
    assert series["self_preference"]["applicable"] is False
    assert doc["series_comparison"]["models"] == {}
    md = files["report.md"].decode()
    assert "Not applicable" in md and "Only one series" in md
    html = files["report.html"].decode()
    assert 'data-plot="size-only"' not in html and 'data-plot="judges-only"' not in html
    assert 'data-plot="forest-only"' in html and 'data-plot="levels-only"' in html
    assert not re.search(r"nan", md, re.I)


def test_series_comparison_in_report_json_with_null_when_missing() -> None:
    first = cube("p", ("a", "b"), ("j",), [[[9], [9], [9], [9]], [[5], [5], [5], [5]]])
    second = cube("q", ("a",), ("j",), [[[8], [8], [8], [8]]])
    third = cube("r", ("b", "c"), ("j",), [[[6], [6], [6], [6]], [[1], [1], [1], [1]]])
    analysis = analyse_cubes(BENCHMARK, {"p": first, "q": second, "r": third}, CONFIG)
    files = render_all(analysis)
    comparison = json.loads(files["report.json"])["series_comparison"]
    assert comparison["series"] == ["p", "q", "r"] and list(comparison["models"]) == ["a", "b"]
    assert comparison["models"]["a"]["q"] == {"weighted": 8.0, "delta": -1.0}
    assert comparison["models"]["a"]["r"] == {"weighted": None, "delta": None}
    assert comparison["models"]["b"]["r"]["delta"] == 1.0 and comparison["models"]["b"]["p"]["delta"] == 0.0
    assert comparison["mean_delta"] == {"p": 0.0, "q": -1.0, "r": 1.0}
    md = files["report.md"].decode()
    assert "| a | 9.00 | 8.00 | – | -1.00 | – |" in md
    assert "| **mean over models** |  |  |  | -1.00 | +1.00 |" in md


def test_primary_defaults_to_the_first_series_and_reports_put_it_first() -> None:
    first = cube("later", ("a",), ("j",), [[[9], [9], [9], [9]]])
    second = cube("earlier", ("a",), ("j",), [[[8], [8], [8], [8]]])
    analysis: Analysis = analyse_cubes(BENCHMARK, {"later": first, "earlier": second}, CONFIG)
    assert analysis.primary_series == "later"
    md = render_all(analysis)["report.md"].decode()
    assert md.index("## Series later (primary)") < md.index("## Series earlier")
    assert "| a | 9.00 | 8.00 | -1.00 |" in md


def test_no_cubes_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no judgments"):
        analyse_cubes(BENCHMARK, {}, CONFIG)


def test_null_counts_from_cube_ignore_answers_without_records() -> None:
    c = cube("s", ("a",), ("j1", "j2"), [[[1, math.nan], [1, 1], [math.nan, math.nan], [2, 2]]])
    c.has_record[0, 2] = False  # never asked: not a parse failure
    assert null_counts_from_cube(c) == {"j1": 0, "j2": 1}


def test_all_tens_render_without_errors() -> None:
    # Degenerate data: every statistic of spread is undefined, every interval has zero width.
    perfect = cube("s", ("a", "b"), ("j1", "j2"), [[[10, 10]] * 4, [[10, 10]] * 4])
    analysis = analyse_cubes(BENCHMARK, {"s": perfect}, CONFIG)
    files = render_all(analysis)
    doc = json.loads(files["report.json"])
    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)
    series = doc["series"]["s"]
    assert series["models"]["a"]["weighted"] == 10.0 and series["models"]["a"]["weighted_ci95"] == [
        10.0,
        10.0,
    ]
    assert series["prob_better"]["a"]["b"] == 0.5
    assert series["judges"]["krippendorff_alpha"] is None
    html = files["report.html"].decode()
    for kind in ("forest", "levels", "domains", "judges"):
        assert f'data-plot="{kind}-s"' in html


def test_a_single_model_is_not_said_to_beat_other_models() -> None:
    alone = cube("s", ("only",), ("j1", "j2"), [[[8, 9], [6, 7], [5, 5], [7, 8]]])
    markdown = render_all(analyse_cubes(BENCHMARK, {"s": alone}, CONFIG))["report.md"].decode()
    assert "ahead of every other model" not in markdown
    assert "the only model in this series" in markdown


def test_judgments_already_loaded_aggregate_as_their_file_does() -> None:
    from pathlib import Path

    from kubejury.files.tables import load_judgments
    from kubejury.report.aggregate import aggregate

    data = Path(__file__).parent / "data" / "engine"
    config = ScoringConfig(bootstrap_samples=20, seed=3)
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    from_file = aggregate(
        data / "benchmark.jsonl", data / "judgments.jsonl", config=config, generated_at=stamp
    )
    loaded = load_judgments(data / "judgments.jsonl")
    given = aggregate(data / "benchmark.jsonl", loaded, config=config, generated_at=stamp)
    assert list(given.series) == list(from_file.series)
    for name, series in given.series.items():
        assert series.scores.weighted.tolist() == from_file.series[name].scores.weighted.tolist()
        assert series.parse_failures == from_file.series[name].parse_failures
    assert given.inputs["judgments"] == [str(data / "judgments.jsonl")]
