"""Generation stage against a real loopback server that misbehaves: retries, resumption, no loss, no duplicates."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from kubejury.config.spec import ModelSpec, Series
from kubejury.files.benchmark import Question
from kubejury.files.shards import read_rows
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.inference.client import ChatClient, ClientSettings
from kubejury.stages import EndpointUnavailable, StageOptions, run_generation
from kubejury.stages.generate import read_answers
from kubejury.testing.fault_server import FaultServer

pytestmark = pytest.mark.integration


async def test_every_question_answered_once_in_order(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    server: FaultServer,
    client: ChatClient,
) -> None:
    summary = await run_generation(
        storage=storage, layout=layout, model=model, series=series, questions=questions, client=client
    )
    assert summary.complete and summary.written == 40 and summary.errors == 0
    shards = storage.shard_keys(layout.answers_prefix("primary", "qwen-test"))
    raw = list(read_rows(storage, layout.answers_prefix("primary", "qwen-test")))
    assert len(raw) == 40 and len(shards) >= 1
    answers = read_answers(storage, layout, "primary", "qwen-test", order=[q.id for q in questions])
    assert [a.question_id for a in answers] == [q.id for q in questions]
    for q, a in zip(questions, answers, strict=True):
        assert a.answer == f"Ответ на: {q.question}"
        assert a.model == "qwen-test" and a.series == "primary"
        assert a.usage is not None and a.usage.completion_tokens is not None and a.usage.completion_tokens > 0
        assert a.latency_s is not None and a.latency_s >= 0 and a.error is None
    # requests carried the served model id and the vLLM spelling of the series' sampling
    first = server.requests[0]
    assert first["model"] == "Qwen/Qwen3-8B"
    assert first["repetition_penalty"] == 1.2 and first["temperature"] == 0.0 and first["max_tokens"] == 64
    progress = storage.read_json(layout.progress_key("primary", "generate", "qwen-test"))
    assert progress["state"] == "succeeded" and progress["done"] == 40 and progress["total"] == 40


async def test_transient_faults_do_not_lose_answers(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    server: FaultServer,
    client: ChatClient,
) -> None:
    server.faults = ["429:0", "500", "truncated", "empty", "close", "503", "429:0.01"] * 2
    summary = await run_generation(
        storage=storage, layout=layout, model=model, series=series, questions=questions, client=client
    )
    assert summary.complete and summary.errors == 0
    answers = read_answers(storage, layout, "primary", "qwen-test")
    assert len(answers) == 40
    assert all(a.attempts is not None for a in answers)
    assert sum(a.attempts or 0 for a in answers) == 40 + 14
    assert len(server.requests) == 54


async def test_server_dying_mid_run_then_rerun_completes_exactly_once(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    fast: ClientSettings,
) -> None:
    options = StageOptions(flush_records=5, abort_after_unreachable=3)
    first = FaultServer()
    await first.start()
    first.die_after = 17
    async with ChatClient(first.base_url, settings=fast, runtime="vllm") as client:
        with pytest.raises(EndpointUnavailable, match="rerun resumes"):
            await run_generation(
                storage=storage,
                layout=layout,
                model=model,
                series=series,
                questions=questions,
                client=client,
                options=options,
            )
    await first.stop()
    stored = list(read_rows(storage, layout.answers_prefix("primary", "qwen-test")))
    assert len(stored) == 17  # every completed answer was kept; nothing unreachable was recorded
    progress = storage.read_json(layout.progress_key("primary", "generate", "qwen-test"))
    assert progress["state"] == "failed" and progress["done"] == 17

    async with FaultServer(port=first.port) as second:
        async with ChatClient(second.base_url, settings=fast, runtime="vllm") as client:
            summary = await run_generation(
                storage=storage,
                layout=layout,
                model=model,
                series=series,
                questions=questions,
                client=client,
                options=options,
            )
        assert summary.resumed == 17 and summary.written == 23
        assert len(second.requests) == 23  # only the missing questions were asked
    raw = list(read_rows(storage, layout.answers_prefix("primary", "qwen-test")))
    counts = Counter(r["question_id"] for r in raw)
    assert sorted(counts) == [q.id for q in questions]
    assert set(counts.values()) == {1}


async def test_crash_mid_run_costs_only_the_unflushed_batch(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    fast: ClientSettings,
) -> None:
    # A crash (the process killed) is simulated by cancelling the stage task mid-run.
    options = StageOptions(flush_records=4, flush_interval_s=60)
    async with FaultServer(latency_s=0.01) as server, ChatClient(server.base_url, settings=fast) as client:
        task = asyncio.create_task(
            run_generation(
                storage=storage,
                layout=layout,
                model=model,
                series=series,
                questions=questions,
                client=client,
                options=options,
            )
        )
        while server.served < 20:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        before = len(list(read_rows(storage, layout.answers_prefix("primary", "qwen-test"))))
        assert 0 < before < 40
        asked_before = len(server.requests)
        summary = await run_generation(
            storage=storage,
            layout=layout,
            model=model,
            series=series,
            questions=questions,
            client=client,
            options=options,
        )
        assert summary.resumed == before
        assert len(server.requests) - asked_before == 40 - before
    raw = list(read_rows(storage, layout.answers_prefix("primary", "qwen-test")))
    assert Counter(r["question_id"] for r in raw) == Counter(q.id for q in questions)


async def test_request_errors_are_recorded_then_retried_on_rerun(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    server: FaultServer,
    client: ChatClient,
) -> None:
    server.decide = lambda body, i: "bad:400" if "номер 7?" in body["messages"][-1]["content"] else None
    summary = await run_generation(
        storage=storage, layout=layout, model=model, series=series, questions=questions, client=client
    )
    assert summary.errors == 1 and summary.complete
    failed = [a for a in read_answers(storage, layout, "primary", "qwen-test") if a.error]
    assert [a.question_id for a in failed] == ["q007"]
    assert failed[0].answer is None and failed[0].error_kind == "rejected"

    server.decide = None
    summary = await run_generation(
        storage=storage, layout=layout, model=model, series=series, questions=questions, client=client
    )
    assert summary.resumed == 39 and summary.written == 1
    answers = read_answers(storage, layout, "primary", "qwen-test")
    assert len(answers) == 40 and all(a.error is None for a in answers)


async def test_system_prompt_and_llamacpp_spelling(
    tmp_path: Path, layout: RunLayout, questions: list[Question], server: FaultServer, fast: ClientSettings
) -> None:
    storage = LocalStorage(tmp_path)
    model = ModelSpec(name="gemma", runtime="llamacpp")
    series = Series(name="s2", temperature=0.8, repetition_penalty=1.05, system_prompt="Отвечай кратко.")
    async with ChatClient(server.base_url, settings=fast, runtime="llamacpp") as client:
        await run_generation(
            storage=storage, layout=layout, model=model, series=series, questions=questions[:3], client=client
        )
    body = server.requests[0]
    assert body["messages"][0] == {"role": "system", "content": "Отвечай кратко."}
    assert body["repeat_penalty"] == 1.05 and "repetition_penalty" not in body


KILLED_CHILD = """
import sys
from kubejury.files.benchmark import Question
from kubejury.inference.client import ChatClient, ClientSettings
from kubejury.config.spec import ModelSpec, Series
from kubejury.stages import StageOptions, run_async, run_generation
from kubejury.files.storage import LocalStorage, RunLayout

