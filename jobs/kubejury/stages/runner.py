"""The machinery the generation and judging stages share: a worker pool, shard batching, resumption.

A stage is "for every item not yet stored, make one (or two) model requests and store one record".
This module does the parts that do not depend on what the item is:

- **Resumption.** Before starting, the records already in storage are read; an item whose record
  is final (no error, or a judge reply that could not be parsed even after re-asking) is skipped,
  so a crash at 90% costs 10%. Records with a request error are retried; readers keep the latest
  final record per key (:func:`latest_by_key`), so nothing is duplicated.
- **Shards.** Records are buffered and written as a new immutable Parquet shard
  (``part-<seq>-<uuid>.parquet``, encoded by :mod:`kubejury.files.shards`, uploaded whole and
  atomically by :mod:`kubejury.files.storage`) every ``flush_records`` records or
  ``flush_interval_s`` seconds, whichever comes first, in a worker thread so the event loop keeps
  sending requests. Within a shard records are in item order; a crash loses at most one batch.
  Runs made before issue 26 hold JSONL shards; they are read the same way and resume with Parquet.
- **Compaction.** Once a stage's work for its (model or judge, series) is complete, its shards are
  merged into one (:func:`compact_stage`): the merged shard is written first, after the others in
  sequence, then they are deleted, so readers see every record at every moment.
- **Workers, not tasks.** ``concurrency`` coroutines pull items from one shared iterator: no task
  or future per request, no semaphore wait when the pool is exactly the endpoint's bound.
- **An unreachable server stops the stage.** A request that fails because the server cannot be
  reached is not recorded (it is work not done, not a result); after ``abort_after_unreachable``
  such failures in a row the stage stops dispatching, flushes what it has and raises
  :class:`EndpointUnavailable`, so the Job fails visibly and its retry resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Self, TypeVar

from kubejury.errors import InputError, KubejuryError
from kubejury.files import shards
from kubejury.files.storage import Storage
from kubejury.records.progress import StageCounts
from kubejury.records.results import RecordFormatError
from kubejury.stages.progress import ProgressTracker

T = TypeVar("T")
R = TypeVar("R")


class StageRecord(Protocol):
    """What the machinery needs of a stored record (``kubejury.records.results`` types fit)."""

    @property
    def error(self) -> str | None: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def fingerprint(self) -> str | None: ...
    def to_json(self) -> dict[str, Any]: ...
    def with_fingerprint(self, digest: str) -> Self: ...


RecordT = TypeVar("RecordT", bound=StageRecord)


class EndpointUnavailable(KubejuryError):
    """The model server could not be reached; what was done is stored and a rerun resumes."""


class StageFailed(KubejuryError):
    """Too many of a stage's requests failed (``StageOptions.max_error_share``); what was stored is
    kept and a rerun retries the failed requests."""


@dataclass(frozen=True)
class StageOptions:
    """Batching, progress and resumption knobs of a stage (defaults suit both laptops and Jobs)."""

    flush_records: int = 500
    flush_interval_s: float = 5.0
    progress_interval_s: float = 2.0
    retry_errors: bool = True  # rerun items whose stored record carries a request error
    abort_after_unreachable: int = 8  # consecutive "server unreachable" failures before stopping
    # A stage whose share of failed requests (this attempt, judge replies without a score not
    # counted) is above this fails, naming the commonest error: 40 of 40 answered "401" is not done.
    max_error_share: float = 0.5
    # Merge the stage's shards into one once its work is complete (shards.compact): a 10 M-judgment
    # run is otherwise ~20,000 small shards, and readers pay per shard.
    compact: bool = True


@dataclass
class StageSummary:
    """What one stage run did (returned to the caller): its tracker's final counts — the ones its
    progress record stores — and what only the caller needs."""

    stage: str
    series: str
    name: str
    counts: StageCounts = field(default_factory=StageCounts)
    unreachable: int = 0
    skipped: int = 0  # items that cannot be processed (e.g. judging an answer that failed)
    error_reasons: dict[str, int] = field(default_factory=dict)  # request error → how often
    elapsed_s: float = 0.0
    shards: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.counts.total

    @property
    def resumed(self) -> int:
        return self.counts.resumed

    @property
    def written(self) -> int:
        return self.counts.written

    @property
    def errors(self) -> int:
        return self.counts.errors

    @property
    def parse_failures(self) -> int:
        return self.counts.parse_failures

    @property
    def complete(self) -> bool:
        return self.counts.done == self.counts.total


def is_final(record: StageRecord) -> bool:
    """A stored record that need not be redone: no error, or a judge reply that could not be parsed."""
    return record.error is None or record.error_kind == "parse"


def latest_by_key(records: Iterable[RecordT], key: Callable[[RecordT], Hashable]) -> dict[Hashable, RecordT]:
    """One record per key from records in storage order: the latest final one, else the latest."""
    out: dict[Hashable, RecordT] = {}
    for record in records:
        k = key(record)
        prev = out.get(k)
        if prev is None or is_final(record) or not is_final(prev):
            out[k] = record
    return out


class ShardWriter(Generic[RecordT]):
    """Buffers records and writes them as numbered shards, off the event loop.

    Shards are independent objects (their sequence number is fixed when the batch is cut), so up
    to ``MAX_PARALLEL_WRITES`` are written at once: a slow object store delays nothing but the
    final :meth:`close`, which waits for all of them.
    """

    def __init__(self, storage: Storage, prefix: str, first_seq: int, options: StageOptions) -> None:
        self.storage = storage
        self.prefix = prefix
        self.options = options
        self._seq = first_seq
        self._buffer: list[tuple[int, RecordT]] = []
        self._last_flush = time.monotonic()
        self._pending: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_PARALLEL_WRITES)
        self.keys: list[str] = []

    def add(self, index: int, record: RecordT) -> None:
        self._buffer.append((index, record))
        if len(self._buffer) >= self.options.flush_records:
            self.flush()

    def tick(self) -> None:
        """Flush if the buffer has waited ``flush_interval_s``."""
        if self._buffer and time.monotonic() - self._last_flush >= self.options.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        batch.sort(key=lambda pair: pair[0])
        records: list[Any] = [record for _, record in batch]  # encoded in the writing thread
        seq, self._seq = self._seq, self._seq + 1
        task = asyncio.get_running_loop().create_task(self._write(seq, records))
        self._pending.add(task)

    async def _write(self, seq: int, records: list[Any]) -> None:
        async with self._slots:
            key = await asyncio.to_thread(shards.write_records, self.storage, self.prefix, records, seq=seq)
        if key is not None:
            self.keys.append(key)

    async def close(self) -> None:
        """Write what is buffered and wait for every write; re-raises the first failed write."""
        self.flush()
        pending, self._pending = self._pending, set()
        results = await asyncio.gather(*pending, return_exceptions=True)
        self.keys.sort()
        for result in results:
            if isinstance(result, BaseException):
                raise result


def read_records(
    storage: Storage, prefix: str, parse: Callable[[Mapping[str, Any]], RecordT]
) -> Iterator[RecordT]:
    """Every record stored under ``prefix`` (shard order; Parquet shards and the JSONL shards of older
    runs alike), each read by ``parse``; a record that is no such record raises :class:`InputError`
    naming the shard, the record's place in it and the field."""
    for source, number, row in shards.rows(storage, prefix):
        try:
            yield parse(row)
        except RecordFormatError as exc:
            raise InputError(source, str(exc), location=f"record {number}") from None


