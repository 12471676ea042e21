"""The operator's brain: a pure, level-triggered planner for one EvalRun.

Why this module exists: an operator that remembers things in memory breaks on restart; one that
decides from *what it observes now* resumes anywhere. :func:`plan` takes the run
(:class:`~kubejury_operator.cluster_run.ClusterRun`), what is observed in the cluster and in
storage (:class:`~kubejury_operator.observed.Observed`) and the previous status, and returns the
actions that move the cluster towards the desired state plus the complete new ``status``. It
performs no I/O and reads no clock (``now`` is an argument), so every phase transition is a
table-driven unit test.

:func:`plan` is a sequence of named steps: :func:`observe_facts` (what is generated, judged,
failed, unschedulable — and whether the run is *blocked*, decided once), :func:`desired_servers`,
:func:`plan_actions`, :func:`decide_phase`, then the status, conditions and events built by
:mod:`kubejury_operator.status`.

The orchestration it encodes:

* Placement first. A model that fits no node sets ``Unschedulable`` and nothing is deployed — no
  Pod is ever left Pending. Placement decisions are pinned in ``status.placement`` once the run
  has left ``Pending``, so a node change mid-run never changes a model's quantization.
* At most ``spec.maxConcurrentModels`` evaluated-model servers run at once, in spec order.
  Judges' servers are not counted (they must stay up for the whole judging) and a judge that is
  the same model as an evaluated one (``sameAs``, same source and runtime) shares its server.
* A model's generation Jobs (one per series, Indexed when sharded) start when its server is
  ready; its Deployment is scaled to zero as soon as all its series are generated, unless it also
  serves a judge.
* Pipelining: judging of (judge, series) runs in rounds. A round (a Job judging every answer
  stored when it starts; the engine skips what is already judged) starts as soon as more models
  have finished generating the series than the previous round saw, and no round is running. The
  round that starts after the last model finished is the final one; with no overlap there is
  exactly one judge Job per judge × series.
* Judges' servers are scaled to zero when all their judge Jobs succeeded; the aggregation Job
  runs when every judge Job succeeded; ``Succeeded`` carries the summary read from the report.
* A stage counts as done when its Job succeeded *or* its progress record says it is complete, so
  a Job deleted by someone (or by a TTL) is not re-run after it finished.
* Reuse (``spec.reuse.from``) comes first: the reuse Job copies the records of the runs named and
  nothing else starts before it succeeded (a source that cannot be used blocks the run, as a missing
  Secret does). A stage whose every record was copied counts as done, and a judging round is due
  only for models with answers that have no copied judgment, so servers come up only for the
  answers and judgments still to make.
* A Job that failed for good because a container was OOM-killed is replaced with twice its memory
  limit, up to ``jobs.oomRetry.maxMemory`` (:mod:`kubejury_operator.oom_retry`); every step reads
  a Job by its first name, standing for its latest attempt. Any other Job that failed for good
  (backoffLimit / activeDeadlineSeconds), or an OOM kill past the cap, fails the run; a server
  whose Deployment exceeds its progress deadline fails the run too. On failure and on success
  every server is scaled to zero.
* Kueue (a run with a queue): every Job and server Deployment created carries the queue label;
  a server comes first (its Pod waits gated until admitted) and its Jobs only once it is Ready;
  the guards of :mod:`kubejury_operator.queueing` scale a server whose Jobs all wait for quota to
  zero and stop the Jobs of a server Kueue preempted; a missing LocalQueue blocks the run; a
  server's progress deadline is not counted while its Pod waits for admission.
* Weights before GPUs (:mod:`kubejury_operator.prefetching`): with a model cache claim, a server
  with ``hf://`` or ``s3://`` weights is created only once its CPU-only prefetch Job succeeded;
  downloads start for the servers wanted now, the next ``maxConcurrentModels`` models in bring-up
  order and the judges with work left, and take no ``maxConcurrentModels`` slot.
* A budgeted run (``spec.budget``) asks its questions look by look (:mod:`kubejury_operator.looks`):
  generation Jobs of the continuing models, the look's judging Jobs, then the look Job, whose
  ``sequential.json`` says which models stopped; a stopped model counts as generated, so its server
  is scaled to zero in the reconcile that reads it. Generation and judging are complete once every
  model stopped; the aggregation runs as for any run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from kubejury.records.gpu_usage import GpuUsage
from kubejury.records.run_status import RunStatus, RunSummary
from kubejury_operator import looks, oom_retry, prefetching, queueing
from kubejury_operator import manifests as mf
from kubejury_operator import status as st
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.facts import Facts, covered_models, judge_rounds, observe_facts
from kubejury_operator.gpu_accounting import account, lead_seconds
from kubejury_operator.observed import Observed
from kubejury_operator.queueing import Guards
from kubejury_operator.vocabulary import Endpoint, Manifest

PHASES = st.PHASES
TERMINAL_PHASES = st.TERMINAL_PHASES


# ------------------------------------------------------------------------------------ outputs


@dataclass(frozen=True)
class Action:
    """One change to make: create an object, scale a Deployment, or delete an object."""

    verb: Literal["create", "scale", "delete"]
    kind: str
    name: str
    manifest: Manifest | None = None
    replicas: int | None = None

    def describe(self) -> str:
        extra = f" to {self.replicas}" if self.verb == "scale" else ""
        return f"{self.verb} {self.kind}/{self.name}{extra}"


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: dict[str, Any]
    events: tuple[st.Event, ...]

    @property
    def phase(self) -> str:
        return str(self.status["phase"])


# ---------------------------------------------------------------------------- desired servers


def desired_servers(run: ClusterRun, facts: Facts, observed: Observed, lead: float = 0.0) -> dict[str, int]:
    """Step 2: replicas wanted per server key (absent: zero).

    Models that still have series to generate, in bring-up order (``ClusterRun.bringup_order``:
    longest first when that ends the run sooner, else spec order), up to ``maxConcurrentModels`` (a
    model that also serves a judge is kept up by that role and not counted); every judge's
    server while it has a judging round running or due (:func:`judging_due`). Nothing while the
    run is blocked or finished.

    Bring-up overlaps the previous model's tail: ``lead`` is how long a server takes to come up
    here (:func:`kubejury_operator.gpu_accounting.lead_seconds`); for each generating model whose
    progress says it finishes within ``lead`` (:func:`finishing_soon`), the next model's server
    starts now, and a judge's server starts when answers will be waiting by the time it is Ready.
    So no server waits for work and no work waits for a server; the bring-up itself is not held
    time (docs/operator.md, "GPU accounting").
    """
    desired: dict[str, int] = {}
    if facts.terminal or facts.blocked or facts.reusing:
        return desired
    judge_keys = {j.key for j in run.judges if j.in_cluster}
    soon = finishing_soon(run, observed, facts, lead) if not run.budgeted else frozenset()
    budget = max(1, run.max_concurrent_models)
    for model in _bringup_candidates(run, observed):
        if not model.in_cluster or all((model.name, s) in facts.generated for s in run.series):
            continue
        if model.key in judge_keys:  # its server also judges: not counted against the budget
            desired[model.key] = 1
        elif budget > 0:
            desired[model.key] = 1
            budget -= 1
            if model.name in soon:
                budget += 1  # its slot is as good as free: the next model starts its bring-up
    for judge in run.judges:
        if judge.in_cluster and (
            judging_due(run, observed, facts, judge) or (soon and not judged_all(run, facts, judge))
        ):
            desired[judge.key] = 1
    return desired


def _bringup_candidates(run: ClusterRun, observed: Observed) -> list[Endpoint]:
    """The evaluated models in bring-up order; in a budgeted run those with generation left in the
    current look first, so a model waiting for the look's decision keeps its server only while a
    slot is spare (:func:`kubejury_operator.looks.needs_server`)."""
    order = run.models_in_bringup_order()
    if not run.budgeted:
        return order
    return sorted(order, key=lambda m: not looks.needs_server(run, observed, m))


def finishing_soon(run: ClusterRun, observed: Observed, facts: Facts, lead: float) -> frozenset[str]:
    """Models whose remaining generation, at the rate their progress records report, ends within
    ``lead`` seconds (every series they still generate has a record with a rate)."""
    if lead <= 0:
        return frozenset()
    soon: set[str] = set()
    for model in run.models:
        left = [s for s in run.series if (model.name, s) not in facts.generated]
        records = [observed.progress.get(("generate", s, model.name)) for s in left]
        if not left or any(r is None or r.rate_per_s <= 0 for r in records):
            continue
        seconds = max(max(0, r.total - r.done) / r.rate_per_s for r in records if r is not None)
        if seconds <= lead:
            soon.add(model.name)
    return frozenset(soon)


def judged_all(run: ClusterRun, facts: Facts, judge: Endpoint) -> bool:
    users = [j for j in run.judges if j.key == judge.key]
    return all((j.name, s) in facts.judged for j in users for s in run.series)


def next_round(run: ClusterRun, observed: Observed, facts: Facts, judge: Endpoint, series: str) -> int | None:
    """How many models have finished generating ``series`` when a new judging round of (judge,
    series) is due now; ``None`` when none is. A round is due when no round is running, more models
    have finished than the last round saw, and one of them has an answer without a judgment the
    reuse step copied (a round for models whose judgments were all copied has nothing to judge)."""
    if (judge.name, series) in facts.judged:
        return None
    rounds = judge_rounds(run, observed, judge, series)
    if any(not r.finished for r in rounds):
        return None
    finished = [m.name for m in run.models if (m.name, series) in facts.generated]
    covered = covered_models(observed, judge.name, series)
    if len(finished) <= max((r.models_complete for r in rounds), default=0):
        return None
    return len(finished) if any(m not in covered for m in finished) else None


def judging_due(run: ClusterRun, observed: Observed, facts: Facts, judge: Endpoint) -> bool:
    """A judge's server is wanted only while it has judging to do: a round of any judge sharing
    the server is running, or one is due (:func:`next_round`). Between rounds and before the first
    model with answers to judge finishes it is scaled to zero, so a judge never holds GPUs waiting
    for answers (docs/operator.md, "GPU accounting"). A budgeted run judges look by look
    (:func:`kubejury_operator.looks.judging_due`)."""
    if run.budgeted:
        return looks.judging_due(run, observed, judge)
    for user in (j for j in run.judges if j.key == judge.key):
        for series in run.series:
            if (user.name, series) in facts.judged:
                continue
            rounds = judge_rounds(run, observed, user, series)
            if any(not r.finished for r in rounds) or next_round(run, observed, facts, user, series):
                return True
    return False


def server_ready(run: ClusterRun, observed: Observed, desired: Mapping[str, int], endpoint: Endpoint) -> bool:
    """An endpoint can take requests: an external one always; a server when wanted and ready."""
    if not endpoint.in_cluster:
        return True
    dep = observed.deployments.get(vocab.workload_name(run.ref.name, endpoint.key))
    return bool(dep and dep.ready) and desired.get(endpoint.key, 0) > 0


# ------------------------------------------------------------------------------------ actions


def _shared_objects(run: ClusterRun, observed: Observed) -> list[Action]:
    """The spec ConfigMap and (unless the chart names one) the Jobs' ServiceAccount."""
    actions: list[Action] = []
    name = run.ref.name
    if ("ConfigMap", vocab.spec_configmap_name(name)) not in observed.present:
        cm = mf.spec_configmap(run.ref, run.body)
        actions.append(Action("create", "ConfigMap", cm["metadata"]["name"], cm))
    if (
        run.settings.job_service_account is None
        and ("ServiceAccount", vocab.job_service_account_name(name)) not in observed.present
    ):
        sa = mf.job_service_account(run.ref)
        actions.append(Action("create", "ServiceAccount", sa["metadata"]["name"], sa))
    return actions


