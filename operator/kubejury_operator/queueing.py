"""Kueue in the planner: what of a queued run waits for quota, the guards against partial holds,
the ``Queued`` condition and ``status.queue``.

Why this module exists: a run admitted through Kueue (``ClusterRun.queue_name``) must never hold a
model server's GPUs while the Jobs that use it wait for quota, and must never keep a Job running
for a server Kueue took away. kubejury admits the server first — its Deployment carries the queue
label, its Pod waits gated until admitted, and its Jobs are created only once it is Ready — and two
guards close what that order leaves open (docs/operator.md, "Kueue"):

1. a Ready server all of whose unfinished Jobs have waited for admission longer than the grace
   (``kueue_job_grace_seconds``) is scaled to zero and those Jobs deleted: the server's quota goes
   back to the queue and both are made again once the server is admitted again;
2. a server whose Pod waits for admission again (Kueue preempted it: the Pod was deleted and its
   replacement is gated) has its unfinished Jobs deleted: they would only spend their retries.

Storage resume makes a deleted Job's replacement redo only what is missing, so every key keeps
exactly one answer and one judgment. Pure: it reads the observation and ``now``; the reads of
Kueue's own objects are :mod:`.queue_observed` and :func:`kubejury_operator.observe.observe_queue`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kubejury.records.run_status import QueueStatus
from kubejury.records.timestamps import seconds_between
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.observed import JobState, Observed
from kubejury_operator.queue_observed import PendingWorkload, QueueState

MAX_MESSAGE = 1000  # a condition message stays a sentence or two


@dataclass(frozen=True)
class Guards:
    """What the guards decided: servers to scale to zero now, Jobs to delete now."""

    release: frozenset[str] = frozenset()  # endpoint keys (guard 1)
    stop: tuple[str, ...] = ()  # Job names (guards 1 and 2)


def _open_jobs(observed: Observed) -> dict[str, dict[str, JobState]]:
    """Endpoint key → its unfinished Jobs by name. A Job standing for an OOM-killed one is left out
    (it is known here by the first Job's name, not its own)."""
    found: dict[str, dict[str, JobState]] = {}
    for name, job in sorted(observed.jobs.items()):
        if job.server and not job.finished and job.retry is None:
            found.setdefault(job.server, {})[name] = job
    return found


def _waited(job: JobState, now: str, grace: float) -> bool:
    return job.suspended_since is not None and seconds_between(job.suspended_since, now) >= grace


def guards(run: ClusterRun, observed: Observed, now: str) -> Guards:
    """Guards 1 and 2 (see the module docstring); nothing for a run that is not queued."""
    if run.queue_name is None:
        return Guards()
    grace = float(run.settings.kueue_job_grace_seconds)
    release: set[str] = set()
    stop: list[str] = []
    for key, jobs in _open_jobs(observed).items():
        dep = observed.deployments.get(vocab.workload_name(run.ref.name, key))
        ready = bool(dep and dep.ready)
        if ready and all(_waited(job, now, grace) for job in jobs.values()):
            release.add(key)
            stop.extend(jobs)
        elif not ready and key in observed.servers_gated:
            stop.extend(jobs)
    return Guards(release=frozenset(release), stop=tuple(stop))


def waiting(run: ClusterRun, observed: Observed) -> tuple[str, ...]:
    """What of a queued run waits for admission now: ``model-server <name>`` for each server whose
    Pod is gated, ``Job <name>`` for each unfinished Job Kueue keeps suspended."""
    if run.queue_name is None:
        return ()
    names = {ep.key: ep.name for ep in (*run.models, *run.judges)}
    servers = [f"model-server {names.get(key, key)}" for key in sorted(observed.servers_gated)]
    jobs = [
        f"Job {name}"
        for name, job in sorted(observed.jobs.items())
        if job.suspended_since is not None and not job.finished
    ]
    return (*servers, *jobs)


def local_queue_missing(run: ClusterRun, observed: Observed) -> bool:
    """The run names a LocalQueue its namespace does not have (read this reconcile)."""
    return run.queue_name is not None and observed.queue is not None and not observed.queue.found


def deadline_exempt(run: ClusterRun, observed: Observed, now: str | None) -> frozenset[str]:
    """Deployments whose exceeded progress deadline does not fail the run: a queued server whose Pod
    waits for admission (a gated Pod is never Available, so its Deployment passes its deadline
    while it queues), or whose Pod was admitted less than a progress deadline ago (the
    Deployment's condition stays ``ProgressDeadlineExceeded`` until the Pod is Ready). After that
    the deadline holds as for any server."""
    if run.queue_name is None:
        return frozenset()
    deadline = float(run.settings.startup_budget_seconds + 600)  # manifests.model_deployment's
    exempt = set()
    for key in {ep.key for ep in (*run.models, *run.judges)}:
        admitted = observed.servers_admitted_at.get(key)
        if key in observed.servers_gated or (
            admitted is not None and now is not None and seconds_between(admitted, now) < deadline
        ):
            exempt.add(vocab.workload_name(run.ref.name, key))
    return frozenset(exempt)


# ------------------------------------------------------------------------------------- status


def _owner_text(owner: str, names: Mapping[str, str]) -> str:
    """``model-server <key>`` as ``model-server <model name>``; a Job as it is."""
    prefix = "model-server "
    if owner.startswith(prefix):
        key = owner[len(prefix) :]
        return prefix + names.get(key, key)
    return owner


def _in_use(queue: QueueState, resource: str, flavour: str | None) -> str:
    """``8 of 8 in use`` for the resource in the flavour Kueue named (or each flavour that has it)."""
    uses = [u for u in queue.usage if u.resource == resource and (flavour is None or u.flavour == flavour)]
    if flavour is not None and len(uses) == 1:
        return f"{uses[0].in_use} of {uses[0].quota} in use"
    return ", ".join(f"{u.flavour}: {u.in_use} of {u.quota} in use" for u in uses)


def pending_line(pending: PendingWorkload, queue: QueueState, names: Mapping[str, str]) -> str:
    """One waiting Workload as a user reads it: ``model-server qwen3-8b: 1 nvidia.com/gpu of
    flavour h100 pending; 8 of 8 in use``, or Kueue's own words when it cannot be admitted at all."""
    who = _owner_text(pending.owner, names)
    if pending.reason != "Pending" or not pending.requests:
        return f"{who}: {pending.message}"
    resource, quantity = pending.requests[0]
    flavour = pending.flavour(resource)
    line = f"{who}: {quantity} {resource}{f' of flavour {flavour}' if flavour else ''} pending"
    use = _in_use(queue, resource, flavour)
    return f"{line}; {use}" if use else line


def queued_condition(run: ClusterRun, observed: Observed, terminal: bool) -> tuple[bool, str, str]:
    """(status, reason, message) of ``Queued``: True while the LocalQueue is missing (reason
    ``LocalQueueNotFound``) or something of the run waits for quota (``WaitingForQuota``, naming the
    LocalQueue, its ClusterQueue and what is pending), else False (``Admitted``)."""
    name = str(run.queue_name)
    queue = observed.queue
    if local_queue_missing(run, observed) and not terminal:
        return (
            True,
            "LocalQueueNotFound",
            f"LocalQueue {name!r} does not exist in namespace {run.ref.namespace!r}: nothing of the run "
            "is created until it does (Kueue would hold every Job and model-server Pod of it)",
        )
    waits = waiting(run, observed)
    if not waits or terminal:
        return False, "Admitted", f"Nothing of the run waits for quota in LocalQueue {name}"
    where = f"LocalQueue {name}"
    if queue is not None and queue.cluster_queue:
        where += f" (ClusterQueue {queue.cluster_queue})"
    names = {ep.key: ep.name for ep in (*run.models, *run.judges)}
    if queue is not None and queue.pending:
        detail = "; ".join(pending_line(p, queue, names) for p in queue.pending)
    else:
        detail = "waiting for admission: " + ", ".join(waits)
        if queue is not None and queue.error:
            detail += f" ({queue.error})"
    message = f"{where}: {detail}"
    return (
        True,
        "WaitingForQuota",
        message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…",
    )


def queue_status(
    run: ClusterRun, observed: Observed, previous: QueueStatus | None, terminal: bool, now: str
) -> QueueStatus | None:
    """``status.queue`` of a queued run (``None`` otherwise): its LocalQueue and ClusterQueue, and
    the time it waited for quota — an open interval while anything of it waits (or its LocalQueue
    is missing), closed into ``waitedSeconds`` when nothing does (or the run ended)."""
    if run.queue_name is None:
        return None
    before = previous or QueueStatus(local_queue=run.queue_name)
    read = observed.queue.cluster_queue if observed.queue is not None else None
    cluster = read or before.cluster_queue
    now_waiting = not terminal and bool(waiting(run, observed) or local_queue_missing(run, observed))
    since, waited = before.waiting_since, before.waited_seconds
    if now_waiting and since is None:
        since = now
    elif not now_waiting and since is not None:
        waited += seconds_between(since, now)
        since = None
    return QueueStatus(
        local_queue=run.queue_name, cluster_queue=cluster, waiting_since=since, waited_seconds=waited
    )
