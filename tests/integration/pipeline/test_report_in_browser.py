"""report.html of a finished run, opened in a real browser: headless Chromium over DevTools.

The run is real and small: ``kubejury run`` in a separate process against the loopback
OpenAI-compatible stub (two models, two judges, one of which is also an evaluated model), so the
report has every table and figure a real run has. The page must load without console errors,
every image and inline SVG must decode and be visible, and the layout must stay readable at a
desktop (1280 px) and a phone (390 px) width: text stays inside the viewport, wide tables scroll
inside their own box instead of widening the page. Screenshots are kept under the test's tmp dir.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from headless_chromium import chromium_page

from factories import build_evalrun_yaml, model_entry

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
WIDTHS = (1280, 390)

# Runs in the page; returns what is wrong (empty when nothing is) and how much was checked.
CHECK_PAGE = r"""
(async () => {
  const problems = [];
  const viewport = document.documentElement.clientWidth;
  const box = (el) => el.getBoundingClientRect();
  const hidden = (el) => {
    const style = getComputedStyle(el);
    return style.display === 'none' || style.visibility === 'hidden' || Number(style.opacity) === 0;
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.dataset && el.dataset.plot ? '[' + el.dataset.plot + ']'
      : ' "' + (el.textContent || '').trim().slice(0, 40) + '"');

  const images = [...document.images];
  for (const img of images) {
    try { await img.decode(); } catch (e) { problems.push('image does not decode: ' + img.src.slice(0, 80)); }
    const r = box(img);
    if (!(img.naturalWidth > 0 && r.width > 0 && r.height > 0) || hidden(img))
      problems.push('image not visible: ' + img.src.slice(0, 80));
  }
  const svgs = [...document.querySelectorAll('svg')].filter((s) => !s.parentElement.closest('svg'));
  for (const svg of svgs) {
    const r = box(svg);
    if (!(r.width > 0 && r.height > 0) || hidden(svg)) problems.push('SVG not visible: ' + name(svg));
    // Decoded on its own, as an image: the markup must be a complete, valid SVG document.
    const xml = new XMLSerializer().serializeToString(svg);
    const img = new Image();
    img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(xml);
    try {
      await img.decode();
      if (!(img.naturalWidth > 0)) problems.push('SVG decodes empty: ' + name(svg));
    } catch (e) { problems.push('SVG does not decode: ' + name(svg)); }
    // Figures shrink only so far: their text stays legible, a wider figure scrolls in its own box.
    const viewBox = svg.viewBox && svg.viewBox.baseVal;
    const scale = viewBox && viewBox.width ? r.width / viewBox.width : 1;
    const sizes = [...svg.querySelectorAll('text')].map((t) => parseFloat(getComputedStyle(t).fontSize) * scale);
    if (sizes.length && Math.min(...sizes) < 8)
      problems.push('figure text smaller than 8 px: ' + name(svg) + ' ' + Math.min(...sizes).toFixed(1) + ' px');
    const frame = svg.parentElement;
    if (r.right > viewport + 1) {
      const overflow = getComputedStyle(frame).overflowX;
      if (!['auto', 'scroll'].includes(overflow) || box(frame).right > viewport + 1)
        problems.push('SVG wider than the viewport and not in a scrolling box: ' + name(svg));
    }
  }

  const page = document.documentElement.scrollWidth;
  if (page > viewport + 1) problems.push('the page scrolls sideways: ' + page + ' px content in ' + viewport + ' px');
  const texts = [...document.querySelectorAll('h1, h2, h3, p, nav, figure, li')];
  for (const el of texts) {
    const r = box(el);
    if (r.width > 0 && (r.left < -1 || r.right > viewport + 1))
      problems.push('text block outside the viewport: ' + name(el) + ' [' + r.left + ', ' + r.right + ']');
    const size = parseFloat(getComputedStyle(el).fontSize);
    if (size < 12) problems.push('text smaller than 12 px: ' + name(el));
  }
  const tables = [...document.querySelectorAll('table')];
  let scrolling = 0;
  for (const table of tables) {
    const wrap = table.parentElement;
    const overflow = getComputedStyle(wrap).overflowX;
    if (!['auto', 'scroll'].includes(overflow)) problems.push('table not in a scrolling box: ' + name(table));
    const r = box(wrap);
    if (r.right > viewport + 1) problems.push('table box wider than the viewport: ' + name(table));
    if (wrap.scrollWidth > wrap.clientWidth + 1) scrolling += 1;
  }
  return {problems, images: images.length, svgs: svgs.length, tables: tables.length, scrolling, viewport: window.innerWidth};
})()
"""


def _spec(tmp_path: Path, base_url: str) -> Path:
    spec = tmp_path / "browser.yaml"

    def hosted(name: str, **fields: Any) -> dict[str, Any]:
        return model_entry(name, base_url, runtime="openai", **fields)

    text = build_evalrun_yaml(
        "browser",
        benchmark={
            "uri": (REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri(),
            "filters": {"limitPerCell": 1},
        },
        models=[
            hosted("alpha-model-with-a-rather-long-name", parameters="7B"),
            hosted("beta", parameters="27B"),
        ],
        judges=[hosted("judge-one"), hosted("beta-as-judge", sameAs="beta")],
        scoring={"bootstrapSamples": 100},
        storage={"uri": (tmp_path / "out").as_uri()},
    )
    spec.write_text(text, encoding="utf-8")
    return spec


@pytest.fixture
def finished_run_report(tmp_path: Path, stub_server: Any) -> Path:
    """report.html of a real ``kubejury run`` (separate process) against the loopback stub."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubejury.cli",
            "run",
            str(_spec(tmp_path, stub_server.base_url)),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = list((tmp_path / "out").rglob("report.html"))
    assert len(reports) == 1, reports
    return reports[0]


