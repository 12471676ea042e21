"""GPU accounting: how many GPU-seconds each model server of a run held and used, from observation.

Why this module exists: GPU time is what an evaluation costs on a shared cluster, and an operator
that cannot say how much of it sat idle cannot be tuned. This step of the reconcile turns what is
observed — server Pods Ready since when, the run's Jobs and their start and completion times —
and the previous ``status.gpu`` into the new one (:class:`kubejury.records.gpu_usage.GpuUsage`,
the record the metrics and the aggregation Job's report read too). Pure: ``now`` is an argument.

Rules (the definitions are in :mod:`kubejury.records.gpu_usage`):

* A server's held interval opens at the ``Ready`` transition of its Pod and closes at the first
  reconcile that no longer wants it (the operator scales it to zero at that moment) or no longer
  sees a Ready Pod — at most the child-event delay late when a Pod stops being Ready on its own.
  Closed intervals only ever add up.
* Used time is the union of its Jobs' [startTime, completion] intervals; what is finished is
  never lowered again, even if someone deletes a finished Job.
* Bring-up held (GPU-seconds before Ready) is added once per Ready transition: the GPUs × the
  Ready Pod's creation → Ready time, when the transition is first seen — not again while a
  scaled-down Pod stays Ready and its closed interval gains the time it still holds the GPUs.
* A run with nothing in the cluster (external endpoints only) has no entries.
"""

from __future__ import annotations

from collections.abc import Mapping

from kubejury.records.gpu_usage import GpuUsage, ServerGpuUsage, merge_intervals
from kubejury.records.timestamps import seconds_between
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.observed import Observed
from kubejury_operator.vocabulary import Endpoint


def lead_seconds(previous: GpuUsage, observed: Observed) -> float:
    """How long a server takes to come up on these nodes: the longest bring-up (Pod creation →
    Ready) seen in this run so far, from the status and the Pods Ready now; 0 before any."""
    seen = max(observed.servers_bringup_seconds.values(), default=0.0)
    return max(previous.lead_seconds, seen)


def _role(run: ClusterRun, key: str) -> str:
    is_model = any(m.key == key and m.in_cluster for m in run.models)
    is_judge = any(j.key == key and j.in_cluster for j in run.judges)
    return "model+judge" if is_model and is_judge else ("judge" if is_judge else "model")


def account(
    run: ClusterRun,
    observed: Observed,
    desired: Mapping[str, int],
    previous: GpuUsage,
    now: str,
) -> GpuUsage:
    """The run's GPU usage after this reconcile (``desired``: replicas wanted per server key;
    ``previous``: the stored ``status.gpu`` as :class:`~kubejury.records.run_status.RunStatus`
    reads it — empty when absent or unreadable, so a status edited by hand starts the accounting
    afresh rather than failing the reconcile)."""
    before = previous.by_name()
    servers: list[ServerGpuUsage] = []
    seen: set[str] = set()
    for endpoint in (*run.models, *run.judges):
        if not endpoint.in_cluster or endpoint.key in seen:
            continue  # external, or a judge sharing a model's server (accounted under the model)
        seen.add(endpoint.key)
        servers.append(_server(run, endpoint, observed, desired, before.get(endpoint.name), now))
    return GpuUsage(tuple(servers))


def _server(
    run: ClusterRun,
    endpoint: Endpoint,
    observed: Observed,
    desired: Mapping[str, int],
    prior: ServerGpuUsage | None,
    now: str,
) -> ServerGpuUsage:
    """One server's usage: its held interval opened or closed, its Jobs' intervals merged."""
    key, placement = endpoint.key, endpoint.placement
    gpus = placement.tensor_parallel_size if placement is not None else 0
    label = vocab.label_value(key)  # how Pods and Jobs carry the key
    ready = observed.servers_ready_since.get(label)
    wanted = desired.get(key, 0) > 0

    held = prior.held_gpu_seconds if prior else 0.0
    since = prior.ready_since if prior else None
    until = prior.held_until if prior else None
    bring_up_held = prior.bring_up_gpu_seconds if prior else 0.0
    if since is None and ready is not None:
        if until is None or seconds_between(until, ready) > 0:
            # A bring-up ends at this Ready transition: its Pod held the GPUs from creation to here.
            # Not again for the transition an interval closed after (a scaled-down Pod still Ready).
            bring_up_held += gpus * observed.servers_bringup_seconds.get(label, 0.0)
        # A Ready Pod opens the interval at its Ready transition — also when this very reconcile
        # scales it down (an operator restarted late still counts that time) — but never before
        # the last close: a Pod still Ready just after its scale-down is not counted twice.
        since = min(max(ready, until) if until else ready, now)
    if since and (ready is None or not wanted):
        held += gpus * seconds_between(since, now)
        since, until = None, now

    intervals = [
        (j.started_at, j.finished_at) for j in observed.jobs.values() if j.server == label and j.started_at
    ]
    closed, in_use_since = merge_intervals(intervals, now)
    used = max(prior.used_gpu_seconds if prior else 0.0, gpus * closed)
    if since is None and in_use_since is None:
        # Jobs run only against a Ready server; Kubernetes' whole-second timestamps can make a
        # short Job look longer than the server's Ready interval.
        used = min(used, held)
    return ServerGpuUsage(
        name=endpoint.name,
        role=_role(run, key),
        gpus=gpus,
        gpu_product=placement.gpu_product if placement is not None else None,
        held_gpu_seconds=held,
        used_gpu_seconds=used,
        ready_since=since,
        in_use_since=in_use_since,
        held_until=until,
        bring_up_gpu_seconds=bring_up_held,
        bring_up_seconds=max(
            prior.bring_up_seconds if prior else 0.0, observed.servers_bringup_seconds.get(label, 0.0)
        ),
    )
