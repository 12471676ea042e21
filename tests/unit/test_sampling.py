"""Per-runtime spelling of a series' sampling parameters."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from kubejury.inference.sampling import SamplingParams, request_fields, reset_warnings

STUDY = SamplingParams(temperature=0.0, top_p=0.95, repetition_penalty=1.2, max_tokens=1024, seed=42)


def test_vllm_top_level_repetition_penalty() -> None:
    fields = request_fields("vllm", STUDY)
    assert fields == {
        "temperature": 0.0,
        "top_p": 0.95,
        "max_tokens": 1024,
        "seed": 42,
        "repetition_penalty": 1.2,
    }


def test_llamacpp_repeat_penalty() -> None:
    fields = request_fields("llamacpp", STUDY)
    assert fields["repeat_penalty"] == 1.2
    assert "repetition_penalty" not in fields


def test_ollama_options_repeat_penalty() -> None:
    fields = request_fields("ollama", STUDY)
    assert fields["options"] == {"repeat_penalty": 1.2}
    assert "repeat_penalty" not in fields and "repetition_penalty" not in fields
    assert fields["temperature"] == 0.0


def test_openai_drops_penalty_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    reset_warnings()
    with caplog.at_level(logging.WARNING, logger="kubejury.inference.sampling"):
        first = request_fields("openai", STUDY, model="deepseek-chat")
        second = request_fields("openai", STUDY, model="deepseek-chat")
    assert first == second == {"temperature": 0.0, "top_p": 0.95, "max_tokens": 1024, "seed": 42}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "deepseek-chat" in messages[0] and "repetition_penalty" in messages[0]


def test_unset_fields_are_not_sent() -> None:
    assert request_fields("vllm", SamplingParams()) == {}
    assert request_fields("ollama", SamplingParams(temperature=0.8)) == {"temperature": 0.8}


def test_unknown_runtime() -> None:
    with pytest.raises(ValueError, match="unknown runtime"):
        request_fields("tgi", STUDY)


def test_from_series_reads_camel_and_snake_case() -> None:
    @dataclass
    class Camel:
        temperature: float = 0.8
        topP: float | None = None
        repetitionPenalty: float = 1.05
        maxTokens: int = 512
        seed: int | None = 3

    @dataclass
    class Snake:
        temperature: float = 0
        top_p: float = 1.0
        repetition_penalty: float = 1.2
        max_tokens: int = 10
        seed: None = None

    assert SamplingParams.from_series(Camel()) == SamplingParams(0.8, None, 1.05, 512, 3)
    assert SamplingParams.from_series(Snake()) == SamplingParams(0.0, 1.0, 1.2, 10, None)
