"""Pure builders of every Kubernetes object the operator creates for an EvalRun.

Why this module exists: the shape of a Deployment, Service or Job is the operator's most
reviewable output, so it is built here by plain functions from plain inputs — no API calls, no
clock, no randomness — and every object is validated against the Kubernetes OpenAPI schemas in
the unit tests. The reconcile planner decides *which* objects should exist; this module decides
*what they look like*; ``gateway.py`` sends them. What the objects are called and the records the
planner reads are in :mod:`kubejury_operator.vocabulary`; the cluster-wide settings are in
:mod:`kubejury_operator.settings`.

Objects per run (all carry an owner reference to the EvalRun, so deleting the run deletes them):

* ``kj-<run>-spec`` ConfigMap: the EvalRun (apiVersion/kind/metadata.name/spec) as YAML, mounted
  read-only into every Job at ``/etc/kubejury/evalrun.yaml``. A ConfigMap, not an env variable:
  specs carry prompt templates and system prompts that can exceed what env comfortably holds, a
  file is what ``kubejury`` reads locally too, and one object per run keeps the Jobs identical
  across restarts.
* ``kj-<run>-job`` ServiceAccount for the Jobs' pods: no RBAC binding and
  ``automountServiceAccountToken: false`` — Job pods have no Kubernetes API access at all; they
  report progress through storage.
* per in-cluster model or judge: a Deployment + Service, its serving container built by the
  runtime's builder (:data:`SERVING_BUILDERS`: vLLM, llama.cpp or Ollama). External (``openai``)
  endpoints get no workload.
* per server whose weights are downloaded ahead (:mod:`kubejury_operator.prefetching`): a CPU-only
  Job running ``kubejury prefetch`` into the model cache claim (:func:`prefetch_job`), before the
  Deployment exists.
* Jobs running ``kubejury generate|judge|aggregate`` (see :func:`generation_job`,
  :func:`judge_job`, :func:`aggregation_job` for the exact command lines), and, for a run whose
  spec names earlier runs to reuse, first of all ``kubejury reuse`` (:func:`reuse_job`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
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
from kubejury.files.weight_cache import gguf_selection, server_model_path
from kubejury.records.gpu_usage import GPU_USAGE_ENV, GpuUsage
from kubejury.records.placement import Placement
from kubejury.runtimes import LLAMACPP, OLLAMA, VLLM, runtime_of
from kubejury_operator.prefetching import COMPONENT as PREFETCH_COMPONENT
from kubejury_operator.prefetching import prefetch_job_name, prefetches
from kubejury_operator.settings import ModelCacheSettings, ServerSettings, StorageSettings, WorkloadSettings
from kubejury_operator.vocabulary import (
    ANNOTATION_MODELS_COMPLETE,
    ANNOTATION_ROUND,
    EVALRUN_API_VERSION,
    EVALRUN_KIND,
    LABEL_COMPONENT,
    LABEL_ENDPOINT,
    LABEL_PRIORITY_CLASS,
    LABEL_QUEUE_NAME,
    LABEL_RUN,
    SERVING_PORT,
    Endpoint,
    JobStorage,
    Manifest,
    RunRef,
    aggregation_job_name,
    endpoint_url,
    generation_job_name,
    job_service_account_name,
    judge_job_name,
    labels,
    look_generation_job_name,
    look_job_name,
    reuse_job_name,
    spec_configmap_name,
    workload_name,
)

SPEC_MOUNT_DIR = "/etc/kubejury"
SPEC_FILE = "evalrun.yaml"
SPEC_PATH = f"{SPEC_MOUNT_DIR}/{SPEC_FILE}"
SERVER_UID = 1000  # model servers run as this uid (and gid, fsGroup); the images have no passwd entry for it
SERVER_USER = "kubejury"  # USER/LOGNAME: torch's getpass.getuser() raises for a uid without a passwd entry
API_KEY_ENV = "KUBEJURY_API_KEY"

# Quantizations that need no ``--quantization`` flag in vLLM: either unquantized, or vLLM reads
# the format from the checkpoint's own config (pre-quantized FP8/NVFP4/MXFP4/AWQ/GPTQ).
_NO_FLAG = frozenset({"", "auto", "none", "bf16", "fp16", "float16", "bfloat16"})


# --------------------------------------------------------------------------------------- helpers


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


def _allowed_placement_tolerations(settings: ServerSettings, placement: Placement) -> list[Mapping[str, Any]]:
    """The placement's tolerations of the GPU taint, and those the chart lists: nothing else, even
    from a placement recorded in status before the planner stopped tolerating every taint."""
    return [
        tol
        for tol in placement.tolerations
        if tol.get("key") == settings.gpu_resource
        or dict(tol) in [dict(t) for t in settings.extra_tolerations]
    ]


def _gpu_tolerations(settings: ServerSettings, placement: Placement | None) -> list[dict[str, Any]]:
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


def _uses_gpu(placement: Placement | None, settings: ServerSettings) -> bool:
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


def _cache_volume(settings: ModelCacheSettings) -> dict[str, Any]:
    if settings.model_cache_pvc:
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": settings.model_cache_pvc}}
    return {"name": "model-cache", "emptyDir": {"sizeLimit": settings.model_cache_size_limit}}


def _hf_token_env(settings: ServerSettings) -> list[dict[str, Any]]:
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


def _hub_env(settings: ServerSettings) -> list[dict[str, Any]]:
    """The chart's hub mirror (``inference.hubEndpoint``), read as ``HF_ENDPOINT`` by the hub
    client of vLLM, by llama.cpp's ``--hf-repo`` downloader (after ``MODEL_ENDPOINT``, which nothing
    here sets) and by ``kubejury prefetch``; none when unset (huggingface.co)."""
    return [{"name": "HF_ENDPOINT", "value": settings.hub_endpoint}] if settings.hub_endpoint else []


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
    if not endpoint.source.startswith("s3://") or prefetches(endpoint, settings):
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


def _storage_env(settings: StorageSettings) -> list[dict[str, Any]]:
    """The chart's S3 settings for a Job: the same store the operator reads progress from."""
    env: list[dict[str, Any]] = []
    if settings.s3_endpoint:
        env.append({"name": "KUBEJURY_S3_ENDPOINT", "value": settings.s3_endpoint})
    if settings.s3_region:
        env.append({"name": "AWS_REGION", "value": settings.s3_region})
    return env


