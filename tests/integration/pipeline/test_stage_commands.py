"""The operator's view: ``kubejury generate|judge|aggregate`` as separate processes, sharded generation."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from factories import build_evalrun_yaml, model_entry
from kubejury.files.shards import read_rows
from kubejury.files.storage import LocalStorage, RunLayout

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _kubejury(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "kubejury.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


SAMPLE = (REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()


def _stub_spec(tmp_path: Path, name: str, **spec: Any) -> Path:
    """An EvalRun with one vLLM model and one judge over the whole sample benchmark, stored under tmp_path/out."""
    path = tmp_path / f"{name}.yaml"
    text = build_evalrun_yaml(
        name,
        benchmark=SAMPLE,
        models=[model_entry("m1", runtime="vllm")],
        judges=[model_entry("j1", runtime="vllm")],
        storage={"uri": (tmp_path / "out").as_uri()},
        **spec,
    )
    path.write_text(text, encoding="utf-8")
    return path


def test_sharded_generation_then_judge_then_aggregate(tmp_path: Path, stub_server: Any) -> None:
    spec = _stub_spec(tmp_path, "staged", scoring={"bootstrapSamples": 50})
    # Three completions of an Indexed Job; the endpoint comes from the environment like in a Pod.
    for index in range(3):
        done = _kubejury(
            "generate",
            "--evalrun",
            str(spec),
            "--series",
            "primary",
            "--model",
            "m1",
            "--shards",
            "3",
            env={"JOB_COMPLETION_INDEX": str(index), "KUBEJURY_ENDPOINT": stub_server.base_url},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "generate primary/m1" in done.stdout
    store, layout = LocalStorage(tmp_path / "out"), RunLayout("staged")
    ids = [r["question_id"] for r in read_rows(store, layout.answers_prefix("primary", "m1"))]
    assert len(ids) == 96 and max(collections.Counter(ids).values()) == 1
    # Each completion keeps its own progress record (the operator merges them); none overwrites another.
    shard_records = [
        store.read_json(layout.progress_key("primary", "generate", "m1", (index, 3))) for index in range(3)
    ]
    assert [r["done"] for r in shard_records] == [32, 32, 32]
    assert not store.exists(layout.progress_key("primary", "generate", "m1"))

    judged = _kubejury("judge", "--evalrun", str(spec), "--judge", "j1", "--endpoint", stub_server.base_url)
    assert judged.returncode == 0, judged.stderr[-2000:]
    assert len(list(read_rows(store, layout.judgments_prefix("primary", "j1")))) == 96

    aggregated = _kubejury("aggregate", "--evalrun", str(spec))
    assert aggregated.returncode == 0, aggregated.stderr[-2000:]
    assert (tmp_path / "out" / "staged" / "report" / "report.html").is_file()


def test_unreachable_endpoint_exits_3_and_keeps_nothing_half_done(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    down = model_entry("m1", "http://127.0.0.1:9/v1", runtime="openai")
    text = build_evalrun_yaml(
        "down",
        benchmark={"uri": SAMPLE, "filters": {"limitPerCell": 1, "domains": ["law"]}},
        models=[down],
        judges=[{**down, "name": "j1"}],
        concurrency={"maxAttempts": 1},
        storage={"uri": (tmp_path / "out").as_uri()},
    )
    spec.write_text(text, encoding="utf-8")
    done = _kubejury("generate", "--evalrun", str(spec))
    assert done.returncode == 3, done.stderr[-2000:]
    assert "could not be reached" in done.stderr
    store, layout = LocalStorage(tmp_path / "out"), RunLayout("down")
    assert list(read_rows(store, layout.answers_prefix("primary", "m1"))) == []
    progress = store.read_json(layout.progress_key("primary", "generate", "m1"))
    assert progress["state"] == "failed"


def test_sigterm_flushes_what_is_done_and_a_rerun_finishes_the_rest(tmp_path: Path, stub_server: Any) -> None:
    """A Pod being stopped gets SIGTERM: the stage writes its buffered answers before it exits."""
    import os
    import signal
    import time

    server = stub_server
    server.latency_s = 0.1  # 96 questions, 4 in flight: about 2.5 s of work
    spec = _stub_spec(tmp_path, "term", concurrency={"requestsPerEndpoint": 4})
    args = [sys.executable, "-m", "kubejury.cli", "generate", "--evalrun", str(spec), "--model", "m1"]
    env = {**os.environ, "KUBEJURY_ENDPOINT": server.base_url}
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while server.requests < 12 and time.monotonic() < deadline:  # some answers done, none flushed yet
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr[-2000:]
    assert "SIGTERM" in stderr
    store, layout = LocalStorage(tmp_path / "out"), RunLayout("term")
    prefix = layout.answers_prefix("primary", "m1")
    stored = [r["question_id"] for r in read_rows(store, prefix)]
    # Fewer than the shard size (500) and well within the 5 s flush interval: only the
    # SIGTERM path can have written these.
    assert 0 < len(stored) < 96

    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    final = [r["question_id"] for r in read_rows(store, prefix)]
    assert len(final) == 96 and max(collections.Counter(final).values()) == 1
