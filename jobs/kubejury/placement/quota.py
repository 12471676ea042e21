"""A Kueue ClusterQueue's GPU quota, and what an EvalRun can do under it.

Why this module exists: on a shared cluster the GPUs a run may hold are not the nodes' but a
Kueue ClusterQueue's nominal quota, per ResourceFlavor (issue 25). ``kubejury plan --estimate
--queue NAME`` must then say how many evaluated models can hold GPUs at once
(``maxConcurrentModels``), when the first server can start given what other workloads use now,
and which placements the queue cannot admit at all. This module is the pure part of that:

* :func:`parse_quota` reads a ClusterQueue (``kueue.x-k8s.io`` v1beta2, or v1beta1's ``cohort``),
  the ResourceFlavors it names and optionally the LocalQueue pointing at it, into a typed
  :class:`Quota` of the ``nvidia.com/gpu`` resource group: per flavour its nominal quota, what is
  in use now (``status.flavorsUsage``, or ``flavorsReservation`` when larger: reserved quota is
  taken too) and its ``nodeLabels``/``nodeTaints``;
* :meth:`Quota.matching` is Kueue's flavour choice (``flavorassigner``): a server's node selector,
  restricted to the label keys the group's flavours use, must be satisfied by the flavour's
  ``nodeLabels``, and the flavour's NoSchedule/NoExecute ``nodeTaints`` must be tolerated;
* :func:`gpu_servers` lists the run's GPU servers (evaluated models count against
  ``maxConcurrentModels``; judges' servers and models that are also judges do not);
* :func:`fit_quota` picks the largest ``maxConcurrentModels`` whose simultaneous GPU need fits the
  nominal quota, and the start condition.

The schedule and the hours stay in :mod:`kubejury.placement.estimate`: the command re-estimates at
the concurrency chosen here. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubejury.config.spec import EvalRunSpec
from kubejury.placement.gpu_nodes import GPU_RESOURCE, parse_quantity, tolerates
from kubejury.records.placement import Placement
from kubejury.runtimes import judge_placement, judge_shares_server

KUEUE_GROUP = "kueue.x-k8s.io"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")  # the taint effects Kueue checks a flavour for
#: Every GPU server the operator deploys tolerates the GPU taint, whatever the nodes file said.
SERVER_GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
UNBOUNDED = 10**9  # room of a flavour when counting what servers would need, fitting or not

Role = Literal["model", "judge", "model+judge"]


# ----------------------------------------------------------------------------------------------
# The quota
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    """One ResourceFlavor of the ClusterQueue's GPU resource group, with its GPU quota.

    ``node_labels`` is ``None`` when no ResourceFlavor object of that name was given: its labels,
    and so the GPUs it stands for, are unknown and it matches no server."""

    name: str
    nominal: int
    used: int = 0
    node_labels: Mapping[str, str] | None = None
    node_taints: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @property
    def free(self) -> int:
        """GPUs of the nominal quota nobody uses now (none while the queue borrows beyond it)."""
        return max(0, self.nominal - self.used)

    def labels_text(self) -> str:
        if self.node_labels is None:
            return "no ResourceFlavor given: labels unknown"
        if not self.node_labels:
            return "no nodeLabels"
        return ", ".join(f"{k}={v}" for k, v in sorted(self.node_labels.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "node_labels": None if self.node_labels is None else dict(self.node_labels),
            "nominal": self.nominal,
            "used": self.used,
            "free": self.free,
        }


@dataclass(frozen=True)
class Quota:
    """The ``nvidia.com/gpu`` quota of one ClusterQueue (flavours in the queue's order, the order
    Kueue tries them in) and what its status says about other workloads."""

    cluster_queue: str
    flavors: tuple[Flavor, ...]
    local_queue: str | None = None
    cohort: str | None = None
    has_usage: bool = False  # the object carried status.flavorsUsage / flavorsReservation
    pending_workloads: int = 0
    admitted_workloads: int = 0

    @property
    def label_keys(self) -> frozenset[str]:
        """The node-label keys the GPU group's flavours use: Kueue compares only these."""
        return frozenset(k for f in self.flavors for k in (f.node_labels or {}))

    def matching(self, placement: Placement) -> tuple[Flavor, ...]:
        """The flavours Kueue could assign a server of this placement, in the order it tries them."""
        keys = self.label_keys
        wanted = {k: v for k, v in placement.node_selector.items() if k in keys}
        return tuple(
            f
            for f in self.flavors
            if f.node_labels is not None
            and all(f.node_labels.get(k) == v for k, v in wanted.items())
            and _tolerated(f, placement)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "local_queue": self.local_queue,
            "cluster_queue": self.cluster_queue,
            "cohort": self.cohort,
            "resource": GPU_RESOURCE,
            "flavors": [f.to_json() for f in self.flavors],
            "usage_known": self.has_usage,
            "pending_workloads": self.pending_workloads,
            "admitted_workloads": self.admitted_workloads,
        }


