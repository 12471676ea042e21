"""The EvalRun's ``status``, its conditions and the Events of one reconcile — all from the facts.

Why this module exists: the status is what a user reads (``kubectl get evalrun``, ``describe``),
so its shape — phase, progress counters, placement, conditions per the Kubernetes API
conventions (type, status, CamelCase reason, a sentence as message, ``observedGeneration``,
``lastTransitionTime`` moving only on a flip) — is written down here in one place, separately
from the decisions of :mod:`kubejury_operator.reconcile`. Pure: it only reads the facts, the
desired servers and the phase the planner decided, and the previous status. The status it builds
is the engine's one record of it, :class:`kubejury.records.run_status.RunStatus`, written with
:meth:`~kubejury.records.run_status.RunStatus.to_json` and read back with ``from_json``; the
functions at the end (:func:`status_patch`, :func:`due_patch`, :func:`with_apply_result`) work on
that JSON form, because what they decide is which bytes to send.

The status is lean (issue 26): a placement keeps a reason code and its facts, the planner's prose
goes into ``Placement`` Events once per change (:func:`events`), and a status patch carries only the
leaves that changed (:func:`status_patch`). ``KUBEJURY_STATUS_FORMAT=full`` brings back the status
as it was before (prose in ``status.placement``, whole top-level keys re-sent): it exists only so
that the operator benchmark can measure before and after in one run (docs/benchmarks.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from kubejury.records.gpu_usage import GpuUsage
from kubejury.records.placement import (
    DOES_NOT_FIT,
    NOT_DEPLOYED,
    PLACEMENT_EVENT_REASON,
    Placement,
    placement_event_messages,
)
from kubejury.records.report import ComparisonEntry, ReportDocument
from kubejury.records.reuse import ReuseDocument
from kubejury.records.run_status import TERMINAL_PHASES as TERMINAL_PHASES
from kubejury.records.run_status import (
    ComparisonStatus,
    RankingRow,
    ReusedRecords,
    ReuseStatus,
    RunCondition,
    RunStatus,
    RunSummary,
    StageCounts,
)
from kubejury.redact import redact_tree
from kubejury_operator import looks, oom_retry, queueing
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.facts import Facts
from kubejury_operator.observed import DeploymentState, Observed

if TYPE_CHECKING:
    from kubejury.report.view import ModelRow

PHASES = ("Pending", "Provisioning", "Generating", "Judging", "Aggregating", "Succeeded", "Failed")
CONDITION_TYPES = (
    "Ready",
    "ModelsProvisioned",
    "GenerationComplete",
    "JudgingComplete",
    "Succeeded",
    "Unschedulable",
    "JobsHealthy",
    "Failed",
)
QUEUED = "Queued"  # only for a run admitted through Kueue (queueing.queued_condition)
MAX_SUMMARY_MODELS = 100  # etcd objects stay small: the summary never grows with the benchmark


#: ``KUBEJURY_STATUS_FORMAT=full``: the status as written before issue 26 (module docstring) — the
#: operator benchmark's "before" design, and nothing else.
def full_status(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for the status as written before issue 26 (benchmark only)."""
    return env.get("KUBEJURY_STATUS_FORMAT", "").strip().lower() == "full"


FULL_STATUS = full_status(os.environ)


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class StatusInputs:
    """What the planner decided this round, as the status builders read it."""

    run: ClusterRun
    observed: Observed
    facts: Facts
    desired: Mapping[str, int]  # replicas wanted per server key
    phase: str
    gpu: GpuUsage = field(default_factory=GpuUsage)  # GPU time per server (gpu_accounting.account)


# ---------------------------------------------------------------------------------- conditions


def sentence(text: str) -> str:
    """``text`` ending in a full stop (condition and Event messages are sentences)."""
    text = text.strip()
    if not text:
        return text
    return text if text.endswith(".") else text + "."