def _probes(path: str, settings: ServerSettings) -> dict[str, Any]:
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
    if endpoint.source.startswith("s3://") and not prefetches(endpoint, settings):
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
    endpoint: Endpoint, placement: Placement, gpus: int, settings: ServerSettings, shm: str | None
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
    readiness: Mapping[str, Any] | None = None  # replaces the HTTP readiness probe on ``health``


def _vllm_serving(
    endpoint: Endpoint,
    placement: Placement,
    model_path: str,
    settings: WorkloadSettings,
    cache: str,
    gpus: int,
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


#: llama-server's slots (requests decoded together) at most: its own default. More requests in
#: flight wait in its queue; each slot costs a maxModelLen of KV cache.
LLAMACPP_MAX_SLOTS = 4

#: llama-cpp-python chat formats (``chatFormat``, what local mode uses) whose built-in llama-server
#: template has another name; the others (gemma, chatml, zephyr, vicuna, …) are named alike.
_LLAMA_SERVER_TEMPLATES = {"llama-2": "llama2", "llama-3": "llama3", "mistral-instruct": "mistral-v1"}


def llama_server_template(chat_format: str) -> str:
    """The llama-server ``--chat-template`` for a model's ``chatFormat``: a GGUF without a template
    (Gemma-3 270M) otherwise gets ChatML in the cluster while local mode used the right format."""
    return _LLAMA_SERVER_TEMPLATES.get(chat_format, chat_format)


def _llamacpp_serving(
    endpoint: Endpoint,
    placement: Placement,
    model_path: str,
    settings: WorkloadSettings,
    cache: str,
    gpus: int,
) -> _Serving:
    if endpoint.source.startswith("hf://") and not prefetches(endpoint, settings):
        repo = _hf_model_id(endpoint.source)
        quant = (placement.quantization or "").upper()
        model_args = ["--hf-repo", f"{repo}:{quant}" if quant and ":" not in repo else repo]
    else:
        model_args = ["--model", model_path]
    slots = min(endpoint.requests_in_flight, LLAMACPP_MAX_SLOTS)
    args = [
        *model_args,
        "--alias",
        endpoint.served_model,
        "--host",
        "0.0.0.0",
        "--port",
        str(SERVING_PORT),
        # One KV cache of --ctx-size tokens serves every slot: each slot gets a whole maxModelLen.
        "--parallel",
        str(slots),
        "--ctx-size",
        str((endpoint.max_model_len or settings.default_max_model_len) * slots),
        "--jinja",
    ]
    if endpoint.chat_format:
        args += ["--chat-template", llama_server_template(endpoint.chat_format)]
    if gpus:
        args += ["--n-gpu-layers", "999"]
    return _Serving(
        # The CUDA build on GPU placements: the CPU build would hold the GPU and compute on the CPU.
        image=settings.llamacpp_cuda_image if gpus else settings.llamacpp_image,
        command=None,  # the image's entrypoint is llama-server
        args=args + list(endpoint.extra_args),
        env=[{"name": "LLAMA_CACHE", "value": f"{cache}/llama.cpp"}],
    )


def _ollama_serving(
    endpoint: Endpoint,
    placement: Placement,
    model_path: str,
    settings: WorkloadSettings,
    cache: str,
    gpus: int,
) -> _Serving:
    # Ollama serves first, then pulls the tag (``ollama://<tag>``). Its default context (2k–4k
    # tokens) would silently cut prompts and answers, so the context is passed twice: as
    # OLLAMA_CONTEXT_LENGTH (the server's default for every model) and, when requests name the
    # model differently (servedModel), as ``PARAMETER num_ctx`` of the model created under that
    # name (a model's own parameter wins over the server default). The readiness probe (below)
    # passes once the model is there.
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
        # Ready once the model is there, so the Service only routes to a pod that can answer.
        readiness={
            "exec": {"command": ["/bin/sh", "-c", 'ollama show "$KUBEJURY_OLLAMA_MODEL" >/dev/null']},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    )


ServingBuilder = Callable[[Endpoint, Placement, str, WorkloadSettings, str, int], _Serving]
"""``(endpoint, placement, model path, settings, cache dir, GPUs) -> serving container parts``."""

#: The serving builder of each in-cluster runtime (:mod:`kubejury.runtimes`), by runtime name.
SERVING_BUILDERS: Mapping[str, ServingBuilder] = {
    VLLM.name: _vllm_serving,
    LLAMACPP.name: _llamacpp_serving,
    OLLAMA.name: _ollama_serving,
}


def _serving_builder(endpoint: Endpoint) -> ServingBuilder:
    """The builder for the endpoint's runtime; a ``ValueError`` for a runtime without a workload."""
    builder = SERVING_BUILDERS.get(endpoint.runtime)
    if builder is None or not runtime_of(endpoint.runtime).in_cluster:
        raise ValueError(f"runtime {endpoint.runtime!r} has no in-cluster workload")
    return builder


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
    if prefetches(endpoint, settings):  # the weights a prefetch Job put in the cache
        model_path = server_model_path(cache, endpoint.source, endpoint.runtime, placement.quantization)
    serving = _serving_builder(endpoint)(endpoint, placement, model_path, settings, cache, gpus)
    volumes = [*source_volumes, _cache_volume(settings), {"name": "tmp", "emptyDir": {}}, *serving.volumes]
    mounts = [
        *source_mounts,
        {"name": "model-cache", "mountPath": cache},
        {"name": "tmp", "mountPath": SERVER_TMP_MOUNT},
        *serving.mounts,
    ]
    env = [
        *_server_home_env(cache),
        *_hf_token_env(settings),
        *_hub_env(settings),
        *_weights_s3_env(endpoint, settings),
    ]
    if prefetches(endpoint, settings):  # everything it loads is in the cache: it must not download
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
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
    if endpoint.source.startswith("s3://") and settings.storage_secret and not prefetches(endpoint, settings):
        container["env"] = storage_secret_env(settings.storage_secret, container["env"])
    if serving.readiness is not None:
        container["readinessProbe"] = dict(serving.readiness)
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


def queued(manifest: Manifest, queue_name: str | None, priority_class: str | None = None) -> Manifest:
    """``manifest`` (a Job or a model server's Deployment) admitted through Kueue's LocalQueue
    ``queue_name``: the label ``kueue.x-k8s.io/queue-name`` on the object itself, and
    ``kueue.x-k8s.io/priority-class`` when the run names a WorkloadPriorityClass. Kueue's webhooks
    do the rest — a Job is suspended until admitted, a Deployment's Pods get the labels and the
    admission scheduling gate — so nothing else changes. ``None``: the manifest as it is."""
    if queue_name is None:
        return manifest
    added = {
        LABEL_QUEUE_NAME: queue_name,
        **({LABEL_PRIORITY_CLASS: priority_class} if priority_class else {}),
    }
    labelled = copy.deepcopy(manifest)
    labelled["metadata"]["labels"] = {**labelled["metadata"].get("labels", {}), **added}
    return labelled


def _api_key(endpoint: Endpoint) -> tuple[str, str, str] | None:
    if not endpoint.api_key_secret:
        return None
    return (API_KEY_ENV, endpoint.api_key_secret, endpoint.api_key_key)


def _look_args(look: int | None) -> list[str]:
    """``--look K`` for a budgeted run's Job of look K (spec.budget); nothing otherwise."""
    return [] if look is None else ["--look", str(look)]


def generation_args(run: RunRef, model: Endpoint, series: str, look: int | None = None) -> list[str]:
    """``kubejury generate`` arguments (sharding flags are added by the Job builder); with ``look``,
    only look K's prefix is asked (spec.budget)."""
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
        *_look_args(look),
    ]


