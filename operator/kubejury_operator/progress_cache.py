"""How often a run's progress records are read from storage.

Why this module exists: a run's progress records (one per model, series and stage) and, at the
end, its report are read from storage on every reconcile, and a busy run is reconciled on every
change of one of its Jobs. At a hundred runs, decoding those records was the second-largest share
of the operator's CPU in the scale benchmark's profile. The records feed counters and the rate
that decides when the next server starts its bring-up; a few seconds' delay changes neither in a
way anyone sees. So a reading is reused for :data:`PROGRESS_MAX_AGE_SECONDS` — unless a Job of the
run has finished since (its final counters, a model's generation just completed, the report just
written): then it is read at once. Pure: times are arguments; the handlers hold one cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubejury.records.progress import ProgressRecord
from kubejury_operator.observed import Observed, ProgressKey

PROGRESS_MAX_AGE_SECONDS = 5.0

RunKey = tuple[str, str]  # (namespace, name)
Reading = tuple[Mapping[ProgressKey, ProgressRecord], Mapping[str, Any] | None]  # progress, summary


def finished_jobs(observed: Observed) -> frozenset[str]:
    """The run's Jobs that have finished (succeeded or failed), by name: what invalidates a reading."""
    return frozenset(name for name, job in observed.jobs.items() if job.finished)


@dataclass
class _Entry:
    at: float
    finished: frozenset[str]
    reading: Reading


@dataclass
class ProgressCache:
    """The last reading of each run's progress, and when and after which finished Jobs it was taken."""

    max_age: float = PROGRESS_MAX_AGE_SECONDS
    _entries: dict[RunKey, _Entry] = field(default_factory=dict)

    def fresh(self, run: RunKey, observed: Observed, now: float) -> Reading | None:
        """The last reading when it is younger than ``max_age`` and no Job finished since; else None."""
        entry = self._entries.get(run)
        if entry is None or now - entry.at >= self.max_age or entry.finished != finished_jobs(observed):
            return None
        return entry.reading

    def store(self, run: RunKey, observed: Observed, reading: Reading, now: float) -> None:
        self._entries[run] = _Entry(now, finished_jobs(observed), reading)

    def forget(self, run: RunKey) -> None:
        self._entries.pop(run, None)
