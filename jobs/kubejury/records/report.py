"""report.json as one typed, versioned document: :class:`ReportDocument`.

Why this module exists: report.json crosses processes — the aggregation (a Job, or ``kubejury
report``) writes it, the renderers read it back to print report.md and report.html, and the operator
reads its summary from the run's storage into the EvalRun status. Before, the writer built a dict by
hand, the renderers read it defensively, and report.schema.json described it a third time. Now this
model is the one definition: the writer builds it, every reader parses it, and report.schema.json is
generated from it (``python -m kubejury.records.report --schema``; a unit test fails when the
committed file differs).

Policies, chosen on purpose:

* **Frozen**: a document is a value; nothing edits a parsed report.
* **Extra keys**: ``forbid`` when a document is built, so a key the writer or a statistic adds
  without declaring it here fails the tests; :meth:`ReportDocument.read` ignores them, and the
  schema allows them, because adding a key keeps the schema version (docs/report-schema.md) and a
  report written by a later kubejury must still read and render here.
* **Absent keys** take defaults when read (``None`` where the old readers showed a dash), so a
  partial document — an older report, a test's, the summary part — still reads; a key that is
  present with the wrong type is an error naming its path. The writer always writes every key, and
  the schema requires them all (except the few that reports of schema version 1 did not always carry).
* **Numbers** are plain JSON: rounded to :data:`DECIMALS` places, NaN and infinity become ``null``,
  numpy scalars become Python numbers, an integer stays an integer.
* **Versions**: ``schema_version`` says which layout a document has; older layouts are migrated in
  one place (:meth:`ReportDocument._migrate`) before the fields are read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, SkipJsonSchema
from pydantic_core.core_schema import DictSchema, ModelSchema

from kubejury.jsonable import to_json

SCHEMA_VERSION: Final = 1
"""The layout this kubejury writes; :meth:`ReportDocument.read` migrates older ones to it."""

DECIMALS = 4
"""Places every number of report.json is rounded to."""

SCHEMA_PATH = Path(__file__).parent.parent / "report" / "report.schema.json"
"""Where the generated JSON Schema is committed (beside the report writer)."""

LEVEL_KEY = r"^[1-9][0-9]*$"
GENERATED_AT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
SHA256_HEX = r"^[0-9a-f]{64}$"

MigrationStep = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[int, MigrationStep] = {}
"""``version → step`` that turns a document of that version into one of the next version. Empty
while version 1 is the only layout ever written; a new layout adds its predecessor's step here."""


def _json_number(value: object) -> object:
    """A number as report.json spells it: rounded, finite or ``None``, numpy turned into Python."""
    if isinstance(value, bool):
        raise ValueError("a number, not true/false")
    if value is None or isinstance(value, int | float) or hasattr(value, "dtype"):
        return to_json(value, DECIMALS)
    raise ValueError(f"a number or null, not {type(value).__name__}")


Number = Annotated[
    int | float | None, BeforeValidator(_json_number), WithJsonSchema({"type": ["number", "null"]})
]
"""A statistic: ``null`` where it is undefined on the data."""

Real = Annotated[float, BeforeValidator(_json_number)]
"""A number that is always defined (a confidence level, GPU-hours)."""

Probability = Annotated[Annotated[float, Field(ge=0, le=1)] | None, BeforeValidator(_json_number)]
Count = Annotated[int, Field(ge=0)]
Rank = Annotated[int, Field(ge=1)]
Interval = Annotated[list[Real], Field(min_length=2, max_length=2)] | None
"""A 95% interval ``[low, high]``, or ``None`` without a bootstrap or where it is undefined."""

LevelKey = Annotated[str, Field(pattern=LEVEL_KEY)]
Matrix = list[list[Number]]
Absent = SkipJsonSchema[None]
"""``X | Absent = None``: always written as an X, read as ``None`` when a partial document lacks it."""

InputSource = str | list[str] | None
"""A file, a list of files or a storage URI the numbers were computed from."""

SINGLE_INPUTS = ("benchmark", "experts", "models")
"""``inputs`` keys that name one file or URI (or ``null``); ``judgments`` and ``answers`` name one or more."""
MULTIPLE_INPUTS = ("judgments", "answers")


