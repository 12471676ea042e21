"""The report's content as a list of format-neutral blocks: headings, paragraphs, tables, plots.

report.md and report.html say the same things in the same order; only the markup differs. This
module decides *what* the report says — the study's tables (overall ranking by level with W, D,
σ; leaders by domain; judge agreement; series effects; final tiers) and what the study lacked
(intervals, leading group, P(better), bias checks, model selection, expert validation) — from a
report.json document; :mod:`.markdown` and :mod:`.html` only decide how it looks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubejury.report.view import (
    Report,
    ReportView,
    SeriesView,
    as_list,
    as_mapping,
    as_number,
    fmt,
    fmt_interval,
    fmt_parameters,
    judge_matrix,
    per_judge,
    read_report,
)

MAX_MATRIX_MODELS = 20  # P(better) matrices wider than this are left to report.json


@dataclass(frozen=True)
class Strong:
    """Emphasised text (the W column, a domain's leader, the best cell of a row)."""

    text: str


Inline = str | Strong


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str | None = None


@dataclass(frozen=True)
class Paragraph:
    parts: tuple[Inline, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]
    align: str  # one of l, r, c per column
    caption: str | None = None


@dataclass(frozen=True)
class Plot:
    """Where a figure goes; ``kind`` is one of size, levels, domains, forest, judges."""

    kind: str
    series: str


Block = Heading | Paragraph | Table | Plot


def para(*parts: Inline) -> Paragraph:
    return Paragraph(tuple(parts))


def _text(value: Any) -> Inline:
    if isinstance(value, Strong):
        return value
    return "–" if value is None else str(value)


def table(
    header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None, caption: str | None = None
) -> Table:
    body = tuple(tuple(_text(c) for c in row) for row in rows)
    return Table(tuple(header), body, align or "l" * len(header), caption)


def anchor(series: str) -> str:
    return "series-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in series)


# --------------------------------------------------------------------------------------------
# Generic rendering of sections whose inner layout belongs to other modules (bias, selection, …)
# --------------------------------------------------------------------------------------------


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = as_number(value)
    if number is not None and not isinstance(value, int):
        return f"{number:.3f}"
    if isinstance(value, list) and len(value) == 2 and all(as_number(v) is not None for v in value):
        return fmt_interval((as_number(value[0]), as_number(value[1])), 3)
    if isinstance(value, list) and all(not isinstance(v, Mapping | list) for v in value):
        return ", ".join("–" if v is None else str(v) for v in value) or "–"
    if isinstance(value, list):
        return f"({len(value)} items, see report.json)"
    return "–" if value is None else str(value)


def _is_object_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _flatten(item: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One level of nested objects folded into ``parent.child`` keys (e.g. an estimate's mean/ci)."""
    flat: dict[str, Any] = {}
    for key, value in item.items():
        if isinstance(value, Mapping) and all(
            not isinstance(v, Mapping | list) or _is_pair(v) for v in value.values()
        ):
            for sub, sub_value in value.items():
                flat[f"{prefix}{key}.{sub}"] = sub_value
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(as_number(v) is not None or v is None for v in value)
    )


def generic(value: Any, skip: Sequence[str] = ("series",)) -> list[Block]:
    """Any JSON value as blocks: a list of objects → one table, an object → key/value table + nested."""
    if value is None:
        return [para("not available")]
    if _is_object_list(value):
        flats = [_flatten(item) for item in value]
        keys: list[str] = []
        for flat in flats:
            keys += [k for k, v in flat.items() if k not in keys and k not in skip and not _is_object_list(v)]
        return [table(keys, ([_scalar(flat.get(k)) for k in keys] for flat in flats), "l" * len(keys))]
    if isinstance(value, Mapping):
        if value.get("applicable") is False:
            return [para(f"Not applicable: {value.get('reason') or 'no reason given'}.")]
        flat_items = [
            (k, v)
            for k, v in value.items()
            if k not in skip and k != "applicable" and not isinstance(v, Mapping) and not _is_object_list(v)
        ]
        nested = [
            (k, v)
            for k, v in value.items()
            if k not in skip and (isinstance(v, Mapping) or _is_object_list(v))
        ]
        blocks: list[Block] = []
        if flat_items:
            blocks.append(table(["", "value"], ([k, _scalar(v)] for k, v in flat_items), "ll"))
        for key, sub in nested:
            blocks += [para(Strong(key)), *generic(sub, skip)]
        return blocks
    return [para(_scalar(value))]


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _ranking(view: SeriesView) -> list[Block]:
    level_heads = [f"L{lv}" for lv in view.levels]
    header = ["#", "Model", "Size", "Quant.", *level_heads, "W", "W 95% CI", "D", "D 95% CI", "σ", "Tier"]
    header += ["scored", "unscored"]
    rows = [
        [
            r.rank,
            r.model,
            fmt_parameters(r.parameters, r.parameters_label),
            r.quantization or "–",
            *[fmt(r.levels[lv]) for lv in view.levels],
            Strong(fmt(r.weighted)),
            fmt_interval(r.weighted_ci),
            fmt(r.degradation),
            fmt_interval(r.degradation_ci),
            fmt(r.sigma),
            r.tier or "–",
            r.n_scored,
            r.n_unscored,
        ]
        for r in view.rows
    ]
    blocks: list[Block] = [
        table(
            header,
            rows,
            "rlll" + "r" * len(level_heads) + "rrrrrcrr",
            "Overall ranking by level (the study's Table 4)",
        )
    ]
    if any(r.levels_ci[lv] is not None for r in view.rows for lv in view.levels):
        blocks.append(
            table(
                ["Model", *level_heads],
                ([r.model, *[fmt_interval(r.levels_ci[lv]) for lv in view.levels]] for r in view.rows),
                "l" + "r" * len(level_heads),
                "95% intervals of Score(m, level)",
            )
        )
    return blocks


def _leading_group(view: SeriesView) -> list[Block]:
    blocks: list[Block] = []
    if view.leading_group:
        names: list[Inline] = []
        for index, model in enumerate(view.leading_group):
            names += [", "] if index else []
            names.append(Strong(model))
        blocks.append(
            para(
                "Leading group (models not distinguishable from the top at 95%, paired bootstrap over questions): ",
                *names,
                ".",
            )
        )
    models = [r.model for r in view.rows if r.model in view.prob_better]
    if models and len(models) <= MAX_MATRIX_MODELS:
        rows = [[a, *(("·" if a == b else fmt(view.prob_better[a].get(b))) for b in models)] for a in models]
        blocks.append(
            table(
                ["", *models],
                rows,
                "l" + "r" * len(models),
                "P(row model has a higher W than column model), paired bootstrap",
            )
        )
    return blocks


def _domain_leaders(view: SeriesView) -> list[Block]:
    rows = []
    for domain in view.domains:
        scored = sorted(
            ((r.domains.get(domain), r) for r in view.rows if r.domains.get(domain) is not None),
            key=lambda pair: -(pair[0] or 0.0),
        )
        leader = view.domain_leaders.get(domain)
        leader_row = view.row(leader) if leader else None
        runner = next((r for _, r in scored if r.model != leader), None)
        rows.append(
            [
                domain,
                Strong(leader) if leader else "–",
                fmt(leader_row.domains.get(domain)) if leader_row else "–",
                runner.model if runner else "–",
                fmt(runner.domains.get(domain)) if runner else "–",
            ]
        )
    blocks: list[Block] = [
        table(
            ["Domain", "Leader", "W (domain)", "Runner-up", "W (domain)"],
            rows,
            "llrlr",
            "Leading model by domain (the study's Table 6)",
        )
    ]
    counts: dict[str, int] = {}
    for leader in view.domain_leaders.values():
        counts[leader] = counts.get(leader, 0) + 1
    if counts:
        summary = ", ".join(f"{m} {n}" for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        blocks.append(para(f"Domains led: {summary}."))
    return blocks


def _domain_matrix(view: SeriesView) -> Table:
    models = [r.model for r in view.rows]
    rows = []
    for domain in view.domains:
        values = [r.domains.get(domain) for r in view.rows]
        best = max((v for v in values if v is not None), default=None)
        rows.append([domain, *(Strong(fmt(v)) if v is not None and v == best else fmt(v) for v in values)])
    return table(["Domain", *models], rows, "l" + "r" * len(models), "Weighted score by domain and model")


def _judges(view: SeriesView) -> list[Block]:
    judges = view.judges
    by_sigma = sorted(view.rows, key=lambda r: (r.sigma is None, r.sigma or 0.0, r.model))
    blocks: list[Block] = [
        table(
            ["Model", "σ", "W"],
            ([r.model, fmt(r.sigma), fmt(r.weighted)] for r in by_sigma),
            "lrr",
            "Judge spread σ(m) by model, lowest first (the study's Table 5)",
        )
    ]
    if not judges:
        return [*blocks, para("Judge agreement was not computed.")]
    if judges.get("applicable") is False:
        blocks.append(para(f"Panel agreement not applicable: {judges.get('reason')}."))
    panel = [
        [
            "Krippendorff's α (interval)",
            fmt(judges.get("krippendorff_alpha"), 3),
            judges.get("n_alpha_units"),
        ],
        ["ICC(2,1)", fmt(judges.get("icc2_1"), 3), judges.get("n_complete_units")],
        ["ICC(2,k)", fmt(judges.get("icc2_k"), 3), judges.get("n_complete_units")],
    ]
    blocks.append(
        table(["Panel statistic", "value", "answers"], panel, "lrr", "Agreement of the judge panel")
    )
    rows = []
    for item in per_judge(judges):
        name = str(item.get("judge"))
        rows.append(
            [
                name,
                fmt(item.get("mean_score")),
                fmt(item.get("bias_vs_others"), 3),
                item.get("n_scored"),
                view.parse_failures.get(name, item.get("n_null")),
            ]
        )
    if rows:
        blocks.append(
            table(
                ["Judge", "mean score", "bias vs others", "scored", "null scores (parse failures)"],
                rows,
                "lrrrr",
                "Each judge against the rest of the panel",
            )
        )
    for key, title in (
        ("spearman", "Spearman ρ"),
        ("pearson", "Pearson r"),
        ("kappa_quadratic", "quadratic-weighted κ"),
    ):
        matrix = judge_matrix(judges, key)
        if matrix is None:
            continue
        names, values = matrix
        if key == "spearman":
            blocks.append(Plot("judges", view.name))
        blocks.append(
            table(
                ["", *names],
                ([n, *(fmt(v, 3) for v in row)] for n, row in zip(names, values, strict=True)),
                "l" + "r" * len(names),
                f"Pairwise {title} between judges",
            )
        )
    return blocks


def _tiers(view: SeriesView, config: Mapping[str, Any]) -> Table:
    rules = [as_mapping(rule) for rule in as_list(config.get("tiers"))]
    order = [str(rule.get("tier")) for rule in rules]
    order += [t for t in dict.fromkeys(r.tier for r in view.rows if r.tier) if t not in order]
    rows = []
    for tier in order:
        members = [r for r in view.rows if r.tier == tier]
        rule = next((rl for rl in rules if rl.get("tier") == tier), {})
        criteria = [
            f"W ≥ {fmt(rule.get('min_weighted'))}" if rule.get("min_weighted") is not None else "",
            f"D ≤ {fmt(rule.get('max_degradation'))}" if rule.get("max_degradation") is not None else "",
            f"σ ≤ {fmt(rule.get('max_sigma'))}" if rule.get("max_sigma") is not None else "",
        ]
        rows.append(
            [
                Strong(tier),
                ", ".join(c for c in criteria if c) or "(all others)",
                "; ".join(
                    f"{r.model} (W {fmt(r.weighted)}, D {fmt(r.degradation)}, σ {fmt(r.sigma)})"
                    for r in members
                )
                or "–",
            ]
        )
    return table(
        ["Tier", "Rule", "Models"], rows, "cll", "Final tiers (the study's Table 8); rules tried in order"
    )


def _comparison(report: ReportView) -> list[Block]:
    if len(report.comparison_series) < 2 or not report.comparison:
        return [para("Only one series: no series comparison.")]
    others = [s for s in report.comparison_series if s != report.primary]
    header = [
        "Model",
        f"W {report.primary} (primary)",
        *[f"W {s}" for s in others],
        *[f"Δ {s}" for s in others],
    ]
    rows = [
        [
            row.model,
            fmt(row.weighted.get(report.primary)),
            *[fmt(row.weighted.get(s)) for s in others],
            *["–" if row.delta.get(s) is None else f"{row.delta[s]:+.2f}" for s in others],
        ]
        for row in report.comparison
    ]
    return [
        table(
            header,
            rows,
            "l" + "r" * (len(header) - 1),
            "Effect of generation parameters: W per series and difference from the primary series (the study's Table 7)",
        )
    ]


def series_blocks(view: SeriesView, report: ReportView) -> list[Block]:
    title = f"Series {view.name}" + (" (primary)" if view.is_primary else "")
    facts = [f"{view.n_questions} questions"] if view.n_questions is not None else []
    facts += [f"{len(view.rows)} models", f"{len(view.domains)} domains"]
    facts += [f"{view.n_judgments} judgments"] if view.n_judgments is not None else []
    blocks: list[Block] = [Heading(2, title, anchor(view.name)), para(", ".join(facts) + ".")]
    blocks += [Heading(3, "Overall ranking by level"), *_ranking(view), Plot("forest", view.name)]
    blocks += _leading_group(view)
    blocks += [Plot("size", view.name), Heading(3, "Robustness to difficulty"), Plot("levels", view.name)]
    blocks += [
        Heading(3, "Leaders by domain"),
        *_domain_leaders(view),
        _domain_matrix(view),
        Plot("domains", view.name),
    ]
    blocks += [Heading(3, "Judge agreement"), *_judges(view)]
    blocks += [Heading(3, "Self-preference"), *generic(view.self_preference)]
    blocks += [Heading(3, "Leave-one-judge-out ranking"), *generic(view.leave_one_judge_out)]
    blocks += [Heading(3, "Verbosity bias"), *generic(view.verbosity)]
    blocks += [Heading(3, "Model selection"), *generic(view.selection)]
    if view.experts is not None:
        blocks += [Heading(3, "Expert validation"), *generic(view.experts)]
    blocks += [Heading(3, "Final tiers"), _tiers(view, report.config)]
    return blocks


def report_blocks(document: Report) -> tuple[ReportView, list[Block]]:
    """The whole report as blocks, with the parsed view the HTML renderer needs for its plots."""
    report = read_report(document)
    weights = as_mapping(report.config.get("level_weights"))
    weight_text = ", ".join(f"level {k}: {fmt(v, 2)}" for k, v in weights.items())
    confidence = as_number(report.config.get("confidence")) or 0.95
    blocks: list[Block] = [
        Heading(1, "kubejury report"),
        para(
            f"Generated {report.generated_at} by kubejury {report.version} (report schema {report.schema_version})."
        ),
        para(
            f"Level weights {weight_text}; W = Σ w·Score / Σ w. Intervals: {confidence:.0%} bootstrap over "
            f"questions, {report.config.get('bootstrap_samples')} resamples, seed {report.config.get('seed')}."
        ),
        para(
            "Columns: L1…Ln = Score(m, level), the mean over domains of the per-domain mean; W = weighted "
            "score; D = degradation (lowest level − highest level); σ = mean judge standard deviation per "
            "answer; scored/unscored = answers with at least one / no usable judge score."
        ),
    ]
    for view in report.series:
        blocks += series_blocks(view, report)
    blocks += [Heading(2, "Series effects", "series-effects"), *_comparison(report)]
    return report, blocks
