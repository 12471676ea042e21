"""``kubejury plan --estimate`` of a run with ``spec.reuse.from`` (issue 24): only what the copies
leave is estimated, beside the estimate without reuse and the GPU-hours saved.

The earlier run is stored in a tmp root with the engine's own writers (``store_finished_run``):
two models, two judges (one of them is also an evaluated model, ``sameAs``). The planned run adds
a third model and names the stored run in ``reuse.from``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import Entry, build_evalrun_yaml, model_entry, store_finished_run
from kubejury.cli import main

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"
QUESTIONS = 12

OSS = {"source": "hf://openai/gpt-oss-120b", "parameters": "117B-A5.1B", "checkpoint": "mxfp4"}
QWEN = {"source": "hf://Qwen/Qwen3.5-27B", "parameters": "27B"}
OLD = [model_entry("qwen3.5-27b", **QWEN), model_entry("gpt-oss-120b", **OSS)]
NEW = model_entry("phi-4", "hf://microsoft/phi-4", parameters="14B")
JUDGES = [model_entry("judge-oss", **OSS, sameAs="gpt-oss-120b"), model_entry("judge-qwen", **QWEN)]


def write_spec(
    tmp_path: Path, name: str, models: list[Entry], judges: list[Entry] = JUDGES, **fields: Any
) -> Path:
    file = tmp_path / f"{name}.yaml"
    bench = tmp_path / "bench.jsonl"
    if not bench.exists():
        rows = [
            {
                "id": f"q{i}",
                "domain": "law",
                "level": 1,
                "question": f"Question {i}? " + "Q" * 400,
                "reference": "R" * 800,
            }
            for i in range(QUESTIONS)
        ]
        bench.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    spec = build_evalrun_yaml(
        name,
        benchmark={"uri": str(bench), "language": "en"},
        storage={"uri": str(tmp_path / "runs")},
        models=models,
        judges=judges,
        **fields,
    )
    file.write_text(spec, encoding="utf-8")
    return file


Capture = pytest.CaptureFixture[str]


def plan_json(capsys: Capture, spec: Path, *extra: str) -> dict[str, Any]:
    args = ["plan", "--evalrun", str(spec), "--nodes", str(NODES), "--estimate", "--format", "json", *extra]
    assert main(args) == 0
    return dict(json.loads(capsys.readouterr().out))


def plan_table(capsys: Capture, spec: Path, *extra: str) -> str:
    """The table output, its runs of spaces and line breaks collapsed (rich wraps long lines)."""
    assert main(["plan", "--evalrun", str(spec), "--nodes", str(NODES), "--estimate", *extra]) == 0
    return " ".join(capsys.readouterr().out.split())


def stages_of(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(s["name"], s["stage"]): s for s in document["estimate"]["stages"]}


def grown_run(tmp_path: Path) -> Path:
    """The board run stored, and the grown run that reuses it."""
    store_finished_run(write_spec(tmp_path, "board", OLD), tmp_path / "runs")
    return write_spec(tmp_path, "board-grown", [*OLD, NEW], reuse={"from": ["board"]})


def test_copied_models_generate_nothing_and_judges_judge_only_the_new_answers(
    tmp_path: Path, capsys: Capture
) -> None:
    document = plan_json(capsys, grown_run(tmp_path))
    stages = stages_of(document)
    for old in ("qwen3.5-27b", "gpt-oss-120b"):
        assert stages[(old, "generation")]["requests"] == 0
        assert stages[(old, "generation")]["gpu_hours"] == 0
        assert f"{QUESTIONS} of {QUESTIONS} answers copied" in stages[(old, "generation")]["note"]
    assert stages[("phi-4", "generation")]["requests"] == QUESTIONS
    for judge in ("judge-oss", "judge-qwen"):
        assert stages[(judge, "judging")]["requests"] == QUESTIONS  # the new model's answers only
    servers = [w["name"] for w in document["estimate"]["servers"]]
    assert "qwen3.5-27b" not in servers  # its answers are all copied: no server brought up
    assert "gpt-oss-120b" in servers  # it serves judge-oss, which still judges phi-4's answers
    reuse = document["reuse"]
    assert reuse["sources"] == ["board"] and reuse["unreadable"] is None
    assert reuse["models"]["qwen3.5-27b"] == {
        "reused": QUESTIONS,
        "needed": QUESTIONS,
        "from_runs": {"board": QUESTIONS},
    }
    assert reuse["models"]["phi-4"]["reused"] == 0
    assert reuse["judges"]["judge-qwen"]["from_runs"] == {"board": 2 * QUESTIONS}


def test_the_estimate_without_reuse_is_the_whole_run_and_the_difference_is_saved(
    tmp_path: Path, capsys: Capture
) -> None:
    document = plan_json(capsys, grown_run(tmp_path))
    whole = plan_json(capsys, write_spec(tmp_path, "board-whole", [*OLD, NEW]))
    before = document["reuse"]["without_reuse"]
    assert before == whole["estimate"]["totals"]
    after = document["estimate"]["totals"]
    saved = document["reuse"]["saved"]
    assert saved["gpu_hours_busy"] == pytest.approx(
        before["gpu_hours_busy"] - after["gpu_hours_busy"], abs=2e-3
    )
    assert saved["gpu_hours_held"] == pytest.approx(
        before["gpu_hours_held"] - after["gpu_hours_held"], abs=2e-3
    )
    assert saved["gpu_hours_held"] > 0 and saved["gpu_hours_busy"] > 0
    assert after["output_tokens"] < before["output_tokens"]


def test_the_table_shows_copies_by_source_and_the_gpu_hours_saved(tmp_path: Path, capsys: Capture) -> None:
    spec = grown_run(tmp_path)
    out = plan_table(capsys, spec)
    assert "Reuse from board in" in out and "(nothing written)" in out
    assert f"board: {QUESTIONS}" in out and f"board: {2 * QUESTIONS}" in out
    assert "Without reuse:" in out and "Reuse saves" in out


def test_the_plan_writes_nothing(tmp_path: Path, capsys: Capture) -> None:
    spec = grown_run(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    plan_json(capsys, spec)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_judge_whose_prompt_changed_is_refused_with_the_reason(tmp_path: Path, capsys: Capture) -> None:
    strict = [JUDGES[0], {**JUDGES[1], "promptVariant": "strict"}]
    store_finished_run(write_spec(tmp_path, "board", OLD, judges=strict), tmp_path / "runs")
    spec = write_spec(tmp_path, "board-grown", [*OLD, NEW], reuse={"from": ["board"]})
    document = plan_json(capsys, spec)
    assert document["reuse"]["judges"]["judge-qwen"]["reused"] == 0
    assert stages_of(document)[("judge-qwen", "judging")]["requests"] == 3 * QUESTIONS
    reasons = [r["reason"] for r in document["reuse"]["refused"]]
    assert any("judge-qwen" in r for r in reasons), reasons
    assert "refused from board: " in plan_table(capsys, spec)


def test_a_run_not_stored_is_named_and_nothing_is_saved(tmp_path: Path, capsys: Capture) -> None:
    spec = write_spec(tmp_path, "board-grown", [*OLD, NEW], reuse={"from": ["board"]})
    document = plan_json(capsys, spec)
    assert document["reuse"]["missing_sources"][0]["source"] == "board"
    assert document["reuse"]["saved"] == {"gpu_hours_busy": 0.0, "gpu_hours_held": 0.0, "wall_hours": 0.0}
    assert "No run named board is stored in" in plan_table(capsys, spec)


def test_unreadable_storage_is_said_and_the_plan_estimates_without_reuse(
    tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster-only S3 prefix, on a machine with no credentials for it."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    spec = grown_run(tmp_path)
    document = plan_json(capsys, spec, "--out", "s3://kubejury/runs")
    whole = plan_json(capsys, write_spec(tmp_path, "board-whole", [*OLD, NEW]))
    assert "credentials" in document["reuse"]["unreadable"].lower()
    assert document["reuse"]["without_reuse"] is None
    assert document["estimate"]["totals"] == whole["estimate"]["totals"]
    out = plan_table(capsys, spec, "--out", "s3://kubejury/runs")
    assert "cannot read the benchmark or the storage s3://kubejury/runs" in out
    assert "the estimate above is without reuse" in out


def test_out_names_the_root_the_earlier_runs_are_in(tmp_path: Path, capsys: Capture) -> None:
    elsewhere = tmp_path / "elsewhere"
    store_finished_run(write_spec(tmp_path, "board", OLD), elsewhere)
    spec = write_spec(tmp_path, "board-grown", [*OLD, NEW], reuse={"from": ["board"]})
    assert plan_json(capsys, spec)["reuse"]["missing_sources"]  # not in spec.storage.uri
    document = plan_json(capsys, spec, "--out", str(elsewhere))
    assert document["reuse"]["models"]["gpt-oss-120b"]["reused"] == QUESTIONS


def test_source_places_a_cluster_run_stored_under_its_own_prefix(tmp_path: Path, capsys: Capture) -> None:
    """In the cluster a run lives at <root>/<namespace>/<name>-<uid>/: --source says where."""
    prefix = tmp_path / "runs" / "evals" / "board-1a2b3c4d"
    store_finished_run(write_spec(tmp_path, "board", OLD), prefix)
    spec = write_spec(tmp_path, "board-grown", [*OLD, NEW], reuse={"from": ["board"]})
    assert plan_json(capsys, spec)["reuse"]["missing_sources"]
    document = plan_json(capsys, spec, "--source", f"board={prefix.as_uri()}")
    assert document["reuse"]["models"]["gpt-oss-120b"]["from_runs"] == {"board": QUESTIONS}
