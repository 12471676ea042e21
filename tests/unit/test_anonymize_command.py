"""``kubejury anonymize``: stdin in, the judge's view on stdout, every replaced span on stderr."""

from __future__ import annotations

import io

import pytest

from kubejury.cli import main
from kubejury.judging.anonymize import Scrubber


def run(text: str, *args: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    return main(["anonymize", *args])


def test_prints_what_the_judging_stage_would_send(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "<think>hm</think>I am Qwen, created by Alibaba Cloud.\nSee the my-model-7b card. Windows Server was developed by Microsoft."
    assert run(text, "--names", "my-model-7b, other", monkeypatch=monkeypatch) == 0
    out, err = capsys.readouterr()
    assert out == Scrubber(["my-model-7b", "other"]).scrub(text)  # the same function the stage uses
    assert out == (
        "I am [model], created by [model].\nSee the [model] card. Windows Server was developed by Microsoft."
    )
    assert err.splitlines() == [
        "0-17 metadata: '<think>hm</think>' -> (removed)",
        "22-26 self-identification: 'Qwen' -> [model]",
        "39-52 self-identification: 'Alibaba Cloud' -> [model]",
        "62-73 run model name: 'my-model-7b' -> [model]",
    ]


def test_an_answer_without_self_identification_is_printed_as_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "I'm using the CAPM model, so the cost of equity is 9%.\n"
    assert run(text, monkeypatch=monkeypatch) == 0
    out, err = capsys.readouterr()
    assert out == text
    assert err == "nothing replaced\n"


def test_input_that_is_not_utf8_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"I am Qwen.\xff")))
    assert main(["anonymize"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "kubejury anonymize: error: stdin: not valid UTF-8 at byte offset 10\n"
