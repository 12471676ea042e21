"""The ``EvalRun`` resource: the one description of an evaluation that every part reads.

A user writes an ``EvalRun`` (``apiVersion: kubejury.io/v1alpha1``) as YAML. Local mode
(``kubejury run``) reads it from a file; the operator receives it as a custom resource whose CRD
schema is generated from these models (``kubejury_operator.crd``). Keeping one set of pydantic
models means both sides accept exactly the same documents.

Conventions:

* Field names are camelCase in YAML (as Kubernetes does) and snake_case in Python; both are
  accepted on input, camelCase is written on output.
* Unknown fields are rejected everywhere except ``metadata`` (which Kubernetes owns and fills with
  ``uid``, ``resourceVersion``… on a live object) and ``status`` (written by the operator, ignored
  here).
* Every field has a description: it becomes ``kubectl explain evalrun.spec…`` text.
* Quantization names are case-insensitive on input and lower case after validation
  (``Q4_K_M`` → ``q4_k_m``).
* Checks that involve more than one field (unique names, quantization vs runtime, weights for
  every level…) live in :mod:`kubejury.config.spec_rules` and work on the raw mapping too, so the operator's
  admission webhook and :func:`parse_evalrun` report every problem at once, each as
  ``<field path>: <what is allowed>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, PydanticCustomError

from kubejury.config.comparisons import ModelFacts, Requested, run_comparisons
from kubejury.config.embedded_models import DEFAULT_EMBEDDED, embedded_model
from kubejury.config.spec_rules import ALL_QUANTIZATIONS as ALL_QUANTIZATIONS
from kubejury.config.spec_rules import (
    CPU_QUANTITY_PATTERN,
    MAX_BOOTSTRAP_SAMPLES,
    MEMORY_QUANTITY_PATTERN,
    cpu_quantity_problem,
    lower_scheme,
    memory_quantity_problem,
    mount_path_problem,
    normalize_mount_path,
    prompt_template_problem,
)
from kubejury.config.spec_rules import GGUF_TYPES as GGUF_TYPES
from kubejury.config.spec_rules import LOCAL_QUANTIZATIONS as LOCAL_QUANTIZATIONS
from kubejury.config.spec_rules import LOCAL_RUNTIMES as LOCAL_RUNTIMES
from kubejury.config.spec_rules import RUNTIMES as RUNTIMES
from kubejury.config.spec_rules import SOURCE_SCHEMES as SOURCE_SCHEMES
from kubejury.config.spec_rules import URI_SCHEME as _SCHEME
from kubejury.config.spec_rules import VLLM_QUANTIZATIONS as VLLM_QUANTIZATIONS
from kubejury.config.spec_rules import FieldProblem as FieldProblem
from kubejury.config.spec_rules import is_gguf_type as is_gguf_type
from kubejury.config.spec_rules import kube_name as kube_name
from kubejury.config.spec_rules import normalize_quantization as normalize_quantization
from kubejury.config.spec_rules import spec_problems as spec_problems
from kubejury.errors import InputError
from kubejury.modelinfo import parse_parameters
from kubejury.runtimes import DEFAULT_RUNTIME, RuntimeName, runtime_of
from kubejury.safe_input import load_yaml
from kubejury.stats.equivalence import DEFAULT_MARGIN, ComparisonRequest
from kubejury.stats.scoring import DEFAULT_LEVEL_WEIGHTS, DEFAULT_TIERS, ScoringConfig, TierRule
from kubejury.stats.sequential import DEFAULT_LOOKS, Budget
from kubejury.stats.sequential import DEFAULT_MARGIN as SEQUENTIAL_MARGIN
from kubejury.stats.sequential import Comparison as SequentialComparison

API_GROUP = "kubejury.io"
API_VERSION = "v1alpha1"
API_VERSION_FULL = f"{API_GROUP}/{API_VERSION}"
KIND = "EvalRun"

Runtime = RuntimeName  # the registry's names (kubejury.runtimes): the CRD's enum
Checkpoint = Literal["bf16", "fp16", "fp8", "nvfp4", "mxfp4", "awq", "gptq", "gguf"]

#: ``source`` of the default embedded model (a ``runtime: llamacpp`` entry without a source): Gemma-3
#: 270M, Q4_K_M GGUF, a base model served with the Gemma chat format. The embedded models and the
#: facts filled in for them: :mod:`kubejury.config.embedded_models`.
EMBEDDED_SOURCE = DEFAULT_EMBEDDED.source


_NAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
#: Default and largest ``concurrency.maxResponseBytes``.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Model(BaseModel):
    """Shared pydantic configuration: camelCase aliases, unknown fields rejected, and no NaN or
    infinity in any float (YAML's ``.nan``/``.inf`` would otherwise pass every bound and fail at
    aggregation, or lift a deadline)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        str_strip_whitespace=True,
        allow_inf_nan=False,
    )


# --------------------------------------------------------------------------------------------
# Small shared pieces
# --------------------------------------------------------------------------------------------


class SecretKeyRef(_Model):
    """One key of a Kubernetes Secret in the EvalRun's namespace."""

    name: str = Field(
        description="Name of the Secret in the EvalRun's namespace (lower-case DNS name: letters, digits, '-', '.').",
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
    )
    key: str = Field(description="Key inside the Secret whose value is used.", min_length=1, max_length=253)


