"""Carrying out a plan through the Kubernetes API: its actions, the status patch, its Events.

Why this module exists: the planner decides and this module does, with the API's answers turned
into what the run's status says — a 409 is "already there" (the gateway answers ``False``), any
other refusal lands in the ``ApplyFailed`` condition naming the object and the API's message, the
status is written only when it changed (counters at most every
:func:`~kubejury_operator.status.minor_interval`), and an Event that cannot be posted never
fails a reconcile. Each create and scale is remembered in the run's
:class:`~kubejury_operator.expectations.Expectations` until the caches show it. Deleting a run's
children and, with ``cleanupPolicy: Delete``, its stored results is here too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import kopf

from kubejury.config import spec as specmod
from kubejury.records.timestamps import now_time
from kubejury_operator import run_storage
from kubejury_operator import status as st
from kubejury_operator import vocabulary as vocab
from kubejury_operator.expectations import Expectations
from kubejury_operator.gateway import GatewayError
from kubejury_operator.kube_api import KubeApi
from kubejury_operator.memory import run_key
from kubejury_operator.observe import storage_secret
from kubejury_operator.reconcile import Action, Plan
from kubejury_operator.tenancy import TenantPolicy, run_policy_problems

# Children that other children use (the spec ConfigMap the Jobs mount, the ServiceAccount they run
# as): a plan's actions on these are carried out before the rest.
PREREQUISITE_KINDS = frozenset({"ConfigMap", "ServiceAccount"})
# The kinds a run owns, deleted with it.
CHILD_KINDS = ("Job", "Deployment", "Service", "ConfigMap", "ServiceAccount")


async def carry_out(
    api: KubeApi, namespace: str, action: Action, logger: kopf.Logger, expectations: Expectations | None
) -> st.ApplyFailure | None:
    """One action; the failure to report when the API server refused it."""
    try:
        if action.verb == "create" and action.manifest is not None:
            await api.create(action.manifest)
            if expectations is not None:
                expectations.expect_created(action.kind, action.name, action.manifest, time.monotonic())
        elif action.verb == "scale" and action.replicas is not None:
            await api.scale(action.kind, namespace, action.name, action.replicas)
            if expectations is not None:
                expectations.expect_scaled(action.name, action.replicas, time.monotonic())
        elif action.verb == "delete":
            await api.delete(action.kind, namespace, action.name)
        logger.info("%s", action.describe())
        return None
    except GatewayError as exc:
        logger.warning("%s failed: %s", action.describe(), exc)
        return st.ApplyFailure(action.describe(), exc.reason, exc.api_message)


class StatusWriter:
    """Writes a run's status patches, each only what changed since the last one written."""

    def __init__(
        self,
        api: KubeApi,
        key: tuple[str, str],
        previous: Mapping[str, Any],
        since: float | None,
        interval: float = st.MINOR_STATUS_INTERVAL,
    ):
        self.api, self.key = api, key
        self.written: Mapping[str, Any] = previous
        self.wrote = False
        self._since = since  # seconds since this process last wrote it before this reconcile
        self._interval = interval  # seconds counters wait (:func:`~kubejury_operator.status.minor_interval`)

    async def write(self, status: Mapping[str, Any]) -> None:
        patch = st.due_patch(self.written, status, None if self.wrote else self._since, self._interval)
        if not patch:
            return
        await self.api.patch_status("EvalRun", *self.key, patch)
        self.written, self.wrote = {**self.written, **status}, True


