"""What Kueue says of a queued run: its LocalQueue, the ClusterQueue behind it, and the Workloads
of its Jobs and model-server Pods, reduced to the frozen values the planner and the status read.

Why this module exists: a run admitted through Kueue (``spec.queueName``, or the chart's
``kueue.enabled``) waits for quota in objects the operator does not own. Reading them — which
condition of a Workload says it waits and why, which flavour a ClusterQueue has used up — happens
here and nowhere else, as :mod:`.observed` does for the operator's own children; the requests are
made by :func:`kubejury_operator.observe.observe_queue`. Pure. The operator never writes a Kueue
object: its RBAC on them is read-only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The API group and version read (v1beta2 is Kueue 0.17's storage version: no conversion call).
KUEUE_API = "kueue.x-k8s.io/v1beta2"

_FLAVOUR = re.compile(r"in flavor ([A-Za-z0-9._-]+)")


@dataclass(frozen=True)
class FlavourUse:
    """One resource of one flavour of a ClusterQueue: what is reserved now against its quota."""

    flavour: str
    resource: str
    in_use: str  # status.flavorsReservation total (what admitted and reserving Workloads hold)
    quota: str  # spec nominalQuota


@dataclass(frozen=True)
class PendingWorkload:
    """A Workload of the run that holds no quota: whose it is, what it asks for, and why it waits."""

    owner: str  # "model-server <endpoint key>" or "Job <name>"
    requests: tuple[tuple[str, str], ...]  # (resource, quantity) of its pod sets, GPUs first
    reason: str  # QuotaReserved's reason: Pending, Inadmissible, or Evicted
    message: str  # Kueue's own words ("couldn't assign flavors … insufficient unused quota …")

    def flavour(self, resource: str) -> str | None:
        """The flavour Kueue's message names for ``resource`` (``… for nvidia.com/gpu in flavor
        h100 …``), else the first flavour it names at all."""
        found = re.search(rf"for {re.escape(resource)} in flavor ([A-Za-z0-9._-]+)", self.message)
        found = found or _FLAVOUR.search(self.message)
        return found.group(1) if found else None


@dataclass(frozen=True)
class QueueState:
    """The run's queue as read this reconcile. ``found`` False: the LocalQueue does not exist in the
    run's namespace. ``error``: the Kueue objects could not be read (no RBAC: the chart's
    ``kueue.enabled`` is off; Kueue not installed), so nothing else is known."""

    local_queue: str
    found: bool = True
    cluster_queue: str | None = None
    usage: tuple[FlavourUse, ...] = ()
    pending: tuple[PendingWorkload, ...] = ()
    error: str | None = None


def local_queue_target(obj: Mapping[str, Any] | None) -> str | None:
    """The ClusterQueue a LocalQueue points at (``spec.clusterQueue``); ``None`` for no object."""
    if obj is None:
        return None
    return str((obj.get("spec") or {}).get("clusterQueue") or "") or None


def _quotas(obj: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(flavour, resource) → nominalQuota, from ``spec.resourceGroups``."""
    quotas: dict[tuple[str, str], str] = {}
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for flavour in group.get("flavors") or []:
            for resource in flavour.get("resources") or []:
                key = (str(flavour.get("name") or ""), str(resource.get("name") or ""))
                quotas[key] = str(resource.get("nominalQuota") or "0")
    return quotas


def _reserved(obj: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(flavour, resource) → total reserved, from ``status.flavorsReservation``."""
    reserved: dict[tuple[str, str], str] = {}
    for flavour in (obj.get("status") or {}).get("flavorsReservation") or []:
        for resource in flavour.get("resources") or []:
            key = (str(flavour.get("name") or ""), str(resource.get("name") or ""))
            reserved[key] = str(resource.get("total") or "0")
    return reserved


def cluster_queue_usage(obj: Mapping[str, Any] | None) -> tuple[FlavourUse, ...]:
    """Every (flavour, resource) a ClusterQueue has a quota for, with what is reserved of it now."""
    if obj is None:
        return ()
    reserved = _reserved(obj)
    return tuple(
        FlavourUse(flavour=f, resource=r, in_use=reserved.get((f, r), "0"), quota=quota)
        for (f, r), quota in _quotas(obj).items()
    )


def _condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c  # type: ignore[no-any-return]
    return None


def _is_true(obj: Mapping[str, Any], ctype: str) -> bool:
    found = _condition(obj, ctype)
    return found is not None and found.get("status") == "True"


def _requests(obj: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What the Workload's pod sets ask for (``status.resourceRequests``), GPUs first."""
    found: dict[str, str] = {}
    for podset in (obj.get("status") or {}).get("resourceRequests") or []:
        for name, quantity in (podset.get("resources") or {}).items():
            found.setdefault(str(name), str(quantity))
    return tuple(sorted(found.items(), key=lambda item: ("gpu" not in item[0], item[0])))


def _owner(obj: Mapping[str, Any], jobs: Iterable[str], server_pods: Mapping[str, str]) -> str | None:
    """Whose Workload this is, among the run's Jobs and model-server Pods (its controller owner
    reference, which Kueue sets to the Job or the Pod); ``None`` for anyone else's."""
    job_names = set(jobs)
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "Job" and name in job_names:
            return f"Job {name}"
        if kind == "Pod" and name in server_pods:
            return f"model-server {server_pods[name]}"
    return None


def pending_workload(
    obj: Mapping[str, Any], jobs: Iterable[str], server_pods: Mapping[str, str]
) -> PendingWorkload | None:
    """The Workload as a :class:`PendingWorkload` when it belongs to the run and holds no quota
    (``QuotaReserved`` not True, or ``Evicted``); ``None`` when it is admitted or someone else's."""
    owner = _owner(obj, jobs, server_pods)
    if owner is None or _is_true(obj, "Finished"):
        return None
    evicted = _condition(obj, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        reason, message = (
            "Evicted",
            f"evicted ({evicted.get('reason') or ''}): {evicted.get('message') or ''}",
        )
    elif _is_true(obj, "QuotaReserved"):
        return None
    else:
        reserved = _condition(obj, "QuotaReserved") or {}
        reason = str(reserved.get("reason") or "Pending")
        message = str(reserved.get("message") or "waiting for the scheduler")
    return PendingWorkload(owner=owner, requests=_requests(obj), reason=reason, message=message[:300])


def pending_workloads(
    workloads: Sequence[Mapping[str, Any]], jobs: Iterable[str], server_pods: Mapping[str, str]
) -> tuple[PendingWorkload, ...]:
    """The run's Workloads that hold no quota, model servers first, then by owner."""
    jobs = tuple(jobs)
    found = [p for w in workloads if (p := pending_workload(w, jobs, server_pods)) is not None]
    return tuple(sorted(found, key=lambda p: (not p.owner.startswith("model-server"), p.owner)))
