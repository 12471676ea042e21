"""The report's content as a list of format-neutral blocks: headings, paragraphs, tables, plots.

report.md and report.html say the same things in the same order; only the markup differs. This
module decides *what* the report says — the study's tables (overall ranking by level with W, D,
σ; leaders by domain; judge agreement; series effects; final tiers) and what the study lacked
(intervals, leading group, P(better), bias checks, model selection, expert validation) — from a
report.json document; :mod:`.markdown` and :mod:`.html` only decide how it looks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kubejury.records.report import (
    AgreementStats,
    ComparisonEntry,
    DifferenceEntry,
    Estimate,
    ExpertsSection,
    GpuUsageSection,
    JudgesSection,
    LeaveOneJudgeOutSection,
    ModelFacts,
    Provenance,
    ReusedRecords,
    ReuseSection,
    ScoringSection,
    SelectionSection,
    SelfPreferenceSection,
    SequentialSection,
    TierRule,
    VerbositySection,
)
from kubejury.report.view import (
    Report,
    ReportView,
    SeriesView,
    fmt,
    fmt_interval,
    fmt_parameters,
    judge_matrix,
    read_report,
)

MAX_MATRIX_MODELS = 20  # P(better) matrices wider than this are left to report.json
MAX_REFUSALS = 20  # reasons a run's records were not copied, listed before "and N more"
MAX_BREAKDOWN_PAIRS = 6  # compared pairs whose per-level and per-domain differences get a table


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
    """Where a figure goes; ``kind`` is one of size, levels, domains, forest, judges, equivalence."""

    kind: str
    series: str


Block = Heading | Paragraph | Table | Plot


def para(*parts: Inline) -> Paragraph:
    return Paragraph(tuple(parts))


Cell = Inline | int | float | None
"""What a table cell is given: text, emphasis, a count (shown as is) or nothing (an en dash)."""


def _text(value: Cell) -> Inline:
    if isinstance(value, Strong):
        return value
    return "–" if value is None else str(value)


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    align: str | None = None,
    caption: str | None = None,
) -> Table:
    body = tuple(tuple(_text(c) for c in row) for row in rows)
    return Table(tuple(header), body, align or "l" * len(header), caption)


def anchor(series: str) -> str:
    return "series-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in series)


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _ranking(view: SeriesView) -> list[Block]:
    level_heads = [f"L{lv}" for lv in view.levels]
    header = ["#", "Model", "Size", "Quant.", *level_heads, "W", "W 95% CI", "D", "D 95% CI", "σ", "Tier"]
    header += ["scored", "unscored"]
    rows: list[list[Cell]] = [
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


def power_sentence(view: SeriesView) -> str | None:
    """What this benchmark's size can detect, in one sentence, from report.json's power block
    (detection probabilities computed from the run's own paired standard error; docs/method.md)."""
    power = view.power
    if power is None:
        return None
    detection = {float(k): p for k, p in power.detection.items() if p is not None}
    if not detection:
        return None
    size = f" ({view.n_questions} questions)" if view.n_questions else ""
    (first, p_first), *rest = sorted(detection.items())
    said = (
        f"a {first:g}-point difference in W between two models is detected {100 * p_first:.0f}% of the time"
    )
    if rest:
        said += "".join(
            f"{' and' if k == len(rest) - 1 else ','} a {delta:g}-point difference {100 * p:.0f}% of the time"
            for k, (delta, p) in enumerate(rest)
        )
    reach = (
        f"; {100 * power.target:.0f}% detection needs about {power.detectable:.2f} points"
        if power.detectable is not None
        else ""
    )
    return f"With this benchmark's size{size}, {said}{reach} (paired standard error {power.paired_se:.3f})."


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
    sentence = power_sentence(view)
    if sentence:
        blocks.append(para(sentence))
    models = [r.model for r in view.rows if r.model in view.prob_better]
    if len(models) > MAX_MATRIX_MODELS:
        blocks.append(
            para(
                f"P(better) for all {len(models)} × {len(models)} pairs of models: see report.json (prob_better)."
            )
        )
    elif models:
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


def signed(value: float | None, digits: int = 2) -> str:
    """A difference with its sign (``+0.05``), or an en dash when it is missing."""
    return "–" if value is None else f"{value:+.{digits}f}"


def _ci(interval: list[float] | None) -> str:
    return fmt_interval(None if interval is None else (interval[0], interval[1]))


def comparison_sentence(c: ComparisonEntry) -> str:
    """One pair's verdict in a sentence: the difference, its 90% interval, what it means and what a
    decision at the margin would need (docs/method.md, "Equivalence")."""
    w = c.weighted
    if c.verdict is None or w is None:
        return f"{c.a} − {c.b}: no verdict ({c.reason or 'no interval'})."
    said = f"{c.a} − {c.b}: ΔW {signed(w.difference)}, 90% interval {_ci(w.ci90)}, 95% interval {_ci(w.ci95)}"
    if c.verdict == "equivalent":
        said += f" — equivalent within ±{c.margin:g} W points (TOST, α = {c.alpha:.0%})"
        if c.different:
            said += "; the 95% interval excludes 0, so a difference smaller than the margin is real"
    elif c.verdict == "different":
        said += " — different: the 95% interval excludes 0"
    else:
        said += f" — undecided at ±{c.margin:g}: neither shown equivalent nor shown different"
    needed = c.questions_needed
    if needed is not None and needed.equivalent is not None and needed.different is not None:
        said += (
            f". About {needed.equivalent} questions would show equivalence {needed.power:.0%} of the time if the "
            f"true difference were 0, and {needed.different} a true difference of {c.margin:g} "
            f"(this run: {c.n_questions})"
        )
    return said + "."


def _difference_cell(d: DifferenceEntry | None) -> str:
    if d is None or d.difference is None:
        return "–"
    return f"{signed(d.difference)} {_ci(d.ci95)}"


def _equivalence(view: SeriesView) -> list[Block]:
    """The compared pairs: verdicts, the plot against the margin band, and where the difference lies."""
    if not view.comparisons:
        return []
    blocks: list[Block] = [
        Heading(3, "Equivalence of paired models"),
        para(
            "Paired difference a − b (same questions, same jury, the bootstrap's replicates). Equivalent: the 90% "
            "interval of ΔW lies inside ±margin (two one-sided tests at α = 5%, Schuirmann 1987); different: the "
            "95% interval excludes 0; otherwise undecided. Not significantly different is not equivalent."
        ),
    ]
    rows: list[list[Cell]] = []
    for c in view.comparisons:
        w = c.weighted
        needed = c.questions_needed
        rows.append(
            [
                f"{c.a} − {c.b}",
                c.origin,
                f"±{c.margin:g}",
                Strong(signed(w.difference if w else None)),
                _ci(w.ci90 if w else None),
                _ci(w.ci95 if w else None),
                Strong(c.verdict) if c.verdict else f"– ({c.reason})",
                f"{needed.equivalent} / {needed.different}"
                if needed and needed.equivalent is not None
                else None,
            ]
        )
    blocks.append(
        table(
            [
                "Pair (a − b)",
                "origin",
                "margin",
                "ΔW",
                "90% CI",
                "95% CI",
                "verdict",
                "questions needed (eq. / diff.)",
            ],
            rows,
            "llrrrrcr",
            "Equivalence tests (TOST at α = 5%); questions for an 80% chance of each decision at the margin",
        )
    )
    blocks.append(Plot("equivalence", view.name))
    shown = [c for c in view.comparisons if c.weighted is not None][:MAX_BREAKDOWN_PAIRS]
    if shown:
        levels = sorted({lv for c in shown for lv in c.levels}, key=int)
        domains = list(dict.fromkeys(d for c in shown for d in c.domains))
        breakdown: list[list[Cell]] = [["W", *[_difference_cell(c.weighted) for c in shown]]]
        breakdown += [[f"Score L{lv}", *[_difference_cell(c.levels.get(lv)) for c in shown]] for lv in levels]
        breakdown += [[d, *[_difference_cell(c.domains.get(d)) for c in shown]] for d in domains]
        blocks.append(
            table(
                ["", *[f"{c.a} − {c.b}" for c in shown]],
                breakdown,
                "l" + "r" * len(shown),
                "Where the difference lies: a − b with its 95% interval, overall, by level and by domain",
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
    if judges is None:
        return [*blocks, para("Judge agreement was not computed.")]
    if not judges.applicable:
        blocks.append(para(f"Panel agreement not applicable: {judges.reason}."))
    panel = [
        ["Krippendorff's α (interval)", fmt(judges.krippendorff_alpha, 3), judges.n_alpha_units],
        ["ICC(2,1)", fmt(judges.icc2_1, 3), judges.n_complete_units],
        ["ICC(2,k)", fmt(judges.icc2_k, 3), judges.n_complete_units],
    ]
    blocks.append(
        table(["Panel statistic", "value", "answers"], panel, "lrr", "Agreement of the judge panel")
    )
    rows = [
        [
            item.judge,
            fmt(item.mean_score),
            fmt(item.bias_vs_others, 3),
            item.n_scored,
            view.parse_failures.get(item.judge, item.n_null),
        ]
        for item in judges.per_judge
    ]
    if rows:
        blocks.append(
            table(
                ["Judge", "mean score", "bias vs others", "scored", "null scores (parse failures)"],
                rows,
                "lrrrr",
                "Each judge against the rest of the panel",
            )
        )
    return blocks + _judge_matrices(view, judges)


def _tiers(view: SeriesView, config: ScoringSection) -> Table:
    rules = config.tiers
    order = [rule.tier for rule in rules]
    order += [t for t in dict.fromkeys(r.tier for r in view.rows if r.tier) if t not in order]
    rows: list[list[Cell]] = []
    for tier in order:
        members = [r for r in view.rows if r.tier == tier]
        rule = next((rl for rl in rules if rl.tier == tier), TierRule(tier=tier))
        criteria = [
            f"W ≥ {fmt(rule.min_weighted)}" if rule.min_weighted is not None else "",
            f"D ≤ {fmt(rule.max_degradation)}" if rule.max_degradation is not None else "",
            f"σ ≤ {fmt(rule.max_sigma)}" if rule.max_sigma is not None else "",
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
    rows: list[list[Inline]] = [
        [
            row.model,
            fmt(row.weighted.get(report.primary)),
            *[fmt(row.weighted.get(s)) for s in others],
            *["–" if row.delta.get(s) is None else f"{row.delta[s]:+.2f}" for s in others],
        ]
        for row in report.comparison
    ]
    if report.mean_delta:
        mean = ["–" if report.mean_delta.get(s) is None else f"{report.mean_delta[s]:+.2f}" for s in others]
        rows.append([Strong("mean over models"), "", *["" for _ in others], *mean])
    return [
        table(
            header,
            rows,
            "l" + "r" * (len(header) - 1),
            "Effect of generation parameters: W per series and difference from the primary series (the study's Table 7)",
        )
    ]


class _Applicable(Protocol):
    """A result section that says whether it could be computed on this data."""

    @property
    def applicable(self) -> bool: ...


def _not_applicable(section: _Applicable | None, reason: str | None = None) -> list[Block] | None:
    if section is None:
        return [para("Not computed.")]
    if not section.applicable:
        return [para(f"Not applicable: {reason or 'no reason given'}.")]
    return None


def _estimate(value: Estimate, digits: int = 2) -> str:
    low, high = value.ci95
    return f"{fmt(value.mean, digits)} {fmt_interval((low, high), digits)}"


def _robustness(view: SeriesView) -> list[Block]:
    if not view.levels:
        return []
    low, high = view.levels[0], view.levels[-1]
    rows = sorted(view.rows, key=lambda r: (r.degradation is None, r.degradation or 0.0, r.model))
    return [
        table(
            ["Model", f"L{low}", f"L{high}", "D", "D 95% CI", "W"],
            (
                [
                    r.model,
                    fmt(r.levels[low]),
                    fmt(r.levels[high]),
                    fmt(r.degradation),
                    fmt_interval(r.degradation_ci),
                    fmt(r.weighted),
                ]
                for r in rows
            ),
            "lrrrrr",
            f"Degradation D = Score(level {low}) − Score(level {high}), most robust first",
        )
    ]


def _self_preference(section: SelfPreferenceSection | None) -> list[Block]:
    skipped = _not_applicable(section, section.reason if section is not None else None)
    notes = [para(f"Note: {note}") for note in (section.notes if section is not None else ())]
    if skipped is not None or section is None:
        return (skipped or []) + notes
    blocks: list[Block] = [
        para(
            "For each judge declared to be (same_as) or share a family with an evaluated model: the judge's score "
            "minus the other judges' mean on the same answers, for that model (related) and for unrelated models "
            "(baseline). The difference is the self-preference beyond the judge's usual leniency; an interval "
            "above 0 means the judge favours its relative."
        )
    ]
    if not section.pairs:
        return [*blocks, para("No declared judge–model relation matched this series."), *notes]
    rows = [
        [
            p.judge,
            p.model,
            p.relation,
            _estimate(p.related),
            _estimate(p.baseline),
            Strong(_estimate(p.difference)),
            p.related.n,
        ]
        for p in section.pairs
    ]
    header = [
        "Judge",
        "Model",
        "Relation",
        "related [95% CI]",
        "baseline [95% CI]",
        "difference [95% CI]",
        "answers",
    ]
    return [*blocks, table(header, rows, "lllrrrr", "Self-preference"), *notes]


def _lojo(section: LeaveOneJudgeOutSection | None) -> list[Block]:
    skipped = _not_applicable(section, section.reason if section is not None else None)
    if skipped is not None or section is None:
        return skipped or []
    full = section.full_ranking
    rows = [
        [
            removal.judge,
            fmt(removal.kendall_tau, 3),
            removal.max_rank_change,
            ", ".join(removal.most_moved) or "–",
            "unchanged"
            if removal.ranking == full
            else " > ".join(removal.ranking[:8]) + (" …" if len(removal.ranking) > 8 else ""),
        ]
        for removal in section.removals
    ]
    return [
        para("Full ranking: " + " > ".join(full[:8]) + (" …" if len(full) > 8 else "") + "."),
        table(
            [
                "Judge removed",
                "Kendall τ vs full",
                "max rank change",
                "most moved",
                "ranking without this judge",
            ],
            rows,
            "lrrll",
            "Leave-one-judge-out: the ranking recomputed without each judge",
        ),
    ]


def _verbosity(section: VerbositySection | None) -> list[Block]:
    skipped = _not_applicable(section, section.reason if section is not None else None)
    if skipped is not None or section is None:
        return skipped or []
    items = list(section.per_judge)
    if section.panel is not None:
        items.append(section.panel.model_copy(update={"judge": "panel mean S(q)"}))
    rows = [[i.judge, fmt(i.pearson, 3), fmt(i.spearman, 3), i.n, i.n_questions] for i in items]
    return [
        para(
            "Correlation between answer length and score within each question (length and score centred per "
            "question across models): a positive value means longer answers get higher scores from that judge."
        ),
        table(["Judge", "Pearson r", "Spearman ρ", "answers", "questions"], rows, "lrrrr", "Verbosity bias"),
    ]


def _selection(section: SelectionSection | None) -> list[Block]:
    if section is None:
        return [para("Not computed.")]
    by_name = {f.model: f for f in section.models}

    def named(
        model: str | None, value: Callable[[ModelFacts], float | None], label: str, digits: int = 2
    ) -> Inline:
        if model is None:
            return "none"
        facts = by_name.get(model)
        return Strong(f"{model} ({label} {fmt(value(facts) if facts is not None else None, digits)})")

    blocks: list[Block] = [
        para("Best overall: ", named(section.best_overall, lambda f: f.weighted, "W"), "."),
        para(
            "Most robust: ",
            named(section.most_robust, lambda f: f.degradation, "D"),
            f" — {section.robust_rule}.",
        ),
        para(
            "Lowest degradation of all models: ",
            named(section.lowest_degradation, lambda f: f.degradation, "D"),
            ".",
        ),
        para(
            "Quality-to-size choice: ",
            named(section.quality_to_size, lambda f: f.weighted_per_billion, "W per B params", 3),
            f" — {section.quality_rule}.",
        ),
        para(
            "Pareto frontier of W against size: "
            + (", ".join(section.size_frontier) or "sizes unknown")
            + "."
        ),
    ]
    if section.memory_frontier:
        blocks.append(
            para("Pareto frontier of W against GPU memory: " + ", ".join(section.memory_frontier) + ".")
        )
    return [*blocks, _model_facts(section.models)]


def _experts(section: ExpertsSection) -> list[Block]:
    skipped = _not_applicable(section)
    unmatched = {k: v for k, v in section.unmatched.items() if v}
    counts = para(
        f"{section.n_rows} expert rows, {section.n_matched} compared with the panel's S(q)"
        + (", not compared: " + ", ".join(f"{k} {v}" for k, v in unmatched.items()) if unmatched else "")
        + (f", other series: {section.n_other_series}" if section.n_other_series else "")
        + "."
    )
    if skipped is not None:
        return [*skipped, counts]

    def row(scope: str, stats: AgreementStats) -> list[Cell]:
        return [
            scope,
            stats.n,
            fmt(stats.pearson, 3),
            fmt(stats.spearman, 3),
            fmt(stats.mae, 2),
            fmt(stats.kappa_quadratic, 3),
            fmt(stats.mean_bias, 2),
        ]

    rows = [row("overall", section.overall)]
    rows += [row(f"domain {d}", st) for d, st in section.per_domain.items()]
    rows += [row(f"expert {e}", st) for e, st in section.per_expert.items()]
    header = ["Scope", "pairs", "Pearson r", "Spearman ρ", "MAE", "weighted κ", "bias (expert − panel)"]
    return [counts, table(header, rows, "lrrrrrr", "Experts against the judge panel")]


def counted(n: int, noun: str) -> str:
    """``1 domain``, ``2 domains``: the report's counts read as English."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def series_blocks(view: SeriesView, report: ReportView) -> list[Block]:
    title = f"Series {view.name}" + (" (primary)" if view.is_primary else "")
    facts = [counted(view.n_questions, "question")] if view.n_questions is not None else []
    facts += [counted(len(view.rows), "model"), counted(len(view.domains), "domain")]
    facts += [counted(view.n_judgments, "judgment")] if view.n_judgments is not None else []
    blocks: list[Block] = [Heading(2, title, anchor(view.name)), para(", ".join(facts) + ".")]
    blocks += [Heading(3, "Overall ranking by level"), *_ranking(view), Plot("forest", view.name)]
    blocks += _leading_group(view)
    blocks += [Plot("size", view.name)]
    blocks += _equivalence(view)
    blocks += [Heading(3, "Robustness to difficulty"), *_robustness(view), Plot("levels", view.name)]
    blocks += [
        Heading(3, "Leaders by domain"),
        *_domain_leaders(view),
        _domain_matrix(view),
        Plot("domains", view.name),
    ]
    blocks += [Heading(3, "Judge agreement"), *_judges(view)]
    blocks += [Heading(3, "Self-preference"), *_self_preference(view.self_preference)]
    blocks += [Heading(3, "Leave-one-judge-out ranking"), *_lojo(view.leave_one_judge_out)]
    blocks += [Heading(3, "Verbosity bias"), *_verbosity(view.verbosity)]
    blocks += [Heading(3, "Model selection"), *_selection(view.selection)]
    if view.experts is not None:
        blocks += [Heading(3, "Expert validation"), *_experts(view.experts)]
    blocks += [Heading(3, "Final tiers"), _tiers(view, report.config)]
    return blocks


def report_blocks(document: Report) -> tuple[ReportView, list[Block]]:
    """The whole report as blocks, with the parsed view the HTML renderer needs for its plots."""
    report = read_report(document)
    config = report.config
    weight_text = ", ".join(f"level {k}: {fmt(v, 2)}" for k, v in config.level_weights.items())
    confidence = config.confidence or 0.95
    blocks: list[Block] = [
        Heading(1, "kubejury report"),
        para(
            f"Generated {report.generated_at} by kubejury {report.version} (report schema {report.schema_version})."
        ),
        para(
            f"Level weights {weight_text}; W = Σ w·Score / Σ w. Intervals: {confidence:.0%} bootstrap over "
            f"questions, {config.bootstrap_samples} resamples, seed {config.seed}."
        ),
        para(
            "Columns: L1…Ln = Score(m, level), the mean over domains of the per-domain mean; W = weighted "
            "score; D = degradation (lowest level − highest level); σ = mean judge standard deviation per "
            "answer; scored/unscored = answers with at least one / no usable judge score."
        ),
    ]
    blocks += _summary(report)
    if report.gpu_usage is not None:
        blocks += [Heading(2, "GPU cost", "gpu-cost"), *_gpu_cost(report.gpu_usage)]
    if report.reuse is not None:
        blocks += [Heading(2, "Reused from earlier runs", "reuse"), *_reuse(report.reuse)]
    if report.sequential is not None:
        blocks += [Heading(2, "Sequential evaluation", "sequential"), *_sequential(report.sequential)]
    for view in report.series:
        blocks += series_blocks(view, report)
    blocks += [Heading(2, "Series effects", "series-effects"), *_comparison(report)]
    if report.provenance is not None:
        blocks += [Heading(2, "Provenance", "provenance"), *_provenance(report.provenance)]
    return report, blocks


def _gpu_cost(section: GpuUsageSection) -> list[Block]:
    """GPU-hours per model server, W per GPU-hour next to W, and the share of GPU time held idle."""
    rows = []
    for name, entry in section.servers.items():
        product = (entry.gpu_product or "").removeprefix("NVIDIA-")
        rows.append(
            [
                name,
                entry.role,
                f"{entry.gpus} × {product}" if product else str(entry.gpus),
                fmt(entry.held_gpu_hours, 3),
                fmt(entry.used_gpu_hours, 3),
                fmt(entry.weighted),
                fmt(entry.weighted_per_gpu_hour),
            ]
        )
    idle = section.idle_share
    return [
        para(
            f"GPU-hours held by the run's model servers: {fmt(section.held_gpu_hours, 3)}, of which used by its "
            f"generation and judging Jobs: {fmt(section.used_gpu_hours, 3)}"
            + (f"; held idle: {idle:.1%}." if idle is not None else ".")
            + " Held = Ready time × GPUs; used = time its Jobs ran × GPUs; W per GPU-hour = W of the "
            f"primary series per held GPU-hour ({section.source}, as of {section.as_of})."
        ),
        table(["server", "role", "GPUs", "held GPU-h", "used GPU-h", "W", "W per GPU-h"], rows),
    ]


def _reuse(section: ReuseSection) -> list[Block]:
    """Per model and judge, the records copied from earlier runs and from which; what was refused."""
    answers = sum(e.reused for e in section.models.values())
    judgments = sum(e.reused for e in section.judges.values())
    blocks: list[Block] = [
        para(
            f"This run copied {counted(answers, 'answer')} and {counted(judgments, 'judgment')} from "
            f"earlier runs ({', '.join(section.sources) or 'none named'}) instead of making them again. "
            "A record is copied only when everything that determined it is the same here: the model or "
            "judge and its serving, the prompt, the series and the question (for a judgment, also the "
            "anonymized answer it judged)."
        ),
        table(
            ["model / judge", "stage", "reused", "needed", "from"],
            [*_reuse_rows("generation", section.models), *_reuse_rows("judging", section.judges)],
            "llrrl",
        ),
    ]
    refusals = [*section.missing_sources, *section.refused]
    if refusals:
        rows = [[r.source, r.reason, r.records or "all"] for r in refusals[:MAX_REFUSALS]]
        blocks.append(table(["source", "not copied because", "records"], rows, "llr"))
    if len(refusals) > MAX_REFUSALS:
        rest = len(refusals) - MAX_REFUSALS
        blocks.append(para(f"… and {rest} more (report.json → reuse.refused)."))
    return blocks


def _sequential(section: SequentialSection) -> list[Block]:
    """Questions used per model and why it stopped, with W's interval at its last look."""
    used, budgeted = section.questions_used, section.questions_budgeted
    saved = f" ({1 - used / budgeted:.0%} fewer)" if budgeted else ""
    rows: list[list[Cell]] = []
    for name, m in section.models.items():
        low, high = m.interval
        level = f" ({100 * m.confidence:.4g}%)" if m.confidence is not None else ""
        rows.append(
            [
                name,
                m.questions,
                m.look,
                m.status if m.status == "continue" else f"stopped: {m.reason}",
                fmt(m.estimate),
                f"{fmt(low)}–{fmt(high)}{level}",
            ]
        )
    blocks: list[Block] = [
        para(
            f"Budgeted run (goal {section.goal}, {100 * (section.confidence or 0):.4g}% simultaneous over "
            f"{len(section.prefix_sizes)} looks, margin {section.margin:g}): questions were asked in waves of "
            f"a stratified random order, {section.looks_done} look(s) done; the models answered "
            f"{used} questions where asking all would be {budgeted}{saved}. A model stops once its place "
            "is decided; W's interval at its last look holds its level despite the stopping "
            "(O'Brien-Fleming spending, docs/method.md). The scores below use each model's answered prefix."
        ),
        table(["model", "questions", "look", "status", "W at look", "interval (level)"], rows, "lrrlrl"),
    ]
    if section.leading_group:
        blocks.append(para("Leading group: " + ", ".join(section.leading_group) + "."))
    if section.pairs:
        pair_rows: list[list[Cell]] = [
            [f"{p.a} − {p.b}", f"±{p.margin:g}", p.verdict, p.look or None, fmt(p.difference)]
            for p in section.pairs
        ]
        blocks.append(table(["pair", "margin", "verdict", "look", "ΔW"], pair_rows, "lllrr"))
    return blocks


def _reuse_rows(stage: str, entries: dict[str, ReusedRecords]) -> list[list[Cell]]:
    """One row per model (or judge): records copied, of how many it needed, by source run."""
    return [
        [
            name,
            stage,
            entry.reused,
            entry.needed,
            ", ".join(f"{run} ({count})" for run, count in entry.from_runs.items()) or None,
        ]
        for name, entry in entries.items()
    ]


def _provenance(section: Provenance) -> list[Block]:
    """Truncated answers per model and series, and the digests that identify what was run."""
    truncated = section.truncated
    series = list(truncated)
    models = list(dict.fromkeys(m for s in series for m in truncated[s]))
    rows = [[m, *[str(truncated[s].get(m, 0)) for s in series]] for m in models]
    return [
        para(
            "Truncated answers: the model server reported the answer cut at the token limit "
            "(finish_reason: length). They are judged as they are; many of them make a score a floor."
        ),
        table(["model", *[f"truncated ({s})" for s in series]], rows),
        para(
            f"Judge prompt template SHA-256 {section.judge_prompt_template_sha256[:12]}…; "
            f"{len(section.fingerprints)} stage fingerprints (report.json → provenance.fingerprints)."
        ),
    ]


def _summary(report: ReportView) -> list[Block]:
    """The answer first: who leads the primary series, and how sure we are."""
    view = report.series[0] if report.series else None
    if view is None or not view.rows:
        return []
    top = view.rows[0]
    blocks: list[Block] = [Heading(2, "Summary", "summary")]
    blocks.append(
        para(
            f"Primary series {view.name}: ",
            Strong(f"{top.model}"),
            f" ranks first with W {fmt(top.weighted)} {fmt_interval(top.weighted_ci)}"
            + (f", tier {top.tier}" if top.tier else "")
            + ".",
        )
    )
    if view.leading_group:
        others = [m for m in view.leading_group if m != top.model]
        if others:
            blocks.append(
                para(
                    f"Not distinguishable from it at 95% (paired bootstrap over questions): {', '.join(others)}; "
                    "the order within this leading group is not established."
                )
            )
        elif len(view.rows) > 1:
            blocks.append(para("It is ahead of every other model at 95% (paired bootstrap over questions)."))
        else:
            blocks.append(para("It is the only model in this series: there is nothing to rank it against."))
    sentence = power_sentence(view)
    if sentence:
        blocks.append(para(sentence))
    blocks += [para(comparison_sentence(c)) for c in view.comparisons]
    robust = view.selection.most_robust if view.selection is not None else None
    robust_row = view.row(str(robust)) if robust else None
    if robust_row is not None:
        blocks.append(
            para(f"Most robust to harder questions: {robust_row.model} (D {fmt(robust_row.degradation)}).")
        )
    if view.domain_leaders:
        counts: dict[str, int] = {}
        for leader in view.domain_leaders.values():
            counts[leader] = counts.get(leader, 0) + 1
        led = ", ".join(f"{m} {n}" for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        blocks.append(para(f"Domains led: {led} (of {len(view.domain_leaders)})."))
    alpha = view.judges.krippendorff_alpha if view.judges is not None else None
    if alpha is not None:
        blocks.append(para(f"Judge agreement: Krippendorff's α = {alpha:.3f}."))
    return blocks


def _judge_matrices(view: SeriesView, judges: JudgesSection) -> list[Block]:
    blocks: list[Block] = []
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


def _model_facts(facts: Sequence[ModelFacts]) -> Table:
    rows = [
        [
            f.model,
            fmt(f.weighted),
            fmt_parameters(f.parameters, f.parameters_label),
            f.quantization or "–",
            fmt(f.gpu_memory_gib, 0),
            fmt(f.weighted_per_billion, 3),
            fmt(f.mean_completion_tokens, 0),
            fmt(f.mean_latency_s, 2),
            "yes" if f.on_size_frontier else "",
            ", ".join(f.domains_led) or "–",
        ]
        for f in facts
    ]
    header = [
        "Model",
        "W",
        "Size",
        "Quant.",
        "GPU GiB",
        "W per B params",
        "tokens/answer",
        "latency s/answer",
    ]
    header += ["size frontier", "domains led"]
    return table(header, rows, "lrllrrrrcl", "Model facts for selection")
