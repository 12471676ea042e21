"""report.json: every result of an :class:`~kubejury.report.aggregate.Analysis` as one versioned document.

The document is a :class:`~kubejury.records.report.ReportDocument` (the one typed definition of
report.json; report.schema.json beside this module is generated from it). This module only fills
it from the analysis. report.md and report.html are rendered from this document, not from the
analysis, so the three files always agree. Numbers are rounded to :data:`DECIMALS` places; NaN and
infinity never appear (they become ``null``), and serialisation refuses them outright as a last guard.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from kubejury import __version__
from kubejury.jsonable import to_json
from kubejury.records.report import (
    DECIMALS,
    SCHEMA_PATH,
    SCHEMA_VERSION,
    BenchmarkSection,
    BootstrapSection,
    ComparisonCell,
    ComparisonEntry,
    DifferenceEntry,
    DomainEntry,
    ExpertsSection,
    JudgeInfo,
    JudgesSection,
    LeaveOneJudgeOutSection,
    ModelEntry,
    ModelInfo,
    PowerSection,
    QuestionsNeeded,
    ReportDocument,
    ScoringSection,
    SelectionSection,
    SelfPreferenceSection,
    SeriesComparison,
    SeriesSection,
    TierRule,
    VerbositySection,
)
from kubejury.stats.cube import FloatArray
from kubejury.stats.equivalence import ALPHA, ComparisonResult, PairedDifference

if TYPE_CHECKING:
    from kubejury.report.aggregate import Analysis, SeriesAnalysis

__all__ = ["DECIMALS", "SCHEMA_PATH", "SCHEMA_VERSION", "build_document", "build_report", "clean", "dumps"]


def clean(value: Any, decimals: int = DECIMALS) -> Any:
    """``value`` as plain JSON: floats rounded, NaN/inf → ``None``, numpy → Python, keys → str."""
    return to_json(value, decimals)


def dumps(document: Mapping[str, Any] | ReportDocument) -> str:
    """The document as indented JSON text; raises ValueError if a NaN slipped through."""
    plain = document.to_json() if isinstance(document, ReportDocument) else document
    return json.dumps(plain, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _pair(array: FloatArray) -> list[float] | None:
    low, high = float(array[0]), float(array[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return [low, high]


def _config(analysis: Analysis) -> ScoringSection:
    config = analysis.config
    return ScoringSection(
        level_weights={str(k): v for k, v in sorted(config.level_weights.items())},
        tiers=[TierRule(**dataclasses.asdict(rule)) for rule in config.tiers],
        bootstrap_samples=config.bootstrap_samples,
        confidence=config.confidence,
        seed=config.seed,
        primary_series=analysis.primary_series,
    )


def _benchmark(analysis: Analysis) -> BenchmarkSection:
    bench = analysis.benchmark
    cells: dict[str, dict[str, int]] = {}
    for q in bench.questions:
        per_domain = cells.setdefault(q.domain, {})
        per_domain[str(q.level)] = per_domain.get(str(q.level), 0) + 1
    return BenchmarkSection(
        source=bench.source,
        n_questions=len(bench),
        domains=list(bench.domains),
        levels=list(bench.levels),
        questions=cells,
    )


def _interval(array: FloatArray | None) -> list[float] | None:
    return None if array is None else _pair(array)


def _model_entry(result: SeriesAnalysis, i: int, u: int | None, rank: int | None) -> ModelEntry:
    """One model's entry; ``u`` is its row in the bootstrap results (``None`` without a bootstrap)."""
    scores, unc = result.scores, result.uncertainty
    levels = scores.levels
    boot = unc if unc is not None and u is not None else None
    return ModelEntry(
        rank=rank,
        levels={str(lv): scores.level_scores[i, li] for li, lv in enumerate(levels)},
        levels_ci95={
            str(lv): _interval(boot.level_ci[u, li] if boot is not None else None)
            for li, lv in enumerate(levels)
        },
        weighted=scores.weighted[i],
        weighted_ci95=_interval(boot.weighted_ci[u] if boot is not None else None),
        degradation=scores.degradation[i],
        degradation_ci95=_interval(boot.degradation_ci[u] if boot is not None else None),
        gap_to_top_ci95=_interval(boot.gap_to_top_ci[u] if boot is not None else None),
        judge_sigma=scores.judge_sigma[i],
        tier=scores.tiers.get(scores.models[i]),
        n_scored=int(scores.n_scored[i]),
        n_unscored=int(scores.n_unscored[i]),
        domains={
            domain: DomainEntry(
                weighted=scores.domain_weighted[i, di],
                weighted_ci95=_interval(boot.domain_weighted_ci[u, di] if boot is not None else None),
                levels={str(lv): scores.domain_level_scores[i, di, li] for li, lv in enumerate(levels)},
            )
            for di, domain in enumerate(scores.domains)
        },
    )


def _models(result: SeriesAnalysis) -> dict[str, ModelEntry]:
    scores, unc = result.scores, result.uncertainty
    rank = {model: i + 1 for i, model in enumerate(scores.ranking)}
    booted = unc.models if unc is not None else ()
    return {
        model: _model_entry(result, i, booted.index(model) if model in booted else None, rank.get(model))
        for i, model in enumerate(scores.models)
    }