def _check_inputs(inputs: dict[str, InputSource]) -> dict[str, InputSource]:
    for key in SINGLE_INPUTS:
        if isinstance(inputs.get(key), list):
            raise ValueError(f"inputs.{key}: one file or URI (or null), not a list")
    for key in MULTIPLE_INPUTS:
        if key in inputs and inputs[key] is None:
            raise ValueError(f"inputs.{key}: a file, URI or list of them, not null")
    return inputs


_SOURCES_SCHEMA = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
Inputs = Annotated[
    dict[str, InputSource],
    AfterValidator(_check_inputs),
    Field(
        description=(
            "Where the data came from: files read, or storage URIs in a run (callers may add keys such as "
            "run, spec, storage)."
        ),
        json_schema_extra={
            "properties": {
                **{key: {"type": ["string", "null"]} for key in SINGLE_INPUTS},
                **{key: _SOURCES_SCHEMA for key in MULTIPLE_INPUTS},
            }
        },
    ),
]


def _not_required(*names: str) -> Callable[[dict[str, Any]], None]:
    """A schema hook: keys ``names`` may be absent in a valid document (v1 reports written before
    they existed lack them)."""

    def drop(schema: dict[str, Any]) -> None:
        schema["required"] = [name for name in schema.get("required", []) if name not in names]

    return drop


class _Section(BaseModel):
    """Every part of report.json: frozen, exact when built (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_serialization_defaults_required=True)


# ------------------------------------------------------------------------------- run settings


class TierRule(_Section):
    """A tier and the bounds a model must meet to earn it (``None``: no bound)."""

    tier: str = ""
    min_weighted: Number = None
    max_degradation: Number = None
    max_sigma: Number = None


class ScoringSection(_Section):
    """``config``: the scoring settings the numbers were computed with."""

    level_weights: dict[LevelKey, Number] = Field(default_factory=dict)
    tiers: list[TierRule] = Field(default_factory=list)
    bootstrap_samples: Count | Absent = None
    confidence: Real = Field(default=0.95, gt=0, lt=1)
    seed: int | Absent = None
    primary_series: str = ""


class BenchmarkSection(_Section):
    """``benchmark``: where the questions came from and how many there are per domain and level."""

    source: str = ""
    n_questions: Count = 0
    domains: list[str] = Field(default_factory=list)
    levels: list[Rank] = Field(default_factory=list)
    questions: dict[str, dict[LevelKey, Count]] = Field(default_factory=dict)


class ModelInfo(_Section):
    """``models_info.<model>``: size and family from the models file (``None`` when not declared)."""

    parameters: Number = None
    parameters_label: str | None = None
    quantization: str | None = None
    family: str | None = None
    gpu_memory_gib: Number = None


class JudgeInfo(_Section):
    """``judges_info.<judge>``: the model a judge is, or shares a family with (for self-preference)."""

    same_as: str | None = None
    family: str | None = None


# ------------------------------------------------------------------------------- one series


class DomainEntry(_Section):
    """``models.<model>.domains.<domain>``: a model's weighted score in one domain."""

    weighted: Number = None
    weighted_ci95: Interval = None
    levels: dict[LevelKey, Number] = Field(default_factory=dict)


class ModelEntry(_Section):
    """``series.<s>.models.<model>``: the study's numbers for one model (W, D, σ) with intervals."""

    rank: Rank | Absent = None
    levels: dict[LevelKey, Number] = Field(default_factory=dict)
    levels_ci95: dict[LevelKey, Interval] = Field(default_factory=dict)
    weighted: Number = None
    weighted_ci95: Interval = None
    degradation: Number = None
    degradation_ci95: Interval = None
    gap_to_top_ci95: Interval = None
    judge_sigma: Number = None
    tier: str | None = None
    n_scored: Count = 0
    n_unscored: Count = 0
    domains: dict[str, DomainEntry] = Field(default_factory=dict)


class BootstrapSection(_Section):
    """``series.<s>.bootstrap``: how the intervals were resampled."""

    samples: Annotated[int, Field(ge=1)] = 1
    confidence: Real = 0.95
    seed: int = 0


