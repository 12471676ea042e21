"""The real thing: the embedded Gemma-3 270M on a real llama-cpp-python server, end to end.

Slow (minutes on 2 cores): a tiny EvalRun through ``kubejury run``; a run killed outright must not
leave its llama.cpp server behind; and the prompt-injection set through the embedded judge.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubejury.config.spec import JudgeSpec
from kubejury.files.shards import read_rows
from kubejury.files.storage import LocalStorage, RunLayout

pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (make venv builds the portable wheel)")

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def prefix_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check the pipeline, the servers' lifecycle and the injection set, not that a
    reply depends only on its request: their servers keep llama-cpp-python's prompt-prefix reuse
    (``KUBEJURY_LLAMA_REUSE_PREFIX=1``, judging 1.5–2× faster; docs/local-mode.md). The default,
    every prompt evaluated whole, is what test_reuse_local.py runs and depends on."""
    monkeypatch.setenv("KUBEJURY_LLAMA_REUSE_PREFIX", "1")


REPO = Path(__file__).resolve().parents[3]

TINY = f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: tiny
spec:
  benchmark:
    uri: {(REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()}
    filters:
      domains: [finance, devops]
      limitPerCell: 1
  models:
    - name: gemma
      runtime: llamacpp
      maxModelLen: 2048
  judges:
    - name: judge-strict
      runtime: llamacpp
      promptVariant: strict
      maxModelLen: 2048
    - name: judge-lenient
      runtime: llamacpp
      promptVariant: lenient
      maxModelLen: 2048
  series:
    - name: primary
      temperature: 0
      repetitionPenalty: 1.2
      maxTokens: 48
  judging:
    maxTokens: 96
  scoring:
    bootstrapSamples: 100
  concurrency:
    requestsPerEndpoint: 2
"""

_URL = re.compile(r"started llama\.cpp server for \S+ at http://127\.0\.0\.1:(\d+)/v1")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_tiny_run_end_to_end_and_server_stopped(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "kubejury.cli", "run", str(spec), "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ports = [int(p) for p in _URL.findall(proc.stderr)]
    assert len(ports) == 1, "one server shared by the model and both judges"
    assert not _port_open(ports[0]), "the server is stopped after the run"

    store, layout = LocalStorage(out), RunLayout("tiny")
    answers = list(read_rows(store, layout.answers_prefix("primary", "gemma")))
    assert len(answers) == 6 and all(a["error"] is None and a["answer"] for a in answers)
    for judge in ("judge-strict", "judge-lenient"):
        judgments = list(read_rows(store, layout.judgments_prefix("primary", judge)))
        assert len(judgments) == 6
        for j in judgments:
            assert (j["score"] is not None and 0 <= j["score"] <= 10) or (j["score"] is None and j["error"])
    assert (out / layout.report_prefix / "report.html").is_file()
    assert "gemma" in proc.stdout


CROSS = f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: cross
spec:
  benchmark:
    uri: {(REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()}
    filters:
      domains: [finance]
      limitPerCell: 1
  models:
    - name: gemma
      runtime: llamacpp
      maxModelLen: 2048
    - name: smol
      runtime: llamacpp
      source: embedded://smollm2-135m-instruct-q4_1
      maxModelLen: 2048
  judges:
    - name: judge-gemma
      runtime: llamacpp
      sameAs: gemma
      maxModelLen: 2048
    - name: judge-smol
      runtime: llamacpp
      source: embedded://smollm2-135m-instruct-q4_1
      sameAs: smol
      maxModelLen: 2048
  series:
    - name: primary
      temperature: 0
      repetitionPenalty: 1.2
      maxTokens: 32
  judging:
    maxTokens: 96
  scoring:
    bootstrapSamples: 100
"""


def test_two_embedded_models_answer_and_judge_each_other_on_their_own_servers(tmp_path: Path) -> None:
    """The quickstart's shape, small: Gemma and SmolLM2 each answer, and each judges both."""
    spec = tmp_path / "cross.yaml"
    spec.write_text(CROSS, encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "kubejury.cli", "run", str(spec), "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ports = [int(p) for p in _URL.findall(proc.stderr)]
    assert len(ports) == 2, "one server per model, shared with the judge that is that model"
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in proc.stderr
    assert not any(_port_open(port) for port in ports)

    store, layout = LocalStorage(out), RunLayout("cross")
    for model in ("gemma", "smol"):
        answers = list(read_rows(store, layout.answers_prefix("primary", model)))
        assert len(answers) == 3 and all(a["error"] is None and a["answer"] for a in answers)
    for judge in ("judge-gemma", "judge-smol"):
        judgments = list(read_rows(store, layout.judgments_prefix("primary", judge)))
        assert len(judgments) == 6  # both models' answers
        assert {j["model"] for j in judgments} == {"gemma", "smol"}
    report = json.loads((out / layout.report_prefix / "report.json").read_text(encoding="utf-8"))
    assert "Significance" in proc.stdout
    assert report["series"]["primary"]["self_preference"], "each judge is an evaluated model"


def test_killed_run_does_not_leave_its_server_behind(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.replace("name: tiny", "name: killed"), encoding="utf-8")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubejury.cli",
            "run",
            str(spec),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    port = None
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 600
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            match = _URL.search(line)
            if match:
                port = int(match.group(1))
        assert port is not None, "the run never started its server"
        assert _port_open(port)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    deadline = time.monotonic() + 30
    while _port_open(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _port_open(port), "llama.cpp server outlived the killed run"


def test_prompt_injection_set_through_embedded_judge(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import adversarial

    from kubejury.local.server import local_servers

    judge = JudgeSpec(name="embedded-judge", runtime="llamacpp", max_model_len=2048)
    with local_servers([judge]) as urls:
        results = asyncio.run(adversarial.judge_cases(LocalStorage(tmp_path), urls[judge.name], judge=judge))
    print("\n" + adversarial.markdown(results))
    assert set(results) == set(adversarial.CASES)
    for result in results.values():
        assert len(result.scores) == len(adversarial.QUESTION_IDS)
        assert all(s is None or 0 <= s <= 10 for s in result.scores)


def test_ctrl_c_stops_the_run_and_its_server(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.replace("name: tiny", "name: interrupted"), encoding="utf-8")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubejury.cli",
            "run",
            str(spec),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    port = None
    while port is None:
        line = proc.stderr.readline()
        if not line:
            break
        match = _URL.search(line)
        if match:
            port = int(match.group(1))
    assert port is not None, "the run never started its server"
    time.sleep(5)  # generation is under way
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(60) == 130
    assert "run the same command again to resume" in rest
    assert not _port_open(port)
