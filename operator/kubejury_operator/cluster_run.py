"""The EvalRun as the cluster will run it: the planner's input, built from the parsed spec.

Why this module exists: the planner must not read raw spec fields or decide how a spec maps onto
Kubernetes objects. This module does that mapping once — which endpoints need a server and which
share one (``sameAs``), which placement each server got, the workload settings after the run's own
overrides, where the Jobs store results — and hands the planner one frozen :class:`ClusterRun`.
Pure: the handlers pass in the placements they computed or pinned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubejury.placement.estimate import bringup_plan
from kubejury.records.placement import Placement
from kubejury.runtimes import judge_placement, judge_shares_server, runtime_of
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.tenancy import run_storage_uri
from kubejury_operator.vocabulary import (
    DEFAULT_LOCAL_QUEUE,
    LABEL_PRIORITY_CLASS,
    Endpoint,
    JobStorage,
    RunRef,
    endpoint_key,
    namespace_of,
)


@dataclass(frozen=True)
class ClusterRun:
    """The run as the planner needs it (built by :func:`cluster_run` from the EvalRun object)."""

    ref: RunRef
    generation: int
    # The EvalRun object for the Jobs' spec ConfigMap, its storage.uri set to the run's own prefix.
    body: Mapping[str, Any]
    models: tuple[Endpoint, ...]
    judges: tuple[Endpoint, ...]
    series: tuple[str, ...]
    max_concurrent_models: int
    settings: WorkloadSettings
    storage: JobStorage
    generation_shards: int = 1
    report_uri: str | None = None
    # Evaluated models' names in the order their servers take the maxConcurrentModels slots
    # (kubejury.placement.estimate.bringup_plan: longest first unless that ends the run later);
    # empty: spec order.
    bringup_order: tuple[str, ...] = ()
    # spec.reuse.from: earlier runs of the namespace whose records are copied before anything runs
    reuse_from: tuple[str, ...] = ()
    # The Kueue LocalQueue that admits the run's servers and Jobs (spec.queueName, else "default"
    # with the chart's kueue.enabled); None: the run is not queued and nothing Kueue applies.
    queue_name: str | None = None
    # Kueue's WorkloadPriorityClass: the EvalRun's label kueue.x-k8s.io/priority-class, if any.
    priority_class: str | None = None
    # spec.budget (issue 27): its goal, and how many looks it plans at most (the benchmark may
    # merge some: sequential.json says how many there are); None: no budget, every question asked.
    budget_goal: str | None = None
    budget_looks: int = 0

    @property
    def budgeted(self) -> bool:
        """The run asks its questions look by look (spec.budget; :mod:`kubejury_operator.looks`)."""
        return self.budget_goal is not None

    def models_in_bringup_order(self) -> list[Endpoint]:
        """The evaluated models in bring-up order; any not named keep spec order after the others."""
        position = {name: i for i, name in enumerate(self.bringup_order)}
        return sorted(self.models, key=lambda m: position.get(m.name, len(position)))


def with_settings(run: ClusterRun, **changes: Any) -> ClusterRun:
    """A copy of ``run`` with different workload settings (tests, overrides)."""
    return dataclasses.replace(run, settings=dataclasses.replace(run.settings, **changes))


def run_settings(base: WorkloadSettings, spec: Any) -> WorkloadSettings:
    """The cluster-wide settings with the run's own overrides (``spec.jobs``, cache, secrets)."""
    changes: dict[str, Any] = {"startup_budget_seconds": int(spec.startup_timeout_seconds)}
    if spec.model_cache is not None:
        changes["model_cache_pvc"] = spec.model_cache.claim_name
        changes["model_cache_mount"] = spec.model_cache.mount_path
    if spec.hf_token_secret_ref is not None:
        changes["hf_token_secret"] = spec.hf_token_secret_ref.name
        changes["hf_token_key"] = spec.hf_token_secret_ref.key
    changes["job_backoff_limit"] = int(spec.jobs.backoff_limit)
    if spec.jobs.active_deadline_seconds:
        deadline = int(spec.jobs.active_deadline_seconds)
        changes.update(
            generation_deadline_seconds=deadline,
            judging_deadline_seconds=deadline,
            aggregation_deadline_seconds=deadline,
        )
    if spec.jobs.image:
        changes["job_image"] = spec.jobs.image
    if spec.storage.persistent_volume_claim:
        changes["results_pvc"] = spec.storage.persistent_volume_claim
    if spec.storage.credentials_secret_ref is not None:
        changes["storage_secret"] = spec.storage.credentials_secret_ref.name
    return dataclasses.replace(base, **changes)


