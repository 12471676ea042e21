"""The objects the operator would create for an EvalRun, without a cluster: ``kubejury plan --manifests``.

Why this module exists: users review what an operator will do to their cluster the way they review
``helm template``, and tests assert on rendered objects rather than on builder internals. Nothing
here builds an object itself: the EvalRun is parsed and placed as the handlers do
(:func:`~kubejury_operator.placing.compute_placements`, :func:`~kubejury_operator.cluster_run.cluster_run`),
and the objects are the ``create`` actions of the operator's own planner
(:func:`~kubejury_operator.reconcile.plan`), replayed pass after pass on a simulated cluster where
every created server becomes ready and every created Job succeeds. The stream is therefore every
child object of the run, in the order the operator creates them: the spec ConfigMap, the Jobs'
ServiceAccount, the first ``maxConcurrentModels`` servers and the judges' (Deployment + Service),
then each model's generation Jobs, the next servers, the judging rounds and the aggregation Job.

The simulation is the only thing invented here, and it is what a smooth run looks like; on a real
cluster Jobs fail and retry, and judging rounds depend on which models finish first.

A run the operator would refuse gets no objects: :func:`render` first asks admission's own check
(:func:`~kubejury_operator.validation.validate_evalrun` under the cluster's allow-lists) and raises
admission's own message (:func:`~kubejury_operator.validation.admission_message`), so a preview never
shows what the operator would never create (issue 28). The allow-lists are the ``KUBEJURY_ALLOWED_*``
variables of the given settings, or, without settings, those of a default install of the chart
(:mod:`kubejury_operator.chart_defaults`). ``kubejury validate`` asks the same question through
:func:`admission_refusal`.

The engine's ``kubejury plan`` finds :func:`render` through the ``kubejury.manifests`` entry point, and
``kubejury validate`` finds :func:`admission_refusal` through ``kubejury.admission``
(``pyproject.toml``), because the engine never imports the operator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kubejury.config import spec as specmod
from kubejury.errors import InputError
from kubejury_operator.chart_defaults import default_policy_env
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.observed import (
    DeploymentState,
    Observed,
    ReuseSource,
    ReuseSources,
    deployment_state,
    job_state,
)
from kubejury_operator.reconcile import plan
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.tenancy import TenantPolicy, run_storage_uri
from kubejury_operator.validation import admission_message, validate_evalrun
from kubejury_operator.vocabulary import Manifest

PREVIEW_UID = "00000000-0000-0000-0000-000000000000"  # the API server assigns the real one
_MAX_PASSES = 10_000
_NOW = "1970-01-01T00:00:00Z"


def _evalrun_body(path: str, namespace: str) -> dict[str, Any]:
    """The EvalRun object as the API server would hand it to the operator (first reconcile)."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(path, f"cannot read the EvalRun: {exc}") from exc
    if not isinstance(document, Mapping):
        raise InputError(path, "not an EvalRun object")
    body = dict(document)
    meta = dict(body.get("metadata") or {})
    meta.setdefault("namespace", namespace)
    meta.setdefault("uid", PREVIEW_UID)
    meta.setdefault("generation", 1)
    body["metadata"] = meta
    return body


def _parse(body: Mapping[str, Any], path: str, policy: TenantPolicy) -> specmod.EvalRun:
    """The EvalRun of ``body`` if admission would admit it under ``policy``; else an error carrying
    admission's own message."""
    refusal = _refusal(body, policy)
    if refusal is not None:
        raise InputError(path, refusal)
    evalrun, problems = specmod.evalrun_problems({k: v for k, v in body.items() if k != "status"})
    if evalrun is None:  # admission found nothing wrong, so this does not happen; never render it
        raise InputError(path, admission_message(problems))
    return evalrun


def _refusal(body: Mapping[str, Any], policy: TenantPolicy) -> str | None:
    """What the admission webhook answers for ``body`` under ``policy``; ``None`` when it admits it."""
    problems = validate_evalrun(body, policy=policy)
    return admission_message(problems) if problems else None


def _policy_env(settings_env: Mapping[str, str] | None) -> Mapping[str, str]:
    """The settings whose ``KUBEJURY_ALLOWED_*`` variables apply: the given ones, else a default
    install of the chart's."""
    return default_policy_env() if settings_env is None else settings_env


def _read_settings(settings_env: Mapping[str, str], source: str) -> tuple[TenantPolicy, WorkloadSettings]:
    """The operator's allow-lists and workload settings from ``settings_env``; a value they cannot
    read is an :class:`InputError` naming ``source`` and the variable."""
    try:
        return TenantPolicy.from_env(settings_env), WorkloadSettings.from_env(settings_env)
    except ValueError as exc:
        raise InputError(source, _unreadable(settings_env, exc)) from None


