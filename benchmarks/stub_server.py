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
import time

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


def make_app(latency_s: float) -> web.Application:
    body = completion_bytes()
    stats: dict[str, float] = {"count": 0, "first_at": 0.0, "last_at": 0.0}

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        now = time.time()
        if not stats["count"]:
            stats["first_at"] = now
        stats["count"] += 1
        stats["last_at"] = now
        if latency_s:
            await asyncio.sleep(latency_s)
        return web.Response(body=body, content_type="application/json")

    async def get_stats(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(stats), content_type="application/json")

    async def reset(request: web.Request) -> web.Response:
        stats.update(count=0, first_at=0.0, last_at=0.0)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/stats", get_stats)
    app.router.add_post("/stats/reset", reset)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(
        make_app(args.latency), host=args.host, port=args.port, access_log=None, print=None, backlog=4096
    )


if __name__ == "__main__":
    main()