async def test_report_opens_cleanly_and_stays_readable_at_desktop_and_phone_widths(
    tmp_path: Path, finished_run_report: Path
) -> None:
    checked: dict[int, dict[str, Any]] = {}
    async with chromium_page(tmp_path / "browser") as page:
        for width in WIDTHS:
            await page.open(finished_run_report.as_uri(), width=width, height=900)
            checked[width] = await page.evaluate(CHECK_PAGE)
            await page.screenshot(tmp_path / f"report-{width}px.png")
        errors = page.errors()

    assert errors == []
    for width, result in checked.items():
        assert result["viewport"] == width
        assert result["problems"] == [], f"at {width} px"
        # Not vacuous: the report of a two-model run has figures and tables.
        assert result["svgs"] >= 4 and result["tables"] >= 5, result
    # At phone width some tables are wider than the screen and scroll inside their box.
    assert checked[390]["scrolling"] > 0
    for width in WIDTHS:
        shot = tmp_path / f"report-{width}px.png"
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


async def test_the_page_checks_can_fail(tmp_path: Path) -> None:
    """A page with a broken image, a console error and a table that widens the page fails every check."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><meta name='viewport' content='width=device-width'></head><body>"
        "<p>fine</p><img src='missing.png' alt='x'>"
        "<table><tr>" + "<td style='white-space:nowrap'>a wide cell of text</td>" * 12 + "</tr></table>"
        "<svg width='10' height='10'><circle r='4' cx='5' cy='5'/></svg>"
        "<script>console.error('boom')</script></body></html>",
        encoding="utf-8",
    )
    async with chromium_page(tmp_path / "browser") as page:
        await page.open(bad.as_uri(), width=390, height=900)
        result = await page.evaluate(CHECK_PAGE)
        errors = page.errors()
    assert any("boom" in e for e in errors)
    problems = "\n".join(result["problems"])
    assert "image does not decode" in problems
    assert "the page scrolls sideways" in problems
    assert "table not in a scrolling box" in problems
