"""What the operator sees of one EvalRun's world, in the shape the planner reads.

Why this module exists: the planner (:mod:`kubejury_operator.reconcile`) decides from observation
only, so everything observed — the run's Deployments, Jobs and server Pods as the watch returns
them, a failed Job's Pods' termination reasons (an OOM kill), the stages' progress records from
storage, the earlier runs a run reuses (:func:`reuse_sources`) and what its reuse step copied — is
first reduced here to small frozen values. Reading a Kubernetes object's conditions or a storage key's file name happens in this
module and nowhere else; it is pure (the handlers fetch, this module reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kubejury.config.spec import StorageSpec
from kubejury.records.progress import (
    ProgressRecord,
    ProgressRecordError,
    merge_shards,
    parse_progress_file_name,
)
from kubejury.records.reuse import ReuseDocument
from kubejury.records.sequential import SequentialDocument
from kubejury_operator import vocabulary as vocab
from kubejury_operator.queue_observed import QueueState
from kubejury_operator.tenancy import run_storage_uri

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
class OomKill:
    """A container of a failed Job's Pod that was killed for exceeding its memory (``OOMKilled``),
    with what its Pod spec asked for: ``memory_limit`` is ``None`` when it had no limit."""

    pod: str
    container: str
    exit_code: int | None
    memory_limit: str | None
    memory_request: str | None


@dataclass(frozen=True)
class RetryNote:
    """What a Job that replaces an OOM-killed one says of itself (its annotations): the Job it stands
    in for (``slot``, the first Job's name), which attempt it is, the Job it replaces, that Job's
    killed container and memory limit, and its own memory limit."""

    slot: str
    attempt: int
    replaced: str
    container: str
    killed_at: str
    memory_limit: str


@dataclass(frozen=True)
class JobState:
    """What the operator sees of one of its Jobs (``retry``: it replaces an OOM-killed Job; ``oom``:
    it failed and a container of its Pods was OOM-killed — read from the Pods, for a failed Job only)."""

    succeeded: bool = False
    failed: bool = False  # terminal: condition Failed=True
    message: str = ""
    models_complete: int = 0  # judge rounds: models whose generation was complete at creation
    server: str | None = None  # endpoint key of the server its Pods send requests to
    started_at: str | None = None  # status.startTime
    finished_at: str | None = None  # completionTime, or when it failed for good
    retry: RetryNote | None = None
    oom: OomKill | None = None
    # Kueue: suspended (spec.suspend, the Job's Suspended condition) since then; None when running.
    # A queued Job is suspended by Kueue's webhook until its Workload is admitted.
    suspended_since: str | None = None

    @property
    def finished(self) -> bool:
        return self.succeeded or self.failed

    @property
    def attempt(self) -> int:
        """0 for the Job first created, N for the Nth replacement of an OOM-killed one."""
        return self.retry.attempt if self.retry is not None else 0


@dataclass(frozen=True)
class ReuseSource:
    """An earlier run a run copies records from: its name and its own storage URI, computed by the
    operator from that run's uid (never taken from a spec)."""

    name: str
    uri: str


@dataclass(frozen=True)
class ReuseSources:
    """The runs ``spec.reuse.from`` names, resolved: those that may be read (in the spec's order)
    and, for each that may not, a sentence naming its field and why."""

    usable: tuple[ReuseSource, ...] = ()
    refusals: tuple[str, ...] = ()


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
    # spec.reuse.from resolved (read only until the reuse step is done: afterwards nothing needs it)
    reuse_sources: ReuseSources = field(default_factory=ReuseSources)
    # <run>/reuse.json once the reuse step wrote it; reuse_note: why it could not be read
    reuse: ReuseDocument | None = None
    reuse_note: str | None = None
    # spec.budget: <run>/sequential.json as its last look Job wrote it (read once per look)
    sequential: SequentialDocument | None = None
    # Kueue: server Pods held by a scheduling gate (waiting for admission): endpoint key -> when the
    # earliest of them was created; and, of Pods Kueue manages, when each server's Pod was last
    # scheduled (admitted and placed: the progress deadline counts from there).
    servers_gated: Mapping[str, str] = field(default_factory=dict)
    servers_admitted_at: Mapping[str, str] = field(default_factory=dict)
    # The run's LocalQueue, ClusterQueue and waiting Workloads, when read (observe.observe_queue).
    queue: QueueState | None = None


def reuse_step_done(run: str, observed: Observed) -> bool:
    """Whether the run's reuse step has finished: its document was read, or its Job (the latest
    attempt) succeeded. Before that nothing else of a run that reuses may start."""
    job = current_attempts(observed.jobs).get(vocab.reuse_job_name(run))
    return observed.reuse is not None or bool(job and job.succeeded)


#: The parts of ``spec.storage`` a source run must share with the run that reuses it: the reuse
#: Job reads the source with the run's own storage settings and credentials, nothing else.
SHARED_STORAGE_FIELDS = (
    ("uri", "uri"),
    ("endpoint_url", "endpointUrl"),
    ("region", "region"),
    ("use_path_style", "pathStyle"),
    ("credentials_secret_ref", "credentialsSecretRef"),
    ("persistent_volume_claim", "persistentVolumeClaim"),
)


def _storage_difference(own: StorageSpec, source_body: Mapping[str, Any]) -> str | None:
    """Why the source's ``spec.storage`` is not this run's (the first part that differs); ``None``
    when every part a reader needs is the same."""
    raw = (source_body.get("spec") or {}).get("storage") or {}
    try:
        theirs = StorageSpec.model_validate(raw)
    except ValidationError:
        return "its spec.storage does not read"
    for attribute, spelled in SHARED_STORAGE_FIELDS:
        if getattr(own, attribute) != getattr(theirs, attribute):
            return f"its spec.storage.{spelled} differs from this run's"
    return None


def reuse_sources(
    names: Sequence[str],
    run: vocab.RunRef,
    own: StorageSpec,
    bodies: Mapping[str, Mapping[str, Any] | None],
) -> ReuseSources:
    """Resolve ``spec.reuse.from`` (``names``) against the EvalRuns of the run's namespace
    (``bodies``: name → object as read, ``None`` when there is none). A source is usable only when
    it exists, is not the run itself and stores where this run stores, with the same credentials:
    its own prefix is then computed from its uid below this run's root."""
    usable: list[ReuseSource] = []
    refusals: list[str] = []
    for index, name in enumerate(names):
        body = bodies.get(name)
        meta = (body or {}).get("metadata") or {}
        reason = None
        if name == run.name:
            reason = "a run cannot reuse itself"
        elif body is None or meta.get("deletionTimestamp"):
            reason = f"no EvalRun {name!r} in namespace {run.namespace!r}"
        elif not meta.get("uid"):
            reason = f"EvalRun {name!r} has no uid yet"
        else:
            difference = _storage_difference(own, body)
            if difference is not None:
                reason = (
                    f"EvalRun {name!r}: {difference} (reuse reads only this run's storage, with this "
                    "run's credentials)"
                )
        if reason is not None:
            refusals.append(f"spec.reuse.from[{index}]: {reason}")
            continue
        uri = run_storage_uri(own.uri, run.namespace, name, str(meta["uid"]))
        usable.append(ReuseSource(name=name, uri=uri))
    return ReuseSources(usable=tuple(usable), refusals=tuple(refusals))


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
    suspended_since: str | None = None
    for c in status.get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") == "Suspended":
            suspended_since = str(c.get("lastTransitionTime") or "") or None
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
        retry=retry_note(annotations),
        suspended_since=suspended_since,
    )


