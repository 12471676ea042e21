"""Pure builders of every Kubernetes object the operator creates for an EvalRun.

Why this module exists: the shape of a Deployment, Service or Job is the operator's most
reviewable output, so it is built here by plain functions from plain inputs — no API calls, no
clock, no randomness — and every object is validated against the Kubernetes OpenAPI schemas in
the unit tests. The reconcile planner decides *which* objects should exist; this module decides
*what they look like*; ``gateway.py`` sends them.

Objects per run (all carry an owner reference to the EvalRun, so deleting the run deletes them):

* ``kj-<run>-spec`` ConfigMap: the EvalRun (apiVersion/kind/metadata.name/spec) as YAML, mounted
  read-only into every Job at ``/etc/kubejury/evalrun.yaml``. A ConfigMap, not an env variable:
  specs carry prompt templates and system prompts that can exceed what env comfortably holds, a
  file is what ``kubejury`` reads locally too, and one object per run keeps the Jobs identical
  across restarts.
* ``kj-<run>-job`` ServiceAccount for the Jobs' pods: no RBAC binding and
  ``automountServiceAccountToken: false`` — Job pods have no Kubernetes API access at all; they
  report progress through storage.
* per in-cluster model or judge: a Deployment + Service (vLLM, llama.cpp or Ollama). ``openai``
  endpoints get no workload.

A name joined from several user-chosen parts (run, model, judge, series) ends in a short hash of
the parts taken as a tuple (:func:`joined_label`): ``kj-<run>-m-<model>-<hash>``,
``kj-<run>-gen-<model>-<series>-<hash>``, ``kj-<run>-judge-<judge>-<series>-<hash>-<round>``.
Joined without it, models ``m``/``m-a`` with series ``a-b``/``b`` shared one Job, and run ``foo``
with model ``x-m-y`` shared its Deployment with run ``foo-m-x``'s model ``y``.
* Jobs running ``kubejury generate|judge|aggregate`` (see :func:`generation_job`,
  :func:`judge_job`, :func:`aggregation_job` for the exact command lines).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubejury.config.spec_rules import (
    SERVER_SHM_MOUNT,
    SERVER_SOURCE_MOUNT,
    SERVER_TMP_MOUNT,
    memory_quantity_bytes,
)
from kubejury.files.storage import STORAGE_MOUNT_ENV
from kubejury.placement.decision import Placement
from kubejury.placement.gpu_nodes import chart_tolerations_from_env
from kubejury.records.gpu_usage import GPU_USAGE_ENV, GpuUsage
from kubejury_operator import images

Manifest = dict[str, Any]

API_GROUP = "kubejury.io"
API_VERSION = "v1alpha1"
EVALRUN_API_VERSION = f"{API_GROUP}/{API_VERSION}"
EVALRUN_KIND = "EvalRun"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_RUN = "kubejury.io/run"
LABEL_COMPONENT = "kubejury.io/component"
LABEL_ENDPOINT = "kubejury.io/endpoint"  # model-server Pods only: the Service selects on it
LABEL_USES_SERVER = "kubejury.io/uses-server"  # Job Pods: the server (endpoint key) they send requests to
LABEL_SERIES = "kubejury.io/series"
MANAGED_BY = "kubejury-operator"

SPEC_MOUNT_DIR = "/etc/kubejury"
SPEC_FILE = "evalrun.yaml"
SPEC_PATH = f"{SPEC_MOUNT_DIR}/{SPEC_FILE}"
SERVING_PORT = 8000
SERVER_UID = 1000  # model servers run as this uid (and gid, fsGroup); the images have no passwd entry for it
SERVER_USER = "kubejury"  # USER/LOGNAME: torch's getpass.getuser() raises for a uid without a passwd entry
API_KEY_ENV = "KUBEJURY_API_KEY"

# Quantizations that need no ``--quantization`` flag in vLLM: either unquantized, or vLLM reads
# the format from the checkpoint's own config (pre-quantized FP8/NVFP4/MXFP4/AWQ/GPTQ).
_NO_FLAG = frozenset({"", "auto", "none", "bf16", "fp16", "float16", "bfloat16"})
GGUF_RUNTIMES = frozenset({"llamacpp", "ollama"})
IN_CLUSTER_RUNTIMES = frozenset({"vllm", "llamacpp", "ollama"})


@dataclass(frozen=True)
class WorkloadSettings:
    """Cluster-wide knobs (from the operator's environment, set by the Helm chart)."""

    job_image: str = "ghcr.io/kubejury/kubejury:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    vllm_image: str = images.VLLM.reference
    llamacpp_image: str = images.LLAMACPP_CPU.reference  # GGUF servers placed on CPU nodes
    llamacpp_cuda_image: str = images.LLAMACPP_CUDA.reference  # GGUF servers placed on GPU nodes
    ollama_image: str = images.OLLAMA.reference
    gpu_resource: str = "nvidia.com/gpu"
    model_cache_pvc: str | None = None  # shared HF/GGUF cache; None = emptyDir per pod
    model_cache_mount: str = "/models/cache"  # HF_HOME; other runtimes' caches go below it
    model_cache_size_limit: str = "200Gi"  # emptyDir fallback size limit
    hf_token_secret: str | None = "hf-token"  # Secret with key HF_TOKEN (optional reference)
    hf_token_key: str = "HF_TOKEN"
    startup_budget_seconds: int = 1800  # how long a model may take to load before kubelet restarts it
    gpu_memory_utilization: float = 0.90
    default_max_model_len: int = 8192
    job_backoff_limit: int = 3
    generation_deadline_seconds: int = 172800
    judging_deadline_seconds: int = 172800
    aggregation_deadline_seconds: int = 7200
    job_service_account: str | None = None  # None: the operator creates kj-<run>-job per run
    job_uid: int = 65532
    results_pvc: str | None = None  # mounted at the file:// storage path for in-cluster file storage
    storage_secret: str | None = None  # Secret with S3 credentials (AWS_* keys), envFrom into Jobs
    s3_endpoint: str | None = None  # KUBEJURY_S3_ENDPOINT: an S3-compatible store (None: AWS)
    s3_region: str | None = None  # AWS_REGION for the Jobs and s3:// model servers
    # Model servers' own requests (so they are never BestEffort); a model's resources win.
    server_cpu_request: str = "2"
    server_memory_request: str = "16Gi"
    server_shm_size: str = "16Gi"  # vLLM's memory-backed /dev/shm, added to the memory request
    extra_tolerations: tuple[Mapping[str, Any], ...] = ()
    job_resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkloadSettings:
        """Settings from ``KUBEJURY_*`` variables; unset ones keep their defaults."""
        base = cls()

        def text(key: str, default: str | None) -> str | None:
            value = env.get(key)
            if value is None:
                return default
            return value or None

        def number(key: str, default: int) -> int:
            value = env.get(key)
            return int(value) if value else default

        return cls(
            job_image=text("KUBEJURY_JOB_IMAGE", base.job_image) or base.job_image,
            image_pull_policy=text("KUBEJURY_IMAGE_PULL_POLICY", base.image_pull_policy)
            or base.image_pull_policy,
            vllm_image=text("KUBEJURY_VLLM_IMAGE", base.vllm_image) or base.vllm_image,
            llamacpp_image=text("KUBEJURY_LLAMACPP_IMAGE", base.llamacpp_image) or base.llamacpp_image,
            llamacpp_cuda_image=text("KUBEJURY_LLAMACPP_CUDA_IMAGE", base.llamacpp_cuda_image)
            or base.llamacpp_cuda_image,
            ollama_image=text("KUBEJURY_OLLAMA_IMAGE", base.ollama_image) or base.ollama_image,
            model_cache_pvc=text("KUBEJURY_MODEL_CACHE_PVC", base.model_cache_pvc),
            hf_token_secret=text("KUBEJURY_HF_TOKEN_SECRET", base.hf_token_secret),
            startup_budget_seconds=number("KUBEJURY_STARTUP_BUDGET_SECONDS", base.startup_budget_seconds),
            gpu_memory_utilization=float(
                env.get("KUBEJURY_GPU_MEMORY_UTILIZATION") or base.gpu_memory_utilization
            ),
            default_max_model_len=number("KUBEJURY_MAX_MODEL_LEN", base.default_max_model_len),
            job_backoff_limit=number("KUBEJURY_JOB_BACKOFF_LIMIT", base.job_backoff_limit),
            generation_deadline_seconds=number(
                "KUBEJURY_GENERATION_DEADLINE_SECONDS", base.generation_deadline_seconds
            ),
            judging_deadline_seconds=number(
                "KUBEJURY_JUDGING_DEADLINE_SECONDS", base.judging_deadline_seconds
            ),
            aggregation_deadline_seconds=number(
                "KUBEJURY_AGGREGATION_DEADLINE_SECONDS", base.aggregation_deadline_seconds
            ),
            job_service_account=text("KUBEJURY_JOB_SERVICE_ACCOUNT", base.job_service_account),
            results_pvc=text("KUBEJURY_RESULTS_PVC", base.results_pvc),
            storage_secret=text("KUBEJURY_STORAGE_SECRET", base.storage_secret),
            s3_endpoint=text("KUBEJURY_S3_ENDPOINT", base.s3_endpoint),
            s3_region=text("AWS_REGION", base.s3_region),
            server_cpu_request=text("KUBEJURY_SERVER_CPU_REQUEST", base.server_cpu_request)
            or base.server_cpu_request,
            server_memory_request=text("KUBEJURY_SERVER_MEMORY_REQUEST", base.server_memory_request)
            or base.server_memory_request,
            server_shm_size=text("KUBEJURY_SERVER_SHM_SIZE", base.server_shm_size) or base.server_shm_size,
            extra_tolerations=chart_tolerations_from_env(env),
            job_resources=_json_env(env, "KUBEJURY_JOB_RESOURCES", dict) or base.job_resources,
        )


def _json_env(env: Mapping[str, str], key: str, kind: type) -> Any:
    """A JSON value from the environment (the chart passes lists and maps as JSON), or ``None``."""
    raw = env.get(key)
    if not raw:
        return None
    value = json.loads(raw)
    if not isinstance(value, kind):
        raise ValueError(f"{key} must be a JSON {kind.__name__}, got {raw!r}")
    return value or None


@dataclass(frozen=True)
class RunRef:
    """The EvalRun that owns the objects: name, namespace and uid (for owner references)."""

    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class Endpoint:
    """One model or judge as the operator serves it.

    ``key`` is the deployment identity (``m-<model>`` or ``j-<judge>``); a judge that is the same
    model as an evaluated one (``sameAs`` with the same source and runtime) shares its key and
    therefore its Deployment. ``placement`` is ``None`` for ``runtime: openai``.
    """

    key: str
    name: str
    source: str
    served_model: str
    runtime: str
    checkpoint: str | None = None
    placement: Placement | None = None
    api_key_secret: str | None = None  # Secret name; key below
    api_key_key: str = "api-key"
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    cpu: str | None = None
    memory: str | None = None
    extra_args: tuple[str, ...] = ()

    @property
    def in_cluster(self) -> bool:
        return self.runtime in IN_CLUSTER_RUNTIMES


# ----------------------------------------------------------------------------------------- names


_INVALID = re.compile(r"[^a-z0-9-]+")


DNS_LABEL_LIMIT = 63  # RFC 1123 label: Service names, Pod hostnames
LABEL_VALUE_LIMIT = 63
WORKLOAD_NAME_LIMIT = 52  # Deployment and Service names (DNS-1035 labels), as short as the others
NAME_DIGEST_LENGTH = 8


def name_digest(parts: Sequence[str]) -> str:
    """A short hash of ``parts`` taken as a tuple (JSON-encoded, so ``("m", "a-b")`` and
    ``("m-a", "b")`` differ although both join to ``m-a-b``). SHA-256: the same in every process."""
    encoded = json.dumps(list(parts), ensure_ascii=False).encode()
    return hashlib.sha256(encoded).hexdigest()[:NAME_DIGEST_LENGTH]


def _readable(parts: Sequence[str]) -> str:
    """``parts`` ``-``-joined as a DNS label would have them: lower case, ``[a-z0-9-]`` only."""
    cleaned = _INVALID.sub("-", "-".join(parts).lower()).strip("-")
    return re.sub(r"-{2,}", "-", cleaned) or "x"


def _with_digest(readable: str, digest: str, limit: int) -> str:
    """The readable name cut so that ``-<digest>`` fits within ``limit``, then the digest."""
    head = readable[: limit - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def dns_label(*parts: str, limit: int = DNS_LABEL_LIMIT) -> str:
    """A deterministic DNS-1123 label from ``parts`` with one user-chosen part (lower case,
    ``-``-joined, ≤ ``limit``): the joined parts as they are when that is already a valid label.

    A name that had to be changed (too long, or characters a label may not hold) ends in
    :func:`name_digest` of the parts, so two long names that share a prefix stay distinct and the
    same input always gives the same name. Names of several user-chosen parts: :func:`joined_label`.
    """
    readable = _readable(parts)
    if readable == "-".join(parts) and len(readable) <= limit:
        return readable
    return _with_digest(readable, name_digest(parts), limit)


def joined_label(*parts: str, limit: int = DNS_LABEL_LIMIT) -> str:
    """A DNS-1123 label from ``parts`` of which several are user-chosen (run, model, series):
    the readable join, cut to fit, then always :func:`name_digest` of the parts as a tuple.

    Joining alone is ambiguous — models ``m``/``m-a`` with series ``a-b``/``b``, or run ``foo``
    with model ``x-m-y`` and run ``foo-m-x`` with model ``y``, join alike — and two objects of the
    same kind with the same name are one object to the API server (the second create is a 409).
    """
    return _with_digest(_readable(parts), name_digest(parts), limit)


def label_value(text: str) -> str:
    """A valid label value for ``text`` (≤ 63, alphanumeric at both ends).

    A value that had to be changed (too long, or characters a label may not hold) ends in a short
    hash of the whole text, so two run names sharing their first 63 characters get different
    ``kubejury.io/run`` labels and never select each other's children.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    if cleaned == text and len(cleaned) <= LABEL_VALUE_LIMIT:
        return cleaned or "x"
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    head = cleaned[: LABEL_VALUE_LIMIT - 9].rstrip("-._")
    return f"{head}-{digest}" if head else digest


# Name budget of Jobs. The API server rejects an Indexed Job unless ``<name>-<completions-1>`` (the
# hostname of its last Pod) is a DNS label, so every Job name leaves room for ``-`` and the digits of
# the largest index ``spec.jobs.generationShards`` allows (64 shards: index 63).
MAX_JOB_INDEX = 63
JOB_NAME_LIMIT = DNS_LABEL_LIMIT - len(f"-{MAX_JOB_INDEX}")


def spec_configmap_name(run: str) -> str:
    return dns_label("kj", run, "spec")


def job_service_account_name(run: str) -> str:
    return dns_label("kj", run, "job")


def endpoint_key(role: str, name: str) -> str:
    """``m-<model>`` or ``j-<judge>``: the deployment identity of a model or judge (the one-letter
    role prefix keeps a model and a judge of the same name apart)."""
    return f"{'m' if role == 'model' else 'j'}-{name}"


def workload_name(run: str, key: str) -> str:
    """Deployment and Service name of an endpoint: ``kj-<run>-<key>-<hash>`` (a DNS-1035 label:
    starts with a letter; ≤ :data:`WORKLOAD_NAME_LIMIT`)."""
    return joined_label("kj", run, key, limit=WORKLOAD_NAME_LIMIT)


def generation_job_name(run: str, model: str, series: str) -> str:
    """``kj-<run>-gen-<model>-<series>-<hash>``, within :data:`JOB_NAME_LIMIT`."""
    return joined_label("kj", run, "gen", model, series, limit=JOB_NAME_LIMIT)


def judge_job_name(run: str, judge: str, series: str, round_: int = 1) -> str:
    """``kj-<run>-judge-<judge>-<series>-<hash>-<round>``, within :data:`JOB_NAME_LIMIT`.

    Judging of (judge, series) runs in rounds: round N judges every answer stored when it starts.
    The round stays readable at the end; the hash tells (run, judge, series) apart.
    """
    suffix = f"-{round_}"
    return joined_label("kj", run, "judge", judge, series, limit=JOB_NAME_LIMIT - len(suffix)) + suffix


def aggregation_job_name(run: str) -> str:
    return dns_label("kj", run, "aggregate", limit=JOB_NAME_LIMIT)


def service_url(run: RunRef, key: str) -> str:
    """The OpenAI-compatible base URL of an in-cluster endpoint."""
    return f"http://{workload_name(run.name, key)}.{run.namespace}.svc:{SERVING_PORT}/v1"


def endpoint_url(run: RunRef, endpoint: Endpoint) -> str:
    """Where the Jobs send requests: the Service for in-cluster runtimes, ``source`` for openai."""
    return service_url(run, endpoint.key) if endpoint.in_cluster else endpoint.source


# --------------------------------------------------------------------------------------- helpers


def labels(run: str, component: str, **extra: str) -> dict[str, str]:
    result = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PART_OF: "kubejury",
        LABEL_RUN: label_value(run),
        LABEL_COMPONENT: component,
    }
    for key, value in extra.items():
        result[f"kubejury.io/{key}"] = label_value(value)
    return result


def owner_reference(run: RunRef) -> dict[str, Any]:
    return {
        "apiVersion": EVALRUN_API_VERSION,
        "kind": EVALRUN_KIND,
        "name": run.name,
        "uid": run.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(run: RunRef, name: str, object_labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": run.namespace,
        "labels": dict(object_labels),
        "ownerReferences": [owner_reference(run)],
    }


def restricted_container_security() -> dict[str, Any]:
    """Pod Security Standard "restricted" for a container, plus a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod_security(uid: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        # Chown a volume only when its root does not already belong to the group: a model cache of
        # hundreds of GiB is otherwise walked file by file at every Pod start.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _allowed_placement_tolerations(
    settings: WorkloadSettings, placement: Placement
) -> list[Mapping[str, Any]]:
    """The placement's tolerations of the GPU taint, and those the chart lists: nothing else, even
    from a placement recorded in status before the planner stopped tolerating every taint."""
    return [
        tol
        for tol in placement.tolerations
        if tol.get("key") == settings.gpu_resource
        or dict(tol) in [dict(t) for t in settings.extra_tolerations]
    ]


def _gpu_tolerations(settings: WorkloadSettings, placement: Placement | None) -> list[dict[str, Any]]:
    """The GPU taint, the chart's tolerations (``KUBEJURY_GPU_TOLERATIONS``) and the placement's
    allowed ones (:func:`_allowed_placement_tolerations`), each once."""
    result: list[dict[str, Any]] = [
        {"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"},
    ]
    extra: list[Mapping[str, Any]] = list(settings.extra_tolerations)
    if placement is not None:
        extra.extend(_allowed_placement_tolerations(settings, placement))
    for tol in extra:
        item = dict(tol)
        if item not in result:
            result.append(item)
    return result


def _uses_gpu(placement: Placement | None, settings: WorkloadSettings) -> bool:
    """GPU workloads are those placed on GPU nodes (node selector names an NVIDIA label)."""
    if placement is None or placement.tensor_parallel_size <= 0:
        return False
    return any(key.startswith("nvidia.com/") for key in placement.node_selector)


def _hf_model_id(source: str) -> str:
    return source.removeprefix("hf://")


def _source_volume(source: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """Model path as the server sees it, plus volumes and mounts needed to get there.

    ``pvc://claim/sub/path`` mounts the claim read-only at ``/models/src``; ``hf://org/repo`` is
    downloaded by the server into the cache; anything else (``s3://``, a plain path) is passed on.
    """
    if source.startswith("pvc://"):
        rest = source.removeprefix("pvc://")
        claim, _, sub = rest.partition("/")
        volumes = [{"name": "model-source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]
        mounts = [{"name": "model-source", "mountPath": SERVER_SOURCE_MOUNT, "readOnly": True}]
        return f"{SERVER_SOURCE_MOUNT}/{sub}".rstrip("/"), volumes, mounts
    if source.startswith("file://"):
        return source.removeprefix("file://"), [], []  # a path inside the image (or an extra mount)
    return _hf_model_id(source), [], []


def _cache_volume(settings: WorkloadSettings) -> dict[str, Any]:
    if settings.model_cache_pvc:
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": settings.model_cache_pvc}}
    return {"name": "model-cache", "emptyDir": {"sizeLimit": settings.model_cache_size_limit}}


def _hf_token_env(settings: WorkloadSettings) -> list[dict[str, Any]]:
    if not settings.hf_token_secret:
        return []
    return [
        {
            "name": "HF_TOKEN",
            "valueFrom": {
                "secretKeyRef": {
                    "name": settings.hf_token_secret,
                    "key": settings.hf_token_key,
                    "optional": True,
                }
            },
        }
    ]


def _server_home_env(cache: str) -> list[dict[str, Any]]:
    """Where a model server writes: every cache under the mounted model cache (owned by the pod's
    fsGroup), everything else under /tmp (an emptyDir). The images are Ubuntu-based with /root at
    mode 0700 and no passwd entry for the pod's uid, so nothing may default to ``~`` or ask for a
    user name: HOME, USER and LOGNAME are set, and torch, Triton and XDG caches are placed explicitly."""
    return [
        {"name": "HOME", "value": "/tmp"},
        {"name": "USER", "value": SERVER_USER},
        {"name": "LOGNAME", "value": SERVER_USER},
        {"name": "HF_HOME", "value": cache},
        {"name": "XDG_CACHE_HOME", "value": f"{cache}/xdg"},
        {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{cache}/torchinductor"},
        {"name": "TRITON_CACHE_DIR", "value": f"{cache}/triton"},
    ]


def _weights_s3_env(endpoint: Endpoint, settings: WorkloadSettings) -> list[dict[str, Any]]:
    """How a server streaming ``s3://`` weights reaches the store: the chart's (or run's) endpoint and
    region. Credentials come from the storage Secret (``envFrom``, see :func:`_server_container`).
    Only vLLM reads ``s3://`` (Run:ai streamer); the spec rejects it for llama.cpp and Ollama."""
    if not endpoint.source.startswith("s3://"):
        return []
    env: list[dict[str, Any]] = []
    if settings.s3_endpoint:
        env += [
            {"name": "AWS_ENDPOINT_URL", "value": settings.s3_endpoint},
            # S3-compatible stores (MinIO, Ceph) serve buckets by path, not by virtual host.
            {"name": "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "value": "0"},
        ]
    if settings.s3_region:
        env.append({"name": "AWS_REGION", "value": settings.s3_region})
    return env


#: The keys of a storage Secret a pod may receive (issue 11, finding 2): never the whole Secret
#: through ``envFrom``, so a key an admin keeps beside them reaches no pod.
STORAGE_SECRET_ENV: tuple[str, ...] = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
)


def storage_secret_env(secret: str, env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``env`` plus the S3 keys of ``secret`` as single variables (optional: a Secret may lack the
    last two); a variable ``env`` already sets (the chart's endpoint) is not overridden."""
    present = {e["name"] for e in env}
    return [
        *env,
        *(
            {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}
            for key in STORAGE_SECRET_ENV
            if key not in present
        ),
    ]


def _storage_env(settings: WorkloadSettings) -> list[dict[str, Any]]:
    """The chart's S3 settings for a Job: the same store the operator reads progress from."""
    env: list[dict[str, Any]] = []
    if settings.s3_endpoint:
        env.append({"name": "KUBEJURY_S3_ENDPOINT", "value": settings.s3_endpoint})
    if settings.s3_region:
        env.append({"name": "AWS_REGION", "value": settings.s3_region})
    return env


def _probes(path: str, settings: WorkloadSettings) -> dict[str, Any]:
    period = 10
    http = {"path": path, "port": "http"}
    return {
        # Large models take many minutes to download and load: the startup probe's budget
        # (failureThreshold × period) is configurable; liveness only starts after it passes.
        "startupProbe": {
            "httpGet": http,
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": max(1, -(-settings.startup_budget_seconds // period)),
        },
        "readinessProbe": {
            "httpGet": http,
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {"httpGet": http, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 5},
    }


def vllm_args(
    endpoint: Endpoint, placement: Placement, model_path: str, settings: WorkloadSettings
) -> list[str]:
    """Command-line arguments of ``vllm serve`` for one endpoint."""
    args = [
        "--model",
        model_path,
        "--served-model-name",
        endpoint.served_model,
        "--host",
        "0.0.0.0",
        "--port",
        str(SERVING_PORT),
        "--tensor-parallel-size",
        str(max(1, placement.tensor_parallel_size)),
        "--max-model-len",
        str(endpoint.max_model_len or settings.default_max_model_len),
        "--gpu-memory-utilization",
        f"{endpoint.gpu_memory_utilization or settings.gpu_memory_utilization:g}",
        # The model's own generation_config.json must not override the series' sampling.
        "--generation-config",
        "vllm",
    ]
    if endpoint.source.startswith("s3://"):
        args += ["--load-format", "runai_streamer"]
    extra = list(placement.vllm_args)
    quant = (placement.quantization or "").lower()
    checkpoint = (endpoint.checkpoint or "").lower()
    if "--quantization" not in extra and quant not in _NO_FLAG and quant != checkpoint:
        args += ["--quantization", quant]
    return args + extra + list(endpoint.extra_args)


def memory_bytes(quantity: str) -> int:
    """Bytes in a Kubernetes memory quantity (``16Gi``, ``512Mi``, ``8G``, ``1024``): the grammar
    admission checks a spec's ``resources.memory`` with, so the planner never meets one it cannot read."""
    return memory_quantity_bytes(quantity)


def _mebibytes(count: int) -> str:
    return f"{-(-count // 2**20)}Mi"


def _resources(
    endpoint: Endpoint, placement: Placement, gpus: int, settings: WorkloadSettings, shm: str | None
) -> dict[str, Any]:
    """Requests that keep a model server out of the BestEffort class (evicted first under memory
    pressure), its GPUs, and the memory-backed ``/dev/shm`` (``shm``, vLLM only) counted in the memory
    request and limit: tmpfs pages are charged to the Pod. A model's ``resources`` win over the
    settings' defaults; a GGUF model on CPU nodes requests at least the memory its placement needs.
    A memory limit is set only when the model sets one, so a server may use free node memory."""
    shm_bytes = memory_bytes(shm) if shm else 0
    base = endpoint.memory or settings.server_memory_request
    memory = memory_bytes(base)
    if not endpoint.memory and not gpus and placement.memory_gib:
        memory = max(memory, int(placement.memory_gib * 2**30))
    requests: dict[str, str] = {
        "cpu": endpoint.cpu or settings.server_cpu_request,
        "memory": _mebibytes(memory + shm_bytes),
    }
    limits: dict[str, str] = {}
    if endpoint.memory:
        limits["memory"] = requests["memory"]
    if gpus:
        requests[settings.gpu_resource] = str(gpus)
        limits[settings.gpu_resource] = str(gpus)
    result: dict[str, Any] = {"requests": requests}
    if limits:
        result["limits"] = limits
    return result


@dataclass(frozen=True)
class _Serving:
    """What one runtime adds to the serving container: image, command line, environment, volumes
    and the HTTP path its probes check."""

    image: str
    command: list[str] | None  # None: the image's entrypoint
    args: list[str]
    env: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    health: str = "/health"
    shm: str | None = None  # size of a memory-backed /dev/shm, counted in the memory request


def _vllm_serving(
    endpoint: Endpoint, placement: Placement, model_path: str, settings: WorkloadSettings, cache: str
) -> _Serving:
    # vLLM writes compile caches under $HOME and /tmp (emptyDir) and needs /dev/shm for
    # tensor-parallel workers; it runs fine as non-root with a read-only root filesystem then.
    return _Serving(
        image=settings.vllm_image,
        command=["vllm", "serve"],
        args=vllm_args(endpoint, placement, model_path, settings),
        env=[{"name": "VLLM_CACHE_ROOT", "value": f"{cache}/vllm"}],
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.server_shm_size}}],
        mounts=[{"name": "dshm", "mountPath": SERVER_SHM_MOUNT}],
        shm=settings.server_shm_size,
    )


def _llamacpp_serving(
    endpoint: Endpoint,
    placement: Placement,
    model_path: str,
    settings: WorkloadSettings,
    cache: str,
    gpus: int,
) -> _Serving:
    if endpoint.source.startswith("hf://"):
        repo = _hf_model_id(endpoint.source)
        quant = (placement.quantization or "").upper()
        model_args = ["--hf-repo", f"{repo}:{quant}" if quant and ":" not in repo else repo]
    else:
        model_args = ["--model", model_path]
    args = [
        *model_args,
        "--alias",
        endpoint.served_model,
        "--host",
        "0.0.0.0",
        "--port",
        str(SERVING_PORT),
        "--ctx-size",
        str(endpoint.max_model_len or settings.default_max_model_len),
        "--jinja",
    ]
    if gpus:
        args += ["--n-gpu-layers", "999"]
    return _Serving(
        # The CUDA build on GPU placements: the CPU build would hold the GPU and compute on the CPU.
        image=settings.llamacpp_cuda_image if gpus else settings.llamacpp_image,
        command=None,  # the image's entrypoint is llama-server
        args=args + list(endpoint.extra_args),
        env=[{"name": "LLAMA_CACHE", "value": f"{cache}/llama.cpp"}],
    )


def _ollama_serving(endpoint: Endpoint, settings: WorkloadSettings, cache: str) -> _Serving:
    # Ollama serves first, then pulls the tag (``ollama://<tag>``). Its default context (2k–4k
    # tokens) would silently cut prompts and answers, so the context is passed twice: as
    # OLLAMA_CONTEXT_LENGTH (the server's default for every model) and, when requests name the
    # model differently (servedModel), as ``PARAMETER num_ctx`` of the model created under that
    # name (a model's own parameter wins over the server default). The readiness probe (see
    # _server_container) passes once the model is there, so the Service only routes to a pod
    # that can answer.
    tag = endpoint.source.removeprefix("ollama://") if endpoint.source.startswith("ollama://") else ""
    context = str(endpoint.max_model_len or settings.default_max_model_len)
    return _Serving(
        image=settings.ollama_image,
        command=["/bin/sh", "-c"],
        args=[
            "ollama serve & pid=$!; until ollama list >/dev/null 2>&1; do sleep 1; done; "
            'src="${KUBEJURY_OLLAMA_SOURCE:-$KUBEJURY_OLLAMA_MODEL}"; ollama pull "$src" || exit 1; '
            'if [ "$src" != "$KUBEJURY_OLLAMA_MODEL" ]; then '
            'printf "FROM %s\\nPARAMETER num_ctx %s\\n" "$src" "$OLLAMA_CONTEXT_LENGTH" > /tmp/Modelfile && '
            'ollama create "$KUBEJURY_OLLAMA_MODEL" -f /tmp/Modelfile || exit 1; fi; '
            'wait "$pid"'
        ],
        env=[
            {"name": "OLLAMA_HOST", "value": f"0.0.0.0:{SERVING_PORT}"},
            {"name": "OLLAMA_MODELS", "value": f"{cache}/ollama"},
            {"name": "OLLAMA_CONTEXT_LENGTH", "value": context},
            {"name": "KUBEJURY_OLLAMA_MODEL", "value": endpoint.served_model},
            {"name": "KUBEJURY_OLLAMA_SOURCE", "value": tag or endpoint.served_model},
        ],
        health="/",
    )


def _server_container(
    run: RunRef, endpoint: Endpoint, settings: WorkloadSettings
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The serving container and its pod volumes for the endpoint's runtime."""
    placement = endpoint.placement
    if placement is None:
        raise ValueError(f"endpoint {endpoint.name!r} (runtime {endpoint.runtime}) has no placement")
    gpus = max(1, placement.tensor_parallel_size) if _uses_gpu(placement, settings) else 0
    model_path, source_volumes, source_mounts = _source_volume(endpoint.source)
    cache = settings.model_cache_mount.rstrip("/") or "/models/cache"
    if endpoint.runtime == "vllm":
        serving = _vllm_serving(endpoint, placement, model_path, settings, cache)
    elif endpoint.runtime == "llamacpp":
        serving = _llamacpp_serving(endpoint, placement, model_path, settings, cache, gpus)
    elif endpoint.runtime == "ollama":
        serving = _ollama_serving(endpoint, settings, cache)
    else:
        raise ValueError(f"runtime {endpoint.runtime!r} has no in-cluster workload")
    volumes = [*source_volumes, _cache_volume(settings), {"name": "tmp", "emptyDir": {}}, *serving.volumes]
    mounts = [
        *source_mounts,
        {"name": "model-cache", "mountPath": cache},
        {"name": "tmp", "mountPath": SERVER_TMP_MOUNT},
        *serving.mounts,
    ]
    env = [*_server_home_env(cache), *_hf_token_env(settings), *_weights_s3_env(endpoint, settings)]
    container: dict[str, Any] = {
        "name": "server",
        "image": serving.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": serving.args,
        "ports": [{"name": "http", "containerPort": SERVING_PORT, "protocol": "TCP"}],
        "env": [*env, *serving.env],
        "volumeMounts": mounts,
        "resources": _resources(endpoint, placement, gpus, settings, serving.shm),
        "securityContext": restricted_container_security(),
        **_probes(serving.health, settings),
    }
    if serving.command is not None:
        container["command"] = serving.command
    if endpoint.source.startswith("s3://") and settings.storage_secret:
        container["env"] = storage_secret_env(settings.storage_secret, container["env"])
    if endpoint.runtime == "ollama":
        container["readinessProbe"] = {
            "exec": {"command": ["/bin/sh", "-c", 'ollama show "$KUBEJURY_OLLAMA_MODEL" >/dev/null']},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        }
    return container, volumes


def model_deployment(run: RunRef, endpoint: Endpoint, replicas: int, settings: WorkloadSettings) -> Manifest:
    """The serving Deployment of one in-cluster model or judge (``replicas`` 0 or 1)."""
    name = workload_name(run.name, endpoint.key)
    object_labels = labels(run.name, "server", endpoint=endpoint.key)
    selector = {LABEL_RUN: object_labels[LABEL_RUN], LABEL_ENDPOINT: object_labels[LABEL_ENDPOINT]}
    container, volumes = _server_container(run, endpoint, settings)
    placement = endpoint.placement
    assert placement is not None  # checked by _server_container
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": restricted_pod_security(SERVER_UID),
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": 30,
    }
    if placement.node_selector:
        pod_spec["nodeSelector"] = dict(placement.node_selector)
    if _uses_gpu(placement, settings):
        pod_spec["tolerations"] = _gpu_tolerations(settings, placement)
    elif allowed := _allowed_placement_tolerations(settings, placement):
        pod_spec["tolerations"] = [dict(t) for t in allowed]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(run, name, object_labels),
        "spec": {
            "replicas": replicas,
            # One model server holds whole GPUs: never run old and new side by side.
            "strategy": {"type": "Recreate"},
            # Pods that cannot start (no node, image pull, OOM) show up as ProgressDeadlineExceeded.
            "progressDeadlineSeconds": settings.startup_budget_seconds + 600,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": object_labels}, "spec": pod_spec},
        },
    }


def model_service(run: RunRef, endpoint: Endpoint) -> Manifest:
    name = workload_name(run.name, endpoint.key)
    object_labels = labels(run.name, "server", endpoint=endpoint.key)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(run, name, object_labels),
        "spec": {
            "type": "ClusterIP",
            # Only model-server Pods: the component label keeps any other Pod of the run out.
            "selector": {
                LABEL_RUN: object_labels[LABEL_RUN],
                LABEL_COMPONENT: object_labels[LABEL_COMPONENT],
                LABEL_ENDPOINT: object_labels[LABEL_ENDPOINT],
            },
            "ports": [{"name": "http", "port": SERVING_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def spec_configmap(run: RunRef, evalrun: Mapping[str, Any]) -> Manifest:
    """The run's spec as a file for the Jobs; only apiVersion, kind, name, namespace and spec."""
    document = {
        "apiVersion": EVALRUN_API_VERSION,
        "kind": EVALRUN_KIND,
        "metadata": {"name": run.name, "namespace": run.namespace},
        "spec": dict(evalrun.get("spec", {})),
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(run, spec_configmap_name(run.name), labels(run.name, "spec")),
        "data": {SPEC_FILE: yaml.safe_dump(document, sort_keys=False, allow_unicode=True)},
    }


def job_service_account(run: RunRef) -> Manifest:
    """The Jobs' ServiceAccount: bound to no Role, and its token is never mounted."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(run, job_service_account_name(run.name), labels(run.name, "job-identity")),
        "automountServiceAccountToken": False,
    }


@dataclass(frozen=True)
class JobStorage:
    """How Job pods reach the run's storage."""

    uri: str  # the run's own prefix (<root>/<namespace>/<name>-<uid prefix>)
    credentials_secret: str | None = None  # envFrom: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...
    root: str | None = None  # spec.storage.uri: where a file:// results claim is mounted


def _stage_container(
    run: RunRef,
    stage_args: list[str],
    settings: WorkloadSettings,
    storage: JobStorage,
    *,
    api_key: tuple[str, str, str] | None,
    shards: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The container running ``kubejury <stage_args>`` and its pod volumes (spec, /tmp, results)."""
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "KUBEJURY_RUN", "value": run.name},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *_storage_env(settings),
    ]
    if api_key is not None:
        env_name, secret, key = api_key
        env.append({"name": env_name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    volumes: list[dict[str, Any]] = [
        {"name": "spec", "configMap": {"name": spec_configmap_name(run.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "spec", "mountPath": SPEC_MOUNT_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    mount_uri = storage.root or storage.uri
    if mount_uri.startswith("file://") and settings.results_pvc:
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": settings.results_pvc}})
        mount_path = mount_uri.removeprefix("file://").rstrip("/") or "/"
        mounts.append({"name": "results", "mountPath": mount_path})
        # The stage follows no symbolic link below the mount: not even at the run's own folder.
        env.append({"name": STORAGE_MOUNT_ENV, "value": mount_path})
    args = list(stage_args)
    if shards > 1:
        env.append(
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                    }
                },
            }
        )
        args += ["--shards", str(shards), "--shard-index", "$(JOB_COMPLETION_INDEX)"]
    container: dict[str, Any] = {
        "name": "stage",
        "image": settings.job_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["kubejury"],
        "args": args,
        "env": env,
        "volumeMounts": mounts,
        "resources": {k: dict(v) for k, v in settings.job_resources.items()},
        "securityContext": restricted_container_security(),
    }
    # Only a Job that stores on S3 holds the storage credentials (a file:// run needs none).
    storage_secret = storage.credentials_secret or settings.storage_secret
    if storage_secret and storage.uri.startswith("s3://"):
        container["env"] = storage_secret_env(storage_secret, env)
    return container, volumes


def _job(
    run: RunRef,
    name: str,
    component: str,
    stage_args: list[str],
    settings: WorkloadSettings,
    storage: JobStorage,
    deadline: int,
    *,
    api_key: tuple[str, str, str] | None = None,
    shards: int = 1,
    extra_labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Manifest:
    object_labels = labels(run.name, component, **dict(extra_labels or {}))
    container, volumes = _stage_container(run, stage_args, settings, storage, api_key=api_key, shards=shards)
    spec: dict[str, Any] = {
        "backoffLimit": settings.job_backoff_limit,
        "activeDeadlineSeconds": deadline,
        "template": {
            "metadata": {"labels": object_labels},
            "spec": {
                "serviceAccountName": settings.job_service_account or job_service_account_name(run.name),
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "restartPolicy": "Never",
                "securityContext": restricted_pod_security(settings.job_uid),
                "containers": [container],
                "volumes": volumes,
            },
        },
    }
    if shards > 1:
        spec.update({"completionMode": "Indexed", "completions": shards, "parallelism": shards})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **_metadata(run, name, object_labels),
            **({"annotations": dict(annotations)} if annotations else {}),
        },
        "spec": spec,
    }


def _api_key(endpoint: Endpoint) -> tuple[str, str, str] | None:
    if not endpoint.api_key_secret:
        return None
    return (API_KEY_ENV, endpoint.api_key_secret, endpoint.api_key_key)


def generation_args(run: RunRef, model: Endpoint, series: str) -> list[str]:
    """``kubejury generate`` arguments (sharding flags are added by the Job builder)."""
    return [
        "generate",
        "--evalrun",
        SPEC_PATH,
        "--series",
        series,
        "--model",
        model.name,
        "--endpoint",
        endpoint_url(run, model),
    ]


def judge_args(run: RunRef, judge: Endpoint, series: str) -> list[str]:
    """``kubejury judge`` arguments: score every stored, not yet judged answer of ``series``."""
    return [
        "judge",
        "--evalrun",
        SPEC_PATH,
        "--series",
        series,
        "--judge",
        judge.name,
        "--endpoint",
        endpoint_url(run, judge),
    ]


def aggregation_args() -> list[str]:
    return ["aggregate", "--evalrun", SPEC_PATH]


def generation_job(
    run: RunRef,
    model: Endpoint,
    series: str,
    settings: WorkloadSettings,
    storage: JobStorage,
    shards: int = 1,
) -> Manifest:
    """One generation Job: ``model`` answers every question of ``series`` (Indexed when sharded)."""
    return _job(
        run,
        generation_job_name(run.name, model.name, series),
        "generate",
        generation_args(run, model, series),
        settings,
        storage,
        settings.generation_deadline_seconds,
        api_key=_api_key(model),
        shards=shards,
        extra_labels={"uses-server": model.key, "series": series},
    )


ANNOTATION_ROUND = "kubejury.io/round"
ANNOTATION_MODELS_COMPLETE = "kubejury.io/models-complete"


def judge_job(
    run: RunRef,
    judge: Endpoint,
    series: str,
    settings: WorkloadSettings,
    storage: JobStorage,
    round_: int = 1,
    models_complete: int = 0,
) -> Manifest:
    """One judging round: ``judge`` scores the anonymized answers of ``series`` stored so far.

    ``models_complete`` (an annotation) is how many models had finished generating the series
    when the round was created; the round created once all had is the last one.
    """
    return _job(
        run,
        judge_job_name(run.name, judge.name, series, round_),
        "judge",
        judge_args(run, judge, series),
        settings,
        storage,
        settings.judging_deadline_seconds,
        api_key=_api_key(judge),
        extra_labels={"uses-server": judge.key, "series": series},
        annotations={ANNOTATION_ROUND: str(round_), ANNOTATION_MODELS_COMPLETE: str(models_complete)},
    )


def aggregation_job(
    run: RunRef, settings: WorkloadSettings, storage: JobStorage, gpu_usage: GpuUsage | None = None
) -> Manifest:
    """The aggregation Job: report and summary from every series' judgments. ``gpu_usage`` (the
    run's GPU time when judging finished, from ``status.gpu``) reaches the report as the
    ``KUBEJURY_GPU_USAGE`` variable: GPU-hours per model, W per GPU-hour and the idle share."""
    manifest = _job(
        run,
        aggregation_job_name(run.name),
        "aggregate",
        aggregation_args(),
        settings,
        storage,
        settings.aggregation_deadline_seconds,
    )
    if gpu_usage is not None and gpu_usage.servers:
        container = manifest["spec"]["template"]["spec"]["containers"][0]
        usage = json.dumps(gpu_usage.to_json(), separators=(",", ":"), sort_keys=True)
        container["env"] = [*container.get("env", []), {"name": GPU_USAGE_ENV, "value": usage}]
    return manifest
