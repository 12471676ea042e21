"""A tiny OpenAI-compatible chat server for the e2e tests (stands in for vLLM and a hosted judge).

It answers as whatever ``model`` a request names: questions get a short deterministic answer
whose quality (and therefore the judges' score) depends on the model, so the ranking in the final
report is predictable; judge prompts (recognised by a ``response_format`` or a ``[[N]]``
instruction) get a JSON verdict. It also serves ``/health`` like vLLM. The control-plane harness runs one per model-server Service,
each on its own loopback address (``kubelet_runner.StubServices``). Requests are counted per
model so tests can check who was asked, and every prompt answered with a verdict is kept, so tests
can check which answers were judged (an answer carries its model's ``quality=N`` mark).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import re
import time
from typing import Any

from aiohttp import web

_MARK = re.compile(r"quality=(\d+)")


class StubOpenAI:
    def __init__(
        self,
        quality: dict[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        answer_seconds: float = 0.0,
    ) -> None:
        self.quality = dict(quality or {})
        self.answer_seconds = answer_seconds  # each reply waits this long, like a model decoding
        self.requests: collections.Counter[str] = collections.Counter()
        self.judge_prompts: list[str] = []  # every prompt answered with a verdict, in order
        self._runner: web.AppRunner | None = None
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> StubOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the port the OS chose for port 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async def _chat(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        model = str(body.get("model"))
        self.requests[model] += 1
        if self.answer_seconds > 0:
            await asyncio.sleep(self.answer_seconds)
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        if body.get("response_format") or "[[" in prompt:
            self.judge_prompts.append(prompt)
            content = self._verdict(prompt)
        else:
            quality = self.quality.get(model, 5)
            digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
            content = f"Краткий ответ ({digest}). quality={quality}"
        usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(content) // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return web.json_response(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    @staticmethod
    def _verdict(prompt: str) -> str:
        marks = _MARK.findall(prompt)
        score = int(marks[-1]) if marks else 5
        return json.dumps({"score": max(0, min(10, score)), "rationale": "stub verdict"})