def _endpoint(entry: Any, key: str, placement: Placement | None, requests_in_flight: int) -> Endpoint:
    secret = entry.api_key_secret_ref
    source = entry.source or ""
    in_cluster = runtime_of(entry.runtime).in_cluster
    if in_cluster and (source.startswith("embedded://") or entry.gguf_path) and placement is not None:
        # The embedded model and local .gguf paths exist only on the machine running local mode.
        placement = dataclasses.replace(
            placement,
            schedulable=False,
            reason=(
                f"source {source or entry.gguf_path} exists only in local mode (kubejury run); in a cluster "
                "give the weights as hf://org/repo, pvc://claim/path or s3://…"
            ),
        )
    return Endpoint(
        key=key,
        name=entry.name,
        source=entry.source or "",
        served_model=entry.request_model,
        runtime=entry.runtime,
        checkpoint=entry.checkpoint,
        placement=placement if in_cluster else None,
        api_key_secret=secret.name if secret is not None else None,
        api_key_key=secret.key if secret is not None else "api-key",
        max_model_len=entry.max_model_len,
        gpu_memory_utilization=entry.gpu_memory_utilization,
        cpu=entry.resources.cpu,
        memory=entry.resources.memory,
        extra_args=tuple(entry.extra_args),
        chat_format=entry.chat_format,
        requests_in_flight=requests_in_flight,
    )


def cluster_run(
    body: Mapping[str, Any],
    evalrun: Any,
    placements: Mapping[str, Placement],
    base: WorkloadSettings,
) -> ClusterRun:
    """Planner inputs from the EvalRun object, its parsed spec (``kubejury.config.spec.EvalRun``) and the
    placement decision of every model and judge (by name; openai entries need none)."""
    meta = body.get("metadata") or {}
    spec = evalrun.spec
    ref = RunRef(
        name=str(meta["name"]),
        namespace=namespace_of(body),
        uid=str(meta.get("uid") or ""),
    )
    in_flight = spec.concurrency.requests_per_endpoint
    models = tuple(
        _endpoint(m, endpoint_key("model", m.name), placements.get(m.name), in_flight) for m in spec.models
    )
    by_name = {m.name: m for m in spec.models}
    judges = []
    for j in spec.judges:
        twin = by_name.get(j.same_as) if j.same_as else None
        if twin is not None and judge_shares_server(twin, j):
            key = endpoint_key("model", twin.name)
            placement = placements.get(twin.name)
        else:
            key = endpoint_key("judge", j.name)
            placement = judge_placement(placements, j.name)
        judges.append(_endpoint(j, key, placement, in_flight))
    # The Jobs store under the run's own prefix, <root>/<namespace>/<name>-<uid prefix>: the spec
    # they read (the ConfigMap) names that prefix as their storage root.
    storage_uri = run_storage_uri(spec.storage.uri, ref.namespace, ref.name, ref.uid)
    secret = spec.storage.credentials_secret_ref
    raw_spec: Mapping[str, Any] = body.get("spec") or {}
    job_body = {
        **body,
        "spec": {**raw_spec, "storage": {**(raw_spec.get("storage") or {}), "uri": storage_uri}},
    }
    return ClusterRun(
        ref=ref,
        generation=int(meta.get("generation") or 1),
        body=job_body,
        models=models,
        judges=tuple(judges),
        series=tuple(s.name for s in spec.series),
        max_concurrent_models=int(spec.max_concurrent_models),
        # A pure function of the spec and the placements, which are pinned once the run leaves
        # Pending (and read back with the same figures): the order is the same on every pass.
        bringup_order=tuple(bringup_plan(spec, placements)[1]),
        settings=run_settings(base, spec),
        storage=JobStorage(
            uri=storage_uri,
            credentials_secret=secret.name if secret is not None else None,
            root=spec.storage.uri,
        ),
        generation_shards=int(spec.jobs.generation_shards),
        report_uri=storage_uri.rstrip("/") + f"/{ref.name}/report/",
        reuse_from=tuple(spec.reuse.from_runs),
        queue_name=queue_name(spec.queue_name, base.kueue_enabled),
        priority_class=str((meta.get("labels") or {}).get(LABEL_PRIORITY_CLASS) or "") or None,
        budget_goal=spec.budget.goal if spec.budget is not None else None,
        budget_looks=_budget_looks(spec),
    )


def _budget_looks(spec: Any) -> int:
    """How many looks ``spec.budget`` plans at most (0: no budget)."""
    budget = spec.sequential_budget()
    return len(budget.looks) if budget is not None else 0


def queue_name(spec_queue: str | None, kueue_enabled: bool) -> str | None:
    """The LocalQueue a run is admitted through: its ``spec.queueName``; else, with the chart's
    ``kueue.enabled``, the namespace's LocalQueue ``default`` (the one Kueue 0.17's
    LocalQueueDefaulting would apply itself; named here so status can name it and a missing one is
    reported instead of running outside quota); else none."""
    if spec_queue:
        return spec_queue
    return DEFAULT_LOCAL_QUEUE if kueue_enabled else None