def _server_actions(
    run: ClusterRun, observed: Observed, facts: Facts, desired: Mapping[str, int]
) -> list[Action]:
    """Create each wanted server (Deployment and Service) and scale every server to what is wanted.
    A server of the run under a name the planner no longer uses (an operator before issue 29
    named them without a hash) is scaled to zero, so it never holds GPUs for nothing."""
    actions: list[Action] = []
    known = {vocab.workload_name(run.ref.name, key) for key in facts.servers}
    for dep_name, dep in sorted(observed.deployments.items()):
        if dep_name not in known and dep.replicas > 0:
            actions.append(Action("scale", "Deployment", dep_name, replicas=0))
    for key, endpoint in facts.servers.items():
        dep_name = vocab.workload_name(run.ref.name, key)
        want = desired.get(key, 0)
        current = observed.deployments.get(dep_name)
        if current is None and want > 0 and _weights_ready(run, observed, endpoint):
            manifest = mf.model_deployment(run.ref, endpoint, want, run.settings)
            actions.append(Action("create", "Deployment", dep_name, manifest))
        if want > 0 and ("Service", dep_name) not in observed.present:
            actions.append(Action("create", "Service", dep_name, mf.model_service(run.ref, endpoint)))
        if current is not None and current.replicas != want:
            actions.append(Action("scale", "Deployment", dep_name, replicas=want))
    return actions


