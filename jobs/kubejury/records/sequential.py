"""Where a sequential run stands after its last look: the sequential document.

Why this module exists: a run with ``spec.budget`` asks questions in waves and, after each wave,
decides per model "continue" or "stopped: <reason>" (:mod:`kubejury.stats.sequential`). The
engine writes that decision after every look to ``<run>/sequential.json`` (:func:`document_key`);
a rerun continues from it, the report's ``sequential`` section and ``plan --estimate`` read it,
and the operator reads it to scale a stopped model's server to zero (docs/operator.md). One
definition for the writer and every reader; :meth:`SequentialDocument.from_json` is the one
reader and names the bad field. Numbers undefined on the data (NaN) are stored as null.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kubejury.stats.sequential import Budget, QuestionOrder, SequentialOutcome

SEQUENTIAL_FORMAT: Final = 1
Interval = tuple[float | None, float | None]


class SequentialDocumentError(ValueError):
    """A stored sequential document that is not one; the message names the field."""


def document_key(run: str) -> str:
    """Where the run's sequential document is stored, beside its spec."""
    return f"{run}/sequential.json"


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelState(_Part):
    """One model: ``status`` continue or stopped (with ``reason``); ``look``: its stopping look
    (1-based), or the last look done while it continues; ``questions``: questions it answered;
    ``interval``: W's interval at that look at level ``confidence``; ``running_interval``: the
    intersection of its intervals over its looks (never wider, valid on the same event)."""

    model: str
    status: Literal["continue", "stopped"]
    reason: str = ""
    look: int = Field(ge=0)
    questions: int = Field(ge=0)
    estimate: float | None = None
    interval: Interval = (None, None)
    confidence: float | None = None
    running_interval: Interval = (None, None)


class PairState(_Part):
    """A pair of a full-ranking or comparisons goal: its verdict on W_a − W_b at the deciding look."""

    a: str
    b: str
    margin: float
    verdict: Literal["undecided", "a-better", "b-better", "equivalent"]
    look: int = Field(ge=0)
    difference: float | None = None
    interval: Interval = (None, None)


class SequentialDocument(_Part):
    """The run's budget, its looks (``prefix_sizes[k]``: questions asked by the end of look k+1,
    of ``total_questions``), how many are done, and every model's and pair's state."""

    format: Literal[1] = SEQUENTIAL_FORMAT
    goal: Literal["leading-group", "full-ranking", "comparisons"]
    confidence: float
    margin: float
    seed: int
    total_questions: int = Field(ge=1)
    prefix_sizes: list[int]
    looks_done: int = Field(ge=0)
    models: list[ModelState]
    pairs: list[PairState] = Field(default_factory=list)
    leading_group: list[str] = Field(default_factory=list)
    updated_at: str = ""

    @property
    def n_looks(self) -> int:
        return len(self.prefix_sizes)

    @property
    def finished(self) -> bool:
        """Every model stopped: nothing more is asked."""
        return all(m.status == "stopped" for m in self.models)

    def state(self, model: str) -> ModelState:
        return next(m for m in self.models if m.model == model)

    def stopped(self) -> list[str]:
        return [m.model for m in self.models if m.status == "stopped"]

    def to_json(self) -> dict[str, Any]:
        dumped: dict[str, Any] = self.model_dump(mode="json")
        return dumped

    @classmethod
    def from_json(cls, data: Any, source: str = "sequential.json") -> SequentialDocument:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(document)"
            raise SequentialDocumentError(f"{source}: {where}: {first['msg']}") from None


def _number(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _interval(pair: tuple[float, float]) -> Interval:
    return (_number(pair[0]), _number(pair[1]))


def from_outcome(
    outcome: SequentialOutcome, budget: Budget, order: QuestionOrder, updated_at: str = ""
) -> SequentialDocument:
    """The document of the planner's ``outcome`` under ``budget`` and ``order``."""
    return SequentialDocument(
        goal=budget.goal,
        confidence=budget.confidence,
        margin=budget.margin,
        seed=budget.seed,
        total_questions=int(order.cells.shape[0]),
        prefix_sizes=[int(n) for n in order.prefix_sizes],
        looks_done=outcome.looks_done,
        models=[
            ModelState(
                model=m.model,
                status=m.status,
                reason=m.reason,
                look=m.look,
                questions=m.questions,
                estimate=_number(m.estimate),
                interval=_interval(m.interval),
                confidence=_number(m.confidence),
                running_interval=_interval(m.running_interval),
            )
            for m in outcome.models
        ],
        pairs=[
            PairState(
                a=p.a,
                b=p.b,
                margin=p.margin,
                verdict=p.verdict,
                look=p.look,
                difference=_number(p.difference),
                interval=_interval(p.interval),
            )
            for p in outcome.pairs
        ],
        leading_group=list(outcome.leading_group),
        updated_at=updated_at,
    )


def report_section(document: SequentialDocument) -> dict[str, Any]:
    """report.json's ``sequential`` (``kubejury.records.report.SequentialSection``): the goal and
    looks, questions used against those a run without a budget would ask, and every model's state."""
    budgeted = (document.prefix_sizes[-1] if document.prefix_sizes else 0) * len(document.models)
    return {
        "goal": document.goal,
        "confidence": document.confidence,
        "margin": document.margin,
        "total_questions": document.total_questions,
        "prefix_sizes": list(document.prefix_sizes),
        "looks_done": document.looks_done,
        "questions_used": sum(m.questions for m in document.models),
        "questions_budgeted": budgeted,
        "models": {
            m.model: {
                "status": m.status,
                "reason": m.reason,
                "look": m.look,
                "questions": m.questions,
                "estimate": m.estimate,
                "interval": list(m.interval),
                "confidence": m.confidence,
                "running_interval": list(m.running_interval),
            }
            for m in document.models
        },
        "pairs": [
            {
                "a": p.a,
                "b": p.b,
                "margin": p.margin,
                "verdict": p.verdict,
                "look": p.look,
                "difference": p.difference,
                "interval": list(p.interval),
            }
            for p in document.pairs
        ],
        "leading_group": list(document.leading_group),
    }
