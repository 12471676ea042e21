"""``kubejury plan --estimate``: the JSON shape, the table's totals, and where the question count comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import build_evalrun_yaml, model_entry
from kubejury.cli import main

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"

OSS = {"source": "hf://openai/gpt-oss-120b", "parameters": "117B-A5.1B", "checkpoint": "mxfp4"}
MODELS = [
    model_entry("qwen3.5-27b", "hf://Qwen/Qwen3.5-27B", parameters="27B"),
    model_entry("gpt-oss-120b", **OSS),
]
JUDGES = [
    model_entry("judge-oss", **OSS, sameAs="gpt-oss-120b"),
    model_entry("deepseek", "https://api.deepseek.com/v1", runtime="openai"),
]

STAGE_KEYS = {
    "name",
    "stage",
    "requests",
    "prompt_tokens",
    "output_tokens",
    "gpus",
    "device",
    "precision",
    "hours",
    "gpu_hours",
    "batch",
    "bound",
    "note",
}
TOTAL_KEYS = {
    "prompt_tokens",
    "output_tokens",
    "gpu_hours_busy",
    "gpu_hours_held",
    "wall_hours",
    "answers_done_hours",
}


def write_run(tmp_path: Path, bench: str) -> Path:
    file = tmp_path / "run.yaml"
    spec = build_evalrun_yaml(
        "est",
        benchmark={"uri": bench, "language": "en"},
        storage={"uri": str(tmp_path / "out")},
        models=MODELS,
        judges=JUDGES,
    )
    file.write_text(spec, encoding="utf-8")
    return file


def write_benchmark(path: Path, count: int) -> None:
    rows = [
        {"id": f"q{i}", "domain": "law", "level": 1, "question": "Q" * 400, "reference": "R" * 800}
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_json_carries_stages_servers_and_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_benchmark(tmp_path / "bench.jsonl", 30)
    run = write_run(tmp_path, "bench.jsonl")
    args = ["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate", "--format", "json"]
    assert main(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"models", "estimate"}
    estimate = document["estimate"]
    assert set(estimate["totals"]) == TOTAL_KEYS
    assert [(s["name"], s["stage"]) for s in estimate["stages"]] == [
        ("qwen3.5-27b", "generation"),
        ("gpt-oss-120b", "generation"),
        ("judge-oss", "judging"),
        ("deepseek", "judging"),
    ]
    for entry in estimate["stages"]:
        assert set(entry) == STAGE_KEYS
    # counted from the local benchmark: 400 and 800 characters at 4 per token
    assert estimate["workload"]["questions"] == 30
    assert estimate["workload"]["mean_question_tokens"] == 100
    assert estimate["workload"]["mean_reference_tokens"] == 200
    assert estimate["stages"][0]["requests"] == 30  # one series
    assert estimate["totals"]["gpu_hours_held"] >= estimate["totals"]["gpu_hours_busy"] > 0
    assert estimate["not_estimated"] == ["deepseek (judging)"]
    assert [w["name"] for w in estimate["servers"]] == ["qwen3.5-27b", "gpt-oss-120b"]


def test_table_prints_the_estimate_and_its_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path, str(tmp_path / "missing.jsonl"))
    assert (
        main(["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate", "--questions", "1440"]) == 0
    )
    out = capsys.readouterr().out
    assert "Estimate: 1440 question(s)" in out
    assert "GPU-hours busy" in out and "GPU-hours held" in out and "wall time" in out
    assert "Not estimated: deepseek (judging)" in out
    assert "Model servers in the schedule" in out


def test_without_estimate_the_plan_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path, str(tmp_path / "missing.jsonl"))
    assert main(["plan", "--evalrun", str(run), "--nodes", str(NODES), "--format", "json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"models"}


def test_longer_answers_cost_more(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path, str(tmp_path / "missing.jsonl"))
    totals = []
    for answer in ("200", "1500"):
        args = ["plan", "--evalrun", str(run), "--nodes", str(NODES), "--format", "json", "--estimate"]
        assert main([*args, "--questions", "500", "--answer-tokens", answer]) == 0
        totals.append(json.loads(capsys.readouterr().out)["estimate"]["totals"])
    assert totals[1]["output_tokens"] > totals[0]["output_tokens"]
    assert totals[1]["gpu_hours_busy"] > totals[0]["gpu_hours_busy"]


def test_a_remote_benchmark_needs_a_question_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path, "s3://bucket/bench.jsonl")
    assert main(["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate"]) != 0
    err = capsys.readouterr().err
    assert "--questions" in err and "spec.benchmark.uri" in err


def test_a_missing_local_benchmark_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path, str(tmp_path / "missing.jsonl"))
    assert main(["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate"]) != 0
    assert "missing.jsonl" in capsys.readouterr().err


def test_question_count_must_be_positive(tmp_path: Path) -> None:
    run = write_run(tmp_path, "bench.jsonl")
    with pytest.raises(SystemExit):
        main(["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate", "--questions", "0"])


@pytest.mark.parametrize("nodes", sorted(p.name for p in NODES.parent.glob("*.json")))
def test_the_study_run_is_estimated_on_every_sample_node_list(
    nodes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    study = NODES.parents[1] / "evalrun-study.yaml"
    args = ["plan", "--evalrun", str(study), "--nodes", str(NODES.parent / nodes), "--format", "json"]
    assert main([*args, "--estimate", "--questions", "1440"]) == 0
    estimate = json.loads(capsys.readouterr().out)["estimate"]
    assert len(estimate["stages"]) == 16 + 3  # every model's generation, every judge's judging
    for stage in estimate["stages"]:
        assert stage["requests"] > 0 and stage["output_tokens"] > 0
        assert (stage["hours"] is None) == (stage["gpu_hours"] is None)
        assert stage["hours"] is not None or stage["note"]  # no time without a reason


def test_the_default_order_is_the_operators(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kubejury.config.spec import load_evalrun
    from kubejury.placement.estimate import bringup_plan
    from kubejury.placement.gpu_nodes import parse_node_list
    from kubejury.placement.planner import plan_placements

    study = NODES.parents[1] / "evalrun-study.yaml"
    args = ["plan", "--evalrun", str(study), "--nodes", str(NODES), "--format", "json", "--estimate"]
    # the operator orders by a nominal 1,000-question run with the default lengths
    assert main([*args, "--questions", "1000"]) == 0
    estimate = json.loads(capsys.readouterr().out)["estimate"]
    spec = load_evalrun(study).spec
    rule, order = bringup_plan(spec, plan_placements(spec, parse_node_list(json.loads(NODES.read_text()))))
    assert estimate["assumptions"]["bringup_order"] == rule
    assert estimate["bringup_order"] == [name for name in order if name in estimate["bringup_order"]]