async def read_existing(
    storage: Storage, prefix: str, parse: Callable[[Mapping[str, Any]], RecordT]
) -> tuple[list[RecordT], int]:
    """Every stored record under ``prefix`` (shard order, each read by ``parse``) and the next
    shard sequence number."""

    def read() -> tuple[list[RecordT], int]:
        return list(read_records(storage, prefix, parse)), storage.next_shard_seq(prefix)

    return await asyncio.to_thread(read)


async def compact_stage(storage: Storage, prefix: str, options: StageOptions) -> shards.Compaction | None:
    """Merge a completed stage's shards under ``prefix`` into one (:func:`kubejury.files.shards.compact`:
    written before the merged shards are deleted, so no reader misses a record), unless
    ``options.compact`` is off."""
    if not options.compact:
        return None
    return await asyncio.to_thread(shards.compact, storage, prefix)


MAX_PARALLEL_WRITES = 4  # shard writes in flight at once (threads)
RAMP_STEP = 4  # workers started per event-loop iteration when a stage starts


class Unreachable(enum.Enum):
    """The type of :data:`UNREACHABLE`."""

    UNREACHABLE = "unreachable"


UNREACHABLE = Unreachable.UNREACHABLE
"""Returned by a stage's handler when the server could not be reached (nothing is recorded)."""


