"""Watch-fed caches of the operator's children and of the Nodes: what a reconcile reads instead
of listing.

Why this module exists: listing six kinds of children per run per reconcile (and every Node while
a run is Pending) makes the API load grow with runs × ticks. kopf keeps an *index* per kind, fed by
one watch per kind for the whole operator; a reconcile reads the run's entries from memory. This
module holds the index functions (pure: an object in, its index entry out) and :class:`Caches`, the
view of those indexes that the reconcile reads. ``handlers.register`` puts the indexes on the
registry; kopf fills them before any handler runs, so a reconcile never sees a half-filled cache.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubejury_operator import vocabulary as vocab
from kubejury_operator.observed import deployment_state, job_state

# kind -> the id of its kopf index (the keyword kopf passes it to handlers under)
CHILD_INDEXES: dict[str, str] = {
    "Deployment": "kubejury_deployments",
    "Job": "kubejury_jobs",
    "Pod": "kubejury_pods",
    "Service": "kubejury_services",
    "ConfigMap": "kubejury_configmaps",
    "ServiceAccount": "kubejury_serviceaccounts",
}
NODE_INDEX = "kubejury_nodes"
# (group, version, plural) of each kind, as kopf names resources
RESOURCES: dict[str, tuple[str, str, str]] = {
    "Deployment": ("apps", "v1", "deployments"),
    "Job": ("batch", "v1", "jobs"),
    "Pod": ("", "v1", "pods"),
    "Service": ("", "v1", "services"),
    "ConfigMap": ("", "v1", "configmaps"),
    "ServiceAccount": ("", "v1", "serviceaccounts"),
    "Node": ("", "v1", "nodes"),
}
CHILD_LABELS = {vocab.LABEL_MANAGED_BY: vocab.MANAGED_BY}  # only the operator's own objects are watched
# Of the Pods, only model servers' are read (GPU time held, servers waiting for a node); a Job's
# Pods — most of a busy cluster's Pod events — are never sent to the operator.
POD_LABELS = {**CHILD_LABELS, vocab.LABEL_COMPONENT: "server"}


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def watch_label_selectors() -> dict[tuple[str, str, str], str]:
    """(group, version, plural) -> the label selector its watch sends to the API server.

    kopf filters a handler's ``labels=`` in the operator, after the API server has sent every
    object of the kind in the cluster; a selector in ``settings.watching.label_selectors`` makes
    the API server filter instead, so other teams' Jobs and Pods cost the operator nothing."""
    selectors = {RESOURCES[kind]: label_selector(CHILD_LABELS) for kind in CHILD_INDEXES if kind != "Pod"}
    selectors[RESOURCES["Pod"]] = label_selector(POD_LABELS)
    return selectors


RunLabelKey = tuple[str, str]  # (namespace, kubejury.io/run label value): a child's index key


def plain(value: Any) -> Any:
    """kopf's body views → plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


# What the observers (kubejury_operator.observed) read of a child; the rest — Pod and Job
# templates, env, volumes, managed fields — is not kept: at a hundred runs it was most of the
# operator's memory.
KEPT_METADATA = (
    "name",
    "namespace",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
)
KEPT_SPEC = ("replicas",)
KEPT_STATUS = (
    "phase",
    "conditions",
    "replicas",
    "readyReplicas",
    "startTime",
    "completionTime",
    "active",
    "succeeded",
    "failed",
)


def observed_part(body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a child the observers read (:data:`KEPT_METADATA`, ``spec.replicas``,
    :data:`KEPT_STATUS`), as plain dicts."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    part: dict[str, Any] = {
        "kind": body.get("kind"),
        "metadata": {k: plain(meta[k]) for k in KEPT_METADATA if k in meta},
        "status": {k: plain(status[k]) for k in KEPT_STATUS if k in status},
    }
    kept_spec = {k: plain(spec[k]) for k in KEPT_SPEC if k in spec}
    if kept_spec:
        part["spec"] = kept_spec
    return part


def child_entry(body: Mapping[str, Any]) -> dict[RunLabelKey, dict[str, Any]] | None:
    """The index entry of one child: keyed by (namespace, run label); ``None`` for objects that
    belong to no run. Only what the observers read is kept (:func:`observed_part`)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    run = labels.get(vocab.LABEL_RUN)
    if labels.get(vocab.LABEL_MANAGED_BY) != vocab.MANAGED_BY or not run:
        return None
    return {(str(meta.get("namespace") or ""), str(run)): observed_part(body)}


