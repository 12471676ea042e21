"""The reports people read: report.json (the data), report.md (GitHub) and report.html (plots).

report.json is built from an :class:`~kubejury.aggregate.Analysis`; report.md and report.html are
rendered from the report.json document only, so the three always say the same thing and an old
report.json can be re-rendered. Schema: docs/report-schema.md and ``report.schema.json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubejury.report.json_report import SCHEMA_VERSION, build_report, dumps

if TYPE_CHECKING:
    from kubejury.aggregate import Analysis

__all__ = ["SCHEMA_VERSION", "build_report", "dumps", "render_all", "render_document"]


def render_document(document: dict[str, Any]) -> dict[str, bytes]:
    """report.json, report.md and report.html bytes from a report.json document."""
    from kubejury.report.html import render_html
    from kubejury.report.markdown import render_markdown

    return {
        "report.json": dumps(document).encode("utf-8"),
        "report.md": render_markdown(document).encode("utf-8"),
        "report.html": render_html(document).encode("utf-8"),
    }


def render_all(analysis: Analysis) -> dict[str, bytes]:
    """The three report files of ``analysis``, keyed by file name."""
    return render_document(build_report(analysis))
