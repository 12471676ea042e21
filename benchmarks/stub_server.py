"""A minimal, fast OpenAI-compatible chat server for throughput benchmarks (not for tests).

Every ``POST /v1/chat/completions`` is answered after ``--latency`` seconds with the same small,
valid chat completion, so what is measured is the client, not the server. The server never parses
request bodies (it only drains them) and runs on uvloop; pin it to its own core with ``taskset``.

``POST /stats/reset`` zeroes the counters; ``GET /stats`` returns ``{"count", "first_at",
"last_at"}`` (wall-clock ``time.time()`` of the first and last request), which the benchmark uses
to measure a client's start-up to first request.

Run: ``python benchmarks/stub_server.py --port 8765 --latency 0.2``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

CONTENT = (
    "Срок исковой давности по общему правилу составляет три года со дня, когда лицо узнало или "
    "должно было узнать о нарушении своего права (ст. 196 и 200 ГК РФ)."
)


def completion_bytes() -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "stub-model",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": CONTENT}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 42, "completion_tokens": 58, "total_tokens": 100},
        }
    )


def make_handler(latency_s: float) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """One handler for every path: aiohttp's low-level server, no router or middlewares.

    The stub's own cost per request is part of every client's measurement, so it is kept small.
    """
    body = completion_bytes()
    stats: dict[str, float] = {"count": 0, "first_at": 0.0, "last_at": 0.0}
    sleep = asyncio.sleep

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "POST" and request.path == "/v1/chat/completions":
            await request.read()
            now = time.time()
            if not stats["count"]:
                stats["first_at"] = now
            stats["count"] += 1
            stats["last_at"] = now
            if latency_s:
                await sleep(latency_s)
            return web.Response(body=body, content_type="application/json")
        if request.path == "/stats":
            return web.Response(body=orjson.dumps(stats), content_type="application/json")
        if request.path == "/stats/reset":
            stats.update(count=0, first_at=0.0, last_at=0.0)
            return web.Response(text="ok")
        return web.Response(status=404)

    return handle


async def serve(host: str, port: int, latency_s: float) -> None:
    server = web.Server(make_handler(latency_s), access_log=None)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(server, host, port, backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        listener.close()
        await server.shutdown(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args()
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:
        factory = asyncio.new_event_loop
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.host, args.port, args.latency))


if __name__ == "__main__":
    main()
