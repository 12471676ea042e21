"""One stage's life from start to verdict, the same for generation and judging.

Generation and judging differ only in their items (questions; anonymized answers) and in what one
request looks like. Everything around that is here, once:

1. **Resume.** Read the stage's stored records; an item whose latest record is final is done.
2. **Report.** A :class:`~kubejury.stages.progress.ProgressTracker` counts what is done; its record
   is written at the start (while the first requests are already out), every few seconds, and at
   the end, so the operator can follow the stage.
3. **Work.** :func:`~kubejury.stages.runner.pump` runs the stage's handler over the pending items
   and writes shards.
4. **Verdict.** Every item stored and at most ``max_error_share`` of this attempt's requests
   failed: ``succeeded``. More failed: ``failed`` naming the commonest error and the endpoint, and
   :class:`~kubejury.stages.runner.StageFailed`. The server could not be reached: ``failed``, and
   :class:`~kubejury.stages.runner.EndpointUnavailable` (what was done is kept; a rerun resumes).
   Anything else raised (including cancellation by SIGTERM): ``failed`` with the error, re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubejury.errors import SpecChanged
from kubejury.files.storage import Storage
from kubejury.inference.client import ChatClient
from kubejury.records.fingerprint import StageFingerprint
from kubejury.stages.progress import ProgressTracker, ProgressView
from kubejury.stages.runner import (
    UNREACHABLE,
    EndpointUnavailable,
    RecordT,
    ShardWriter,
    StageFailed,
    StageOptions,
    StageRecord,
    StageSummary,
    Unreachable,
    is_final,
    latest_by_key,
    pump,
    read_existing,
)

T = TypeVar("T")

Handler = Callable[[T], Awaitable[RecordT | Unreachable]]
"""Turns one item into the record to store, or ``runner.UNREACHABLE`` when the server is gone."""


@dataclass(frozen=True)
class StageTarget(Generic[RecordT]):
    """The records one stage run owns and the words it reports with."""

    stage: str  # "generate" or "judge": the progress record's stage
    activity: str  # "generation" or "judging": how errors name the stage
    series: str
    name: str  # the model (generation) or the judge (judging)
    prefix: str  # where the stage's shards go
    progress_key: str  # where its progress record goes
    read: Callable[[Mapping[str, Any]], RecordT]  # a stored line as the stage's record type
    record_key: Callable[[RecordT], Hashable]  # one stored record per key counts (the latest final one)
    not_done: str  # "questions not answered"
    kept: str  # "answers"
    fingerprint: StageFingerprint | None = None  # what determines the records (stored with each)
    fingerprint_key: str = ""  # where the fingerprint document goes


async def run_stage(
    target: StageTarget[RecordT],
    items: Sequence[T],
    item_key: Callable[[T], Hashable],
    handler: Callable[[ProgressTracker], Handler[T, RecordT]],
    *,
    storage: Storage,
    client: ChatClient,
    options: StageOptions,
    view: ProgressView | None = None,
    skipped: int = 0,
    started: float | None = None,
) -> StageSummary:
    """Run one stage over ``items``: resume, report progress, work, and end with a verdict.

    ``handler(tracker)`` gives the coroutine that handles one item (it may count retries on the
    tracker). ``skipped`` items cannot be processed at all and are only counted. ``started`` (a
    ``time.monotonic()``) is when the stage began, if it did work before calling this.
    """
    started = time.monotonic() if started is None else started
    existing, next_seq = await read_existing(storage, target.prefix, target.read)
    if target.fingerprint is not None:
        await asyncio.to_thread(check_fingerprint, storage, target, existing)
        handler = _tagging(handler, target.fingerprint.digest)
    stored = latest_by_key(existing, target.record_key)
    done = {key for key, record in stored.items() if is_final(record) or not options.retry_errors}
    pending = [(i, item) for i, item in enumerate(items) if item_key(item) not in done]
    resumed = len(items) - len(pending)

    summary = StageSummary(target.stage, target.series, target.name, skipped=skipped)
    tracker = ProgressTracker(
        target.stage,
        target.series,
        target.name,
        total=len(items),
        resumed=resumed,
        parse_failures=sum(1 for key in done if stored[key].error_kind == "parse"),
        view=view,
    )
    tracker.fingerprint = target.fingerprint.digest if target.fingerprint is not None else ""

    async def write_progress() -> None:
        await asyncio.to_thread(storage.write_json, target.progress_key, tracker.record())

    writer: ShardWriter[RecordT] = ShardWriter(storage, target.prefix, next_seq, options)
    initial_progress = asyncio.get_running_loop().create_task(write_progress())
    try:
        await pump(
            pending,
            handler(tracker),
            concurrency=client.settings.max_in_flight,
            writer=writer,
            tracker=tracker,
            summary=summary,
            options=options,
            write_progress=write_progress,
        )
    except BaseException as exc:
        tracker.finish("failed", f"{type(exc).__name__}: {exc}")
        await asyncio.shield(after(initial_progress, write_progress))
        raise
    await initial_progress
    summary.counts = tracker.counts
    summary.shards = writer.keys
    summary.elapsed_s = time.monotonic() - started
    if summary.unreachable or not summary.complete:
        missing = summary.total - summary.resumed - summary.written
        message = (
            f"{missing} of {summary.total} {target.not_done}: {client.public_url} could not be reached; "
            f"the {target.kept} stored are kept and a rerun resumes"
        )
        tracker.finish("failed", message)
        await write_progress()
        raise EndpointUnavailable(f"{target.activity} {target.name}/{target.series}: {message}")
    failure = too_many_errors(summary, options.max_error_share, client.public_url, target.kept)
    if failure is not None:
        tracker.finish("failed", failure)
        await write_progress()
        raise StageFailed(f"{target.activity} {target.name}/{target.series}: {failure}")
    tracker.finish("succeeded")
    tracker.show()
    await write_progress()
    return summary


def check_fingerprint(
    storage: Storage, target: StageTarget[RecordT], existing: Sequence[StageRecord]
) -> None:
    """Raise :class:`SpecChanged` when the stage's stored records were made under another spec;
    store the fingerprint document when there is none yet."""
    current = target.fingerprint
    assert current is not None
    stored = storage.read_json_or_none(target.fingerprint_key)
    changes: list[str] = []
    if stored is not None:
        before = StageFingerprint.from_json(stored)
        if not current.accepts(before.digest):
            changes = current.changes_from(before) or ["(fingerprint differs)"]
    elif any(not current.accepts(record.fingerprint) for record in existing):
        changes = ["records stored without this stage's fingerprint (an older kubejury or another spec)"]
    if changes:
        raise SpecChanged(
            f"{target.activity} {target.name}/{target.series}: the spec changed since its {target.kept} "
            f"were stored ({'; '.join(changes)}). Stored records are never mixed with new ones: rerun with "
            "--new-version to write a new version of the run beside this one, or give the EvalRun a new "
            "metadata.name"
        )
    if stored is None:
        storage.write_json(target.fingerprint_key, current.to_json())


def _tagging(
    handler: Callable[[ProgressTracker], Handler[T, RecordT]], digest: str
) -> Callable[[ProgressTracker], Handler[T, RecordT]]:
    """The handler, with every record it returns carrying the stage's fingerprint digest."""

    def make(tracker: ProgressTracker) -> Handler[T, RecordT]:
        inner = handler(tracker)

        async def handle(item: T) -> RecordT | Unreachable:
            record = await inner(item)
            if record is UNREACHABLE:
                return record
            return record.with_fingerprint(digest)

        return handle

    return make


def too_many_errors(summary: StageSummary, max_share: float, url: str, kept: str) -> str | None:
    """Why the stage failed when more than ``max_share`` of this attempt's requests failed, else None."""
    failed = sum(summary.error_reasons.values())
    if not summary.written or failed / summary.written <= max_share:
        return None
    reason, count = max(summary.error_reasons.items(), key=lambda pair: pair[1])
    return (
        f"{failed} of {summary.written} requests failed (more than {max_share:.0%} allowed: "
        f"spec.concurrency.maxErrorShare); most often ({count}×) {reason[:200]} from {url}; "
        f"the {kept} stored are kept and a rerun retries the failed requests"
    )


async def after(first: asyncio.Task[None], then: Callable[[], Awaitable[None]]) -> None:
    """Run ``then`` once ``first`` is over (whatever its outcome): progress writes stay in order."""
    with contextlib.suppress(BaseException):
        await first
    await then()
