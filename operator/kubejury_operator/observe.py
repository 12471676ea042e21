"""What a reconcile observes of its run: children from the watch-fed caches, Secrets, progress.

Why this module exists: the planner (:mod:`kubejury_operator.reconcile`) is pure and reads an
:class:`~kubejury_operator.observed.Observed`; this module fills one. The run's children and its
model servers' Pods come from the caches (:mod:`.watched`: nothing is listed), the Secrets the run
names are asked of the API (keys only, never values, except the storage credentials it reads
storage with), and the progress records and report summary are read from the run's storage
(:mod:`.run_storage`), a recent reading reused (:mod:`.progress_cache`). Storage trouble never
stops orchestration: the counters wait. For a run that reuses earlier runs (``spec.reuse.from``),
the runs it names are read from the API until its reuse step is done, and the document that step
wrote is read once it has.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from kubejury.config import spec as specmod
from kubejury.records.reuse import ReuseDocumentError
from kubejury_operator import run_storage, watched
from kubejury_operator import status as st
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.gateway import GatewayError
from kubejury_operator.kube_api import KubeApi
from kubejury_operator.observed import (
    Observed,
    current_attempts,
    deployment_state,
    job_state,
    latest_attempt_names,
    oom_kill,
    pod_scheduling_problems,
    reuse_sources,
    reuse_step_done,
    server_pod_keys,
    servers_admitted_at,
    servers_bringup_seconds,
    servers_gated,
    servers_ready_since,
)
from kubejury_operator.progress_cache import ProgressCache
from kubejury_operator.queue_observed import (
    PendingWorkload,
    QueueState,
    cluster_queue_usage,
    local_queue_target,
    pending_workloads,
)
from kubejury_operator.tenancy import TenantPolicy
from kubejury_operator.watched import Caches

PRESENT_KINDS = ("Service", "ConfigMap", "ServiceAccount")  # kinds the planner reads as present or not


def secret_refs(spec: specmod.EvalRunSpec) -> list[tuple[str, str | None]]:
    """(secret name, key or None) the run needs present before anything starts."""
    refs: list[tuple[str, str | None]] = []
    for entry in spec.all_endpoints():
        if entry.api_key_secret_ref is not None:
            refs.append((entry.api_key_secret_ref.name, entry.api_key_secret_ref.key))
    if spec.storage.credentials_secret_ref is not None:
        refs.append((spec.storage.credentials_secret_ref.name, None))
    return refs


async def missing_secrets(api: KubeApi, namespace: str, spec: specmod.EvalRunSpec) -> tuple[str, ...]:
    """``name`` or ``name/key`` of each Secret the run names that is missing or lacks the key."""
    missing: list[str] = []
    for name, key in secret_refs(spec):
        keys = await api.secret_keys(namespace, name)
        if keys is None or (key is not None and key not in keys):
            missing.append(f"{name}/{key}" if key else name)
    return tuple(dict.fromkeys(missing))


async def storage_secret(api: KubeApi, namespace: str, evalrun: specmod.EvalRun) -> Mapping[str, str] | None:
    """The data of the run's ``storage.credentialsSecretRef`` (``None`` without one)."""
    ref = evalrun.spec.storage.credentials_secret_ref
    return await api.secret_data(namespace, ref.name) if ref is not None else None


async def observe_cluster(
    api: KubeApi, caches: Caches, namespace: str, name: str, evalrun: specmod.EvalRun
) -> Observed:
    """The run's children, missing Secrets and unschedulable server Pods (progress comes later),
    the children read from the watch-fed caches."""
    run_label = vocab.label_value(name)
    children = {kind: caches.children_of(kind, namespace, run_label) for kind in watched.CHILD_INDEXES}
    return Observed(
        deployments={d["metadata"]["name"]: deployment_state(d) for d in children["Deployment"]},
        jobs={j["metadata"]["name"]: job_state(j) for j in children["Job"]},
        present=frozenset((kind, o["metadata"]["name"]) for kind in PRESENT_KINDS for o in children[kind]),
        missing_secrets=await missing_secrets(api, namespace, evalrun.spec),
        unschedulable_pods=pod_scheduling_problems(children["Pod"]),
        servers_ready_since=servers_ready_since(children["Pod"]),
        servers_bringup_seconds=servers_bringup_seconds(children["Pod"]),
        servers_gated=servers_gated(children["Pod"]),
        servers_admitted_at=servers_admitted_at(children["Pod"]),
    )


def queue_waiting(observed: Observed) -> bool:
    """Something of the run waits for Kueue's admission: a model server's Pod held by a scheduling
    gate, or a Job suspended and not finished."""
    return bool(observed.servers_gated) or any(
        j.suspended_since is not None and not j.finished for j in observed.jobs.values()
    )


