"""Read a report.json document into the rows and matrices the Markdown and HTML renderers print.

Both renderers work from the JSON document, never from the analysis objects: what a reader sees
in report.md and report.html is then exactly what report.json says, and the renderers can be
tested (and re-run on an old report.json) without recomputing anything. This module is the one
place that knows the document's layout (docs/report-schema.md); the renderers only format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Report = Mapping[str, Any]
Interval = tuple[float | None, float | None] | None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def _interval(value: Any) -> Interval:
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        return (_num(value[0]), _num(value[1]))
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


# --------------------------------------------------------------------------------------------
# Formatting shared by both renderers
# --------------------------------------------------------------------------------------------


def fmt(value: Any, digits: int = 2) -> str:
    """A number with ``digits`` decimals, or an en dash when it is missing (null)."""
    number = _num(value)
    return "–" if number is None else f"{number:.{digits}f}"


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
    judges: Mapping[str, Any]
    parse_failures: dict[str, int]
    self_preference: Any
    leave_one_judge_out: Any
    verbosity: Any
    selection: Any
    experts: Any
    n_questions: int | None
    n_judgments: int | None
    power: Mapping[str, Any] | None = None  # report.json's power block (None without bootstrap)

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
    config: Mapping[str, Any]
    primary: str
    series: tuple[SeriesView, ...]  # primary first
    comparison_series: tuple[str, ...]
    comparison: tuple[ComparisonRow, ...]
    mean_delta: dict[str, float | None]  # series -> mean of W(series) - W(primary) over shared models
    inputs: Mapping[str, Any]


def _levels_of(report: Report) -> tuple[int, ...]:
    levels = _list(_mapping(report.get("benchmark")).get("levels"))
    if levels:
        return tuple(int(level) for level in levels)
    weights = _mapping(_mapping(report.get("config")).get("level_weights"))
    return tuple(sorted(int(k) for k in weights))


def _series_view(name: str, doc: Mapping[str, Any], report: Report, primary: str) -> SeriesView:
    models_info = _mapping(report.get("models_info"))
    models = _mapping(doc.get("models"))
    ranking = [m for m in _list(doc.get("ranking")) if m in models]
    ranking += sorted(m for m in models if m not in ranking)
    levels = _levels_of(report)
    domains_seen: list[str] = []
    for model in ranking:
        for domain in _mapping(models[model].get("domains")):
            if domain not in domains_seen:
                domains_seen.append(domain)
    bench_domains = [str(d) for d in _list(_mapping(report.get("benchmark")).get("domains"))]
    domains = tuple(
        [d for d in bench_domains if d in domains_seen] + [d for d in domains_seen if d not in bench_domains]
    )
    rows = []
    for index, model in enumerate(ranking):
        entry = _mapping(models[model])
        info = _mapping(models_info.get(model))
        level_scores = _mapping(entry.get("levels"))
        level_cis = _mapping(entry.get("levels_ci95"))
        rows.append(
            ModelRow(
                rank=int(entry.get("rank") or index + 1),
                model=str(model),
                levels={lv: _num(level_scores.get(str(lv))) for lv in levels},
                levels_ci={lv: _interval(level_cis.get(str(lv))) for lv in levels},
                weighted=_num(entry.get("weighted")),
                weighted_ci=_interval(entry.get("weighted_ci95")),
                degradation=_num(entry.get("degradation")),
                degradation_ci=_interval(entry.get("degradation_ci95")),
                sigma=_num(entry.get("judge_sigma")),
                tier=entry.get("tier") if isinstance(entry.get("tier"), str) else None,
                n_scored=int(entry.get("n_scored") or 0),
                n_unscored=int(entry.get("n_unscored") or 0),
                parameters=_num(info.get("parameters")),
                parameters_label=info.get("parameters_label")
                if isinstance(info.get("parameters_label"), str)
                else None,
                quantization=info.get("quantization") if isinstance(info.get("quantization"), str) else None,
                family=info.get("family") if isinstance(info.get("family"), str) else None,
                gpu_memory_gib=_num(info.get("gpu_memory_gib")),
                domains={
                    str(d): _num(_mapping(v).get("weighted"))
                    for d, v in _mapping(entry.get("domains")).items()
                },
            )
        )
    prob_better = {
        str(a): {str(b): _num(p) for b, p in _mapping(row).items()}
        for a, row in _mapping(doc.get("prob_better")).items()
    }
    judges = _mapping(doc.get("judges"))
    parse_failures = {
        str(k): int(v) for k, v in _mapping(judges.get("parse_failures")).items() if v is not None
    }
    n_q = doc.get("n_questions")
    n_j = doc.get("n_judgments")
    return SeriesView(
        name=name,
        is_primary=name == primary,
        levels=levels,
        domains=domains,
        rows=tuple(rows),
        domain_leaders={
            str(k): str(v) for k, v in _mapping(doc.get("domain_leaders")).items() if v is not None
        },
        leading_group=tuple(str(m) for m in _list(doc.get("leading_group"))),
        prob_better=prob_better,
        judges=judges,
        parse_failures=parse_failures,
        self_preference=doc.get("self_preference"),
        leave_one_judge_out=doc.get("leave_one_judge_out"),
        verbosity=doc.get("verbosity"),
        selection=doc.get("selection"),
        experts=doc.get("experts"),
        n_questions=int(n_q) if isinstance(n_q, int) else None,
        n_judgments=int(n_j) if isinstance(n_j, int) else None,
        power=_mapping(doc.get("power")) or None,
    )


def read_report(report: Report) -> ReportView:
    """The renderers' view of a report.json document (tolerates absent optional sections)."""
    series_docs = _mapping(report.get("series"))
    primary = str(report.get("primary_series") or next(iter(series_docs), ""))
    order = ([primary] if primary in series_docs else []) + [s for s in series_docs if s != primary]
    views = tuple(_series_view(str(s), _mapping(series_docs[s]), report, primary) for s in order)
    comparison_doc = _mapping(report.get("series_comparison"))
    comparison_series = tuple(str(s) for s in _list(comparison_doc.get("series"))) or tuple(order)
    rows = []
    for model, per_series in _mapping(comparison_doc.get("models")).items():
        per = _mapping(per_series)
        rows.append(
            ComparisonRow(
                model=str(model),
                weighted={s: _num(_mapping(per.get(s)).get("weighted")) for s in comparison_series},
                delta={s: _num(_mapping(per.get(s)).get("delta")) for s in comparison_series},
            )
        )
    return ReportView(
        schema_version=int(report.get("schema_version") or 0),
        generated_at=str(report.get("generated_at") or ""),
        version=str(report.get("kubejury_version") or ""),
        config=_mapping(report.get("config")),
        primary=primary,
        series=views,
        comparison_series=comparison_series,
        comparison=tuple(rows),
        mean_delta={str(k): _num(v) for k, v in _mapping(comparison_doc.get("mean_delta")).items()},
        inputs=_mapping(report.get("inputs")),
    )


def judge_matrix(judges: Mapping[str, Any], key: str) -> tuple[list[str], list[list[float | None]]] | None:
    """A judge × judge matrix (``spearman``, ``pearson``, ``kappa_quadratic``) of the agreement section."""
    names = [str(j) for j in _list(judges.get("judges"))]
    matrix = _list(judges.get(key))
    if not names or len(matrix) != len(names):
        return None
    return names, [[_num(v) for v in _list(row)] for row in matrix]


def per_judge(judges: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [_mapping(item) for item in _list(judges.get("per_judge"))]


def as_mapping(value: Any) -> Mapping[str, Any]:
    return _mapping(value)


def as_list(value: Any) -> list[Any]:
    return _list(value)


def as_number(value: Any) -> float | None:
    return _num(value)
