"""A budgeted run's looks on the cluster (spec.budget, issue 27): which Jobs each look needs.

Why this module exists: a run with ``spec.budget`` asks its questions look by look, and after each
look the planner (:mod:`kubejury.stats.sequential`, run by the look Job) decides which models
continue. The operator does not decide anything itself: it reads the decision the look Job stored
in ``<run>/sequential.json`` (:class:`~kubejury.records.sequential.SequentialDocument`,
``Observed.sequential``) and derives from it, and from the Jobs it sees, what is due now. Pure,
like :mod:`kubejury_operator.reconcile`, which calls it; docs/operator.md, "Sequential budgets".

Look K (``looks_done + 1`` of the stored document, 1 before any) is, in order:

* one generation Job per (continuing model, series), ``kubejury generate … --look K``
  (:func:`~kubejury_operator.vocabulary.look_generation_job_name`), once the model's server is
  ready; a stopped model gets none and counts as generated, so its server is scaled to zero in the
  same reconcile the document is read;
* once every continuing model's Jobs of look K succeeded, one judging Job per (judge, series),
  ``kubejury judge … --look K``, as judging round K;
* once those succeeded, the CPU-only look Job ``kubejury look --look K``
  (:func:`~kubejury_operator.vocabulary.look_job_name`), which stores the document of look K.

The run has generated and judged everything once the document says every model stopped (the last
look stops every model that is left); the aggregation then runs as for any run.
"""

from __future__ import annotations

from collections.abc import Callable

from kubejury.records.run_status import BudgetStatus, ModelBudget
from kubejury.records.sequential import SequentialDocument
from kubejury_operator import manifests as mf
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.observed import JobState, Observed
from kubejury_operator.vocabulary import Endpoint, Manifest

Pair = tuple[str, str]  # (model or judge name, series)


def finished(observed: Observed) -> bool:
    """The stored document says every model stopped: nothing more is asked or judged."""
    return observed.sequential is not None and observed.sequential.finished


def current_look(observed: Observed) -> int | None:
    """The look now under way (1-based): the one after the stored document's last; ``None`` once
    every model stopped."""
    if finished(observed):
        return None
    return (observed.sequential.looks_done if observed.sequential is not None else 0) + 1


def stopped(observed: Observed) -> frozenset[str]:
    """Models the stored document says stopped."""
    return frozenset(observed.sequential.stopped()) if observed.sequential is not None else frozenset()


def continuing(run: ClusterRun, observed: Observed) -> list[Endpoint]:
    """The evaluated models still asked questions (spec order)."""
    out = stopped(observed)
    return [m for m in run.models if m.name not in out] if not finished(observed) else []


def generated(run: ClusterRun, observed: Observed) -> frozenset[Pair]:
    """(model, series) a budgeted run has nothing left to generate for: every pair once every model
    stopped, else the stopped models' pairs."""
    out = frozenset(m.name for m in run.models) if finished(observed) else stopped(observed)
    return frozenset((m, s) for m in out for s in run.series)


def judged(run: ClusterRun, observed: Observed) -> frozenset[Pair]:
    """(judge, series) with nothing left to judge: all of them once every model stopped (the last
    look's judging Jobs succeeded before the look Job that said so was created)."""
    if not finished(observed):
        return frozenset()
    return frozenset((j.name, s) for j in run.judges for s in run.series)


def _job(observed: Observed, name: str) -> JobState | None:
    return observed.jobs.get(name)


def _succeeded(observed: Observed, name: str) -> bool:
    job = _job(observed, name)
    return bool(job and job.succeeded)


def model_look_done(run: ClusterRun, observed: Observed, model: Endpoint, look: int) -> bool:
    """Every generation Job of ``model`` for look ``look`` succeeded."""
    return all(
        _succeeded(observed, vocab.look_generation_job_name(run.ref.name, model.name, s, look))
        for s in run.series
    )


def look_generated(run: ClusterRun, observed: Observed, look: int) -> bool:
    """Every continuing model's generation Jobs of look ``look`` succeeded."""
    return all(model_look_done(run, observed, m, look) for m in continuing(run, observed))


def look_judged(run: ClusterRun, observed: Observed, look: int) -> bool:
    """Every judging Job of look ``look`` succeeded."""
    return all(
        _succeeded(observed, vocab.judge_job_name(run.ref.name, j.name, s, look))
        for j in run.judges
        for s in run.series
    )


def needs_server(run: ClusterRun, observed: Observed, model: Endpoint) -> bool:
    """``model`` still has generation to do in the current look (its server is wanted first)."""
    look = current_look(observed)
    return (
        look is not None
        and model.name not in stopped(observed)
        and not model_look_done(run, observed, model, look)
    )


def judging_due(run: ClusterRun, observed: Observed, judge: Endpoint) -> bool:
    """A judging Job of the current look of a judge sharing ``judge``'s server is running, or due
    (every continuing model's generation of the look succeeded and the Job is not there yet)."""
    look = current_look(observed)
    if look is None:
        return False
    ready = look_generated(run, observed, look)
    for user in (j for j in run.judges if j.key == judge.key):
        for series in run.series:
            job = _job(observed, vocab.judge_job_name(run.ref.name, user.name, series, look))
            if (job is not None and not job.finished) or (job is None and ready):
                return True
    return False


def due_jobs(run: ClusterRun, observed: Observed, ready: Callable[[Endpoint], bool]) -> list[Manifest]:
    """The Jobs of the current look to create now (``ready``: an endpoint's server takes requests):
    generation Jobs of the continuing models, then — once they all succeeded — the look's judging
    Jobs, then — once those succeeded — the look Job."""
    look = current_look(observed)
    if look is None:
        return []
    jobs: list[Manifest] = []
    for model in continuing(run, observed):
        if not ready(model):
            continue
        for series in run.series:
            if vocab.look_generation_job_name(run.ref.name, model.name, series, look) not in observed.jobs:
                jobs.append(_generation(run, model, series, look))
    if not look_generated(run, observed, look):
        return jobs
    for judge in run.judges:
        if not ready(judge):
            continue
        for series in run.series:
            if vocab.judge_job_name(run.ref.name, judge.name, series, look) not in observed.jobs:
                jobs.append(_judging(run, judge, series, look))
    if look_judged(run, observed, look) and vocab.look_job_name(run.ref.name, look) not in observed.jobs:
        jobs.append(mf.look_job(run.ref, look, run.settings, run.storage))
    return jobs


def _generation(run: ClusterRun, model: Endpoint, series: str, look: int) -> Manifest:
    return mf.generation_job(
        run.ref, model, series, run.settings, run.storage, shards=run.generation_shards, look=look
    )


def _judging(run: ClusterRun, judge: Endpoint, series: str, look: int) -> Manifest:
    return mf.judge_job(run.ref, judge, series, run.settings, run.storage, round_=look, look=look)


def any_generation_job(run: ClusterRun, observed: Observed) -> bool:
    """A generation Job of some look exists (the run is generating)."""
    return any(
        vocab.look_generation_job_name(run.ref.name, m.name, s, look) in observed.jobs
        for look in range(1, run.budget_looks + 1)
        for m in run.models
        for s in run.series
    )


def slot_job(run: ClusterRun, slot: str) -> tuple[Manifest, Endpoint | None] | None:
    """The look Job first named ``slot`` as it would be created now, and the endpoint it sends
    requests to (``None`` for a look Job); ``None`` for a name that is none of the looks' Jobs
    (an OOM-killed Job is replaced with this manifest and more memory)."""
    for look in range(1, run.budget_looks + 1):
        if vocab.look_job_name(run.ref.name, look) == slot:
            return mf.look_job(run.ref, look, run.settings, run.storage), None
        for model in run.models:
            for series in run.series:
                if vocab.look_generation_job_name(run.ref.name, model.name, series, look) == slot:
                    return _generation(run, model, series, look), model
        for judge in run.judges:
            for series in run.series:
                if vocab.judge_job_name(run.ref.name, judge.name, series, look) == slot:
                    return _judging(run, judge, series, look), judge
    return None


def budget_status(run: ClusterRun, observed: Observed, previous: BudgetStatus | None) -> BudgetStatus | None:
    """``status.budget`` for a budgeted run (``None`` otherwise), from the stored document; what was
    written before is kept while the document is not read (a finished run reads no storage)."""
    if run.budget_goal is None:
        return None
    document = observed.sequential
    if document is None:
        return previous if previous is not None else BudgetStatus(goal=run.budget_goal)
    return from_document(document)


def from_document(document: SequentialDocument) -> BudgetStatus:
    """The status of a run whose last look stored ``document``."""
    return BudgetStatus(
        goal=document.goal,
        looks_done=document.looks_done,
        looks=document.n_looks,
        models={
            m.model: ModelBudget(status=m.status, questions=m.questions, look=m.look, reason=m.reason)
            for m in document.models
        },
    )
