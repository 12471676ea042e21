"""``local_servers``' release: a budgeted run stops the local server of a decided model at once,
but never one that a judge or a model still asking shares (:class:`ServedUrls`)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubejury.local.server import LlamaServer, ServedUrls, ServerPlan


def running(path: str) -> LlamaServer:
    """A server whose process is a real child that would run for a minute."""
    server = LlamaServer(ServerPlan(model_path=Path(path), chat_format=None, n_ctx=512))
    server.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return server


@pytest.fixture
def servers() -> Iterator[list[LlamaServer]]:
    started = [running("/models/weak.gguf"), running("/models/shared.gguf")]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def test_only_a_server_no_needed_entry_uses_is_stopped(servers: list[LlamaServer]) -> None:
    weak, shared = servers
    weak_process, shared_process = weak.process, shared.process
    assert weak_process is not None and shared_process is not None
    served = ServedUrls(servers, {"weak": 0, "strong": 1, "judge": 1})
    assert set(served) == {"weak", "strong", "judge"}
    stopped = served.release({"judge"})  # strong stopped too, but the judge shares its server
    assert [plan.model_path.name for plan in stopped] == ["weak.gguf"]
    assert weak_process.poll() is not None and shared_process.poll() is None
    assert served.release({"judge"}) == []  # a stopped server is not stopped twice
