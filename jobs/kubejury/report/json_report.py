"""report.json: every result of an :class:`~kubejury.report.aggregate.Analysis` as one versioned document.

The layout is documented in docs/report-schema.md and checked by report.schema.json (beside this
module). report.md and report.html are rendered from this document, not from the analysis, so
the three files always agree. Numbers are rounded to :data:`DECIMALS` places; NaN and infinity
never appear (they become ``null``), and serialisation refuses them outright as a last guard.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubejury import __version__
from kubejury.jsonable import to_json
from kubejury.stats.cube import FloatArray

if TYPE_CHECKING:
    from kubejury.report.aggregate import Analysis, SeriesAnalysis

SCHEMA_VERSION = 1
DECIMALS = 4
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")


def clean(value: Any, decimals: int = DECIMALS) -> Any:
    """``value`` as plain JSON: floats rounded, NaN/inf → ``None``, numpy → Python, keys → str."""
    return to_json(value, decimals)


def dumps(document: Mapping[str, Any]) -> str:
    """The document as indented JSON text; raises ValueError if a NaN slipped through."""
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _pair(array: FloatArray) -> list[float] | None:
    low, high = float(array[0]), float(array[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return [low, high]


def _config(analysis: Analysis) -> dict[str, Any]:
    config = analysis.config
    return {
        "level_weights": {str(k): v for k, v in sorted(config.level_weights.items())},
        "tiers": [dataclasses.asdict(rule) for rule in config.tiers],
        "bootstrap_samples": config.bootstrap_samples,
        "confidence": config.confidence,
        "seed": config.seed,
        "primary_series": analysis.primary_series,
    }


def _benchmark(analysis: Analysis) -> dict[str, Any]:
    bench = analysis.benchmark
    cells: dict[str, dict[str, int]] = {}
    for q in bench.questions:
        per_domain = cells.setdefault(q.domain, {})
        per_domain[str(q.level)] = per_domain.get(str(q.level), 0) + 1
    return {
        "source": bench.source,
        "n_questions": len(bench),
        "domains": list(bench.domains),
        "levels": list(bench.levels),
        "questions": cells,
    }


def _models(result: SeriesAnalysis) -> dict[str, Any]:
    scores = result.scores
    unc = result.uncertainty
    levels = scores.levels
    domains = scores.domains
    rank = {model: i + 1 for i, model in enumerate(scores.ranking)}
    models: dict[str, Any] = {}
    for i, model in enumerate(scores.models):
        u = unc.models.index(model) if unc is not None and model in unc.models else None
        entry: dict[str, Any] = {
            "rank": rank.get(model),
            "levels": {str(lv): scores.level_scores[i, li] for li, lv in enumerate(levels)},
            "levels_ci95": {
                str(lv): (_pair(unc.level_ci[u, li]) if unc is not None and u is not None else None)
                for li, lv in enumerate(levels)
            },
            "weighted": scores.weighted[i],
            "weighted_ci95": _pair(unc.weighted_ci[u]) if unc is not None and u is not None else None,
            "degradation": scores.degradation[i],
            "degradation_ci95": _pair(unc.degradation_ci[u]) if unc is not None and u is not None else None,
            "gap_to_top_ci95": _pair(unc.gap_to_top_ci[u]) if unc is not None and u is not None else None,
            "judge_sigma": scores.judge_sigma[i],
            "tier": scores.tiers.get(model),
            "n_scored": scores.n_scored[i],
            "n_unscored": scores.n_unscored[i],
            "domains": {
                domain: {
                    "weighted": scores.domain_weighted[i, di],
                    "weighted_ci95": (
                        _pair(unc.domain_weighted_ci[u, di]) if unc is not None and u is not None else None
                    ),
                    "levels": {
                        str(lv): scores.domain_level_scores[i, di, li] for li, lv in enumerate(levels)
                    },
                }
                for di, domain in enumerate(domains)
            },
        }
        models[model] = entry
    return models


def _prob_better(result: SeriesAnalysis) -> dict[str, dict[str, Any]] | None:
    unc = result.uncertainty
    if unc is None:
        return None
    return {
        a: {b: (None if i == j else unc.prob_better[i, j]) for j, b in enumerate(unc.models)}
        for i, a in enumerate(unc.models)
    }


def _series(result: SeriesAnalysis) -> dict[str, Any]:
    cube = result.cube
    judges = dict(result.agreement.to_dict())
    judges["parse_failures"] = dict(result.parse_failures)
    return {
        "n_questions": int(cube.has_record.any(axis=0).sum()),
        "n_answers": int(cube.has_record.sum()),
        "n_judgments": result.n_judgments,
        "judge_names": list(cube.judges),
        "models": _models(result),
        "ranking": list(result.scores.ranking),
        "domain_leaders": dict(result.scores.domain_leaders),
        "leading_group": list(result.uncertainty.leading_group) if result.uncertainty is not None else None,
        "prob_better": _prob_better(result),
        "bootstrap": (
            {
                "samples": result.uncertainty.samples,
                "confidence": result.uncertainty.confidence,
                "seed": result.uncertainty.seed,
            }
            if result.uncertainty is not None
            else None
        ),
        "power": (
            result.uncertainty.power.to_dict()
            if result.uncertainty is not None and result.uncertainty.power is not None
            else None
        ),
        "judges": judges,
        "self_preference": result.self_preference.to_dict(),
        "leave_one_judge_out": result.leave_one_judge_out.to_dict(),
        "verbosity": result.verbosity.to_dict(),
        "selection": result.selection.to_dict(),
        "experts": result.experts.to_dict() if result.experts is not None else None,
    }


def _comparison(analysis: Analysis) -> dict[str, Any]:
    comparison = analysis.comparison
    return {
        "primary": comparison.primary,
        "series": list(comparison.series),
        "models": {
            model: {
                series: {"weighted": comparison.weighted[i, k], "delta": comparison.difference[i, k]}
                for k, series in enumerate(comparison.series)
            }
            for i, model in enumerate(comparison.models)
        },
        "mean_delta": comparison.mean_difference(),
    }


def build_report(analysis: Analysis) -> dict[str, Any]:
    """The report.json document of ``analysis`` (plain JSON types, rounded, no NaN)."""
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": analysis.generated_at,
        "kubejury_version": __version__,
        "config": _config(analysis),
        "inputs": dict(analysis.inputs),
        "benchmark": _benchmark(analysis),
        "models_info": {
            name: {
                "parameters": info.parameters,
                "parameters_label": info.parameters_label,
                "quantization": info.quantization,
                "family": info.family,
                "gpu_memory_gib": info.gpu_memory_gib,
            }
            for name, info in sorted(analysis.model_infos.items())
        },
        "judges_info": {
            name: {"same_as": relation.same_as, "family": relation.family}
            for name, relation in sorted(analysis.judge_relations.items())
        },
        "primary_series": analysis.primary_series,
        "series": {name: _series(result) for name, result in analysis.series.items()},
        "series_comparison": _comparison(analysis),
    }
    cleaned: dict[str, Any] = clean(document)
    return cleaned


def load_schema() -> dict[str, Any]:
    """The JSON Schema of report.json (draft 2020-12)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema
