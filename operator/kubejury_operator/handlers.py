"""kopf handlers: the wiring between kopf's calls and the operator's modules, and nothing else.

Why this module exists: kopf decides *when* to act; :mod:`.reconciler` does one reconcile
(observe, plan, apply); :mod:`.work_queue` decides whether and when a call reconciles. This module
translates kopf's arguments into those calls and declares, in :func:`register`, every handler and
watch the operator has:

* ``@kopf.timer`` every ``KUBEJURY_RECONCILE_INTERVAL`` seconds (default 15) per EvalRun, starting
  at once when a run appears or the operator starts: one level-triggered reconcile, skipped when
  another ended less than half an interval ago. The same path serves create, resume after a
  restart and every later change, so a restart at any point resumes the run without redoing work.
* ``@kopf.index`` per child kind, Nodes and EvalRuns: the caches (:mod:`.watched`), fed by watches
  the API server filters by label. ``@kopf.on.event`` on Jobs and Deployments: a change of what
  the planner reads of a child reconciles its run soon (its queue: one at a time, at most one
  waiting), seeing the operator's own recent writes even before the caches do (:mod:`.expectations`).
* ``@kopf.on.delete`` (kopf's finalizer ``kubejury.io/finalizer``): deletes the run's children
  (owner references make the garbage collector do the same; deleting explicitly frees GPUs at once)
  and, only with ``spec.cleanupPolicy: Delete``, the run's stored results; then forgets the run.
* ``@kopf.on.validate`` (only when ``KUBEJURY_WEBHOOK_PORT`` is set): the validating admission
  webhook, calling :mod:`.validation`.
* ``@kopf.on.startup``/``login``/``cleanup``: settings (:mod:`.kopf_setup`), credentials, shutdown.

Importing this module registers nothing: :func:`register` puts the handlers on the registry it is
given (``__main__`` passes that registry to ``kopf.run``; tests pass their own).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from kubejury_operator import apply, kopf_setup, metrics, reconciler, watched
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab
from kubejury_operator.gateway import ApiCredentials
from kubejury_operator.memory import run_key
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.tenancy import TenantPolicy
from kubejury_operator.watched import Caches, plain
from kubejury_operator.work_queue import DEFAULT_RECONCILE_INTERVAL

GROUP, VERSION, PLURAL = vocab.API_GROUP, vocab.API_VERSION, "evalruns"


def _runtime(memo: object) -> OperatorRuntime:
    runtime = getattr(memo, "kubejury", None)
    if not isinstance(runtime, OperatorRuntime):
        raise kopf.TemporaryError("operator runtime not initialised yet", delay=5)
    return runtime


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
        settings=opsettings.WorkloadSettings.from_env(env),
        policy=TenantPolicy.from_env(env),
        interval=interval,
    )
    kopf_setup.configure_settings(settings, env)
    logger.info("kubejury operator configured; reconcile interval %ss", interval)


def login(memo: object, env: Mapping[str, str], **kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's login (:func:`.kopf_setup.connection_info`); the gateway uses the same credentials."""
    info = kopf_setup.connection_info(env, **kwargs)
    runtime = getattr(memo, "kubejury", None)
    if info is not None and isinstance(runtime, OperatorRuntime):
        runtime.credentials = ApiCredentials.from_connection_info(info)
    return info


async def shutdown(memo: object, **_: Any) -> None:
    runtime = getattr(memo, "kubejury", None)
    if isinstance(runtime, OperatorRuntime):
        await runtime.close()


# --------------------------------------------------------------------------------- reconcile


async def _reconcile(
    runtime: OperatorRuntime, body: Mapping[str, Any], logger: Any, trigger: str, caches: Caches | None
) -> None:
    with metrics.track_reconcile(trigger):
        await reconciler.reconcile(runtime, body, logger, caches)


async def reconcile_timer(body: kopf.Body, memo: object, logger: kopf.Logger, **kwargs: Any) -> None:
    runtime = _runtime(memo)
    caches = Caches.from_handler_kwargs(kwargs)
    queue = runtime.memory(run_key(body)).queue
    await queue.on_timer(lambda: _reconcile(runtime, body, logger, "timer", caches))


