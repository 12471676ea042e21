"""An EvalRun's ``status`` as the operator writes it, read back as one typed record.

Why this module exists: the operator writes ``status`` (``kubejury_operator.status``) and
``kubejury status`` reads it from the API server in another process. The engine may not import
the operator, so the reader's view of that shape lives here, in the engine, where the operator
can import it too. Reading is forgiving — a status written by an older or newer operator, or a
run the operator has not seen yet, still reads (missing parts are empty) — because a user asking
"where is my run?" must get an answer, not a traceback.

Shape read: ``phase``, ``observedGeneration``, ``progress`` ("done/total"), ``startedAt``,
``completedAt``, ``conditions`` (Kubernetes conventions), ``stages.{generation,judging}``
(``done``, ``total``, ``jobsDone``, ``jobs``, and ``models`` / ``judges``: ``done`` and ``total``
per model or judge), ``stages.aggregation`` (``done``, ``total``),
``placement.<model or judge>`` (:meth:`kubejury.records.placement.Placement.to_json`) and,
once the run succeeded, ``summary`` (``primarySeries``, ``reportUri``, ``leader``, ``ranking``
rows with ``rank``, ``model``, ``weighted``, ``weightedCI``, ``degradation``, ``sigma``,
``tier``; ``domainLeaders``); ``gpu`` (:class:`kubejury.records.gpu_usage.GpuUsage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubejury.records.gpu_usage import GpuUsage, GpuUsageError
from kubejury.records.placement import Placement

STAGE_ORDER = ("generation", "judging", "aggregation")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


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


@dataclass(frozen=True)
class RunCondition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int

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
    done: int
    total: int
    jobs_done: int
    jobs: int
    by_name: Mapping[str, tuple[int, int]] = field(default_factory=dict)

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
    rank: int
    model: str
    weighted: float | None
    weighted_ci: tuple[float | None, float | None]
    degradation: float | None
    sigma: float | None
    tier: str

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
            tier=_str(data.get("tier")),
        )


@dataclass(frozen=True)
class RunSummary:
    primary_series: str
    report_uri: str
    leader: str
    ranking: tuple[RankingRow, ...]
    domain_leaders: Mapping[str, str]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        leaders = data.get("domainLeaders") or {}
        return cls(
            primary_series=_str(data.get("primarySeries")),
            report_uri=_str(data.get("reportUri")),
            leader=_str(data.get("leader")),
            ranking=tuple(
                RankingRow.from_json(r) for r in data.get("ranking") or [] if isinstance(r, Mapping)
            ),
            domain_leaders=(
                {str(k): _str(v) for k, v in leaders.items()} if isinstance(leaders, Mapping) else {}
            ),
        )


@dataclass(frozen=True)
class RunStatus:
    """The whole ``status`` of one EvalRun, as ``kubejury status`` shows it."""

    phase: str
    observed_generation: int
    progress: str
    started_at: str
    completed_at: str
    conditions: tuple[RunCondition, ...]
    stages: tuple[StageCounts, ...]
    placement: tuple[Placement, ...]
    summary: RunSummary | None
    gpu: GpuUsage = field(default_factory=GpuUsage)  # GPU time per model server (status.gpu)

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RunStatus:
        """The record of a ``status`` object; ``None`` or ``{}`` (not reconciled yet) reads as Pending."""
        data = data or {}
        stages = data.get("stages") or {}
        placement = data.get("placement") or {}
        summary = data.get("summary")
        return cls(
            phase=_str(data.get("phase")) or "Pending",
            observed_generation=_int(data.get("observedGeneration")),
            progress=_str(data.get("progress")),
            started_at=_str(data.get("startedAt")),
            completed_at=_str(data.get("completedAt")),
            conditions=tuple(
                RunCondition.from_json(c) for c in data.get("conditions") or [] if isinstance(c, Mapping)
            ),
            stages=tuple(
                StageCounts.from_json(stage, stages[stage])
                for stage in (*STAGE_ORDER, *sorted(set(stages) - set(STAGE_ORDER)))
                if isinstance(stages.get(stage), Mapping)
            ),
            placement=tuple(
                Placement.from_json(entry, name=str(name))
                for name, entry in placement.items()
                if isinstance(entry, Mapping)
            ),
            summary=RunSummary.from_json(summary) if isinstance(summary, Mapping) else None,
            gpu=_gpu(data.get("gpu")),
        )


def _gpu(value: Any) -> GpuUsage:
    try:
        return GpuUsage.from_json(value) if isinstance(value, Mapping) else GpuUsage()
    except GpuUsageError:
        return GpuUsage()  # forgiving, as everything here: a broken part reads as absent
