"""report.md and report.html rendered from a fixed report.json document (no analysis involved)."""

from __future__ import annotations

import copy
import html as html_lib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kubejury.report.blocks import counted
from kubejury.report.html import render_html
from kubejury.report.markdown import render_markdown

FIXTURE = Path(__file__).parent / "data" / "report" / "small_report.json"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def html(document: dict[str, Any]) -> str:
    return render_html(document)


def _table_rows(markdown: str, first_cell: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] == first_cell:
            rows.append(cells)
    return rows


def test_markdown_ranking_table_follows_the_ranking_with_w_d_sigma_and_ci(document: dict[str, Any]) -> None:
    text = render_markdown(document)
    primary = document["series"]["t0"]
    lines = [line for line in text.splitlines() if re.match(r"^\| \d+ \| ", line)]
    # The first table of numbered rows is the primary series' ranking.
    ranked = [line.split("|")[2].strip() for line in lines[: len(primary["ranking"])]]
    assert ranked == primary["ranking"]
    top = primary["models"][primary["ranking"][0]]
    first = lines[0]
    assert f"**{top['weighted']:.2f}**" in first
    low, high = top["weighted_ci95"]
    assert f"[{low:.2f}, {high:.2f}]" in first
    assert f"{top['degradation']:.2f}" in first and f"{top['judge_sigma']:.2f}" in first


def test_markdown_has_every_study_table_and_the_extra_sections(document: dict[str, Any]) -> None:
    text = render_markdown(document)
    for title in (
        "### Overall ranking by level",
        "### Leaders by domain",
        "### Judge agreement",
        "### Final tiers",
        "## Series effects",
        "### Self-preference",
        "### Leave-one-judge-out ranking",
        "### Verbosity bias",
        "### Model selection",
    ):
        assert title in text
    assert "### Expert validation" in text
    doc = copy.deepcopy(document)
    for series in doc["series"].values():
        series["experts"] = None
    assert "### Expert validation" not in render_markdown(doc)
    # Domain leaders come from the document, one row per domain.
    for domain, leader in document["series"]["t0"]["domain_leaders"].items():
        assert any(row[1] == f"**{leader}**" for row in _table_rows(text, domain))


def test_markdown_series_effects_show_the_difference_from_the_primary(document: dict[str, Any]) -> None:
    text = render_markdown(document)
    for model, per_series in document["series_comparison"]["models"].items():
        rows = [r for r in _table_rows(text, model) if len(r) == 4]
        assert rows, model
        assert rows[-1][3] == f"{per_series['t0.8']['delta']:+.2f}"


def test_markdown_escapes_pipes_in_names(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    series = doc["series"]["t0"]
    series["models"]["a|b"] = series["models"].pop("alpha-27b")
    series["ranking"] = [("a|b" if m == "alpha-27b" else m) for m in series["ranking"]]
    text = render_markdown(doc)
    assert "a\\|b" in text


def test_missing_values_render_as_a_dash_not_nan(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    model = doc["series"]["t0"]["models"]["delta-26b-a4b"]
    model["levels"]["3"] = None
    model["weighted_ci95"] = None
    text = render_markdown(doc)
    assert "nan" not in text.lower()
    row = next(r for r in _table_rows(text, "4") if r[1] == "delta-26b-a4b")
    assert row[6] == "–"


def test_html_is_self_contained(html: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower()
    assert "@import" not in html and "url(http" not in html
    assert "<link" not in html.lower()
    # The only references are in-page anchors and inline data (matplotlib's colour bars).
    for target in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert target.startswith(("#", "data:image/")), target


def test_html_contains_every_plot_for_every_series(html: str, document: dict[str, Any]) -> None:
    for series in document["series"]:
        for kind in ("size", "levels", "domains", "forest", "judges"):
            assert f'data-plot="{kind}-{series}"' in html, (kind, series)
    assert html.count("<svg") == 5 * len(document["series"])


def test_html_without_sizes_or_judges_leaves_those_plots_out(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    doc["models_info"] = {}
    for series in doc["series"].values():
        series["judges"] = {"judges": ["only"], "applicable": False, "reason": "one judge"}
    html = render_html(doc)
    assert 'data-plot="size-' not in html and 'data-plot="judges-' not in html
    assert 'data-plot="forest-t0"' in html


def test_html_escapes_names(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    series = doc["series"]["t0"]
    series["models"]["<b>x</b>"] = series["models"].pop("alpha-27b")
    series["ranking"] = [("<b>x</b>" if m == "alpha-27b" else m) for m in series["ranking"]]
    html = render_html(doc)
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<b>x</b>" not in html.replace("<svg", "")  # SVG text is escaped by matplotlib as well


def test_html_numbers_match_the_document(html: str, document: dict[str, Any]) -> None:
    primary = document["series"]["t0"]
    for model in primary["ranking"]:
        assert f"<strong>{primary['models'][model]['weighted']:.2f}</strong>" in html


def test_plots_survive_an_interval_that_excludes_the_estimate(document: dict[str, Any]) -> None:
    # Percentile bootstrap intervals need not contain the point estimate.
    from kubejury.report import plots
    from kubejury.report.view import read_report

    doc = copy.deepcopy(document)
    model = doc["series"]["t0"]["models"]["alpha-27b"]
    model["weighted_ci95"] = [model["weighted"] + 0.1, model["weighted"] + 0.2]
    view = read_report(doc).series[0]
    size_svg = plots.size_plot(view)
    forest_svg = plots.forest_plot(view)
    assert size_svg is not None and size_svg.startswith("<svg")
    assert forest_svg is not None and forest_svg.startswith("<svg")


def test_the_summary_says_what_the_benchmarks_size_can_detect(document: dict[str, Any]) -> None:
    doc = copy.deepcopy(document)
    primary = doc["primary_series"]
    doc["series"][primary]["power"] = {
        "paired_se": 0.094,
        "df": 41.6,
        "confidence": 0.95,
        "detection": {"0.2": 0.5634, "0.5": 0.9991},
        "target": 0.8,
        "detectable": 0.2665,
    }
    n = doc["series"][primary]["n_questions"]
    expected = (
        f"With this benchmark's size ({n} questions), a 0.2-point difference in W between two models is "
        "detected 56% of the time and a 0.5-point difference 100% of the time; "
        "80% detection needs about 0.27 points (paired standard error 0.094)."
    )
    summary = render_markdown(doc).split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert expected in summary
    assert html_lib.escape(expected) in render_html(doc)
    doc["series"][primary]["power"] = None  # no bootstrap, or a single model: no sentence
    assert "With this benchmark's size" not in render_markdown(doc)


def test_counts_in_the_series_summary_agree_with_their_number() -> None:
    assert counted(1, "domain") == "1 domain"
    assert counted(2, "domain") == "2 domains"
    assert counted(0, "judgment") == "0 judgments"


def test_a_typed_document_renders_exactly_as_its_json_does(document: dict[str, Any]) -> None:
    from kubejury.records.report import ReportDocument

    typed = ReportDocument.read(document)
    assert render_markdown(typed) == render_markdown(document)
    assert render_html(typed) == render_html(document)


def test_a_document_with_a_field_of_the_wrong_type_is_refused_naming_the_field(
    document: dict[str, Any],
) -> None:
    """Before the typed document a wrong type was shown as a dash; now it is an error naming its path."""
    from kubejury.records.report import ReportError

    doc = copy.deepcopy(document)
    doc["series"]["t0"]["judges"]["krippendorff_alpha"] = "0.7"
    with pytest.raises(ReportError, match=r"series\.t0\.judges\.krippendorff_alpha: "):
        render_markdown(doc)
