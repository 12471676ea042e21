"""What reuse leaves a run, and the estimate of only that (issue 24): counts from a reuse document,
stages scaled by the share left, no server for a model whose answers are all copied.

The estimate is the real one on the real planner's placements (sample H100 node list)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubejury.config.spec import EvalRunSpec, parse_evalrun
from kubejury.placement.estimate import RunEstimate, estimate_run
from kubejury.placement.gpu_nodes import parse_node_list
from kubejury.placement.planner import plan_placements
from kubejury.placement.remaining import RemainingWork, remaining_from_reuse
from kubejury.placement.workload import Workload
from kubejury.records.reuse import ReuseDocument, StageReuse

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"
QUESTIONS = 100
SERIES = ("s1", "s2")
MODELS = ("small", "large", "new")
JUDGES = ("judge", "twin")

SPEC = """
apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata: {name: est}
spec:
  benchmark: {uri: bench.jsonl, language: en}
  maxConcurrentModels: 1
  models:
    - {name: small, source: hf://org/small-8b, parameters: 8B}
    - {name: large, source: hf://org/large-70b, parameters: 70B}
    - {name: new, source: hf://org/new-14b, parameters: 14B}
  judges:
    - {name: judge, source: hf://org/judge-32b, parameters: 32B}
    - {name: twin, source: hf://org/large-70b, parameters: 70B, sameAs: large}
  series:
    - {name: s1, maxTokens: 500}
    - {name: s2, maxTokens: 2000}
"""

WORKLOAD = Workload(
    questions=QUESTIONS, question_tokens=50, reference_tokens=80, answer_tokens=1000, verdict_tokens=200
)


def run_spec() -> EvalRunSpec:
    return parse_evalrun(yaml.safe_load(SPEC)).spec


def estimate(remaining: RemainingWork | None = None) -> RunEstimate:
    s = run_spec()
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    return estimate_run(s, plan_placements(s, nodes), WORKLOAD, remaining=remaining)


def stage(result: RunEstimate, name: str, kind: str) -> Any:
    return next(s for s in result.stages if s.name == name and s.stage == kind)


def old_models_copied(partly: int = 0) -> ReuseDocument:
    """``small`` and ``large`` copied whole (``large`` short of ``partly`` answers in s1), both
    judges' judgments of them copied; ``new`` copied nothing."""
    stages: list[StageReuse] = []
    for series in SERIES:
        short = partly if series == "s1" else 0
        stages.append(StageReuse("generate", series, "small", QUESTIONS, {"board": QUESTIONS}, complete=True))
        stages.append(
            StageReuse(
                "generate", series, "large", QUESTIONS, {"board": QUESTIONS - short}, complete=not short
            )
        )
        stages.append(StageReuse("generate", series, "new", QUESTIONS))
        covered = ("small",) if short else ("small", "large")
        judged = 2 * QUESTIONS - short
        for judge in JUDGES:
            stages.append(
                StageReuse("judge", series, judge, judged, {"board": judged}, covered_models=covered)
            )
    return ReuseDocument(sources=("board",), stages=tuple(stages))


def test_counts_left_per_model_and_judge() -> None:
    left = remaining_from_reuse(old_models_copied(partly=30), MODELS, JUDGES)
    assert left.per_model == QUESTIONS * len(SERIES)
    assert left.answers == {"small": 0, "large": 30, "new": 2 * QUESTIONS}
    for judge in JUDGES:
        assert left.judgments[judge] == {"small": 0, "large": 30, "new": 2 * QUESTIONS}


def test_a_judge_or_model_the_document_does_not_name_has_everything_left() -> None:
    left = remaining_from_reuse(ReuseDocument(sources=("board",)), MODELS, JUDGES)
    assert left.generation_share("new") == 1.0 and left.judging_share("judge", "small") == 1.0


def test_nothing_copied_estimates_the_whole_run() -> None:
    nothing = RemainingWork(per_model=QUESTIONS * len(SERIES))
    assert estimate(nothing).to_json() == estimate().to_json()


def test_a_model_whose_answers_are_all_copied_gets_no_server_and_no_gpu_time() -> None:
    whole = estimate()
    reused = estimate(remaining_from_reuse(old_models_copied(), MODELS, JUDGES))
    small = stage(reused, "small", "generation")
    assert (small.requests, small.output_tokens, small.gpu_hours) == (0, 0, 0.0)
    assert "200 of 200 answers copied" in small.note
    assert stage(reused, "new", "generation").to_json() == stage(whole, "new", "generation").to_json()
    assert [w.name for w in reused.servers if w.name == "small"] == []
    # large's server still comes up, but only to serve its twin judge: no generation on it
    (large,) = [w for w in reused.servers if w.name == "large"]
    (large_whole,) = [w for w in whole.servers if w.name == "large"]
    assert large.held_gpu_hours < large_whole.held_gpu_hours
    assert reused.gpu_hours_held < whole.gpu_hours_held
    assert reused.gpu_hours_busy < whole.gpu_hours_busy


def test_judges_judge_only_what_is_left() -> None:
    whole = estimate()
    reused = estimate(remaining_from_reuse(old_models_copied(partly=30), MODELS, JUDGES))
    for judge in JUDGES:
        left = stage(reused, judge, "judging")
        assert left.requests == 30 + 2 * QUESTIONS
        assert left.output_tokens == pytest.approx(
            stage(whole, judge, "judging").output_tokens * (30 + 2 * QUESTIONS) / (3 * 2 * QUESTIONS), abs=1
        )
    assert stage(reused, "large", "generation").requests == 30


def test_everything_copied_runs_nothing() -> None:
    per_model = QUESTIONS * len(SERIES)
    nothing_left = RemainingWork(
        per_model=per_model,
        answers=dict.fromkeys(MODELS, 0),
        judgments={judge: dict.fromkeys(MODELS, 0) for judge in JUDGES},
    )
    result = estimate(nothing_left)
    assert result.servers == ()
    assert result.gpu_hours_busy == 0 and result.makespan_seconds == 0
    assert all(s.requests == 0 for s in result.stages)
