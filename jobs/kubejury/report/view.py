"""Read a report.json document into the rows and matrices the Markdown and HTML renderers print.

Both renderers work from the document (a :class:`~kubejury.records.report.ReportDocument`), never
from the analysis objects: what a reader sees in report.md and report.html is then exactly what
report.json says, and the renderers can be tested (and re-run on an old report.json) without
recomputing anything. The document's types already say what may be missing (``None``); this module
orders it into ranking rows and series views, and the renderers only format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubejury.records.report import (
    ComparisonEntry,
    ExpertsSection,
    GpuUsageSection,
    InputSource,
    JudgesSection,
    LeaveOneJudgeOutSection,
    ModelEntry,
    ModelInfo,
    PowerSection,
    Provenance,
    ReportDocument,
    ReuseSection,
    ScoringSection,
    SelectionSection,
    SelfPreferenceSection,
    SequentialSection,
    SeriesSection,
    VerbositySection,
)

Report = ReportDocument | Mapping[str, Any]
"""What the renderers accept: a document, or its parsed JSON (read with :meth:`ReportDocument.read`)."""

Interval = tuple[float | None, float | None] | None


def _interval(value: list[float] | None) -> Interval:
    return None if value is None else (value[0], value[1])


# --------------------------------------------------------------------------------------------
# Formatting shared by both renderers
# --------------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals, or an en dash when it is missing (null)."""
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_interval(interval: Interval, digits: int = 2) -> str:
    if interval is None or interval[0] is None or interval[1] is None:
        return "–"
    return f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def fmt_parameters(parameters: float | None, label: str | None) -> str:
    if label:
        return label
    if parameters is None:
        return "–"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if parameters >= scale:
            return f"{parameters / scale:g}{unit}"
    return f"{parameters:g}"


# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRow:
    """One line of the overall ranking (the study's Table 4 plus intervals)."""

    rank: int
    model: str
    levels: dict[int, float | None]
    levels_ci: dict[int, Interval]
    weighted: float | None
    weighted_ci: Interval
    degradation: float | None
    degradation_ci: Interval
    sigma: float | None
    tier: str | None
    n_scored: int
    n_unscored: int
    parameters: float | None
    parameters_label: str | None
    quantization: str | None
    family: str | None
    gpu_memory_gib: float | None
    domains: dict[str, float | None]  # per-domain weighted score


@dataclass(frozen=True)
class SeriesView:
    name: str
    is_primary: bool
    levels: tuple[int, ...]
    domains: tuple[str, ...]
    rows: tuple[ModelRow, ...]  # ranking order
    domain_leaders: dict[str, str]
    leading_group: tuple[str, ...]
    prob_better: dict[str, dict[str, float | None]]
    judges: JudgesSection | None
    parse_failures: dict[str, int]
    self_preference: SelfPreferenceSection | None
    leave_one_judge_out: LeaveOneJudgeOutSection | None
    verbosity: VerbositySection | None
    selection: SelectionSection | None
    experts: ExpertsSection | None
    n_questions: int | None
    n_judgments: int | None
    power: PowerSection | None = None  # report.json's power block (None without bootstrap)
    comparisons: tuple[ComparisonEntry, ...] = ()  # pairs tested for equivalence, as report.json lists them

    def row(self, model: str) -> ModelRow | None:
        return next((r for r in self.rows if r.model == model), None)


@dataclass(frozen=True)
class ComparisonRow:
    model: str
    weighted: dict[str, float | None]  # series -> W
    delta: dict[str, float | None]  # series -> W(series) - W(primary)


@dataclass(frozen=True)
class ReportView:
    schema_version: int
    generated_at: str
    version: str
    config: ScoringSection
    primary: str
    series: tuple[SeriesView, ...]  # primary first
    comparison_series: tuple[str, ...]
    comparison: tuple[ComparisonRow, ...]
    mean_delta: dict[str, float | None]  # series -> mean of W(series) - W(primary) over shared models
    inputs: Mapping[str, InputSource]
    gpu_usage: GpuUsageSection | None = None
    provenance: Provenance | None = None
    reuse: ReuseSection | None = None
    sequential: SequentialSection | None = None


def _levels_of(document: ReportDocument) -> tuple[int, ...]:
    if document.benchmark.levels:
        return tuple(document.benchmark.levels)
    return tuple(sorted(int(k) for k in document.config.level_weights))


def _domains_of(ranked: list[ModelEntry], document: ReportDocument) -> tuple[str, ...]:
    """The domains the models were scored in, in the benchmark's order first."""
    seen = list(dict.fromkeys(domain for entry in ranked for domain in entry.domains))
    bench = document.benchmark.domains
    return tuple([d for d in bench if d in seen] + [d for d in seen if d not in bench])