def _unreadable(settings_env: Mapping[str, str], error: ValueError) -> str:
    """Which variable of ``settings_env`` the operator cannot read, found by reading each alone."""
    for key, value in settings_env.items():
        try:
            TenantPolicy.from_env({key: value})
            WorkloadSettings.from_env({key: value})
        except ValueError as exc:
            return f"{key}: cannot be read by the operator ({exc}); got {value!r}"
    return f"the operator cannot read these settings: {error}"


def admission_refusal(
    body: Mapping[str, Any],
    settings_env: Mapping[str, str] | None = None,
    settings_source: str = "--settings",
) -> str | None:
    """What the admission webhook of a cluster with these operator settings (``KUBEJURY_*``, as in
    the chart's settings ConfigMap; ``None``: a default install of the chart) answers for the EvalRun
    object ``body``: admission's own message, or ``None`` when it would admit it. ``kubejury
    validate`` calls it through the ``kubejury.admission`` entry point."""
    policy, _ = _read_settings(_policy_env(settings_env), settings_source)
    return _refusal(body, policy)


def _created(observed: Observed, manifest: Manifest) -> Observed:
    """``observed`` once a created object has done its job, read by the operator's own readers:
    a Deployment with every replica ready, a Job with condition ``Complete``."""
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    if kind == "Deployment":
        replicas = manifest["spec"].get("replicas")
        state = deployment_state({**manifest, "status": {"readyReplicas": replicas}})
        return dataclasses.replace(observed, deployments={**observed.deployments, name: state})
    if kind == "Job":
        job = job_state({**manifest, "status": {"conditions": [{"type": "Complete", "status": "True"}]}})
        return dataclasses.replace(observed, jobs={**observed.jobs, name: job})
    return dataclasses.replace(observed, present=observed.present | {(kind, name)})


def _scaled(observed: Observed, name: str, replicas: int) -> Observed:
    state = DeploymentState(replicas=replicas, ready_replicas=replicas)
    return dataclasses.replace(observed, deployments={**observed.deployments, name: state})


#: What stands for a source run's uid in a preview: the operator reads it from the EvalRun.
PREVIEW_SOURCE_UID = "<uid>"


def preview_sources(run: ClusterRun) -> ReuseSources:
    """The runs ``spec.reuse.from`` names as the reuse Job would be given them, their uid unknown
    without a cluster (:data:`PREVIEW_SOURCE_UID`)."""
    root = run.storage.root or run.storage.uri
    return ReuseSources(
        usable=tuple(
            ReuseSource(name, run_storage_uri(root, run.ref.namespace, name, PREVIEW_SOURCE_UID))
            for name in dict.fromkeys(run.reuse_from)
        )
    )


def simulate(run: ClusterRun) -> list[Manifest]:
    """Every object the planner creates for ``run`` while servers come up and Jobs succeed, in order
    (for a run that reuses earlier runs: the reuse Job first, then everything as if it had copied
    nothing — what it copies is known only when it ran)."""
    observed = Observed(reuse_sources=preview_sources(run))
    status: dict[str, Any] = {}
    created: list[Manifest] = []
    for _ in range(_MAX_PASSES):
        decided = plan(run, observed, status, _NOW)
        for action in decided.actions:
            if action.verb == "create" and action.manifest is not None:
                created.append(action.manifest)
                observed = _created(observed, action.manifest)
            elif action.verb == "scale" and action.kind == "Deployment":
                observed = _scaled(observed, action.name, action.replicas or 0)
        status = decided.status
        if not decided.actions or decided.phase in ("Succeeded", "Failed"):
            return created
    raise RuntimeError(f"the planner did not settle after {_MAX_PASSES} passes")


def render(
    evalrun_path: str,
    nodes: Any,
    settings_env: Mapping[str, str] | None,
    namespace: str = "default",
    settings_source: str = "--settings",
) -> list[Manifest]:
    """The child objects for the EvalRun file at ``evalrun_path`` on ``nodes`` (``kubectl get nodes -o
    json``), with the operator settings ``settings_env`` (``KUBEJURY_*``, as in the chart's settings
    ConfigMap, read from ``settings_source``; unset ones keep the operator's defaults, and a mapping
    without ``KUBEJURY_ALLOWED_*`` is an operator installed without the chart). ``None``: the
    operator's defaults under the allow-lists of a default install of the chart. A run admission
    would refuse raises :class:`InputError` with admission's message, and nothing is rendered."""
    from kubejury_operator.placing import compute_placements

    policy, _ = _read_settings(_policy_env(settings_env), settings_source)
    _, workload = _read_settings(settings_env or {}, settings_source)
    body = _evalrun_body(evalrun_path, namespace)
    evalrun = _parse(body, evalrun_path, policy)
    items = nodes.get("items") if isinstance(nodes, Mapping) and "items" in nodes else nodes
    node_list = items if isinstance(items, list) else [nodes]
    placements = compute_placements(evalrun, node_list, workload.extra_tolerations)
    run = cluster_run(body, evalrun, placements, workload)
    return simulate(run)