def _tolerated(flavor: Flavor, placement: Placement) -> bool:
    """Every blocking taint of the flavour's nodes is tolerated by the server (the GPU taint and
    its placement's tolerations) or by the flavour's own tolerations (which Kueue adds to the pod)."""
    given = [SERVER_GPU_TOLERATION, *placement.tolerations, *flavor.tolerations]
    return all(
        any(tolerates(t, taint) for t in given)
        for taint in flavor.node_taints
        if str(taint.get("effect") or "") in BLOCKING_EFFECTS
    )


# ----------------------------------------------------------------------------------------------
# Parsing Kueue objects
# ----------------------------------------------------------------------------------------------


def kueue_objects(documents: Iterable[Any]) -> list[Mapping[str, Any]]:
    """Every object of the documents, ``List``s (``kubectl get … -o yaml``) flattened."""
    found: list[Mapping[str, Any]] = []
    for doc in documents:
        if not isinstance(doc, Mapping):
            continue
        items = doc.get("items")
        if isinstance(items, list) and str(doc.get("kind", "")).endswith("List"):
            found.extend(kueue_objects(items))
        elif doc.get("kind"):
            found.append(doc)
    return found


def _of_kind(objects: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [
        o for o in objects if o.get("kind") == kind and KUEUE_GROUP in str(o.get("apiVersion", KUEUE_GROUP))
    ]


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def _map(obj: Any, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def gpu_count(value: object, where: str) -> int:
    """A quota of GPUs: a whole, non-negative Kubernetes quantity (``8``, ``"8"``, ``"1k"``)."""
    number = parse_quantity(value)
    if number is None or number < 0 or abs(number - round(number)) > 1e-9:
        raise ValueError(f"{where}: {value!r} is not a whole number of GPUs")
    return round(number)


def _pick_cluster_queue(
    queues: Sequence[Mapping[str, Any]], locals_: Sequence[Mapping[str, Any]], local_queue: str | None
) -> Mapping[str, Any]:
    """The ClusterQueue behind ``local_queue`` (by a LocalQueue object when one is given), else the only one."""
    by_name = {_name(q): q for q in queues}
    local = next((q for q in locals_ if _name(q) == local_queue), None)
    if local is not None:
        target = str(_map(local, "spec").get("clusterQueue", ""))
        if target not in by_name:
            raise ValueError(
                f"LocalQueue {local_queue} points at ClusterQueue {target!r}, which is not given"
            )
        return by_name[target]
    if len(queues) == 1:
        return queues[0]
    if not queues:
        raise ValueError("no ClusterQueue (kind: ClusterQueue, apiVersion kueue.x-k8s.io/…) is given")
    raise ValueError(
        f"{len(queues)} ClusterQueues are given ({', '.join(sorted(by_name))}): add the LocalQueue "
        f"{local_queue or 'NAME'} (with --queue NAME) to say which one the run uses"
    )


def _used(status: Mapping[str, Any], flavor: str, where: str) -> int:
    """GPUs of ``flavor`` in use: the larger of flavorsUsage and flavorsReservation (quota reserved
    by workloads waiting for admission checks is taken as well)."""
    used = 0
    for key in ("flavorsUsage", "flavorsReservation"):
        for entry in _list(status, key):
            if isinstance(entry, Mapping) and entry.get("name") == flavor:
                for resource in _list(entry, "resources"):
                    if isinstance(resource, Mapping) and resource.get("name") == GPU_RESOURCE:
                        used = max(used, gpu_count(resource.get("total", 0), f"{where}.{key}[{flavor}]"))
    return used


def _flavor(
    entry: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]], status: Mapping[str, Any], where: str
) -> Flavor:
    name = str(entry.get("name", ""))
    nominal = 0
    for resource in _list(entry, "resources"):
        if isinstance(resource, Mapping) and resource.get("name") == GPU_RESOURCE:
            nominal = gpu_count(resource.get("nominalQuota", 0), f"{where}.flavors[{name}].nominalQuota")
    spec = specs.get(name)
    labels = None if spec is None else {str(k): str(v) for k, v in _map(spec, "nodeLabels").items()}
    return Flavor(
        name=name,
        nominal=nominal,
        used=_used(status, name, "status"),
        node_labels=labels,
        node_taints=tuple(t for t in _list(spec, "nodeTaints") if isinstance(t, Mapping)),
        tolerations=tuple(t for t in _list(spec, "tolerations") if isinstance(t, Mapping)),
    )


