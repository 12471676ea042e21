"""report.md: the report's blocks as GitHub-flavoured Markdown (tables, no HTML, no images).

Plots are left to report.html; report.md says where they are so a reader on GitHub knows.
"""

from __future__ import annotations

from kubejury.report.blocks import Block, Heading, Inline, Paragraph, Plot, Strong, Table, report_blocks
from kubejury.report.view import Report

PLOTS_NOTE = (
    "Plots (W against size, robustness lines, domain heatmap, interval forest, judge agreement, equivalence of "
    "paired models) are in report.html."
)
_ALIGN = {"l": "---", "r": "---:", "c": ":---:"}


def _inline(part: Inline, in_table: bool) -> str:
    text = part.text if isinstance(part, Strong) else part
    text = text.replace("\n", " ")
    if in_table:
        text = text.replace("|", "\\|")
    text = text.replace("*", "\\*") if isinstance(part, Strong) else text
    return f"**{text}**" if isinstance(part, Strong) and text and text != "–" else text


def _table(block: Table) -> list[str]:
    lines = [f"_{block.caption}_", ""] if block.caption else []
    lines.append("| " + " | ".join(_inline(h, True) for h in block.header) + " |")
    lines.append("|" + "|".join(_ALIGN.get(a, "---") for a in block.align) + "|")
    lines += ["| " + " | ".join(_inline(c, True) for c in row) + " |" for row in block.rows]
    return [*lines, ""]


def render_block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text, ""]
    if isinstance(block, Paragraph):
        return ["".join(_inline(p, False) for p in block.parts), ""]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Plot):
        return []
    raise TypeError(f"unknown block {block!r}")


def render_markdown(document: Report) -> str:
    """report.md from a report.json document."""
    _, blocks = report_blocks(document)
    lines: list[str] = []
    note_at = next((i for i, b in enumerate(blocks) if i and not isinstance(b, Paragraph)), len(blocks))
    for index, block in enumerate(blocks):
        if index == note_at:
            lines += [PLOTS_NOTE, ""]
        lines += render_block(block)
    return "\n".join(lines).rstrip() + "\n"
