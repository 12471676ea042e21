"""A Job that was OOM-killed is replaced with twice its memory, up to the chart's cap: the decision.

Why this module exists: before it, any Job that failed for good failed the whole run, and nobody
looked at why its Pods died. A container killed for exceeding its memory limit (``OOMKilled``) is
the one failure that the same Job with more memory cures, and storage resume makes a replacement
redo only what is missing (the stages skip what is stored), so the answers and judgments stay one
per key. Pure: the observation (:func:`kubejury_operator.observe.observe_oom_kills`) reads a
failed Job's Pods; here, from that observation and the settings only, each OOM-killed Job gets an
:class:`OomDecision` — a replacement (:func:`~kubejury_operator.vocabulary.oom_retry_job_name`)
with the memory limit doubled and the request raised with it but never above it, up to
``jobs.oomRetry.maxMemory`` (``WorkloadSettings.job_oom_max_memory``), or, past that cap or with no
limit to raise, a failure of the run that names the OOM kill.

The decision is taken when the Job has failed for good (its ``backoffLimit`` spent), not at its
first Pod failure: a Job's own retries are the right cure for the other failures, Job Pods are not
watched (a Pod failure triggers no reconcile; the Job's ``Failed`` condition does), and a
replacement must never run beside the retries of the Job it replaces. The planner reads Jobs by
their first name, each standing for its latest attempt (:func:`~kubejury_operator.observed.current_attempts`);
a Job being replaced reads as still running, so the run's phase, its servers and its judging rounds
carry on as if nothing had failed. The condition ``JobsHealthy`` tells the story
(:func:`jobs_healthy`): ``False``/``OOMKilled`` while a replacement is due or running,
``True``/``RecoveredFromOOMKill`` once every replacement succeeded (still naming the kills).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from kubejury.config.spec_rules import memory_quantity_bytes
from kubejury_operator import vocabulary as vocab
from kubejury_operator.observed import JobState, Observed, OomKill, current_attempts

CAP_SETTING = "jobs.oomRetry.maxMemory"  # the chart value the cap comes from, named in messages
MI = 2**20
GI = 2**30


@dataclass(frozen=True)
class OomDecision:
    """An OOM-killed Job (``killed``, the latest attempt of the Job first named ``slot``) and what is
    done about it: replaced by Job ``retry`` with ``memory_limit`` (and ``memory_request``), or, with
    ``retry`` ``None``, not retried (the run fails naming it)."""

    slot: str
    killed: str
    kill: OomKill
    retry: str | None = None
    memory_limit: str | None = None
    memory_request: str | None = None

    @property
    def retried(self) -> bool:
        return self.retry is not None


def quantity(count: int) -> str:
    """Bytes as a memory quantity: ``Gi`` or ``Mi`` when whole, else plain bytes."""
    if count % GI == 0:
        return f"{count // GI}Gi"
    if count % MI == 0:
        return f"{count // MI}Mi"
    return str(count)


def next_memory_limit(limit: str, cap: str) -> str | None:
    """Twice ``limit``, at most ``cap``; ``None`` when ``limit`` is at the cap already (or past it)."""
    current, most = memory_quantity_bytes(limit), memory_quantity_bytes(cap)
    if current >= most:
        return None
    return quantity(min(2 * current, most))


def raised_request(request: str | None, limit: str) -> str | None:
    """The memory request raised with the limit: twice it, never above the new ``limit``."""
    if request is None:
        return None
    return quantity(min(2 * memory_quantity_bytes(request), memory_quantity_bytes(limit)))


def decide(slots: Mapping[str, JobState], cap: str) -> dict[str, OomDecision]:
    """Each Job (by first name, in its latest attempt) that failed for good with an OOM-killed
    container → its :class:`OomDecision`. A kill with no memory limit is not retried: the node ran
    out of memory, and more of a limit it did not have would not help."""
    decisions: dict[str, OomDecision] = {}
    for slot, job in sorted(slots.items()):
        if not job.failed or job.oom is None:
            continue
        killed = attempt_name(slot, job)
        limit = job.oom.memory_limit
        new_limit = next_memory_limit(limit, cap) if limit is not None else None
        if new_limit is None:
            decisions[slot] = OomDecision(slot, killed, job.oom)
            continue
        decisions[slot] = OomDecision(
            slot=slot,
            killed=killed,
            kill=job.oom,
            retry=vocab.oom_retry_job_name(slot, job.attempt + 1),
            memory_limit=new_limit,
            memory_request=raised_request(job.oom.memory_request, new_limit),
        )
    return decisions


def attempt_name(slot: str, job: JobState) -> str:
    """The name of the Job ``job`` is: ``slot`` itself, or its replacement of that attempt."""
    return vocab.oom_retry_job_name(slot, job.attempt) if job.attempt else slot


def planning_jobs(slots: Mapping[str, JobState], decisions: Mapping[str, OomDecision]) -> dict[str, JobState]:
    """The Jobs as the planner reads them: a Job that is being replaced reads as still running (not
    failed, not finished), so nothing of the run stops or scales down while its replacement comes."""
    return {
        slot: (
            dataclasses.replace(job, failed=False, message="", finished_at=None)
            if slot in decisions and decisions[slot].retried
            else job
        )
        for slot, job in slots.items()
    }


def replacement_annotations(decision: OomDecision, attempt: int) -> dict[str, str]:
    """What a replacement Job says of itself (read back by :func:`~kubejury_operator.observed.retry_note`)."""
    return {
        vocab.ANNOTATION_OOM_RETRY_OF: decision.slot,
        vocab.ANNOTATION_OOM_ATTEMPT: str(attempt),
        vocab.ANNOTATION_OOM_REPLACES: decision.killed,
        vocab.ANNOTATION_OOM_KILLED_CONTAINER: decision.kill.container,
        vocab.ANNOTATION_OOM_KILLED_AT: decision.kill.memory_limit or "",
        vocab.ANNOTATION_MEMORY_LIMIT: decision.memory_limit or "",
    }


# ------------------------------------------------------------------------------ what is told


def killed_text(job: str, container: str, limit: str | None, exit_code: int | None = None) -> str:
    """``Job X: container stage OOMKilled (exit code 137) at memory limit 64Mi``."""
    code = f" (exit code {exit_code})" if exit_code is not None else ""
    where = f"at memory limit {limit}" if limit else "with no memory limit"
    return f"Job {job}: container {container} OOMKilled{code} {where}"


def decision_text(decision: OomDecision, cap: str, *, exit_code: bool = False) -> str:
    """The sentence a condition (or, with the exit code, an Event) says of one decision."""
    kill = decision.kill
    text = killed_text(
        decision.killed, kill.container, kill.memory_limit, kill.exit_code if exit_code else None
    )
    if decision.retried:
        return f"{text}; retried with {decision.memory_limit} as Job {decision.retry}"
    if kill.memory_limit is None:
        return f"{text}; not retried: there is no limit to raise"
    return f"{text}; not retried: {CAP_SETTING} is {cap}"


def failure_detail(decision: OomDecision, cap: str) -> str:
    """What a failure past the cap adds to the run's ``Failed`` message."""
    kill = decision.kill
    if kill.memory_limit is None:
        return f"container {kill.container} OOMKilled with no memory limit; not retried"
    return f"container {kill.container} OOMKilled at memory limit {kill.memory_limit}, the cap {CAP_SETTING} is {cap}; not retried"


