"""The dense, vectorisable form of one series' judgments: models × questions × judges.

Every statistic in kubejury (the study's formulas, bootstrap intervals, judge agreement,
self-preference) is computed from a :class:`ScoreCube`. Loading code (``kubejury.files.tables``) builds
cubes from judgment records once; everything downstream is numpy on these arrays, never a Python
loop over records. A missing judgment and a judgment whose score is null are both ``NaN`` in
``scores``; ``has_record`` tells them apart (a question with records that are all null is
*unscored*, a question with no record at all was simply not asked of that model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ScoreCube:
    """Scores of one series.

    Axes: ``models`` (M) × ``question_ids`` (Q) × ``judges`` (J). Questions are ordered by
    (level, domain, id); ``question_domain[q]`` indexes ``domains`` and ``question_level[q]``
    indexes ``levels`` (sorted ascending, the actual level numbers).
    """

    series: str
    models: tuple[str, ...]
    judges: tuple[str, ...]
    question_ids: tuple[str, ...]
    domains: tuple[str, ...]
    levels: tuple[int, ...]
    question_domain: IntArray  # shape (Q,), index into ``domains``
    question_level: IntArray  # shape (Q,), index into ``levels``
    scores: FloatArray  # shape (M, Q, J); NaN = absent or null
    has_record: BoolArray  # shape (M, Q); True when any judgment record exists for (m, q)
    # Optional per-answer data joined from the answers files, shape (M, Q), NaN when unknown.
    answer_chars: FloatArray | None = None
    completion_tokens: FloatArray | None = None
    latency_s: FloatArray | None = None
    extras: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        m, q, j = len(self.models), len(self.question_ids), len(self.judges)
        if self.scores.shape != (m, q, j):
            raise ValueError(f"scores has shape {self.scores.shape}, expected {(m, q, j)}")
        if self.has_record.shape != (m, q):
            raise ValueError(f"has_record has shape {self.has_record.shape}, expected {(m, q)}")
        if self.question_domain.shape != (q,) or self.question_level.shape != (q,):
            raise ValueError("question_domain and question_level must have one entry per question")
        for name in ("answer_chars", "completion_tokens", "latency_s"):
            arr = getattr(self, name)
            if arr is not None and arr.shape != (m, q):
                raise ValueError(f"{name} has shape {arr.shape}, expected {(m, q)}")

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_questions(self) -> int:
        return len(self.question_ids)

    @property
    def n_judges(self) -> int:
        return len(self.judges)

    def model_index(self, model: str) -> int:
        return self.models.index(model)

    def judge_index(self, judge: str) -> int:
        return self.judges.index(judge)
