"""kopf handlers: thin glue between kopf, the gateway, storage and the pure planner.

Why this module exists: kopf decides *when* to act; :mod:`kubejury_operator.reconcile` decides
*what* to do; :mod:`kubejury_operator.gateway` does it. This module wires them and nothing else.

* ``@kopf.timer`` every ``KUBEJURY_RECONCILE_INTERVAL`` seconds (default 15) per EvalRun, starting
  immediately when a run appears or the operator starts: one level-triggered reconcile — observe
  children, nodes, secrets and progress records, plan, apply, patch ``status``, post Events. The
  same code path serves create, resume after an operator restart, and every later change, so a
  restart at any point resumes the run without redoing finished work.
* ``@kopf.on.delete`` (kopf's finalizer ``kubejury.io/finalizer``): deletes the run's children
  (owner references make the cluster's garbage collector do the same; deleting explicitly frees
  GPUs at once and does not depend on it) and, only with ``spec.cleanupPolicy: Delete``, the
  run's stored results.
* ``@kopf.on.validate`` (only when ``KUBEJURY_WEBHOOK_PORT`` is set): the validating admission
  webhook, calling :mod:`.validation`.
* ``@kopf.on.startup``/``login``/``cleanup``: settings, API credentials for the gateway.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from kubejury.config import spec as specmod
from kubejury_operator import manifests as mf
from kubejury_operator import metrics
from kubejury_operator.gateway import ApiCredentials, GatewayError, KubeGateway
from kubejury_operator.reconcile import (
    DeploymentState,
    JobState,
    Observed,
    PlacementDecision,
    ProgressKey,
    ProgressRecord,
    RunInputs,
    collect_progress,
    deployment_state,
    job_state,
    plan,
    pod_scheduling_problems,
    progress_key,
    run_inputs,
    summary_from_report,
)

GROUP = mf.API_GROUP
VERSION = mf.API_VERSION
PLURAL = "evalruns"
FINALIZER = "kubejury.io/finalizer"
RECONCILE_INTERVAL = float(os.environ.get("KUBEJURY_RECONCILE_INTERVAL", "15"))
CHILD_KINDS = ("Job", "Deployment", "Service", "ConfigMap", "ServiceAccount")


@dataclass
class OperatorRuntime:
    """Process-wide state shared by all handlers through kopf's memo (never per-run state)."""

    settings: mf.WorkloadSettings
    credentials: ApiCredentials | None = None
    closed: bool = False
    _gateway: KubeGateway | None = field(default=None, repr=False)

    def gateway(self) -> KubeGateway:
        if self.closed:  # a handler kopf left running past shutdown must not open a new session
            raise kopf.TemporaryError("the operator is shutting down", delay=60)
        if self.credentials is None:
            raise kopf.TemporaryError("no Kubernetes API credentials yet", delay=5)
        if self._gateway is None or self._gateway.credentials != self.credentials:
            self._gateway = KubeGateway(self.credentials)
        return self._gateway

    async def close(self) -> None:
        self.closed = True
        if self._gateway is not None:
            await self._gateway.close()
            self._gateway = None


def _runtime(memo: Any) -> OperatorRuntime:
    runtime = getattr(memo, "kubejury", None)
    if not isinstance(runtime, OperatorRuntime):
        raise kopf.TemporaryError("operator runtime not initialised yet", delay=5)
    return runtime