class SecretRef(_Model):
    """A whole Kubernetes Secret in the EvalRun's namespace."""

    name: str = Field(
        description="Name of the Secret in the EvalRun's namespace (lower-case DNS name: letters, digits, '-', '.').",
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
    )


class ResourceHints(_Model):
    """Hints that override the placement planner's estimates for one model."""

    gpu_memory_gib: float | None = Field(
        default=None,
        alias="gpuMemoryGiB",
        gt=0,
        description=(
            "Total GPU memory (GiB, across all its GPUs) the model needs: weights, KV cache and runtime "
            "overhead. Overrides the planner's estimate."
        ),
    )
    gpus: Literal[1, 2, 4, 8] | None = Field(
        default=None,
        description="Number of GPUs (tensor-parallel size) to use: 1, 2, 4 or 8. Default: the smallest that fits.",
    )
    cpu: str | None = Field(
        default=None,
        pattern=CPU_QUANTITY_PATTERN,
        description=(
            "CPU request of the model server Pod: cores ('8', '0.5') or millicores ('500m'), more than 0 and "
            "at most 1024 cores."
        ),
    )
    memory: str | None = Field(
        default=None,
        pattern=MEMORY_QUANTITY_PATTERN,
        description=(
            "Memory request of the model server Pod, in bytes with an optional suffix Ki, Mi, Gi, Ti or k, M, "
            "G, T (e.g. '64Gi', '512Mi'), from 1Mi to 64Ti."
        ),
    )

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu_the_planner_uses(cls, value: object) -> object:
        # Before the pattern, so that the message says what is allowed and why.
        if isinstance(value, str) and (problem := cpu_quantity_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_the_planner_uses(cls, value: object) -> object:
        if isinstance(value, str) and (problem := memory_quantity_problem(value)):
            raise ValueError(problem)
        return value


# --------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------


class BenchmarkFilters(_Model):
    """Which questions of the benchmark to ask (all of them when empty)."""

    domains: list[str] | None = Field(
        default=None,
        description="Only these domains (as written in the benchmark's 'domain' column). Default: all.",
    )
    levels: list[int] | None = Field(
        default=None,
        description="Only these difficulty levels (1 = basic … 3 = expert in the study). Default: all.",
    )
    limit_per_cell: int | None = Field(
        default=None,
        ge=1,
        description="At most this many questions per domain × level, in file order (for smoke runs). Default: no limit.",
    )

    @field_validator("levels")
    @classmethod
    def _levels_positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(level < 1 for level in value):
            raise ValueError("levels are positive integers (1, 2, 3, …)")
        return value


class BenchmarkSpec(_Model):
    """Where the questions and reference answers are."""

    uri: str = Field(
        min_length=1,
        description=(
            "Location of the benchmark file: file:///abs/path, s3://bucket/key, https://host/path, or a "
            "plain path (local mode: relative to the EvalRun file's directory)."
        ),
    )
    format: Literal["auto", "jsonl", "json", "csv", "parquet"] = Field(
        default="auto",
        description="File format: auto (from the extension), jsonl, json, csv or parquet.",
    )
    filters: BenchmarkFilters = Field(
        default_factory=BenchmarkFilters,
        description="Optional subset of questions: domains, levels, limit per domain × level.",
    )
    language: str = Field(
        default="ru",
        min_length=2,
        max_length=16,
        description="Language of the questions (BCP 47, e.g. 'ru', 'en'); picks the default judging prompt.",
    )

    @field_validator("uri")
    @classmethod
    def _uri_scheme(cls, value: str) -> str:
        match = _SCHEME.match(value)
        if match and match["scheme"].lower() not in ("file", "s3", "https", "http"):
            raise ValueError("benchmark uri must be file://, s3://, https:// or a plain path")
        return lower_scheme(value)  # readers compare schemes in lower case


# --------------------------------------------------------------------------------------------
# Models and judges
# --------------------------------------------------------------------------------------------


class ModelSpec(_Model):
    """One model to serve: where its weights are, how to run it, and facts for the report."""

    name: str = Field(
        pattern=_NAME,
        description=(
            "Unique name of the model in this run, used in reports and storage paths (letters, digits, "
            "'.', '_', '-'; at most 63 characters). Kubernetes objects use its lower-case form."
        ),
    )
    source: str | None = Field(
        default=None,
        description=(
            "Where the weights are: hf://org/repo (or just org/repo), s3://bucket/prefix, pvc://claim/path, "
            "file:///path, ollama://tag for runtime ollama; for runtime openai the endpoint's base URL "
            "(https://host/v1). Runtime llamacpp in local mode also serves the models kubejury carries: "
            "embedded://gemma-3-270m-q4_k_m (used when source is omitted) and embedded://smollm2-135m-instruct-q4_1."
        ),
    )
    served_model: str | None = Field(
        default=None,
        description="Model id sent in requests ('model' field). Default: name.",
    )
    parameters: str | None = Field(
        default=None,
        description=(
            "Parameter count as written by people: '27B', '0.27B', '270M', '26B-A4B' (mixture of experts: "
            "total-A-active). Used by reports and by the placement planner's memory estimate."
        ),
    )
    family: str | None = Field(
        default=None,
        description="Model family (e.g. 'qwen3.5', 'gemma-4', 'gpt-oss'), for reports and the self-preference analysis.",
    )
    checkpoint: Checkpoint | None = Field(
        default=None,
        description=(
            "Native weight format of the checkpoint: bf16, fp16, fp8, nvfp4, mxfp4 (e.g. gpt-oss), awq, gptq or "
            "gguf. Default: gguf for runtimes llamacpp/ollama, else bf16."
        ),
    )
    runtime: Runtime = Field(
        default=DEFAULT_RUNTIME.name,
        description=(
            "How to serve it: vllm (GPU), llamacpp or ollama (GGUF, small GPUs or CPU), openai (an existing "
            "OpenAI-compatible endpoint; nothing is deployed)."
        ),
    )
    quantization: str = Field(
        default="auto",
        description=(
            "auto (the planner picks per GPU: nvfp4/fp8/bf16/mxfp4), or explicitly bf16, fp16, fp8, nvfp4, mxfp4, "
            "awq, gptq (runtime vllm) or a GGUF type such as Q4_K_M, Q6_K, Q8_0 (runtimes llamacpp/ollama). "
            "Case-insensitive. For runtime openai it is informational only."
        ),
    )
    # There is no apiKeyEnv (issue 11, finding 2): naming any variable of the Job's environment
    # let a spec send the storage credentials to a URL of its choice as the API key.
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description=(
            "Secret key holding the API key sent as a Bearer token (mainly for runtime openai). In the "
            "cluster only the Job of this model or judge receives it, as KUBEJURY_API_KEY; local mode "
            "reads KUBEJURY_API_KEY."
        ),
    )
    resources: ResourceHints = Field(
        default_factory=ResourceHints,
        description="Optional hints overriding the planner: total GPU memory, GPU count, CPU and memory requests.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Extra node labels the model's Pods must match; the planner only considers matching nodes.",
    )
    max_model_len: int = Field(
        default=8192,
        ge=256,
        le=1048576,
        description="Context length (prompt + answer tokens) the server is started with; sizes the KV cache.",
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0.1,
        le=0.98,
        description="Fraction of each GPU's memory the server may use (vLLM --gpu-memory-utilization).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Extra command-line arguments appended to the model server's command.",
    )
    gguf_path: str | None = Field(
        default=None,
        description="Local mode, runtime llamacpp: path of a .gguf file to serve (overrides source).",
    )
    chat_format: str | None = Field(
        default=None,
        description=(
            "Runtime llamacpp: llama-cpp-python chat format (e.g. 'gemma', 'chatml') for GGUF files without a "
            "chat template. Default: the template in the file; 'gemma' for the embedded Gemma-3 270M."
        ),
    )

    @field_validator("quantization")
    @classmethod
    def _normalize_quantization(cls, value: str) -> str:
        normalized = normalize_quantization(value)
        if normalized not in ALL_QUANTIZATIONS:
            raise PydanticCustomError(
                "quantization",
                "unknown quantization {value}; allowed: auto, bf16, fp16, fp8, nvfp4, mxfp4, awq, gptq "
                "or a GGUF type such as Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_XS",
                {"value": repr(value)},
            )
        return normalized

    @field_validator("parameters", mode="before")
    @classmethod
    def _parameters_text(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{value:g}" if value < 1e3 else f"{value / 1e9:g}B"
        return value

    @field_validator("parameters")
    @classmethod
    def _parameters_readable(cls, value: str | None) -> str | None:
        if value is not None:
            parse_parameters(value)  # raises ValueError naming the accepted forms
        return value

    @field_validator("source")
    @classmethod
    def _normalize_source(cls, value: str | None) -> str | None:
        if value is None:
            return None
        match = _SCHEME.match(value)
        if match:
            scheme = match["scheme"].lower()
            if scheme not in SOURCE_SCHEMES:
                raise ValueError(
                    "source must be hf://org/repo, org/repo, s3://…, pvc://…, file://…, ollama://tag, "
                    "embedded://… or an http(s):// base URL (runtime openai)"
                )
            return scheme + value[len(scheme) :]
        if _HF_REPO.match(value):
            return f"hf://{value}"
        if value.startswith("/"):
            return f"file://{value}"
        raise ValueError(
            "source must be hf://org/repo, org/repo, s3://…, pvc://…, file://…, ollama://tag, "
            "embedded://… or an http(s):// base URL (runtime openai)"
        )

    @model_validator(mode="after")
    def _fill_defaults(self) -> ModelSpec:
        serving = runtime_of(self.runtime)
        if serving.default_source_embedded and self.source is None and self.gguf_path is None:
            self.source = EMBEDDED_SOURCE
        embedded = embedded_model(self.source)
        if embedded is not None:
            self.chat_format = self.chat_format or embedded.chat_format
            self.parameters = self.parameters or embedded.parameters
            self.family = self.family or embedded.family
            self.checkpoint = self.checkpoint or "gguf"
        if self.served_model is None:
            self.served_model = self.name
        if self.checkpoint is None:
            self.checkpoint = serving.default_checkpoint
        return self

    # --- conveniences for other parts ------------------------------------------------------
    @property
    def parameter_count(self) -> float | None:
        """Total parameters as a number (``"27B"`` → 2.7e10), or ``None`` when not given."""
        return parse_parameters(self.parameters)

    @property
    def request_model(self) -> str:
        """The ``model`` id to send in requests (``servedModel``, defaulting to ``name``)."""
        return self.served_model or self.name

    @property
    def is_embedded(self) -> bool:
        """Whether this entry serves one of the embedded GGUFs (not a file of its own)."""
        return embedded_model(self.source) is not None and self.gguf_path is None

    @property
    def deployed(self) -> bool:
        """Whether the operator deploys a server for it (everything but runtime openai)."""
        return runtime_of(self.runtime).in_cluster


class JudgeSpec(ModelSpec):
    """A judge: a model served like the others, plus what the self-preference analysis needs."""

    same_as: str | None = Field(
        default=None,
        description=(
            "Name of an entry of spec.models that is the same model as this judge (self-preference analysis; "
            "the operator may serve both from one deployment)."
        ),
    )
    prompt_variant: str | None = Field(
        default=None,
        max_length=64,
        description=(
            "Optional label of a judging-prompt variant for this judge (lets one model act as several distinct "
            "judges, e.g. in the one-machine quickstart)."
        ),
    )
    seed: int | None = Field(
        default=None,
        description="Sampling seed for this judge's requests (default: the judging seed, 0).",
    )


# --------------------------------------------------------------------------------------------
# Series, judging, scoring
# --------------------------------------------------------------------------------------------


class Series(_Model):
    """One set of generation settings; every model answers every question once per series."""

    name: str = Field(
        pattern=_NAME,
        description="Unique name of the series (used in storage paths and reports).",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling probability mass.")
    repetition_penalty: float = Field(
        default=1.0,
        gt=0.0,
        le=3.0,
        description="Repetition ('repeat') penalty; 1.0 = none. Mapped per runtime (vLLM repetition_penalty, llama.cpp repeat_penalty).",
    )
    max_tokens: int = Field(default=2048, ge=1, le=262144, description="Maximum tokens generated per answer.")
    seed: int | None = Field(
        default=None, description="Sampling seed sent with each request (when the runtime accepts one)."
    )
    system_prompt: str | None = Field(
        default=None, description="System message sent before each question. Default: none."
    )


def default_series() -> list[Series]:
    """The study's primary series: temperature 0, repetition penalty 1.2."""
    return [Series(name="primary", temperature=0.0, repetition_penalty=1.2)]


#: The study's three series, primary first (t=0 rp=1.2; t=0.8 rp=1.2; t=0 rp=1.05).
STUDY_SERIES: tuple[Series, ...] = (
    Series(name="primary", temperature=0.0, repetition_penalty=1.2),
    Series(name="t08-rp12", temperature=0.8, repetition_penalty=1.2),
    Series(name="t0-rp105", temperature=0.0, repetition_penalty=1.05),
)


class Judging(_Model):
    """How judges are asked: the 0–10 reference-based prompt, output format, retries."""

    prompt_template: str | None = Field(
        default=None,
        description=(
            "Override of the judging prompt template: {question}, {reference} and {answer} each exactly once, and "
            "no other word in braces (a typo is refused; other braces are text). Default: the "
            "built-in template in the benchmark's language (Russian for 'ru')."
        ),
    )
    language: str | None = Field(
        default=None,
        max_length=16,
        description="Language of the built-in prompt. Default: the benchmark's language.",
    )
    scale: Literal["0-10"] = Field(
        default="0-10", description="Scoring scale; fixed at 0–10 (the study's scale)."
    )
    structured_output: bool = Field(
        default=True,
        description="Ask for a JSON-schema structured answer when the runtime supports it; else parse the last [[N]].",
    )
    retries: int = Field(
        default=1,
        ge=0,
        le=5,
        description="How many times to re-ask a judge whose answer has no valid score before storing score: null.",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Judges' sampling temperature.")
    max_tokens: int = Field(default=1024, ge=16, le=65536, description="Maximum tokens of a judge's answer.")

    @field_validator("prompt_template")
    @classmethod
    def _placeholders(cls, value: str | None) -> str | None:
        if value is not None and (problem := prompt_template_problem(value)):
            raise ValueError(problem)
        return value


class Tier(_Model):
    """One tier rule: a model earns the tier when every given bound holds."""

    tier: str = Field(min_length=1, max_length=16, description="Tier label, e.g. 'S', 'A', 'B', 'C'.")
    min_weighted: float | None = Field(default=None, description="Lowest weighted score W allowed (0–10).")
    max_degradation: float | None = Field(
        default=None, description="Largest degradation D (lowest-level minus highest-level score) allowed."
    )
    max_sigma: float | None = Field(
        default=None, ge=0, description="Largest inter-judge standard deviation σ allowed."
    )

    def to_rule(self) -> TierRule:
        """The scoring module's :class:`~kubejury.stats.scoring.TierRule`."""
        return TierRule(self.tier, self.min_weighted, self.max_degradation, self.max_sigma)


def _default_tiers() -> list[Tier]:
    return [
        Tier(
            tier=rule.tier,
            min_weighted=rule.min_weighted,
            max_degradation=rule.max_degradation,
            max_sigma=rule.max_sigma,
        )
        for rule in DEFAULT_TIERS
    ]


class Scoring(_Model):
    """The study's aggregation settings."""

    level_weights: dict[int, float] = Field(
        default_factory=lambda: dict(DEFAULT_LEVEL_WEIGHTS),
        description=(
            "Weight of each difficulty level in the weighted score W, keyed by level: {'1': 0.6, '2': 0.8, '3': 1.0} "
            "(the study). Every level asked needs a positive weight."
        ),
    )
    tiers: list[Tier] = Field(
        default_factory=_default_tiers,
        description="Tier rules, checked in order; a model gets the first tier whose bounds all hold.",
    )
    bootstrap_samples: int = Field(
        default=2000,
        ge=0,
        le=MAX_BOOTSTRAP_SAMPLES,
        description="Bootstrap resamples for confidence intervals (0 = none).",
    )
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0, description="Confidence level of the intervals.")
    seed: int = Field(default=0, description="Seed of the bootstrap and of the answer shuffling.")

    def to_config(self, primary_series: str | None = None) -> ScoringConfig:
        """The engine's :class:`~kubejury.stats.scoring.ScoringConfig` for these settings."""
        return ScoringConfig(
            level_weights=dict(self.level_weights),
            tiers=tuple(tier.to_rule() for tier in self.tiers),
            bootstrap_samples=self.bootstrap_samples,
            confidence=self.confidence,
            seed=self.seed,
            primary_series=primary_series,
        )


# --------------------------------------------------------------------------------------------
# Storage, concurrency, operator settings
# --------------------------------------------------------------------------------------------


class StorageSpec(_Model):
    """Where answers, judgments, progress records and reports are written."""

    uri: str = Field(
        default="runs",
        min_length=1,
        description=(
            "Output root: file:///abs/path, a plain path (local mode), or s3://bucket/prefix. Layout: "
            "<uri>/<run>/<series>/answers/<model>/…, …/judgments/<judge>/…, …/report/…"
        ),
    )
    endpoint_url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="S3 endpoint URL for MinIO, Ceph or another S3-compatible store. Default: AWS.",
    )
    region: str | None = Field(default=None, description="S3 region. Default: from the environment.")
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description=(
            "Secret with keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for S3. Default: credentials from the "
            "environment (local mode) or the Pods' identity."
        ),
    )
    path_style: bool | None = Field(
        default=None,
        description="Use path-style S3 addressing (MinIO needs it). Default: true when endpointUrl is set.",
    )
    persistent_volume_claim: str | None = Field(
        default=None,
        description="In the cluster, for a file:// uri: PVC mounted at that path in every Job Pod.",
    )

    @field_validator("uri")
    @classmethod
    def _uri_scheme(cls, value: str) -> str:
        match = _SCHEME.match(value)
        if match and match["scheme"].lower() not in ("file", "s3"):
            raise ValueError("storage uri must be file://, s3:// or a plain path")
        return lower_scheme(value)  # storage backends are chosen by the lower-case scheme

    @property
    def use_path_style(self) -> bool:
        """Path-style addressing: as set, else on when a custom endpoint is given."""
        return self.path_style if self.path_style is not None else self.endpoint_url is not None