def _replacement_text(slot: str, job: JobState, *, recovered: bool) -> str:
    """What a replacement's own note says: the Job it replaced, why, and its new limit."""
    note = job.retry
    assert note is not None
    text = killed_text(note.replaced, note.container, note.killed_at)
    outcome = "succeeded when retried" if recovered else "retried"
    return f"{text}; {outcome} with {note.memory_limit} as Job {attempt_name(slot, job)}"


def jobs_healthy(
    slots: Mapping[str, JobState], decisions: Mapping[str, OomDecision], cap: str
) -> tuple[bool, str, str] | None:
    """(status, reason, message) of ``JobsHealthy`` from the OOM kills observed now; ``None`` when
    nothing observed now speaks of one (the caller keeps what the condition said before)."""
    replaced = {
        slot: job for slot, job in sorted(slots.items()) if job.retry is not None and slot not in decisions
    }
    if not decisions and not replaced:
        return None
    recovered = not decisions and all(job.succeeded for job in replaced.values())
    told = [decision_text(decisions[slot], cap) for slot in sorted(decisions)]
    told += [_replacement_text(slot, job, recovered=recovered) for slot, job in replaced.items()]
    if recovered:
        return True, "RecoveredFromOOMKill", "; ".join(told)
    return False, "OOMKilled", "; ".join(told)


def planning_view(observed: Observed, cap: str) -> tuple[Observed, dict[str, OomDecision]]:
    """``observed`` as the planner reads it — Jobs by first name, each its latest attempt, a Job
    being replaced as still running — and the decision about each OOM-killed Job."""
    slots = current_attempts(observed.jobs)
    decisions = decide(slots, cap)
    return dataclasses.replace(observed, jobs=planning_jobs(slots, decisions)), decisions