def pod_entry(body: Mapping[str, Any]) -> dict[RunLabelKey, dict[str, Any]] | None:
    """A model server's Pod as :func:`child_entry` indexes it; ``None`` for any other Pod (a Job's:
    nothing reads them, and the watch's selector keeps them away already)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    return child_entry(body) if labels.get(vocab.LABEL_COMPONENT) == "server" else None


def node_entry(body: Mapping[str, Any]) -> dict[None, dict[str, Any]]:
    """Every Node under one key: placement reads them all — their name, labels, taints,
    schedulability and allocatable resources (not their heartbeats, images or managed fields)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    return {
        None: {
            "kind": "Node",
            "metadata": {k: plain(meta[k]) for k in ("name", "labels") if k in meta},
            "spec": {k: plain(spec[k]) for k in ("taints", "unschedulable") if k in spec},
            "status": {k: plain(status[k]) for k in ("allocatable",) if k in status},
        }
    }


@dataclass(frozen=True)
class Caches:
    """The kopf indexes a handler was given, read the way a list call would answer."""

    children: Mapping[str, Mapping[Any, Iterable[Mapping[str, Any]]]]
    nodes: Mapping[Any, Iterable[Mapping[str, Any]]]

    @classmethod
    def from_handler_kwargs(cls, kwargs: Mapping[str, Any]) -> Caches | None:
        """The caches among a kopf handler's keyword arguments; ``None`` when they are not all
        there (handlers registered without indexes, e.g. in tests)."""
        wanted = [*CHILD_INDEXES.values(), NODE_INDEX]
        if not all(name in kwargs for name in wanted):
            return None
        children = {kind: kwargs[index] for kind, index in CHILD_INDEXES.items()}
        return cls(children=children, nodes=kwargs[NODE_INDEX])

    def children_of(self, kind: str, namespace: str, run_label: str) -> list[dict[str, Any]]:
        store = self.children[kind].get((namespace, run_label), ())
        return [dict(o) for o in store]

    def all_nodes(self) -> list[dict[str, Any]]:
        return [dict(o) for o in self.nodes.get(None, ())]


# The EvalRuns themselves, by (namespace, name): a child's change finds its run's latest body here.
EVALRUN_INDEX = "kubejury_evalruns"
# Kinds whose changes trigger a reconcile of their run (a Job finishing, a server becoming ready).
TRIGGER_KINDS = ("Job", "Deployment")


def evalrun_entry(body: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The run's body as kopf delivered it — a read-only view, not copied: each of the operator's
    status writes comes back as an event, and copying the whole run each time was about a tenth of
    a busy operator's CPU (the reconcile copies it once, when it runs)."""
    meta = body.get("metadata") or {}
    return {(str(meta.get("namespace") or ""), str(meta.get("name") or "")): body}


def trigger_state(kind: str, body: Mapping[str, Any]) -> Hashable:
    """What the planner reads of a Job or Deployment (:func:`~kubejury_operator.observed.job_state`,
    :func:`~kubejury_operator.observed.deployment_state`): a change of anything else — a Job's
    active or ready count, a Deployment's updated or available replicas — reconciles nothing."""
    if kind == "Job":
        return job_state(body)
    if kind == "Deployment":
        return deployment_state(body)
    return None


def owner_run(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the EvalRun that owns a child, from its controller owner reference."""
    meta = body.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "EvalRun" and str(ref.get("apiVersion", "")).startswith(f"{vocab.API_GROUP}/"):
            return str(meta.get("namespace") or ""), str(ref.get("name"))
    return None


def latest_run(
    index: Mapping[Any, Iterable[Mapping[str, Any]]], key: tuple[str, str]
) -> dict[str, Any] | None:
    """The run's body as the watch last delivered it; ``None`` when it is gone or being deleted."""
    bodies = [dict(b) for b in index.get(key, ())]
    if not bodies or (bodies[-1].get("metadata") or {}).get("deletionTimestamp"):
        return None
    return bodies[-1]