def _weights_ready(run: ClusterRun, observed: Observed, endpoint: Endpoint) -> bool:
    """The server of ``endpoint`` may be created: its weights need no prefetch, or are in the cache."""
    return prefetching.weights_ready(
        run.ref.name,
        endpoint,
        run.settings,
        {name: job.succeeded for name, job in observed.jobs.items()},
        frozenset(observed.deployments),
        vocab.workload_name(run.ref.name, endpoint.key),
    )


def _prefetch_jobs(
    run: ClusterRun, observed: Observed, facts: Facts, desired: Mapping[str, int]
) -> list[Action]:
    """A prefetch Job for each server whose weights are wanted now and not yet in the cache
    (:func:`kubejury_operator.prefetching.wanted_downloads`): not counted in maxConcurrentModels."""
    judge_keys = {j.key for j in run.judges if j.in_cluster}
    next_models = [
        m
        for m in run.models_in_bringup_order()
        if m.in_cluster
        and m.key not in judge_keys
        and not all((m.name, s) in facts.generated for s in run.series)
    ]
    judges = [j for j in run.judges if j.in_cluster and not judged_all(run, facts, j)]
    actions: list[Action] = []
    for key in prefetching.wanted_downloads(desired, next_models, judges, run.max_concurrent_models):
        endpoint = facts.servers.get(key)
        name = prefetching.prefetch_job_name(run.ref.name, key)
        if (
            endpoint is None
            or not prefetching.prefetches(endpoint, run.settings)
            or name in observed.jobs
            or _weights_ready(run, observed, endpoint)
        ):
            continue
        actions.append(Action("create", "Job", name, mf.prefetch_job(run.ref, endpoint, run.settings)))
    return actions


