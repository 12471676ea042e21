"""Generation stage: one model answers every question of the benchmark under one series' settings.

Produces ``<run>/<series>/answers/<model>/part-*.parquet`` records, each one
:class:`~kubejury.records.results.AnswerRecord` (its fields and JSON form are defined there)::

    {"question_id", "model", "series", "answer", "finish_reason",
     "usage": {"prompt_tokens", "completion_tokens"}, "latency_s", "attempts", "error", "error_kind",
     "server_version", "fingerprint", "format"}

Every string of a record is stored without the run's known secrets (:func:`known_secrets`): a
server may echo the API key in a *successful* answer, and answers go on to the judges. Only the
exact values are masked (:func:`~kubejury.redact.redact_known`), so an answer that merely talks
about credentials is judged as written.

Requests go out in benchmark order; each shard holds its records in benchmark order, and readers
(:func:`read_answers`) return one record per question. Rerunning skips questions already answered.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from kubejury.files.storage import RunLayout, Storage
from kubejury.inference.client import ChatClient
from kubejury.inference.sampling import SamplingParams, request_fields
from kubejury.records.fingerprint import StageFingerprint
from kubejury.records.results import AnswerRecord, TokenUsage, question_sha256
from kubejury.redact import redact_known
from kubejury.stages.lifecycle import Handler, StageTarget, run_stage
from kubejury.stages.progress import ProgressTracker, ProgressView
from kubejury.stages.runner import (
    UNREACHABLE,
    StageOptions,
    StageSummary,
    Unreachable,
    compact_stage,
    latest_by_key,
    read_records,
)

STAGE = "generate"
#: The variable through which a Job receives its endpoint's API key (see ``kubejury.pipeline``).
API_KEY_ENV = "KUBEJURY_API_KEY"


class QuestionLike(Protocol):
    """What a stage needs of a benchmark question (``kubejury.files.benchmark.Question`` fits)."""

    @property
    def id(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def reference(self) -> str: ...


class ModelLike(Protocol):
    """What generation needs of a ``spec.models[]`` entry (``kubejury.config.spec.ModelSpec`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def request_model(self) -> str: ...


class SeriesLike(Protocol):
    """A ``spec.series[]`` entry (``kubejury.config.spec.Series`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def system_prompt(self) -> str | None: ...


def known_secrets(extra: Iterable[str | None] = ()) -> tuple[str, ...]:
    """The secrets this stage holds: the API key it was given (``$KUBEJURY_API_KEY``) and ``extra``."""
    return tuple(value for value in (os.environ.get(API_KEY_ENV), *extra) if value)


def answer_record(
    question_id: str, model: str, series: str, result: Any, secrets: Iterable[str | None] = ()
) -> AnswerRecord:  # result: kubejury.inference.client.ChatResult
    """The stored record of one answer, every string of it without ``secrets``."""
    answer = result.content if result.error is None else None
    if result.error is None and answer is None:
        answer = ""  # a reply with no text (e.g. only reasoning) is an empty answer, not a failure
    record = _record(question_id, model, series, result, answer)
    known = tuple(value for value in secrets if value)
    return _without(known, record) if known else record


def _without(secrets: tuple[str, ...], record: AnswerRecord) -> AnswerRecord:
    """``record`` with every string field (the usage counts are numbers) free of ``secrets``."""
    masked: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, str):
            masked[f.name] = redact_known(value, secrets)
    return dataclasses.replace(record, **masked)


def _record(question_id: str, model: str, series: str, result: Any, answer: str | None) -> AnswerRecord:
    return AnswerRecord(
        question_id=question_id,
        model=model,
        series=series,
        answer=answer,
        finish_reason=result.finish_reason,
        usage=TokenUsage(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens),
        latency_s=round(result.latency_s, 4),
        attempts=result.attempts,
        error=result.error,
        error_kind=result.error_kind,
        server_version=result.server_version,
    )


async def run_generation(
    *,
    storage: Storage,
    layout: RunLayout,
    model: ModelLike,
    series: SeriesLike,
    questions: Sequence[QuestionLike],
    client: ChatClient,
    options: StageOptions | None = None,
    view: ProgressView | None = None,
    shard: tuple[int, int] | None = None,
    fingerprint: StageFingerprint | None = None,
    secrets_extra: Iterable[str | None] = (),
) -> StageSummary:
    """Ask ``model`` every question not yet answered in ``series``; store answers in shards.

    ``shard=(index, count)`` only names this completion's own progress record (``questions`` are
    already that shard's); the answers of all shards go to the same folder. Records are stored
    without :func:`known_secrets` (``secrets_extra``: further values the caller holds).

    Raises :class:`EndpointUnavailable` (after storing everything done) when the server stops
    answering; rerunning resumes.
    """
    sampling = request_fields(model.runtime, SamplingParams.from_series(series), model=model.name)
    served = model.request_model
    preamble: list[dict[str, str]] = []
    if series.system_prompt:
        preamble.append({"role": "system", "content": series.system_prompt})
    model_name, series_name = model.name, series.name
    chat = client.chat
    secrets = known_secrets(secrets_extra)

    def handler(tracker: ProgressTracker) -> Handler[QuestionLike, AnswerRecord]:
        async def handle(question: QuestionLike) -> AnswerRecord | Unreachable:
            body = {"model": served, "messages": [*preamble, {"role": "user", "content": question.question}]}
            body.update(sampling)
            result = await chat(body)
            tracker.retried(result.attempts - 1)
            if result.error_kind == "connection":
                return UNREACHABLE
            record = answer_record(question.id, model_name, series_name, result, secrets)
            return dataclasses.replace(record, question_sha256=question_sha256(question.question))

        return handle

    target = StageTarget(
        stage=STAGE,
        activity="generation",
        series=series.name,
        name=model.name,
        prefix=layout.answers_prefix(series.name, model.name),
        progress_key=layout.progress_key(series.name, STAGE, model.name, shard),
        read=AnswerRecord.from_json,
        record_key=_key,
        not_done="questions not answered",
        kept="answers",
        fingerprint=fingerprint,
        fingerprint_key=layout.fingerprint_key(series.name, STAGE, model.name),
    )
    options = options or StageOptions()
    summary = await run_stage(
        target,
        questions,
        lambda question: question.id,
        handler,
        storage=storage,
        client=client,
        options=options,
        view=view,
    )
    await compact_stage(storage, target.prefix, options)
    return summary


def _key(record: AnswerRecord) -> str:
    return record.question_id


def read_answers(
    storage: Storage, layout: RunLayout, series: str, model: str, order: Sequence[str] | None = None
) -> list[AnswerRecord]:
    """One answers record per question (the latest final one), in ``order`` when given.

    This is how every consumer (judging, reports) should read answers: shards may hold an earlier
    failed attempt of a question that a rerun answered.
    """
    stored = read_records(storage, layout.answers_prefix(series, model), AnswerRecord.from_json)
    records = latest_by_key(stored, _key)
    if order is None:
        return list(records.values())
    return [records[qid] for qid in order if qid in records]