def _plain(value: Any) -> Any:
    """kopf's body views → plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------- operator lifecycle


async def configure(settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    memo.kubejury = OperatorRuntime(settings=mf.WorkloadSettings.from_env(os.environ))
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubejury.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kubejury.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events tell the story; kopf's only for problems
    settings.watching.server_timeout = int(os.environ.get("KUBEJURY_WATCH_TIMEOUT", "300"))
    configure_admission(settings, os.environ)
    logger.info("kubejury operator configured; reconcile interval %ss", RECONCILE_INTERVAL)


def configure_admission(settings: kopf.OperatorSettings, env: Mapping[str, str]) -> None:
    """Serve the validating webhook when ``KUBEJURY_WEBHOOK_PORT`` is set.

    ``KUBEJURY_WEBHOOK_CERT``/``KUBEJURY_WEBHOOK_KEY`` (e.g. from cert-manager) are used when given,
    else kopf generates a self-signed certificate for ``KUBEJURY_WEBHOOK_HOST`` (the Service's DNS
    name). ``KUBEJURY_WEBHOOK_MANAGED`` names a ValidatingWebhookConfiguration kopf keeps in sync
    itself (with the self-signed CA); leave it empty when the Helm chart owns that object.
    """
    port = env.get("KUBEJURY_WEBHOOK_PORT")
    if not port:
        return
    settings.admission.server = kopf.WebhookServer(
        addr=env.get("KUBEJURY_WEBHOOK_ADDR", "0.0.0.0"),
        port=int(port),
        host=env.get("KUBEJURY_WEBHOOK_HOST") or None,
        certfile=env.get("KUBEJURY_WEBHOOK_CERT") or None,
        pkeyfile=env.get("KUBEJURY_WEBHOOK_KEY") or None,
    )
    managed = env.get("KUBEJURY_WEBHOOK_MANAGED")
    if managed:
        settings.admission.managed = managed


def login(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """API credentials: ``KUBEJURY_KUBE_SERVER`` (+ ``KUBEJURY_KUBE_TOKEN``) when set (tests, dev),
    else the Pod's service account, else the local kubeconfig. The gateway uses the same ones."""
    server = os.environ.get("KUBEJURY_KUBE_SERVER")
    info: kopf.ConnectionInfo | None
    if server:
        info = kopf.ConnectionInfo(
            server=server,
            token=os.environ.get("KUBEJURY_KUBE_TOKEN") or None,
            insecure=os.environ.get("KUBEJURY_KUBE_INSECURE", "").lower() in ("1", "true", "yes"),
            default_namespace="default",
        )
    else:
        info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    runtime = getattr(memo, "kubejury", None)
    if info is not None and isinstance(runtime, OperatorRuntime):
        runtime.credentials = ApiCredentials.from_connection_info(info)
    return info


async def shutdown(memo: Any, **_: Any) -> None:
    runtime = getattr(memo, "kubejury", None)
    if isinstance(runtime, OperatorRuntime):
        await runtime.close()


# ------------------------------------------------------------------------------- observation


def _secret_refs(spec: specmod.EvalRunSpec) -> list[tuple[str, str | None]]:
    """(secret name, key or None) the run needs present before anything starts."""
    refs: list[tuple[str, str | None]] = []
    for entry in spec.all_endpoints():
        if entry.api_key_secret_ref is not None:
            refs.append((entry.api_key_secret_ref.name, entry.api_key_secret_ref.key))
    if spec.storage.credentials_secret_ref is not None:
        refs.append((spec.storage.credentials_secret_ref.name, None))
    return refs


async def _missing_secrets(gw: KubeGateway, namespace: str, spec: specmod.EvalRunSpec) -> tuple[str, ...]:
    missing: list[str] = []
    for name, key in _secret_refs(spec):
        keys = await gw.secret_keys(namespace, name)
        if keys is None or (key is not None and key not in keys):
            missing.append(f"{name}/{key}" if key else name)
    return tuple(dict.fromkeys(missing))


def compute_placements(evalrun: specmod.EvalRun, nodes: list[dict[str, Any]]) -> dict[str, PlacementDecision]:
    """Placement decision per model and judge name (``runtime: openai`` entries get none)."""
    from kubejury.placement import planner as placement

    decisions: dict[str, PlacementDecision] = {}
    parsed = placement.parse_node_list(nodes)
    for name, decided in placement.plan_placements(evalrun.spec, parsed).items():
        decisions[name] = PlacementDecision.from_placement(decided)
    return decisions


def _pinned(status: Mapping[str, Any], evalrun: specmod.EvalRun) -> dict[str, PlacementDecision] | None:
    """Placement recorded in status once the run left Pending (never re-planned mid-run)."""
    if str(status.get("phase") or "Pending") == "Pending":
        return None
    recorded = status.get("placement")
    if not isinstance(recorded, Mapping):
        return None
    names = [e.name for e in evalrun.spec.all_endpoints() if e.deployed]
    if not all(isinstance(recorded.get(n), Mapping) for n in names):
        return None
    return {n: PlacementDecision.from_status(recorded[n]) for n in names}