class PowerSection(_Section):
    """``series.<s>.power``: what differences in W this benchmark's size can detect."""

    paired_se: Real = Field(default=0.0, ge=0)
    df: Number = None
    confidence: Real = 0.95
    detection: dict[str, Number] = Field(default_factory=dict)
    target: Real = 0.8
    detectable: Number = None


class JudgeSummary(_Section):
    """``judges.per_judge[i]``: one judge's use of the scale against the rest of the panel."""

    judge: str = ""
    n_units: Count | Absent = None
    n_scored: Count | Absent = None
    n_null: Count | Absent = None
    mean_score: Number = None
    bias_vs_others: Number = None
    n_bias: Count | Absent = None


class JudgesSection(_Section):
    """``series.<s>.judges``: agreement of the judge panel (``applicable`` false with fewer than two)."""

    series: str = ""
    judges: list[str] = Field(default_factory=list)
    applicable: bool = True
    reason: str | None = None
    n_units: Count | Absent = None
    krippendorff_alpha: Number = None
    n_alpha_units: Count | Absent = None
    alpha_sampled: bool = False
    icc2_1: Number = None
    icc2_k: Number = None
    n_complete_units: Count | Absent = None
    spearman: Matrix = Field(default_factory=list)
    pearson: Matrix = Field(default_factory=list)
    kappa_quadratic: Matrix = Field(default_factory=list)
    pair_n: list[list[int]] = Field(default_factory=list)
    panel_definition: str = ""
    per_judge: list[JudgeSummary] = Field(default_factory=list)
    parse_failures: dict[str, Count] = Field(default_factory=dict)


def _undefined_interval() -> list[int | float | None]:
    return [None, None]


class Estimate(_Section):
    """A mean with its 95% interval (either end ``None`` when undefined) and its answer count."""

    mean: Number = None
    ci95: Annotated[list[Number], Field(min_length=2, max_length=2)] = Field(
        default_factory=_undefined_interval
    )
    n: Count | Absent = None


class SelfPreferencePair(_Section):
    """A judge and the model it is (``same_as``) or shares a ``family`` with."""

    judge: str = ""
    model: str = ""
    relation: str = ""
    related: Estimate = Field(default_factory=Estimate)
    baseline: Estimate = Field(default_factory=Estimate)
    difference: Estimate = Field(default_factory=Estimate)


class SelfPreferenceSection(_Section):
    """``series.<s>.self_preference``: does a judge favour its own model beyond its usual leniency."""

    series: str = ""
    applicable: bool = True
    reason: str | None = None
    pairs: list[SelfPreferencePair] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    n_bootstrap: Count = 0
    confidence: Real = 0.95
    seed: int = 0


class JudgeRemoval(_Section):
    """The ranking recomputed without one judge."""

    judge: str = ""
    ranking: list[str] = Field(default_factory=list)
    weighted: list[Number] = Field(default_factory=list)
    kendall_tau: Number = None
    max_rank_change: int | Absent = None
    most_moved: list[str] = Field(default_factory=list)


class LeaveOneJudgeOutSection(_Section):
    """``series.<s>.leave_one_judge_out``: how much each judge moves the ranking."""

    series: str = ""
    applicable: bool = True
    reason: str | None = None
    models: list[str] = Field(default_factory=list)
    full_ranking: list[str] = Field(default_factory=list)
    full_weighted: list[Number] = Field(default_factory=list)
    removals: list[JudgeRemoval] = Field(default_factory=list)


class LengthCorrelation(_Section):
    """Within-question correlation of answer length with one judge's score (``judge`` None: the panel)."""

    judge: str | None = None
    pearson: Number = None
    spearman: Number = None
    n: Count | Absent = None
    n_questions: Count | Absent = None


class VerbositySection(_Section):
    """``series.<s>.verbosity``: do longer answers get higher scores."""

    series: str = ""
    applicable: bool = True
    reason: str | None = None
    per_judge: list[LengthCorrelation] = Field(default_factory=list)
    panel: LengthCorrelation | None = None


class DomainLeaderFacts(_Section):
    """``selection.domain_leaders.<domain>``: the leader, its W in the domain and its lead."""

    domain: str = ""
    model: str = ""
    weighted: Number = None
    runner_up: str | None = None
    lead: Number = None


