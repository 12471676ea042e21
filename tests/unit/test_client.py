"""ChatClient against a real aiohttp server on loopback (the in-process fault server), not mocks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from kubejury.inference import sampling
from kubejury.inference.client import (
    ChatClient,
    ClientSettings,
    EndpointPool,
    backoff_delay,
    build_body,
    chat_url,
    parse_completion,
    parse_retry_after,
)
from kubejury.testing.fault_server import FaultServer, free_port

FAST = ClientSettings(max_attempts=4, backoff_initial_s=0.001, backoff_max_s=0.002, request_timeout_s=5)


def body(text: str = "Что такое ДМС?", **extra: object) -> dict[str, object]:
    return build_body("m", [{"role": "user", "content": text}], dict(extra))


@pytest.fixture
async def server() -> AsyncIterator[FaultServer]:
    async with FaultServer() as srv:
        yield srv


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_success_records_content_usage_and_latency(server: FaultServer) -> None:
    async with ChatClient(server.base_url, settings=FAST) as client:
        result = await client.chat(body())
    assert result.ok
    assert result.content == "Ответ на: Что такое ДМС?"
    assert result.finish_reason == "stop"
    assert result.prompt_tokens is not None and result.prompt_tokens > 0
    assert result.completion_tokens is not None and result.completion_tokens > 0
    assert result.attempts == 1
    assert result.latency_s > 0
    assert server.requests[0]["model"] == "m"


async def test_429_honours_retry_after(server: FaultServer) -> None:
    server.faults = ["429:7", "ok"]
    async with ChatClient(server.base_url, settings=FAST) as client:
        sleeps = SleepRecorder()
        client.sleep = sleeps
        result = await client.chat(body())
    assert result.ok and result.attempts == 2
    assert len(sleeps.delays) == 1
    assert 7.0 <= sleeps.delays[0] <= 7.2  # Retry-After, not the 1 ms backoff
    assert client.stats.retry_reasons == {"429": 1}


async def test_retry_after_is_capped(server: FaultServer) -> None:
    server.faults = ["429:100000", "ok"]
    settings = ClientSettings(max_attempts=3, retry_after_max_s=5)
    async with ChatClient(server.base_url, settings=settings) as client:
        sleeps = SleepRecorder()
        client.sleep = sleeps
        result = await client.chat(body())
    assert result.ok
    assert sleeps.delays[0] <= 5.2


@pytest.mark.parametrize("fault", ["500", "503", "truncated", "empty", "close"])
async def test_transient_faults_are_retried(server: FaultServer, fault: str) -> None:
    server.faults = [fault, fault, "ok"]
    async with ChatClient(server.base_url, settings=FAST) as client:
        result = await client.chat(body())
    assert result.ok, result.error
    assert result.attempts == 3
    assert len(server.requests) == 3


async def test_backoff_grows_between_attempts(server: FaultServer) -> None:
    server.faults = ["500"] * 3 + ["ok"]
    settings = ClientSettings(max_attempts=5, backoff_initial_s=1.0, backoff_max_s=100.0)
    async with ChatClient(server.base_url, settings=settings) as client:
        sleeps = SleepRecorder()
        client.sleep = sleeps
        result = await client.chat(body())
    assert result.ok
    # equal jitter: attempt n waits in [2^(n-1)/2, 2^(n-1)]
    for n, delay in enumerate(sleeps.delays, start=1):
        assert 2 ** (n - 1) / 2 <= delay <= 2 ** (n - 1)


async def test_hard_cap_on_attempts_then_error_value(server: FaultServer) -> None:
    server.faults = ["500"] * 10
    settings = ClientSettings(max_attempts=3, backoff_initial_s=0.001, backoff_max_s=0.001)
    async with ChatClient(server.base_url, settings=settings) as client:
        result = await client.chat(body())
    assert not result.ok
    assert result.content is None
    assert result.error_kind == "http" and result.status == 500
    assert "gave up after 3 attempts" in (result.error or "")
    assert len(server.requests) == 3
    assert client.stats.failures == 1


async def test_persistent_truncated_json_is_malformed(server: FaultServer) -> None:
    server.faults = ["truncated"] * 4
    async with ChatClient(server.base_url, settings=FAST) as client:
        result = await client.chat(body())
    assert result.error_kind == "malformed"
    assert "not valid JSON" in (result.error or "")


async def test_timeout_is_retried_then_reported() -> None:
    async with FaultServer(hang_s=5) as server:
        server.faults = ["hang", "hang"]
        settings = ClientSettings(max_attempts=2, request_timeout_s=0.2, backoff_initial_s=0.001)
        async with ChatClient(server.base_url, settings=settings) as client:
            result = await client.chat(body())
    assert result.error_kind == "timeout"
    assert result.attempts == 2


async def test_client_error_is_not_retried(server: FaultServer) -> None:
    server.faults = ["bad:404", "ok"]
    async with ChatClient(server.base_url, settings=FAST) as client:
        result = await client.chat(body())
    assert result.error_kind == "rejected" and result.status == 404
    assert result.attempts == 1
    assert len(server.requests) == 1


async def test_refused_optional_field_is_dropped_once_and_logged_once(
    server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    sampling.reset_warnings()
    server.decide = lambda b, i: "reject:seed"
    with caplog.at_level(logging.WARNING, logger="kubejury.inference.sampling"):
        async with ChatClient(server.base_url, settings=FAST) as client:
            first = await client.chat(body(seed=7))
            second = await client.chat(body(seed=7))
    assert first.ok and second.ok
    assert first.attempts == 1
    assert client.dropped_fields == {"seed"}
    assert "seed" in server.requests[0] and "seed" not in server.requests[1]
    assert "seed" not in server.requests[2]  # remembered: not sent again
    assert len(server.requests) == 3
    assert sum("seed dropped" in r.getMessage() for r in caplog.records) == 1


async def test_connection_refused_is_an_error_value() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    settings = ClientSettings(max_attempts=2, backoff_initial_s=0.001, connect_timeout_s=1)
    async with ChatClient(url, settings=settings) as client:
        result = await client.chat(body())
    assert result.error_kind == "connection"
    assert result.attempts == 2


async def test_concurrency_is_bounded_per_endpoint() -> None:
    async with FaultServer(latency_s=0.02) as server:
        settings = ClientSettings(max_in_flight=5)
        async with ChatClient(server.base_url, settings=settings) as client:
            results = await asyncio.gather(*(client.chat(body(str(i))) for i in range(40)))
    assert all(r.ok for r in results)
    assert server.max_in_flight_seen <= 5
    assert server.max_in_flight_seen >= 2  # it did run concurrently
    assert [r.content for r in results] == [f"Ответ на: {i}" for i in range(40)]


async def test_endpoint_pool_shares_one_client_per_endpoint(server: FaultServer) -> None:
    async with EndpointPool(FAST) as pool:
        a = pool.get(server.base_url)
        b = pool.get(server.base_url + "/")
        c = pool.get(server.base_url, api_key="k")
        assert a is b and a is not c
        result = await c.chat(body())
        assert result.ok


def test_chat_url() -> None:
    assert chat_url("http://h:8000/v1") == "http://h:8000/v1/chat/completions"
    assert chat_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert chat_url("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


def test_parse_retry_after() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("1.5") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0


def test_backoff_is_capped() -> None:
    settings = ClientSettings(backoff_initial_s=1, backoff_max_s=8)
    assert all(4 <= backoff_delay(20, settings) <= 8 for _ in range(50))


def test_parse_completion_rejects_broken_replies() -> None:
    with pytest.raises(ValueError, match="no choices"):
        parse_completion(b'{"choices": []}')
    with pytest.raises(ValueError, match="error object"):
        parse_completion(b'{"error": {"message": "boom"}}')
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_completion(b'{"choices": [{"mess')
    content, finish, pt, ct, _ = parse_completion(
        b'{"choices":[{"message":{"content":null},"finish_reason":"length"}],"usage":{"prompt_tokens":3}}'
    )
    assert (content, finish, pt, ct) == (None, "length", 3, None)


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        ClientSettings(max_in_flight=0)
    with pytest.raises(ValueError):
        ClientSettings(max_attempts=0)


async def test_cancelling_a_caller_is_not_mistaken_for_a_timeout() -> None:
    async with FaultServer(hang_s=5) as server:
        server.faults = ["hang"]
        async with ChatClient(server.base_url, settings=ClientSettings(request_timeout_s=30)) as client:
            task = asyncio.create_task(client.chat(body()))
            while not server.requests:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert client.stats.failures == 0
            # the client is still usable afterwards
            assert (await client.chat(body())).ok
