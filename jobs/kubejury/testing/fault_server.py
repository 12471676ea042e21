"""An in-process OpenAI-compatible chat server that misbehaves on demand.

The client's retry logic and the stages' resumability are only believable if they are exercised
against a real HTTP server that does the nasty things production servers do: 429 with
``Retry-After``, 500s, replies that never come, truncated JSON, empty ``choices``, connections
closed mid-reply, optional fields refused with a 400, and a server that dies mid-run. This module
is that server (aiohttp on 127.0.0.1); tests script its behaviour per request.

Behaviours (strings in :attr:`FaultServer.faults`, consumed one per request, FIFO; or returned by
:attr:`FaultServer.decide`):

``ok`` a normal completion · ``429`` (``429:<seconds>`` sets ``Retry-After``) · ``500`` · ``503``
· ``hang`` (sleep ``hang_s`` before answering) · ``truncated`` (200 with cut-off JSON) ·
``empty`` (200 with ``choices: []``) · ``close`` (drop the connection without replying) ·
``reject:<field>`` (400 naming ``field``, unless the request no longer carries it) · ``bad:<status>``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

Responder = Callable[[dict[str, Any]], str]
Decider = Callable[[dict[str, Any], int], str | None]


def echo_responder(body: dict[str, Any]) -> str:
    """Default answer: names the last user message, so tests can check which question got which answer."""
    messages = body.get("messages") or [{}]
    last = str(messages[-1].get("content", ""))
    return f"Ответ на: {last[:80]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class FaultServer:
    """A scripted OpenAI-compatible server. ``async with FaultServer() as server: server.base_url``."""

    def __init__(
        self,
        *,
        responder: Responder = echo_responder,
        latency_s: float = 0.0,
        hang_s: float = 30.0,
        port: int | None = None,
    ) -> None:
        self.responder = responder
        self.latency_s = latency_s
        self.hang_s = hang_s
        self.port = port or free_port()
        self.faults: list[str] = []
        self.decide: Decider | None = None
        self.requests: list[dict[str, Any]] = []  # every body received, in arrival order
        self.served = 0  # successful completions sent
        self.in_flight = 0
        self.max_in_flight_seen = 0
        self.die_after: int | None = None  # stop serving after this many successful completions
        self.died = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> FaultServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _next_behaviour(self, body: dict[str, Any]) -> str:
        index = len(self.requests) - 1
        if self.decide is not None:
            decided = self.decide(body, index)
            if decided is not None:
                return decided
        if self.faults:
            return self.faults.pop(0)
        return "ok"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight_seen = max(self.max_in_flight_seen, self.in_flight)
        try:
            return await self._respond(request)
        finally:
            self.in_flight -= 1

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw)
        self.requests.append(body)
        if self.die_after is not None and self.served >= self.die_after:
            self._die()
            return await self._close(request)
        behaviour = self._next_behaviour(body)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        name, _, arg = behaviour.partition(":")
        if name == "ok":
            self.served += 1
            return web.Response(
                body=orjson.dumps(completion(self.responder(body), body)), content_type="application/json"
            )
        if name == "429":
            headers = {"Retry-After": arg} if arg else {}
            return web.json_response({"error": {"message": "rate limited"}}, status=429, headers=headers)
        if name in ("500", "503"):
            return web.json_response({"error": {"message": "internal error"}}, status=int(name))
        if name == "bad":
            return web.json_response({"error": {"message": "bad request"}}, status=int(arg or 400))
        if name == "reject":
            if arg in body:
                message = f"Unrecognized request argument supplied: {arg}"
                return web.json_response(
                    {"error": {"message": message, "type": "invalid_request_error"}}, status=400
                )
            self.served += 1
            return web.Response(
                body=orjson.dumps(completion(self.responder(body), body)), content_type="application/json"
            )
        if name == "hang":
            await asyncio.sleep(self.hang_s)
            return web.json_response(completion(self.responder(body), body))
        if name == "truncated":
            full = orjson.dumps(completion(self.responder(body), body))
            return web.Response(body=full[: len(full) // 2], content_type="application/json")
        if name == "empty":
            return web.json_response({"id": "x", "object": "chat.completion", "choices": []})
        if name == "close":
            return await self._close(request)
        raise ValueError(f"unknown fault behaviour {behaviour!r}")

    async def _close(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            transport.close()
        return web.Response(status=500)

    def _die(self) -> None:
        if not self.died.is_set():
            self.died.set()
            task = asyncio.get_running_loop().create_task(self.stop())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def completion(content: str, body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completion object carrying ``content``."""
    prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    limit, finish = body.get("max_tokens"), "stop"
    if isinstance(limit, int) and len(content) // 4 > limit:  # ~4 characters a token, as below
        content, finish = content[: limit * 4], "length"  # what a server does at max_tokens
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "model": body.get("model", ""),
        "system_fingerprint": "fault-server-1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
        "usage": {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, len(content) // 4),
            "total_tokens": max(1, prompt_chars // 4) + max(1, len(content) // 4),
        },
    }
