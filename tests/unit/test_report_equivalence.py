"""Compared pairs in the three reports: report.json's comparisons, report.md's section and summary
line, report.html's one plot of differences against the margin band."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import numpy as np
import pytest

from kubejury.records.report import ReportDocument, report_schema
from kubejury.report import render_document
from kubejury.report.aggregate import analyse_cubes
from kubejury.report.json_report import build_document
from kubejury.stats.equivalence import ComparisonRequest
from kubejury.stats.scoring import ScoringConfig
from kubejury.testing.calibration import SERIES, draw_benchmark, equal_shape
from kubejury.testing.equivalence_calibration import AT_MARGIN, REFERENCE, TWIN, equivalence_population

REQUESTS = (
    ComparisonRequest(TWIN, REFERENCE, 0.25),
    ComparisonRequest(AT_MARGIN, REFERENCE, 0.25, "automatic"),
    ComparisonRequest(REFERENCE, "absent", 0.5),
)


def document_of(requests: tuple[ComparisonRequest, ...], per_cell: int = 6) -> ReportDocument:
    bench, cube = draw_benchmark(equivalence_population(), equal_shape(per_cell), np.random.default_rng(4))
    config = ScoringConfig(bootstrap_samples=300, seed=2)
    return build_document(analyse_cubes(bench, {SERIES: cube}, config, comparisons=requests))


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return {name: data.decode("utf-8") for name, data in render_document(document_of(REQUESTS)).items()}


def test_report_json_lists_every_pair_with_its_verdict_and_validates(files: dict[str, str]) -> None:
    plain: dict[str, Any] = json.loads(files["report.json"])
    jsonschema.validate(plain, report_schema(), cls=jsonschema.Draft202012Validator)
    twin, margin, absent = plain["series"][SERIES]["comparisons"]
    assert (twin["a"], twin["b"], twin["origin"], margin["origin"]) == (TWIN, REFERENCE, "spec", "automatic")
    for entry in (twin, margin):
        w = entry["weighted"]
        assert entry["verdict"] in ("equivalent", "different", "undecided")
        assert w["ci90"][0] <= w["difference"] <= w["ci90"][1]
        assert w["ci95"][0] <= w["ci90"][0] and w["ci90"][1] <= w["ci95"][1]
        assert entry["verdict"] != "equivalent" or -0.25 < w["ci90"][0] < w["ci90"][1] < 0.25
        assert sorted(entry["levels"]) == ["1", "2", "3"] and len(entry["domains"]) == 16
        assert entry["questions_needed"]["equivalent"] > 0
    assert absent["verdict"] is None and "absent" in absent["reason"]


def test_report_md_has_the_section_the_table_and_the_summary_line(files: dict[str, str]) -> None:
    text = files["report.md"]
    assert "### Equivalence of paired models" in text
    assert f"| {TWIN} − {REFERENCE} | spec | ±0.25 |" in text
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert f"{AT_MARGIN} − {REFERENCE}: ΔW" in summary and "questions would show equivalence" in summary
    assert "Where the difference lies" in text


def test_report_html_draws_one_equivalence_plot_per_series(files: dict[str, str]) -> None:
    page = files["report.html"]
    assert page.count('data-plot-kind="equivalence"') == 1
    figure = page.split('data-plot-kind="equivalence"', 1)[1].split("</figure>", 1)[0]
    assert "<svg" in figure and f"{TWIN} − {REFERENCE}" in figure


def test_without_comparisons_there_is_no_section_and_no_plot() -> None:
    files = render_document(document_of(()))
    assert b"Equivalence of paired models" not in files["report.md"]
    assert b'data-plot-kind="equivalence"' not in files["report.html"]
    assert json.loads(files["report.json"])["series"][SERIES]["comparisons"] == []
