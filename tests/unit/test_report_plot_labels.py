"""Names are shown as written in the report's figures: a ``$`` is text, not matplotlib mathtext.

Before issue 12 §5 a domain or model name holding ``$`` made mathtext raise while drawing, and
no report was written at all.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubejury.report.html import render_html

FIXTURE = Path(__file__).parent / "data" / "report" / "small_report.json"


def test_dollar_signs_in_model_and_domain_names_render_as_text() -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    text = text.replace('"alpha-27b"', '"m$^{$1"').replace('"Law"', '"La$w$ \\\\frac{$"')
    html = render_html(json.loads(text))
    assert 'data-plot="size-t0"' in html and 'data-plot="domains-t0"' in html
    assert "m$^{$1" in html
    assert "La$w$ \\frac{$" in html
