"""What the operator sees of one EvalRun's world, in the shape the planner reads.

Why this module exists: the planner (:mod:`kubejury_operator.reconcile`) decides from observation
only, so everything observed — the run's Deployments, Jobs and server Pods as the watch returns
them, and the stages' progress records from storage — is first reduced here to small frozen
values. Reading a Kubernetes object's conditions or a storage key's file name happens in this
module and nowhere else; it is pure (the handlers fetch, this module reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubejury.records.progress import (
    ProgressRecord,
    ProgressRecordError,
    merge_shards,
    parse_progress_file_name,
)
from kubejury_operator import vocabulary as vocab

ProgressKey = tuple[str, str, str]  # (stage "generate"|"judge", series, model or judge name)
PLANNED_STAGES = frozenset({"generate", "judge"})  # the stages whose progress the planner reads


@dataclass(frozen=True)
class DeploymentState:
    """What the operator sees of one of its Deployments."""

    replicas: int  # spec.replicas
    ready_replicas: int = 0
    stalled: bool = False  # Progressing=False, reason ProgressDeadlineExceeded
    message: str = ""

    @property
    def ready(self) -> bool:
        return self.replicas > 0 and self.ready_replicas > 0


@dataclass(frozen=True)
class JobState:
    """What the operator sees of one of its Jobs."""

    succeeded: bool = False
    failed: bool = False  # terminal: condition Failed=True
    message: str = ""
    models_complete: int = 0  # judge rounds: models whose generation was complete at creation
    server: str | None = None  # endpoint key of the server its Pods send requests to
    started_at: str | None = None  # status.startTime
    finished_at: str | None = None  # completionTime, or when it failed for good

    @property
    def finished(self) -> bool:
        return self.succeeded or self.failed


@dataclass(frozen=True)
class Observed:
    """Everything observed this round: children by name, progress by (stage, series, name)."""

    deployments: Mapping[str, DeploymentState] = field(default_factory=dict)
    jobs: Mapping[str, JobState] = field(default_factory=dict)
    present: frozenset[tuple[str, str]] = frozenset()  # (kind, name) of other children
    progress: Mapping[ProgressKey, ProgressRecord] = field(default_factory=dict)
    summary: Mapping[str, Any] | None = None  # from report.json (see status.summary_from_report)
    missing_secrets: tuple[str, ...] = ()
    # Server Pods the scheduler cannot place right now: endpoint key -> scheduler message.
    unschedulable_pods: Mapping[str, str] = field(default_factory=dict)
    # Server Pods Ready now: endpoint key -> when the earliest of them became Ready (GPU accounting).
    servers_ready_since: Mapping[str, str] = field(default_factory=dict)
    # ... and how long that Pod took from creation to Ready (the bring-up lead time on these nodes).
    servers_bringup_seconds: Mapping[str, float] = field(default_factory=dict)


def deployment_state(obj: Mapping[str, Any]) -> DeploymentState:
    """A Deployment as the planner sees it (``stalled``: ProgressDeadlineExceeded)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    stalled = False
    message = ""
    for c in status.get("conditions") or []:
        if (
            c.get("type") == "Progressing"
            and c.get("status") == "False"
            and c.get("reason") == "ProgressDeadlineExceeded"
        ):
            stalled = True
            message = str(c.get("message") or "")
    replicas = spec.get("replicas")
    return DeploymentState(
        replicas=1 if replicas is None else int(replicas),
        ready_replicas=int(status.get("readyReplicas") or 0),
        stalled=stalled,
        message=message,
    )


def job_state(obj: Mapping[str, Any]) -> JobState:
    """A Job as the planner sees it: succeeded (Complete) or failed for good (Failed)."""
    status = obj.get("status") or {}
    succeeded = failed = False
    message = ""
    failed_at: str | None = None
    for c in status.get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") in ("Complete", "SuccessCriteriaMet"):
            succeeded = True
        elif c.get("type") in ("Failed", "FailureTarget"):
            failed = True
            message = str(c.get("message") or c.get("reason") or "")
            failed_at = failed_at or c.get("lastTransitionTime")
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        models_complete = int(annotations.get(vocab.ANNOTATION_MODELS_COMPLETE, 0))
    except (TypeError, ValueError):
        models_complete = 0
    server = (meta.get("labels") or {}).get(vocab.LABEL_USES_SERVER)
    return JobState(
        succeeded=succeeded and not failed,
        failed=failed,
        message=message,
        models_complete=models_complete,
        server=str(server) if server else None,
        started_at=status.get("startTime"),
        finished_at=(status.get("completionTime") or failed_at) if (succeeded or failed) else None,
    )


