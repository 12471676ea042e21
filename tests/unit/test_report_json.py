"""report.json from a real aggregation of a small fixture run: schema, required keys, values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from report_fixture import JUDGES, MODELS, SERIES, Fixture, write_fixture

from kubejury.errors import InputError
from kubejury.report import write_reports
from kubejury.report.aggregate import Analysis, JudgeRelation, aggregate
from kubejury.report.json_report import SCHEMA_VERSION, build_report, clean, dumps, load_schema
from kubejury.report.models_file import load_models_file
from kubejury.stats.scoring import ScoringConfig

BOOTSTRAP = 100


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return write_fixture(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def analysis(fixture: Fixture) -> Analysis:
    facts = load_models_file(fixture.models)
    return aggregate(
        fixture.benchmark,
        fixture.judgments_dir,
        answers=fixture.answers_dir,
        experts=fixture.experts,
        model_infos=facts.models,
        judge_relations=facts.judges,
        config=ScoringConfig(bootstrap_samples=BOOTSTRAP, seed=3),
    )


@pytest.fixture(scope="module")
def document(analysis: Analysis) -> dict[str, Any]:
    return build_report(analysis)


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def test_report_validates_against_the_schema(document: dict[str, Any]) -> None:
    jsonschema.validate(document, load_schema(), cls=jsonschema.Draft202012Validator)
    assert document["schema_version"] == SCHEMA_VERSION == 1


def test_schema_rejects_a_report_missing_a_required_key(document: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(document))
    model = next(iter(broken["series"]["t0"]["models"].values()))
    del model["weighted_ci95"]
    with pytest.raises(jsonschema.ValidationError, match="weighted_ci95"):
        jsonschema.validate(broken, load_schema(), cls=jsonschema.Draft202012Validator)


def test_required_keys_have_the_study_values(document: dict[str, Any], analysis: Analysis) -> None:
    for name, result in analysis.series.items():
        series = document["series"][name]
        scores = result.scores
        assert series["ranking"] == list(scores.ranking)
        assert series["domain_leaders"] == scores.domain_leaders
        assert series["judges"]["krippendorff_alpha"] == pytest.approx(
            result.agreement.krippendorff_alpha, abs=1e-4
        )
        for i, model in enumerate(scores.models):
            entry = series["models"][model]
            assert set(entry["levels"]) == {"1", "2", "3"}
            for li, level in enumerate(scores.levels):
                assert entry["levels"][str(level)] == pytest.approx(scores.level_scores[i, li], abs=5e-5)
            assert entry["weighted"] == pytest.approx(scores.weighted[i], abs=5e-5)
            low, high = entry["weighted_ci95"]
            assert low <= entry["weighted"] <= high
            assert entry["degradation"] == pytest.approx(scores.degradation[i], abs=5e-5)
            assert entry["judge_sigma"] == pytest.approx(scores.judge_sigma[i], abs=5e-5)
            assert entry["tier"] == scores.tiers[model]
            assert entry["n_scored"] == scores.n_scored[i]
            assert entry["n_unscored"] == scores.n_unscored[i]
            for di, domain in enumerate(scores.domains):
                assert entry["domains"][domain]["weighted"] == pytest.approx(
                    scores.domain_weighted[i, di], abs=5e-5
                )
            assert entry["rank"] == list(scores.ranking).index(model) + 1


def test_the_unscored_answer_and_parse_failures_are_counted(
    document: dict[str, Any], fixture: Fixture
) -> None:
    for series in SERIES:
        doc = document["series"][series]
        assert doc["models"]["delta-26b-a4b"]["n_unscored"] == 1
        assert doc["models"]["alpha-27b"]["n_unscored"] == 0
        assert doc["judges"]["parse_failures"] == fixture.null_scores[series]
        assert doc["n_judgments"] == fixture.n_judgments[series]
        assert doc["n_questions"] == fixture.n_questions


def test_every_extra_section_is_present(document: dict[str, Any]) -> None:
    series = document["series"]["t0"]
    n = len(MODELS)
    assert set(series["prob_better"]) == set(MODELS)
    assert all(len(row) == n for row in series["prob_better"].values())
    assert series["prob_better"]["alpha-27b"]["alpha-27b"] is None
    a, b = "alpha-27b", "gamma-9b"
    assert series["prob_better"][a][b] + series["prob_better"][b][a] == pytest.approx(1.0, abs=1e-3)
    assert series["leading_group"][0] == series["ranking"][0]
    assert series["judges"]["judges"] == sorted(JUDGES)
    assert len(series["judges"]["spearman"]) == len(JUDGES)
    pairs = series["self_preference"]["pairs"]
    assert [(p["judge"], p["model"], p["relation"]) for p in pairs] == [
        ("beta-judge", "beta-120b", "same_as")
    ]
    assert pairs[0]["difference"]["mean"] > 0  # the fixture's beta-judge is lenient to beta-120b
    assert {r["judge"] for r in series["leave_one_judge_out"]["removals"]} == set(JUDGES)
    assert series["verbosity"]["applicable"] is True
    assert series["selection"]["best_overall"] == series["ranking"][0]
    assert series["experts"]["applicable"] is True and series["experts"]["n_matched"] > 0
    assert series["models"]["alpha-27b"]["levels_ci95"]["1"] is not None


def test_run_metadata_and_models(document: dict[str, Any], fixture: Fixture) -> None:
    assert document["config"]["bootstrap_samples"] == BOOTSTRAP
    assert document["config"]["seed"] == 3
    assert document["config"]["level_weights"] == {"1": 0.6, "2": 0.8, "3": 1.0}
    assert document["inputs"]["benchmark"] == str(fixture.benchmark)
    assert len(document["inputs"]["judgments"]) == len(JUDGES) * len(SERIES)
    assert document["models_info"]["delta-26b-a4b"]["parameters"] == 26e9
    assert document["models_info"]["delta-26b-a4b"]["parameters_label"] == "26B-A4B"
    assert document["judges_info"] == {"beta-judge": {"same_as": "beta-120b", "family": "beta"}}
    assert document["primary_series"] == "t0"
    assert document["benchmark"]["questions"]["DevOps"] == {"1": 4, "2": 4, "3": 3}


def test_series_comparison_is_the_difference_from_the_primary(document: dict[str, Any]) -> None:
    comparison = document["series_comparison"]
    assert comparison["primary"] == "t0" and comparison["series"] == list(SERIES)
    for model, per in comparison["models"].items():
        w0 = document["series"]["t0"]["models"][model]["weighted"]
        w8 = document["series"]["t0.8"]["models"][model]["weighted"]
        assert per["t0"]["delta"] == 0.0
        assert per["t0.8"]["delta"] == pytest.approx(w8 - w0, abs=2e-4)


def test_no_nan_and_four_decimals(document: dict[str, Any]) -> None:
    text = dumps(document)
    assert "NaN" not in text and "Infinity" not in text
    for number in _numbers(document):
        assert math.isfinite(number)
        assert round(number, 4) == number


def test_clean_turns_nan_into_null_and_rounds() -> None:
    assert clean({"a": math.nan, "b": np.float64(1.234567), 3: [np.inf, np.int64(2)], "c": -0.00001}) == {
        "a": None,
        "b": 1.2346,
        "3": [None, 2],
        "c": 0.0,
    }
    with pytest.raises(ValueError):
        dumps({"x": math.nan})


def test_bootstrap_off_gives_null_intervals(fixture: Fixture) -> None:
    analysis = aggregate(fixture.benchmark, fixture.judgments_dir, config=ScoringConfig(bootstrap_samples=0))
    doc = build_report(analysis)
    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)
    model = doc["series"]["t0"]["models"]["alpha-27b"]
    assert model["weighted_ci95"] is None and model["levels_ci95"]["1"] is None
    assert doc["series"]["t0"]["prob_better"] is None and doc["series"]["t0"]["leading_group"] is None
    assert doc["series"]["t0"]["verbosity"]["applicable"] is False  # no answers given
    assert doc["series"]["t0"]["experts"] is None


def test_same_seed_same_report_different_seed_different_intervals(fixture: Fixture) -> None:
    def ci(seed: int) -> list[float]:
        config = ScoringConfig(bootstrap_samples=50, seed=seed)
        doc = build_report(
            aggregate(fixture.benchmark, str(fixture.judgments_dir / "t0-*.jsonl"), config=config)
        )
        interval: list[float] = doc["series"]["t0"]["models"]["gamma-9b"]["weighted_ci95"]
        return interval

    assert ci(1) == ci(1)
    assert ci(1) != ci(2)


def test_primary_series_can_be_chosen_and_must_exist(fixture: Fixture) -> None:
    analysis = aggregate(
        fixture.benchmark,
        fixture.judgments_dir,
        config=ScoringConfig(bootstrap_samples=0, primary_series="t0.8"),
    )
    assert list(analysis.series) == ["t0.8", "t0"]
    assert build_report(analysis)["series_comparison"]["primary"] == "t0.8"
    with pytest.raises(InputError, match="primary series 'nope'"):
        aggregate(
            fixture.benchmark,
            fixture.judgments_dir,
            config=ScoringConfig(bootstrap_samples=0, primary_series="nope"),
        )


def test_judge_relations_by_family(fixture: Fixture) -> None:
    facts = load_models_file(fixture.models)
    analysis = aggregate(
        fixture.benchmark,
        fixture.judgments_dir,
        model_infos=facts.models,
        judge_relations={"beta-judge": JudgeRelation(family="beta")},
        config=ScoringConfig(bootstrap_samples=20),
    )
    pairs = analysis.series["t0"].self_preference.pairs
    assert [(p.judge, p.model, p.relation) for p in pairs] == [("beta-judge", "beta-120b", "family")]


def test_write_reports_writes_three_files_atomically(analysis: Analysis, tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = write_reports(analysis, out)
    assert set(written) == {"report.json", "report.md", "report.html"}
    assert sorted(p.name for p in out.iterdir()) == [
        "report.html",
        "report.json",
        "report.md",
    ]  # no temp files
    assert json.loads((out / "report.json").read_text(encoding="utf-8")) == build_report(analysis)
    assert (out / "report.md").read_text(encoding="utf-8").startswith("# kubejury report")
    # Rewriting replaces the files whole.
    write_reports(analysis, out)
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
