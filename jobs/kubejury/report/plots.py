"""The report's figures as inline SVG text, drawn with matplotlib's Agg/SVG backends.

report.html must be one file that opens without network, so every figure is returned as an
``<svg>`` element string to be pasted into the page (text kept as text, no external fonts, no
scripts). Figures are built on :class:`matplotlib.figure.Figure` directly, never through pyplot's
global state, and with a fixed hash salt so the same report renders byte-identical SVG and the
clip-path ids of different figures do not collide on one page.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from kubejury.report.view import SeriesView, fmt_parameters

matplotlib.use("Agg")  # never a GUI backend, even when a display is around
# Names are text: a "$" in a model or domain name must not start mathtext (which raised, and then
# no report was written). Text objects read this when created, so it is set before any figure.
matplotlib.rcParams["text.parse_math"] = False

# Twenty distinguishable colours; beyond them a model also gets another marker and line style.
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#393b79",
    "#ad494a",
    "#637939",
    "#e7ba52",
    "#7b4173",
    "#3182bd",
    "#31a354",
    "#756bb1",
    "#fd8d3c",
    "#843c39",
)
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D")
_XML_HEADER = re.compile(r"^.*?(?=<svg)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def _svg(figure: Figure, name: str) -> str:
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"kubejury-{name}"}):
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = _METADATA.sub("", _XML_HEADER.sub("", buffer.getvalue(), count=1), count=1)
    return text.replace("<svg ", f'<svg class="plot" data-plot="{name}" role="img" ', 1)


def _style(index: int) -> tuple[str, str, str]:
    """Colour, line style and marker of the ``index``-th model (the same in every plot)."""
    cycle = index // len(PALETTE)
    return PALETTE[index % len(PALETTE)], LINESTYLES[cycle % len(LINESTYLES)], MARKERS[cycle % len(MARKERS)]


LEGEND_ROWS = 28  # entries per legend column before a second column starts


def _legend_figsize(entries: int) -> tuple[float, float]:
    """Room for a legend of ``entries`` lines at the right of the axes."""
    return 7.5, max(4.5, 0.17 * min(entries, LEGEND_ROWS) + 1.2)


def _legend(axes: Any, entries: int) -> None:
    columns = 1 + (entries - 1) // LEGEND_ROWS if entries > 0 else 1
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, ncol=columns)


def _size_label(value: float, _position: object = None) -> str:
    return fmt_parameters(value, None)


def size_plot(view: SeriesView) -> str | None:
    """W against total parameters (log x) with the W interval and the size Pareto frontier;
    ``None`` when no model's size is known. Colours match the robustness plot."""
    styles = {r.model: _style(i) for i, r in enumerate(view.rows)}
    rows = [r for r in view.rows if r.parameters is not None and r.weighted is not None]
    if not rows:
        return None
    figure = Figure(figsize=_legend_figsize(len(rows)))
    axes = figure.subplots()
    leaders = set(view.leading_group)
    for row in rows:
        color, _, base_marker = styles[row.model]
        x = float(row.parameters or 0.0)
        y = float(row.weighted or 0.0)
        if row.weighted_ci and row.weighted_ci[0] is not None and row.weighted_ci[1] is not None:
            # A percentile interval need not contain the point estimate: never a negative error bar.
            yerr = [[max(0.0, y - row.weighted_ci[0])], [max(0.0, row.weighted_ci[1] - y)]]
            axes.errorbar([x], [y], yerr=yerr, fmt="none", ecolor=color, capsize=3, alpha=0.7)
        marker = "*" if row.model in leaders else base_marker
        label = f"{row.model} ({fmt_parameters(row.parameters, row.parameters_label)})"
        axes.scatter(
            [x], [y], color=color, marker=marker, s=140 if marker == "*" else 50, zorder=3, label=label
        )
    on_frontier = set(view.selection.size_frontier) if view.selection is not None else set()
    frontier = sorted(
        (float(r.parameters or 0.0), float(r.weighted or 0.0)) for r in rows if r.model in on_frontier
    )
    if len(frontier) > 1:
        xs, ys = [p[0] for p in frontier], [p[1] for p in frontier]
        axes.plot(xs, ys, color="#555555", linestyle=":", linewidth=1.2, label="Pareto frontier (size)")
    axes.set_xscale("log")
    sizes = [float(r.parameters or 1.0) for r in rows]
    axes.set_xlim(min(sizes) / 1.6, max(sizes) * 1.6)
    axes.xaxis.set_major_formatter(FuncFormatter(_size_label))
    axes.xaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
    ticks = [t for t in _SIZE_TICKS if min(sizes) / 1.6 <= t <= max(sizes) * 1.6]
    if ticks:
        axes.set_xticks(ticks)
    axes.set_xlabel("total parameters (log scale)")
    axes.set_ylabel("weighted score W (95% CI)")
    axes.set_title(f"W against model size — series {view.name} (★ leading group)")
    axes.grid(True, which="major", alpha=0.3)
    _legend(axes, len(view.rows))
    return _svg(figure, f"size-{view.name}")


