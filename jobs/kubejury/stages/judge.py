"""Judging stage: one judge scores every (anonymized) answer of one series against the reference.

Reads the answers of every evaluated model of the series, anonymizes them (opaque ids, names in
self-identifications replaced by a neutral token, metadata removed, the rest as written), shuffles the judging order with the run's
seed, and asks the judge for a 0–10 verdict per answer (:mod:`kubejury.judging.judge_prompt`). The
mapping id → model is written once per series to ``RunLayout.anonymization_key``, apart from the
judgments. Records in ``<run>/<series>/judgments/<judge>/part-*.parquet``, each one
:class:`~kubejury.records.results.JudgmentRecord` (its fields and JSON form are defined there)::

    {"question_id", "model", "series", "judge", "answer_id", "score", "rationale",
     "error", "error_kind", "asks", "latency_s", "usage": {...}, "fingerprint", "format"}

``score`` is ``null`` exactly when ``error`` is set: ``error_kind == "parse"`` means the judge
answered but gave no valid score even after being re-asked (counted per judge as parse
failures); other kinds are request failures, retried when the stage is rerun. Answers whose
generation failed are not judged (counted as ``skipped``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kubejury.files.storage import RunLayout, Storage
from kubejury.inference.client import ChatClient, ChatResult, build_body, json_schema_format
from kubejury.inference.sampling import SamplingParams, request_fields
from kubejury.judging.anonymize import Scrubber, mapping_document, opaque_ids, shuffled
from kubejury.judging.judge_prompt import SCORE_SCHEMA, JudgePrompt, Verdict, parse_verdict
from kubejury.records.anonymization import AnonymizationMap
from kubejury.records.fingerprint import StageFingerprint
from kubejury.records.results import (
    AnswerRecord,
    JudgmentRecord,
    RecordFormatError,
    TokenUsage,
    judged_sha256,
)
from kubejury.stages.generate import QuestionLike, read_answers
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

STAGE = "judge"


class JudgeLike(Protocol):
    """What judging needs of a ``spec.judges[]`` entry (``kubejury.config.spec.JudgeSpec`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def request_model(self) -> str: ...
    @property
    def prompt_variant(self) -> str | None: ...
    @property
    def seed(self) -> int | None: ...


class JudgingLike(Protocol):
    """``spec.judging`` (``kubejury.config.spec.Judging`` fits)."""

    @property
    def prompt_template(self) -> str | None: ...
    @property
    def language(self) -> str | None: ...
    @property
    def structured_output(self) -> bool: ...
    @property
    def retries(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def max_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class JudgingItem:
    """One anonymized answer to be judged (the model name is not part of anything the judge sees)."""

    question: QuestionLike
    model: str
    answer_id: str
    text: str

    @property
    def input_sha256(self) -> str:
        """What the judge sees, hashed: a stored judgment with the same hash may be copied."""
        return judged_sha256(self.question.question, self.question.reference, self.text)


def build_items(
    questions: Sequence[QuestionLike],
    answers_by_model: dict[str, list[AnswerRecord]],
    *,
    seed: int,
    scrubber: Scrubber,
) -> tuple[list[JudgingItem], dict[str, str], int]:
    """Anonymized judging items in the seeded order, the model → id mapping, and how many were skipped."""
    mapping = opaque_ids(sorted(answers_by_model), seed)
    by_id = {q.id: q for q in questions}
    items: list[JudgingItem] = []
    skipped = 0
    for model in sorted(answers_by_model):
        for record in answers_by_model[model]:
            question = by_id.get(record.question_id)
            if question is None:
                continue  # an answer to a question filtered out of this run
            if record.error is not None or record.answer is None:
                skipped += 1
                continue
            items.append(JudgingItem(question, model, mapping[model], scrubber.scrub(record.answer)))
    order = {q.id: i for i, q in enumerate(questions)}
    items.sort(key=lambda it: (order[it.question.id], it.model))
    return shuffled(items, seed), mapping, skipped


def judgment_record(
    item: JudgingItem, series: str, judge: str, verdict: Verdict | None, result: ChatResult, asks: int
) -> JudgmentRecord:
    kind: str | None
    if verdict is None:  # the request itself failed
        score, rationale, error, kind = None, "", result.error, result.error_kind
    else:
        score, rationale, error = verdict.score, verdict.rationale, verdict.error
        kind = "parse" if error is not None else None
    return JudgmentRecord(
        question_id=item.question.id,
        model=item.model,
        series=series,
        judge=judge,
        answer_id=item.answer_id,
        score=score,
        rationale=rationale,
        error=error,
        error_kind=kind,
        asks=asks,
        latency_s=round(result.latency_s, 4),
        usage=TokenUsage(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens),
        input_sha256=item.input_sha256,
    )


async def run_judging(
    *,
    storage: Storage,
    layout: RunLayout,
    judge: JudgeLike,
    judging: JudgingLike,
    series: str,
    models: Sequence[str],
    questions: Sequence[QuestionLike],
    client: ChatClient,
    seed: int = 0,
    language: str = "ru",
    options: StageOptions | None = None,
    view: ProgressView | None = None,
    fingerprint: StageFingerprint | None = None,
) -> StageSummary:
    """Have ``judge`` score every stored answer of ``models`` in ``series`` not yet judged."""
    started = time.monotonic()
    qids = [q.id for q in questions]

    def load_answers() -> dict[str, list[AnswerRecord]]:
        return {m: read_answers(storage, layout, series, m, order=qids) for m in models}

    answers_by_model = await asyncio.to_thread(load_answers)
    scrubber = Scrubber(models)
    items, mapping, skipped = build_items(questions, answers_by_model, seed=seed, scrubber=scrubber)
    mapping_doc = mapping_document(mapping, seed, series)
    mapping_key = layout.anonymization_key(series)
    if await asyncio.to_thread(_stored_map, storage, mapping_key) != mapping_doc:
        await asyncio.to_thread(storage.write_json, mapping_key, mapping_doc.to_json())

    prompt = JudgePrompt.create(
        judging.prompt_template, language=judging.language or language, variant=judge.prompt_variant
    )
    params = SamplingParams(
        temperature=judging.temperature,
        max_tokens=judging.max_tokens,
        seed=judge.seed if judge.seed is not None else seed,
    )
    sampling = request_fields(judge.runtime, params, model=judge.name)
    response_format = json_schema_format("verdict", SCORE_SCHEMA) if judging.structured_output else None
    served, judge_name, reasks = judge.request_model, judge.name, judging.retries

    def handler(tracker: ProgressTracker) -> Handler[JudgingItem, JudgmentRecord]:
        async def ask(messages: list[dict[str, str]]) -> ChatResult:
            result = await client.chat(
                build_body(served, messages, sampling, response_format=response_format)
            )
            tracker.retried(result.attempts - 1)
            return result

        async def handle(item: JudgingItem) -> JudgmentRecord | Unreachable:
            messages = prompt.messages(item.question.question, item.question.reference, item.text)
            result = await ask(messages)
            if result.error_kind == "connection":
                return UNREACHABLE
            if not result.ok:
                return judgment_record(item, series, judge_name, None, result, 1)
            verdict = parse_verdict(result.content)
            asks = 1
            while verdict.error is not None and asks <= reasks:
                messages = [
                    *messages,
                    {"role": "assistant", "content": result.content or ""},
                    prompt.reask_message(),
                ]
                result = await ask(messages)
                asks += 1
                if result.error_kind == "connection":
                    return UNREACHABLE
                if not result.ok:
                    return judgment_record(item, series, judge_name, None, result, asks)
                verdict = parse_verdict(result.content)
            return judgment_record(item, series, judge_name, verdict, result, asks)

        return handle

    target = StageTarget(
        stage=STAGE,
        activity="judging",
        series=series,
        name=judge.name,
        prefix=layout.judgments_prefix(series, judge.name),
        progress_key=layout.progress_key(series, STAGE, judge.name),
        read=JudgmentRecord.from_json,
        record_key=_key,
        not_done="answers not judged",
        kept="judgments",
        fingerprint=fingerprint,
        fingerprint_key=layout.fingerprint_key(series, STAGE, judge.name),
    )
    options = options or StageOptions()
    summary = await run_stage(
        target,
        items,
        lambda item: (item.question.id, item.model),
        handler,
        storage=storage,
        client=client,
        options=options,
        view=view,
        skipped=skipped,
        started=started,
    )
    await compact_stage(storage, target.prefix, options)
    return summary


def _key(record: JudgmentRecord) -> tuple[str, str]:
    return (record.question_id, record.model)


def read_judgments(storage: Storage, layout: RunLayout, series: str, judge: str) -> list[JudgmentRecord]:
    """One judgment per (question, model) — the latest final one — for every consumer of judgments."""
    stored = read_records(storage, layout.judgments_prefix(series, judge), JudgmentRecord.from_json)
    return list(latest_by_key(stored, _key).values())


def parse_failure_count(records: Sequence[JudgmentRecord]) -> int:
    """How many of a judge's records are replies that had no valid score (for the report)."""
    return sum(1 for r in records if r.error_kind == "parse")


def _stored_map(storage: Storage, key: str) -> AnonymizationMap | None:
    """The series' stored anonymization map; one that does not read is replaced, as a changed one is."""
    stored = storage.read_json_or_none(key)
    try:
        return AnonymizationMap.from_json(stored) if isinstance(stored, Mapping) else None
    except RecordFormatError:
        return None