async def observe_queue(
    api: KubeApi,
    caches: Caches,
    run: ClusterRun,
    observed: Observed,
    previous: Mapping[str, Any],
    readable: bool,
) -> Observed:
    """``observed`` with the run's queue (:class:`~.queue_observed.QueueState`): the one place the
    operator reads Kueue's objects, and only reads them. For a queued run, while nothing of it
    exists yet (a missing LocalQueue must block it) or something of it waits for admission: the
    LocalQueue, its ClusterQueue, and — while something waits — the namespace's Workloads, of which
    those owned by the run's Jobs and server Pods are kept. A run whose servers and Jobs are all
    admitted costs no request. ``readable`` False (the chart's ``kueue.enabled`` is off, so there is
    no RBAC for it): nothing is read, and the queue says so. A refused read is said, never fatal."""
    name = run.queue_name
    if name is None or st.finished(previous):
        return observed
    waiting = queue_waiting(observed)
    if not waiting and (observed.deployments or observed.jobs):
        return observed
    if not readable:
        error = "the chart's kueue.enabled is off: the operator does not read Kueue's objects"
        return dataclasses.replace(observed, queue=QueueState(local_queue=name, error=error))
    namespace = run.ref.namespace
    try:
        local = await api.get("LocalQueue", namespace, name)
        if local is None:
            return dataclasses.replace(observed, queue=QueueState(local_queue=name, found=False))
        target = local_queue_target(local)
        cluster = await api.get("ClusterQueue", None, target) if target else None
        pending: tuple[PendingWorkload, ...] = ()
        if waiting:
            workloads = await api.list_objects("Workload", namespace)
            pods = caches.children_of("Pod", namespace, vocab.label_value(run.ref.name))
            pending = pending_workloads(workloads, observed.jobs, server_pod_keys(pods))
    except GatewayError as exc:
        error = f"cannot read Kueue's objects: {exc}"
        return dataclasses.replace(observed, queue=QueueState(local_queue=name, error=error[:300]))
    state = QueueState(
        local_queue=name, cluster_queue=target, usage=cluster_queue_usage(cluster), pending=pending
    )
    return dataclasses.replace(observed, queue=state)


async def observe_oom_kills(api: KubeApi, namespace: str, observed: Observed) -> Observed:
    """``observed`` with the OOM kill of each failed Job that has no replacement yet, read from its
    Pods (listed by the Job controller's ``batch.kubernetes.io/job-name`` label).

    Job Pods are not watched (:data:`kubejury_operator.watched.POD_LABELS`: they are most of a busy
    cluster's Pod events), so they are listed here — and only for a Job that failed for good and is
    the latest attempt of its Job: a running or succeeded Job, or one already replaced, costs no
    request. That is a handful of lists per failed Job (until its replacement shows, or the run is
    Failed and settled), never one per reconcile. A refused list is retried with the reconcile
    (a :class:`kopf.TemporaryError`), not read as "no OOM kill", which would fail the run.
    """
    jobs = dict(observed.jobs)
    for name in sorted(set(latest_attempt_names(jobs).values())):
        job = jobs[name]
        if not job.failed or job.oom is not None:
            continue
        try:
            pods = await api.list_objects("Pod", namespace, {vocab.LABEL_JOB_NAME: name})
        except GatewayError as exc:
            raise kopf.TemporaryError(f"cannot read the Pods of failed Job {name}: {exc}", delay=15) from exc
        kill = oom_kill(pods)
        if kill is not None:
            jobs[name] = dataclasses.replace(job, oom=kill)
    return dataclasses.replace(observed, jobs=jobs) if jobs != observed.jobs else observed


@dataclasses.dataclass(frozen=True)
class StorageReader:
    """How a run's storage is read: through which API (for its Secret), with which allow-lists,
    reusing which cache, and where trouble is logged."""

    api: KubeApi
    policy: TenantPolicy
    cache: ProgressCache
    logger: kopf.Logger


async def observe_storage(
    reader: StorageReader,
    evalrun: specmod.EvalRun,
    run: ClusterRun,
    observed: Observed,
    previous: Mapping[str, Any],
    now: float,
) -> Observed:
    """``observed`` with the progress records and, once aggregated, the report summary. A
    finished run reads nothing; storage trouble never stops orchestration (counters wait).
    A recent reading (``now``: monotonic seconds) is reused (:mod:`.progress_cache`)."""
    if st.finished(previous):
        return observed
    key = (run.ref.namespace, run.ref.name)
    reused = reader.cache.fresh(key, observed, now)
    if reused is not None:
        return dataclasses.replace(observed, progress=reused[0], summary=reused[1])
    aggregation = current_attempts(observed.jobs).get(vocab.aggregation_job_name(run.ref.name))
    secret = await storage_secret(reader.api, run.ref.namespace, evalrun)
    try:
        progress, summary = await asyncio.to_thread(
            run_storage.read_progress_and_summary,
            evalrun,
            run.ref,
            run.series,
            secret,
            bool(aggregation and aggregation.succeeded),
            allowed_endpoints=reader.policy.storage_endpoints,
        )
    except Exception as exc:
        reader.logger.warning("cannot read progress records of %s/%s: %s", *key, exc)
        return observed
    reader.cache.store(key, observed, (progress, summary), now)
    return dataclasses.replace(observed, progress=progress, summary=summary)