_SIZE_TICKS = tuple(m * 10.0**e for e in range(6, 13) for m in (1, 3))


def level_plot(view: SeriesView) -> str | None:
    """Score(m, d) by level, one line per model: the study's robustness lines."""
    if not view.rows or not view.levels:
        return None
    figure = Figure(figsize=_legend_figsize(len(view.rows)))
    axes = figure.subplots()
    for index, row in enumerate(view.rows):
        color, style, marker = _style(index)
        xs = [lv for lv in view.levels if row.levels.get(lv) is not None]
        ys = [float(row.levels[lv] or 0.0) for lv in xs]
        axes.plot(
            xs,
            ys,
            marker=marker,
            color=color,
            linestyle=style,
            label=f"{row.model} (D {row.degradation:.2f})" if row.degradation is not None else row.model,
        )
    axes.set_xticks(list(view.levels))
    axes.set_xticklabels([f"level {lv}" for lv in view.levels])
    axes.set_ylabel("Score(m, level)")
    axes.set_title(f"Score by difficulty level — series {view.name}")
    axes.grid(True, alpha=0.3)
    _legend(axes, len(view.rows))
    return _svg(figure, f"levels-{view.name}")


def _annotated_heatmap(
    values: list[list[float | None]],
    rows: Sequence[str],
    cols: Sequence[str],
    title: str,
    name: str,
    limits: tuple[float, float],
    cmap: str,
    dark: Callable[[float], bool],
) -> str:
    """Heatmap with the value printed in each cell; ``dark(t)`` says when the colour at t ∈ [0, 1] needs white text."""
    vmin, vmax = limits
    width = max(5.0, 1.2 + 0.9 * len(cols))
    height = max(2.5, 1.2 + 0.45 * len(rows))
    figure = Figure(figsize=(width, height))
    axes = figure.subplots()
    data = [[math.nan if v is None else v for v in row] for row in values]
    image = axes.imshow(data, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax)
    axes.set_xticks(range(len(cols)))
    axes.set_xticklabels(list(cols), rotation=35, ha="right", fontsize=8)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels(list(rows), fontsize=8)
    span = (vmax - vmin) or 1.0
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            text = "–" if value is None else f"{value:.2f}"
            color = "white" if value is not None and dark((value - vmin) / span) else "black"
            axes.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    figure.colorbar(image, ax=axes, shrink=0.8)
    axes.set_title(title)
    return _svg(figure, name)


def domain_heatmap(view: SeriesView) -> str | None:
    """Per-domain weighted score, domains × models."""
    if not view.rows or not view.domains:
        return None
    models = [r.model for r in view.rows]
    values = [[r.domains.get(d) for r in view.rows] for d in view.domains]
    finite = [v for row in values for v in row if v is not None]
    if not finite:
        return None
    return _annotated_heatmap(
        values,
        list(view.domains),
        models,
        f"Weighted score by domain — series {view.name}",
        f"domains-{view.name}",
        (min(finite), max(finite)),
        "viridis",
        lambda t: t < 0.45,
    )