class ModelFacts(_Section):
    """``selection.models[i]``: what a model choice weighs — quality, size, cost per answer."""

    model: str = ""
    rank: Rank | Absent = None
    weighted: Number = None
    degradation: Number = None
    judge_sigma: Number = None
    tier: str | None = None
    parameters: Number = None
    parameters_label: str | None = None
    quantization: str | None = None
    gpu_memory_gib: Number = None
    weighted_per_billion: Number = None
    mean_completion_tokens: Number = None
    n_completion_tokens: Count = 0
    mean_latency_s: Number = None
    n_latency: Count = 0
    on_size_frontier: bool = False
    on_memory_frontier: bool = False
    domains_led: list[str] = Field(default_factory=list)


class SelectionSection(_Section):
    """``series.<s>.selection``: the explicit recommendations (best, most robust, quality to size)."""

    series: str = ""
    best_overall: str | None = None
    best_weighted: Number = None
    domain_leaders: dict[str, DomainLeaderFacts] = Field(default_factory=dict)
    robust_candidates: list[str] = Field(default_factory=list)
    robust_rule: str | Absent = None
    most_robust: str | None = None
    lowest_degradation: str | None = None
    size_frontier: list[str] = Field(default_factory=list)
    memory_frontier: list[str] = Field(default_factory=list)
    quality_margin: Number = None
    quality_rule: str | Absent = None
    quality_to_size: str | None = None
    models: list[ModelFacts] = Field(default_factory=list)


class AgreementStats(_Section):
    """Experts against the panel's S(q) over ``n`` pairs."""

    n: Count | Absent = None
    pearson: Number = None
    spearman: Number = None
    mae: Number = None
    kappa_quadratic: Number = None
    mean_bias: Number = None


class UnmatchedRow(_Section):
    """An expert row that could not be compared (1-based data row)."""

    row: int = 0
    question_id: str | None = None
    model: str | None = None
    expert: str | None = None
    reason: str = ""


class ExpertsSection(_Section):
    """``series.<s>.experts``: expert scores against the judge panel (``None`` without experts)."""

    series: str = ""
    applicable: bool = True
    n_rows: int | Absent = None
    n_other_series: int = 0
    n_matched: int | Absent = None
    n_unmatched: int = 0
    unmatched: dict[str, int] = Field(default_factory=dict)
    unmatched_examples: list[UnmatchedRow] = Field(default_factory=list)
    overall: AgreementStats = Field(default_factory=AgreementStats)
    per_domain: dict[str, AgreementStats] = Field(default_factory=dict)
    per_expert: dict[str, AgreementStats] = Field(default_factory=dict)


class DifferenceEntry(_Section):
    """A paired difference a − b (same questions, same jury) with the SE of its bootstrap
    replicates, its design degrees of freedom (``None``: infinite or undefined) and its 90% and 95%
    intervals (estimate ± t·SE)."""

    difference: Number = None
    se: Number = None
    df: Number = None
    ci90: Interval = None
    ci95: Interval = None


class QuestionsNeeded(_Section):
    """Questions of this benchmark's design a decision at the margin needs with probability
    ``power``: ``equivalent`` if the true difference were 0, ``different`` if it were the margin."""

    equivalent: Count | None = None
    different: Count | None = None
    power: Real = Field(default=0.8, gt=0, lt=1)


class ComparisonEntry(_Section):
    """``series.<s>.comparisons[i]``: a pair's paired difference and TOST verdict (docs/method.md,
    "Equivalence"). ``verdict``: ``equivalent`` when the 90% interval of the W difference lies inside
    ±margin, else ``different`` when its 95% interval excludes 0, else ``undecided``; ``None`` with
    ``reason`` when it could not be computed. ``different`` is also true for an equivalent pair whose
    95% interval excludes 0 (a difference smaller than the margin)."""

    a: str = ""
    b: str = ""
    margin: Real = Field(default=0.25, gt=0)
    origin: Literal["spec", "automatic"] = "spec"
    alpha: Real = Field(default=0.05, gt=0, lt=0.5)
    verdict: Literal["equivalent", "different", "undecided"] | None = None
    equivalent: bool = False
    different: bool = False
    weighted: DifferenceEntry | None = None
    levels: dict[LevelKey, DifferenceEntry] = Field(default_factory=dict)
    domains: dict[str, DifferenceEntry] = Field(default_factory=dict)
    n_questions: Count = 0
    questions_needed: QuestionsNeeded | None = None
    reason: str | None = None