def _model_row(
    index: int, model: str, entry: ModelEntry, info: ModelInfo, levels: tuple[int, ...]
) -> ModelRow:
    return ModelRow(
        rank=entry.rank or index + 1,
        model=model,
        levels={lv: entry.levels.get(str(lv)) for lv in levels},
        levels_ci={lv: _interval(entry.levels_ci95.get(str(lv))) for lv in levels},
        weighted=entry.weighted,
        weighted_ci=_interval(entry.weighted_ci95),
        degradation=entry.degradation,
        degradation_ci=_interval(entry.degradation_ci95),
        sigma=entry.judge_sigma,
        tier=entry.tier,
        n_scored=entry.n_scored,
        n_unscored=entry.n_unscored,
        parameters=info.parameters,
        parameters_label=info.parameters_label,
        quantization=info.quantization,
        family=info.family,
        gpu_memory_gib=info.gpu_memory_gib,
        domains={domain: scores.weighted for domain, scores in entry.domains.items()},
    )


def _series_view(name: str, doc: SeriesSection, document: ReportDocument, primary: str) -> SeriesView:
    ranking = [m for m in doc.ranking if m in doc.models]
    ranking += sorted(m for m in doc.models if m not in ranking)
    levels = _levels_of(document)
    no_info = ModelInfo()
    rows = tuple(
        _model_row(index, model, doc.models[model], document.models_info.get(model, no_info), levels)
        for index, model in enumerate(ranking)
    )
    return SeriesView(
        name=name,
        is_primary=name == primary,
        levels=levels,
        domains=_domains_of([doc.models[m] for m in ranking], document),
        rows=rows,
        domain_leaders=dict(doc.domain_leaders),
        leading_group=tuple(doc.leading_group or ()),
        prob_better={a: dict(row) for a, row in (doc.prob_better or {}).items()},
        judges=doc.judges,
        parse_failures=dict(doc.judges.parse_failures) if doc.judges is not None else {},
        self_preference=doc.self_preference,
        leave_one_judge_out=doc.leave_one_judge_out,
        verbosity=doc.verbosity,
        selection=doc.selection,
        experts=doc.experts,
        n_questions=doc.n_questions,
        n_judgments=doc.n_judgments,
        power=doc.power,
        comparisons=tuple(doc.comparisons),
    )


def _comparison_rows(document: ReportDocument, series: tuple[str, ...]) -> tuple[ComparisonRow, ...]:
    rows = []
    for model, per_series in document.series_comparison.models.items():
        cells = {s: per_series[s] for s in series if s in per_series}
        rows.append(
            ComparisonRow(
                model=model,
                weighted={s: cells[s].weighted if s in cells else None for s in series},
                delta={s: cells[s].delta if s in cells else None for s in series},
            )
        )
    return tuple(rows)


def read_report(report: Report) -> ReportView:
    """The renderers' view of a report.json document (absent optional sections read as ``None``).

    A mapping is parsed with :meth:`ReportDocument.read` first (a bad field raises
    :class:`~kubejury.records.report.ReportError` naming it)."""
    document = report if isinstance(report, ReportDocument) else ReportDocument.read(report)
    series_docs = document.series
    primary = document.primary_series or next(iter(series_docs), "")
    order = ([primary] if primary in series_docs else []) + [s for s in series_docs if s != primary]
    views = tuple(_series_view(s, series_docs[s], document, primary) for s in order)
    comparison_series = tuple(document.series_comparison.series) or tuple(order)
    return ReportView(
        schema_version=document.schema_version,
        generated_at=document.generated_at,
        version=document.kubejury_version,
        config=document.config,
        primary=primary,
        series=views,
        comparison_series=comparison_series,
        comparison=_comparison_rows(document, comparison_series),
        mean_delta=dict(document.series_comparison.mean_delta),
        inputs=document.inputs,
        gpu_usage=document.gpu_usage,
        provenance=document.provenance,
        reuse=document.reuse,
        sequential=document.sequential,
    )


def judge_matrix(judges: JudgesSection | None, key: str) -> tuple[list[str], list[list[float | None]]] | None:
    """A judge × judge matrix (``spearman``, ``pearson``, ``kappa_quadratic``) of the agreement section."""
    if judges is None:
        return None
    matrices = {
        "spearman": judges.spearman,
        "pearson": judges.pearson,
        "kappa_quadratic": judges.kappa_quadratic,
    }
    names, matrix = list(judges.judges), matrices[key]
    if not names or len(matrix) != len(names):
        return None
    return names, [list(row) for row in matrix]