def _read_storage(
    evalrun: specmod.EvalRun, run: RunInputs, credentials: Mapping[str, str] | None, want_summary: bool
) -> tuple[dict[ProgressKey, ProgressRecord], dict[str, Any] | None]:
    """Progress records and (when the aggregation finished) the summary. Blocking: run in a thread."""
    from kubejury.files.storage import RunLayout, S3Credentials, open_storage

    storage_spec = evalrun.spec.storage
    creds = None
    if credentials and credentials.get("AWS_ACCESS_KEY_ID") and credentials.get("AWS_SECRET_ACCESS_KEY"):
        creds = S3Credentials(
            credentials["AWS_ACCESS_KEY_ID"],
            credentials["AWS_SECRET_ACCESS_KEY"],
            credentials.get("AWS_SESSION_TOKEN"),
        )
    store = open_storage(
        storage_spec.uri,
        endpoint_url=storage_spec.endpoint_url,
        region=storage_spec.region,
        path_style=storage_spec.use_path_style,
        credentials=creds,
        max_attempts=2,
    )
    layout = RunLayout(run.ref.name)
    entries: list[tuple[str, str, Mapping[str, Any]]] = []
    for series in run.series:
        for key in store.list(layout.progress_prefix(series)):
            record = store.read_json_or_none(key) if progress_key(series, key) is not None else None
            if isinstance(record, Mapping):
                entries.append((series, key, record))
    progress = collect_progress(entries)
    summary = None
    if want_summary:
        report = store.read_json_or_none(f"{layout.report_prefix}/report.json")
        if isinstance(report, Mapping):
            summary = summary_from_report(report, store.uri_for(f"{layout.report_prefix}/"))
    return progress, summary


# --------------------------------------------------------------------------------- reconcile


async def reconcile(runtime: OperatorRuntime, body: Mapping[str, Any], logger: logging.Logger | Any) -> str:
    """One level-triggered reconcile of one EvalRun; returns the phase written to status."""
    obj = _plain(body)
    meta = obj.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
    previous: dict[str, Any] = dict(obj.get("status") or {})
    for key in ("kopf",):
        previous.pop(key, None)
    gw = runtime.gateway()

    evalrun, problems = specmod.evalrun_problems({k: v for k, v in obj.items() if k != "status"})
    if evalrun is None:
        message = "; ".join(str(p) for p in problems)[:2000]
        generation = int(meta.get("generation") or 1)
        if previous.get("phase") != "Failed" or previous.get("observedGeneration") != generation:
            await gw.patch_status(
                "EvalRun",
                namespace,
                name,
                {
                    "phase": "Failed",
                    "observedGeneration": generation,
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "InvalidSpec",
                            "message": message,
                            "lastTransitionTime": _now(),
                            "observedGeneration": generation,
                        }
                    ],
                },
            )
            await gw.post_event(obj, "Warning", "InvalidSpec", message)
            raise kopf.PermanentError(f"invalid EvalRun spec: {message}")
        return "Failed"  # already reported for this generation; wait for a spec change

    labels = {mf.LABEL_RUN: mf.label_value(name), mf.LABEL_MANAGED_BY: mf.MANAGED_BY}
    children = {kind: await gw.list_objects(kind, namespace, labels) for kind in CHILD_KINDS}

    placements = _pinned(previous, evalrun)
    if placements is None:
        placements = compute_placements(evalrun, await gw.list_nodes())
    run = run_inputs(obj, evalrun, placements, runtime.settings)

    deployments: dict[str, DeploymentState] = {
        d["metadata"]["name"]: deployment_state(d) for d in children["Deployment"]
    }
    jobs: dict[str, JobState] = {j["metadata"]["name"]: job_state(j) for j in children["Job"]}
    present = frozenset(
        (kind, o["metadata"]["name"])
        for kind in ("Service", "ConfigMap", "ServiceAccount")
        for o in children[kind]
    )
    missing = await _missing_secrets(gw, namespace, evalrun.spec)
    unschedulable_pods = pod_scheduling_problems(await gw.list_objects("Pod", namespace, labels))

    progress: dict[ProgressKey, ProgressRecord] = {}
    summary: dict[str, Any] | None = None
    agg = jobs.get(mf.aggregation_job_name(name))
    finished = previous.get("phase") == "Failed" or (
        previous.get("phase") == "Succeeded" and previous.get("summary") is not None
    )
    if not finished:
        storage_secret = evalrun.spec.storage.credentials_secret_ref
        creds = await gw.secret_data(namespace, storage_secret.name) if storage_secret is not None else None
        try:
            progress, summary = await asyncio.to_thread(
                _read_storage, evalrun, run, creds, bool(agg and agg.succeeded)
            )
        except Exception as exc:  # storage trouble must not stop orchestration; counters wait
            logger.warning("cannot read progress records of %s/%s: %s", namespace, name, exc)

    observed = Observed(
        deployments=deployments,
        jobs=jobs,
        present=present,
        progress=progress,
        summary=summary,
        missing_secrets=missing,
        unschedulable_pods=unschedulable_pods,
    )
    decided = plan(run, observed, previous, _now())

    for action in decided.actions:
        try:
            if action.verb == "create" and action.manifest is not None:
                await gw.create(action.manifest)
            elif action.verb == "scale" and action.replicas is not None:
                await gw.scale(action.kind, namespace, action.name, action.replicas)
            elif action.verb == "delete":
                await gw.delete(action.kind, namespace, action.name)
            logger.info("%s", action.describe())
        except GatewayError as exc:
            raise kopf.TemporaryError(f"{action.describe()} failed: {exc}", delay=10) from exc

    new_status = decided.status
    comparable_prev = {k: v for k, v in previous.items() if k in new_status}
    if comparable_prev != new_status:
        await gw.patch_status("EvalRun", namespace, name, new_status)
    for event in decided.events:
        try:
            await gw.post_event(obj, event.type, event.reason, event.message)
        except GatewayError as exc:  # an Event is informational: never fail a reconcile over one
            logger.warning("cannot post Event %s for %s/%s: %s", event.reason, namespace, name, exc)
    metrics.observe_run(run_observation(namespace, name, decided.status, progress))
    return decided.phase


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        a = datetime.datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max((b - a).total_seconds(), 0.0)


