"""``kubejury export --format jsonl``: a run's shards (Parquet, and an older run's JSONL) as one
answers.jsonl and one judgments.jsonl, one record per key, readable by ``kubejury report``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubejury.cli import main
from kubejury.commands.export import open_run, stage_folders
from kubejury.errors import ConfigError
from kubejury.files.shards import write_records
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.files.tables import load_answers, load_judgments
from kubejury.records.results import AnswerRecord, JudgmentRecord, TokenUsage

LAYOUT = RunLayout("board")


def store_run(root: Path) -> LocalStorage:
    """Two series; a retried answer (an older JSONL shard holds the failure) and a retried judgment."""
    store = LocalStorage(root)
    for series in ("hot", "cold"):
        failed = AnswerRecord(
            question_id="q1", model="m", series=series, error="timeout", error_kind="timeout"
        )
        store.write_jsonl_shard(LAYOUT.answers_prefix(series, "m"), [failed.to_json()])
        answers = [
            AnswerRecord(question_id=q, model="m", series=series, answer=f"{q}!", usage=TokenUsage(3, 4))
            for q in ("q1", "q2")
        ]
        write_records(store, LAYOUT.answers_prefix(series, "m"), answers)
        judgments = [
            JudgmentRecord(question_id=q, model="m", series=series, judge="j", score=s, error=e)
            for q, s, e in (("q1", None, "HTTP 500"), ("q1", 6.0, None), ("q2", 8.0, None))
        ]
        write_records(store, LAYOUT.judgments_prefix(series, "j"), judgments)
    return store


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_export_writes_one_record_per_key_the_latest_final_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_run(tmp_path / "runs")
    assert (
        main(
            ["export", str(tmp_path / "runs" / "board"), "--format", "jsonl", "--out", str(tmp_path / "out")]
        )
        == 0
    )
    answers = read_lines(tmp_path / "out" / "answers.jsonl")
    judgments = read_lines(tmp_path / "out" / "judgments.jsonl")
    assert [(a["series"], a["question_id"], a["answer"]) for a in answers] == [
        ("cold", "q1", "q1!"),
        ("cold", "q2", "q2!"),
        ("hot", "q1", "q1!"),
        ("hot", "q2", "q2!"),
    ]
    assert [(j["series"], j["question_id"], j["score"]) for j in judgments] == [
        ("cold", "q1", 6.0),
        ("cold", "q2", 8.0),
        ("hot", "q1", 6.0),
        ("hot", "q2", 8.0),
    ]
    assert all(line["format"] == 2 for line in [*answers, *judgments])
    assert AnswerRecord.from_json(answers[0]).usage == TokenUsage(3, 4)
    assert "answers.jsonl (4 records)" in capsys.readouterr().out
    # What other tools and `kubejury report --judgments *.jsonl` read:
    assert len(load_judgments(tmp_path / "out" / "judgments.jsonl")) == 4
    assert len(load_answers(tmp_path / "out" / "answers.jsonl")) == 4


def test_the_run_s_stage_folders_are_found_by_listing(tmp_path: Path) -> None:
    store = store_run(tmp_path)
    store.write_json("board/hot/progress/generate-m.json", {})
    assert stage_folders(store, LAYOUT) == {
        "cold": {"answers": ["m"], "judgments": ["j"]},
        "hot": {"answers": ["m"], "judgments": ["j"]},
    }


def test_a_folder_without_records_or_a_bare_bucket_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    assert main(["export", str(tmp_path / "runs" / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert "no answers or judgments stored there" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="below the bucket"):
        open_run("s3://bucket")
    assert not (tmp_path / "out").exists()
