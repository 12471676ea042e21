"""The report's "Sequential evaluation" section (issue 27): per model the questions it answered,
why it stopped and W's interval at its last look, in report.json, report.md and report.html alike;
nowhere in a run without a budget."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from report_fixture import MODELS, Fixture, write_fixture

from kubejury.records.sequential import SequentialDocument, from_outcome
from kubejury.report import render_all
from kubejury.report.aggregate import Analysis, aggregate
from kubejury.report.json_report import load_schema
from kubejury.stats.scoring import ScoringConfig
from kubejury.stats.sequential import Budget, evaluate, plan_order

NAMES = tuple(MODELS)


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    fixture: Fixture = write_fixture(tmp_path_factory.mktemp("run"))
    return aggregate(
        fixture.benchmark,
        fixture.judgments_dir,
        answers=fixture.answers_dir,
        config=ScoringConfig(bootstrap_samples=50, seed=3),
    )


def budgeted() -> SequentialDocument:
    """The last model far below the others: it is out before the last look."""
    cells = np.repeat(np.arange(6, dtype=np.int64), 20)
    budget = Budget(min_per_cell=2, seed=2)
    order = plan_order(cells, 2, 3, budget)
    base = np.array([8.0] * (len(NAMES) - 1) + [1.0])[:, None]
    scores = np.clip(base + np.random.default_rng(5).normal(0, 0.6, (len(NAMES), cells.size)), 0, 10)
    outcome = evaluate(NAMES, scores, order, budget, np.array([0.6, 0.8, 1.0]))
    return from_outcome(outcome, budget, order)


def test_the_section_gives_each_models_questions_and_reason(analysis: Analysis) -> None:
    document = budgeted()
    files = render_all(analysis, sequential=document)
    markdown = files["report.md"].decode()
    section = markdown.split("## Sequential evaluation", 1)[1].split("\n## ", 1)[0]
    used = sum(m.questions for m in document.models)
    assert f"the models answered {used} questions where asking all would be {120 * len(NAMES)}" in section
    last = document.state(NAMES[-1])
    assert last.status == "stopped" and last.questions < 120
    assert f"| {NAMES[-1]} | {last.questions} | {last.look} | stopped: {last.reason} |" in section
    html = files["report.html"].decode()
    assert "Sequential evaluation" in html and last.reason in html
    report = json.loads(files["report.json"])
    jsonschema.validate(report, load_schema())
    assert report["sequential"]["models"][NAMES[-1]]["questions"] == last.questions
    assert report["sequential"]["questions_used"] == used


def test_a_run_without_a_budget_has_no_section(analysis: Analysis) -> None:
    files = render_all(analysis)
    assert "sequential" not in json.loads(files["report.json"])
    assert "Sequential evaluation" not in files["report.md"].decode()


def test_the_schema_doc_describes_the_section() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "report-schema.md").read_text()
    assert "`sequential`" in docs and "questions_budgeted" in docs and "running_interval" in docs