class SeriesSection(_Section):
    """``series.<s>``: every result of one series (one set of generation parameters)."""

    model_config = ConfigDict(json_schema_extra=_not_required("power", "comparisons"))

    n_questions: Count | Absent = None
    n_answers: Count = 0
    n_judgments: Count | None = None
    judge_names: list[str] = Field(default_factory=list)
    models: dict[str, ModelEntry] = Field(default_factory=dict)
    ranking: list[str] = Field(default_factory=list, json_schema_extra={"uniqueItems": True})
    domain_leaders: dict[str, str] = Field(default_factory=dict)
    leading_group: list[str] | None = None
    prob_better: dict[str, dict[str, Probability]] | None = None
    bootstrap: BootstrapSection | None = None
    power: PowerSection | None = None
    judges: JudgesSection | Absent = None
    self_preference: SelfPreferenceSection | None = None
    leave_one_judge_out: LeaveOneJudgeOutSection | None = None
    verbosity: VerbositySection | None = None
    selection: SelectionSection | Absent = None
    experts: ExpertsSection | None = None
    comparisons: list[ComparisonEntry] = Field(default_factory=list)


# ------------------------------------------------------------------------------- across series


class ComparisonCell(_Section):
    """A model's W in one series and its difference from the primary series."""

    weighted: Number = None
    delta: Number = None


class SeriesComparison(_Section):
    """``series_comparison``: the effect of generation parameters (the study's Table 7)."""

    model_config = ConfigDict(json_schema_extra=_not_required("mean_delta"))

    primary: str = ""
    series: list[str] = Field(default_factory=list)
    models: dict[str, dict[str, ComparisonCell]] = Field(default_factory=dict)
    mean_delta: dict[str, Number] = Field(default_factory=dict)


# ------------------------------------------------------------------------------- optional sections


class ServerProvenance(_Section):
    """``provenance.servers.<endpoint>``: what served a model or judge."""

    runtime: str = ""
    served_name: str | None = None
    source: str | None = None
    reported_versions: list[str] = Field(default_factory=list)


class AnswerProvenance(_Section):
    """``provenance.answers[i]``: how one answer ended and what it cost in tokens."""

    series: str = ""
    model: str = ""
    question_id: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    fingerprint: str | None = None


class Provenance(_Section):
    """``provenance`` (kubejury run and the aggregation Job): what made the records behind the numbers."""

    kubejury_version: str = ""
    fingerprints: dict[str, str] = Field(default_factory=dict)
    judge_prompt_template_sha256: str = Field(default="", pattern=SHA256_HEX)
    servers: dict[str, ServerProvenance] = Field(default_factory=dict)
    truncated: dict[str, dict[str, Count]] = Field(default_factory=dict)
    answers: list[AnswerProvenance] = Field(default_factory=list)


class GpuServerCost(_Section):
    """``gpu_usage.servers.<server>``: GPU-hours held and used, W per held GPU-hour (models only)."""

    role: Literal["model", "judge", "model+judge"] = "model"
    gpus: Count = 0
    gpu_product: str | None = None
    held_gpu_hours: Real = Field(default=0.0, ge=0)
    used_gpu_hours: Real = Field(default=0.0, ge=0)
    weighted: Number = None
    weighted_per_gpu_hour: Number = None


class GpuUsageSection(_Section):
    """``gpu_usage`` (the operator's aggregation Job): GPU time of the run's model servers."""

    source: str = ""
    as_of: str = ""
    held_gpu_hours: Real = Field(default=0.0, ge=0)
    used_gpu_hours: Real = Field(default=0.0, ge=0)
    idle_share: Probability = None
    servers: dict[str, GpuServerCost] = Field(default_factory=dict)