def retry_note(annotations: Mapping[str, Any]) -> RetryNote | None:
    """The :class:`RetryNote` a replacement Job carries in its annotations; ``None`` for any other
    Job (or one whose note is incomplete)."""
    fields = {
        "slot": vocab.ANNOTATION_OOM_RETRY_OF,
        "replaced": vocab.ANNOTATION_OOM_REPLACES,
        "container": vocab.ANNOTATION_OOM_KILLED_CONTAINER,
        "killed_at": vocab.ANNOTATION_OOM_KILLED_AT,
        "memory_limit": vocab.ANNOTATION_MEMORY_LIMIT,
    }
    values = {name: str(annotations.get(key) or "") for name, key in fields.items()}
    try:
        attempt = int(annotations.get(vocab.ANNOTATION_OOM_ATTEMPT, 0))
    except (TypeError, ValueError):
        attempt = 0
    if attempt < 1 or not all(values.values()):
        return None
    return RetryNote(attempt=attempt, **values)


def latest_attempt_names(jobs: Mapping[str, JobState]) -> dict[str, str]:
    """Each Job's first name (its *slot*) → the name of its latest attempt: the highest-numbered
    replacement of an OOM-killed Job there is, else the Job itself."""
    latest: dict[str, str] = {}
    for name, job in sorted(jobs.items()):
        slot = job.retry.slot if job.retry is not None else name
        if slot not in latest or job.attempt > jobs[latest[slot]].attempt:
            latest[slot] = name
    return latest


def current_attempts(jobs: Mapping[str, JobState]) -> dict[str, JobState]:
    """Jobs by their first name, each the state of its latest attempt: what the planner reads, so
    a Job replaced after an OOM kill is looked up under the name every stage knows it by."""
    return {slot: jobs[name] for slot, name in latest_attempt_names(jobs).items()}


