"""The work a run has left once earlier runs' records are copied: the estimate's input under reuse.

Why this module exists: a run with ``spec.reuse.from`` copies the answers and judgments of earlier
runs instead of making them again (:mod:`kubejury.stages.reuse`), so its GPU-hours are those of
what is left. ``kubejury plan --estimate`` runs the reuse step without writing and gets a
:class:`~kubejury.records.reuse.ReuseDocument`; this module turns that document into counts —
answers left per model, judgments left per judge and model — that the pure estimate
(:func:`kubejury.placement.estimate.estimate_run`) scales each stage by. No I/O here: the caller
reads storage, this module only counts.

The reuse document says, per judge and series, how many judgments were copied and which models
are fully covered, not how the rest splits over the other models. The split assumed here: a model
none of whose answers was copied needs every judgment of its answers; what is left after that is
shared evenly by the other models not covered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubejury.records.reuse import ReuseDocument, StageReuse


@dataclass(frozen=True)
class RemainingWork:
    """Records still to make after reuse, over every series.

    ``per_model`` is what the full run makes per model: its answers (questions × series), and each
    judge's judgments of them. A model (or judge–model pair) absent from ``answers``
    (``judgments``) has all of its work left."""

    per_model: int
    answers: Mapping[str, int] = field(default_factory=dict)  # model → answers to generate
    judgments: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # judge → model → left

    def answers_left(self, model: str) -> int:
        return self.answers.get(model, self.per_model)

    def judgments_left(self, judge: str, model: str) -> int:
        return self.judgments.get(judge, {}).get(model, self.per_model)

    def generation_share(self, model: str) -> float:
        """The share of the model's generation still to run (0: every answer copied, 1: none)."""
        return _share(self.answers_left(model), self.per_model)

    def judging_share(self, judge: str, model: str) -> float:
        """The share of the judge's judgments of the model's answers still to make."""
        return _share(self.judgments_left(judge, model), self.per_model)


def _share(left: int, full: int) -> float:
    return 1.0 if full <= 0 else min(1.0, max(0.0, left / full))


def remaining_from_reuse(
    document: ReuseDocument, models: Sequence[str], judges: Sequence[str]
) -> RemainingWork:
    """The work ``document`` (a reuse step's outcome, written or not) leaves to the run's models
    and judges."""
    generation = [s for s in document.stages if s.stage == "generate"]
    series = sorted({s.series for s in document.stages})
    questions = {s.series: s.needed for s in generation}
    per_model = sum(questions.get(name, 0) for name in series)
    answers = {
        model: sum(s.needed - s.reused for s in generation if s.name == model)
        for model in models
        if any(s.name == model for s in generation)  # a model with no stage copied nothing
    }
    judgments: dict[str, dict[str, int]] = {}  # a judge with no stage in it copied nothing
    for stage in document.stages:
        if stage.stage != "judge" or stage.name not in judges:
            continue
        copied_none = {s.name for s in generation if s.series == stage.series and s.reused == 0}
        split = _judgments_left(stage, models, questions.get(stage.series, 0), copied_none)
        per_judge = judgments.setdefault(stage.name, dict.fromkeys(models, 0))
        for model, left in split.items():
            per_judge[model] += left
    return RemainingWork(per_model=per_model, answers=answers, judgments=judgments)


def _judgments_left(
    stage: StageReuse, models: Sequence[str], questions: int, copied_none: set[str]
) -> dict[str, int]:
    """One judge's judgments left in one series, per model (the split of the module docstring)."""
    left = max(0, questions * len(models) - stage.reused)
    split = dict.fromkeys(models, 0)
    uncovered = [m for m in models if m not in stage.covered_models]
    for model in uncovered:
        if model in copied_none:
            split[model] = min(questions, left)
            left -= split[model]
    rest = [m for m in uncovered if m not in copied_none]
    for i, model in enumerate(rest):
        split[model] = left // len(rest) + (1 if i < left % len(rest) else 0)
    return split