class ReusedRecords(_Section):
    """``reuse.models.<model>`` / ``reuse.judges.<judge>``: records copied from earlier runs, over
    every series, and of how many the run needed (judging: the answers known when copying)."""

    reused: Count = 0
    needed: Count = 0
    from_runs: dict[str, Count] = Field(default_factory=dict)


class ReuseRefusal(_Section):
    """One reason records of a source run were not copied (a differing part, or a question)."""

    source: str = ""
    reason: str = ""
    records: Count = 0


class ReuseSection(_Section):
    """``reuse`` (a run with ``spec.reuse.from``): what was copied from earlier runs and what was
    refused, part by part (kubejury.records.reuse)."""

    sources: list[str] = Field(default_factory=list)
    models: dict[str, ReusedRecords] = Field(default_factory=dict)
    judges: dict[str, ReusedRecords] = Field(default_factory=dict)
    refused: list[ReuseRefusal] = Field(default_factory=list)
    missing_sources: list[ReuseRefusal] = Field(default_factory=list)


class SequentialModel(_Section):
    """``sequential.models.<model>``: questions it answered of the ``total_questions``, whether it
    stopped early and why, and W's interval at its last look (simultaneous over the looks)."""

    status: Literal["continue", "stopped"] = "stopped"
    reason: str = ""
    look: Count = 0
    questions: Count = 0
    estimate: Number = None
    interval: list[Number] = Field(default_factory=_undefined_interval)
    confidence: Probability = None
    running_interval: list[Number] = Field(default_factory=_undefined_interval)


class SequentialPair(_Section):
    """A pair the goal decides (full-ranking, comparisons): verdict on W_a − W_b at look ``look``."""

    a: str = ""
    b: str = ""
    margin: Real = 0.0
    verdict: Literal["undecided", "a-better", "b-better", "equivalent"] = "undecided"
    look: Count = 0
    difference: Number = None
    interval: list[Number] = Field(default_factory=_undefined_interval)


class SequentialSection(_Section):
    """``sequential`` (a run with ``spec.budget``): the goal, the looks done, and per model the
    questions used and why it stopped (kubejury.records.sequential)."""

    goal: Literal["leading-group", "full-ranking", "comparisons"] = "leading-group"
    confidence: Probability = None
    margin: Real = 0.0
    total_questions: Count = 0
    prefix_sizes: list[Count] = Field(default_factory=list)
    looks_done: Count = 0
    questions_used: Count = 0
    questions_budgeted: Count = 0
    models: dict[str, SequentialModel] = Field(default_factory=dict)
    pairs: list[SequentialPair] = Field(default_factory=list)
    leading_group: list[str] = Field(default_factory=list)


def _absent(value: object) -> bool:
    return value is None


# ------------------------------------------------------------------------------- the document


class ReportDocument(_Section):
    """report.json: every result of one aggregation. Build it with keywords; read one with :meth:`read`."""

    model_config = ConfigDict(
        title=f"kubejury report.json, schema version {SCHEMA_VERSION}",
        json_schema_extra={
            "description": (
                "Every result of one kubejury aggregation, generated from kubejury.records.report.ReportDocument. "
                f"Documented in docs/report-schema.md. Numbers are rounded to {DECIMALS} decimals; a value "
                "that is undefined on the data (NaN) is null."
            )
        },
    )

    schema_version: Literal[1] = SCHEMA_VERSION
    generated_at: str = Field(default="", pattern=GENERATED_AT)
    kubejury_version: str = Field(default="", min_length=1)
    config: ScoringSection = Field(default_factory=ScoringSection)
    inputs: Inputs = Field(default_factory=dict)
    benchmark: BenchmarkSection = Field(default_factory=BenchmarkSection)
    models_info: dict[str, ModelInfo] = Field(default_factory=dict)
    judges_info: dict[str, JudgeInfo] = Field(default_factory=dict)
    primary_series: str = ""
    series: dict[str, SeriesSection] = Field(default_factory=dict, min_length=1)
    series_comparison: SeriesComparison = Field(default_factory=SeriesComparison)
    provenance: Provenance | Absent = Field(default=None, exclude_if=_absent)
    gpu_usage: GpuUsageSection | Absent = Field(default=None, exclude_if=_absent)
    reuse: ReuseSection | Absent = Field(default=None, exclude_if=_absent)
    sequential: SequentialSection | Absent = Field(default=None, exclude_if=_absent)

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """A document of an older ``schema_version`` turned into the current layout, step by step."""
        if not isinstance(data, Mapping):
            return data
        version = data.get("schema_version", SCHEMA_VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"schema_version: must be a whole number, got {version!r}")
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"schema_version: report version {version} is newer than this kubejury reads "
                f"({SCHEMA_VERSION}); render it with a newer kubejury"
            )
        if version < SCHEMA_VERSION and version not in MIGRATIONS:
            raise ValueError(
                f"schema_version: no report layout {version} exists (this kubejury reads {SCHEMA_VERSION})"
            )
        document = dict(data)
        while version < SCHEMA_VERSION:
            document = MIGRATIONS[version](document)
            version += 1
            document["schema_version"] = version
        return document

    @classmethod
    def read(cls, raw: object) -> ReportDocument:
        """A report.json document (parsed JSON) of any known version; keys this version does not know
        are ignored. Raises :class:`ReportError` naming the first bad field."""
        try:
            return cls.model_validate(raw, extra="ignore")
        except ValidationError as exc:
            raise ReportError(problem_text(exc)) from None

    def to_json(self) -> dict[str, Any]:
        """The document as plain JSON values, keys in the order report.json has always had."""
        dumped: dict[str, Any] = self.model_dump(mode="json")
        return dumped


