"""Each run's work queue (kubejury_operator.work_queue), on a clock the tests move by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from kubejury_operator.work_queue import (
    CHILD_EVENT_DELAY,
    CHILD_EVENT_MIN_GAP,
    ChildChanges,
    QueueTiming,
    RunQueue,
)


class FakeClock:
    """Seconds that pass only when a test (or a sleep) says so; every sleep is recorded."""

    def __init__(self, now: float = 0.0) -> None:
        self.at = now
        self.slept: list[float] = []

    def now(self) -> float:
        return self.at

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.at += seconds
        await asyncio.sleep(0)  # let the other tasks run, as a real sleep would


def queue_at(now: float, interval: float = 15.0) -> tuple[RunQueue, FakeClock]:
    clock = FakeClock(now)
    return RunQueue(QueueTiming(interval=interval), clock), clock


async def test_the_timer_reconciles_a_run_never_reconciled_and_then_only_after_half_an_interval() -> None:
    queue, clock = queue_at(10.0)
    ran: list[float] = []

    async def work() -> None:
        ran.append(clock.now())

    assert queue.timer_due()
    assert await queue.on_timer(work) and ran == [10.0]
    assert queue.last_ended == 10.0
    clock.at = 17.4
    assert not queue.timer_due()
    assert not await queue.on_timer(work) and ran == [10.0]  # a child's change just reconciled it
    clock.at = 17.5
    assert await queue.on_timer(work) and ran == [10.0, 17.5]


async def test_a_reconcile_that_raises_still_counts_as_ended() -> None:
    queue, clock = queue_at(5.0)

    async def failing() -> None:
        clock.at = 6.0
        raise RuntimeError("the API server went away")

    with pytest.raises(RuntimeError):
        await queue.on_timer(failing)
    assert queue.last_ended == 6.0 and not queue.timer_due()


def test_a_child_event_waits_the_delay_or_until_the_minimum_gap_after_the_last_reconcile() -> None:
    queue, clock = queue_at(50.0)
    assert queue.child_delay() == CHILD_EVENT_DELAY  # never reconciled
    queue.last_ended = 100.0
    clock.at = 100.0
    assert queue.child_delay() == pytest.approx(CHILD_EVENT_MIN_GAP)
    clock.at = 100.5
    assert queue.child_delay() == pytest.approx(CHILD_EVENT_MIN_GAP - 0.5)
    clock.at = 105.0
    assert queue.child_delay() == CHILD_EVENT_DELAY


async def test_a_child_event_reconciles_after_its_delay_and_records_the_end() -> None:
    queue, clock = queue_at(100.0)
    queue.last_ended = 99.8
    started: list[float] = []

    async def work() -> None:
        started.append(clock.now())

    assert await queue.on_child_event(lambda: work())
    assert clock.slept == [pytest.approx(CHILD_EVENT_MIN_GAP - 0.2)]
    assert started == [pytest.approx(100.8)] and queue.last_ended == pytest.approx(100.8)
    assert not queue.waiting


async def test_nothing_to_do_when_the_run_is_gone_records_no_end() -> None:
    queue, _clock = queue_at(100.0)
    assert await queue.on_child_event(lambda: None)
    assert queue.last_ended is None and not queue.waiting


async def test_events_behind_a_running_reconcile_queue_one_more_reconcile_not_one_each() -> None:
    """One reconcile running and at most one waiting: events arriving while one waits are read by
    it (it reads once it holds the lock) and queue nothing of their own."""
    queue, clock = queue_at(0.0)
    release = asyncio.Event()
    reads: list[int] = []
    changes = [0]

    async def slow() -> None:
        await release.wait()

    def start() -> Awaitable[None]:
        reads.append(changes[0])
        return slow()

    running = asyncio.create_task(queue.on_child_event(start))
    await asyncio.sleep(0.01)
    assert reads == [0] and not queue.waiting  # the first one runs and holds the lock
    followers = []
    for change in range(1, 6):  # five more changes while it runs
        changes[0] = change
        followers.append(asyncio.create_task(queue.on_child_event(start)))
        await asyncio.sleep(0)
    assert queue.waiting
    release.set()
    queued = await asyncio.gather(running, *followers)
    assert queued == [True, True, False, False, False, False]
    assert reads == [0, 5]  # the one that waited read the latest change
    assert not queue.waiting and clock.now() >= CHILD_EVENT_DELAY


async def test_an_event_after_the_waiting_reconcile_has_read_queues_anew() -> None:
    queue, _clock = queue_at(0.0)
    reads: list[str] = []
    inner: list[asyncio.Task[bool]] = []

    async def work() -> None:
        await asyncio.sleep(0)

    def start(label: str) -> Awaitable[None]:
        reads.append(label)
        if label == "first":  # a change arriving right after the first one has read
            inner.append(asyncio.create_task(queue.on_child_event(lambda: start("second"))))
        return work()

    assert await queue.on_child_event(lambda: start("first"))
    assert await inner[0] and reads == ["first", "second"]


async def test_a_cancelled_waiting_reconcile_gives_up_its_place() -> None:
    queue, _clock = queue_at(0.0)
    release = asyncio.Event()

    async def slow() -> None:
        await release.wait()

    running = asyncio.create_task(queue.on_child_event(lambda: slow()))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(queue.on_child_event(lambda: slow()))
    await asyncio.sleep(0)
    assert queue.waiting
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not queue.waiting
    release.set()
    await running


def test_only_a_change_the_planner_reads_of_a_child_queues_a_reconcile() -> None:
    changes = ChildChanges()
    job = {"kind": "Job", "metadata": {"name": "j", "namespace": "evals"}, "status": {"active": 1}}
    assert changes.changed("Job", job, deleted=False)  # first sight
    assert not changes.changed("Job", {**job, "status": {"active": 1, "ready": 1}}, deleted=False)
    done = {**job, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert changes.changed("Job", done, deleted=False)
    assert changes.changed("Job", done, deleted=True)
    assert len(changes) == 0
    assert changes.changed("Job", done, deleted=False)  # seen afresh after its deletion