async def apply_plan(
    api: KubeApi,
    obj: Mapping[str, Any],
    decided: Plan,
    previous: Mapping[str, Any],
    logger: kopf.Logger,
    expectations: Expectations | None = None,
    since_written: float | None = None,
    minor_interval: float = st.MINOR_STATUS_INTERVAL,
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
    ``minor_interval`` old (:func:`~kubejury_operator.status.minor_interval`,
    :func:`~kubejury_operator.status.due_patch`). Each create and scale done is remembered in
    ``expectations`` until the caches show it."""
    namespace, _name = key = run_key(obj)
    now = now_time()
    writer = StatusWriter(api, key, previous, since_written, minor_interval)
    failures: list[st.ApplyFailure] = []
    first = [a for a in decided.actions if a.kind in PREREQUISITE_KINDS]
    rest = [a for a in decided.actions if a.kind not in PREREQUISITE_KINDS]
    early = None if st.apply_failed(previous) else st.with_apply_result(decided.status, (), previous, now)
    for wave, status in ((first, early), (rest, None)):
        results = await asyncio.gather(
            *(carry_out(api, namespace, a, logger, expectations) for a in wave),
            *((writer.write(status),) if status is not None else ()),
        )
        failures += [f for f in results if isinstance(f, st.ApplyFailure)]
    await writer.write(st.with_apply_result(decided.status, failures, previous, now))
    await post_events(api, obj, decided, logger)
    return writer.wrote


async def post_events(api: KubeApi, obj: Mapping[str, Any], decided: Plan, logger: kopf.Logger) -> None:
    """The plan's Events, posted at once (one round trip, not one per Event: the run's next
    reconcile waits for this one to end); one that cannot be posted is logged (an Event is
    informational)."""

    async def post(event: st.Event) -> None:
        try:
            await api.post_event(obj, event.type, event.reason, event.message)
        except GatewayError as exc:  # never fail a reconcile over one
            logger.warning("cannot post Event %s for %s/%s: %s", event.reason, *run_key(obj), exc)

    await asyncio.gather(*(post(event) for event in decided.events))


def run_labels(name: str) -> dict[str, str]:
    """The labels every child of run ``name`` carries."""
    return {vocab.LABEL_RUN: vocab.label_value(name), vocab.LABEL_MANAGED_BY: vocab.MANAGED_BY}


async def delete_children(api: KubeApi, obj: Mapping[str, Any]) -> None:
    """Delete the run's children of every kind it owns — only those its uid owns (a newer run of
    the same name keeps its own)."""
    meta = obj.get("metadata") or {}
    namespace, name = run_key(obj)
    for kind in CHILD_KINDS:
        for child in await api.list_objects(kind, namespace, run_labels(name)):
            owners = child["metadata"].get("ownerReferences") or []
            if meta.get("uid") and not any(o.get("uid") == meta.get("uid") for o in owners):
                continue  # not ours (a newer run of the same name)
            await api.delete(kind, namespace, child["metadata"]["name"])


async def delete_stored_results(
    api: KubeApi, obj: Mapping[str, Any], policy: TenantPolicy, logger: kopf.Logger
) -> None:
    """``cleanupPolicy: Delete``: remove the run's stored results, with the run's own credentials."""
    meta = obj.get("metadata") or {}
    namespace, name = run_key(obj)
    evalrun, _problems = specmod.evalrun_problems({k: v for k, v in obj.items() if k != "status"})
    if evalrun is None:
        logger.warning("spec is invalid; stored results of %s are kept", name)
        return
    if run_policy_problems(evalrun, namespace, policy):
        logger.warning("storage of %s/%s is outside what the chart allows; nothing deleted", namespace, name)
        return
    ref = vocab.RunRef(name=name, namespace=namespace, uid=str(meta.get("uid") or ""))
    try:
        secret = await storage_secret(api, namespace, evalrun)
        deleted = await asyncio.to_thread(
            run_storage.delete_results, evalrun, ref, secret, allowed_endpoints=policy.storage_endpoints
        )
    except run_storage.ResultsKept as kept:
        logger.warning("%s/%s: %s", namespace, name, kept)
        return
    except Exception as exc:
        raise kopf.TemporaryError(f"cannot delete stored results: {exc}", delay=30) from exc
    logger.info("cleanupPolicy Delete: removed %d stored objects of run %s", deleted, name)
