"""Entry point of the local llama.cpp server: ``llama_cpp.server`` plus OpenAI ``json_schema`` output.

kubejury asks judges for structured output the OpenAI way,
``response_format: {"type": "json_schema", "json_schema": {"schema": …}}``, which vLLM, SGLang,
Ollama and llama.cpp's own ``llama-server`` accept. The llama-cpp-python server (0.3.x) only
knows ``{"type": "json_object", "schema": …}`` — same grammar-constrained decoding, different
spelling — and answers the OpenAI form with HTTP 500. This module starts the very same server
(same flags, parsed by llama-cpp-python's own CLI helpers) behind a tiny ASGI middleware that
rewrites the OpenAI spelling into llama-cpp-python's, so local mode behaves like the runtimes
used in the cluster. Two more differences are smoothed over the same way:

- llama-cpp-python's JSON-schema grammar ignores ``minimum``/``maximum``, so a 270M judge asked for
  a 0–10 integer happily writes ``100``; a bounded integer (range ≤ 1000) becomes the ``enum`` of
  its values, which the grammar does enforce — the same set of valid documents.
- Its ``gemma`` chat format drops system messages; Gemma's own chat template puts the system text
  at the start of the first user turn, and so does this middleware when serving that format.
- It keeps the previous request's tokens in the KV cache and evaluates only the new suffix of the
  next prompt. The floats of a suffix evaluated on top of a cached prefix differ in the last bits
  from those of the whole prompt evaluated at once, and a greedy reply can follow them: a judge's
  verdict on an answer then depended on which answer it judged before. So every request here is
  evaluated whole, from an empty cache (:func:`evaluate_each_prompt_whole`): a reply depends only
  on its request, which is what lets a judgment be copied into another run (issue 24). The cost
  is the shared prompt prefix evaluated again; ``KUBEJURY_LLAMA_REUSE_PREFIX=1`` trades the
  determinism back for that time.

Run as ``python -m kubejury.local.llama_entry <llama_cpp.server flags>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


_MAX_ENUM = 1000
#: Set to ``1`` to let the server reuse the previous prompt's cached prefix again: faster on long
#: shared judge prompts, but a reply may then depend on the request before it (no exact reuse).
REUSE_PREFIX_ENV = "KUBEJURY_LLAMA_REUSE_PREFIX"


def bounded_integers_as_enums(schema: Any) -> Any:
    """A copy of ``schema`` where every integer with both bounds (range ≤ 1000) is an ``enum``."""
    if isinstance(schema, list):
        return [bounded_integers_as_enums(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bounded_integers_as_enums(value) for key, value in schema.items()}
    low, high = out.get("minimum"), out.get("maximum")
    if (
        out.get("type") == "integer"
        and isinstance(low, int)
        and isinstance(high, int)
        and 0 <= high - low <= _MAX_ENUM
        and "enum" not in out
    ):
        for key in ("type", "minimum", "maximum"):
            out.pop(key)
        out["enum"] = list(range(low, high + 1))
    return out


def translate_response_format(body: dict[str, Any]) -> bool:
    """Rewrite an OpenAI ``json_schema`` response_format in place; True when something changed."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return False
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    translated: dict[str, Any] = {"type": "json_object"}
    if schema is not None:
        translated["schema"] = bounded_integers_as_enums(schema)
    body["response_format"] = translated
    return True


def merge_system_messages(body: dict[str, Any]) -> bool:
    """Move system messages to the start of the first user message (Gemma's template); True when changed."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    system = [m for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    if not system:
        return False
    rest = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
    text = "\n\n".join(str(m.get("content") or "") for m in system).strip()
    for i, message in enumerate(rest):
        if (
            isinstance(message, dict)
            and message.get("role") == "user"
            and isinstance(message.get("content"), str)
        ):
            rest[i] = {
                **message,
                "content": f"{text}\n\n{message['content']}" if text else message["content"],
            }
            break
    else:
        rest.insert(0, {"role": "user", "content": text})
    body["messages"] = rest
    return True


class JsonSchemaCompat:
    """ASGI middleware: translate ``response_format`` of chat-completion requests before the app sees them."""

    def __init__(self, app: ASGIApp, *, merge_system: bool = False) -> None:
        self.app = app
        self.merge_system = merge_system

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or not str(scope.get("path", "")).endswith("/chat/completions")
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        changed = False
        if isinstance(body, dict):
            changed = translate_response_format(body)
            changed = (self.merge_system and merge_system_messages(body)) or changed
        if changed:
            raw = json.dumps(body).encode()
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(raw)).encode()))
            scope = {**scope, "headers": headers}
        await self.app(
            scope, _replay([{"type": "http.request", "body": raw, "more_body": False}], receive), send
        )


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


def evaluate_each_prompt_whole(llama_class: Any) -> None:
    """Make ``llama_class.generate`` (llama-cpp-python's ``Llama``) forget the previous prompt
    before each generation, so no cached prefix is reused (see the module docstring)."""
    original = llama_class.generate
    if getattr(original, "evaluates_whole_prompt", False):
        return

    def generate(self: Any, tokens: Any, *args: Any, **kwargs: Any) -> Any:
        self.reset()
        return original(self, tokens, *args, **kwargs)

    generate.evaluates_whole_prompt = True  # type: ignore[attr-defined]
    llama_class.generate = generate


def main() -> None:  # pragma: no cover - runs in the server subprocess (covered by the slow tests)
    import argparse

    import uvicorn
    from llama_cpp import Llama
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description="llama-cpp-python server with OpenAI json_schema output")
    add_args_from_model(parser, Settings)
    args = parser.parse_args()
    if os.environ.get(REUSE_PREFIX_ENV) != "1":
        evaluate_each_prompt_whole(Llama)
    # parse_model_from_args returns an instance (its annotation says the class).
    server_settings: Any = parse_model_from_args(ServerSettings, args)
    model_settings: Any = [parse_model_from_args(ModelSettings, args)]
    app = create_app(server_settings=server_settings, model_settings=model_settings)
    middleware = JsonSchemaCompat(app, merge_system=args.chat_format == "gemma")
    uvicorn.run(middleware, host=server_settings.host, port=server_settings.port)


if __name__ == "__main__":  # pragma: no cover
    main()
