"""One level-triggered reconcile of one EvalRun: observe, plan, apply.

Why this module exists: the same steps serve a run's creation, its resumption after an operator
restart and every later change — read the run's spec (and refuse one beyond the chart's
allow-lists, the webhook may be off), place it (or read back its pinned placement), observe its
children from the watch-fed caches and its progress from storage (:mod:`.observe`), let the pure
planner decide (:mod:`.reconcile`), and carry the plan out (:mod:`.apply`). It is kept apart from
the kopf wiring (:mod:`.handlers`), which only decides *when* this runs, and from the planner,
which never touches the cluster. A settled (finished and written) run returns before any call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from kubejury.config import spec as specmod
from kubejury.records.timestamps import now_time
from kubejury_operator import metrics
from kubejury_operator import status as st
from kubejury_operator.apply import apply_plan
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.memory import RunKey, RunMemory, run_key
from kubejury_operator.observe import (
    StorageReader,
    observe_cluster,
    observe_oom_kills,
    observe_queue,
    observe_reuse_document,
    observe_reuse_sources,
    observe_sequential_document,
    observe_storage,
)
from kubejury_operator.observed import Observed
from kubejury_operator.placing import compute_placements
from kubejury_operator.reconcile import plan, plan_invalid_spec
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.tenancy import run_policy_problems
from kubejury_operator.watched import Caches, plain


async def reconcile(
    runtime: OperatorRuntime,
    body: Mapping[str, Any],
    logger: logging.Logger | Any,
    caches: Caches | None = None,
) -> str:
    """One level-triggered reconcile of one EvalRun; returns the phase written to status. Children
    and Nodes come from ``caches`` (the watch-fed indexes); nothing is listed. A run whose spec is
    invalid is reported without them."""
    obj = plain(body)
    key = run_key(obj)
    generation = int((obj.get("metadata") or {}).get("generation") or 1)
    previous: dict[str, Any] = {k: v for k, v in (obj.get("status") or {}).items() if k != "kopf"}
    if st.settled(previous, generation):
        return str(previous["phase"])  # finished and written: costs nothing from now on
    api = runtime.gateway()
    memory = runtime.memory(key)
    evalrun = await _valid_spec(runtime, memory, obj, previous, logger)
    if evalrun is None:
        return "Failed"  # already reported for this generation; wait for a spec change
    if caches is None:
        raise kopf.TemporaryError("no watch-fed caches: the indexes are not registered", delay=5)
    run = memory.pinned_run(obj, evalrun, previous, runtime.settings) or _placed_now(
        runtime, obj, evalrun, caches
    )
    observed = await _observe(runtime, memory, caches, evalrun, run, key, previous, logger)
    decided = plan(run, observed, previous, now_time())
    memory.active = not st.finished(decided.status)
    now = time.monotonic()
    since = memory.since_status_written(now)
    interval = st.minor_interval(runtime.active_runs())
    if await apply_plan(api, obj, decided, previous, logger, memory.expectations, since, interval):
        memory.status_written_at = now
    metrics.observe_run(metrics.observation(*key, decided.status, observed.progress))
    return decided.phase


async def _valid_spec(
    runtime: OperatorRuntime,
    memory: RunMemory,
    obj: Mapping[str, Any],
    previous: Mapping[str, Any],
    logger: kopf.Logger,
) -> specmod.EvalRun | None:
    """The run's parsed spec when it is valid and within the chart's allow-lists. Otherwise the
    run is marked Failed and :class:`kopf.PermanentError` raised — or ``None`` returned when this
    generation was reported already."""
    namespace = run_key(obj)[0]
    evalrun, problems = memory.parsed_spec(obj)
    # The chart's allow-lists hold here too: the webhook may be off or have failed open.
    beyond = run_policy_problems(evalrun, namespace, runtime.policy) if evalrun is not None else []
    if evalrun is not None and not beyond:
        return evalrun
    memory.active = False  # Failed until its spec changes: its counters take no share of the budget
    generation = int((obj.get("metadata") or {}).get("generation") or 1)
    invalid = plan_invalid_spec([str(p) for p in [*problems, *beyond]], generation, previous, now_time())
    if invalid is None:
        return None
    await apply_plan(runtime.gateway(), obj, invalid, previous, logger)
    raise kopf.PermanentError(f"invalid EvalRun spec: {invalid.events[0].message}")


def _placed_now(
    runtime: OperatorRuntime, obj: Mapping[str, Any], evalrun: specmod.EvalRun, caches: Caches
) -> ClusterRun:
    """A Pending run's view, placed on the Nodes as they are now."""
    placements = compute_placements(evalrun, caches.all_nodes(), runtime.settings.extra_tolerations)
    return cluster_run(obj, evalrun, placements, runtime.settings)


async def _observe(
    runtime: OperatorRuntime,
    memory: RunMemory,
    caches: Caches,
    evalrun: specmod.EvalRun,
    run: ClusterRun,
    key: RunKey,
    previous: Mapping[str, Any],
    logger: kopf.Logger,
) -> Observed:
    """The run as it is: children from the caches, with this operator's writes the caches do not
    show yet (:mod:`.expectations`), the OOM kills of failed Jobs not yet replaced, then progress
    from storage; for a run that reuses earlier runs, the document its reuse step wrote and, while
    that step is not done, the runs it names; for a queued run, what Kueue says of its queue."""
    api = runtime.gateway()
    observed = await observe_cluster(api, caches, *key, evalrun)
    memory.expectations.settle(observed, time.monotonic())
    observed = memory.expectations.view(observed)
    observed = await observe_oom_kills(
        api, key[0], observed
    )  # after the view: a replacement just made counts
    reader = StorageReader(api, runtime.policy, memory.progress, logger)
    observed = await observe_storage(reader, evalrun, run, observed, previous, time.monotonic())
    observed = await observe_reuse_document(reader, evalrun, run, observed, previous)
    observed = await observe_sequential_document(reader, evalrun, run, observed, previous)
    observed = await observe_reuse_sources(api, run, evalrun, observed)
    return await observe_queue(api, caches, run, observed, previous, runtime.settings.kueue_enabled)
