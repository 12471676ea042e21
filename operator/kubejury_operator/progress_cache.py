"""How often a run's progress records are read from storage.

Why this module exists: a run's progress records (one per model, series and stage) and, at the
end, its report are read from storage on every reconcile, and a busy run is reconciled on every
change of one of its Jobs. At a hundred runs, decoding those records was the second-largest share
of the operator's CPU in the scale benchmark's profile. The records feed counters and the rate
that decides when the next server starts its bring-up; a few seconds' delay changes neither in a
way anyone sees — a stage counts as done when its Job succeeded, whatever its record says. So a
reading is reused for :data:`PROGRESS_MAX_AGE_SECONDS`, unless the aggregation Job has finished
since: the report and the final counters are then read at once, so ``Succeeded`` is written with
them. (Re-reading on every Job's completion, as first built, kept almost nothing: in the scale
benchmark most reconciles follow a Job's completion.) A run's reuse document (``reuse.json``) is
written once, by its reuse Job, and never changes: once read it is kept for the run's life. A
budgeted run's ``sequential.json`` changes once per look: it is kept until the next look Job
succeeded, so it is read once per look. Pure: times are arguments; each run's
:class:`~kubejury_operator.memory.RunMemory` holds one, so it goes with the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubejury.records.progress import ProgressRecord
from kubejury.records.reuse import ReuseDocument
from kubejury.records.sequential import SequentialDocument
from kubejury_operator.observed import Observed, ProgressKey, current_attempts
from kubejury_operator.vocabulary import aggregation_job_name

PROGRESS_MAX_AGE_SECONDS = 5.0

RunKey = tuple[str, str]  # (namespace, name)
Reading = tuple[Mapping[ProgressKey, ProgressRecord], Mapping[str, Any] | None]  # progress, summary
ReuseReading = tuple[ReuseDocument | None, str | None]  # the document, or why it does not read


def aggregation_finished(run: RunKey, observed: Observed) -> bool:
    """Whether the run's aggregation Job has finished: what makes a reading stale at once."""
    job = current_attempts(observed.jobs).get(aggregation_job_name(run[1]))
    return bool(job and job.finished)


@dataclass
class _Entry:
    at: float
    aggregated: bool
    reading: Reading


@dataclass
class ProgressCache:
    """The last reading of each run's progress, when it was taken, and whether the aggregation had
    finished then."""

    max_age: float = PROGRESS_MAX_AGE_SECONDS
    _entries: dict[RunKey, _Entry] = field(default_factory=dict)
    _reuse: dict[RunKey, ReuseReading] = field(default_factory=dict)
    _sequential: dict[RunKey, SequentialDocument | None] = field(default_factory=dict)

    def fresh(self, run: RunKey, observed: Observed, now: float) -> Reading | None:
        """The last reading when it is younger than ``max_age`` and the aggregation did not finish
        since; else None."""
        entry = self._entries.get(run)
        if (
            entry is None
            or now - entry.at >= self.max_age
            or entry.aggregated != aggregation_finished(run, observed)
        ):
            return None
        return entry.reading

    def store(self, run: RunKey, observed: Observed, reading: Reading, now: float) -> None:
        self._entries[run] = _Entry(now, aggregation_finished(run, observed), reading)

    def reuse(self, run: RunKey) -> ReuseReading | None:
        """The run's reuse document as read once (or why it did not read); None before."""
        return self._reuse.get(run)

    def keep_reuse(self, run: RunKey, reading: ReuseReading) -> None:
        self._reuse[run] = reading

    def sequential(self, run: RunKey) -> tuple[bool, SequentialDocument | None]:
        """Whether the run's sequential document was read, and what was read (``None``: none yet)."""
        return (run in self._sequential, self._sequential.get(run))

    def keep_sequential(self, run: RunKey, document: SequentialDocument | None) -> None:
        self._sequential[run] = document

    def forget(self, run: RunKey) -> None:
        self._entries.pop(run, None)
        self._reuse.pop(run, None)
        self._sequential.pop(run, None)
