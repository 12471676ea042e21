"""The one entry point from judgments to reports: every caller (CLI, local runner, aggregation Job).

``aggregate()`` takes a benchmark, judgment sources and the optional extras (answers, expert
scores, model facts, judge relations, scoring configuration), builds one ScoreCube per series and
runs every analysis on each: the study's scoring, the bootstrap, judge agreement, self-preference,
leave-one-judge-out, verbosity, model selection and expert validation. The result, an
:class:`Analysis`, holds every per-series result object; ``kubejury.report.write_reports()``
turns it into report.json, report.md and report.html (this module never renders, so the report
package depends on it and not the other way round).

The pure core is :func:`analyse_cubes` (cubes in, Analysis out), so tests and the pipeline can
hand it cubes they built themselves; :func:`aggregate` only adds loading.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kubejury.errors import InputError
from kubejury.files.benchmark import Benchmark, load_benchmark
from kubejury.files.tables import Experts, Judgments, build_cubes, load_answers, load_experts, load_judgments
from kubejury.modelinfo import ModelInfo
from kubejury.records.timestamps import format_time
from kubejury.stats.agreement import JudgeAgreement, judge_agreement
from kubejury.stats.bias import (
    LeaveOneJudgeOut,
    SelfPreference,
    VerbosityBias,
    leave_one_judge_out,
    self_preference,
    verbosity_bias,
)
from kubejury.stats.cube import ScoreCube
from kubejury.stats.equivalence import ComparisonRequest, ComparisonResult, compare_pairs
from kubejury.stats.experts import ExpertAgreement, ExpertRows, PanelScores, expert_agreement
from kubejury.stats.scoring import ScoringConfig, SeriesScores, score_series
from kubejury.stats.selection import ModelSelection, select_models
from kubejury.stats.series_compare import SeriesComparison, compare_series
from kubejury.stats.uncertainty import SeriesUncertainty, bootstrap_series

Source = str | Path
Sources = Source | Sequence[Source]


@dataclass(frozen=True)
class JudgeRelation:
    """What a judge is, for the self-preference analysis: the evaluated model it *is*
    (``same_as``) and/or its model family."""

    same_as: str | None = None
    family: str | None = None


@dataclass(frozen=True)
class SeriesAnalysis:
    """Every result for one series. ``uncertainty`` is ``None`` when the bootstrap was switched
    off (``bootstrap_samples == 0``); ``experts`` is ``None`` when no expert scores were given.

    ``parse_failures``: judge → number of judgment records whose score is null (the judge's
    output could not be parsed). ``n_judgments``: judgment records of the series.
    """

    series: str
    cube: ScoreCube
    scores: SeriesScores
    uncertainty: SeriesUncertainty | None
    agreement: JudgeAgreement
    self_preference: SelfPreference
    leave_one_judge_out: LeaveOneJudgeOut
    verbosity: VerbosityBias
    selection: ModelSelection
    experts: ExpertAgreement | None
    parse_failures: dict[str, int]
    n_judgments: int | None
    comparisons: tuple[ComparisonResult, ...] = ()


@dataclass(frozen=True)
class Analysis:
    """Everything a report says. ``series`` is ordered with the primary series first."""

    benchmark: Benchmark
    series: dict[str, SeriesAnalysis]
    primary_series: str
    comparison: SeriesComparison
    config: ScoringConfig
    model_infos: dict[str, ModelInfo] = field(default_factory=dict)
    judge_relations: dict[str, JudgeRelation] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    generated_at: str = ""


# --------------------------------------------------------------------------------------------
# Pure core
# --------------------------------------------------------------------------------------------


def null_counts_from_cube(cube: ScoreCube) -> dict[str, int]:
    """Per judge: answers with a judgment record where this judge's score is missing or null.

    Used when the loader does not report null-score records itself; it cannot tell a null score
    from a judgment that was never written.
    """
    missing = np.isnan(cube.scores) & cube.has_record[:, :, None]
    counts = missing.sum(axis=(0, 1))
    return {judge: int(counts[j]) for j, judge in enumerate(cube.judges)}


def _primary(cubes: Mapping[str, ScoreCube], config: ScoringConfig) -> str:
    if not cubes:
        raise InputError("judgments", "no judgments: nothing to aggregate")
    if config.primary_series is None:
        return next(iter(cubes))
    if config.primary_series not in cubes:
        known = ", ".join(sorted(cubes))
        raise InputError(
            "judgments",
            f"primary series {config.primary_series!r} has no judgments (series present: {known})",
        )
    return config.primary_series


def analyse_series(
    cube: ScoreCube,
    config: ScoringConfig,
    *,
    experts: ExpertRows | None = None,
    experts_source: str = "experts",
    model_infos: Mapping[str, ModelInfo] | None = None,
    judge_relations: Mapping[str, JudgeRelation] | None = None,
    parse_failures: Mapping[str, int] | None = None,
    n_judgments: int | None = None,
    comparisons: Sequence[ComparisonRequest] = (),
) -> SeriesAnalysis:
    """Every analysis of one series' cube (``comparisons``: pairs tested for equivalence)."""
    infos = dict(model_infos or {})
    relations = dict(judge_relations or {})
    scores = score_series(cube, config)
    uncertainty = bootstrap_series(cube, config, scores) if config.bootstrap_samples > 0 else None
    leading = uncertainty.leading_group if uncertainty is not None else None
    preference = self_preference(
        cube,
        judge_same_as={j: r.same_as for j, r in relations.items() if r.same_as},
        judge_family={j: r.family for j, r in relations.items() if r.family},
        model_family={m: i.family for m, i in infos.items() if i.family},
        n_bootstrap=max(int(config.bootstrap_samples), 1),
        confidence=config.confidence,
        seed=config.seed,
    )
    failures = dict(parse_failures) if parse_failures is not None else null_counts_from_cube(cube)
    for judge in cube.judges:
        failures.setdefault(judge, 0)
    return SeriesAnalysis(
        series=cube.series,
        cube=cube,
        scores=scores,
        uncertainty=uncertainty,
        agreement=judge_agreement(cube),
        self_preference=preference,
        leave_one_judge_out=leave_one_judge_out(cube, config),
        verbosity=verbosity_bias(cube),
        selection=select_models(scores, infos, cube, leading_group=leading),
        experts=(
            expert_agreement(PanelScores.from_series_scores(scores, cube), experts, source=experts_source)
            if experts is not None
            else None
        ),
        parse_failures=failures,
        n_judgments=n_judgments,
        comparisons=compare_pairs(comparisons, scores, uncertainty, int(cube.has_record.any(axis=0).sum())),
    )