class Concurrency(_Model):
    """Request pressure on model servers."""

    requests_per_endpoint: int = Field(
        default=64, ge=1, le=4096, description="Requests in flight per model endpoint."
    )
    request_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        le=3600,
        description="Timeout of one request (connect + full response), at most an hour.",
    )
    max_attempts: int = Field(
        default=6, ge=1, le=20, description="Attempts per request on 429/5xx/connection errors, with backoff."
    )
    max_error_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description=(
            "A generation or judging stage fails when more than this share of its requests failed "
            "(after retries), naming the commonest error; 0 = any failed request fails the stage."
        ),
    )
    max_response_bytes: int = Field(
        default=MAX_RESPONSE_BYTES,
        ge=1024,
        le=MAX_RESPONSE_BYTES,
        description=(
            "Longest model-server reply read; a longer one fails its request. At most 32 MiB (the default): "
            "a Job holds up to requestsPerEndpoint replies at once, and 64 × 32 MiB is already its 2Gi "
            "memory limit."
        ),
    )


class ModelCache(_Model):
    """A shared PVC where model servers cache downloaded weights."""

    claim_name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Name of an existing PersistentVolumeClaim (lower-case DNS name; ReadWriteMany for several nodes).",
    )
    mount_path: str = Field(
        default="/models/cache",
        pattern=r"^/",
        description=(
            "Where the claim is mounted in model server Pods (HF_HOME; vLLM, llama.cpp, Ollama, torch and "
            "Triton caches go below it). Not under /root: the servers run as uid 1000 and the images keep "
            "/root at mode 0700. Not /tmp, /dev/shm, /models/src or a system path (/proc, /sys, /dev, "
            "/etc/hosts…), nor a folder containing one: the server Pod mounts those itself."
        ),
    )

    @field_validator("mount_path")
    @classmethod
    def _free_in_the_server_pod(cls, value: str) -> str:
        if problem := mount_path_problem(value):
            raise ValueError(problem)
        return normalize_mount_path(value)