def _prob_better(result: SeriesAnalysis) -> dict[str, dict[str, float | None]] | None:
    unc = result.uncertainty
    if unc is None:
        return None
    return {
        a: {b: (None if i == j else float(unc.prob_better[i, j])) for j, b in enumerate(unc.models)}
        for i, a in enumerate(unc.models)
    }


def _judges(result: SeriesAnalysis) -> JudgesSection:
    section = dict(result.agreement.to_dict())
    section["parse_failures"] = dict(result.parse_failures)
    return JudgesSection.model_validate(clean(section))


def _bootstrap(result: SeriesAnalysis) -> tuple[BootstrapSection | None, PowerSection | None]:
    unc = result.uncertainty
    if unc is None:
        return None, None
    bootstrap = BootstrapSection(samples=unc.samples, confidence=unc.confidence, seed=unc.seed)
    power = PowerSection.model_validate(clean(unc.power.to_dict())) if unc.power is not None else None
    return bootstrap, power


def _difference(d: PairedDifference) -> DifferenceEntry:
    return DifferenceEntry(
        difference=d.estimate,
        se=d.se,
        df=d.df,
        ci90=_pair(np.asarray(d.ci90)),
        ci95=_pair(np.asarray(d.ci95)),
    )


def _comparison_entry(c: ComparisonResult) -> ComparisonEntry:
    needed = c.needed
    return ComparisonEntry(
        a=c.request.a,
        b=c.request.b,
        margin=c.request.margin,
        origin=c.request.origin,
        alpha=ALPHA,
        verdict=c.verdict,
        equivalent=c.equivalent,
        different=c.different,
        weighted=_difference(c.weighted) if c.weighted is not None else None,
        levels={str(level): _difference(d) for level, d in c.levels.items()},
        domains={domain: _difference(d) for domain, d in c.domains.items()},
        n_questions=c.n_questions,
        questions_needed=(
            QuestionsNeeded(equivalent=needed.equivalent, different=needed.different, power=needed.power)
            if needed is not None
            else None
        ),
        reason=c.reason,
    )


def _series(result: SeriesAnalysis) -> SeriesSection:
    cube = result.cube
    bootstrap, power = _bootstrap(result)
    experts = result.experts
    return SeriesSection(
        n_questions=int(cube.has_record.any(axis=0).sum()),
        n_answers=int(cube.has_record.sum()),
        n_judgments=result.n_judgments,
        judge_names=list(cube.judges),
        models=_models(result),
        ranking=list(result.scores.ranking),
        domain_leaders=dict(result.scores.domain_leaders),
        leading_group=list(result.uncertainty.leading_group) if result.uncertainty is not None else None,
        prob_better=_prob_better(result),
        bootstrap=bootstrap,
        power=power,
        judges=_judges(result),
        self_preference=SelfPreferenceSection.model_validate(clean(result.self_preference.to_dict())),
        leave_one_judge_out=LeaveOneJudgeOutSection.model_validate(
            clean(result.leave_one_judge_out.to_dict())
        ),
        verbosity=VerbositySection.model_validate(clean(result.verbosity.to_dict())),
        selection=SelectionSection.model_validate(clean(result.selection.to_dict())),
        experts=ExpertsSection.model_validate(clean(experts.to_dict())) if experts is not None else None,
        comparisons=[_comparison_entry(c) for c in result.comparisons],
    )


def _comparison(analysis: Analysis) -> SeriesComparison:
    comparison = analysis.comparison
    return SeriesComparison(
        primary=comparison.primary,
        series=list(comparison.series),
        models={
            model: {
                series: ComparisonCell(weighted=comparison.weighted[i, k], delta=comparison.difference[i, k])
                for k, series in enumerate(comparison.series)
            }
            for i, model in enumerate(comparison.models)
        },
        mean_delta=dict(comparison.mean_difference()),
    )


def build_document(analysis: Analysis) -> ReportDocument:
    """The report.json document of ``analysis`` (rounded, no NaN; no provenance or GPU usage yet)."""
    return ReportDocument(
        schema_version=SCHEMA_VERSION,
        generated_at=analysis.generated_at,
        kubejury_version=__version__,
        config=_config(analysis),
        inputs=dict(analysis.inputs),
        benchmark=_benchmark(analysis),
        models_info={
            name: ModelInfo(
                parameters=info.parameters,
                parameters_label=info.parameters_label,
                quantization=info.quantization,
                family=info.family,
                gpu_memory_gib=info.gpu_memory_gib,
            )
            for name, info in sorted(analysis.model_infos.items())
        },
        judges_info={
            name: JudgeInfo(same_as=relation.same_as, family=relation.family)
            for name, relation in sorted(analysis.judge_relations.items())
        },
        primary_series=analysis.primary_series,
        series={name: _series(result) for name, result in analysis.series.items()},
        series_comparison=_comparison(analysis),
    )


def build_report(analysis: Analysis) -> dict[str, Any]:
    """:func:`build_document` as plain JSON values (what report.json holds)."""
    return build_document(analysis).to_json()


def load_schema() -> dict[str, Any]:
    """The JSON Schema of report.json (draft 2020-12), as committed beside this module."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema
