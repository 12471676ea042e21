"""An EvalRun's ``status``: the one typed record the operator writes and every reader reads back.

Why this module exists: the operator writes ``status`` (``kubejury_operator.status`` builds a
:class:`RunStatus` and writes :meth:`RunStatus.to_json`), reads it back on its next reconcile
(``kubejury_operator.reconcile``, ``kubejury_operator.metrics``) and ``kubejury status`` reads it
from the API server in another process. The engine may not import the operator, so the record
lives here, in the engine, where both can import it. Reading is forgiving, and it happens in one
place (:meth:`RunStatus.from_json`): a status written by an older or newer operator, edited by
hand, or not written yet still reads (missing or unreadable parts are empty), because a
reconcile must not fail on it and a user asking "where is my run?" must get an answer, not a
traceback.

Shape: ``phase``, ``observedGeneration``, ``progress`` ("done/total"), ``startedAt``,
``completedAt``, ``conditions`` (Kubernetes conventions), ``stages.{generation,judging}``
(``done``, ``total``, ``jobsDone``, ``jobs``, and ``models`` / ``judges``: ``done`` and ``total``
per model or judge), ``stages.aggregation`` (``done``, ``total``),
``placement.<model or judge>`` (:meth:`kubejury.records.placement.Placement.to_json`: a reason
code and the facts; the planner's prose is in the run's Events),
``gpu`` (:class:`kubejury.records.gpu_usage.GpuUsage`) and, once the run succeeded, ``summary``
(``primarySeries``, ``reportUri``, ``ranking`` rows with ``rank``, ``model``, ``weighted``,
``weightedCI``, ``degradation``, ``sigma``, ``tier``; ``domainLeaders``, ``tiers``, ``leader``,
``leaderWeighted``; ``note`` when the report was too large to read; ``comparisons`` when the spec
compares pairs: :class:`ComparisonStatus`) and, only when the spec asks to
reuse earlier runs (``spec.reuse.from``), ``reuse`` (:class:`ReuseStatus`: the sources, per model
and per judge the records copied and from which run, and the refusals, at most
:data:`MAX_REUSE_REFUSALS` lines) and, only for a run admitted through Kueue, ``queue``
(:class:`QueueStatus`: its LocalQueue and ClusterQueue and how long it waited for quota) and, only
for a run with ``spec.budget``, ``budget`` (:class:`BudgetStatus`: per model the questions used,
its look and why it stopped).

The status is written with a JSON merge patch, which deletes a key set to ``null`` and keeps a
key left out; so :meth:`RunStatus.to_json` writes an absent ``gpu``, ``startedAt`` or
``completedAt`` as ``null`` and leaves an absent ``summary`` out, as the operator always has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubejury.records.gpu_usage import GpuUsage, GpuUsageError
from kubejury.records.placement import Placement

STAGE_ORDER = ("generation", "judging", "aggregation")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
#: The key under which a stage counts items per model or judge; a stage not named here (the
#: aggregation: one item, no Jobs counted) has neither that key nor Job counters.
PER_NAME_KEY = {"generation": "models", "judging": "judges"}


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list; anything else in it, or a value that is no list, is left out."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list | tuple) else []


@dataclass(frozen=True)
class RunCondition:
    """One condition, per the Kubernetes API conventions."""

    type: str
    status: str  # "True" or "False"
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int = 0

    @property
    def is_true(self) -> bool:
        return self.status == "True"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
            "observedGeneration": self.observed_generation,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunCondition:
        return cls(
            type=_str(data.get("type")),
            status=_str(data.get("status")),
            reason=_str(data.get("reason")),
            message=_str(data.get("message")),
            last_transition_time=_str(data.get("lastTransitionTime")),
            observed_generation=_int(data.get("observedGeneration")),
        )


@dataclass(frozen=True)
class StageCounts:
    """Items done of total, and Jobs done of Jobs, of one stage; ``by_name``: (done, total) per
    model (generation, ``models``) or judge (judging, ``judges``)."""

    stage: str
    done: int = 0
    total: int = 0
    jobs_done: int = 0
    jobs: int = 0
    by_name: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, Any] = {"done": self.done, "total": self.total}
        per = PER_NAME_KEY.get(self.stage)
        if per is None:
            return counts
        named = {name: {"done": done, "total": total} for name, (done, total) in self.by_name.items()}
        return {**counts, "jobsDone": self.jobs_done, "jobs": self.jobs, per: named}

    @classmethod
    def from_json(cls, stage: str, data: Mapping[str, Any]) -> StageCounts:
        per = data.get("models") or data.get("judges") or {}
        return cls(
            stage=stage,
            done=_int(data.get("done")),
            total=_int(data.get("total")),
            jobs_done=_int(data.get("jobsDone")),
            jobs=_int(data.get("jobs")),
            by_name={
                str(name): (_int(c.get("done")), _int(c.get("total")))
                for name, c in (per.items() if isinstance(per, Mapping) else ())
                if isinstance(c, Mapping)
            },
        )


@dataclass(frozen=True)
class RankingRow:
    """One model's row of the primary series' ranking (values rounded by the writer)."""

    rank: int
    model: str
    weighted: float | None = None
    weighted_ci: tuple[float | None, float | None] = (None, None)
    degradation: float | None = None
    sigma: float | None = None
    tier: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "model": self.model,
            "weighted": self.weighted,
            "weightedCI": list(self.weighted_ci),
            "degradation": self.degradation,
            "sigma": self.sigma,
            "tier": self.tier,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankingRow:
        ci = data.get("weightedCI") or [None, None]
        low, high = [*list(ci), None, None][:2] if isinstance(ci, list | tuple) else (None, None)
        return cls(
            rank=_int(data.get("rank")),
            model=_str(data.get("model")),
            weighted=_float(data.get("weighted")),
            weighted_ci=(_float(low), _float(high)),
            degradation=_float(data.get("degradation")),
            sigma=_float(data.get("sigma")),
            tier=_optional_str(data.get("tier")),
        )


@dataclass(frozen=True)
class ComparisonStatus:
    """One compared pair of the primary series (issue 27): ΔW = W(a) − W(b) with its 90% interval,
    the margin, the TOST verdict (equivalent / different / undecided; ``None`` when not computed)
    and the questions an equivalence decision at the margin would need."""

    a: str
    b: str
    margin: float | None = None
    difference: float | None = None
    ci90: tuple[float | None, float | None] = (None, None)
    verdict: str | None = None
    questions_needed: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "margin": self.margin,
            "difference": self.difference,
            "ci90": list(self.ci90),
            "verdict": self.verdict,
            "questionsNeeded": self.questions_needed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ComparisonStatus:
        ci = data.get("ci90")
        low, high = [*list(ci), None, None][:2] if isinstance(ci, list | tuple) else (None, None)
        needed = data.get("questionsNeeded")
        return cls(
            a=_str(data.get("a")),
            b=_str(data.get("b")),
            margin=_float(data.get("margin")),
            difference=_float(data.get("difference")),
            ci90=(_float(low), _float(high)),
            verdict=_optional_str(data.get("verdict")),
            questions_needed=_int(needed) if needed is not None else None,
        )


@dataclass(frozen=True)
class RunSummary:
    """What a finished run's report says, small enough for etcd: never per-answer data.

    ``domain_leaders`` and ``tiers`` are ``None`` when the report had no primary series (the
    summary then has no such keys); ``leader`` is ``None`` while the ranking is empty; ``note``
    says why a summary has no ranking (a report too large to read)."""

    primary_series: str | None
    report_uri: str | None
    ranking: tuple[RankingRow, ...] = ()
    domain_leaders: Mapping[str, str] | None = None
    tiers: Mapping[str, str] | None = None
    leader: str | None = None
    leader_weighted: float | None = None
    note: str | None = None
    comparisons: tuple[ComparisonStatus, ...] = ()

    def to_json(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "primarySeries": self.primary_series,
            "reportUri": self.report_uri,
            "ranking": [row.to_json() for row in self.ranking],
        }
        if self.domain_leaders is not None:
            summary["domainLeaders"] = dict(self.domain_leaders)
        if self.tiers is not None:
            summary["tiers"] = dict(self.tiers)
        if self.leader is not None:
            summary["leader"] = self.leader
            summary["leaderWeighted"] = self.leader_weighted
        if self.note is not None:
            summary["note"] = self.note
        if self.comparisons:
            summary["comparisons"] = [c.to_json() for c in self.comparisons]
        return summary

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        return cls(
            primary_series=_optional_str(data.get("primarySeries")),
            report_uri=_optional_str(data.get("reportUri")),
            ranking=tuple(RankingRow.from_json(r) for r in _mappings(data.get("ranking"))),
            domain_leaders=_names(data.get("domainLeaders")),
            tiers=_names(data.get("tiers")),
            leader=_optional_str(data.get("leader")),
            leader_weighted=_float(data.get("leaderWeighted")),
            note=_optional_str(data.get("note")),
            comparisons=tuple(ComparisonStatus.from_json(c) for c in _mappings(data.get("comparisons"))),
        )


MAX_REUSE_REFUSALS = 5  # lines of ``status.reuse.refused``; the rest are counted in one more line
MAX_REUSE_LINE = 240  # characters of one refusal line (the reuse document in storage has them whole)


@dataclass(frozen=True)
class ReusedRecords:
    """Records one model (answers) or judge (judgments) got by copy, in total and per source run."""

    from_runs: Mapping[str, int] = field(default_factory=dict)

    @property
    def reused(self) -> int:
        return sum(self.from_runs.values())

    def to_json(self) -> dict[str, Any]:
        return {"reused": self.reused, "fromRuns": dict(sorted(self.from_runs.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReusedRecords:
        runs = data.get("fromRuns")
        if not isinstance(runs, Mapping):
            return cls()
        return cls(from_runs={str(run): _int(count) for run, count in runs.items()})


@dataclass(frozen=True)
class ReuseStatus:
    """``status.reuse``: what the run copied from the earlier runs its spec names.

    ``sources``: the runs named, in order of preference. ``copied``: the reuse step's document has
    been read (before that ``models`` and ``judges`` are empty). ``models``/``judges``: records
    copied per model or judge, by source run. ``refused``: short lines saying what was not copied
    and why (a source that could not be used, a part that differs), :data:`MAX_REUSE_REFUSALS` at
    most and then one line counting the rest. ``note``: why the reuse document could not be read."""

    sources: tuple[str, ...] = ()
    copied: bool = False
    models: Mapping[str, ReusedRecords] = field(default_factory=dict)
    judges: Mapping[str, ReusedRecords] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    note: str | None = None

    @staticmethod
    def capped(lines: Sequence[str]) -> tuple[str, ...]:
        """At most :data:`MAX_REUSE_REFUSALS` lines (each at most :data:`MAX_REUSE_LINE`
        characters), then ``and N more`` for the rest."""
        shown = [_short(line) for line in lines[:MAX_REUSE_REFUSALS]]
        if len(lines) > MAX_REUSE_REFUSALS:
            shown.append(f"and {len(lines) - MAX_REUSE_REFUSALS} more")
        return tuple(shown)

    def to_json(self) -> dict[str, Any]:
        reuse: dict[str, Any] = {
            "sources": list(self.sources),
            "copied": self.copied,
            "models": {name: r.to_json() for name, r in self.models.items()},
            "judges": {name: r.to_json() for name, r in self.judges.items()},
            "refused": list(self.refused),
        }
        if self.note is not None:
            reuse["note"] = self.note
        return reuse

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReuseStatus:
        sources, refused = data.get("sources"), data.get("refused")
        return cls(
            sources=tuple(str(s) for s in sources) if isinstance(sources, list | tuple) else (),
            copied=data.get("copied") is True,
            models=_reused(data.get("models")),
            judges=_reused(data.get("judges")),
            refused=tuple(str(r) for r in refused) if isinstance(refused, list | tuple) else (),
            note=_optional_str(data.get("note")),
        )


def _short(line: str) -> str:
    return line if len(line) <= MAX_REUSE_LINE else line[: MAX_REUSE_LINE - 1] + "…"


def _reused(value: Any) -> dict[str, ReusedRecords]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): ReusedRecords.from_json(v) for k, v in value.items() if isinstance(v, Mapping)}


@dataclass(frozen=True)
class QueueStatus:
    """``status.queue``: how the run waits for Kueue's quota (only for a run that is queued).

    ``localQueue``: the LocalQueue its servers and Jobs name; ``clusterQueue``: the ClusterQueue
    behind it, once read. ``waitingSince``: the open interval — something of the run (a model
    server's Pod or a Job) has waited for admission since then; readers add now − waitingSince.
    ``waitedSeconds``: the closed intervals, summed. Time queued is never GPU time held: a server
    Pod waiting for quota is not Ready (``status.gpu``)."""

    local_queue: str
    cluster_queue: str | None = None
    waiting_since: str | None = None
    waited_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "localQueue": self.local_queue,
            "clusterQueue": self.cluster_queue,
            "waitingSince": self.waiting_since,
            "waitedSeconds": round(self.waited_seconds, 1),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueStatus:
        return cls(
            local_queue=_str(data.get("localQueue")),
            cluster_queue=_optional_str(data.get("clusterQueue")),
            waiting_since=_optional_str(data.get("waitingSince")),
            waited_seconds=_float(data.get("waitedSeconds")) or 0.0,
        )


@dataclass(frozen=True)
class ModelBudget:
    """One model of a budgeted run: ``continue`` or ``stopped`` (with ``reason``), its stopping
    look (or the last look done), and the questions it answered."""

    status: str
    questions: int = 0
    look: int = 0
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "questions": self.questions, "look": self.look, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelBudget:
        return cls(
            status=_str(data.get("status")),
            questions=_int(data.get("questions")),
            look=_int(data.get("look")),
            reason=_str(data.get("reason")),
        )


@dataclass(frozen=True)
class BudgetStatus:
    """``status.budget`` (spec.budget, issue 27): the goal, looks done of ``looks`` (``None`` until
    the first look said how many the benchmark allows), and every model's :class:`ModelBudget`,
    as the run's ``sequential.json`` says after its last look."""

    goal: str
    looks_done: int = 0
    looks: int | None = None
    models: Mapping[str, ModelBudget] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "looksDone": self.looks_done,
            "looks": self.looks,
            "models": {name: m.to_json() for name, m in self.models.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetStatus:
        models = data.get("models")
        looks = data.get("looks")
        return cls(
            goal=_str(data.get("goal")),
            looks_done=_int(data.get("looksDone")),
            looks=_int(looks) if looks is not None else None,
            models={
                str(k): ModelBudget.from_json(v)
                for k, v in (models.items() if isinstance(models, Mapping) else ())
                if isinstance(v, Mapping)
            },
        )


def _names(value: Any) -> dict[str, str] | None:
    """A JSON object of name → name; ``None`` when absent or no object."""
    return {str(k): _str(v) for k, v in value.items()} if isinstance(value, Mapping) else None


@dataclass(frozen=True)
class RunStatus:
    """The whole ``status`` of one EvalRun. ``started_at`` and ``completed_at`` are ``""`` until
    set; ``written`` is False when nothing has been stored yet (the operator has not reconciled
    the run)."""

    phase: str = "Pending"
    observed_generation: int = 0
    progress: str = ""
    started_at: str = ""
    completed_at: str = ""
    conditions: tuple[RunCondition, ...] = ()
    stages: tuple[StageCounts, ...] = ()
    placement: tuple[Placement, ...] = ()
    summary: RunSummary | None = None
    gpu: GpuUsage = field(default_factory=GpuUsage)  # GPU time per model server (status.gpu)
    reuse: ReuseStatus | None = None  # only for a run whose spec names runs to reuse
    queue: QueueStatus | None = None  # only for a run admitted through Kueue
    written: bool = True
    budget: BudgetStatus | None = None  # only for a run with spec.budget
    # the placement with the planner's prose (Placement.to_full_json): only the operator benchmark's
    # KUBEJURY_STATUS_FORMAT=full design, the "before" of issue 26, writes it
    full_placement: bool = False

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def condition(self, ctype: str) -> RunCondition | None:
        """The condition of type ``ctype``, or ``None``."""
        return next((c for c in self.conditions if c.type == ctype), None)

    def stage(self, name: str) -> StageCounts | None:
        """The counts of stage ``name``, or ``None``."""
        return next((s for s in self.stages if s.stage == name), None)

    def to_json(self) -> dict[str, Any]:
        """The status as the operator writes it (see the module docstring for the nulls)."""
        status: dict[str, Any] = {
            "phase": self.phase,
            "observedGeneration": self.observed_generation,
            "conditions": [c.to_json() for c in self.conditions],
            "progress": self.progress,
            "stages": {s.stage: s.to_json() for s in self.stages},
            "placement": {
                p.name: p.to_full_json() if self.full_placement else p.to_json() for p in self.placement
            },
            "gpu": self.gpu.to_json() if self.gpu.servers else None,
            "startedAt": self.started_at or None,
            "completedAt": self.completed_at or None,
        }
        if self.summary is not None:
            status["summary"] = self.summary.to_json()
        if self.reuse is not None:
            status["reuse"] = self.reuse.to_json()
        if self.queue is not None:
            status["queue"] = self.queue.to_json()
        if self.budget is not None:
            status["budget"] = self.budget.to_json()
        return status

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RunStatus:
        """The record of a stored ``status``; ``None`` or ``{}`` (not reconciled yet) reads as
        Pending, and every part that cannot be read reads as absent."""
        data = data or {}
        stages = data.get("stages")
        stages = stages if isinstance(stages, Mapping) else {}
        placement = data.get("placement")
        placement = placement if isinstance(placement, Mapping) else {}
        summary = data.get("summary")
        reuse = data.get("reuse")
        queue = data.get("queue")
        budget = data.get("budget")
        return cls(
            phase=_str(data.get("phase")) or "Pending",
            observed_generation=_int(data.get("observedGeneration")),
            progress=_str(data.get("progress")),
            started_at=_str(data.get("startedAt")),
            completed_at=_str(data.get("completedAt")),
            conditions=tuple(RunCondition.from_json(c) for c in _mappings(data.get("conditions"))),
            stages=tuple(
                StageCounts.from_json(stage, stages[stage])
                for stage in (*STAGE_ORDER, *sorted(set(stages) - set(STAGE_ORDER)))
                if isinstance(stages.get(stage), Mapping)
            ),
            placement=tuple(
                p for name, entry in placement.items() if (p := _placement(name, entry)) is not None
            ),
            summary=RunSummary.from_json(summary) if isinstance(summary, Mapping) else None,
            gpu=_gpu(data.get("gpu")),
            reuse=ReuseStatus.from_json(reuse) if isinstance(reuse, Mapping) else None,
            queue=QueueStatus.from_json(queue) if isinstance(queue, Mapping) else None,
            written=bool(data),
            budget=BudgetStatus.from_json(budget) if isinstance(budget, Mapping) else None,
        )


def _placement(name: Any, entry: Any) -> Placement | None:
    """One recorded placement; ``None`` when it is no object or cannot be read."""
    if not isinstance(entry, Mapping):
        return None
    try:
        return Placement.from_json(entry, name=str(name))
    except (TypeError, ValueError, AttributeError):
        return None


def _gpu(value: Any) -> GpuUsage:
    try:
        return GpuUsage.from_json(value) if isinstance(value, Mapping) else GpuUsage()
    except GpuUsageError:
        return GpuUsage()  # forgiving, as everything here: a broken part reads as absent
