"""A stage reports what happened (issue 12 §4, §6): when most requests fail it fails, naming why.

Before: every request answered 401 and the stage still ended ``succeeded`` with "40 errors"; an
endless 200 reply was buffered until memory ran out. A real loopback server plays the endpoint.
"""

from __future__ import annotations

import pytest

from kubejury.config.spec import ModelSpec, Series
from kubejury.files.benchmark import Question
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.inference.client import ChatClient, ClientSettings
from kubejury.stages import StageFailed, StageOptions, run_generation
from kubejury.testing.fault_server import FaultServer

pytestmark = pytest.mark.integration


async def test_a_stage_where_every_request_is_refused_fails_naming_status_and_endpoint(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    server: FaultServer,
    client: ChatClient,
) -> None:
    server.decide = lambda body, n: "bad:401"
    with pytest.raises(StageFailed) as caught:
        await run_generation(
            storage=storage, layout=layout, model=model, series=series, questions=questions, client=client
        )
    message = str(caught.value)
    assert "40 of 40" in message and "HTTP 401" in message and server.base_url in message
    progress = storage.read_json(layout.progress_key("primary", "generate", "qwen-test"))
    assert progress["state"] == "failed" and "HTTP 401" in progress["message"]


async def test_errors_below_the_threshold_leave_the_stage_succeeded(
    storage: LocalStorage,
    layout: RunLayout,
    model: ModelSpec,
    series: Series,
    questions: list[Question],
    server: FaultServer,
    client: ChatClient,
) -> None:
    server.decide = lambda body, n: "bad:400" if n < 4 else None
    summary = await run_generation(
        storage=storage,
        layout=layout,
        model=model,
        series=series,
        questions=questions,
        client=client,
        options=StageOptions(max_error_share=0.2),
    )
    assert summary.errors == 4
    progress = storage.read_json(layout.progress_key("primary", "generate", "qwen-test"))
    assert progress["state"] == "succeeded"


async def test_a_reply_larger_than_the_cap_fails_that_request_clearly(server: FaultServer) -> None:
    server.responder = lambda body: "x" * 200_000
    settings = ClientSettings(max_attempts=3, backoff_initial_s=0.01, max_response_bytes=50_000)
    async with ChatClient(server.base_url, settings=settings) as client:
        result = await client.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert result.error is not None and "50000 bytes" in result.error
        assert result.attempts == 1  # the same request would get the same reply
        server.responder = lambda body: "short"
        ok = await client.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert ok.content == "short"