#: An EvalRun's name, or a local run folder's versioned name (``<name>.v<N>``, ``--new-version``).
_RUN_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.v[0-9]{1,4})?$"


class Reuse(_Model):
    """Earlier runs whose stored records this run may copy instead of asking again (docs/storage.md,
    "Reuse"). A record is copied only when everything that determined it is the same here; what
    differs is named in the report and that record is made again."""

    from_runs: list[Annotated[str, Field(pattern=_RUN_NAME)]] = Field(
        default_factory=list,
        alias="from",
        max_length=32,
        description=(
            "Names of earlier EvalRuns of this namespace (in local mode: run folders under the same "
            "storage root), in order of preference. Their answers and judgments are copied into this "
            "run when model, judge, prompt, series and question are the same; nothing is read "
            "outside this namespace's storage prefix, and only with this run's credentials."
        ),
    )


class JobSettings(_Model):
    """Settings of the generation, judging and aggregation Jobs."""

    backoff_limit: int = Field(
        default=3, ge=0, le=100, description="Job backoffLimit (retries of a failed Pod)."
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=60, description="Job activeDeadlineSeconds. Default: no deadline."
    )
    generation_shards: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Split each generation Job into this many Indexed Job completions (1 = no sharding).",
    )
    image: str | None = Field(
        default=None, description="Container image of the Jobs. Default: the operator's own."
    )