def _terminations(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(container name, ``terminated`` record) of each container's current and last state."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in ("state", "lastState"):
            terminated = (status.get(state) or {}).get("terminated")
            if terminated:
                yield str(status.get("name") or ""), terminated


def _memory(pod: Mapping[str, Any], container: str, kind: str) -> str | None:
    """The container's ``resources.<kind>.memory`` in the Pod spec (``None`` when not set)."""
    for spec in (pod.get("spec") or {}).get("containers") or []:
        if spec.get("name") == container:
            value = ((spec.get("resources") or {}).get(kind) or {}).get("memory")
            return str(value) if value is not None else None
    return None


def oom_kill(pods: Sequence[Mapping[str, Any]]) -> OomKill | None:
    """The latest OOM kill among a failed Job's Pods: a container whose ``state`` or ``lastState``
    terminated with reason ``OOMKilled`` (the latest by ``finishedAt``), with its exit code and the
    memory it was given; ``None`` when no container of them was OOM-killed."""
    found: list[tuple[str, str, OomKill]] = []
    for pod in pods:
        pod_name = str((pod.get("metadata") or {}).get("name") or "")
        for container, terminated in _terminations(pod):
            if terminated.get("reason") != "OOMKilled":
                continue
            code = terminated.get("exitCode")
            kill = OomKill(
                pod=pod_name,
                container=container,
                exit_code=int(code) if code is not None else None,
                memory_limit=_memory(pod, container, "limits"),
                memory_request=_memory(pod, container, "requests"),
            )
            found.append((str(terminated.get("finishedAt") or ""), pod_name, kill))
    return max(found, key=lambda f: (f[0], f[1]))[2] if found else None


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


def _server_key(pod: Mapping[str, Any]) -> str | None:
    """The endpoint key of a model server's Pod not being deleted; ``None`` for any other Pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(vocab.LABEL_COMPONENT) != "server" or meta.get("deletionTimestamp"):
        return None
    key = labels.get(vocab.LABEL_ENDPOINT)
    return str(key) if key else None


def _scheduled(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return c  # type: ignore[no-any-return]
    return None


def servers_gated(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Endpoint key → creation time of the earliest model-server Pod held by a scheduling gate
    (``PodScheduled=False``, reason ``SchedulingGated``): under Kueue, a Pod waiting for its
    Workload's admission (the gate ``kueue.x-k8s.io/admission``)."""
    gated: dict[str, str] = {}
    for pod in pods:
        key, scheduled = _server_key(pod), _scheduled(pod)
        if key is None or scheduled is None or scheduled.get("reason") != "SchedulingGated":
            continue
        created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        gated[key] = min(gated.get(key, created), created)
    return gated


def servers_admitted_at(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Endpoint key → when its Kueue-managed model-server Pod was scheduled (``PodScheduled=True``
    since then; the latest of several): the Pod was admitted just before. Pods Kueue does not
    manage are left out."""
    admitted: dict[str, str] = {}
    for pod in pods:
        key, scheduled = _server_key(pod), _scheduled(pod)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if key is None or scheduled is None or labels.get(vocab.LABEL_KUEUE_MANAGED) != "true":
            continue
        if scheduled.get("status") == "True" and scheduled.get("lastTransitionTime"):
            admitted[key] = max(admitted.get(key, ""), str(scheduled["lastTransitionTime"]))
    return admitted


def server_pod_keys(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name → endpoint key of each model server's Pod (whose Workload is whose, under Kueue)."""
    return {
        str((pod.get("metadata") or {}).get("name") or ""): key
        for pod in pods
        if (key := _server_key(pod)) is not None
    }


def _ready_server_pods(pods: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Any, Any]]:
    """(endpoint key, start of its bring-up, Ready lastTransitionTime) of each model-server Pod that
    is Ready now and not being deleted. The bring-up starts at the Pod's creation — or, for a Pod
    Kueue manages, when it was scheduled: the time it waited for quota is queueing, not bring-up
    (it would otherwise make the next model's server start a whole wait early)."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        key = labels.get(vocab.LABEL_ENDPOINT) if labels.get(vocab.LABEL_COMPONENT) == "server" else None
        if not key or meta.get("deletionTimestamp"):
            continue
        start = meta.get("creationTimestamp")
        scheduled = _scheduled(pod)
        if (
            labels.get(vocab.LABEL_KUEUE_MANAGED) == "true"
            and scheduled
            and scheduled.get("status") == "True"
        ):
            start = scheduled.get("lastTransitionTime") or start
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                yield str(key), start, c.get("lastTransitionTime")


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
