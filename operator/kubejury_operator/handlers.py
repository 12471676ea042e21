"""kopf handlers: thin glue between kopf, the gateway, storage and the pure planner.

Why this module exists: kopf decides *when* to act; :mod:`kubejury_operator.reconcile` decides
*what* to do; :mod:`kubejury_operator.gateway` does it. This module wires them and nothing else.

* ``@kopf.timer`` every ``KUBEJURY_RECONCILE_INTERVAL`` seconds (default 15) per EvalRun, starting
  immediately when a run appears or the operator starts: one level-triggered reconcile — observe
  children and nodes (from the watch-fed caches of :mod:`.watched`), secrets and progress records,
  plan, apply, patch ``status`` when it changed, post Events. The same code path serves create,
  resume after an operator restart, and every later change, so a restart at any point resumes the
  run without redoing finished work. A settled (finished) run returns before any call; in the
  watch design a run reconciled less than half an interval ago is skipped.
* ``@kopf.index`` per child kind, Nodes and EvalRuns: the caches, fed by watches the API server
  filters by label. ``@kopf.on.event`` on Jobs and Deployments: a change of what the planner reads
  of a child reconciles its run soon (one reconcile per run at a time and at most one waiting,
  at least :data:`CHILD_EVENT_MIN_GAP` apart), seeing the operator's own recent writes even before the
  caches do (:mod:`.expectations`).
* ``@kopf.on.delete`` (kopf's finalizer ``kubejury.io/finalizer``): deletes the run's children
  (owner references make the cluster's garbage collector do the same; deleting explicitly frees
  GPUs at once and does not depend on it) and, only with ``spec.cleanupPolicy: Delete``, the
  run's stored results.
* ``@kopf.on.validate`` (only when ``KUBEJURY_WEBHOOK_PORT`` is set): the validating admission
  webhook, calling :mod:`.validation`.
* ``@kopf.on.startup``/``login``/``cleanup``: settings, API credentials for the gateway.

Importing this module registers nothing: :func:`register` puts the handlers on the registry it is
given (``__main__`` passes that registry to ``kopf.run``; tests pass their own), with the
reconcile interval and the environment (workload settings, webhook) given to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import os
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from kubejury.config import spec as specmod
from kubejury.placement.decision import Placement
from kubejury_operator import manifests as mf
from kubejury_operator import metrics, run_storage, watched
from kubejury_operator import status as st
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.expectations import Expectations
from kubejury_operator.gateway import ApiCredentials, GatewayError, KubeGateway
from kubejury_operator.observed import (
    Observed,
    deployment_state,
    job_state,
    pod_scheduling_problems,
    servers_bringup_seconds,
    servers_ready_since,
)
from kubejury_operator.progress_cache import ProgressCache
from kubejury_operator.reconcile import Action, Plan, plan, plan_invalid_spec
from kubejury_operator.tenancy import TenantPolicy, run_policy_problems
from kubejury_operator.watched import Caches

GROUP = mf.API_GROUP
VERSION = mf.API_VERSION
PLURAL = "evalruns"
FINALIZER = "kubejury.io/finalizer"
DEFAULT_RECONCILE_INTERVAL = 15.0  # seconds; KUBEJURY_RECONCILE_INTERVAL overrides it
# KUBEJURY_OBSERVATION: "watch" (default) reads children and Nodes from watch-fed caches, reconciles
# on a child's change and leaves finished runs alone; "list" is the design before issue 13 — each
# run lists its children (and the Nodes while unplaced) on every tick, finished runs included, and
# waits for the tick. "list" is kept only so benchmarks/operator_scale.py measures both designs on
# the same cluster in one run; nothing else uses it.
OBSERVATION_MODES = ("watch", "list")
LIST_PAGE_SIZE = 500
CHILD_KINDS = ("Job", "Deployment", "Service", "ConfigMap", "ServiceAccount")


@dataclass
class OperatorRuntime:
    """Process-wide state shared by all handlers through kopf's memo. What it keeps per run only
    saves work — a lock, the last reconcile's end, writes the caches do not show yet, a recent
    progress reading, the parsed spec — and never decides a plan: a restart loses none of a run."""

    settings: mf.WorkloadSettings
    credentials: ApiCredentials | None = None
    policy: TenantPolicy = field(default_factory=TenantPolicy)  # the chart's allow-lists
    closed: bool = False
    observation: str = "watch"  # see OBSERVATION_MODES
    interval: float = DEFAULT_RECONCILE_INTERVAL  # seconds between a run's timer reconciles
    _gateway: KubeGateway | None = field(default=None, repr=False)
    # one reconcile of a run at a time (timer and child events); runs with a child-event
    # reconcile already waiting (several events of one change make one reconcile)
    _locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict, repr=False)
    _waiting: set[tuple[str, str]] = field(default_factory=set, repr=False)
    # per run: when its last reconcile ended (monotonic seconds)
    _reconciled: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    # per run: when its status was last written (monotonic seconds; watch design only)
    _written: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    # per run: its writes the caches do not show yet (watch design only)
    _expectations: dict[tuple[str, str], Expectations] = field(default_factory=dict, repr=False)
    # per child (kind, namespace, name): what the planner last read of it (watch design only)
    _trigger_states: dict[tuple[str, str, str], Hashable] = field(default_factory=dict, repr=False)
    progress: ProgressCache = field(default_factory=ProgressCache, repr=False)
    # per run: the planner's view of it (ClusterRun) once its placement is pinned, and its source
    _runs: dict[tuple[str, str], tuple[str, ClusterRun]] = field(default_factory=dict, repr=False)
    # per run: its spec as last parsed, and what it was parsed from (see parsed_spec)
    _parsed: dict[tuple[str, str], tuple[str, tuple[specmod.EvalRun | None, list[specmod.FieldProblem]]]] = (
        field(default_factory=dict, repr=False)
    )

    def run_lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    def expectations(self, namespace: str, name: str) -> Expectations:
        return self._expectations.setdefault((namespace, name), Expectations())

    def reconciled(self, namespace: str, name: str, ended: float) -> None:
        self._reconciled[(namespace, name)] = ended

    def status_written(self, namespace: str, name: str, at: float) -> None:
        self._written[(namespace, name)] = at

    def since_status_written(self, namespace: str, name: str, now: float) -> float | None:
        """Seconds since this process last wrote the run's status; None when it has not."""
        at = self._written.get((namespace, name))
        return None if at is None else now - at

    def timer_due(self, namespace: str, name: str, now: float) -> bool:
        """Whether the timer's reconcile of a run is worth doing: in the watch design, not when
        another reconcile ended less than half an interval ago. The timer is there for what no
        watch reports (progress records in storage, a server's bring-up started early from their
        rate); a busy run is reconciled on its children's changes anyway, and at a hundred runs
        the timer's reconciles were most of the operator's reconciles. Time-based steps are then
        at most one and a half intervals late."""
        if self.observation != "watch":
            return True
        return now - self._reconciled.get((namespace, name), float("-inf")) >= self.interval / 2

    def next_child_reconcile(self, namespace: str, name: str, now: float) -> float:
        """Seconds until a child's change may reconcile the run (see :data:`CHILD_EVENT_MIN_GAP`)."""
        ended = self._reconciled.get((namespace, name), float("-inf"))
        return max(CHILD_EVENT_DELAY, ended + CHILD_EVENT_MIN_GAP - now)

    def child_changed(self, kind: str, body: Mapping[str, Any], deleted: bool) -> bool:
        """Whether a Job's or Deployment's event changes what the planner reads of it."""
        meta = body.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if deleted:
            self._trigger_states.pop(key, None)
            return True
        state = watched.trigger_state(kind, body)
        if self._trigger_states.get(key, _UNSEEN) == state:
            return False
        self._trigger_states[key] = state
        return True

    def parsed_spec(
        self, obj: Mapping[str, Any]
    ) -> tuple[specmod.EvalRun | None, list[specmod.FieldProblem]]:
        """:func:`kubejury.config.spec.evalrun_problems` of the run, parsed again only when its spec
        (``metadata.generation``), labels or annotations changed — not for each status write."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        source = _spec_source(meta)
        known = self._parsed.get(key)
        if known is not None and known[0] == source:
            return known[1][0], list(known[1][1])
        evalrun, problems = specmod.evalrun_problems({k: v for k, v in obj.items() if k != "status"})
        self._parsed[key] = (source, (evalrun, list(problems)))
        return evalrun, list(problems)

    def pinned_run(
        self, obj: Mapping[str, Any], evalrun: specmod.EvalRun, previous: Mapping[str, Any]
    ) -> ClusterRun | None:
        """The planner's view of the run (:func:`cluster_run`) with the placement pinned in its
        status; ``None`` while none is pinned. Built again only when the spec or the pinned
        placement changed: building it (and the bring-up order) on every reconcile was a tenth of a
        busy operator's CPU."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        source = _spec_source(meta) + json.dumps(previous.get("placement"), sort_keys=True, default=str)
        known = self._runs.get(key)
        if known is not None and known[0] == source and previous.get("phase") not in (None, "Pending"):
            return known[1]
        placements = _pinned(previous, evalrun)
        if placements is None:
            return None
        run = cluster_run(obj, evalrun, placements, self.settings)
        self._runs[key] = (source, run)
        return run

    def forget(self, namespace: str, name: str) -> None:
        """A deleted run's per-run state (its children's entries go with their DELETED events)."""
        for table in (
            self._locks,
            self._reconciled,
            self._written,
            self._expectations,
            self._parsed,
            self._runs,
        ):
            table.pop((namespace, name), None)
        self.progress.forget((namespace, name))

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


