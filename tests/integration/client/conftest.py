"""Fixtures for the client/stage fault tests: a fault-injecting OpenAI-compatible server on loopback and file storage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kubejury.config.spec import ModelSpec, Series
from kubejury.files.benchmark import Question
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.inference.client import ChatClient, ClientSettings
from kubejury.testing.fault_server import FaultServer

FAST = ClientSettings(
    max_in_flight=8, max_attempts=4, backoff_initial_s=0.001, backoff_max_s=0.005, request_timeout_s=5
)


def make_questions(n: int) -> list[Question]:
    return [
        Question(
            id=f"q{i:03d}",
            domain=f"d{i % 4}",
            level=1 + i % 3,
            question=f"Вопрос номер {i}?",
            reference=f"Ответ {i}.",
        )
        for i in range(n)
    ]


@pytest.fixture
def questions() -> list[Question]:
    return make_questions(40)


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "store")


@pytest.fixture
def layout() -> RunLayout:
    return RunLayout("run1")


@pytest.fixture
def model() -> ModelSpec:
    return ModelSpec(
        name="qwen-test", runtime="vllm", source="http://127.0.0.1:1/v1", served_model="Qwen/Qwen3-8B"
    )


@pytest.fixture
def series() -> Series:
    return Series(name="primary", temperature=0.0, repetition_penalty=1.2, max_tokens=64, seed=1)


@pytest.fixture
def fast() -> ClientSettings:
    return FAST


@pytest.fixture
async def server() -> AsyncIterator[FaultServer]:
    async with FaultServer() as srv:
        yield srv


@pytest.fixture
async def client(server: FaultServer) -> AsyncIterator[ChatClient]:
    async with ChatClient(server.base_url, settings=FAST, runtime="vllm") as c:
        yield c
