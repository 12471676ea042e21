"""report.html: the report's blocks and figures in ONE self-contained file.

No network at view time: the stylesheet is inline, figures are inline SVG (see :mod:`.plots`),
there is no script, no web font and no link to anything outside the file except in-page anchors.
Every text from the data is escaped.
"""

from __future__ import annotations

import re
from html import escape

from kubejury.report import plots
from kubejury.report.blocks import Block, Heading, Inline, Paragraph, Plot, Strong, Table, report_blocks
from kubejury.report.view import Report, ReportView, SeriesView, judge_matrix

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       margin: 0; color: #1d1d1f; background: #fafafa; line-height: 1.45; }
header { background: #1f3a5f; color: #fff; padding: 1.2rem 2rem; }
header h1 { margin: 0 0 .3rem 0; }
header p { margin: .2rem 0; opacity: .9; }
nav a { color: #cfe3ff; margin-right: 1rem; }
main { padding: 1rem 2rem 3rem 2rem; max-width: 1400px; }
h2 { border-bottom: 2px solid #1f3a5f; padding-bottom: .2rem; margin-top: 2.5rem; }
h3 { margin-top: 1.8rem; color: #1f3a5f; }
table { border-collapse: collapse; margin: .4rem 0 1.2rem 0; font-size: .86rem; background: #fff; }
caption { caption-side: top; white-space: nowrap; text-align: left; font-style: italic; color: #444; padding: .2rem 0; }
th, td { border: 1px solid #d0d7de; padding: .25rem .55rem; white-space: nowrap; }
th { background: #eef2f7; }
td.r { text-align: right; font-variant-numeric: tabular-nums; }
td.c { text-align: center; }
tbody tr:nth-child(even) { background: #f6f8fa; }
figure { margin: .5rem 0 1.5rem 0; background: #fff; border: 1px solid #e1e4e8; padding: .5rem;
         display: inline-block; max-width: 100%; box-sizing: border-box; overflow-x: auto; }
/* A figure shrinks with the page only down to its min-width (set per figure, see _legible): on a
   phone it scrolls sideways in its own frame instead of turning its labels into specks. */
figure svg { display: block; max-width: 100%; height: auto; }
@media (max-width: 40rem) {
  header { padding: 1rem; }
  main { padding: .5rem 1rem 2rem 1rem; }
}
.scroll { overflow-x: auto; }
"""


def _inline(part: Inline) -> str:
    if isinstance(part, Strong):
        return f"<strong>{escape(part.text)}</strong>"
    return escape(part)


def _table(block: Table) -> str:
    classes = {"r": ' class="r"', "c": ' class="c"', "l": ""}
    parts = ['<div class="scroll"><table>']
    if block.caption:
        parts.append(f"<caption>{escape(block.caption)}</caption>")
    parts.append(
        "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in block.header) + "</tr></thead><tbody>"
    )
    for row in block.rows:
        cells = []
        for index, cell in enumerate(row):
            align = block.align[index] if index < len(block.align) else "l"
            cells.append(f"<td{classes.get(align, '')}>{_inline(cell)}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table></div>")
    return "".join(parts)


#: Smallest scale of a figure against its viewBox (user units are points: 1.33 px at natural size).
#: The smallest text in the figures is 7 units, so 1.2 keeps every label at 8.4 px or more.
_MIN_FIGURE_SCALE = 1.2
_VIEWBOX_WIDTH = re.compile(r'<svg\b[^>]*?\bviewBox="[-\d.]+ [-\d.]+ ([\d.]+) ')


def _legible(svg: str) -> str:
    """The SVG with a min-width that keeps its smallest text readable when the page is narrow."""
    match = _VIEWBOX_WIDTH.search(svg)
    if match is None:
        return svg
    width = float(match.group(1)) * _MIN_FIGURE_SCALE
    return svg.replace("<svg ", f'<svg style="min-width: {width:.0f}px" ', 1)


def _plot(block: Plot, report: ReportView) -> str:
    view = next((s for s in report.series if s.name == block.series), None)
    if view is None:
        return ""
    svg = _draw(block.kind, view)
    if svg is None:
        return ""
    return f'<figure data-plot-kind="{escape(block.kind)}">{_legible(svg)}</figure>'


def _draw(kind: str, view: SeriesView) -> str | None:
    if kind == "size":
        return plots.size_plot(view)
    if kind == "levels":
        return plots.level_plot(view)
    if kind == "domains":
        return plots.domain_heatmap(view)
    if kind == "forest":
        return plots.forest_plot(view)
    if kind == "equivalence":
        return plots.equivalence_plot(view)
    if kind == "judges":
        matrix = judge_matrix(view.judges, "spearman")
        return None if matrix is None else plots.judge_heatmap(view, matrix[0], matrix[1], "Spearman ρ")
    raise ValueError(f"unknown plot kind {kind!r}")


def render_block(block: Block, report: ReportView) -> str:
    if isinstance(block, Heading):
        ident = f' id="{escape(block.anchor)}"' if block.anchor else ""
        return f"<h{block.level}{ident}>{escape(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return "<p>" + "".join(_inline(p) for p in block.parts) + "</p>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Plot):
        return _plot(block, report)
    raise TypeError(f"unknown block {block!r}")


def render_html(document: Report) -> str:
    """report.html from a report.json document."""
    report, blocks = report_blocks(document)
    title, intro, body = blocks[0], [], []
    # The title and the paragraphs right after it go into the page header.
    rest = blocks[1:]
    while rest and isinstance(rest[0], Paragraph):
        intro.append(rest.pop(0))
    body = rest
    links = "".join(
        f'<a href="#{escape(b.anchor)}">{escape(b.text)}</a>'
        for b in body
        if isinstance(b, Heading) and b.level == 2 and b.anchor
    )
    heading = title.text if isinstance(title, Heading) else "kubejury report"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(heading)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{escape(heading)}</h1>",
        *(render_block(b, report) for b in intro),
        f"<nav>{links}</nav></header><main>",
        *(render_block(b, report) for b in body),
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"