def judge_args(run: RunRef, judge: Endpoint, series: str, look: int | None = None) -> list[str]:
    """``kubejury judge`` arguments: score every stored, not yet judged answer of ``series`` (with
    ``look``: of look K's prefix)."""
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
        *_look_args(look),
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
    look: int | None = None,
) -> Manifest:
    """One generation Job: ``model`` answers every question of ``series`` (Indexed when sharded);
    with ``look``, a budgeted run's Job of that look, named for it, asking only its prefix."""
    name = (
        generation_job_name(run.name, model.name, series)
        if look is None
        else look_generation_job_name(run.name, model.name, series, look)
    )
    return _job(
        run,
        name,
        "generate",
        generation_args(run, model, series, look),
        settings,
        storage,
        settings.generation_deadline_seconds,
        api_key=_api_key(model),
        shards=shards,
        extra_labels={"uses-server": model.key, "series": series},
    )


def judge_job(
    run: RunRef,
    judge: Endpoint,
    series: str,
    settings: WorkloadSettings,
    storage: JobStorage,
    round_: int = 1,
    models_complete: int = 0,
    look: int | None = None,
) -> Manifest:
    """One judging round: ``judge`` scores the anonymized answers of ``series`` stored so far.

    ``models_complete`` (an annotation) is how many models had finished generating the series
    when the round was created; the round created once all had is the last one. A budgeted run's
    judging Job of look K is round K with ``look=K``: it judges look K's prefix.
    """
    return _job(
        run,
        judge_job_name(run.name, judge.name, series, round_),
        "judge",
        judge_args(run, judge, series, look),
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


def look_job(run: RunRef, look: int, settings: WorkloadSettings, storage: JobStorage) -> Manifest:
    """The CPU-only Job that decides look ``look`` of a budgeted run: ``kubejury look --look K``
    reads the stored judgments and writes ``<run>/sequential.json`` (which models continue)."""
    return _job(
        run,
        look_job_name(run.name, look),
        "look",
        ["look", "--evalrun", SPEC_PATH, *_look_args(look)],
        settings,
        storage,
        settings.aggregation_deadline_seconds,
    )


def reuse_args(sources: Sequence[tuple[str, str]]) -> list[str]:
    """``kubejury reuse`` arguments: one ``--source <run>=<its own storage URI>`` per source run, in
    the order the spec prefers them."""
    args = ["reuse", "--evalrun", SPEC_PATH]
    for name, uri in sources:
        args += ["--source", f"{name}={uri}"]
    return args


def reuse_job(
    run: RunRef, sources: Sequence[tuple[str, str]], settings: WorkloadSettings, storage: JobStorage
) -> Manifest:
    """The reuse Job: copies the answers and judgments of ``sources`` (run name, that run's own
    storage URI, as the operator computed it from the run's uid) into this run's prefix and writes
    ``<run>/reuse.json``. CPU only, like the aggregation, and bounded by the same deadline."""
    return _job(
        run,
        reuse_job_name(run.name),
        "reuse",
        reuse_args(sources),
        settings,
        storage,
        settings.aggregation_deadline_seconds,
    )


def prefetch_args(endpoint: Endpoint, cache: str) -> list[str]:
    """``kubejury prefetch`` arguments: the model's own source, its runtime and quantization (which
    GGUF file), and where the cache is mounted; the folder below it is derived from the source."""
    placement = endpoint.placement
    selection = gguf_selection(
        endpoint.source, endpoint.runtime, placement.quantization if placement else None
    )
    args = ["prefetch", "--source", endpoint.source, "--runtime", endpoint.runtime, "--cache", cache]
    return args + (["--quantization", selection] if selection else [])


def _prefetch_env(endpoint: Endpoint, settings: WorkloadSettings) -> list[dict[str, Any]]:
    """What the download reads with: the hub token and the chart's hub mirror for ``hf://``; the
    chart's S3 endpoint and region and the run's storage keys for ``s3://`` (the same credentials an
    ``s3://`` server would get)."""
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *_storage_env(settings),
    ]
    if endpoint.source.startswith("hf://"):
        return env + _hf_token_env(settings) + _hub_env(settings)
    return storage_secret_env(settings.storage_secret, env) if settings.storage_secret else env