async def pump(
    items: Sequence[tuple[int, T]],
    handle: Callable[[T], Awaitable[RecordT | Unreachable]],
    *,
    concurrency: int,
    writer: ShardWriter[RecordT],
    tracker: ProgressTracker,
    summary: StageSummary,
    options: StageOptions,
    write_progress: Callable[[], Awaitable[None]],
) -> None:
    """Run ``handle`` over ``items`` (``(index, item)`` pairs) with ``concurrency`` workers."""
    iterator = iter(items)
    state = {"consecutive_unreachable": 0, "stop": False}
    advance = tracker.advance
    add = writer.add

    async def worker() -> None:
        for index, item in iterator:
            if state["stop"]:
                return
            record = await handle(item)
            if record is UNREACHABLE:
                summary.unreachable += 1
                state["consecutive_unreachable"] += 1
                if state["consecutive_unreachable"] >= options.abort_after_unreachable:
                    state["stop"] = True
                continue
            state["consecutive_unreachable"] = 0
            add(index, record)
            error = record.error is not None
            parse_failure = error and record.error_kind == "parse"
            if error and not parse_failure:
                reason = str(record.error)
                summary.error_reasons[reason] = summary.error_reasons.get(reason, 0) + 1
            advance(error=error, parse_failure=parse_failure)

    async def ticker() -> None:
        interval = min(options.flush_interval_s, options.progress_interval_s, 0.5)
        last_progress = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            writer.tick()
            tracker.show()
            if time.monotonic() - last_progress >= options.progress_interval_s:
                last_progress = time.monotonic()
                await write_progress()

    loop = asyncio.get_running_loop()
    tick_task = loop.create_task(ticker())
    workers: list[asyncio.Task[None]] = []
    try:
        # Start workers a few at a time, yielding to the loop in between, so the first ones connect
        # and send while the rest are still starting: the server starts working at once instead of
        # after hundreds of connection set-ups (this also makes the first request go out sooner).
        for i in range(max(1, min(concurrency, len(items)))):
            workers.append(loop.create_task(worker()))
            if i % RAMP_STEP == RAMP_STEP - 1:
                await asyncio.sleep(0)
        await asyncio.gather(*workers)
    except BaseException:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        tick_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tick_task
        await writer.close()


class Terminated(KubejuryError):
    """The process got SIGTERM (a Pod being stopped); stored work was flushed before stopping."""

    exit_code = 143  # 128 + SIGTERM, what Kubernetes expects of a process it terminated


async def _cancel_on_sigterm(coro: Coroutine[Any, Any, R], terminated: list[bool]) -> R:
    """Await ``coro``; SIGTERM cancels it, so every stage's ``finally`` writes its buffered records."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def on_sigterm() -> None:
        terminated.append(True)
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        return await coro
    try:
        return await coro
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def run_async(coro: Coroutine[Any, Any, R]) -> R:
    """Run a stage coroutine on uvloop when it is installed (measurably less CPU per request).

    SIGTERM — what Kubernetes sends a Pod it stops — cancels the stage instead of killing the
    process, so buffered records are written before exit; :class:`Terminated` then says so.
    """
    terminated: list[bool] = []
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but stay usable without it
        loop_factory = None
    else:
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        try:
            return runner.run(_cancel_on_sigterm(coro, terminated))
        except asyncio.CancelledError:
            if terminated:
                raise Terminated(
                    "stopped by SIGTERM; answers and judgments finished so far are stored"
                ) from None
            raise
