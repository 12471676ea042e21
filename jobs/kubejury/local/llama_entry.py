"""Entry point of the local llama.cpp server: ``llama_cpp.server`` plus OpenAI ``json_schema`` output.

kubejury asks judges for structured output the OpenAI way,
``response_format: {"type": "json_schema", "json_schema": {"schema": …}}``, which vLLM, SGLang,
Ollama and llama.cpp's own ``llama-server`` accept. The llama-cpp-python server (0.3.x) only
knows ``{"type": "json_object", "schema": …}`` — same grammar-constrained decoding, different
spelling — and answers the OpenAI form with HTTP 500. This module starts the very same server
(same flags, parsed by llama-cpp-python's own CLI helpers) behind a tiny ASGI middleware that
rewrites the OpenAI spelling into llama-cpp-python's, so local mode behaves like the runtimes
used in the cluster. Run as ``python -m kubejury.local.llama_entry <llama_cpp.server flags>``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def translate_response_format(body: dict[str, Any]) -> bool:
    """Rewrite an OpenAI ``json_schema`` response_format in place; True when something changed."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return False
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    body["response_format"] = {"type": "json_object", **({"schema": schema} if schema is not None else {})}
    return True


class JsonSchemaCompat:
    """ASGI middleware: translate ``response_format`` of chat-completion requests before the app sees them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

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
        if isinstance(body, dict) and translate_response_format(body):
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


def main() -> None:  # pragma: no cover - runs in the server subprocess (covered by the slow tests)
    import argparse

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description="llama-cpp-python server with OpenAI json_schema output")
    add_args_from_model(parser, Settings)
    args = parser.parse_args()
    # parse_model_from_args returns an instance (its annotation says the class).
    server_settings: Any = parse_model_from_args(ServerSettings, args)
    model_settings: Any = [parse_model_from_args(ModelSettings, args)]
    app = create_app(server_settings=server_settings, model_settings=model_settings)
    uvicorn.run(JsonSchemaCompat(app), host=server_settings.host, port=server_settings.port)


if __name__ == "__main__":  # pragma: no cover
    main()
