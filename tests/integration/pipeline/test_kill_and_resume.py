"""Kill a run mid-generation with SIGKILL, rerun it: every answer exactly once, nothing lost.

The models and the judge are a real HTTP OpenAI-compatible stub on loopback (``runtime: openai``),
so the test exercises the real CLI, client, stages and storage in a separate process without
needing llama.cpp; the slow llama.cpp test covers the real model server.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from factories import build_evalrun_yaml, model_entry
from kubejury.files.benchmark import load_benchmark
from kubejury.files.shards import read_rows
from kubejury.files.storage import LocalStorage, RunLayout

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
BENCHMARK = REPO / "examples" / "benchmark-ru-sample.jsonl"
MODELS = ("alpha", "beta")
SERIES = ("primary", "hot")


def _spec(base_url: str) -> str:
    return build_evalrun_yaml(
        "resume",
        benchmark=BENCHMARK.as_uri(),
        models=[model_entry(m, base_url, runtime="openai", servedModel=f"stub-{m}") for m in MODELS],
        judges=[model_entry("judge-one", base_url, runtime="openai")],
        series=[
            {"name": "primary", "temperature": 0, "repetitionPenalty": 1.2},
            {"name": "hot", "temperature": 0.8, "repetitionPenalty": 1.2},
        ],
        scoring={"bootstrapSamples": 50},
        concurrency={"requestsPerEndpoint": 2, "maxAttempts": 2},
    )


def _kubejury(*args: str) -> list[str]:
    return [sys.executable, "-m", "kubejury.cli", *args]


def _answer_keys(store: LocalStorage, layout: RunLayout) -> dict[tuple[str, str], list[str]]:
    """Every stored answer record's question id, raw from the shards (no de-duplication)."""
    out: dict[tuple[str, str], list[str]] = {}
    for s in SERIES:
        for m in MODELS:
            out[(s, m)] = [r["question_id"] for r in read_rows(store, layout.answers_prefix(s, m))]
    return out


def test_sigkill_mid_generation_then_rerun_gives_every_answer_exactly_once(
    tmp_path: Path, stub_server: Any
) -> None:
    stub_server.latency_s = 0.05
    spec = tmp_path / "resume.yaml"
    spec.write_text(_spec(stub_server.base_url), encoding="utf-8")
    out = tmp_path / "out"
    store, layout = LocalStorage(out), RunLayout("resume")
    question_ids = set(load_benchmark(BENCHMARK).ids)
    expected_total = len(question_ids) * len(MODELS) * len(SERIES)

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(
        _kubejury("run", str(spec), "--out", str(out), "--no-progress"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stored = sum(len(v) for v in _answer_keys(store, layout).values()) if out.exists() else 0
            if stored:
                break
            assert first.poll() is None, "the run finished before it could be killed"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
    finally:
        first.wait(30)
    assert first.returncode == -signal.SIGKILL

    after_kill = _answer_keys(store, layout)
    stored_at_kill = sum(len(v) for v in after_kill.values())
    assert 0 < stored_at_kill < expected_total, "the kill must land mid-generation"
    assert not list(out.glob(f"{layout.report_prefix}/*")), "no report from a killed run"

    second = subprocess.run(
        _kubejury("run", str(spec), "--out", str(out), "--no-progress"),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr[-3000:]

    final = _answer_keys(store, layout)
    for key, ids in final.items():
        counts = collections.Counter(ids)
        duplicated = [q for q, n in counts.items() if n > 1]
        assert not duplicated, f"{key}: duplicated answers {duplicated[:5]}"
        assert set(ids) == question_ids, f"{key}: missing {sorted(question_ids - set(ids))[:5]}"
    # Answers stored before the kill were kept, not asked again.
    for key, ids in after_kill.items():
        assert set(ids) <= set(final[key])

    for s in SERIES:
        judged = [
            (r["question_id"], r["model"]) for r in read_rows(store, layout.judgments_prefix(s, "judge-one"))
        ]
        assert len(judged) == len(set(judged)) == len(question_ids) * len(MODELS)
        folders = [*(layout.answers_prefix(s, m) for m in MODELS), layout.judgments_prefix(s, "judge-one")]
        for folder in folders:  # each completed stage compacted its shards, the resumed ones too
            assert len(store.shard_keys(folder)) == 1, folder
    report = out / layout.report_prefix / "report.html"
    assert report.is_file()
    assert str(report) in second.stdout