class Comparison(_Model):
    """A pair of models whose W is tested for equivalence (TOST at α = 0.05, docs/method.md)."""

    a: str = Field(
        pattern=_NAME, description="Name of an entry of spec.models; the report gives the difference a − b."
    )
    b: str = Field(pattern=_NAME, description="Name of another entry of spec.models.")
    margin: float = Field(
        default=DEFAULT_MARGIN,
        gt=0.0,
        le=10.0,
        description=(
            "Equivalence margin in W points (0–10 scale): the pair is called equivalent when the 90% interval "
            f"of W(a) − W(b) lies inside ±margin. Default {DEFAULT_MARGIN}."
        ),
    )


class BudgetSpec(_Model):
    """A sequential budget: questions are asked in waves and a model stops once its place is
    decided, with intervals that hold despite the stopping (docs/method.md, "Sequential
    evaluation"; :mod:`kubejury.stats.sequential`); locally and on the cluster (docs/operator.md)."""

    mode: Literal["sequential"] = Field(
        default="sequential",
        description="sequential: ask in waves of a stratified random order and stop decided models.",
    )
    confidence: float = Field(
        default=0.95,
        gt=0.5,
        lt=1.0,
        description="Simultaneous level of every interval and decision, over all looks (O'Brien-Fleming spending).",
    )
    goal: Literal["leading-group", "full-ranking", "comparisons"] = Field(
        default="leading-group",
        description=(
            "When a model's place is decided. leading-group: it is out of, or within margin of, the "
            "leader; full-ranking: every pair it is in is ordered or equivalent; comparisons: every "
            "pair of spec.comparisons it is in is decided."
        ),
    )
    max_questions: int | None = Field(
        default=None,
        ge=1,
        description="Questions per model at most. Default: the whole (filtered) benchmark.",
    )
    min_per_cell: int = Field(
        default=2, ge=1, le=1000, description="Questions of every (domain, level) cell in the first wave."
    )
    margin: float = Field(
        default=SEQUENTIAL_MARGIN,
        gt=0.0,
        le=10.0,
        description=f"Indifference margin in W points: models shown within it are equivalent. Default {SEQUENTIAL_MARGIN}.",
    )
    looks: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=20,
        description=(
            f"Information fractions of the looks, increasing, the last 1. Default {list(DEFAULT_LOOKS)}."
        ),
    )


