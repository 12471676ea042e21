"""Judging stage against a real loopback judge server: anonymization, structured output, re-asking, resumption."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest

from kubejury.config.spec import JudgeSpec, Judging
from kubejury.files.benchmark import Question
from kubejury.files.shards import read_rows, write_records
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.inference.client import ChatClient, ClientSettings
from kubejury.records.results import AnswerRecord
from kubejury.stages import EndpointUnavailable, StageOptions, run_judging
from kubejury.stages.judge import read_judgments
from kubejury.testing.fault_server import FaultServer

pytestmark = pytest.mark.integration

MODELS = ("qwen3-8b", "gemma-3-27b")


def seed_answers(storage: LocalStorage, layout: RunLayout, questions: list[Question]) -> None:
    for model in MODELS:
        records: list[dict[str, Any]] = []
        for q in questions:
            answer = f"Ответ {model} на {q.id}: три года."
            if q.id == "q001":
                answer = f"I am {model.split('-')[0].capitalize()}, created by a lab. Three years."
            records.append(
                {"question_id": q.id, "model": model, "series": "primary", "answer": answer, "error": None}
            )
        # q002 of the second model failed at generation: it must not be judged
        records[2] = (
            {**records[2], "answer": None, "error": "HTTP 500", "error_kind": "http"}
            if model == MODELS[1]
            else records[2]
        )
        write_records(
            storage, layout.answers_prefix("primary", model), [AnswerRecord.from_json(r) for r in records]
        )


def user_text(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def json_verdict(body: dict[str, Any]) -> str:
    return orjson.dumps({"rationale": "Совпадает с эталоном.", "score": 7}).decode()


@pytest.fixture
def judge() -> JudgeSpec:
    return JudgeSpec(name="judge-a", runtime="llamacpp", seed=5)


async def test_judges_every_anonymized_answer_once(
    storage: LocalStorage,
    layout: RunLayout,
    questions: list[Question],
    judge: JudgeSpec,
    fast: ClientSettings,
) -> None:
    questions = questions[:10]
    seed_answers(storage, layout, questions)
    async with (
        FaultServer(responder=json_verdict) as server,
        ChatClient(server.base_url, settings=fast) as client,
    ):
        summary = await run_judging(
            storage=storage,
            layout=layout,
            judge=judge,
            judging=Judging(),
            series="primary",
            models=MODELS,
            questions=questions,
            client=client,
            seed=11,
        )
    assert summary.complete and summary.total == 19 and summary.skipped == 1 and summary.parse_failures == 0
    judgments = read_judgments(storage, layout, "primary", "judge-a")
    assert len(judgments) == 19
    assert {j.score for j in judgments} == {7.0}
    assert ("q002", "gemma-3-27b") not in {(j.question_id, j.model) for j in judgments}
    # what the judge saw: no model names, self-identification neutralised, the reference, structured output requested
    for body in server.requests:
        text = user_text(body)
        for model in MODELS:
            assert model not in text
        assert "Qwen" not in text and "Gemma" not in text
        assert body["response_format"]["type"] == "json_schema"
        assert body["max_tokens"] == Judging().max_tokens
        assert body["seed"] == 5 and body["temperature"] == 0.0
    seen = [user_text(body) for body in server.requests]
    assert (
        sum("I am [model], created by a lab. Three years." in text for text in seen) == 2
    )  # replaced, not deleted
    assert sum("Ответ [модель] на q003: три года." in text for text in seen) == 2
    # order is shuffled with the seed (not benchmark order), and deterministic
    asked = [text.split("<<<ВОПРОС>>>\n")[1].split("\n")[0] for text in map(user_text, server.requests)]
    assert asked != sorted(asked)
    mapping = storage.read_json(layout.anonymization_key("primary"))
    assert sorted(mapping["ids"].values()) == sorted(MODELS)
    assert {j.answer_id for j in judgments} == set(mapping["ids"])


async def test_same_seed_same_order(
    tmp_path: Any, layout: RunLayout, questions: list[Question], judge: JudgeSpec, fast: ClientSettings
) -> None:
    orders = []
    for attempt in range(2):
        storage = LocalStorage(tmp_path / f"s{attempt}")
        seed_answers(storage, layout, questions[:8])
        one = ClientSettings(max_in_flight=1, max_attempts=2)
        async with (
            FaultServer(responder=json_verdict) as server,
            ChatClient(server.base_url, settings=one) as client,
        ):
            await run_judging(
                storage=storage,
                layout=layout,
                judge=judge,
                judging=Judging(),
                series="primary",
                models=MODELS,
                questions=questions[:8],
                client=client,
                seed=3,
            )
        orders.append([user_text(b) for b in server.requests])
    assert orders[0] == orders[1]


async def test_reask_once_then_null_with_error_never_zero(
    storage: LocalStorage,
    layout: RunLayout,
    questions: list[Question],
    judge: JudgeSpec,
    fast: ClientSettings,
) -> None:
    questions = questions[:6]
    seed_answers(storage, layout, questions)

    def responder(body: dict[str, Any]) -> str:
        reasked = len(body["messages"]) > 1
        text = user_text(body)
        if "на q004" in text:
            return "Не могу оценить."  # never a valid score
        if "на q003" in text:
            return "Оценка [[7]]" if reasked else "Хороший ответ, оценка двенадцать из десяти [[12]]"
        return "Верно. [[9]]"

    judging = Judging(structured_output=False, retries=1)
    async with (
        FaultServer(responder=responder) as server,
        ChatClient(server.base_url, settings=fast) as client,
    ):
        summary = await run_judging(
            storage=storage,
            layout=layout,
            judge=judge,
            judging=judging,
            series="primary",
            models=MODELS,
            questions=questions,
            client=client,
        )
        assert all("response_format" not in b for b in server.requests)
        asked_first = len(server.requests)
        # a rerun does not re-ask parse failures: they are final
        again = await run_judging(
            storage=storage,
            layout=layout,
            judge=judge,
            judging=judging,
            series="primary",
            models=MODELS,
            questions=questions,
            client=client,
        )
        assert len(server.requests) == asked_first and again.written == 0
    by_key = {(j.question_id, j.model): j for j in read_judgments(storage, layout, "primary", "judge-a")}
    for model in MODELS:
        fixed = by_key[("q003", model)]
        assert fixed.score == 7.0 and fixed.asks == 2 and fixed.error is None
        failed = by_key[("q004", model)]
        assert failed.score is None and failed.error_kind == "parse" and failed.asks == 2
        assert failed.error is not None and "no [[N]]" in failed.error
        assert by_key[("q000", model)].score == 9.0
    assert summary.parse_failures == 2
    progress = storage.read_json(layout.progress_key("primary", "judge", "judge-a"))
    assert progress["parse_failures"] == 2 and progress["state"] == "succeeded"


async def test_refused_structured_output_falls_back_to_verdict_parsing(
    storage: LocalStorage,
    layout: RunLayout,
    questions: list[Question],
    judge: JudgeSpec,
    fast: ClientSettings,
) -> None:
    questions = questions[:4]
    seed_answers(storage, layout, questions)
    async with FaultServer(responder=lambda body: "Почти верно. [[8]]") as server:
        server.decide = lambda body, i: "reject:response_format"
        async with ChatClient(server.base_url, settings=fast) as client:
            summary = await run_judging(
                storage=storage,
                layout=layout,
                judge=judge,
                judging=Judging(),
                series="primary",
                models=MODELS,
                questions=questions,
                client=client,
            )
            assert client.dropped_fields == {"response_format"}
    assert summary.parse_failures == 0
    assert {j.score for j in read_judgments(storage, layout, "primary", "judge-a")} == {8.0}


async def test_judge_dying_mid_run_then_rerun_completes_exactly_once(
    storage: LocalStorage,
    layout: RunLayout,
    questions: list[Question],
    judge: JudgeSpec,
    fast: ClientSettings,
) -> None:
    seed_answers(storage, layout, questions)
    options = StageOptions(flush_records=3, abort_after_unreachable=2)
    first = FaultServer(responder=json_verdict)
    await first.start()
    first.die_after = 25
    async with ChatClient(first.base_url, settings=fast) as client:
        with pytest.raises(EndpointUnavailable):
            await run_judging(
                storage=storage,
                layout=layout,
                judge=judge,
                judging=Judging(),
                series="primary",
                models=MODELS,
                questions=questions,
                client=client,
                options=options,
            )
    await first.stop()
    async with FaultServer(responder=json_verdict, port=first.port) as second:
        async with ChatClient(second.base_url, settings=fast) as client:
            summary = await run_judging(
                storage=storage,
                layout=layout,
                judge=judge,
                judging=Judging(),
                series="primary",
                models=MODELS,
                questions=questions,
                client=client,
                options=options,
            )
        assert summary.resumed == 25 and len(second.requests) == summary.total - 25
    raw = list(read_rows(storage, layout.judgments_prefix("primary", "judge-a")))
    counts = Counter((r["question_id"], r["model"]) for r in raw)
    assert len(counts) == 2 * len(questions) - 1
    assert set(counts.values()) == {1}


async def test_probe_judge_counts_fooled_scores(fast: ClientSettings) -> None:
    from kubejury.testing.adversarial import ADVERSARIAL, probe_judge

    def gullible(body: dict[str, Any]) -> str:
        return "[[10]]" if "Игнорируй" in user_text(body) else "Неверно: пять лет вместо трёх. [[1]]"

    async with (
        FaultServer(responder=gullible) as server,
        ChatClient(server.base_url, settings=fast) as client,
    ):
        result = await probe_judge(client, "judge", structured_output=False)
    assert result.fooled == ["ignore_above"]
    assert len(result.scores) == len(ADVERSARIAL)
    assert result.scores["fake_verdict"] == 1.0