def analyse_cubes(
    benchmark: Benchmark,
    cubes: Mapping[str, ScoreCube],
    config: ScoringConfig | None = None,
    *,
    experts: ExpertRows | None = None,
    model_infos: Mapping[str, ModelInfo] | None = None,
    judge_relations: Mapping[str, JudgeRelation] | None = None,
    parse_failures: Mapping[str, Mapping[str, int]] | None = None,
    n_judgments: Mapping[str, int] | None = None,
    inputs: Mapping[str, Any] | None = None,
    generated_at: dt.datetime | None = None,
    comparisons: Sequence[ComparisonRequest] = (),
) -> Analysis:
    """The :class:`Analysis` of already-built cubes (one per series, in series order).

    ``parse_failures`` and ``n_judgments`` are per series (from the loader); when absent, null
    counts are derived from the cubes. ``comparisons`` are tested in every series.
    """
    config = config or ScoringConfig()
    primary = _primary(cubes, config)
    order = [primary] + [s for s in cubes if s != primary]
    inputs_doc = dict(inputs or {})
    experts_source = str(inputs_doc.get("experts") or "experts")
    results = {
        name: analyse_series(
            cubes[name],
            config,
            experts=experts,
            experts_source=experts_source,
            model_infos=model_infos,
            judge_relations=judge_relations,
            parse_failures=(parse_failures or {}).get(name),
            n_judgments=(n_judgments or {}).get(name),
            comparisons=comparisons,
        )
        for name in order
    }
    moment = generated_at or dt.datetime.now(dt.UTC)
    return Analysis(
        benchmark=benchmark,
        series=results,
        primary_series=primary,
        comparison=compare_series({name: r.scores for name, r in results.items()}, primary),
        config=config,
        model_infos=dict(model_infos or {}),
        judge_relations=dict(judge_relations or {}),
        inputs=inputs_doc,
        generated_at=format_time(moment),
    )


# --------------------------------------------------------------------------------------------
# Loading and writing
# --------------------------------------------------------------------------------------------


def judgment_counts(judgments: Judgments) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Per series: null-score (parse failure) records per judge, and the number of records."""
    n_series, n_judges = len(judgments.series), len(judgments.judges)
    key = judgments.series_code.astype(np.int64) * n_judges + judgments.judge_code.astype(np.int64)
    nulls = np.bincount(
        key, weights=np.isnan(judgments.score).astype(np.float64), minlength=n_series * n_judges
    )
    present = np.bincount(key, minlength=n_series * n_judges)
    records = np.bincount(judgments.series_code.astype(np.int64), minlength=n_series)
    failures = {
        series: {
            judge: int(nulls[s * n_judges + j])
            for j, judge in enumerate(judgments.judges)
            if present[s * n_judges + j] > 0
        }
        for s, series in enumerate(judgments.series)
    }
    return failures, {series: int(records[s]) for s, series in enumerate(judgments.series)}


def aggregate(
    benchmark: Benchmark | Source,
    judgments: Sources | Judgments,
    answers: Sources | None = None,
    experts: Experts | Source | None = None,
    model_infos: Mapping[str, ModelInfo] | None = None,
    judge_relations: Mapping[str, JudgeRelation] | None = None,
    config: ScoringConfig | None = None,
    *,
    inputs: Mapping[str, Any] | None = None,
    generated_at: dt.datetime | None = None,
    comparisons: Sequence[ComparisonRequest] = (),
) -> Analysis:
    """Load the benchmark, judgments (file, directory of JSONL files, glob, or a list of those —
    or judgments already loaded, as ``kubejury aggregate`` reads them from a run's storage),
    optional answers and expert scores, and analyse every series (see :func:`analyse_cubes`).

    ``inputs`` adds to the run metadata recorded in report.json (e.g. the models file used).
    Bad input raises :class:`~kubejury.errors.InputError` naming file, line and field.
    """
    bench = benchmark if isinstance(benchmark, Benchmark) else load_benchmark(benchmark)
    records = judgments if isinstance(judgments, Judgments) else load_judgments(judgments)
    answer_records = load_answers(answers) if answers is not None else None
    expert_rows = experts if isinstance(experts, Experts) or experts is None else load_experts(experts)
    cubes = build_cubes(bench, records, answer_records)
    failures, counts = judgment_counts(records)
    metadata: dict[str, Any] = {
        "benchmark": bench.source,
        "judgments": list(records.sources),
        "answers": list(answer_records.sources) if answer_records is not None else [],
        "experts": expert_rows.source if expert_rows is not None else None,
    }
    metadata.update(inputs or {})
    return analyse_cubes(
        bench,
        cubes,
        config,
        experts=expert_rows.frame if expert_rows is not None else None,
        model_infos=model_infos,
        judge_relations=judge_relations,
        parse_failures=failures,
        n_judgments=counts,
        inputs=metadata,
        generated_at=generated_at,
        comparisons=comparisons,
    )