def condition(
    previous: Sequence[RunCondition],
    ctype: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> RunCondition:
    """A condition per Kubernetes API conventions; lastTransitionTime moves only on a status flip."""
    text = "True" if status else "False"
    before = next((c for c in previous if c.type == ctype), None)
    unchanged = before is not None and before.status == text
    return RunCondition(
        type=ctype,
        status=text,
        reason=reason,
        message=sentence(message),
        last_transition_time=(before.last_transition_time or now) if before and unchanged else now,
        observed_generation=generation,
    )


def _unschedulable(view: StatusInputs) -> tuple[bool, str, str]:
    """(status, reason, message) of ``Unschedulable``: no node type fits a model (the run waits
    in ``Pending``), or a node type fits but no such node has room now (the Deployment's progress
    deadline bounds that wait: then the run fails and scales down)."""
    facts = view.facts
    placed = (False, "Placed", "Every model has a node that can run it")
    if facts.waiting_for_node:
        reasons = "; ".join(
            f"model {e.name}: {(e.placement.reason if e.placement else '') or 'no placement'}"
            for e in facts.unschedulable
        )
        return True, "ModelDoesNotFit", "No node can run " + reasons
    pending = {k: m for k, m in view.observed.unschedulable_pods.items() if view.desired.get(k, 0) > 0}
    if pending and view.phase not in TERMINAL_PHASES:
        waits = "; ".join(
            f"{facts.servers[k].name if k in facts.servers else k}: {m}" for k, m in sorted(pending.items())
        )
        return True, "NoNodeAvailable", "Model server Pods wait for a node: " + waits
    return placed


def _provisioned(view: StatusInputs) -> tuple[bool, str, str]:
    """(status, reason, message) of ``ModelsProvisioned``."""
    facts, observed = view.facts, view.observed
    if facts.missing_secrets:
        return False, "SecretMissing", "Missing secrets: " + ", ".join(facts.missing_secrets)
    if facts.reuse_refusals:
        return False, "ReuseSourceRefused", "Cannot reuse: " + "; ".join(facts.reuse_refusals)
    if facts.local_queue_missing:
        return False, "LocalQueueNotFound", f"Waiting for LocalQueue {view.run.queue_name}"
    if facts.reusing and not facts.terminal:
        return False, "CopyingReusedRecords", "Copying answers and judgments of earlier runs first"
    if facts.waiting_for_node:
        return False, "Unschedulable", "Waiting for a node that can run every model"
    waiting = sorted(
        facts.servers[k].name
        for k, want in view.desired.items()
        if want > 0
        and not (
            observed.deployments.get(vocab.workload_name(view.run.ref.name, k)) or DeploymentState(0)
        ).ready
    )
    if waiting:
        return False, "ServersStarting", "Waiting for model servers: " + ", ".join(waiting)
    if view.desired:
        return True, "ServersReady", f"Model servers ready: {len(view.desired)}"
    return True, "NoServersNeeded", "No model server is needed at this point"


NO_OOM_KILL = (True, "NoOOMKill", "No Job container was OOM-killed")


def _jobs_healthy(view: StatusInputs, previous: RunStatus) -> tuple[bool, str, str]:
    """(status, reason, message) of ``JobsHealthy``: ``False``/``OOMKilled`` while an OOM-killed Job
    is being replaced or could not be, ``True``/``RecoveredFromOOMKill`` once every replacement
    succeeded, naming the Jobs and memory limits (:func:`kubejury_operator.oom_retry.jobs_healthy`).
    When the Jobs that told of a kill are gone (deleted, or cleaned up by a TTL), the condition keeps
    what it said."""
    found = oom_retry.jobs_healthy(view.observed.jobs, view.facts.oom, view.run.settings.job_oom_max_memory)
    if found is not None:
        return found
    before = previous.condition("JobsHealthy")
    if before is not None and before.reason != NO_OOM_KILL[1]:
        return before.is_true, before.reason, before.message
    return NO_OOM_KILL


def conditions(view: StatusInputs, previous: RunStatus, now: str) -> dict[str, RunCondition]:
    """Every condition of :data:`CONDITION_TYPES`, by type, in that order."""
    facts, phase = view.facts, view.phase
    gen, judge = _stage_counts(view, "generation"), _stage_counts(view, "judging")
    succeeded = phase == "Succeeded"
    states: dict[str, tuple[bool, str, str]] = {
        "Ready": (succeeded, phase, f"The run is {phase.lower()}"),
        "ModelsProvisioned": _provisioned(view),
        "GenerationComplete": (
            facts.generation_complete,
            "AllAnswersGenerated" if facts.generation_complete else "Generating",
            f"Generation jobs done {gen.jobs_done}/{gen.jobs}, answers {gen.done}/{gen.total}",
        ),
        "JudgingComplete": (
            facts.judging_complete,
            "AllAnswersJudged" if facts.judging_complete else "Judging",
            f"Judge jobs done {judge.jobs_done}/{judge.jobs}, judgments {judge.done}/{judge.total}",
        ),
        "Succeeded": (
            succeeded,
            "ReportReady" if succeeded else "NotFinished",
            "The aggregated report is ready" if succeeded else f"The run is {phase.lower()}",
        ),
        "Unschedulable": _unschedulable(view),
        "JobsHealthy": _jobs_healthy(view, previous),
        "Failed": (
            phase == "Failed",
            "StageFailed" if phase == "Failed" else "NoFailure",
            "; ".join(facts.failures) if facts.failures else "Nothing has failed",
        ),
    }
    types: tuple[str, ...] = CONDITION_TYPES
    if view.run.queue_name is not None:
        states[QUEUED] = queueing.queued_condition(view.run, view.observed, facts.terminal)
        types = (*types, QUEUED)
    return {
        ctype: condition(previous.conditions, ctype, *states[ctype], view.run.generation, now)
        for ctype in types
    }


# -------------------------------------------------------------------------------------- status


#: status stage → (progress record stage, who is counted, Jobs done of it from the facts)
_STAGE_SOURCES = {"generation": ("generate", "models"), "judging": ("judge", "judges")}


def _stage_counts(view: StatusInputs, stage: str) -> StageCounts:
    """Items and Jobs done of ``generation`` or ``judging``, and the items done/total of each model
    or judge over all series (at most :data:`MAX_SUMMARY_MODELS`), copies the reuse step made
    included."""
    record_stage, who_kind = _STAGE_SOURCES[stage]
    endpoints: Sequence[vocab.Endpoint] = view.run.models if who_kind == "models" else view.run.judges
    jobs_done = len(view.facts.generated) if who_kind == "models" else len(view.facts.judged)
    items = total = 0
    by_name: dict[str, tuple[int, int]] = {}
    for who in endpoints:
        mine = by_name.setdefault(who.name, (0, 0))
        for series in view.run.series:
            done, needed = _items(view.observed, (record_stage, series, who.name))
            items += done
            total += needed
            mine = (mine[0] + done, mine[1] + needed)
        by_name[who.name] = mine
    return StageCounts(
        stage=stage,
        done=items,
        total=total,
        jobs_done=jobs_done,
        jobs=len(endpoints) * len(view.run.series),
        by_name=dict(list(by_name.items())[:MAX_SUMMARY_MODELS]),
    )


def _items(observed: Observed, key: tuple[str, str, str]) -> tuple[int, int]:
    """(done, total) of one stage: from its progress record, else — a stage the reuse step copied
    and no Job of this run touched — what the reuse document says it copied of what it needs."""
    record = observed.progress.get(key)
    if record is not None:
        return record.done, record.total
    copied = observed.reuse.stage(*key) if observed.reuse is not None else None
    return (copied.reused, max(copied.needed, copied.reused)) if copied is not None else (0, 0)


def stage_progress(view: StatusInputs) -> tuple[StageCounts, ...]:
    """``status.stages``: items and Jobs done per stage, and items per model or judge, from the
    progress records and facts."""
    return (
        _stage_counts(view, "generation"),
        _stage_counts(view, "judging"),
        StageCounts(stage="aggregation", done=1 if view.facts.aggregated else 0, total=1),
    )


_NOTHING_TO_DEPLOY = "existing OpenAI-compatible endpoint: nothing to deploy"


def placement_status(run: ClusterRun) -> tuple[Placement, ...]:
    """``status.placement``: the placement of every model and judge, by name (an endpoint outside
    the cluster gets an empty one that says so)."""
    return tuple(
        Placement(
            name=e.name,
            runtime=e.runtime,
            quantization="",
            tensor_parallel_size=0,
            reason=_NOTHING_TO_DEPLOY,
            code=NOT_DEPLOYED,
        )
        if e.placement is None
        else replace(e.placement, name=e.name)
        for e in (*run.models, *run.judges)
    )


def run_status(
    view: StatusInputs, conds: Mapping[str, RunCondition], previous: RunStatus, now: str
) -> RunStatus:
    """The complete new ``status`` (the printer column ``progress`` is items done / total)."""
    phase = view.phase
    stages = stage_progress(view)
    done = sum(s.done for s in stages[:2])
    total = sum(s.total for s in stages[:2])
    return RunStatus(
        phase=phase,
        observed_generation=view.run.generation,
        conditions=tuple(conds.values()),
        progress=f"{done}/{total}",
        stages=stages,
        placement=placement_status(view.run),
        gpu=view.gpu,
        started_at=previous.started_at or (now if phase != "Pending" else ""),
        completed_at=previous.completed_at or (now if phase in TERMINAL_PHASES else ""),
        summary=_summary(view, previous),
        reuse=reuse_status(view, previous),
        budget=looks.budget_status(view.run, view.observed, previous.budget),
        queue=queueing.queue_status(view.run, view.observed, previous.queue, view.facts.terminal, now),
        full_placement=FULL_STATUS,
    )


def _summary(view: StatusInputs, previous: RunStatus) -> RunSummary | None:
    """The report's summary once the run succeeded; a summary written before is kept."""
    found = view.observed.summary
    if view.phase == "Succeeded" and found is not None:
        return RunSummary.from_json(found)
    return previous.summary


def reuse_status(view: StatusInputs, previous: RunStatus) -> ReuseStatus | None:
    """``status.reuse`` for a run whose spec names runs to reuse (``None`` otherwise): the sources
    and, once the reuse step's document was read, the records copied per model and judge, by source
    run, and the refusals (:meth:`~kubejury.records.run_status.ReuseStatus.capped`). What was
    written from the document is kept when it is not read again (a finished run's storage)."""
    if not view.run.reuse_from:
        return None
    document, note = view.observed.reuse, view.observed.reuse_note
    if document is None and previous.reuse is not None and previous.reuse.copied:
        return previous.reuse
    if document is None:
        return ReuseStatus(
            sources=view.run.reuse_from, refused=ReuseStatus.capped(view.facts.reuse_refusals), note=note
        )
    return ReuseStatus(
        sources=view.run.reuse_from,
        copied=True,
        models=_reused_records(document, "generate"),
        judges=_reused_records(document, "judge"),
        refused=ReuseStatus.capped(refusal_lines(document)),
    )


def _reused_records(document: ReuseDocument, stage: str) -> dict[str, ReusedRecords]:
    """Per model (or judge), at most :data:`MAX_SUMMARY_MODELS`, what was copied by source run (a
    model the sources had nothing for is listed with nothing)."""
    found = sorted(document.reused_by(stage).items())[:MAX_SUMMARY_MODELS]
    return {name: ReusedRecords(per_run) for name, per_run in found}


def refusal_lines(document: ReuseDocument) -> list[str]:
    """One short line per refusal of the reuse document: a source that could not be read, then each
    stage's ("judge j (primary) from run-a: prompt template changed, 12 records")."""
    lines = [f"run {r.source}: {r.reason}" for r in document.missing_sources]
    for entry in document.stages:
        who = "model" if entry.stage == "generate" else "judge"
        for refusal in entry.refused:
            count = f", {refusal.records} records" if refusal.records else ""
            lines.append(
                f"{who} {entry.name} ({entry.series}) from {refusal.source}: {refusal.reason}{count}"
            )
    return lines


def invalid_spec_status(generation: int, failed: RunCondition) -> dict[str, Any]:
    """The status of a run whose spec is invalid: only its phase, generation and the ``Failed``
    condition are written; the rest of the stored status (placement, GPU time) is left as it was."""
    written = RunStatus(phase="Failed", observed_generation=generation, conditions=(failed,)).to_json()
    return {key: written[key] for key in ("phase", "observedGeneration", "conditions")}


# -------------------------------------------------------------------------------------- events


def events(view: StatusInputs, conds: Mapping[str, RunCondition], previous: RunStatus) -> tuple[Event, ...]:
    """An Event when the phase changes (or on the first reconcile), and a warning when the run
    becomes unschedulable without changing phase. An unchanged world posts nothing."""
    phase, facts = view.phase, view.facts
    previous_phase = previous.phase
    found: list[Event] = []
    if phase != previous_phase or not previous.written:
        kind: Literal["Normal", "Warning"] = (
            "Warning" if phase == "Failed" or facts.waiting_for_node else "Normal"
        )
        found_summary = view.observed.summary
        summary = RunSummary.from_json(found_summary) if found_summary is not None else previous.summary
        leader = summary.leader if summary is not None else None
        message = {
            "Pending": conds["Unschedulable" if facts.waiting_for_node else "ModelsProvisioned"].message,
            "Provisioning": "Starting model servers",
            "Generating": "Generating answers",
            "Judging": "All answers generated; judging",
            "Aggregating": "All answers judged; aggregating",
            "Succeeded": "Report ready" + (f"; leader {leader}" if leader else ""),
            "Failed": "; ".join(facts.failures) or "Failed",
        }[phase]
        found.append(Event(kind, phase, sentence(message)))
    before = previous.condition("Unschedulable")
    unschedulable = conds["Unschedulable"]
    if unschedulable.is_true and not (before and before.is_true) and phase == previous_phase:
        found.append(Event("Warning", "Unschedulable", unschedulable.message))
    found.extend(_queued_events(conds, previous))
    found.extend(placement_events(placement_status(view.run), previous))
    return (*found, *_oom_events(view, conds, previous), *_reuse_events(view, previous))


def placement_events(placements: Sequence[Placement], previous: RunStatus) -> tuple[Event, ...]:
    """The ``Placement`` Events with the planner's prose of every placement whose recorded entry
    (reason code and facts) differs from the stored one — so once per change, not per reconcile:
    a pinned placement never posts again. A Warning when one of them does not fit. None with
    ``KUBEJURY_STATUS_FORMAT=full``, whose status keeps the prose."""
    if FULL_STATUS:
        return ()
    before = {p.name: p.to_json() for p in previous.placement}
    changed = [p for p in placements if before.get(p.name) != p.to_json()]
    kind: Literal["Normal", "Warning"] = (
        "Warning" if any(p.reason_code == DOES_NOT_FIT for p in changed) else "Normal"
    )
    return tuple(Event(kind, PLACEMENT_EVENT_REASON, m) for m in placement_event_messages(changed))


def _queued_events(conds: Mapping[str, RunCondition], previous: RunStatus) -> tuple[Event, ...]:
    """A Normal ``Queued`` Event when the run starts waiting for Kueue's quota, a Warning
    ``LocalQueueNotFound`` when its LocalQueue is missing (once per change of reason)."""
    queued = conds.get(QUEUED)
    before = previous.condition(QUEUED)
    if queued is None or not queued.is_true or (before and before.is_true and before.reason == queued.reason):
        return ()
    kind: Literal["Normal", "Warning"] = "Warning" if queued.reason == "LocalQueueNotFound" else "Normal"
    return (Event(kind, queued.reason if kind == "Warning" else QUEUED, queued.message),)


def _reuse_events(view: StatusInputs, previous: RunStatus) -> tuple[Event, ...]:
    """A Normal ``Reused`` Event when the reuse step's document is first read: what was copied from
    which run, and the first refusals."""
    document = view.observed.reuse
    if document is None or (previous.reuse is not None and previous.reuse.copied):
        return ()
    return (Event("Normal", "Reused", sentence(reuse_message(document))),)


def reuse_message(document: ReuseDocument) -> str:
    """``Reused 24 answers and 48 judgments from run-a; refused: …`` (several sources: the counts
    per run in brackets)."""
    answers, judgments = _per_run(document, "generate"), _per_run(document, "judge")
    runs = [r for r in document.sources if answers.get(r) or judgments.get(r)]
    total = f"{sum(answers.values())} answers and {sum(judgments.values())} judgments"
    if not runs:
        text = "Reused nothing from " + ", ".join(document.sources or ("the runs named",))
    elif len(runs) == 1:
        text = f"Reused {total} from {runs[0]}"
    else:
        parts = ", ".join(f"{r} ({answers.get(r, 0)} answers, {judgments.get(r, 0)} judgments)" for r in runs)
        text = f"Reused {total}: {parts}"
    refused = refusal_lines(document)
    if refused:
        more = f"; and {len(refused) - 2} more" if len(refused) > 2 else ""
        text += "; refused: " + "; ".join(refused[:2]) + more
    return text


def _per_run(document: ReuseDocument, stage: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for per_run in document.reused_by(stage).values():
        for run, count in per_run.items():
            counts[run] = counts.get(run, 0) + count
    return counts


def _oom_events(
    view: StatusInputs, conds: Mapping[str, RunCondition], previous: RunStatus
) -> tuple[Event, ...]:
    """A Warning ``OOMKilled`` per OOM-killed Job, once (its name not yet in ``JobsHealthy``), with
    the exit code and what is done about it; a Normal ``RecoveredFromOOMKill`` when every replacement
    has succeeded."""
    before = previous.condition("JobsHealthy")
    said = before.message if before is not None else ""
    cap = view.run.settings.job_oom_max_memory
    found = [
        Event("Warning", "OOMKilled", sentence(oom_retry.decision_text(d, cap, exit_code=True)))
        for _slot, d in sorted(view.facts.oom.items())
        if f"Job {d.killed}:" not in said
    ]
    healthy = conds["JobsHealthy"]
    if healthy.reason == "RecoveredFromOOMKill" and (before is None or before.reason != healthy.reason):
        found.append(Event("Normal", "RecoveredFromOOMKill", healthy.message))
    return tuple(found)


# ------------------------------------------------------------------------------------- summary


def summary_from_report(report: ReportDocument | Mapping[str, Any], report_uri: str | None) -> dict[str, Any]:
    """The aggregated summary that goes into ``status.summary``: ranking with W, D, σ and CI per
    model, domain leaders and tiers of the primary series, and the report URI. Never per-answer
    data; at most :data:`MAX_SUMMARY_MODELS` ranking rows. A mapping is read as a
    :class:`ReportDocument` first."""
    from kubejury.report.view import read_report

    view = read_report(report)
    primary = view.series[0] if view.series else None  # read_report puts the primary series first
    if primary is None:
        return RunSummary(primary_series=view.primary, report_uri=report_uri).to_json()

    rows = primary.rows[:MAX_SUMMARY_MODELS]
    ranking = tuple(_ranking_row(row) for row in rows)
    return RunSummary(
        primary_series=view.primary,
        report_uri=report_uri,
        ranking=ranking,
        domain_leaders=dict(list(primary.domain_leaders.items())[:64]),
        tiers={row.model: row.tier for row in rows if row.tier},
        leader=ranking[0].model if ranking else None,
        leader_weighted=ranking[0].weighted if ranking else None,
        comparisons=tuple(_comparison(c) for c in primary.comparisons[:MAX_SUMMARY_MODELS]),
    ).to_json()


def _comparison(entry: ComparisonEntry) -> ComparisonStatus:
    """One compared pair as the status keeps it: ΔW, its 90% interval and the verdict (issue 27)."""
    w = entry.weighted
    low, high = w.ci90 if w is not None and w.ci90 is not None else (None, None)
    needed = entry.questions_needed
    return ComparisonStatus(
        a=entry.a,
        b=entry.b,
        margin=entry.margin,
        difference=_rounded(w.difference if w is not None else None),
        ci90=(_rounded(low), _rounded(high)),
        verdict=entry.verdict,
        questions_needed=needed.equivalent if needed is not None else None,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def _ranking_row(row: ModelRow) -> RankingRow:
    """One report row as the status keeps it: W, D, σ and W's interval to three decimals."""
    low, high = row.weighted_ci or (None, None)
    return RankingRow(
        rank=row.rank,
        model=row.model,
        weighted=_rounded(row.weighted),
        weighted_ci=(_rounded(low), _rounded(high)),
        degradation=_rounded(row.degradation),
        sigma=_rounded(row.sigma),
        tier=row.tier,
    )


# ------------------------------------------------------------------------- applying the plan


APPLY_FAILED = "ApplyFailed"


@dataclass(frozen=True)
class ApplyFailure:
    """A change the API server refused (anything but 409): which object, and the API's answer."""

    action: str  # e.g. "create Job/kj-r-gen-qwen-primary"
    reason: str  # the API's CamelCase Status.reason: Forbidden, Invalid, …
    message: str  # the API's Status.message


def with_apply_result(
    status: Mapping[str, Any], failures: Sequence[ApplyFailure], previous: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """``status`` with the ``ApplyFailed`` condition: ``True`` naming each refused object and the
    API server's message (a quota's 403 included), ``False`` when every change was accepted. The
    status is still written, so a refusal is visible in ``kubectl describe`` instead of lost in a log."""
    before = RunStatus.from_json(previous).conditions
    generation = int(status.get("observedGeneration") or 1)
    if failures:
        reasons = {f.reason for f in failures}
        state = condition(
            before,
            APPLY_FAILED,
            True,
            reasons.pop() if len(reasons) == 1 else "ApiError",
            "The API server refused " + "; ".join(f"{f.action}: {f.message.rstrip('.')}" for f in failures),
            generation,
            now,
        )
    else:
        state = condition(
            before, APPLY_FAILED, False, "Applied", "The API server accepted every change", generation, now
        )
    kept = [c for c in status.get("conditions") or [] if c.get("type") != APPLY_FAILED]
    return {**status, "conditions": [*kept, state.to_json()]}


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_without_nulls(v) for v in value]
    return value


def status_patch(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes the stored status ``new``: the top-level keys whose value would
    change, and nothing else. A merge patch deletes the keys it sets to ``None`` (they never come
    back as ``None``) and keeps the keys it leaves out, so both sides are compared on ``new``'s keys
    with ``None`` values dropped. The gateway stores status redacted (credentials masked), so
    ``new`` is compared as it would be stored. Leaving out what did not change — the pinned
    placement is two thirds of a busy run's status — keeps each write small for the API server,
    which decodes, validates and stores every byte sent."""
    stored_new = redact_tree(dict(new))
    if FULL_STATUS:  # before issue 26: a changed top-level key is sent whole
        return {
            key: new[key]
            for key, value in stored_new.items()
            if _without_nulls(previous.get(key)) != _without_nulls(value)
        }
    patch: dict[str, Any] = {}
    for key, value in stored_new.items():
        found = _leaf_patch(_without_nulls(previous.get(key)), _without_nulls(value))
        if found is not _SAME:
            patch[key] = found
    return patch


_SAME = object()  # no change (a patch value may be None: delete)


def _leaf_patch(old: Any, new: Any) -> Any:
    """The merge-patch value that turns ``old`` into ``new`` (both without nulls), or
    :data:`_SAME`: an object is patched key by key (a key gone is set to ``None``), anything else
    — a list included, which a merge patch can only replace — is sent whole when it differs. A
    stage's counter that moved is then a few bytes, not the stage with every model's counts."""
    if old == new:
        return _SAME
    if new is None:
        return None
    if not isinstance(old, Mapping) or not isinstance(new, Mapping) or not old:
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        found = _leaf_patch(old.get(key), value)
        if found is not _SAME:
            patch[key] = found
    return patch


def merge_patched(document: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` after the JSON merge patch ``patch`` (RFC 7386): what the API server stores."""
    merged = dict(document)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_patched(merged[key], value)
        else:
            merged[key] = _without_nulls(value)
    return merged


# seconds: a status whose only changes are counters (items done, a Job's in-use time, condition
# messages) is written at most this often per run; see :func:`significant_part`
MINOR_STATUS_INTERVAL = 15.0
# Counters of every active run together: about this many status writes per second at most, by
# lengthening each run's interval past MINOR_STATUS_INTERVAL when more than 15 runs are active
# (:func:`minor_interval`). At a hundred runs each counter write cost the API server as much as a
# decision's, and counters were two writes in three (docs/operator.md, "Many runs").
MINOR_WRITES_PER_SECOND = 1.0
_SIGNIFICANT_KEYS = (
    "phase",
    "observedGeneration",
    "placement",
    "startedAt",
    "completedAt",
    "summary",
    "reuse",
    "queue",
)


def significant_part(status: Mapping[str, Any]) -> Any:
    """What of a status is written as soon as it changes; the rest waits for
    :data:`MINOR_STATUS_INTERVAL`. Significant: the phase, each condition's status and reason, the
    Jobs done per stage, the placement, the summary and times, and each server's held interval
    opening and closing (Ready since, whether it was closed, bring-up): a held interval is closed
    at the reconcile that scales the server down, so that write cannot wait. Not: item counters and
    condition messages (from progress records, seconds old anyway), GPU in-use time, which the next
    write derives again from the Jobs' own start and completion times, and the held time a closed
    interval still gains while its scaled-down Pod is Ready (the next write carries it; at a hundred
    runs, Pods that lingered after their scale-down made six writes in seven). At a hundred runs
    the counters alone made most of the operator's writes, each a whole EvalRun stored, validated
    and sent again by the API server."""
    stages = status.get("stages") or {}
    gpu = status.get("gpu") or {}
    servers = gpu.get("servers") or {}
    return (
        tuple(repr(status.get(key)) for key in _SIGNIFICANT_KEYS),
        tuple((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []),
        tuple(sorted((name, (stage or {}).get("jobsDone")) for name, stage in stages.items())),
        tuple(
            sorted(
                (name, s.get("readySince"), s.get("heldUntil") is None, s.get("bringUpSeconds"))
                for name, s in servers.items()
            )
        ),
    )


def minor_interval(active_runs: int) -> float:
    """Seconds a run's counters wait between writes when ``active_runs`` runs (unfinished, this one
    among them) are reconciled by this operator: :data:`MINOR_STATUS_INTERVAL`, or longer so that
    the counters of them all make at most :data:`MINOR_WRITES_PER_SECOND` writes. Decisions never
    wait (:func:`due_patch`); the progress gauges in the metrics are set on every reconcile."""
    return max(MINOR_STATUS_INTERVAL, active_runs / MINOR_WRITES_PER_SECOND)


def due_patch(
    previous: Mapping[str, Any],
    new: Mapping[str, Any],
    since_written: float | None,
    interval: float = MINOR_STATUS_INTERVAL,
) -> dict[str, Any]:
    """The status patch (:func:`status_patch`) to write now, or ``{}``: it is written when it changes
    the stored status and either something significant changed (:func:`significant_part`) or the
    run's last write is at least ``interval`` seconds old (:func:`minor_interval`;
    ``since_written``: seconds, None when unknown, e.g. after a restart)."""
    patch = status_patch(previous, new)
    if not patch or since_written is None or since_written >= interval:
        return patch
    # As stored: redacted, a key set to None deleted (significant_part reads None as absent).
    merged = merge_patched(previous, redact_tree(patch))
    return patch if significant_part(merged) != significant_part(previous) else {}


def status_changed(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether patching ``new`` would change the stored status (:func:`status_patch`)."""
    return bool(status_patch(previous, new))


def apply_failed(status: Mapping[str, Any] | RunStatus) -> bool:
    """Whether ``status`` says the API server refused one of the last reconcile's changes."""
    record = status if isinstance(status, RunStatus) else RunStatus.from_json(status)
    refused = record.condition(APPLY_FAILED)
    return refused is not None and refused.is_true


def settled(previous: Mapping[str, Any], generation: int) -> bool:
    """Whether the stored status is the run's last word: a terminal phase written for this
    generation, with the summary when it succeeded, and no refused change pending. A settled run
    is not observed again (no API request, no storage read) until its spec changes."""
    if not finished(previous):
        return False
    # Read only what decides it: this runs on every tick of every finished run, and the rest of a
    # finished status (placement, progress, the summary's ranking) is most of its size.
    stored = RunStatus.from_json({key: previous[key] for key in _SETTLED_KEYS if key in previous})
    return stored.observed_generation == generation and not apply_failed(stored)


_SETTLED_KEYS = ("phase", "observedGeneration", "conditions")


def finished(status: Mapping[str, Any]) -> bool:
    """Whether a stored status says the run is over: Failed, or Succeeded with its summary (nothing
    in its storage is read again)."""
    phase = status.get("phase")
    return phase == "Failed" or (phase == "Succeeded" and status.get("summary") is not None)