def forest_plot(view: SeriesView) -> str | None:
    """W with its bootstrap interval per model, best on top; the leading group highlighted."""
    rows = [r for r in view.rows if r.weighted is not None]
    if not rows:
        return None
    figure = Figure(figsize=(7.5, max(2.5, 0.9 + 0.4 * len(rows))))
    axes = figure.subplots()
    leaders = set(view.leading_group)
    for position, row in enumerate(reversed(rows)):
        color = "#d62728" if row.model in leaders else "#1f77b4"
        y = float(row.weighted or 0.0)
        if row.weighted_ci and row.weighted_ci[0] is not None and row.weighted_ci[1] is not None:
            axes.plot(
                [row.weighted_ci[0], row.weighted_ci[1]], [position, position], color=color, linewidth=2
            )
        axes.plot([y], [position], marker="D", color=color, markersize=6)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([r.model for r in reversed(rows)], fontsize=8)
    axes.set_xlabel("weighted score W with 95% bootstrap interval")
    axes.set_title(f"Confidence intervals — series {view.name} (red: leading group)")
    axes.grid(True, axis="x", alpha=0.3)
    return _svg(figure, f"forest-{view.name}")


def judge_heatmap(
    view: SeriesView, names: Sequence[str], matrix: list[list[float | None]], statistic: str
) -> str | None:
    """Judge × judge agreement matrix (e.g. Spearman ρ)."""
    if len(names) < 2:
        return None
    return _annotated_heatmap(
        matrix,
        list(names),
        list(names),
        f"Judge agreement ({statistic}) — series {view.name}",
        f"judges-{view.name}",
        (-1.0, 1.0),
        "RdBu",
        lambda t: t < 0.2 or t > 0.8,
    )


VERDICT_COLOURS = {"equivalent": "#2ca02c", "different": "#d62728", "undecided": "#7f7f7f"}


def equivalence_plot(view: SeriesView) -> str | None:
    """Each compared pair's ΔW = W(a) − W(b) with its 90% (thick) and 95% (thin) intervals against
    its ±margin band (shaded): equivalent when the thick bar lies inside the band."""
    rows = [c for c in view.comparisons if c.weighted is not None and c.weighted.difference is not None]
    if not rows:
        return None
    figure = Figure(figsize=(7.5, max(2.2, 0.9 + 0.55 * len(rows))))
    axes = figure.subplots()
    reach = 0.0
    for position, c in enumerate(reversed(rows)):
        w = c.weighted
        assert w is not None and w.difference is not None  # filtered above
        colour = VERDICT_COLOURS.get(c.verdict or "undecided", "#7f7f7f")
        axes.fill_betweenx(
            [position - 0.35, position + 0.35], -c.margin, c.margin, color="#2ca02c", alpha=0.12
        )
        for interval, width in ((w.ci95, 1.2), (w.ci90, 4.0)):
            if interval is not None:
                axes.plot(
                    list(interval), [position, position], color=colour, linewidth=width, solid_capstyle="butt"
                )
                reach = max(reach, abs(interval[0]), abs(interval[1]))
        axes.plot([w.difference], [position], marker="D", color=colour, markersize=6)
        reach = max(reach, c.margin, abs(w.difference))
    axes.axvline(0.0, color="#555555", linewidth=0.8)
    axes.set_xlim(-1.15 * reach, 1.15 * reach)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([f"{c.a} − {c.b} ({c.verdict}, ±{c.margin:g})" for c in reversed(rows)], fontsize=8)
    axes.set_xlabel("ΔW = W(a) − W(b): 90% interval (thick), 95% (thin); shaded: ±margin")
    axes.set_title(f"Equivalence of paired models — series {view.name}")
    axes.grid(True, axis="x", alpha=0.3)
    return _svg(figure, f"equivalence-{view.name}")
