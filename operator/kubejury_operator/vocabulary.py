"""The planner's vocabulary: what names a run's objects, and the plain records the planner reads.

Why this module exists: the reconcile planner, the status writer, observation and the manifest
builders all speak of the same things — a run (:class:`RunRef`), a model or judge as the cluster
serves it (:class:`Endpoint`), where the Jobs store (:class:`JobStorage`), the name of every child
object and the labels that select it. They were defined in ``manifests.py`` beside the builders, so
every part that only needed a name imported the whole of Kubernetes object building. Here they are
data and pure functions only: no settings, no builders.

A name joined from several user-chosen parts (run, model, judge, series) ends in a short hash of
the parts taken as a tuple (:func:`joined_label`): ``kj-<run>-m-<model>-<hash>``,
``kj-<run>-gen-<model>-<series>-<hash>``, ``kj-<run>-judge-<judge>-<series>-<hash>-<round>``. A Job
that replaces an OOM-killed one is that Job's name and ``-oom<attempt>`` (:func:`oom_retry_job_name`).
Joined without it, models ``m``/``m-a`` with series ``a-b``/``b`` shared one Job, and run ``foo``
with model ``x-m-y`` shared its Deployment with run ``foo-m-x``'s model ``y``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubejury.config.spec import API_GROUP as API_GROUP
from kubejury.config.spec import API_VERSION as API_VERSION
from kubejury.config.spec import API_VERSION_FULL, KIND
from kubejury.records.placement import Placement
from kubejury.runtimes import runtime_of

Manifest = dict[str, Any]

EVALRUN_API_VERSION = API_VERSION_FULL  # the group and version are defined once, in the engine's spec
EVALRUN_KIND = KIND

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_RUN = "kubejury.io/run"
LABEL_COMPONENT = "kubejury.io/component"
LABEL_ENDPOINT = "kubejury.io/endpoint"  # model-server Pods only: the Service selects on it
LABEL_USES_SERVER = "kubejury.io/uses-server"  # Job Pods: the server (endpoint key) they send requests to
LABEL_SERIES = "kubejury.io/series"
MANAGED_BY = "kubejury-operator"

ANNOTATION_ROUND = "kubejury.io/round"
ANNOTATION_MODELS_COMPLETE = "kubejury.io/models-complete"
# A Job that replaces an OOM-killed one says so (kubejury_operator.oom_retry): the Job it stands in
# for (its first name), which attempt it is, the Job it replaces, that Job's killed container and
# memory limit, and its own memory limit. The planner reads them back from the watch-fed cache.
ANNOTATION_OOM_RETRY_OF = "kubejury.io/oom-retry-of"
ANNOTATION_OOM_ATTEMPT = "kubejury.io/oom-attempt"
ANNOTATION_OOM_REPLACES = "kubejury.io/oom-replaces"
ANNOTATION_OOM_KILLED_CONTAINER = "kubejury.io/oom-killed-container"
ANNOTATION_OOM_KILLED_AT = "kubejury.io/oom-killed-at"
ANNOTATION_MEMORY_LIMIT = "kubejury.io/memory-limit"
# The label the Job controller puts on each Pod of a Job (Kubernetes ≥ 1.27): how a failed Job's
# Pods are listed.
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"

# Kueue (docs/operator.md, "Kueue"): the LocalQueue a Job or Deployment is admitted through; the
# LocalQueue a run without spec.queueName uses when the chart's kueue.enabled is set (the one Kueue's
# LocalQueueDefaulting would apply itself); what Kueue's webhook marks the Pods it manages with.
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
DEFAULT_LOCAL_QUEUE = "default"
LABEL_KUEUE_MANAGED = "kueue.x-k8s.io/managed"
# Kueue's WorkloadPriorityClass of a Job or Deployment: copied from the EvalRun's own labels.
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"

SERVING_PORT = 8000  # every model server listens here; its Service forwards the same port


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
    chat_format: str | None = None  # llama.cpp: the template of a GGUF that carries none
    requests_in_flight: int = 1  # spec.concurrency.requestsPerEndpoint: what one client sends at once

    @property
    def in_cluster(self) -> bool:
        """The operator brings up a server for it (everything but an external endpoint)."""
        return runtime_of(self.runtime).in_cluster


@dataclass(frozen=True)
class JobStorage:
    """How Job pods reach the run's storage."""

    uri: str  # the run's own prefix (<root>/<namespace>/<name>-<uid prefix>)
    credentials_secret: str | None = None  # envFrom: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...
    root: str | None = None  # spec.storage.uri: where a file:// results claim is mounted


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


def look_generation_job_name(run: str, model: str, series: str, look: int) -> str:
    """``kj-<run>-gen-<model>-<series>-<hash>-l<look>``: a budgeted run's generation Job of one
    look (spec.budget), as :func:`judge_job_name` carries its round; within :data:`JOB_NAME_LIMIT`."""
    suffix = f"-l{look}"
    return joined_label("kj", run, "gen", model, series, limit=JOB_NAME_LIMIT - len(suffix)) + suffix


def look_job_name(run: str, look: int) -> str:
    """``kj-<run>-look-l<look>``: the CPU-only Job that decides look ``look`` of a budgeted run."""
    return dns_label("kj", run, "look", f"l{look}", limit=JOB_NAME_LIMIT)


def reuse_job_name(run: str) -> str:
    """``kj-<run>-reuse``: the Job that copies records of earlier runs before anything else runs."""
    return dns_label("kj", run, "reuse", limit=JOB_NAME_LIMIT)


def oom_retry_job_name(job: str, attempt: int) -> str:
    """The Job that replaces OOM-killed ``job`` (the Job's first name) at ``attempt`` (1, 2, …):
    ``<job>-oom<attempt>``, within :data:`JOB_NAME_LIMIT`. A name too long for the suffix is cut and
    ends in :func:`name_digest` of the whole name, so two long Jobs sharing a prefix stay apart."""
    suffix = f"-oom{attempt}"
    if len(job) + len(suffix) <= JOB_NAME_LIMIT:
        return job + suffix
    return _with_digest(job, name_digest([job]), JOB_NAME_LIMIT - len(suffix)) + suffix


def service_url(run: RunRef, key: str) -> str:
    """The OpenAI-compatible base URL of an in-cluster endpoint."""
    return f"http://{workload_name(run.name, key)}.{run.namespace}.svc:{SERVING_PORT}/v1"


def endpoint_url(run: RunRef, endpoint: Endpoint) -> str:
    """Where the Jobs send requests: the Service for in-cluster runtimes, ``source`` for openai."""
    return service_url(run, endpoint.key) if endpoint.in_cluster else endpoint.source


def labels(run: str, component: str, **extra: str) -> dict[str, str]:
    """The labels of every object of ``run``: who manages it, which run, which part (``extra``:
    more ``kubejury.io/<key>`` labels, such as the endpoint or series)."""
    result = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PART_OF: "kubejury",
        LABEL_RUN: label_value(run),
        LABEL_COMPONENT: component,
    }
    for key, value in extra.items():
        result[f"kubejury.io/{key}"] = label_value(value)
    return result


def namespace_of(body: Mapping[str, Any]) -> str:
    """The namespace of an object as the API server sends it (``default`` when it names none)."""
    meta = body.get("metadata")
    return str((meta.get("namespace") if isinstance(meta, Mapping) else None) or "default")