_UNSEEN = object()


def _spec_source(meta: Mapping[str, Any]) -> str:
    """What a run's parsed spec depends on besides the spec, whose changes bump the generation."""
    return json.dumps(
        [meta.get("uid"), meta.get("generation"), meta.get("labels"), meta.get("annotations")],
        sort_keys=True,
        default=str,
    )


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


def configure(
    settings: kopf.OperatorSettings,
    memo: Any,
    logger: logging.Logger | Any,
    env: Mapping[str, str],
    interval: float,
) -> None:
    """kopf's settings and the process-wide runtime, from the environment ``register`` was given."""
    memo.kubejury = OperatorRuntime(
        settings=mf.WorkloadSettings.from_env(env),
        policy=TenantPolicy.from_env(env),
        observation=observation_mode(env),
        interval=interval,
    )
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubejury.io")
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(
        prefix="kubejury.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events tell the story; kopf's only for problems
    settings.watching.server_timeout = int(env.get("KUBEJURY_WATCH_TIMEOUT", "300"))
    # Lists (at start-up, after a watch's 410 Gone) in pages, as client-go's pager does: a cluster
    # with thousands of the operator's Jobs is not parsed as one answer.
    settings.watching.chunk_size = LIST_PAGE_SIZE
    if observation_mode(env) == "watch":
        for resource, selector in watched.watch_label_selectors().items():
            settings.watching.label_selectors[resource] = selector
        quiet = logging.getLogger("kopf.objects")
        if not any(isinstance(f, QuietChildEvents) for f in quiet.filters):
            quiet.addFilter(QuietChildEvents())
    configure_admission(settings, env)
    logger.info("kubejury operator configured; reconcile interval %ss", interval)


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base storage, with the essence built from the object without its
    status and managed fields. kopf's own ``build`` deep-copies the whole object and then drops
    those parts; an EvalRun's status is most of it, and every status write comes back as an event:
    that copy was a tenth of a busy operator's CPU. Same essence: with field filters that read the
    status (none of ours do), kopf's own path is taken."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        lean: Any = {k: v for k, v in body.items() if k not in ("status", "metadata")}
        lean["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        return super().build(body=kopf.Body(lean), extra_fields=extra_fields)


class QuietChildEvents(logging.Filter):
    """Drops kopf's "Handler '…-changed' succeeded." line, logged for every event of every child
    (hundreds a second on a busy operator): it says nothing the reconcile's own log does not."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (message.startswith("Handler '") and message.endswith("-changed' succeeded."))


def observation_mode(env: Mapping[str, str]) -> str:
    """``KUBEJURY_OBSERVATION`` (see :data:`OBSERVATION_MODES`); anything else is refused."""
    mode = env.get("KUBEJURY_OBSERVATION", "watch").strip() or "watch"
    if mode not in OBSERVATION_MODES:
        raise ValueError(f"KUBEJURY_OBSERVATION={mode!r}: expected one of {', '.join(OBSERVATION_MODES)}")
    return mode


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


def login(memo: Any, env: Mapping[str, str], **kwargs: Any) -> kopf.ConnectionInfo | None:
    """API credentials: ``KUBEJURY_KUBE_SERVER`` (+ ``KUBEJURY_KUBE_TOKEN``) when set (tests, dev),
    else the ``kubernetes`` client's login (the Pod's service account, else the kubeconfig — with
    exec plugins and auth providers, as EKS, GKE and OIDC kubeconfigs need), else kopf's own
    service-account and kubeconfig readers. The gateway uses the same credentials."""
    server = env.get("KUBEJURY_KUBE_SERVER")
    info: kopf.ConnectionInfo | None
    if server:
        info = kopf.ConnectionInfo(
            server=server,
            token=env.get("KUBEJURY_KUBE_TOKEN") or None,
            insecure=env.get("KUBEJURY_KUBE_INSECURE", "").lower() in ("1", "true", "yes"),
            default_namespace="default",
        )
    else:
        try:
            info = kopf.login_via_client(**kwargs)
        except kopf.LoginError:
            info = None
        info = info or kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
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


def compute_placements(
    evalrun: specmod.EvalRun, nodes: list[dict[str, Any]], chart_tolerations: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Placement]:
    """Placement decision per model and judge name (``runtime: openai`` entries get none).
    ``chart_tolerations``: the chart's GPU tolerations (``WorkloadSettings.extra_tolerations``); a
    GPU node tainted by anything else than the GPU taint and these is never chosen."""
    from kubejury.placement import planner

    return planner.plan_placements(evalrun.spec, planner.parse_node_list(nodes), chart_tolerations)


def _pinned(status: Mapping[str, Any], evalrun: specmod.EvalRun) -> dict[str, Placement] | None:
    """Placement recorded in status once the run left Pending (never re-planned mid-run)."""
    if str(status.get("phase") or "Pending") == "Pending":
        return None
    recorded = status.get("placement")
    if not isinstance(recorded, Mapping):
        return None
    names = [e.name for e in evalrun.spec.all_endpoints() if e.deployed]
    if not all(isinstance(recorded.get(n), Mapping) for n in names):
        return None
    return {n: Placement.from_json(recorded[n], name=n) for n in names}


async def _storage_secret(
    gw: KubeGateway, namespace: str, evalrun: specmod.EvalRun
) -> Mapping[str, str] | None:
    """The data of the run's ``storage.credentialsSecretRef`` (``None`` without one)."""
    ref = evalrun.spec.storage.credentials_secret_ref
    return await gw.secret_data(namespace, ref.name) if ref is not None else None


def _run_labels(name: str) -> dict[str, str]:
    return {mf.LABEL_RUN: mf.label_value(name), mf.LABEL_MANAGED_BY: mf.MANAGED_BY}


async def _observe_cluster(
    gw: KubeGateway, namespace: str, name: str, evalrun: specmod.EvalRun, caches: Caches | None = None
) -> Observed:
    """The run's children, missing Secrets and unschedulable server Pods (progress comes later):
    from the watch-fed caches when the handler has them, else listed (one list per kind)."""
    labels = _run_labels(name)
    if caches is not None:
        run_label = labels[mf.LABEL_RUN]
        children = {kind: caches.children_of(kind, namespace, run_label) for kind in (*CHILD_KINDS, "Pod")}
    else:
        children = {kind: await gw.list_objects(kind, namespace, labels) for kind in (*CHILD_KINDS, "Pod")}
    return Observed(
        deployments={d["metadata"]["name"]: deployment_state(d) for d in children["Deployment"]},
        jobs={j["metadata"]["name"]: job_state(j) for j in children["Job"]},
        present=frozenset(
            (kind, o["metadata"]["name"])
            for kind in ("Service", "ConfigMap", "ServiceAccount")
            for o in children[kind]
        ),
        missing_secrets=await _missing_secrets(gw, namespace, evalrun.spec),
        unschedulable_pods=pod_scheduling_problems(children["Pod"]),
        servers_ready_since=servers_ready_since(children["Pod"]),
        servers_bringup_seconds=servers_bringup_seconds(children["Pod"]),
    )


async def _observe_storage(
    gw: KubeGateway,
    evalrun: specmod.EvalRun,
    observed: Observed,
    ref: mf.RunRef,
    series: tuple[str, ...],
    previous: Mapping[str, Any],
    logger: logging.Logger | Any,
    policy: TenantPolicy,
    cache: ProgressCache | None = None,
) -> Observed:
    """``observed`` with the progress records and, once aggregated, the report summary. A
    finished run reads nothing; storage trouble never stops orchestration (counters wait).
    With ``cache``, a recent reading is reused (:mod:`.progress_cache`)."""
    finished = previous.get("phase") == "Failed" or (
        previous.get("phase") == "Succeeded" and previous.get("summary") is not None
    )
    if finished:
        return observed
    namespace, name = ref.namespace, ref.name
    now = time.monotonic()
    reused = cache.fresh((namespace, name), observed, now) if cache is not None else None
    if reused is not None:
        return dataclasses.replace(observed, progress=reused[0], summary=reused[1])
    aggregation = observed.jobs.get(mf.aggregation_job_name(name))
    secret = await _storage_secret(gw, namespace, evalrun)
    try:
        progress, summary = await asyncio.to_thread(
            run_storage.read_progress_and_summary,
            evalrun,
            ref,
            series,
            secret,
            bool(aggregation and aggregation.succeeded),
            allowed_endpoints=policy.storage_endpoints,
        )
    except Exception as exc:
        logger.warning("cannot read progress records of %s/%s: %s", namespace, name, exc)
        return observed
    if cache is not None:
        cache.store((namespace, name), observed, (progress, summary), now)
    return dataclasses.replace(observed, progress=progress, summary=summary)


# --------------------------------------------------------------------------------- reconcile


# Children that other children use (the spec ConfigMap the Jobs mount, the ServiceAccount they run
# as): a plan's actions on these are carried out before the rest.
PREREQUISITE_KINDS = frozenset({"ConfigMap", "ServiceAccount"})


async def _carry_out(
    gw: KubeGateway, namespace: str, action: Action, logger: Any, expectations: Expectations | None
) -> st.ApplyFailure | None:
    """One action; the failure to report when the API server refused it."""
    try:
        if action.verb == "create" and action.manifest is not None:
            await gw.create(action.manifest)
            if expectations is not None:
                expectations.expect_created(action.kind, action.name, action.manifest, time.monotonic())
        elif action.verb == "scale" and action.replicas is not None:
            await gw.scale(action.kind, namespace, action.name, action.replicas)
            if expectations is not None:
                expectations.expect_scaled(action.name, action.replicas, time.monotonic())
        elif action.verb == "delete":
            await gw.delete(action.kind, namespace, action.name)
        logger.info("%s", action.describe())
        return None
    except GatewayError as exc:
        logger.warning("%s failed: %s", action.describe(), exc)
        return st.ApplyFailure(action.describe(), exc.reason, exc.api_message)


async def _apply(
    gw: KubeGateway,
    obj: Mapping[str, Any],
    decided: Plan,
    previous: Mapping[str, Any],
    logger: Any,
    expectations: Expectations | None = None,
    since_written: float | None = None,
) -> bool:
    """Carry out a plan: its actions, the status patch (only when it changed), its Events; returns
    whether the status was written.

    The actions go out concurrently — the ConfigMap and ServiceAccount first, then everything else —
    so a reconcile takes one round trip to the API server per wave, not one per object. The status
    says what was observed, which no action changes, so it goes out with the first wave: on a busy
    API server a status written after the actions was a round trip or two late. An action the API
    server refuses (anything but 409, which means "already there": a quota's 403, a 422, …) does
    not stop the others: it lands in the ``ApplyFailed`` condition naming the object and the API's
    message, written by a second patch, and the next reconcile tries again (after a refusal the
    whole status waits for the actions, so the condition does not flip to False and back). Only
    what changed is sent (:func:`~kubejury_operator.status.status_patch`), and a change of counters
    only waits until the run's last write (``since_written`` seconds ago; None: write at once) is
    :data:`~kubejury_operator.status.MINOR_STATUS_INTERVAL` old
    (:func:`~kubejury_operator.status.due_patch`). Each create and scale done is remembered in
    ``expectations`` until the caches show it."""
    meta = obj.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
    now = _now()
    failures: list[st.ApplyFailure] = []
    first = [a for a in decided.actions if a.kind in PREREQUISITE_KINDS]
    rest = [a for a in decided.actions if a.kind not in PREREQUISITE_KINDS]
    written: Mapping[str, Any] = previous
    wrote = False

    async def write(status: Mapping[str, Any]) -> None:
        nonlocal written, wrote
        patch = st.due_patch(written, status, None if wrote else since_written)
        if not patch:
            return
        await gw.patch_status("EvalRun", namespace, name, patch)
        written, wrote = {**written, **status}, True

    early = None if st.apply_failed(previous) else st.with_apply_result(decided.status, (), previous, now)
    for wave, status in ((first, early), (rest, None)):
        results = await asyncio.gather(
            *(_carry_out(gw, namespace, a, logger, expectations) for a in wave),
            *((write(status),) if status is not None else ()),
        )
        failures += [f for f in results if isinstance(f, st.ApplyFailure)]
    await write(st.with_apply_result(decided.status, failures, previous, now))
    for event in decided.events:
        try:
            await gw.post_event(obj, event.type, event.reason, event.message)
        except GatewayError as exc:  # an Event is informational: never fail a reconcile over one
            logger.warning("cannot post Event %s for %s/%s: %s", event.reason, namespace, name, exc)
    return wrote


async def reconcile(
    runtime: OperatorRuntime,
    body: Mapping[str, Any],
    logger: logging.Logger | Any,
    caches: Caches | None = None,
) -> str:
    """One level-triggered reconcile of one EvalRun; returns the phase written to status. With
    ``caches`` (the watch-fed indexes) it lists nothing: children and Nodes come from memory."""
    obj = _plain(body)
    meta = obj.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
    previous: dict[str, Any] = {k: v for k, v in (obj.get("status") or {}).items() if k != "kopf"}
    if st.settled(previous, int(meta.get("generation") or 1)) and runtime.observation == "watch":
        return str(previous["phase"])  # finished and written: costs nothing from now on
    gw = runtime.gateway()

    evalrun, problems = runtime.parsed_spec(obj)
    # The chart's allow-lists hold here too: the webhook may be off or have failed open.
    beyond = run_policy_problems(evalrun, namespace, runtime.policy) if evalrun is not None else []
    if evalrun is None or beyond:
        problems = [*problems, *beyond]
        invalid = plan_invalid_spec(
            [str(p) for p in problems], int(meta.get("generation") or 1), previous, _now()
        )
        if invalid is None:
            return "Failed"  # already reported for this generation; wait for a spec change
        await _apply(gw, obj, invalid, previous, logger)
        raise kopf.PermanentError(f"invalid EvalRun spec: {invalid.events[0].message}")

    run = runtime.pinned_run(obj, evalrun, previous)
    if run is None:  # Pending: placed on the Nodes as they are now
        nodes = caches.all_nodes() if caches is not None else await gw.list_nodes()
        placements = compute_placements(evalrun, nodes, runtime.settings.extra_tolerations)
        run = cluster_run(obj, evalrun, placements, runtime.settings)
    observed = await _observe_cluster(gw, namespace, name, evalrun, caches)
    expectations = runtime.expectations(namespace, name) if caches is not None else None
    if expectations is not None:  # the caches may not show this operator's latest writes yet
        expectations.settle(observed, time.monotonic())
        observed = expectations.view(observed)
    progress_cache = runtime.progress if caches is not None else None
    observed = await _observe_storage(
        gw, evalrun, observed, run.ref, run.series, previous, logger, runtime.policy, progress_cache
    )
    decided = plan(run, observed, previous, _now())
    now = time.monotonic()
    since = runtime.since_status_written(namespace, name, now) if caches is not None else None
    if await _apply(gw, obj, decided, previous, logger, expectations, since):
        runtime.status_written(namespace, name, now)
    metrics.observe_run(metrics.observation(namespace, name, decided.status, observed.progress))
    return decided.phase


async def _reconcile_locked(
    runtime: OperatorRuntime, body: Mapping[str, Any], logger: Any, trigger: str, caches: Caches | None
) -> None:
    """One reconcile of the run, under its lock (see :func:`_reconcile_held`)."""
    meta = body.get("metadata") or {}
    async with runtime.run_lock(str(meta.get("namespace") or "default"), str(meta.get("name"))):
        await _reconcile_held(runtime, body, logger, trigger, caches)


async def _reconcile_held(
    runtime: OperatorRuntime, body: Mapping[str, Any], logger: Any, trigger: str, caches: Caches | None
) -> None:
    """One reconcile of the run, its lock already held; when it ended is kept (the next
    child-event reconcile waits for :meth:`OperatorRuntime.next_child_reconcile`)."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    try:
        with metrics.track_reconcile(trigger):
            await reconcile(runtime, body, logger, caches)
    finally:
        runtime.reconciled(namespace, name, time.monotonic())


async def reconcile_timer(body: kopf.Body, memo: Any, logger: kopf.Logger, **kwargs: Any) -> None:
    runtime = _runtime(memo)
    meta = body.get("metadata") or {}
    if runtime.timer_due(str(meta.get("namespace") or "default"), str(meta.get("name")), time.monotonic()):
        await _reconcile_locked(runtime, body, logger, "timer", Caches.from_handler_kwargs(kwargs))


# seconds: the events of one change (and our own last status write) settle into one reconcile;
# short, because a server Ready but not yet used, or a Job done but its server not yet scaled down,
# is GPU time held idle (docs/operator.md, "GPU accounting")
CHILD_EVENT_DELAY = 0.25
# A run's child-event reconciles start at least this long after its previous reconcile ended: a
# burst of Job completions makes one reconcile and one status write, not one each (the scale
# benchmark, docs/benchmarks.md). Longer would make the status and the GPU policy late.
CHILD_EVENT_MIN_GAP = 1.0


def _child_event_handler(kind: str) -> Any:
    async def on_child_event(body: kopf.Body, memo: Any, logger: kopf.Logger, **kwargs: Any) -> None:
        """A Job or Deployment of a run changed what the planner reads of it: reconcile that run
        soon rather than at the next tick.

        A controller's work queue, per run: one reconcile running and at most one waiting. The
        waiting one holds the run's place in ``_waiting`` until it has the lock and reads the
        caches, so every change that arrives meanwhile is in what it reads and adds no reconcile
        of its own (left out, each event behind a running reconcile queued one more)."""
        owner = watched.owner_run(body)
        runtime = getattr(memo, "kubejury", None)
        if owner is None or not isinstance(runtime, OperatorRuntime):
            return
        deleted = kwargs.get("type") == "DELETED"
        if not runtime.child_changed(kind, body, deleted=deleted) or owner in runtime._waiting:
            return
        runtime._waiting.add(owner)
        queued = True  # this call holds the run's place in _waiting until it reads the caches
        try:
            async with runtime.run_lock(*owner):
                await asyncio.sleep(runtime.next_child_reconcile(*owner, time.monotonic()))
                # No await from here to the caches' reading: a change after this queues anew.
                runtime._waiting.discard(owner)
                queued = False
                run = watched.latest_run(kwargs.get(watched.EVALRUN_INDEX) or {}, owner)
                if run is None:
                    return
                await _reconcile_held(runtime, run, logger, "child-event", Caches.from_handler_kwargs(kwargs))
        finally:
            if queued:  # cancelled while waiting; never the place of the next one queued
                runtime._waiting.discard(owner)

    return on_child_event


def _index_child(body: kopf.Body, **_: Any) -> Any:
    return watched.child_entry(body)


def _index_pod(body: kopf.Body, **_: Any) -> Any:
    return watched.pod_entry(body)


def _index_node(body: kopf.Body, **_: Any) -> Any:
    return watched.node_entry(body)


def _index_evalrun(body: kopf.Body, **_: Any) -> Any:
    return watched.evalrun_entry(body)


# ----------------------------------------------------------------------------------- delete


async def on_delete(body: kopf.Body, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    with metrics.track_reconcile("delete"):
        obj = _plain(body)
        meta = obj.get("metadata") or {}
        name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
        gw = _runtime(memo).gateway()
        for kind in CHILD_KINDS:
            for child in await gw.list_objects(kind, namespace, _run_labels(name)):
                owners = child["metadata"].get("ownerReferences") or []
                if meta.get("uid") and not any(o.get("uid") == meta.get("uid") for o in owners):
                    continue  # not ours (a newer run of the same name)
                await gw.delete(kind, namespace, child["metadata"]["name"])
        if (obj.get("spec") or {}).get("cleanupPolicy") == "Delete":
            await _delete_stored_results(gw, obj, _runtime(memo).policy, logger)
        metrics.forget_run(namespace, name)
        _runtime(memo).forget(namespace, name)


async def _delete_stored_results(
    gw: KubeGateway, obj: Mapping[str, Any], policy: TenantPolicy, logger: Any
) -> None:
    """``cleanupPolicy: Delete``: remove the run's stored results, with the run's own credentials."""
    meta = obj.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
    evalrun, _problems = specmod.evalrun_problems({k: v for k, v in obj.items() if k != "status"})
    if evalrun is None:
        logger.warning("spec is invalid; stored results of %s are kept", name)
        return
    if run_policy_problems(evalrun, namespace, policy):
        logger.warning("storage of %s/%s is outside what the chart allows; nothing deleted", namespace, name)
        return
    ref = mf.RunRef(name=name, namespace=namespace, uid=str(meta.get("uid") or ""))
    try:
        secret = await _storage_secret(gw, namespace, evalrun)
        deleted = await asyncio.to_thread(
            run_storage.delete_results, evalrun, ref, secret, allowed_endpoints=policy.storage_endpoints
        )
    except run_storage.ResultsKept as kept:
        logger.warning("%s/%s: %s", namespace, name, kept)
        return
    except Exception as exc:
        raise kopf.TemporaryError(f"cannot delete stored results: {exc}", delay=30) from exc
    logger.info("cleanupPolicy Delete: removed %d stored objects of run %s", deleted, name)


# -------------------------------------------------------------------------------- admission


async def validate(body: kopf.Body, memo: Any, old: Any = None, **_: Any) -> None:
    """Admission: the spec's own rules and the chart's allow-lists, nothing read from the cluster;
    on an update, a started run's spec is immutable (as the CRD's CEL rule says).

    It never looks up the Secrets a spec names: an answer that depended on them would tell a user
    who may not read Secrets whether Secret X with key Y exists (issue 11, finding 6). A missing
    Secret is reported in the run's own status (``SecretsMissing``), which only its readers see."""
    from kubejury_operator.crd import spec_edit_refusal
    from kubejury_operator.validation import admission_message, validate_evalrun

    refusal = spec_edit_refusal(_plain(old) if old else None, _plain(body))
    if refusal is not None:
        raise kopf.AdmissionError(f"spec: {refusal}", code=422)

    runtime = getattr(memo, "kubejury", None)
    policy = runtime.policy if isinstance(runtime, OperatorRuntime) else TenantPolicy()
    problems = validate_evalrun(_plain(body), policy=policy)
    if problems:
        raise kopf.AdmissionError(admission_message(problems), code=422)


