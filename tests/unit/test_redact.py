"""Credentials never reach what kubejury writes (issue 11, finding 5): one redaction function,
used where records, progress messages, Events and status are written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Self

import pytest
from aiohttp import web

from kubejury.config.spec import ModelSpec, Series
from kubejury.files.benchmark import Question
from kubejury.files.shards import read_rows
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.inference.client import ChatClient, ClientSettings, build_body
from kubejury.redact import MASK, redact, redact_known, redact_tree
from kubejury.stages import run_generation
from kubejury.stages.generate import read_answers
from kubejury.testing.fault_server import free_port

FAST = ClientSettings(max_attempts=1, backoff_initial_s=0.001, backoff_max_s=0.002, request_timeout_s=5)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('{"echo": {"Authorization": "Bearer sk-live-0123456789abcdef"}}', "sk-live-0123456789abcdef"),
        ("cannot reach https://alice:s3cr3t-pw@proxy.example/v1", "s3cr3t-pw"),
        ("x-api-key: abcd1234efgh", "abcd1234efgh"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI/K7MDENG"),
        ("key AKIAIOSFODNN7EXAMPLE leaked", "AKIAIOSFODNN7EXAMPLE"),
        ("hf token hf_abcdefghijklmnopqrst", "hf_abcdefghijklmnopqrst"),
        ("authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ],
)
def test_credentials_are_masked(text: str, secret: str) -> None:
    assert secret not in redact(text)
    assert MASK in redact(text)


def test_ordinary_messages_are_kept() -> None:
    for text in (
        "HTTP 500 from http://kj-r-m-qwen.evals.svc:8000/v1/chat/completions",
        "max_tokens=512 completion_tokens: 10",
        "Secret 'hosted-key' with key 'token' not found",
    ):
        assert redact(text) == text


def test_known_values_and_nested_status_are_masked() -> None:
    assert redact("the key is plain-value-42", ["plain-value-42"]) == f"the key is {MASK}"
    status = {
        "conditions": [{"message": "401 from https://u:pw-123@h/v1: Bearer abcdefgh"}],
        "phase": "Failed",
    }
    assert "pw-123" not in str(redact_tree(status)) and "abcdefgh" not in str(redact_tree(status))
    assert redact_tree(status)["phase"] == "Failed"


class LoopbackChat:
    """A chat-completions endpoint on loopback whose reply is the subclass's ``handle``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


class EchoingServer(LoopbackChat):
    """A loopback model server that answers successfully, repeating the request's Authorization
    header in the answer (and in its ``system_fingerprint``), as a careless proxy or model may."""

    async def handle(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        reply = {
            "choices": [
                {
                    "message": {"role": "assistant", "content": f"Три года. Debug: {header}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5},
            "system_fingerprint": f"build {header.removeprefix('Bearer ')}",
        }
        return web.json_response(reply)


async def test_a_key_echoed_in_a_successful_answer_is_stored_redacted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "kj-unshaped-key-0123456789"  # no well-known shape: only knowing the value finds it
    monkeypatch.setenv("KUBEJURY_API_KEY", key)
    storage, layout = LocalStorage(tmp_path), RunLayout("r")
    model = ModelSpec(name="m", runtime="openai", source="http://127.0.0.1:1/v1", served_model="m")
    question = Question(id="q1", domain="d", level=1, question="Срок?", reference="Три года.")
    async with (
        EchoingServer() as server,
        ChatClient(f"http://127.0.0.1:{server.port}/v1", api_key=key, settings=FAST) as client,
    ):
        await run_generation(
            storage=storage,
            layout=layout,
            model=model,
            series=Series(name="s"),
            questions=[question],
            client=client,
        )
    [record] = read_answers(storage, layout, "s", "m")
    assert record.answer == f"Три года. Debug: Bearer {MASK}"
    assert record.server_version == f"build {MASK}"
    assert key not in str(list(read_rows(storage, layout.answers_prefix("s", "m"))))


def test_answer_text_keeps_credential_shaped_words_that_are_no_known_secret() -> None:
    """An answer about configuring a proxy is judged as written: only the run's own secrets go."""
    answer = "Set Authorization: Bearer <token> and api_key=sk-your-key-here."
    assert redact_known(answer, ["real-secret-value"]) == answer
    assert redact_known("echo real-secret-value", ["real-secret-value"]) == f"echo {MASK}"


class EchoingProxy(LoopbackChat):
    """A loopback server that answers 401 with the request's headers echoed in the body, as some
    proxies do."""

    async def handle(self, request: web.Request) -> web.Response:
        return web.json_response({"error": "unauthorized", "headers": dict(request.headers)}, status=401)


@pytest.fixture
async def proxy() -> AsyncIterator[EchoingProxy]:
    async with EchoingProxy() as server:
        yield server


async def test_an_error_body_echoing_the_key_is_stored_without_it(proxy: EchoingProxy) -> None:
    key = "sk-test-0123456789abcdefXYZ"
    async with ChatClient(f"http://127.0.0.1:{proxy.port}/v1", api_key=key, settings=FAST) as client:
        result = await client.chat(build_body("m", [{"role": "user", "content": "q"}]))
    assert result.error is not None and "401" in result.error
    assert key not in result.error


async def test_a_url_password_is_in_no_message(proxy: EchoingProxy) -> None:
    url = f"http://user:hunter2pw@127.0.0.1:{proxy.port}/v1"
    async with ChatClient(url, settings=FAST) as client:
        result = await client.chat(build_body("m", [{"role": "user", "content": "q"}]))
    assert result.error is not None and "401" in result.error
    assert "dXNlcjpodW50ZXIycHc" not in result.error  # base64 of user:hunter2pw, echoed as Basic
    assert "hunter2pw" not in client.public_url and "hunter2pw" not in client.name


class RecordingApiServer(LoopbackChat):
    """A loopback stand-in for the Kubernetes API server that records every request body it is
    sent (what would reach etcd and every viewer of the run) and answers ``{}``."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.text())
        return web.json_response({})

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self


async def test_the_operator_writes_events_and_status_redacted() -> None:
    """The real gateway over HTTP to a recording API server on loopback: what is sent."""
    from kubejury_operator.gateway import ApiCredentials, KubeGateway

    run = {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {"name": "r", "namespace": "n"},
    }
    leak = "judge failed: 401 from https://bob:pa55word@api.example/v1 echoing Bearer sk-abcdefghijkl0123"
    async with (
        RecordingApiServer() as api,
        KubeGateway(ApiCredentials(server=f"http://127.0.0.1:{api.port}")) as gw,
    ):
        await gw.post_event(run, "Warning", "StageFailed", leak)
        await gw.patch_status("EvalRun", "n", "r", {"conditions": [{"type": "Ready", "message": leak}]})
    sent = "\n".join(api.bodies)
    assert len(api.bodies) == 2
    assert "pa55word" not in sent and "sk-abcdefghijkl0123" not in sent
    assert "api.example" in sent