def pod_scheduling_problems(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Endpoint key → scheduler message, for model server Pods that are Pending and unschedulable.
    Only Pods of component ``server`` count: a Job Pod waiting for a node is not a server waiting."""
    problems: dict[str, str] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        key = labels.get(vocab.LABEL_ENDPOINT) if labels.get(vocab.LABEL_COMPONENT) == "server" else None
        status = pod.get("status") or {}
        if not key or status.get("phase") != "Pending":
            continue
        for c in status.get("conditions") or []:
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"
            ):
                problems[str(key)] = str(c.get("message") or "no node fits")[:300]
    return problems


def _ready_server_pods(pods: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Any, Any]]:
    """(endpoint key, creationTimestamp, Ready lastTransitionTime) of each model-server Pod that is
    Ready now and not being deleted."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        key = labels.get(vocab.LABEL_ENDPOINT) if labels.get(vocab.LABEL_COMPONENT) == "server" else None
        if not key or meta.get("deletionTimestamp"):
            continue
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                yield str(key), meta.get("creationTimestamp"), c.get("lastTransitionTime")


def servers_ready_since(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Endpoint key → when its server became Ready: the earliest ``Ready`` transition among its
    model-server Pods that are Ready now and not being deleted (GPU accounting's held time)."""
    since: dict[str, str] = {}
    for key, _created, ready_at in _ready_server_pods(pods):
        if ready_at:
            since[key] = min(since.get(key, str(ready_at)), str(ready_at))
    return since


def servers_bringup_seconds(pods: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Endpoint key → seconds its Ready model-server Pod took from creation to Ready (the longest
    when several are Ready): how long a server takes to come up on these nodes, image pull and
    weight loading included."""
    from kubejury.records.timestamps import seconds_between

    found: dict[str, float] = {}
    for key, created, ready_at in _ready_server_pods(pods):
        found[key] = max(found.get(key, 0.0), seconds_between(created, ready_at))
    return found


def progress_key(series: str, key: str) -> ProgressKey | None:
    """``(stage, series, name)`` of a progress record's storage key in ``series``' progress folder
    (a shard's record gives its stage's key); ``None`` for anything the planner does not read."""
    parsed = parse_progress_file_name(key)
    if parsed is None or parsed.stage not in PLANNED_STAGES:
        return None
    return (parsed.stage, series, parsed.name)


def collect_progress(
    entries: Iterable[tuple[str, str, Mapping[str, Any]]],
) -> dict[ProgressKey, ProgressRecord]:
    """Progress by (stage, series, name) from ``(series, storage key, record)`` triples.

    The completions of a sharded generation Job each write their own record; they are merged
    into one (:func:`kubejury.records.progress.merge_shards`): counts add up, and it is complete
    only when every shard has reported complete (one finished shard must not mark the model's
    generation done).
    """
    progress: dict[ProgressKey, ProgressRecord] = {}
    shards: dict[ProgressKey, dict[int, ProgressRecord]] = {}
    expected: dict[ProgressKey, int] = {}
    for series, key, data in entries:
        parsed = parse_progress_file_name(key)
        if parsed is None or parsed.stage not in PLANNED_STAGES:
            continue
        pk = (parsed.stage, series, parsed.name)
        try:
            record = ProgressRecord.from_json(data)
        except ProgressRecordError as exc:
            raise ProgressRecordError(f"{key}: {exc}") from exc
        if parsed.shard is None:
            progress[pk] = record
            continue
        index, count = parsed.shard
        shards.setdefault(pk, {})[index] = record
        expected[pk] = max(expected.get(pk, 0), count)
    for pk, parts in shards.items():
        progress[pk] = merge_shards(list(parts.values()), expected[pk])
    return progress