class EvalRunSpec(_Model):
    """What to evaluate, with what, and how."""

    benchmark: BenchmarkSpec = Field(description="Where the questions are, and which of them to ask.")
    models: list[ModelSpec] = Field(min_length=1, description="Models to evaluate (at least one).")
    judges: list[JudgeSpec] = Field(
        min_length=1, description="Judges that score every answer 0–10 (at least one; the study used three)."
    )
    series: list[Series] = Field(
        default_factory=default_series,
        min_length=1,
        description="Generation settings; the first is primary. Default: the study's primary, temperature 0, repetition penalty 1.2.",
    )
    judging: Judging = Field(default_factory=Judging, description="How judges are prompted and parsed.")
    scoring: Scoring = Field(
        default_factory=Scoring, description="Level weights, tiers and bootstrap settings."
    )
    comparisons: list[Comparison] = Field(
        default_factory=list,
        max_length=100,
        description=(
            "Pairs of models to test for equivalence of W within a margin (report: paired difference, TOST "
            "verdict, questions needed). Pairs of one checkpoint in two precisions are added automatically "
            f"with margin {DEFAULT_MARGIN}."
        ),
    )
    budget: BudgetSpec | None = Field(
        default=None,
        description=(
            "Ask questions in waves and stop each model once its place is decided (sequential mode). "
            "Default: every model answers every question."
        ),
    )
    storage: StorageSpec = Field(default_factory=StorageSpec, description="Where results are written.")
    concurrency: Concurrency = Field(
        default_factory=Concurrency, description="Requests in flight and retry limits."
    )
    max_concurrent_models: int = Field(
        default=2, ge=1, le=256, description="At most this many model deployments at once (the GPU budget)."
    )
    cleanup_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="What happens to stored results when the EvalRun is deleted: Retain keeps them, Delete removes them.",
    )
    startup_timeout_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="Budget of the model servers' startupProbe (large models take many minutes to load).",
    )
    model_cache: ModelCache | None = Field(
        default=None, description="Shared PVC for downloaded weights. Default: none (each Pod downloads)."
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key with a Hugging Face token (HF_TOKEN) for gated models."
    )
    jobs: JobSettings = Field(
        default_factory=JobSettings, description="Settings of the Jobs the operator creates."
    )
    reuse: Reuse = Field(
        default_factory=Reuse,
        description="Earlier runs whose answers and judgments may be copied instead of made again.",
    )
    queue_name: str | None = Field(
        default=None,
        pattern=_DNS_LABEL,
        max_length=63,
        description=(
            "Kueue LocalQueue of the run's namespace that admits its model servers and Jobs (cluster only). "
            "Default: none, or the namespace's LocalQueue 'default' when the chart's kueue.enabled is set."
        ),
    )

    @model_validator(mode="after")
    def _cross_field(self) -> EvalRunSpec:
        problems = spec_problems(self.model_dump(mode="json"), prefix="")
        if problems:
            raise PydanticCustomError(
                "evalrun_semantics",
                "{summary}",
                {
                    "summary": "; ".join(str(p) for p in problems),
                    "problems": [(p.path, p.message) for p in problems],
                },
            )
        return self

    @property
    def primary_series(self) -> Series:
        """The first series: the one rankings are reported for."""
        return self.series[0]

    def scoring_config(self) -> ScoringConfig:
        """The engine's scoring configuration, with the primary series set."""
        return self.scoring.to_config(primary_series=self.primary_series.name)

    def comparisons_to_run(self) -> list[ComparisonRequest]:
        """``comparisons`` plus every pair of one checkpoint in two precisions it does not name
        (:mod:`kubejury.config.comparisons`)."""
        facts = [
            ModelFacts(m.name, m.source, m.quantization, m.checkpoint, m.runtime, m.gguf_path)
            for m in self.models
        ]
        return run_comparisons(facts, (Requested(c.a, c.b, c.margin) for c in self.comparisons))

    def sequential_budget(self) -> Budget | None:
        """``budget`` as :class:`kubejury.stats.sequential.Budget` (``None``: no budget); seeded
        with ``scoring.seed``; goal comparisons decides the pairs of ``comparisons``."""
        if self.budget is None:
            return None
        b = self.budget
        pairs = tuple(SequentialComparison(c.a, c.b, c.margin) for c in self.comparisons)
        return Budget(
            confidence=b.confidence,
            goal=b.goal,
            margin=b.margin,
            max_questions=b.max_questions,
            min_per_cell=b.min_per_cell,
            looks=tuple(b.looks) if b.looks else DEFAULT_LOOKS,
            seed=self.scoring.seed,
            comparisons=pairs if b.goal == "comparisons" else (),
        )

    def all_endpoints(self) -> list[ModelSpec]:
        """Models then judges, in spec order (what the operator must serve or reach)."""
        return [*self.models, *self.judges]


