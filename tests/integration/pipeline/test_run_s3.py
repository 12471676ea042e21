"""A whole local run writing to S3 (a real moto S3 server on loopback) instead of a directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from factories import build_evalrun_yaml, model_entry
from kubejury.cli import main
from kubejury.files.shards import read_rows
from kubejury.files.storage import RunLayout, open_storage

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def test_run_with_s3_output(
    tmp_path: Path, bucket: str, stub_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s3run.yaml"
    stub = model_entry("m1", stub_server.base_url, runtime="openai")
    text = build_evalrun_yaml(
        "s3run",
        benchmark={
            "uri": (REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri(),
            "filters": {"limitPerCell": 1},
        },
        models=[stub],
        judges=[{**stub, "name": "j1"}],
        scoring={"bootstrapSamples": 50},
    )
    spec.write_text(text, encoding="utf-8")
    code = main(["run", str(spec), "--out", f"s3://{bucket}/results", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    store, layout = open_storage(f"s3://{bucket}/results"), RunLayout("s3run")
    answers = list(read_rows(store, layout.answers_prefix("primary", "m1")))
    judgments = list(read_rows(store, layout.judgments_prefix("primary", "j1")))
    assert len(answers) == 48 and len(judgments) == 48
    keys = store.list("s3run/")
    for name in ("report.html", "report.md", "report.json"):
        assert f"s3run/report/{name}" in keys
    assert store.exists("s3run/spec.json")
    assert store.exists(layout.progress_key("primary", "generate", "m1"))
    aggregate_progress = store.read_json(layout.run_progress_key("aggregate", "report"))
    assert aggregate_progress["state"] == "succeeded" and aggregate_progress["done"] == 1
    assert f"s3://{bucket}/results/s3run/report/report.html" in captured.out
