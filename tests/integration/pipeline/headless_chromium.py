"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for the report tests.

A small client, not a test module: it starts the browser with a fresh profile and no network
features (the machine has no internet), opens one page target and talks to it over its DevTools
websocket (aiohttp's client). Console messages, uncaught exceptions and log entries are collected
as they arrive, so a test can require that a page produced none of level "error".
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
)


@dataclass
class Page:
    """One page target: send commands, await their results, keep every event."""

    ws: aiohttp.ClientWebSocketResponse
    events: list[dict[str, Any]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _pending: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    _waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = field(default_factory=list)

    async def pump(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            self.events.append(data)
            for method, waiter in list(self._waiters):
                if data.get("method") == method and not waiter.done():
                    waiter.set_result(data)
                    self._waiters.remove((method, waiter))

    async def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params or {}}))
        reply = await asyncio.wait_for(future, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def expect(self, method: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next event named ``method`` (register it before causing the event)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((method, future))
        return future

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (promises are awaited)."""
        result = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def open(self, url: str, *, width: int, height: int) -> None:
        """Set the viewport (a phone-like one below 600 px) and load ``url`` completely."""
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        )
        loaded = self.expect("Page.loadEventFired")
        await self.send("Page.navigate", {"url": url})
        await asyncio.wait_for(loaded, 60)

    async def screenshot(self, path: Path) -> None:
        """A PNG of the whole page (not only the viewport)."""
        data = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(data["data"]))

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append(str(params.get("exceptionDetails", {}).get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        return found


def _wait_for_port(profile: Path, process: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """The DevTools port Chromium chose (``--remote-debugging-port=0`` writes it into the profile)."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with code {process.returncode}")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        time.sleep(0.1)
    raise RuntimeError("chromium did not open its DevTools port in time")


@contextlib.asynccontextmanager
async def chromium_page(workdir: Path) -> AsyncIterator[Page]:
    """Start Chromium with a fresh profile under ``workdir``, yield one page, always stop the browser."""
    if not CHROMIUM.is_file():
        raise RuntimeError(
            "Debian's chromium is not installed: run `make chromium` (apt-get install chromium)"
        )
    profile = workdir / "chromium-profile"
    profile.mkdir(parents=True)
    log = (workdir / "chromium.log").open("wb")
    process = subprocess.Popen(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its helper processes share our new group, stopped together below
    )
    pump: asyncio.Task[None] | None = None
    try:
        port = await asyncio.to_thread(_wait_for_port, profile, process)
        async with aiohttp.ClientSession() as session:
            async with session.put(f"http://127.0.0.1:{port}/json/new?about:blank") as response:
                target = await response.json(content_type=None)
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                pump = asyncio.create_task(page.pump())
                for domain in ("Page", "Runtime", "Log"):
                    await page.send(f"{domain}.enable")
                yield page
    finally:
        if pump is not None:
            pump.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()
