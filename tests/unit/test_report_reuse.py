"""The report's "Reused from earlier runs" section (issue 24): per model and judge, what a run copied
and from which run, and why the rest was not copied — in report.md and report.html alike, and
nowhere in a run that reused nothing."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from report_fixture import JUDGES, MODELS, Fixture, write_fixture

from kubejury.records.reuse import Refusal, ReuseDocument, StageReuse
from kubejury.report import render_all
from kubejury.report.aggregate import Analysis, aggregate
from kubejury.report.blocks import MAX_REFUSALS
from kubejury.report.json_report import load_schema
from kubejury.stats.scoring import ScoringConfig

OLD, NEW = list(MODELS)[:2], list(MODELS)[2:]
QUESTIONS = 9


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    fixture: Fixture = write_fixture(tmp_path_factory.mktemp("run"))
    return aggregate(
        fixture.benchmark,
        fixture.judgments_dir,
        answers=fixture.answers_dir,
        config=ScoringConfig(bootstrap_samples=50, seed=3),
    )


def copied_old_models(refused: tuple[Refusal, ...] = ()) -> ReuseDocument:
    """Every answer of the old models copied from ``board``; judge-a's judgments of them too; the
    refusals put on judge-b's stage."""
    stages = [StageReuse("generate", "t0", m, QUESTIONS, {"board": QUESTIONS}, complete=True) for m in OLD]
    stages += [StageReuse("generate", "t0", m, QUESTIONS) for m in NEW]
    judged = QUESTIONS * len(OLD)
    stages.append(StageReuse("judge", "t0", JUDGES[0], judged, {"board": judged}, covered_models=tuple(OLD)))
    stages.append(StageReuse("judge", "t0", JUDGES[1], judged, refused=refused))
    return ReuseDocument(sources=("board",), stages=tuple(stages))


def test_the_section_names_each_model_and_judge_with_its_copies_and_source(analysis: Analysis) -> None:
    reason = f"judge {JUDGES[1]}: prompt template changed"
    files = render_all(analysis, reuse=copied_old_models((Refusal("board", reason),)))
    markdown = files["report.md"].decode()
    assert "## Reused from earlier runs" in markdown
    section = markdown.split("## Reused from earlier runs", 1)[1].split("\n## ", 1)[0]
    assert f"copied {QUESTIONS * len(OLD)} answers and {QUESTIONS * len(OLD)} judgments" in section
    for model in OLD:
        assert f"| {model} | generation | {QUESTIONS} | {QUESTIONS} | board ({QUESTIONS}) |" in section
    for model in NEW:
        assert f"| {model} | generation | 0 | {QUESTIONS} | – |" in section
    assert (
        f"| {JUDGES[0]} | judging | {QUESTIONS * 2} | {QUESTIONS * 2} | board ({QUESTIONS * 2}) |" in section
    )
    assert reason in section
    html = files["report.html"].decode()
    assert "Reused from earlier runs" in html and reason in html and 'href="#reuse"' in html
    document = json.loads(files["report.json"])
    jsonschema.validate(document, load_schema())
    assert document["reuse"]["models"][OLD[0]]["from_runs"] == {"board": QUESTIONS}


def test_refusals_are_listed_up_to_a_cap_then_counted(analysis: Analysis) -> None:
    many = tuple(Refusal("board", f"question q{i} changed: its answer is made again", 1) for i in range(33))
    markdown = render_all(analysis, reuse=copied_old_models(many))["report.md"].decode()
    assert f"question q{MAX_REFUSALS - 1} changed" in markdown
    assert f"question q{MAX_REFUSALS} changed" not in markdown
    assert f"… and {33 - MAX_REFUSALS} more (report.json → reuse.refused)." in markdown


def test_a_run_that_reused_nothing_has_no_section(analysis: Analysis) -> None:
    files = render_all(analysis)
    assert "reuse" not in json.loads(files["report.json"])
    assert "Reused from earlier runs" not in files["report.md"].decode()
    assert "Reused from earlier runs" not in files["report.html"].decode()


def test_the_schema_doc_describes_the_section() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "report-schema.md").read_text()
    assert "`reuse`" in docs and "from_runs" in docs and "missing_sources" in docs