def parse_quota(documents: Iterable[Any], local_queue: str | None = None) -> Quota:
    """The GPU quota of the ClusterQueue behind ``local_queue`` among ``documents`` (a ClusterQueue,
    the ResourceFlavors it names, optionally LocalQueues; ``List``s are read through). A problem is
    a ValueError saying what is missing."""
    objects = kueue_objects(documents)
    queue = _pick_cluster_queue(
        _of_kind(objects, "ClusterQueue"), _of_kind(objects, "LocalQueue"), local_queue
    )
    if not _name(queue):
        raise ValueError("the ClusterQueue has no metadata.name")
    spec, status = _map(queue, "spec"), _map(queue, "status")
    specs = {_name(f): _map(f, "spec") for f in _of_kind(objects, "ResourceFlavor")}
    group: Any = next(
        (g for g in _list(spec, "resourceGroups") if GPU_RESOURCE in _list(g, "coveredResources")), {}
    )
    flavors = tuple(
        _flavor(e, specs, status, "spec.resourceGroups")
        for e in _list(group, "flavors")
        if isinstance(e, Mapping)
    )
    cohort = spec.get("cohortName") or spec.get("cohort")  # v1beta2 / v1beta1
    return Quota(
        cluster_queue=_name(queue),
        flavors=flavors,
        local_queue=local_queue,
        cohort=str(cohort) if cohort else None,
        has_usage=bool(_list(status, "flavorsUsage") or _list(status, "flavorsReservation")),
        pending_workloads=_int(status.get("pendingWorkloads")),
        admitted_workloads=_int(status.get("admittedWorkloads")),
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# ----------------------------------------------------------------------------------------------
# The run's GPU servers
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuServer:
    """A model server of the run that requests ``nvidia.com/gpu``. Only ``model`` servers count
    against ``maxConcurrentModels``; a judge's, and a model that is also a judge, are outside it."""

    name: str
    role: Role
    gpus: int
    placement: Placement


def _gpu_placement(placement: Placement | None) -> bool:
    return (
        placement is not None
        and placement.schedulable
        and bool(placement.gpu_product)
        and placement.tensor_parallel_size > 0
    )


def gpu_servers(
    spec: EvalRunSpec,
    placements: Mapping[str, Placement],
    work: Mapping[tuple[str, str], bool],
    order: Sequence[str] = (),
) -> tuple[GpuServer, ...]:
    """The run's GPU servers with work to do (``work[(name, "generation"|"judging")]``, as the
    estimate's stages say; missing means yes): evaluated models in bring-up ``order`` (then spec
    order), then models that are also judges, then judges' own servers."""
    models = {m.name: m for m in spec.models}
    shared: dict[str, bool] = {}  # model serving a judge too → any work on that server
    judges: list[GpuServer] = []
    for judge in spec.judges:
        twin = models.get(judge.same_as) if judge.same_as else None
        busy = work.get((judge.name, "judging"), True)
        if twin is not None and judge_shares_server(twin, judge):
            shared[twin.name] = shared.get(twin.name, False) or busy
            continue
        placement = judge_placement(placements, judge.name)
        if placement is not None and _gpu_placement(placement) and busy:
            judges.append(GpuServer(judge.name, "judge", placement.tensor_parallel_size, placement))
    ranked = [*(n for n in order if n in models), *(n for n in models if n not in order)]
    evaluated: list[GpuServer] = []
    both: list[GpuServer] = []
    for name in ranked:
        placement = placements.get(name)
        if placement is None or not _gpu_placement(placement):
            continue
        generates = work.get((name, "generation"), True)
        if name in shared:
            if generates or shared[name]:
                both.append(GpuServer(name, "model+judge", placement.tensor_parallel_size, placement))
        elif generates:
            evaluated.append(GpuServer(name, "model", placement.tensor_parallel_size, placement))
    return (*evaluated, *both, *judges)


# ----------------------------------------------------------------------------------------------
# Fitting maxConcurrentModels and the start condition
# ----------------------------------------------------------------------------------------------


def assign(servers: Sequence[GpuServer], quota: Quota, room: Mapping[str, int]) -> dict[str, int] | None:
    """GPUs each flavour gives when ``servers`` hold GPUs together, largest first, each on the first
    matching flavour (Kueue's order) with room left; ``None`` when one of them finds none."""
    left = dict(room)
    for server in sorted(servers, key=lambda s: -s.gpus):
        flavor = next(
            (f for f in quota.matching(server.placement) if left.get(f.name, 0) >= server.gpus), None
        )
        if flavor is None:
            return None
        left[flavor.name] -= server.gpus
    return {name: room[name] - left[name] for name in room if room[name] != left[name]}


def worst_case(servers: Sequence[GpuServer], quota: Quota, concurrency: int) -> list[GpuServer]:
    """The servers that may hold GPUs together at ``concurrency``: every server outside the budget
    (judges' may all be up at once) and, among evaluated models that compete for the same
    flavours, the ``concurrency`` largest."""
    chosen = [s for s in servers if s.role != "model"]
    groups: dict[tuple[str, ...], list[GpuServer]] = {}
    for server in servers:
        if server.role == "model":
            groups.setdefault(tuple(f.name for f in quota.matching(server.placement)), []).append(server)
    for members in groups.values():
        chosen += sorted(members, key=lambda s: -s.gpus)[:concurrency]
    return chosen


def largest_fitting(servers: Sequence[GpuServer], quota: Quota, room: Mapping[str, int]) -> int:
    """The largest concurrency (1 … evaluated models) whose worst case fits ``room``; 0 if none does."""
    count = sum(1 for s in servers if s.role == "model")
    for concurrency in range(count, 0, -1):
        if assign(worst_case(servers, quota, concurrency), quota, room) is not None:
            return concurrency
    return 0


@dataclass(frozen=True)
class QuotaFit:
    """What the quota allows the run: see :func:`fit_quota`."""

    quota: Quota
    servers: tuple[GpuServer, ...]
    max_concurrent_models: int  # the concurrency to run (and estimate) with
    spec_max_concurrent_models: int
    need: Mapping[str, int]  # GPUs per flavour at that concurrency, at worst
    need_one_more: Mapping[str, int] | None  # …and at one more (None: no more models, or it cannot be placed)
    fits: bool  # the worst case fits the nominal quota (False: servers take turns)
    now: int  # the concurrency the quota free right now holds (0: less than that)
    first: GpuServer | None = None
    wait: tuple[str, int] | None = None  # (flavour, GPUs) to be freed before the first server starts
    uncoverable: tuple[tuple[str, str], ...] = ()  # (server, why) the queue never admits
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def can_run(self) -> bool:
        return not self.uncoverable

    def to_json(self) -> dict[str, Any]:
        return {
            **self.quota.to_json(),
            "max_concurrent_models": self.max_concurrent_models,
            "spec_max_concurrent_models": self.spec_max_concurrent_models,
            "gpus_at_once": dict(self.need),
            "gpus_at_one_more": None if self.need_one_more is None else dict(self.need_one_more),
            "fits": self.fits,
            "concurrency_free_now": self.now,
            "servers": [
                {
                    "name": s.name,
                    "role": s.role,
                    "gpus": s.gpus,
                    "gpu_product": s.placement.gpu_product,
                    "flavors": [f.name for f in self.quota.matching(s.placement)],
                }
                for s in self.servers
            ],
            "first_server": None if self.first is None else self.first.name,
            "waits_for": None if self.wait is None else {"flavor": self.wait[0], "gpus": self.wait[1]},
            "not_coverable": [{"name": n, "reason": r} for n, r in self.uncoverable],
            "notes": list(self.notes),
        }


def _uncoverable(servers: Sequence[GpuServer], quota: Quota) -> list[tuple[str, str]]:
    """Servers no flavour of the queue admits: no matching flavour, or a nominal quota too small."""
    found = []
    for server in servers:
        flavors = quota.matching(server.placement)
        if not flavors:
            found.append(
                (
                    server.name,
                    f"{server.placement.gpu_product} matches no flavour of ClusterQueue "
                    f"{quota.cluster_queue} ({_flavor_list(quota)})",
                )
            )
        elif max(f.nominal for f in flavors) < server.gpus:
            found.append(
                (
                    server.name,
                    f"needs {server.gpus} GPUs at once; the largest nominal quota of its flavours "
                    f"({', '.join(f.name for f in flavors)}) is {max(f.nominal for f in flavors)}",
                )
            )
    return found


def _flavor_list(quota: Quota) -> str:
    if not quota.flavors:
        return f"it has no quota for {GPU_RESOURCE}"
    return "; ".join(f"{f.name}: {f.labels_text()}" for f in quota.flavors)


def _wait(first: GpuServer, quota: Quota) -> tuple[str, int] | None:
    """The flavour, and GPUs of it, to be freed before ``first`` can be admitted (None: it fits now)."""
    flavors = quota.matching(first.placement)
    if any(f.free >= first.gpus for f in flavors):
        return None
    best = max(flavors, key=lambda f: f.free)  # the first of the most free, in Kueue's order
    return best.name, first.gpus - best.free


def _notes(quota: Quota) -> list[str]:
    notes = []
    if not quota.has_usage:
        notes.append("no status.flavorsUsage given: every GPU of the quota is taken as free now")
    if quota.pending_workloads:
        notes.append(
            f"{quota.pending_workloads} workload(s) already wait in ClusterQueue {quota.cluster_queue}: "
            "with its queueing strategy they may take freed GPUs before this run"
        )
    if quota.cohort:
        notes.append(
            f"ClusterQueue {quota.cluster_queue} is in cohort {quota.cohort}: it may borrow idle GPUs of "
            "other queues (sooner, more at once) or lend its own; the estimate counts the nominal quota only"
        )
    return notes


def fit_quota(
    spec: EvalRunSpec,
    placements: Mapping[str, Placement],
    quota: Quota,
    work: Mapping[tuple[str, str], bool],
    order: Sequence[str] = (),
) -> QuotaFit:
    """The largest ``maxConcurrentModels`` whose simultaneous GPU need fits the nominal quota of the
    flavours the servers' placements use, and when the run can start.

    The need at a concurrency is a worst case, not the estimated schedule's peak: every judge's
    server up at once with the largest evaluated models (the bring-up of the next model during the
    tail of the one whose slot it takes is left out; under a full quota Kueue keeps that server
    gated until the GPUs are freed, a bring-up later). When even one model with the judges does
    not fit, the concurrency is 1 and the servers take turns. The start condition: the first
    server in bring-up ``order`` must fit the quota left free by ``status.flavorsUsage``.
    """
    servers = gpu_servers(spec, placements, work, order)
    uncoverable = _uncoverable(servers, quota)
    placeable = [s for s in servers if s.name not in {n for n, _ in uncoverable}]
    nominal = {f.name: f.nominal for f in quota.flavors}
    models = sum(1 for s in placeable if s.role == "model")
    best = largest_fitting(placeable, quota, nominal) if models else spec.max_concurrent_models
    chosen = max(1, best)
    unbounded = dict.fromkeys(nominal, UNBOUNDED)
    at_chosen = worst_case(placeable, quota, chosen)
    need = assign(at_chosen, quota, nominal) or assign(at_chosen, quota, unbounded) or {}
    more = assign(worst_case(placeable, quota, chosen + 1), quota, unbounded) if chosen < models else None
    first = next(iter(placeable), None)
    free = {f.name: f.free for f in quota.flavors}
    return QuotaFit(
        quota=quota,
        servers=servers,
        max_concurrent_models=chosen,
        spec_max_concurrent_models=spec.max_concurrent_models,
        need=need,
        need_one_more=more,
        fits=best > 0 or (not models and assign(placeable, quota, nominal) is not None),
        now=largest_fitting(placeable, quota, free) if models else chosen,
        first=first,
        wait=None if first is None else _wait(first, quota),
        uncoverable=tuple(uncoverable),
        notes=tuple(_notes(quota)),
    )
