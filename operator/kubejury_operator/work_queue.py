"""Each run's work queue: when a reconcile of a run starts, and that only one runs at a time.

Why this module exists: kopf calls the operator on a timer per run and on every event of a run's
Jobs and Deployments; left alone, each call would reconcile, several at once for one run and one
per event of a burst. This is what controller-runtime's work queue does for a Go controller, for
one run (:class:`RunQueue`): one reconcile running and at most one waiting, the waiting one
started :data:`CHILD_EVENT_DELAY` after its event and at least :data:`CHILD_EVENT_MIN_GAP` after
the previous reconcile ended, and the timer's reconcile skipped when another ended less than half
an interval ago. :class:`ChildChanges` decides which child events are worth queueing at all.
Time comes from a :class:`Clock`, so tests drive it without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubejury_operator import watched

# seconds: the events of one change (and our own last status write) settle into one reconcile;
# short, because a server Ready but not yet used, or a Job done but its server not yet scaled down,
# is GPU time held idle (docs/operator.md, "GPU accounting")
CHILD_EVENT_DELAY = 0.25
# A run's child-event reconciles start at least this long after its previous reconcile ended: a
# burst of Job completions makes one reconcile and one status write, not one each (the scale
# benchmark, docs/benchmarks.md). Longer would make the status and the GPU policy late.
CHILD_EVENT_MIN_GAP = 1.0
DEFAULT_RECONCILE_INTERVAL = 15.0  # seconds; KUBEJURY_RECONCILE_INTERVAL overrides it


class Clock(Protocol):
    """Monotonic seconds and a way to wait for them."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The process's monotonic clock and asyncio's sleep."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True)
class QueueTiming:
    """The cadence every run's queue keeps (seconds)."""

    interval: float = DEFAULT_RECONCILE_INTERVAL  # between a run's timer reconciles
    child_event_delay: float = CHILD_EVENT_DELAY
    child_event_min_gap: float = CHILD_EVENT_MIN_GAP


Work = Callable[[], Awaitable[object]]
# Called once the queue's turn has come, without an await before it: the work to do, or None
StartWork = Callable[[], Awaitable[object] | None]


class RunQueue:
    """One run's queue: a lock, whether a child-event reconcile waits, when the last one ended."""

    def __init__(self, timing: QueueTiming | None = None, clock: Clock | None = None) -> None:
        self.timing = timing or QueueTiming()
        self.clock: Clock = clock or MonotonicClock()
        self.last_ended: float | None = None
        self._lock = asyncio.Lock()
        self._waiting = False

    @property
    def waiting(self) -> bool:
        """Whether a child-event reconcile has its place in the queue and has not started."""
        return self._waiting

    def timer_due(self) -> bool:
        """Whether the timer's reconcile is worth doing: not when another reconcile ended less than
        half an interval ago. The timer is there for what no watch reports (progress records in
        storage, a server's bring-up started early from their rate); a busy run is reconciled on
        its children's changes anyway, and at a hundred runs the timer's reconciles were most of
        the operator's reconciles. Time-based steps are then at most one and a half intervals late."""
        return self.last_ended is None or self.clock.now() - self.last_ended >= self.timing.interval / 2

    def child_delay(self) -> float:
        """Seconds until a child's change may reconcile the run (see :data:`CHILD_EVENT_MIN_GAP`)."""
        ended = float("-inf") if self.last_ended is None else self.last_ended
        return max(self.timing.child_event_delay, ended + self.timing.child_event_min_gap - self.clock.now())

    async def on_timer(self, work: Work) -> bool:
        """Run ``work`` under the run's lock when the timer is due; whether it ran."""
        if not self.timer_due():
            return False
        async with self._lock:
            await self._held(work)
        return True

    async def on_child_event(self, start: StartWork) -> bool:
        """Queue a reconcile for a child's change; whether this call queued one.

        One reconcile running and at most one waiting: the waiting one keeps its place until it
        has the lock, has slept :meth:`child_delay`, and ``start`` has read what it will act on —
        so every change arriving meanwhile is in what it reads and queues nothing of its own (left
        out, each event behind a running reconcile queued one more). ``start`` is called with no
        await between leaving the queue and reading; it returns ``None`` when there is nothing to
        do (the run is gone), and then no end is recorded."""
        if self._waiting:
            return False
        self._waiting = True
        queued = True  # this call holds the run's place until ``start`` has read
        try:
            async with self._lock:
                await self.clock.sleep(self.child_delay())
                self._waiting = queued = False  # a change after this queues anew
                work = start()
                if work is not None:
                    await self._held(lambda: work)
        finally:
            if queued:  # cancelled while waiting; never the place of the next one queued
                self._waiting = False
        return True

    async def _held(self, work: Work) -> None:
        try:
            await work()
        finally:
            self.last_ended = self.clock.now()


_UNSEEN = object()


@dataclass
class ChildChanges:
    """What the planner last read of each Job and Deployment, by (kind, namespace, name): an event
    that changes nothing of it — a Job's active or ready count, a Deployment's updated replicas —
    queues no reconcile. A child's entry goes with its DELETED event."""

    _states: dict[tuple[str, str, str], Hashable] = field(default_factory=dict, repr=False)

    def changed(self, kind: str, body: Mapping[str, Any], deleted: bool) -> bool:
        """Whether this event of a Job or Deployment changes what the planner reads of it."""
        meta = body.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if deleted:
            self._states.pop(key, None)
            return True
        state = watched.trigger_state(kind, body)
        if self._states.get(key, _UNSEEN) == state:
            return False
        self._states[key] = state
        return True

    def __len__(self) -> int:
        return len(self._states)