def run_observation(
    namespace: str,
    name: str,
    status: Mapping[str, Any],
    progress: Mapping[ProgressKey, ProgressRecord],
) -> metrics.RunObservation:
    """What the metrics module needs from one reconcile (pure): cumulative counts, ETA, durations."""
    stages = status.get("stages") or {}
    generated: dict[str, int] = {}
    judged: dict[str, int] = {}
    errors: dict[tuple[str, str], int] = {}
    parse_failures: dict[str, int] = {}
    rate = 0.0
    for (stage, _series, who), record in progress.items():
        target = generated if stage == "generate" else judged
        target[who] = target.get(who, 0) + record.done
        for kind, count in record.request_errors.items():
            errors[(who, kind)] = errors.get((who, kind), 0) + count
        if stage == "judge":
            parse_failures[who] = parse_failures.get(who, 0) + record.parse_failures
        if record.running:
            rate += record.rate_per_s
    done = sum(int((stages.get(s) or {}).get("done", 0)) for s in ("generation", "judging"))
    total = sum(int((stages.get(s) or {}).get("total", 0)) for s in ("generation", "judging"))
    phase = str(status.get("phase") or "Pending")
    eta = (
        (total - done) / rate if rate > 0 and total > done and phase not in ("Succeeded", "Failed") else None
    )
    conditions = {c.get("type"): c for c in status.get("conditions") or []}

    def flipped(ctype: str) -> Any:
        c = conditions.get(ctype) or {}
        return c.get("lastTransitionTime") if c.get("status") == "True" else None

    durations: dict[str, float] = {}
    for stage, start, end in (
        ("generation", status.get("startedAt"), flipped("GenerationComplete")),
        ("judging", flipped("GenerationComplete"), flipped("JudgingComplete")),
        ("aggregation", flipped("JudgingComplete"), flipped("Succeeded")),
    ):
        if start and end and (seconds := _seconds_between(start, end)) is not None:
            durations[stage] = seconds
    return metrics.RunObservation(
        namespace=namespace,
        name=name,
        phase=phase,
        progress={
            stage: metrics.StageProgress(done=int(v.get("done", 0)), total=int(v.get("total", 0)))
            for stage, v in stages.items()
            if stage in metrics.STAGES
        },
        eta_seconds=eta,
        generated=generated,
        judged=judged,
        request_errors=errors,
        parse_failures=parse_failures,
        stage_durations=durations,
    )