class ObjectMeta(BaseModel):
    """The Kubernetes object metadata kubejury reads; the rest (uid, resourceVersion…) is ignored."""

    model_config = ConfigDict(
        extra="ignore", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    name: str = Field(
        pattern=_DNS_LABEL,
        description="Name of the run (DNS-1123 label: lower-case letters, digits, '-'; at most 63 characters).",
    )
    namespace: str | None = Field(default=None, pattern=_DNS_LABEL, description="Namespace (cluster only).")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")


class EvalRun(_Model):
    """An evaluation: models answer a benchmark under one or more series and a jury of judges scores them."""

    api_version: Literal["kubejury.io/v1alpha1"] = Field(
        default="kubejury.io/v1alpha1", description="Always kubejury.io/v1alpha1."
    )
    kind: Literal["EvalRun"] = Field(default="EvalRun", description="Always EvalRun.")
    metadata: ObjectMeta = Field(description="Name (and, in the cluster, namespace) of the run.")
    spec: EvalRunSpec = Field(description="What to evaluate, with what, and how.")
    status: dict[str, Any] | None = Field(
        default=None, description="Written by the operator; ignored on input.", exclude=True
    )

    @property
    def name(self) -> str:
        return self.metadata.name


# --------------------------------------------------------------------------------------------
# Loading and error reporting
# --------------------------------------------------------------------------------------------


class SpecError(InputError):
    """An EvalRun that cannot be used; ``problems`` lists every field problem found."""

    def __init__(self, source: str, problems: Sequence[FieldProblem], lines: Mapping[str, int] | None = None):
        self.problems = list(problems)
        lines = lines or {}
        if lines:  # in file order; problems without a line keep their place at the end
            self.problems.sort(key=lambda problem: lines.get(problem.path, 1 << 30))
        rendered = []
        for problem in self.problems:
            line = lines.get(problem.path)
            rendered.append(f"line {line}: {problem}" if line else str(problem))
        if len(rendered) == 1:
            message = rendered[0]
        else:
            message = f"{len(rendered)} problems:\n  " + "\n  ".join(rendered)
        super().__init__(source, message, field=self.problems[0].path if len(self.problems) == 1 else None)


def _path_of(loc: Sequence[int | str]) -> str:
    """``spec.models[0].name`` from a pydantic location; a mapping's keys are written ``.key``
    (``spec.scoring.levelWeights.1``) even when YAML read them as integers."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int) and not _is_mapping_at(loc[:i]):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def _is_mapping_at(loc: Sequence[int | str]) -> bool:
    """Whether the field at ``loc`` of an EvalRun is a mapping (its keys are not list indexes)."""
    names = [part for part in loc if isinstance(part, str)]
    if not names or not isinstance(loc[-1], str):
        return False
    parent = _model_at(loc[: max(i for i, part in enumerate(loc) if isinstance(part, str))])
    field = (
        next((f for n, f in parent.model_fields.items() if names[-1] in (n, f.alias)), None)
        if parent
        else None
    )
    if field is None:
        return False
    return any(get_origin(arg) is dict for arg in (field.annotation, *get_args(field.annotation)))


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model class found at ``loc`` in an EvalRun (for 'allowed fields' hints)."""
    current: Any = EvalRun
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for n, f in current.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """The pydantic model inside ``X``, ``X | None`` or ``list[X]``; else the annotation itself."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        for inner in get_args(arg):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return annotation


def _field_description(loc: Sequence[int | str]) -> str | None:
    """The description of the field at ``loc`` (it says what is allowed), if known."""
    names = [part for part in loc if isinstance(part, str)]
    parent = (
        _model_at(loc[: max(i for i, part in enumerate(loc) if isinstance(part, str))]) if names else None
    )
    if parent is None:
        return None
    field = next((f for n, f in parent.model_fields.items() if names[-1] in (n, f.alias)), None)
    return field.description if field is not None else None


def _allowed_fields(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or n for n, f in model.model_fields.items())


def _problems_from_error(error: ErrorDetails) -> list[FieldProblem]:
    loc = error["loc"]
    path = _path_of(loc)
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "evalrun_semantics":
        prefix = _path_of(loc)
        return [FieldProblem(f"{prefix}.{p}" if prefix else p, m) for p, m in ctx.get("problems", [])]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = f"; allowed here: {_allowed_fields(parent)}" if parent else ""
        return [FieldProblem(path, f"unknown field{allowed}")]
    if kind == "missing":
        return [FieldProblem(path, "required field is missing")]
    message = error["msg"]
    if kind == "string_pattern_mismatch":
        described = _field_description(loc)
        message = f"{error.get('input')!r} is not allowed here" + (
            f": {described}" if described else f" ({message})"
        )
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    if kind == "literal_error":
        message = f"{message}, got {error.get('input')!r}"
    if kind == "finite_number":
        message = f"must be a finite number, got {error.get('input')!r}"
    return [FieldProblem(path, message)]


def _dedupe(problems: Sequence[FieldProblem]) -> list[FieldProblem]:
    return list(dict.fromkeys(problems))


def evalrun_problems(data: object) -> tuple[EvalRun | None, list[FieldProblem]]:
    """Validate ``data``; return the EvalRun (when valid) and every problem found, schema and cross-field."""
    if not isinstance(data, Mapping):
        return None, [
            FieldProblem(
                "", f"an EvalRun is a mapping (apiVersion, kind, metadata, spec), got {type(data).__name__}"
            )
        ]
    try:
        return EvalRun.model_validate(data), []
    except ValidationError as exc:
        problems: list[FieldProblem] = []
        semantic_seen = False
        for error in exc.errors():
            if error["type"] == "evalrun_semantics":
                semantic_seen = True
            problems.extend(_problems_from_error(error))
        spec = data.get("spec")
        if not semantic_seen and isinstance(spec, Mapping):
            # One problem per field: where a cross-field rule speaks of a field the schema also
            # flagged (an empty judges list, a weight that is no number), the rule's words win.
            rules = spec_problems(spec)
            ruled = {problem.path for problem in rules}
            problems = [problem for problem in problems if problem.path not in ruled] + rules
        return None, _dedupe(problems)


def parse_evalrun(data: object, source: str = "<EvalRun>", lines: Mapping[str, int] | None = None) -> EvalRun:
    """Validate an EvalRun mapping; raise :class:`SpecError` listing every problem as ``<path>: <allowed>``."""
    run, problems = evalrun_problems(data)
    if run is None:
        raise SpecError(source, problems, lines)
    return run


def _line_index(node: yaml.Node, path: str = "", out: dict[str, int] | None = None) -> dict[str, int]:
    """Field path → 1-based line, from a composed YAML node tree."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            out.setdefault(child, key_node.start_mark.line + 1)
            _line_index(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = f"{path}[{i}]"
            out.setdefault(child, item.start_mark.line + 1)
            _line_index(item, child, out)
    return out


def _nearest_lines(problems: Sequence[FieldProblem], index: Mapping[str, int]) -> dict[str, int]:
    lines: dict[str, int] = {}
    for problem in problems:
        path = problem.path
        while path:
            if path in index:
                lines[problem.path] = index[path]
                break
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
    return lines


def parse_evalrun_yaml(text: str, source: str = "<EvalRun>") -> EvalRun:
    """Parse and validate EvalRun YAML text; errors carry line numbers."""
    data, node = load_yaml(text, source)  # no aliases, duplicate keys, runaway nesting or digits
    if data is None:
        raise InputError(source, "empty file: expected an EvalRun (apiVersion, kind, metadata, spec)")
    run, problems = evalrun_problems(data)
    if run is None:
        index = _line_index(node) if node is not None else {}
        raise SpecError(source, problems, _nearest_lines(problems, index))
    return run


def load_evalrun(path: str | Path) -> EvalRun:
    """Read and validate an EvalRun YAML (or JSON) file; :class:`InputError` names file, line and field."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(str(path), "file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot read: {exc}") from exc
    return parse_evalrun_yaml(text, str(path))