def prefetch_job(run: RunRef, endpoint: Endpoint, settings: WorkloadSettings) -> Manifest:
    """The CPU-only Job that downloads ``endpoint``'s weights into the model cache claim before its
    server is created (:mod:`kubejury_operator.prefetching`). Least privilege: no GPU, no API token,
    no results volume or results credentials beyond what reading an ``s3://`` source needs; the
    cache claim and /tmp are its only writable mounts. It runs as the servers' uid and fsGroup, so
    the files it writes are the servers' without a recursive ownership change."""
    cache = settings.model_cache_mount.rstrip("/") or "/models/cache"
    object_labels = labels(run.name, PREFETCH_COMPONENT, **{"prefetch-for": endpoint.key})
    container: dict[str, Any] = {
        "name": "prefetch",
        "image": settings.job_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["kubejury"],
        "args": prefetch_args(endpoint, cache),
        "env": _prefetch_env(endpoint, settings),
        "volumeMounts": [
            {"name": "model-cache", "mountPath": cache},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "resources": {k: dict(v) for k, v in settings.job_resources.items()},
        "securityContext": restricted_container_security(),
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": settings.job_service_account or job_service_account_name(run.name),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "securityContext": restricted_pod_security(SERVER_UID),
        "containers": [container],
        "volumes": [_cache_volume(settings), {"name": "tmp", "emptyDir": {}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(run, prefetch_job_name(run.name, endpoint.key), object_labels),
        "spec": {
            "backoffLimit": settings.job_backoff_limit,
            "activeDeadlineSeconds": settings.generation_deadline_seconds,
            "template": {"metadata": {"labels": object_labels}, "spec": pod_spec},
        },
    }


def memory_raised_job(
    job: Manifest,
    name: str,
    memory_limit: str,
    memory_request: str | None,
    annotations: Mapping[str, str],
) -> Manifest:
    """``job`` (a generation, judging or aggregation Job as built above) under another ``name``,
    its container's memory limit set to ``memory_limit`` (and request to ``memory_request`` when
    given; else never above the limit), with ``annotations`` added: the Job that replaces an OOM-killed one
    (:mod:`kubejury_operator.oom_retry`). Everything else — command, volumes, labels — is the same."""
    raised: Manifest = json.loads(json.dumps(job))
    raised["metadata"]["name"] = name
    raised["metadata"]["annotations"] = {**raised["metadata"].get("annotations", {}), **annotations}
    for container in raised["spec"]["template"]["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        resources.setdefault("limits", {})["memory"] = memory_limit
        requests = resources.setdefault("requests", {})
        if memory_request is not None:
            requests["memory"] = memory_request
        elif memory_quantity_bytes(str(requests.get("memory", 0))) > memory_quantity_bytes(memory_limit):
            requests["memory"] = memory_limit  # a request is never above the limit
    return raised