def _generation_jobs(
    run: ClusterRun, observed: Observed, facts: Facts, desired: Mapping[str, int]
) -> list[Action]:
    """A generation Job per (model, series) not yet generated, once the model's server is ready."""
    actions: list[Action] = []
    for model in run.models:
        if not server_ready(run, observed, desired, model):
            continue
        for series in run.series:
            job_name = vocab.generation_job_name(run.ref.name, model.name, series)
            if (model.name, series) in facts.generated or job_name in observed.jobs:
                continue
            manifest = mf.generation_job(
                run.ref, model, series, run.settings, run.storage, shards=run.generation_shards
            )
            actions.append(Action("create", "Job", job_name, manifest))
    return actions


def _judge_jobs(
    run: ClusterRun, observed: Observed, facts: Facts, desired: Mapping[str, int]
) -> list[Action]:
    """The next judging round of each (judge, series) that has one due.

    A round starts as soon as more models have finished generating the series than the previous
    round saw, and no round is running (:func:`next_round`); the round that starts after the last
    model finished is the final one.
    """
    actions: list[Action] = []
    for judge in run.judges:
        if not server_ready(run, observed, desired, judge):
            continue
        for series in run.series:
            complete = next_round(run, observed, facts, judge, series)
            if not complete:
                continue
            manifest = mf.judge_job(
                run.ref,
                judge,
                series,
                run.settings,
                run.storage,
                round_=len(judge_rounds(run, observed, judge, series)) + 1,
                models_complete=complete,
            )
            actions.append(Action("create", "Job", manifest["metadata"]["name"], manifest))
    return actions


def _look_jobs(run: ClusterRun, observed: Observed, desired: Mapping[str, int]) -> list[Action]:
    """A budgeted run's Jobs of the current look (:func:`kubejury_operator.looks.due_jobs`)."""
    due = looks.due_jobs(run, observed, lambda e: server_ready(run, observed, desired, e))
    return [Action("create", "Job", job["metadata"]["name"], job) for job in due]


def _slot_job(
    run: ClusterRun, observed: Observed, slot: str, gpu: GpuUsage | None
) -> tuple[Manifest, Endpoint | None] | None:
    """The Job first named ``slot`` as it would be created now, and the endpoint it sends requests
    to (``None`` for the aggregation); ``None`` for a name that is none of the run's Jobs."""
    found = looks.slot_job(run, slot) if run.budgeted else None
    if found is not None:
        return found
    for model in run.models:
        for series in run.series:
            if vocab.generation_job_name(run.ref.name, model.name, series) == slot:
                job = mf.generation_job(
                    run.ref, model, series, run.settings, run.storage, shards=run.generation_shards
                )
                return job, model
    for judge in run.judges:
        for series in run.series:
            for round_ in range(1, len(run.models) + 2):
                if vocab.judge_job_name(run.ref.name, judge.name, series, round_) == slot:
                    state = observed.jobs[slot]
                    job = mf.judge_job(
                        run.ref,
                        judge,
                        series,
                        run.settings,
                        run.storage,
                        round_=round_,
                        models_complete=state.models_complete,
                    )
                    return job, judge
    if vocab.aggregation_job_name(run.ref.name) == slot:
        return mf.aggregation_job(run.ref, run.settings, run.storage, gpu_usage=gpu), None
    if vocab.reuse_job_name(run.ref.name) == slot:
        return _reuse_manifest(run, observed), None
    for endpoint in (*run.models, *run.judges):
        if prefetching.prefetch_job_name(run.ref.name, endpoint.key) == slot:
            return mf.prefetch_job(run.ref, endpoint, run.settings), None
    return None


