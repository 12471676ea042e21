"""Local mode planning: which llama.cpp servers to start and with which command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubejury.config.spec import JudgeSpec, ModelSpec
from kubejury.errors import ConfigError
from kubejury.local.llama_entry import evaluate_each_prompt_whole
from kubejury.local.server import ServerPlan, plan_servers, resolve_gguf, server_command, threads_per_server


def _fake_resolve(entry: ModelSpec) -> Path:
    return Path(entry.gguf_path or "/cache/models/embedded.gguf")


def test_same_embedded_model_shares_one_server() -> None:
    entries = [
        ModelSpec(name="gemma", runtime="llamacpp"),
        JudgeSpec(name="judge-a", runtime="llamacpp", prompt_variant="strict", seed=1),
        JudgeSpec(name="judge-b", runtime="llamacpp", prompt_variant="lenient", seed=2),
        ModelSpec(name="remote", runtime="openai", source="https://api.example.com/v1"),
    ]
    plans, of_entry = plan_servers(entries, resolve=_fake_resolve)
    assert len(plans) == 1
    assert of_entry == {"gemma": 0, "judge-a": 0, "judge-b": 0}
    assert plans[0].chat_format == "gemma"  # embedded model: no template in the file


def test_different_files_or_context_get_their_own_server() -> None:
    entries = [
        ModelSpec(name="a", runtime="llamacpp"),
        ModelSpec(name="b", runtime="llamacpp", max_model_len=4096),
        ModelSpec(name="c", runtime="llamacpp", gguf_path="/models/other.gguf", chat_format="chatml"),
    ]
    plans, of_entry = plan_servers(entries, resolve=_fake_resolve)
    assert len(plans) == 3
    assert sorted(of_entry.values()) == [0, 1, 2]


def test_two_embedded_models_get_one_server_each_shared_with_their_judges() -> None:
    smol = "embedded://smollm2-135m-instruct-q4_1"

    def resolve(entry: ModelSpec) -> Path:
        return Path("/cache/smol.gguf" if entry.source == smol else "/cache/gemma.gguf")

    entries = [
        ModelSpec(name="gemma", runtime="llamacpp", max_model_len=2048),
        ModelSpec(name="smol", runtime="llamacpp", source=smol, max_model_len=2048),
        JudgeSpec(name="judge-gemma", runtime="llamacpp", same_as="gemma", max_model_len=2048),
        JudgeSpec(name="judge-smol", runtime="llamacpp", source=smol, same_as="smol", max_model_len=2048),
    ]
    plans, of_entry = plan_servers(entries, resolve=resolve)
    assert [p.model_path.name for p in plans] == ["gemma.gguf", "smol.gguf"]
    assert of_entry == {"gemma": 0, "smol": 1, "judge-gemma": 0, "judge-smol": 1}
    assert [p.chat_format for p in plans] == ["gemma", None]


def test_cores_are_split_between_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEJURY_LLAMA_THREADS", raising=False)
    assert threads_per_server(1, cpus=2) == 1  # a lone server still gets half (spinning threads)
    assert threads_per_server(2, cpus=2) == 1
    assert threads_per_server(3, cpus=2) == 1  # never zero
    assert threads_per_server(2, cpus=8) == 4
    assert threads_per_server(1, cpus=64) == 8
    monkeypatch.setenv("KUBEJURY_LLAMA_THREADS", "3")
    assert threads_per_server(2, cpus=2) == 3


def test_server_command_uses_loopback_and_real_flags() -> None:
    plan = ServerPlan(Path("/m.gguf"), "gemma", 2048, ("--n_batch", "256"), alias="gemma")
    cmd = server_command(plan, 8123, threads=2, python="py")
    assert cmd[:3] == ["py", "-m", "kubejury.local.llama_entry"]
    joined = " ".join(cmd)
    for flag in (
        "--model /m.gguf",
        "--host 127.0.0.1",
        "--port 8123",
        "--n_ctx 2048",
        "--chat_format gemma",
        "--n_threads 2",
        "--model_alias gemma",
    ):
        assert flag in joined
    assert cmd[-2:] == ["--n_batch", "256"]


def test_resolve_rejects_downloads_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GGUF files only"):
        resolve_gguf(ModelSpec(name="x", runtime="llamacpp", source="hf://org/repo"))
    with pytest.raises(ConfigError, match="not found"):
        resolve_gguf(ModelSpec(name="x", runtime="llamacpp", gguf_path=str(tmp_path / "none.gguf")))
    real = tmp_path / "m.gguf"
    real.write_bytes(b"GGUF")
    assert resolve_gguf(ModelSpec(name="x", runtime="llamacpp", gguf_path=str(real))) == real


def test_openai_json_schema_is_translated_for_llama_cpp_python() -> None:
    from kubejury.local.llama_entry import translate_response_format

    schema = {"type": "object", "properties": {"score": {"type": "integer"}}}
    body: dict[str, Any] = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "v", "strict": True, "schema": schema},
        }
    }
    assert translate_response_format(body)
    assert body["response_format"] == {"type": "json_object", "schema": schema}
    bounded: dict[str, Any] = {
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}},
    }
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": bounded}}}
    assert translate_response_format(body)
    assert body["response_format"]["schema"]["properties"]["score"] == {"enum": list(range(11))}
    assert bounded["properties"]["score"]["maximum"] == 10  # the caller's schema is not modified
    untouched = {"response_format": {"type": "json_object"}}
    assert not translate_response_format(untouched)
    assert untouched == {"response_format": {"type": "json_object"}}
    assert not translate_response_format({"messages": []})


async def test_middleware_rewrites_only_chat_completion_bodies() -> None:
    import json

    from kubejury.local.llama_entry import JsonSchemaCompat, Message, Receive, Scope, Send

    seen: list[tuple[str, bytes, dict[bytes, bytes]]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        seen.append((scope["path"], message["body"], dict(scope["headers"])))

    body = json.dumps(
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}}
    )
    for path in ("/v1/chat/completions", "/v1/completions"):
        sent: list[Message] = [{"type": "http.request", "body": body.encode(), "more_body": False}]

        async def receive(sent: list[Message] = sent) -> Message:
            return sent.pop(0)

        async def send(message: Message) -> None:
            raise AssertionError("the app under test sends nothing")

        scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"content-length", b"1")]}
        await JsonSchemaCompat(app)(scope, receive, send)
    (_, body1, headers1), (_, body2, _) = seen
    assert json.loads(body1)["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    assert headers1[b"content-length"] == str(len(body1)).encode()
    assert body2 == body.encode()


def test_system_messages_move_into_the_first_user_turn() -> None:
    from kubejury.local.llama_entry import merge_system_messages

    body = {
        "messages": [{"role": "system", "content": "Будь краток."}, {"role": "user", "content": "Вопрос?"}]
    }
    assert merge_system_messages(body)
    assert body["messages"] == [{"role": "user", "content": "Будь краток.\n\nВопрос?"}]
    assert not merge_system_messages({"messages": [{"role": "user", "content": "x"}]})


class CachingModel:
    """Stands in for llama-cpp-python's ``Llama``: it remembers how many prompt tokens it holds."""

    def __init__(self) -> None:
        self.n_tokens = 0
        self.resets = 0

    def reset(self) -> None:
        self.n_tokens = 0
        self.resets += 1

    def generate(self, tokens: list[int], *args: object, **kwargs: object) -> Iterator[int]:
        held = self.n_tokens
        self.n_tokens = len(tokens)
        yield held  # how many tokens of this prompt the cache would have spared


def test_every_local_request_is_evaluated_whole_so_a_reply_does_not_depend_on_the_one_before() -> None:
    evaluate_each_prompt_whole(CachingModel)
    evaluate_each_prompt_whole(CachingModel)  # once only, however often the server module runs it
    model = CachingModel()
    assert list(model.generate([1, 2, 3])) == [0]
    assert list(model.generate([1, 2, 3, 4])) == [0]  # the cached prefix [1, 2, 3] is not reused
    assert model.resets == 2