async def observe_reuse_sources(
    api: KubeApi, run: ClusterRun, evalrun: specmod.EvalRun, observed: Observed
) -> Observed:
    """``observed`` with ``spec.reuse.from`` resolved (:func:`~.observed.reuse_sources`): each
    named EvalRun read from the run's own namespace, never another. Read only while the reuse step
    is not done — afterwards the run no longer needs its sources, and deleting one must not stop it."""
    if not run.reuse_from or reuse_step_done(run.ref.name, observed):
        return observed
    bodies: dict[str, Mapping[str, Any] | None] = {}
    for name in dict.fromkeys(run.reuse_from):
        if name == run.ref.name:
            continue
        try:
            bodies[name] = await api.get("EvalRun", run.ref.namespace, name)
        except GatewayError as exc:
            raise kopf.TemporaryError(
                f"cannot read EvalRun {name} (spec.reuse.from): {exc}", delay=15
            ) from exc
    resolved = reuse_sources(run.reuse_from, run.ref, evalrun.spec.storage, bodies)
    return dataclasses.replace(observed, reuse_sources=resolved)


async def observe_reuse_document(
    reader: StorageReader,
    evalrun: specmod.EvalRun,
    run: ClusterRun,
    observed: Observed,
    previous: Mapping[str, Any],
) -> Observed:
    """``observed`` with the run's ``reuse.json`` once its reuse step wrote it (read once, then kept:
    :mod:`.progress_cache`). Not read while the reuse Job runs; a document that does not read is
    logged and reported in ``status.reuse.note``, and the run goes on as if nothing was reused."""
    if not run.reuse_from or st.finished(previous):
        return observed
    key = (run.ref.namespace, run.ref.name)
    kept = reader.cache.reuse(key)
    if kept is not None:
        return dataclasses.replace(observed, reuse=kept[0], reuse_note=kept[1])
    job = current_attempts(observed.jobs).get(vocab.reuse_job_name(run.ref.name))
    if job is not None and not job.succeeded:
        return observed  # running (or failed): the document is written when it succeeds
    secret = await storage_secret(reader.api, run.ref.namespace, evalrun)
    try:
        document = await asyncio.to_thread(
            run_storage.read_reuse_document,
            evalrun,
            run.ref,
            secret,
            allowed_endpoints=reader.policy.storage_endpoints,
        )
    except ReuseDocumentError as exc:
        reader.logger.warning("cannot read the reuse document of %s/%s: %s", *key, exc)
        reader.cache.keep_reuse(key, (None, f"reuse.json does not read: {exc}"))
        return dataclasses.replace(observed, reuse_note=f"reuse.json does not read: {exc}")
    except Exception as exc:
        reader.logger.warning("cannot read the reuse document of %s/%s: %s", *key, exc)
        return observed
    if document is None:
        note = "the reuse Job succeeded but no reuse.json was found" if job is not None else None
        return dataclasses.replace(observed, reuse_note=note)
    reader.cache.keep_reuse(key, (document, None))
    return dataclasses.replace(observed, reuse=document)


async def observe_sequential_document(
    reader: StorageReader,
    evalrun: specmod.EvalRun,
    run: ClusterRun,
    observed: Observed,
    previous: Mapping[str, Any],
) -> Observed:
    """``observed`` with a budgeted run's ``sequential.json`` (spec.budget): read when nothing was
    read yet (a new run, or a restarted operator) and when the Job of the look after the one read
    has succeeded — once per look; kept between (:mod:`.progress_cache`). A document that does not
    read fails nothing: it is logged and read again on the next reconcile, and the run waits."""
    if not run.budgeted or st.finished(previous):
        return observed
    key = (run.ref.namespace, run.ref.name)
    read, kept = reader.cache.sequential(key)
    looks_done = kept.looks_done if kept is not None else 0
    next_look = current_attempts(observed.jobs).get(vocab.look_job_name(run.ref.name, looks_done + 1))
    if read and not (next_look is not None and next_look.succeeded):
        return dataclasses.replace(observed, sequential=kept)
    secret = await storage_secret(reader.api, run.ref.namespace, evalrun)
    try:
        document = await asyncio.to_thread(
            run_storage.read_sequential_document,
            evalrun,
            run.ref,
            secret,
            allowed_endpoints=reader.policy.storage_endpoints,
        )
    except Exception as exc:  # SequentialDocumentError names the key and field; storage trouble waits
        reader.logger.warning("cannot read the sequential document of %s/%s: %s", *key, exc)
        return dataclasses.replace(observed, sequential=kept)
    reader.cache.keep_sequential(key, document)
    return dataclasses.replace(observed, sequential=document)