class ReportError(ValueError):
    """A report.json that does not read as a :class:`ReportDocument` (the message names the field)."""


def problem_text(exc: ValidationError) -> str:
    """The first problem of ``exc`` as ``path.to[0].field: message`` (and how many more there are)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    fields = [part for part in first["loc"] if not _union_branch(part)]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in fields).lstrip(".")
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"report.json{'.' + path if path else ''}: {first['msg']}{more}"


# ------------------------------------------------------------------------------- the JSON Schema


def _union_branch(part: int | str) -> bool:
    """Pydantic names the member of a union that failed (``int``, ``list[str]``, ``Provenance``); a
    path has no use for it."""
    names = {"int", "float", "str", "bool", "none"} | {cls.__name__ for cls in _Section.__subclasses__()}
    return isinstance(part, str) and (part in names or "[" in part)


class _ReportSchemaGenerator(GenerateJsonSchema):
    """Draft 2020-12 as report.schema.json has always said it: level keys as ``propertyNames``, and
    keys the schema does not name are allowed (docs/report-schema.md: adding keys keeps the version,
    so a report with more keys is still a valid version-1 report for an older reader)."""

    def model_schema(self, schema: ModelSchema) -> JsonSchemaValue:
        generated = super().model_schema(schema)
        if generated.get("additionalProperties") is False:
            del generated["additionalProperties"]
        return generated

    def dict_schema(self, schema: DictSchema) -> JsonSchemaValue:
        generated = super().dict_schema(schema)
        patterns = generated.pop("patternProperties", None)
        if patterns:
            ((pattern, values),) = patterns.items()
            generated["propertyNames"] = {"pattern": pattern}
            generated["additionalProperties"] = values
        return generated


def report_schema() -> dict[str, Any]:
    """The JSON Schema of report.json as written (every key the writer always writes is required)."""
    schema = ReportDocument.model_json_schema(mode="serialization", schema_generator=_ReportSchemaGenerator)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:kubejury:report:{SCHEMA_VERSION}",
        **schema,
    }


def schema_text() -> str:
    """report.schema.json's exact text (what ``--schema`` prints and the committed file holds)."""
    return json.dumps(report_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m kubejury.records.report --schema [--write]``: print or rewrite report.schema.json."""
    parser = argparse.ArgumentParser(
        prog="python -m kubejury.records.report", description="print or write report.json's JSON Schema"
    )
    parser.add_argument("--schema", action="store_true", required=True, help="the JSON Schema of report.json")
    parser.add_argument(
        "--write", action="store_true", help=f"write it to {SCHEMA_PATH.name} instead of stdout"
    )
    args = parser.parse_args(argv)
    if args.write:
        SCHEMA_PATH.write_text(schema_text(), encoding="utf-8")
    else:
        sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
