"""Step 1 of planning: the facts about one EvalRun, derived once from what is observed.

Why this module exists: which (model, series) are generated, which (judge, series) judged (by the
run's own Jobs, or by copies its reuse step made), what failed, which servers have no node, and
whether the run may start anything at all (a missing Secret, a refused reuse source, a missing Kueue
LocalQueue) — every later
step of :func:`kubejury_operator.reconcile.plan` and every condition in the status reads these,
so they are computed here once instead of re-derived wherever they are needed. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubejury_operator import looks
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.observed import JobState, Observed, reuse_step_done
from kubejury_operator.oom_retry import OomDecision, attempt_name, failure_detail
from kubejury_operator.queueing import deadline_exempt, local_queue_missing
from kubejury_operator.vocabulary import Endpoint

Pair = tuple[str, str]  # (model or judge name, series)


@dataclass(frozen=True)
class Facts:
    """What is true of the run right now, derived once from observation (step 1 of :func:`plan`).

    ``blocked`` — nothing new may start: a model fits no node while the run is still ``Pending``
    with nothing deployed, a Secret the run needs is missing, or a run it is to reuse cannot be
    used. ``terminal`` — the run failed or its report is ready. ``reusing`` — the run's reuse step
    has not finished, so nothing but that step may start. Every later step reads these instead of
    re-deriving them.
    """

    servers: Mapping[str, Endpoint]  # every in-cluster server by key (a shared server once)
    generated: frozenset[Pair]
    judged: frozenset[Pair]
    generation_jobs: int  # model × series
    judging_jobs: int  # judge × series
    aggregation: JobState | None
    failures: tuple[str, ...]
    unschedulable: tuple[Endpoint, ...]  # servers without a node that can run them
    waiting_for_node: bool  # unschedulable, and still Pending with nothing deployed
    missing_secrets: tuple[str, ...]
    # Jobs (by first name) whose latest attempt was OOM-killed: replaced, or past the cap (oom_retry)
    oom: Mapping[str, OomDecision] = field(default_factory=dict)
    reusing: bool = False  # spec.reuse.from is set and the reuse step has not finished
    reuse_refusals: tuple[str, ...] = ()  # sources that cannot be used, while reusing
    local_queue_missing: bool = False  # Kueue: the run's LocalQueue does not exist (queueing.py)

    @property
    def generation_complete(self) -> bool:
        return len(self.generated) == self.generation_jobs

    @property
    def judging_complete(self) -> bool:
        return self.generation_complete and len(self.judged) == self.judging_jobs

    @property
    def aggregated(self) -> bool:
        return bool(self.aggregation and self.aggregation.succeeded) and self.judging_complete

    @property
    def terminal(self) -> bool:
        return bool(self.failures) or self.aggregated

    @property
    def blocked(self) -> bool:
        return (
            self.waiting_for_node
            or bool(self.missing_secrets)
            or bool(self.reuse_refusals)
            or self.local_queue_missing
        )


def in_cluster_servers(run: ClusterRun) -> dict[str, Endpoint]:
    """Every in-cluster server, by deployment key (a judge sharing a model's server is one entry)."""
    servers: dict[str, Endpoint] = {}
    for endpoint in (*run.models, *run.judges):
        if endpoint.in_cluster:
            servers.setdefault(endpoint.key, endpoint)
    return servers


def judge_rounds(run: ClusterRun, observed: Observed, judge: Endpoint, series: str) -> list[JobState]:
    """The judging rounds of (judge, series) that exist, in order."""
    found: list[JobState] = []
    for n in range(1, len(run.models) + 2):
        state = observed.jobs.get(vocab.judge_job_name(run.ref.name, judge.name, series, n))
        if state is None:
            break
        found.append(state)
    return found


def _copied_whole(observed: Observed, stage: str, series: str, name: str) -> bool:
    """The reuse step copied every record of the stage: it has nothing left to run."""
    return observed.reuse is not None and observed.reuse.complete(stage, series, name)


def _generated(run: ClusterRun, observed: Observed) -> frozenset[Pair]:
    """(model, series) whose generation Job succeeded, whose progress record is complete, or whose
    every answer the reuse step copied."""
    done: set[Pair] = set()
    for model in run.models:
        for series in run.series:
            job = observed.jobs.get(vocab.generation_job_name(run.ref.name, model.name, series))
            record = observed.progress.get(("generate", series, model.name))
            if (
                (job is not None and job.succeeded)
                or (record is not None and record.complete)
                or _copied_whole(observed, "generate", series, model.name)
            ):
                done.add((model.name, series))
    return frozenset(done)


def _judged(run: ClusterRun, observed: Observed) -> frozenset[Pair]:
    """(judge, series) where a round created after every model's answers existed has succeeded, or
    whose every judgment the reuse step copied."""
    return frozenset(
        (judge.name, series)
        for judge in run.judges
        for series in run.series
        if _copied_whole(observed, "judge", series, judge.name)
        or any(
            r.succeeded and r.models_complete >= len(run.models)
            for r in judge_rounds(run, observed, judge, series)
        )
    )


def covered_models(observed: Observed, judge: str, series: str) -> frozenset[str]:
    """Models every one of whose answers of ``series`` has a judgment by ``judge`` the reuse step
    copied: a judging round for them alone would have nothing to do."""
    entry = observed.reuse.stage("judge", series, judge) if observed.reuse is not None else None
    return frozenset(entry.covered_models) if entry is not None else frozenset()


def _stage_reasons(run: ClusterRun, observed: Observed) -> dict[str, str]:
    """Job name -> the reason its stage wrote in a failed progress record (e.g. HTTP 401 from <url>)."""
    reasons: dict[str, str] = {}
    for series in run.series:
        for model in run.models:
            reason = _failed_reason(observed, ("generate", series, model.name))
            if reason:
                reasons[vocab.generation_job_name(run.ref.name, model.name, series)] = reason
                for look in range(1, run.budget_looks + 1):  # a budgeted run's Jobs, one per look
                    reasons[vocab.look_generation_job_name(run.ref.name, model.name, series, look)] = reason
        for judge in run.judges:
            reason = _failed_reason(observed, ("judge", series, judge.name))
            round_ = 1
            while reason and vocab.judge_job_name(run.ref.name, judge.name, series, round_) in observed.jobs:
                # every judging round of (judge, series) writes the same progress record
                reasons[vocab.judge_job_name(run.ref.name, judge.name, series, round_)] = reason
                round_ += 1
    return reasons


def _failed_reason(observed: Observed, key: tuple[str, str, str]) -> str:
    record = observed.progress.get(key)
    return record.message if record is not None and record.state == "failed" else ""


def _failures(
    run: ClusterRun, observed: Observed, oom: Mapping[str, OomDecision], now: str | None = None
) -> tuple[str, ...]:
    """Jobs failed for good (with their stage's own reason where it wrote one, and the OOM kill that
    was not retried) and servers past their progress deadline — not a queued server waiting for
    Kueue's admission, or admitted less than a deadline ago (:func:`.queueing.deadline_exempt`) —
    as sentences' parts."""
    reasons = _stage_reasons(run, observed)
    exempt = deadline_exempt(run, observed, now)
    failures: list[str] = []
    for job_name, job in sorted(observed.jobs.items()):
        if job.failed:
            text = f"Job {attempt_name(job_name, job)} failed: {job.message or 'backoff limit or deadline reached'}"
            for reason in (reasons.get(job_name), _oom_detail(run, oom.get(job_name))):
                if reason:
                    text += f" ({reason})"
            failures.append(text)
    for dep_name, dep in sorted(observed.deployments.items()):
        if dep.stalled and dep.replicas > 0 and dep_name not in exempt:
            failures.append(
                f"Model server {dep_name} did not become ready: {dep.message or 'progress deadline exceeded'}"
            )
    return tuple(failures)


def _oom_detail(run: ClusterRun, decision: OomDecision | None) -> str:
    if decision is None or decision.retried:
        return ""
    return failure_detail(decision, run.settings.job_oom_max_memory)


def observe_facts(
    run: ClusterRun,
    observed: Observed,
    previous_phase: str,
    oom: Mapping[str, OomDecision] | None = None,
    now: str | None = None,
) -> Facts:
    """Step 1: the facts every later step reads (``observed``: Jobs by first name, each its latest
    attempt, as :func:`kubejury_operator.oom_retry.planning_view` gives them; ``oom``: its decisions;
    ``now``: for a queued server's progress deadline, counted from its admission)."""
    oom = oom or {}
    reusing = bool(run.reuse_from) and not reuse_step_done(run.ref.name, observed)
    servers = in_cluster_servers(run)
    unschedulable = tuple(
        ep for ep in servers.values() if ep.placement is None or not ep.placement.schedulable
    )
    return Facts(
        servers=servers,
        # a budgeted run is generated and judged look by look: its sequential.json says what is left
        generated=looks.generated(run, observed) if run.budgeted else _generated(run, observed),
        judged=looks.judged(run, observed) if run.budgeted else _judged(run, observed),
        generation_jobs=len(run.models) * len(run.series),
        judging_jobs=len(run.judges) * len(run.series),
        aggregation=observed.jobs.get(vocab.aggregation_job_name(run.ref.name)),
        failures=_failures(run, observed, oom, now),
        unschedulable=unschedulable,
        waiting_for_node=bool(unschedulable) and previous_phase == "Pending" and not observed.deployments,
        missing_secrets=tuple(observed.missing_secrets),
        oom=oom,
        reusing=reusing,
        reuse_refusals=observed.reuse_sources.refusals if reusing else (),
        local_queue_missing=local_queue_missing(run, observed),
    )
