"""The operator's cluster-wide settings, grouped by concern, and the one table of their variables.

Why this module exists: the Helm chart hands the operator about thirty settings as environment
variables (its ``…-settings`` ConfigMap, ``charts/kubejury/templates/configmap.yaml``), and
``docs/chart.md`` lists them again. Each variable's name used to be spelled in a hand-written
``from_env`` of thirty lines, with nothing to notice a variable the chart set and the operator never
read. Here each concern is a frozen dataclass (the Jobs, the images, storage, model servers, the
model cache), :class:`WorkloadSettings` is all of them at once, and :data:`ENVIRONMENT` is the one
field → variable table: :meth:`WorkloadSettings.from_env` reads through it, and a unit test checks
it against the chart's ConfigMap template both ways. The chart's variables that other parts read
(the tenant policy, the webhook, logging) are named in :data:`READ_ELSEWHERE`, so that test knows
every line of the template.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubejury.config.spec_rules import memory_quantity_bytes
from kubejury.placement.gpu_nodes import GPU_TOLERATIONS_ENV, chart_tolerations_from_env
from kubejury_operator import images


@dataclass(frozen=True)
class ImageSettings:
    """Which images the Jobs and the model servers run, and how they are pulled."""

    job_image: str = "ghcr.io/kubejury/kubejury:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    vllm_image: str = images.VLLM.reference
    llamacpp_image: str = images.LLAMACPP_CPU.reference  # GGUF servers placed on CPU nodes
    llamacpp_cuda_image: str = images.LLAMACPP_CUDA.reference  # GGUF servers placed on GPU nodes
    ollama_image: str = images.OLLAMA.reference


@dataclass(frozen=True)
class JobSettings:
    """How the generation, judging and aggregation Jobs run: identity, resources, retries, deadlines."""

    job_backoff_limit: int = 3
    generation_deadline_seconds: int = 172800
    judging_deadline_seconds: int = 172800
    aggregation_deadline_seconds: int = 7200
    job_service_account: str | None = None  # None: the operator creates kj-<run>-job per run
    job_uid: int = 10001  # the image's USER and the chart's operator pod: both write the results claim
    job_resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    )
    # A Job OOM-killed is replaced with its memory limit doubled, up to this (kubejury_operator.oom_retry).
    job_oom_max_memory: str = "8Gi"


@dataclass(frozen=True)
class StorageSettings:
    """Where the Jobs store results and how they (and ``s3://`` model servers) reach the store."""

    results_pvc: str | None = None  # mounted at the file:// storage path for in-cluster file storage
    storage_secret: str | None = None  # Secret with S3 credentials (AWS_* keys) for Jobs
    s3_endpoint: str | None = None  # KUBEJURY_S3_ENDPOINT: an S3-compatible store (None: AWS)
    s3_region: str | None = None  # AWS_REGION for the Jobs and s3:// model servers


@dataclass(frozen=True)
class ServerSettings:
    """What every model server gets: GPUs, requests, shared memory, context, start-up budget, token."""

    gpu_resource: str = "nvidia.com/gpu"
    hf_token_secret: str | None = "hf-token"  # Secret with key HF_TOKEN (optional reference)
    hf_token_key: str = "HF_TOKEN"
    # A Hugging Face hub mirror (the chart's inference.hubEndpoint; None: huggingface.co): hf://
    # model servers and prefetch Jobs download from it (HF_ENDPOINT). Admin-set only: no spec field
    # reaches it, so a tenant cannot send downloads (or the hub token) elsewhere.
    hub_endpoint: str | None = None
    startup_budget_seconds: int = 1800  # how long a model may take to load before kubelet restarts it
    gpu_memory_utilization: float = 0.90
    default_max_model_len: int = 8192
    # Model servers' own requests (so they are never BestEffort); a model's resources win.
    server_cpu_request: str = "2"
    server_memory_request: str = "16Gi"
    server_shm_size: str = "16Gi"  # vLLM's memory-backed /dev/shm, added to the memory request
    extra_tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ModelCacheSettings:
    """Where model servers keep downloaded weights and compile caches."""

    model_cache_pvc: str | None = None  # shared HF/GGUF cache; None = emptyDir per pod
    model_cache_mount: str = "/models/cache"  # HF_HOME; other runtimes' caches go below it
    model_cache_size_limit: str = "200Gi"  # emptyDir fallback size limit
    # With a claim: a CPU-only Job downloads hf:// and s3:// weights into it before the server is
    # created, and the server loads from there (kubejury_operator.prefetching; docs/operator.md).
    model_cache_prefetch: bool = False  # the chart turns it on (modelCache.prefetch)


@dataclass(frozen=True)
class QueueSettings:
    """Whether Kueue admits the runs (the chart's ``kueue.enabled``) and how long a Job may wait
    for quota while its model server holds GPUs (docs/operator.md, "Kueue")."""

    kueue_enabled: bool = False  # a run without spec.queueName uses the LocalQueue "default"
    kueue_job_grace_seconds: int = 60  # guard 1: a Job of a Ready server still unadmitted after this


@dataclass(frozen=True)
class WorkloadSettings(
    ImageSettings, JobSettings, StorageSettings, ServerSettings, ModelCacheSettings, QueueSettings
):
    """Every cluster-wide knob at once (from the operator's environment, set by the Helm chart).

    One flat object, so a builder that needs one knob reads it by name; each base class is one
    concern, and a function that reads one concern only may say so in its signature.
    """

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkloadSettings:
        """Settings from the variables of :data:`ENVIRONMENT`; unset ones keep their defaults. A value
        that cannot be read is a ``ValueError`` naming its variable."""
        base = cls()
        changes = {
            setting.field: setting.read(env[setting.env], getattr(base, setting.field), setting.env)
            for setting in ENVIRONMENT
            if setting.env in env
        }
        return dataclasses.replace(base, **changes)


# ------------------------------------------------------------------------ readers of variables

Reader = Callable[[str, Any, str], Any]
"""How one variable's text becomes a value: ``(text, default, variable name) -> value``."""


def text_or_default(raw: str, default: Any, name: str) -> Any:
    """The text; empty keeps the default (an image or a request must never be blank)."""
    return raw or default


def text_or_none(raw: str, default: Any, name: str) -> str | None:
    """The text; empty means "none" (no claim, no Secret, no endpoint)."""
    return raw or None


def http_url_or_none(raw: str, default: Any, name: str) -> str | None:
    """An ``http://`` or ``https://`` URL without a trailing slash; empty means "none"."""
    if not raw:
        return None
    if not raw.startswith(("http://", "https://")) or any(c.isspace() for c in raw):
        raise ValueError(f"{name} must be an http:// or https:// URL, got {raw!r}")
    return raw.rstrip("/")


def integer(raw: str, default: Any, name: str) -> Any:
    """A whole number; empty keeps the default."""
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None


def decimal(raw: str, default: Any, name: str) -> Any:
    """A number such as ``0.9``; empty keeps the default."""
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


def memory_quantity(raw: str, default: Any, name: str) -> Any:
    """A Kubernetes memory quantity such as ``8Gi``; empty keeps the default."""
    if not raw:
        return default
    try:
        memory_quantity_bytes(raw)
    except ValueError:
        raise ValueError(f"{name} must be a memory quantity such as 8Gi, got {raw!r}") from None
    return raw


def json_object(raw: str, default: Any, name: str) -> Any:
    """A JSON object (the chart passes maps as JSON); empty, or an empty object, keeps the default."""
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON: {exc.msg} ({raw!r:.60})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON dict, got {raw!r}")
    return value or default


def boolean(raw: str, default: Any, name: str) -> Any:
    """``true`` or ``false`` (any case); empty keeps the default."""
    if not raw:
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise ValueError(f"{name} must be true or false, got {raw!r}")


def tolerations(raw: str, default: Any, name: str) -> Any:
    """The chart's GPU tolerations, a JSON list of objects (see ``chart_tolerations_from_env``)."""
    return chart_tolerations_from_env({name: raw})


# -------------------------------------------------------------------- the field → variable table


@dataclass(frozen=True)
class EnvSetting:
    """One setting the chart passes: the :class:`WorkloadSettings` field, its variable, its reader."""

    field: str
    env: str
    read: Reader


ENVIRONMENT: tuple[EnvSetting, ...] = (
    # images
    EnvSetting("job_image", "KUBEJURY_JOB_IMAGE", text_or_default),
    EnvSetting("image_pull_policy", "KUBEJURY_IMAGE_PULL_POLICY", text_or_default),
    EnvSetting("vllm_image", "KUBEJURY_VLLM_IMAGE", text_or_default),
    EnvSetting("llamacpp_image", "KUBEJURY_LLAMACPP_IMAGE", text_or_default),
    EnvSetting("llamacpp_cuda_image", "KUBEJURY_LLAMACPP_CUDA_IMAGE", text_or_default),
    EnvSetting("ollama_image", "KUBEJURY_OLLAMA_IMAGE", text_or_default),
    # Jobs
    EnvSetting("job_service_account", "KUBEJURY_JOB_SERVICE_ACCOUNT", text_or_none),
    EnvSetting("job_resources", "KUBEJURY_JOB_RESOURCES", json_object),
    EnvSetting("job_backoff_limit", "KUBEJURY_JOB_BACKOFF_LIMIT", integer),
    EnvSetting("job_oom_max_memory", "KUBEJURY_JOB_OOM_MAX_MEMORY", memory_quantity),
    EnvSetting("generation_deadline_seconds", "KUBEJURY_GENERATION_DEADLINE_SECONDS", integer),
    EnvSetting("judging_deadline_seconds", "KUBEJURY_JUDGING_DEADLINE_SECONDS", integer),
    EnvSetting("aggregation_deadline_seconds", "KUBEJURY_AGGREGATION_DEADLINE_SECONDS", integer),
    # storage
    EnvSetting("results_pvc", "KUBEJURY_RESULTS_PVC", text_or_none),
    EnvSetting("storage_secret", "KUBEJURY_STORAGE_SECRET", text_or_none),
    EnvSetting("s3_endpoint", "KUBEJURY_S3_ENDPOINT", text_or_none),
    EnvSetting("s3_region", "AWS_REGION", text_or_none),
    # model servers
    EnvSetting("hf_token_secret", "KUBEJURY_HF_TOKEN_SECRET", text_or_none),
    EnvSetting("hub_endpoint", "KUBEJURY_HF_ENDPOINT", http_url_or_none),
    EnvSetting("startup_budget_seconds", "KUBEJURY_STARTUP_BUDGET_SECONDS", integer),
    EnvSetting("gpu_memory_utilization", "KUBEJURY_GPU_MEMORY_UTILIZATION", decimal),
    EnvSetting("default_max_model_len", "KUBEJURY_MAX_MODEL_LEN", integer),
    EnvSetting("server_cpu_request", "KUBEJURY_SERVER_CPU_REQUEST", text_or_default),
    EnvSetting("server_memory_request", "KUBEJURY_SERVER_MEMORY_REQUEST", text_or_default),
    EnvSetting("server_shm_size", "KUBEJURY_SERVER_SHM_SIZE", text_or_default),
    EnvSetting("extra_tolerations", GPU_TOLERATIONS_ENV, tolerations),
    # model cache
    EnvSetting("model_cache_pvc", "KUBEJURY_MODEL_CACHE_PVC", text_or_none),
    EnvSetting("model_cache_prefetch", "KUBEJURY_MODEL_CACHE_PREFETCH", boolean),
    # Kueue
    EnvSetting("kueue_enabled", "KUBEJURY_KUEUE_ENABLED", boolean),
)

READ_ELSEWHERE: Mapping[str, str] = {
    "KUBEJURY_LOG_LEVEL": "kubejury_operator.__main__",
    "KUBEJURY_METRICS_PORT": "kubejury_operator.__main__",
    "KUBEJURY_WATCH_NAMESPACES": "kubejury_operator.__main__",
    "KUBEJURY_ALLOWED_STORAGE_ROOTS": "kubejury_operator.tenancy.TenantPolicy",
    "KUBEJURY_ALLOWED_JOB_IMAGES": "kubejury_operator.tenancy.TenantPolicy",
    "KUBEJURY_ALLOWED_CLAIMS": "kubejury_operator.tenancy.TenantPolicy",
    "KUBEJURY_ALLOWED_SERVER_FLAGS": "kubejury_operator.tenancy.TenantPolicy",
    "KUBEJURY_ALLOWED_STORAGE_ENDPOINTS": "kubejury_operator.tenancy.TenantPolicy",
    "KUBEJURY_ALLOWED_NODE_SELECTOR_KEYS": "kubejury_operator.tenancy.TenantPolicy",
    "KUBEJURY_WEBHOOK_PORT": "kubejury_operator.kopf_setup.configure_admission",
    "KUBEJURY_WEBHOOK_CERT": "kubejury_operator.kopf_setup.configure_admission",
    "KUBEJURY_WEBHOOK_KEY": "kubejury_operator.kopf_setup.configure_admission",
    "KUBEJURY_WEBHOOK_MANAGED": "kubejury_operator.kopf_setup.configure_admission",
}
"""The chart's other variables, and the part that reads each (not workload settings)."""
