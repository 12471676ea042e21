"""Progress reaches logs: with stdout a pipe (a CI log, ``kubectl logs`` of a Job), the commands print
plain progress lines instead of drawing bars.

Separate processes with stdout captured through a pipe — not a terminal — against the loopback
OpenAI-compatible stub (each request takes a few tens of milliseconds), with the line interval set
to 0.2 s through KUBEJURY_PROGRESS_INTERVAL instead of the default 10 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
LINE = re.compile(
    r"^progress (?P<stage>generate|judge) primary/(?P<name>\S+): (?P<done>\d+)/(?P<total>\d+) \(\d+%\), "
    r"(?P<rate>[\d.]+)/s, (?P<errors>\d+) errors, (?P<tail>.*)$",
    re.MULTILINE,
)


def _spec(tmp_path: Path, base_url: str) -> Path:
    spec = tmp_path / "lines.yaml"
    spec.write_text(
        f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: lines
spec:
  benchmark:
    uri: {(REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()}
    filters:
      limitPerCell: 1
  models:
    - name: m1
      runtime: openai
      source: {base_url}
  judges:
    - name: j1
      runtime: openai
      source: {base_url}
  scoring:
    bootstrapSamples: 50
  concurrency:
    requestsPerEndpoint: 1
  storage:
    uri: {(tmp_path / "out").as_uri()}
""",
        encoding="utf-8",
    )
    return spec


def _kubejury(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubejury.cli", *args],
        capture_output=True,  # stdout is a pipe: not a terminal
        text=True,
        timeout=300,
        env={**os.environ, "KUBEJURY_PROGRESS_INTERVAL": "0.2"},
    )


def test_generate_then_judge_print_lines_with_done_total_rate_errors_and_eta(
    tmp_path: Path, stub_server: Any
) -> None:
    spec = str(_spec(tmp_path, stub_server.base_url))
    generated = _kubejury("generate", "--evalrun", spec)
    assert generated.returncode == 0, generated.stderr[-2000:]
    lines = [m.groupdict() for m in LINE.finditer(generated.stdout)]
    running = [line for line in lines if line["tail"].startswith("ETA")]
    assert len(running) >= 2, generated.stdout  # 48 requests of ~30 ms each, one at a time
    assert all(line["stage"] == "generate" and line["total"] == "48" for line in lines)
    done = [int(line["done"]) for line in running]
    assert done == sorted(done) and done[0] < 48
    assert lines[-1]["tail"].startswith("succeeded after") and lines[-1]["done"] == "48"
    assert "\x1b[" not in generated.stdout  # no terminal control sequences in a log

    judged = _kubejury("judge", "--evalrun", spec)
    assert judged.returncode == 0, judged.stderr[-2000:]
    judge_lines = [m.groupdict() for m in LINE.finditer(judged.stdout)]
    assert {line["stage"] for line in judge_lines} == {"judge"}
    assert any(line["tail"].startswith("ETA") for line in judge_lines)


def test_run_prints_lines_for_each_stage_and_no_lines_with_no_progress(
    tmp_path: Path, stub_server: Any
) -> None:
    spec = str(_spec(tmp_path, stub_server.base_url))
    done = _kubejury("run", spec, "--out", str(tmp_path / "a"))
    assert done.returncode == 0, done.stderr[-2000:]
    stages = {(m["stage"], m["name"]) for m in LINE.finditer(done.stdout)}
    assert stages == {("generate", "m1"), ("judge", "j1")}
    assert "\x1b[" not in done.stdout

    quiet = _kubejury("run", spec, "--out", str(tmp_path / "b"), "--no-progress")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not LINE.search(quiet.stdout)
