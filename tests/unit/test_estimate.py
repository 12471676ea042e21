"""The run estimate: tokens per model and stage, GPU-hours, and a schedule that follows the operator's.

Placements come from the real planner on the sample H100 node list; the schedule is checked by its
shape (who waits for whom), and tokens by hand from the workload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubejury.config.spec import EvalRunSpec, parse_evalrun
from kubejury.placement.estimate import (
    NOMINAL_WORKLOAD,
    bringup_order,
    bringup_plan,
    estimate_run,
    longest_first,
)
from kubejury.placement.gpu_nodes import parse_node_list
from kubejury.placement.planner import plan_placements
from kubejury.placement.workload import CHAT_TEMPLATE_TOKENS, Workload, tokens_of

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"

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
    - {name: moe, source: hf://openai/gpt-oss-120b, parameters: 117B-A5.1B, checkpoint: mxfp4}
  judges:
    - {name: judge, source: hf://org/judge-32b, parameters: 32B}
    - {name: hosted, runtime: openai, source: "https://api.example.com/v1"}
  series:
    - {name: s1, maxTokens: 500}
    - {name: s2, maxTokens: 2000, systemPrompt: "Answer briefly, as an expert would."}
"""

WORKLOAD = Workload(
    questions=100, question_tokens=50, reference_tokens=80, answer_tokens=1000, verdict_tokens=200
)


def spec(**changes: Any) -> EvalRunSpec:
    data = yaml.safe_load(SPEC)
    data["spec"].update(changes)
    return parse_evalrun(data).spec


def estimate(s: EvalRunSpec, **kwargs: Any) -> Any:
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    return estimate_run(s, plan_placements(s, nodes), WORKLOAD, **kwargs)


def stage(result: Any, name: str, kind: str) -> Any:
    return next(s for s in result.stages if s.name == name and s.stage == kind)


def test_generation_tokens_are_questions_times_series_prompts_and_capped_answers() -> None:
    result = estimate(spec())
    gen = stage(result, "small", "generation")
    system = tokens_of("Answer briefly, as an expert would.", "en")
    assert gen.requests == 200
    assert gen.prompt_tokens == 100 * (50 + CHAT_TEMPLATE_TOKENS) + 100 * (50 + system + CHAT_TEMPLATE_TOKENS)
    assert gen.output_tokens == 100 * 500 + 100 * 1000  # s1 caps answers at 500 tokens


def test_judging_prompts_carry_template_question_reference_and_answer() -> None:
    result = estimate(spec())
    judging = stage(result, "judge", "judging")
    template = result.assumptions["judge_template_tokens"]
    assert template > 100  # the built-in English template is a paragraph of rules
    requests = 100 * 2 * 3  # questions × series × models
    mean_answer = (500 + 1000) / 2
    assert judging.requests == requests
    assert judging.prompt_tokens == round(
        requests * (template + 50 + 80 + mean_answer + CHAT_TEMPLATE_TOKENS)
    )
    assert judging.output_tokens == requests * 200


def test_gpu_hours_are_stage_time_times_gpus() -> None:
    result = estimate(spec())
    large = stage(result, "large", "generation")
    assert large.gpus == 2  # 70B in FP8 on H100s: TP 2
    assert large.seconds and large.gpu_hours == pytest.approx(large.seconds * 2 / 3600)
    assert result.gpu_hours_busy == pytest.approx(sum(s.gpu_hours or 0 for s in result.stages))


def test_hosted_judges_count_tokens_but_no_time() -> None:
    result = estimate(spec())
    hosted = stage(result, "hosted", "judging")
    assert hosted.seconds is None and hosted.gpu_hours is None
    assert hosted.prompt_tokens == stage(result, "judge", "judging").prompt_tokens
    assert result.not_estimated == ["hosted (judging)"]


def test_one_model_at_a_time_runs_them_back_to_back() -> None:
    result = estimate(spec(maxConcurrentModels=1))
    windows = {w.name: w for w in result.servers if w.name != "judge"}
    judge = [w for w in result.servers if w.name == "judge"]
    assert windows["small"].start == 0
    # each next server is brought up during the tail of the one before (never before that one is
    # generating: the operator needs its progress rate), so it is Ready as the slot frees
    for before, after in (("small", "large"), ("large", "moe")):
        bringup = windows[after].ready - windows[after].start
        assert windows[after].start == pytest.approx(
            max(windows[before].ready, windows[before].end - bringup)
        )
        assert windows[after].ready >= windows[before].end - 1e-6
    # the judge comes up one bring-up before the first answers and is Ready when they arrive; it is
    # up until it has judged the last model's answers
    assert judge[0].start == pytest.approx(max(0.0, windows["small"].end - (judge[0].ready - judge[0].start)))
    assert judge[0].ready >= windows["small"].end - 1e-6
    assert judge[-1].end > windows["moe"].end
    assert result.makespan_seconds == pytest.approx(judge[-1].end)
    assert result.gpu_hours_held >= result.gpu_hours_busy


def test_a_larger_budget_runs_models_side_by_side_and_shortens_the_run() -> None:
    one = estimate(spec(maxConcurrentModels=1))
    three = estimate(spec(maxConcurrentModels=3))
    assert {w.start for w in three.servers} == {0.0}
    assert three.makespan_seconds < one.makespan_seconds


