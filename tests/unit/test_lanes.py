"""The order of the operator's waiting API requests (kubejury_operator.lanes): never more than the
limit in flight, a status patch or a scale ahead of queued creates, arrival order within a lane, and a request given up while waiting holds no place."""

from __future__ import annotations

import asyncio

import pytest

from kubejury_operator.lanes import Lane, Lanes


async def hold(lanes: Lanes, lane: Lane, name: str, started: list[str], release: asyncio.Event) -> None:
    async with lanes.slot(lane):
        started.append(name)
        await release.wait()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_status_patch_goes_ahead_of_creates_and_events_queued_before_it() -> None:
    lanes = Lanes(limit=1)
    started: list[str] = []
    gates = {name: asyncio.Event() for name in ("first", "event", "create-a", "create-b", "status")}
    tasks = [asyncio.create_task(hold(lanes, Lane.WORK, "first", started, gates["first"]))]
    await settle()
    for name, lane in (
        ("event", Lane.WORK),
        ("create-a", Lane.WORK),
        ("create-b", Lane.WORK),
        ("status", Lane.DECISION),
    ):
        tasks.append(asyncio.create_task(hold(lanes, lane, name, started, gates[name])))
        await settle()
    assert started == ["first"] and lanes.waiting == 4
    for name in ("first", "status", "event", "create-a", "create-b"):
        gates[name].set()
        await settle()
    await asyncio.gather(*tasks)
    assert started == ["first", "status", "event", "create-a", "create-b"]
    assert lanes.in_flight == 0 and lanes.waiting == 0


async def test_no_more_than_the_limit_are_ever_in_flight() -> None:
    lanes = Lanes(limit=3)
    most = 0

    async def request(lane: Lane) -> None:
        nonlocal most
        async with lanes.slot(lane):
            most = max(most, lanes.in_flight)
            await asyncio.sleep(0.001)

    await asyncio.gather(*(request(Lane(k % 2)) for k in range(40)))
    assert most == 3 and lanes.in_flight == 0


async def test_a_request_cancelled_while_waiting_takes_no_place() -> None:
    lanes = Lanes(limit=1)
    started: list[str] = []
    first, gone, after = asyncio.Event(), asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(lanes, Lane.WORK, "first", started, first))
    await settle()
    cancelled = asyncio.create_task(hold(lanes, Lane.DECISION, "gone", started, gone))
    waiting = asyncio.create_task(hold(lanes, Lane.WORK, "after", started, after))
    await settle()
    cancelled.cancel()
    await settle()
    first.set()
    after.set()
    await asyncio.gather(holder, waiting)
    assert started == ["first", "after"] and lanes.in_flight == 0
    with pytest.raises(asyncio.CancelledError):
        await cancelled


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Lanes(limit=0)