def _reuse_manifest(run: ClusterRun, observed: Observed) -> Manifest:
    sources = [(s.name, s.uri) for s in observed.reuse_sources.usable]
    return mf.reuse_job(run.ref, sources, run.settings, run.storage)


def _reuse_job(run: ClusterRun, observed: Observed) -> list[Action]:
    """The reuse Job, once, with every source ``spec.reuse.from`` names, each resolved to its own
    prefix (the run is blocked while one may not be used; none is created before all are read)."""
    name = vocab.reuse_job_name(run.ref.name)
    resolved = {s.name for s in observed.reuse_sources.usable}
    if name in observed.jobs or not set(run.reuse_from) <= resolved:
        return []
    return [Action("create", "Job", name, _reuse_manifest(run, observed))]


def _oom_replacements(
    run: ClusterRun, observed: Observed, facts: Facts, desired: Mapping[str, int], gpu: GpuUsage | None
) -> list[Action]:
    """The Job that replaces each OOM-killed one with more memory (:mod:`.oom_retry`): the same Job
    under the next attempt's name, created once the server it sends requests to is ready."""
    actions: list[Action] = []
    for decision in facts.oom.values():
        found = _slot_job(run, observed, decision.slot, gpu)
        if decision.retry is None or decision.memory_limit is None or found is None:
            continue
        job, endpoint = found
        if endpoint is not None and not server_ready(run, observed, desired, endpoint):
            continue
        attempt = observed.jobs[decision.slot].attempt + 1
        annotations = oom_retry.replacement_annotations(decision, attempt)
        manifest = mf.memory_raised_job(
            job, decision.retry, decision.memory_limit, decision.memory_request, annotations
        )
        actions.append(Action("create", "Job", decision.retry, manifest))
    return actions


def queued(run: ClusterRun, actions: Sequence[Action]) -> list[Action]:
    """``actions`` with every Job and Deployment created carrying the run's Kueue queue label and
    priority class (:func:`kubejury_operator.manifests.queued`); unchanged for a run not queued."""
    if run.queue_name is None:
        return list(actions)
    return [
        replace(a, manifest=mf.queued(a.manifest, run.queue_name, run.priority_class))
        if a.verb == "create" and a.kind in ("Job", "Deployment") and a.manifest is not None
        else a
        for a in actions
    ]


def guard_actions(guards: Guards) -> list[Action]:
    """The Jobs the Kueue guards stop (:func:`kubejury_operator.queueing.guards`), deleted."""
    return [Action("delete", "Job", name) for name in guards.stop]


def plan_actions(
    run: ClusterRun,
    observed: Observed,
    facts: Facts,
    desired: Mapping[str, int],
    gpu: GpuUsage | None = None,
) -> list[Action]:
    """Step 3: what to create and scale. Servers are always scaled to what is desired (to zero
    when the run is finished); nothing new is created while the run is blocked, no Job once it is
    finished, and only the reuse Job while the run's reuse step has not finished. A queued run's
    Jobs and Deployments carry its queue label (:func:`queued`)."""
    return queued(run, _plan_actions(run, observed, facts, desired, gpu))


def _plan_actions(
    run: ClusterRun,
    observed: Observed,
    facts: Facts,
    desired: Mapping[str, int],
    gpu: GpuUsage | None = None,
) -> list[Action]:
    actions: list[Action] = [] if facts.blocked else _shared_objects(run, observed)
    actions += _server_actions(run, observed, facts, desired)
    if facts.terminal or facts.blocked:
        return actions
    if facts.reusing:  # the reuse step first, and nothing else until it succeeded
        return actions + _reuse_job(run, observed) + _oom_replacements(run, observed, facts, desired, gpu)
    actions += _prefetch_jobs(run, observed, facts, desired)
    if run.budgeted:
        actions += _look_jobs(run, observed, desired)
    else:
        actions += _generation_jobs(run, observed, facts, desired)
        actions += _judge_jobs(run, observed, facts, desired)
    actions += _oom_replacements(run, observed, facts, desired, gpu)
    if facts.judging_complete and facts.aggregation is None:
        agg_name = vocab.aggregation_job_name(run.ref.name)
        actions.append(
            Action(
                "create",
                "Job",
                agg_name,
                mf.aggregation_job(run.ref, run.settings, run.storage, gpu_usage=gpu),
            )
        )
    return actions


