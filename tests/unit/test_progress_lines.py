"""Plain progress lines for output that is not a terminal: what a line says and when lines come."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from kubejury.stages.progress import RichProgressView
from kubejury.stages.progress_lines import (
    Heartbeat,
    LineProgressView,
    default_interval,
    format_duration,
    progress_line,
    progress_view,
)


def _record(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "stage": "judge",
        "series": "primary",
        "name": "judge-a",
        "total": 40,
        "done": 10,
        "errors": 1,
        "parse_failures": 0,
        "rate_per_s": 0.5,
        "state": "running",
        "message": "",
    }
    record.update(overrides)
    return record


def test_a_running_stage_line_has_done_total_rate_errors_and_eta() -> None:
    line = progress_line(_record())
    assert line == "progress judge primary/judge-a: 10/40 (25%), 0.50/s, 1 errors, ETA 1m00s"


def test_eta_is_unknown_before_the_first_answer_and_unparsed_replies_are_counted() -> None:
    assert progress_line(_record(done=0, rate_per_s=0.0)).endswith("ETA unknown")
    assert "3 unparsed" in progress_line(_record(parse_failures=3))


def test_an_ended_stage_says_how_it_ended() -> None:
    line = progress_line(_record(done=40, state="succeeded"), elapsed_s=125)
    assert line.endswith("succeeded after 2m05s") and "ETA" not in line
    failed = progress_line(_record(state="failed", message="server gone"))
    assert failed.endswith("failed: server gone")


def test_durations() -> None:
    assert [format_duration(s) for s in (0, 59.4, 61, 3600 + 7 * 60)] == ["0s", "59s", "1m01s", "1h07m"]


def test_the_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEJURY_PROGRESS_INTERVAL", raising=False)
    assert default_interval() == 10.0
    monkeypatch.setenv("KUBEJURY_PROGRESS_INTERVAL", "0.5")
    assert default_interval() == 0.5
    monkeypatch.setenv("KUBEJURY_PROGRESS_INTERVAL", "soon")
    assert default_interval() == 10.0


def test_active_stages_get_a_line_every_interval_and_ended_ones_one_last_line() -> None:
    out = io.StringIO()
    with LineProgressView(interval=0.05, stream=out) as view:
        view.update(_record(name="judge-a"))
        view.update(_record(name="judge-b", done=3))
        time.sleep(0.3)
        view.update(_record(name="judge-a", done=40, state="succeeded"))
        view.update(_record(name="judge-a", done=40, state="succeeded"))  # said once
        out.truncate(0)
        out.seek(0)
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines and all("judge-b" in line for line in lines)  # judge-a has ended: no more lines
    assert len(lines) >= 2  # one per interval


def test_the_end_of_a_stage_is_printed_at_once_even_between_intervals() -> None:
    out = io.StringIO()
    with LineProgressView(interval=60, stream=out) as view:
        view.update(_record())
        assert out.getvalue() == ""
        view.update(_record(done=40, state="succeeded"))
    assert out.getvalue().count("succeeded") == 1


def test_heartbeat_says_the_work_is_still_running() -> None:
    out = io.StringIO()
    with Heartbeat("aggregate quickstart", interval=0.05, stream=out):
        time.sleep(0.2)
    assert "progress aggregate quickstart: running for 0s" in out.getvalue()


def test_bars_on_a_terminal_lines_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress_view(stream=Terminal()), RichProgressView)
    assert isinstance(progress_view(stream=io.StringIO()), LineProgressView)
    assert isinstance(progress_view(stream=io.StringIO(), bars=True), RichProgressView)