def test_a_judge_that_is_an_evaluated_model_shares_its_server_outside_the_budget() -> None:
    s = spec(
        judges=[
            {
                "name": "judge-moe",
                "source": "hf://openai/gpt-oss-120b",
                "parameters": "117B-A5.1B",
                "checkpoint": "mxfp4",
                "sameAs": "moe",
            },
        ]
    )
    result = estimate(s)
    windows = {w.name: w for w in result.servers}
    assert set(windows) == {"small", "large", "moe"}  # no separate judge server
    assert windows["moe"].start == 0 and windows["small"].start == 0  # moe is not counted in the budget of 1
    assert result.order == ("small", "large")
    moe_generation = stage(result, "moe", "generation").seconds
    # it judges after its own answers and everyone else's
    assert windows["moe"].end >= windows["moe"].ready + moe_generation
    assert windows["moe"].end > windows["large"].end


def test_longest_first_brings_the_longest_model_up_first() -> None:
    result = estimate(spec(), order="longest-first")
    spec_order = estimate(spec(), order="spec")
    assert spec_order.order == ("small", "large", "moe")
    # each model's window in the spec-order run is its bring-up + generation time
    length = {w.name: w.end - w.start for w in spec_order.servers if w.name in spec_order.order}
    assert list(result.order) == sorted(length, key=lambda name: -length[name])
    assert list(result.order) != list(spec_order.order)


def test_bringup_order_breaks_ties_in_spec_order() -> None:
    assert bringup_order(["a", "b", "c"], {"a": 1.0, "b": 5.0, "c": 5.0}, "longest-first") == ["b", "c", "a"]
    assert bringup_order(["a", "b", "c"], {"a": 1.0, "b": 5.0, "c": 5.0}, "spec") == ["a", "b", "c"]


def test_a_model_without_a_size_is_not_estimated_and_says_why() -> None:
    s = spec(models=[{"name": "nameless", "source": "hf://org/x"}])
    result = estimate(s)
    gen = stage(result, "nameless", "generation")
    assert gen.seconds is None and "parameters" in gen.note


def test_answers_are_done_when_the_last_model_finishes_generating() -> None:
    result = estimate(spec(maxConcurrentModels=1))
    windows = {w.name: w for w in result.servers}
    assert result.answers_seconds == pytest.approx(max(windows[n].end for n in ("small", "large", "moe")))
    assert result.answers_seconds < result.makespan_seconds  # judging the last answers comes after


def test_longest_first_orders_by_a_nominal_run_and_keeps_unestimated_models_last() -> None:
    s = spec(models=[*yaml.safe_load(SPEC)["spec"]["models"], {"name": "nameless", "source": "hf://org/x"}])
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    order = longest_first(s, plan_placements(s, nodes))
    assert order[-1] == "nameless"
    assert order[:3] == list(estimate(s, order="longest-first").order)


def test_longest_first_shortens_the_answers_when_one_model_is_much_slower() -> None:
    # four small models and one 70B: in spec order the 70B starts last and runs alone at the end
    models = [{"name": f"small-{i}", "source": f"hf://org/small-{i}", "parameters": "8B"} for i in range(4)]
    models.append(
        {"name": "large", "source": "hf://org/large-70b", "parameters": "70B", "quantization": "bf16"}
    )
    s = spec(models=models, maxConcurrentModels=2)
    in_spec_order = estimate(s, order="spec")
    longest = estimate(s, order="longest-first")
    assert longest.order[0] == "large"
    assert longest.answers_seconds < in_spec_order.answers_seconds


def test_bringup_plan_takes_longest_first_when_it_ends_the_run_sooner() -> None:
    models = [{"name": f"small-{i}", "source": f"hf://org/small-{i}", "parameters": "8B"} for i in range(4)]
    models.append(
        {"name": "large", "source": "hf://org/large-70b", "parameters": "70B", "quantization": "bf16"}
    )
    s = spec(
        models=models,
        maxConcurrentModels=2,
        judges=[{"name": "hosted", "runtime": "openai", "source": "https://api.example.com/v1"}],
    )
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    rule, order = bringup_plan(s, plan_placements(s, nodes))
    assert rule == "longest-first" and order[0] == "large"


def test_bringup_plan_keeps_spec_order_when_the_budget_holds_every_model() -> None:
    s = spec(maxConcurrentModels=3)
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    assert bringup_plan(s, plan_placements(s, nodes)) == ("spec", ["small", "large", "moe"])


def test_bringup_plan_keeps_spec_order_when_it_ends_sooner() -> None:
    # one model at a time: ending with the short models leaves the judge a backlog, so longest
    # first would end the run later even though its last answer comes sooner
    s = spec(maxConcurrentModels=1)
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    placements = plan_placements(s, nodes)
    spec_run = estimate_run(s, placements, NOMINAL_WORKLOAD, order="spec")
    longest_run = estimate_run(s, placements, NOMINAL_WORKLOAD, order="longest-first")
    assert longest_run.answers_seconds < spec_run.answers_seconds
    assert longest_run.makespan_seconds > spec_run.makespan_seconds
    assert bringup_plan(s, placements) == ("spec", ["small", "large", "moe"])


def test_the_judging_templates_opening_is_served_from_the_prefix_cache() -> None:
    result = estimate(spec())
    opening = result.assumptions["judge_template_cached_prefix_tokens"]
    assert 50 < opening < result.assumptions["judge_template_tokens"]  # the rules, before the question block