def _child_event_handler(kind: str) -> Callable[..., Awaitable[None]]:
    async def on_child_event(body: kopf.Body, memo: object, logger: kopf.Logger, **kwargs: Any) -> None:
        """A Job or Deployment of a run changed what the planner reads of it: queue a reconcile of
        that run (:meth:`.work_queue.RunQueue.on_child_event`) rather than wait for the tick."""
        owner = watched.owner_run(body)
        runtime = getattr(memo, "kubejury", None)
        if owner is None or not isinstance(runtime, OperatorRuntime):
            return
        if not runtime.children.changed(kind, body, deleted=kwargs.get("type") == "DELETED"):
            return
        caches = Caches.from_handler_kwargs(kwargs)
        runs = kwargs.get(watched.EVALRUN_INDEX) or {}
        if watched.latest_run(runs, owner) is None:  # deleted: its memory is forgotten, not made anew
            return

        def start() -> Awaitable[None] | None:  # the run's body as the watch last delivered it
            run = watched.latest_run(runs, owner)
            return None if run is None else _reconcile(runtime, run, logger, "child-event", caches)

        await runtime.memory(owner).queue.on_child_event(start)

    return on_child_event


async def on_delete(body: kopf.Body, memo: object, logger: kopf.Logger, **_: Any) -> None:
    with metrics.track_reconcile("delete"):
        obj = plain(body)
        runtime = _runtime(memo)
        await apply.delete_children(runtime.gateway(), obj)
        if (obj.get("spec") or {}).get("cleanupPolicy") == "Delete":
            await apply.delete_stored_results(runtime.gateway(), obj, runtime.policy, logger)
        metrics.forget_run(*run_key(obj))
        runtime.forget(run_key(obj))


async def validate(body: kopf.Body, memo: object, old: Mapping[str, Any] | None = None, **_: Any) -> None:
    """Admission: the spec's own rules and the chart's allow-lists, nothing read from the cluster;
    on an update, a started run's spec is immutable (as the CRD's CEL rule says).

    It never looks up the Secrets a spec names: an answer that depended on them would tell a user
    who may not read Secrets whether Secret X with key Y exists (issue 11, finding 6). A missing
    Secret is reported in the run's own status (``SecretsMissing``), which only its readers see."""
    from kubejury_operator.crd import spec_edit_refusal
    from kubejury_operator.validation import admission_message, validate_evalrun

    refusal = spec_edit_refusal(plain(old) if old else None, plain(body))
    if refusal is not None:
        raise kopf.AdmissionError(f"spec: {refusal}", code=422)
    runtime = getattr(memo, "kubejury", None)
    policy = runtime.policy if isinstance(runtime, OperatorRuntime) else TenantPolicy()
    problems = validate_evalrun(plain(body), policy=policy)
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

    def connect(memo: object, **kwargs: Any) -> kopf.ConnectionInfo | None:
        return login(memo, options, **kwargs)

    kopf.on.startup(id="configure", registry=registry)(startup)
    kopf.on.login(id="login", registry=registry)(connect)
    kopf.on.cleanup(registry=registry)(shutdown)
    _register_watches(registry)
    kopf.timer(GROUP, VERSION, PLURAL, interval=every, id="reconcile", registry=registry)(reconcile_timer)
    kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup", registry=registry)(on_delete)
    if options.get("KUBEJURY_WEBHOOK_PORT"):
        kopf.on.validate(GROUP, VERSION, PLURAL, id="validate-evalrun", registry=registry)(validate)
    return registry


def _register_watches(registry: kopf.OperatorRegistry) -> None:
    """The watch-fed caches (one index per kind, for the whole operator) and the child-change triggers."""
    for kind, index in watched.CHILD_INDEXES.items():
        group, version, plural = watched.RESOURCES[kind]
        labels = watched.POD_LABELS if kind == "Pod" else watched.CHILD_LABELS
        entry = watched.pod_entry if kind == "Pod" else watched.child_entry
        kopf.index(group, version, plural, id=index, labels=dict(labels), registry=registry)(_indexer(entry))
    kopf.index("", "v1", "nodes", id=watched.NODE_INDEX, registry=registry)(_indexer(watched.node_entry))
    kopf.index(GROUP, VERSION, PLURAL, id=watched.EVALRUN_INDEX, registry=registry)(
        _indexer(watched.evalrun_entry)
    )
    for kind in watched.TRIGGER_KINDS:
        group, version, plural = watched.RESOURCES[kind]
        changed = kopf.on.event(
            group,
            version,
            plural,
            id=f"{plural}-changed",
            labels=dict(watched.CHILD_LABELS),
            registry=registry,
        )
        changed(_child_event_handler(kind))


def _indexer(entry: Callable[[Mapping[str, Any]], object]) -> Callable[..., object]:
    """A kopf index function: the body in, :mod:`.watched`'s entry out."""

    def index(body: kopf.Body, **_: Any) -> object:
        return entry(body)

    return index
