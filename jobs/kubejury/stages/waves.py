"""The waves of a budgeted run: which questions a look asks, and what the stored judgments decide.

Why this module exists: a run with ``spec.budget`` does not ask every question of every model.
It asks the prefix of a stratified, seeded order (:func:`kubejury.stats.sequential.plan_order`)
look by look; after each look the question scores stored so far decide which models continue.
The stages themselves stay as they are: a look hands them the prefix as their question list (they
skip what is stored, so a rerun or an interrupted look costs nothing twice). This module maps the
benchmark onto the planner's arrays, turns stored judgments into S(m, q), and reads and writes
the sequential document (:mod:`kubejury.records.sequential`); ``kubejury run`` drives the looks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kubejury.files.benchmark import Benchmark, Question
from kubejury.files.storage import RunLayout, Storage
from kubejury.records.results import JudgmentRecord
from kubejury.records.sequential import SequentialDocument, document_key, from_outcome
from kubejury.records.timestamps import now_time
from kubejury.stages.judge import read_judgments
from kubejury.stats.cube import FloatArray, IntArray
from kubejury.stats.sequential import Budget, QuestionOrder, SequentialOutcome, evaluate, plan_order


@dataclass(frozen=True)
class WavePlan:
    """A budgeted run's questions (benchmark order), their order and looks, and the level weights."""

    models: tuple[str, ...]
    questions: tuple[Question, ...]
    budget: Budget
    order: QuestionOrder
    level_weights: FloatArray

    @property
    def n_looks(self) -> int:
        return self.order.n_looks

    def prefix(self, look: int) -> list[Question]:
        """The questions asked by the end of look ``look`` (0-based), in benchmark order."""
        asked = self.order.asked(look)
        return [q for q, on in zip(self.questions, asked.tolist(), strict=True) if on]

    def decide(self, judgments: Sequence[JudgmentRecord], looks_done: int) -> SequentialOutcome:
        """The planner's decision after ``looks_done`` looks on the stored ``judgments``."""
        scores = score_matrix(self.models, [q.id for q in self.questions], judgments)
        return evaluate(self.models, scores, self.order, self.budget, self.level_weights, looks_done)

    def document(self, outcome: SequentialOutcome) -> SequentialDocument:
        return from_outcome(outcome, self.budget, self.order, updated_at=now_time())


def question_cells(benchmark: Benchmark) -> IntArray:
    """Each question's cell, domain index · number of levels + level index."""
    domains = {d: i for i, d in enumerate(benchmark.domains)}
    levels = {lvl: i for i, lvl in enumerate(benchmark.levels)}
    n_levels = len(levels)
    return np.array(
        [domains[q.domain] * n_levels + levels[q.level] for q in benchmark.questions], dtype=np.int64
    )


def plan_waves(
    models: Sequence[str], benchmark: Benchmark, budget: Budget, weights: Mapping[int, float]
) -> WavePlan:
    """The looks of ``budget`` over ``benchmark`` (``weights``: level → weight of W)."""
    order = plan_order(question_cells(benchmark), len(benchmark.domains), len(benchmark.levels), budget)
    level_weights = np.array([float(weights.get(lvl, 0.0)) for lvl in benchmark.levels], dtype=np.float64)
    return WavePlan(tuple(models), tuple(benchmark.questions), budget, order, level_weights)


def score_matrix(
    models: Sequence[str], question_ids: Sequence[str], judgments: Sequence[JudgmentRecord]
) -> FloatArray:
    """S(m, q): the mean of the judges' non-null scores (formula (1)); NaN where none."""
    row = {m: i for i, m in enumerate(models)}
    column = {q: i for i, q in enumerate(question_ids)}
    total = np.zeros((len(models), len(question_ids)))
    count = np.zeros_like(total)
    for record in judgments:
        i, j = row.get(record.model), column.get(record.question_id)
        if i is None or j is None or record.score is None:
            continue
        total[i, j] += float(record.score)
        count[i, j] += 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(count > 0, total / np.maximum(count, 1.0), np.nan))


def primary_judgments(
    storage: Storage, layout: RunLayout, series: str, judges: Sequence[str]
) -> list[JudgmentRecord]:
    """Every stored judgment of ``series`` (the primary one: what a look decides on), one per key."""
    return [r for j in judges for r in read_judgments(storage, layout, series, j)]


def read_document(storage: Storage, run: str) -> SequentialDocument | None:
    """The run's stored sequential document (``None``: no look was done yet)."""
    stored = storage.read_json_or_none(document_key(run))
    return (
        None if stored is None else SequentialDocument.from_json(stored, storage.uri_for(document_key(run)))
    )


def write_document(storage: Storage, run: str, document: SequentialDocument) -> None:
    storage.write_json(document_key(run), document.to_json())