url, root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
questions = [Question(f"q{i:03d}", "d", 1, f"Вопрос номер {i}?", "x") for i in range(n)]

async def main() -> None:
    async with ChatClient(url, settings=ClientSettings(max_in_flight=4)) as client:
        await run_generation(storage=LocalStorage(root), layout=RunLayout("run1"),
                             model=ModelSpec(name="qwen-test", runtime="vllm"), series=Series(name="primary"),
                             questions=questions, client=client, options=StageOptions(flush_records=5))

run_async(main())
"""


async def test_process_killed_mid_run_then_rerun_completes_exactly_once(
    tmp_path: Path, layout: RunLayout, model: ModelSpec, fast: ClientSettings
) -> None:
    import os
    import signal
    import sys

    n = 120
    root = tmp_path / "store"
    storage = LocalStorage(root)
    prefix = layout.answers_prefix("primary", "qwen-test")
    async with FaultServer(latency_s=0.02) as server:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", KILLED_CHILD, server.base_url, str(root), str(n)
        )
        try:
            for _ in range(1000):  # until a few shards are on disk
                await asyncio.sleep(0.02)
                if len(storage.shard_keys(prefix)) >= 3:
                    break
            os.kill(child.pid, signal.SIGKILL)  # no clean-up, no final flush: a crash
        finally:
            await child.wait()
        assert child.returncode == -signal.SIGKILL
        before = list(read_rows(storage, prefix))
        assert 15 <= len(before) < n
        questions = [Question(f"q{i:03d}", "d", 1, f"Вопрос номер {i}?", "x") for i in range(n)]
        asked_before = len(server.requests)
        async with ChatClient(server.base_url, settings=fast) as client:
            summary = await run_generation(
                storage=storage,
                layout=layout,
                model=model,
                series=Series(name="primary"),
                questions=questions,
                client=client,
            )
        assert summary.resumed == len(before)
        assert len(server.requests) - asked_before == n - len(
            before
        )  # only the lost questions were asked again
    raw = list(read_rows(storage, prefix))
    assert Counter(r["question_id"] for r in raw) == Counter(q.id for q in questions)
    answers = read_answers(storage, layout, "primary", "qwen-test", order=[q.id for q in questions])
    assert [a.answer for a in answers] == [f"Ответ на: {q.question}" for q in questions]