# --------------------------------------------------------------------------------- registration


def register(
    registry: kopf.OperatorRegistry,
    *,
    interval: float | None = None,
    env: Mapping[str, str] | None = None,
    webhook_port: int | None = None,
) -> kopf.OperatorRegistry:
    """Register every handler on ``registry`` and return it (``__main__`` passes it to ``kopf.run``).

    ``env`` (default: the process environment) holds the workload settings, the webhook's TLS
    settings and ``KUBEJURY_RECONCILE_INTERVAL``; ``interval`` and ``webhook_port`` override what
    it says. kopf refuses to start with admission handlers but no webhook server, so the
    validating handler is registered only when the webhook is served.
    """
    options = dict(os.environ if env is None else env)
    if webhook_port is not None:
        options["KUBEJURY_WEBHOOK_PORT"] = str(webhook_port)
    every = (
        interval
        if interval is not None
        else float(options.get("KUBEJURY_RECONCILE_INTERVAL", DEFAULT_RECONCILE_INTERVAL))
    )

    async def startup(settings: kopf.OperatorSettings, memo: Any, logger: kopf.Logger, **_: Any) -> None:
        configure(settings, memo, logger, options, every)

    kopf.on.startup(id="configure", registry=registry)(startup)

    def connect(memo: Any, **kwargs: Any) -> kopf.ConnectionInfo | None:
        return login(memo, options, **kwargs)

    kopf.on.login(id="login", registry=registry)(connect)
    kopf.on.cleanup(registry=registry)(shutdown)
    if observation_mode(options) == "watch":  # "list": the design before issue 13 (benchmarks only)
        _register_watches(registry)
    kopf.timer(GROUP, VERSION, PLURAL, interval=every, id="reconcile", registry=registry)(reconcile_timer)
    kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup", registry=registry)(on_delete)
    if options.get("KUBEJURY_WEBHOOK_PORT"):
        kopf.on.validate(GROUP, VERSION, PLURAL, id="validate-evalrun", registry=registry)(validate)
    return registry


def _register_watches(registry: kopf.OperatorRegistry) -> None:
    """The watch-fed caches (one index per kind) and the child-change triggers."""
    for kind, index in watched.CHILD_INDEXES.items():  # one watch per kind for the whole operator
        group, version, plural = watched.RESOURCES[kind]
        labels = watched.POD_LABELS if kind == "Pod" else watched.CHILD_LABELS
        kopf.index(group, version, plural, id=index, labels=dict(labels), registry=registry)(
            _index_pod if kind == "Pod" else _index_child
        )
    kopf.index("", "v1", "nodes", id=watched.NODE_INDEX, registry=registry)(_index_node)
    kopf.index(GROUP, VERSION, PLURAL, id=watched.EVALRUN_INDEX, registry=registry)(_index_evalrun)
    for kind in watched.TRIGGER_KINDS:
        group, version, plural = watched.RESOURCES[kind]
        kopf.on.event(
            group,
            version,
            plural,
            id=f"{plural}-changed",
            labels=dict(watched.CHILD_LABELS),
            registry=registry,
        )(_child_event_handler(kind))
