"""``kubejury plan --estimate`` for a run with ``spec.budget``: the expected saving, against asking
every question, under a stated share of questions used (the simulation's median for the goal)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import build_evalrun_yaml, model_entry
from kubejury.cli import main
from kubejury.placement.estimate import SEQUENTIAL_SHARES

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"
MODELS = [
    model_entry("qwen3.5-27b", "hf://Qwen/Qwen3.5-27B", parameters="27B"),
    model_entry("gemma-27b", "hf://google/gemma-3-27b-it", parameters="27B"),
]
JUDGES = [model_entry("judge", "hf://google/gemma-4-31b", parameters="31B")]


def plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], **spec: Any) -> dict[str, Any]:
    run = tmp_path / "run.yaml"
    run.write_text(
        build_evalrun_yaml("est", benchmark="bench.jsonl", models=MODELS, judges=JUDGES, **spec),
        encoding="utf-8",
    )
    args = ["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate", "--questions", "1440"]
    assert main([*args, "--format", "json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


@pytest.mark.parametrize("goal", ["leading-group", "full-ranking", "comparisons"])
def test_the_saving_is_the_goals_simulated_share_of_the_full_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], goal: str
) -> None:
    pairs = [{"a": "qwen3.5-27b", "b": "gemma-27b"}] if goal == "comparisons" else []
    budget = plan_json(tmp_path, capsys, budget={"goal": goal}, comparisons=pairs)["budget"]
    share, why = SEQUENTIAL_SHARES[goal]
    assert budget["assumed_share_of_questions"] == share and budget["assumption"] == why
    full, budgeted = budget["all_questions"], budget["budgeted"]
    assert 0 < budgeted["gpu_hours_busy"] < full["gpu_hours_busy"]
    # generation and judging scale with the questions asked: busy GPU-hours by the share
    assert budgeted["gpu_hours_busy"] == pytest.approx(share * full["gpu_hours_busy"], rel=0.02)
    assert budget["saved"]["gpu_hours_busy"] == pytest.approx(
        full["gpu_hours_busy"] - budgeted["gpu_hours_busy"], abs=0.002
    )


def test_max_questions_caps_the_share_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    budget = plan_json(tmp_path, capsys, budget={"maxQuestions": 720})["budget"]
    assert budget["assumed_share_of_questions"] == pytest.approx(0.5 * SEQUENTIAL_SHARES["leading-group"][0])
    assert "maxQuestions 720 caps each model at 50% of the 1440" in budget["assumption"]


def test_the_table_states_the_assumption(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(
        build_evalrun_yaml("est", benchmark="b.jsonl", models=MODELS, judges=JUDGES, budget={}),
        encoding="utf-8",
    )
    assert (
        main(["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate", "--questions", "1440"]) == 0
    )
    out = capsys.readouterr().out
    assert "spec.budget: expected saving" in out and "assuming the models answer 34% of the questions" in out
    assert "assumption: median questions used by the leading-group goal" in out


def test_a_run_without_a_budget_has_no_budget_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "budget" not in plan_json(tmp_path, capsys)
