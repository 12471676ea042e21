"""Which of the operator's waiting API requests goes next: status writes before bulk work.

Why this module exists: the gateway keeps at most a fixed number of requests in flight to the API
server (:data:`kubejury_operator.gateway.MAX_CONNECTIONS`; more only moved the queue into the API
server). With one first-come queue, a run's status patch — what a user and the scale benchmark's
status delay wait on — queued behind other runs' bursts of creates: at a hundred runs a judging
round or a wave of servers is hundreds of Jobs, Deployments and Services at once. Here the waiting
requests are served by lane: a status patch or a scale (a server released) first, then the rest in
arrival order. Nothing is dropped or reordered within a lane, and the bound on requests in flight
stays what it was. Events wait with the work, not behind it: a lane that can starve would hold its
reconcile open — and a run's next reconcile, with its status, waits for the one running. The API server's own priority and fairness still applies
across its clients; this orders one client's own requests.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import IntEnum


class Lane(IntEnum):
    """A request's place in line; lower goes first."""

    DECISION = 0  # a status patch, a scale: small writes a reader or a GPU waits on
    WORK = 1  # creates, reads, deletes, Events: in arrival order


class Lanes:
    """At most ``limit`` holders at once; waiting ones enter by lane, then arrival."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a limit of requests in flight must be at least 1, not {limit}")
        self.limit = limit
        self.in_flight = 0
        self._order = itertools.count()
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        """Requests queued and not given up."""
        return sum(1 for *_, future in self._waiting if not future.done())

    @asynccontextmanager
    async def slot(self, lane: Lane) -> AsyncIterator[None]:
        """Hold one of the ``limit`` places for the body of the ``async with``."""
        await self._acquire(lane)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, lane: Lane) -> None:
        if self.in_flight < self.limit and not self.waiting:
            self.in_flight += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (int(lane), next(self._order), future))
        try:
            await future  # resolved by _release, which counted this holder in
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # given the place just as it was cancelled: pass it on
            raise

    def _release(self) -> None:
        self.in_flight -= 1
        while self._waiting:
            *_, future = heapq.heappop(self._waiting)
            if not future.done():
                self.in_flight += 1
                future.set_result(None)
                return