async def reconcile_timer(body: kopf.Body, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    with metrics.track_reconcile("timer"):
        await reconcile(_runtime(memo), body, logger)


# ----------------------------------------------------------------------------------- delete


async def on_delete(body: kopf.Body, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    with metrics.track_reconcile("delete"):
        obj = _plain(body)
        meta = obj.get("metadata") or {}
        name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
        gw = _runtime(memo).gateway()
        labels = {mf.LABEL_RUN: mf.label_value(name), mf.LABEL_MANAGED_BY: mf.MANAGED_BY}
        for kind in CHILD_KINDS:
            for child in await gw.list_objects(kind, namespace, labels):
                owners = child["metadata"].get("ownerReferences") or []
                if meta.get("uid") and not any(o.get("uid") == meta.get("uid") for o in owners):
                    continue  # not ours (a newer run of the same name)
                await gw.delete(kind, namespace, child["metadata"]["name"])
        spec = obj.get("spec") or {}
        if spec.get("cleanupPolicy") == "Delete":
            evalrun, _problems = specmod.evalrun_problems({k: v for k, v in obj.items() if k != "status"})
            if evalrun is not None:
                try:
                    deleted = await asyncio.to_thread(_delete_results, evalrun, name)
                except Exception as exc:
                    raise kopf.TemporaryError(f"cannot delete stored results: {exc}", delay=30) from exc
                logger.info("cleanupPolicy Delete: removed %d stored objects of run %s", deleted, name)
            else:
                logger.warning("spec is invalid; stored results of %s are kept", name)
        metrics.forget_run(namespace, name)


def _delete_results(evalrun: specmod.EvalRun, name: str) -> int:
    from kubejury.files.storage import open_storage

    storage_spec = evalrun.spec.storage
    store = open_storage(
        storage_spec.uri,
        endpoint_url=storage_spec.endpoint_url,
        region=storage_spec.region,
        path_style=storage_spec.use_path_style,
    )
    return store.delete_prefix(f"{name}/")


# -------------------------------------------------------------------------------- admission


async def validate(body: kopf.Body, memo: Any, **_: Any) -> None:
    from kubejury_operator.validation import admission_message, validate_evalrun

    obj = _plain(body)
    namespace = str((obj.get("metadata") or {}).get("namespace") or "default")
    names: set[str] = set()
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    for key in ("models", "judges"):
        for entry in spec.get(key) or []:
            ref = entry.get("apiKeySecretRef") if isinstance(entry, Mapping) else None
            if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
                names.add(ref["name"])
    for ref in (spec.get("hfTokenSecretRef"), (spec.get("storage") or {}).get("credentialsSecretRef")):
        if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
            names.add(ref["name"])
    known: dict[str, frozenset[str] | None] = {}
    runtime = getattr(memo, "kubejury", None)
    if isinstance(runtime, OperatorRuntime) and runtime.credentials is not None and names:
        gw = runtime.gateway()
        for secret in sorted(names):
            known[secret] = await gw.secret_keys(namespace, secret)
        problems = validate_evalrun(obj, secrets_present=lambda n, k: k in (known.get(n) or frozenset()))
    else:
        problems = validate_evalrun(obj)
    if problems:
        raise kopf.AdmissionError(admission_message(problems), code=422)


# --------------------------------------------------------------------------------- registration


def register(
    registry: kopf.OperatorRegistry, *, interval: float = RECONCILE_INTERVAL, webhook: bool = False
) -> kopf.OperatorRegistry:
    """Register every handler on ``registry`` (tests pass their own registry and interval).

    kopf refuses to start with admission handlers but no webhook server, so the validating
    handler is registered only when the webhook is served (``webhook=True``).
    """
    kopf.on.startup(registry=registry)(configure)
    kopf.on.login(registry=registry)(login)
    kopf.on.cleanup(registry=registry)(shutdown)
    kopf.timer(GROUP, VERSION, PLURAL, interval=interval, id="reconcile", registry=registry)(reconcile_timer)
    kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup", registry=registry)(on_delete)
    if webhook:
        kopf.on.validate(GROUP, VERSION, PLURAL, id="validate-evalrun", registry=registry)(validate)
    return registry


# Importing this module registers the handlers on kopf's default registry, as ``kopf run`` expects.
register(kopf.get_default_registry(), webhook=bool(os.environ.get("KUBEJURY_WEBHOOK_PORT")))