# -------------------------------------------------------------------------------------- phase


def decide_phase(run: ClusterRun, observed: Observed, facts: Facts, acting: bool) -> str:
    """Step 4: the phase, from the facts (``acting``: this round creates or scales something)."""
    if facts.failures:
        return "Failed"
    if facts.aggregated:
        return "Succeeded"
    if facts.judging_complete:
        return "Aggregating"
    if facts.generation_complete:
        return "Judging"
    if facts.blocked:
        return "Pending"
    if (
        facts.generated
        or any(
            vocab.generation_job_name(run.ref.name, m.name, s) in observed.jobs
            for m in run.models
            for s in run.series
        )
        or (run.budgeted and looks.any_generation_job(run, observed))
    ):
        return "Generating"
    if observed.deployments or observed.jobs or acting:
        return "Provisioning"
    return "Pending"


def _stays_finished(before: RunStatus, generation: int, phase: str) -> bool:
    """A finished run stays finished (its Jobs may be cleaned up by a TTL later)."""
    return before.finished and before.observed_generation == generation and phase != before.phase


def _finished_plan(previous: Mapping[str, Any], before: RunStatus, observed: Observed) -> Plan:
    """The stored status of a finished run kept as it was (``previous``, key for key); the only
    thing ever done again is scaling leftover servers to zero (and filling in a summary whose
    report became readable only now)."""
    scale_down = tuple(
        Action("scale", "Deployment", dep_name, replicas=0)
        for dep_name, dep in sorted(observed.deployments.items())
        if dep.replicas > 0
    )
    kept = dict(previous)
    if before.phase == "Succeeded" and before.summary is None and observed.summary is not None:
        kept["summary"] = RunSummary.from_json(observed.summary).to_json()
    return Plan(actions=scale_down, status=kept, events=())


# --------------------------------------------------------------------------------------- plan


def plan(run: ClusterRun, observed: Observed, previous: Mapping[str, Any], now: str) -> Plan:
    """Actions and new status for one reconcile of ``run`` (see the module docstring); the stored
    ``previous`` status is read once, as :class:`~kubejury.records.run_status.RunStatus`."""
    before = RunStatus.from_json(previous)
    every_job = observed  # GPU accounting counts the time of every attempt of a Job
    observed, oom = oom_retry.planning_view(observed, run.settings.job_oom_max_memory)
    facts = observe_facts(run, observed, before.phase, oom, now)
    guard = queueing.guards(run, observed, now)
    desired = desired_servers(run, facts, observed, lead_seconds(before.gpu, observed))
    desired = {key: want for key, want in desired.items() if key not in guard.release}
    gpu = account(run, every_job, desired, before.gpu, now)
    actions = plan_actions(run, observed, facts, desired, gpu) + guard_actions(guard)
    phase = decide_phase(run, observed, facts, acting=bool(actions))
    if _stays_finished(before, run.generation, phase):
        return _finished_plan(previous, before, observed)
    view = st.StatusInputs(run=run, observed=observed, facts=facts, desired=desired, phase=phase, gpu=gpu)
    conditions = st.conditions(view, before, now)
    status = st.run_status(view, conditions, before, now)
    events = st.events(view, conditions, before)
    return Plan(actions=tuple(actions), status=status.to_json(), events=events)


def plan_invalid_spec(
    problems: Sequence[str], generation: int, previous: Mapping[str, Any], now: str
) -> Plan | None:
    """The plan for a run whose spec does not parse: phase ``Failed`` with an ``InvalidSpec``
    condition naming every problem, and a Warning Event; ``None`` when this generation was already
    reported (nothing changes until the spec does)."""
    before = RunStatus.from_json(previous)
    if before.phase == "Failed" and before.observed_generation == generation:
        return None
    message = "; ".join(problems)[:2000]
    failed = st.condition((), "Failed", True, "InvalidSpec", message, generation, now)
    status = st.invalid_spec_status(generation, failed)
    return Plan(actions=(), status=status, events=(st.Event("Warning", "InvalidSpec", message),))
