"""How far a stage has got, for the operator (a small JSON record in storage) and for a person (rich bars).

Each stage (one model's generation of one series, one judge's judging of one series) keeps a
:class:`ProgressTracker`. Counting is a few integer additions per request; the record is written
to storage only periodically by the stage's flusher (never per request), under
``RunLayout.progress_key(series, stage, name)``. The operator reads these records to fill the
EvalRun status; locally, a :class:`RichProgressView` draws one bar per stage.

The record itself — its fields and its JSON form — is :class:`kubejury.records.progress.ProgressRecord`,
the one definition the operator reads back; :meth:`ProgressTracker.snapshot` makes one.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from kubejury.records.progress import ProgressRecord, ProgressState, StageCounts
from kubejury.records.timestamps import now_time


class ProgressView(Protocol):
    """Something that shows progress to a person (rich bars locally; nothing in a Job)."""

    def update(self, record: dict[str, Any]) -> None: ...


class ProgressTracker:
    """The counters of one stage run (:class:`~kubejury.records.progress.StageCounts`) as they
    grow, and its state; snapshot with :meth:`record`.

    ``resumed`` records were found stored at start, ``parse_failures`` of them judge replies
    without a valid score. Slotted: setting a counter that is not one fails instead of being lost.
    """

    __slots__ = (
        "_t0",
        "counts",
        "fingerprint",
        "message",
        "name",
        "series",
        "stage",
        "started_at",
        "state",
        "view",
    )

    def __init__(
        self,
        stage: str,
        series: str,
        name: str,
        total: int,
        resumed: int = 0,
        *,
        parse_failures: int = 0,
        view: ProgressView | None = None,
    ) -> None:
        self.stage, self.series, self.name = stage, series, name
        self.counts = StageCounts(total=total, done=resumed, resumed=resumed, parse_failures=parse_failures)
        self.state: ProgressState = "running"
        self.message = ""
        self.started_at = now_time()
        self.fingerprint = ""  # the stage's fingerprint digest, when it has one
        self.view = view
        self._t0 = time.monotonic()

    def advance(self, *, error: bool = False, parse_failure: bool = False) -> None:
        """One more record stored (an error, a judge reply without a score)."""
        self.counts = self.counts.advanced(error=error, parse_failure=parse_failure)

    def retried(self, count: int) -> None:
        """``count`` more HTTP retries."""
        self.counts = self.counts.retried(count)

    @property
    def rate_per_s(self) -> float:
        """Records stored per second by this attempt."""
        elapsed = time.monotonic() - self._t0
        return self.counts.written / elapsed if elapsed > 0 else 0.0

    def finish(self, state: ProgressState, message: str = "") -> None:
        self.state = state
        self.message = message

    def snapshot(self) -> ProgressRecord:
        """The progress record as of now (what the operator reads back)."""
        return ProgressRecord(
            **self.counts.counters(),
            stage=self.stage,
            series=self.series,
            name=self.name,
            rate_per_s=round(self.rate_per_s, 3),
            state=self.state,
            message=self.message,
            started_at=self.started_at,
            updated_at=now_time(),
            fingerprint=self.fingerprint,
        )

    def record(self) -> dict[str, Any]:
        """The stored (JSON) form of :meth:`snapshot`."""
        return self.snapshot().to_json()

    def show(self) -> None:
        if self.view is not None:
            self.view.update(self.record())


class RichProgressView:
    """One ``rich`` progress bar per (stage, series, name); use as a context manager locally."""

    def __init__(self, *, transient: bool = False, console: Any = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            transient=transient,
            console=console,
        )
        self._tasks: dict[tuple[str, str, str], Any] = {}

    def __enter__(self) -> RichProgressView:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, record: dict[str, Any]) -> None:
        key = (str(record["stage"]), str(record["series"]), str(record["name"]))
        extra = f"{record['rate_per_s']:.1f}/s"
        if record.get("errors"):
            extra += f" · {record['errors']} errors"
        if record.get("parse_failures"):
            extra += f" · {record['parse_failures']} unparsed"
        if record.get("state") not in (None, "running"):
            extra += f" · {record['state']}"
        task = self._tasks.get(key)
        if task is None:
            description = f"{key[0]:<8} {key[1]} · {key[2]}"
            task = self._progress.add_task(description, total=record["total"], extra=extra)
            self._tasks[key] = task
        self._progress.update(task, completed=record["done"], total=record["total"], extra=extra)
