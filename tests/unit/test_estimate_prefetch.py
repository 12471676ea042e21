"""``plan --estimate`` with weights before GPUs: bring-up held on GPUs is the server start, and a
download overlaps earlier models' serving from the second wave on (kubejury.placement.estimate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubejury.cli import main
from kubejury.config.spec import EvalRunSpec, parse_evalrun
from kubejury.placement.estimate import RunEstimate, download_seconds, estimate_run
from kubejury.placement.gpu_nodes import parse_node_list
from kubejury.placement.planner import plan_placements
from kubejury.placement.server_model import STARTUP_FIXED_SECONDS, server_facts, startup_seconds
from kubejury.placement.workload import Workload

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"
SPEC = """
apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata: {name: est}
spec:
  benchmark: {uri: bench.jsonl, language: en}
  maxConcurrentModels: 1
  models:
    - {name: m1, source: hf://org/m1-70b, parameters: 70B}
    - {name: m2, source: hf://org/m2-70b, parameters: 70B}
    - {name: m3, source: hf://org/m3-70b, parameters: 70B}
  judges:
    - {name: hosted, runtime: openai, source: "https://api.example.com/v1"}
  series:
    - {name: s1, maxTokens: 500}
"""
WORKLOAD = Workload(
    questions=20000, question_tokens=50, reference_tokens=80, answer_tokens=500, verdict_tokens=200
)


def spec() -> EvalRunSpec:
    return parse_evalrun(yaml.safe_load(SPEC)).spec


def estimate(prefetch: bool) -> RunEstimate:
    s = spec()
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    return estimate_run(s, plan_placements(s, nodes), WORKLOAD, order="spec", prefetch=prefetch)


def windows(result: RunEstimate) -> dict[str, Any]:
    return {w.name: w for w in result.servers}


def _download(result: RunEstimate) -> float:
    s = spec()
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    placement = plan_placements(s, nodes)["m1"]
    return download_seconds(server_facts(s.models[0], placement))


def test_with_prefetch_each_server_holds_its_gpus_from_the_server_start_only() -> None:
    without, with_ = windows(estimate(False)), windows(estimate(True))
    for name in ("m1", "m2", "m3"):
        assert with_[name].ready - with_[name].start == STARTUP_FIXED_SECONDS
        assert without[name].ready - without[name].start > STARTUP_FIXED_SECONDS  # the download too


def test_the_first_download_waits_on_cpu_and_the_next_overlap_serving() -> None:
    w = windows(estimate(True))
    download = _download(estimate(True))
    assert download > 0
    assert (
        w["m1"].start == download
    )  # nothing served before it: its download is on the wall clock, not on GPUs
    # m2's download ran while m1 served: its server starts one server start before m1's slot frees
    assert w["m2"].start == w["m1"].end - STARTUP_FIXED_SECONDS
    assert w["m3"].start == w["m2"].end - STARTUP_FIXED_SECONDS


def test_prefetch_saves_the_downloads_gpu_hours_and_says_its_assumption() -> None:
    without, with_ = estimate(False), estimate(True)
    saved = without.gpu_hours_held - with_.gpu_hours_held
    gpus = sum(w.gpus for w in with_.servers)
    s = spec()
    nodes = parse_node_list(json.loads(NODES.read_text(encoding="utf-8")))
    placement = plan_placements(s, nodes)["m1"]
    per_server = startup_seconds(server_facts(s.models[0], placement)) - STARTUP_FIXED_SECONDS
    assert saved == pytest.approx(per_server * gpus / 3600)
    assert "before the server" in with_.assumptions["prefetch"]
    assert "holding its GPUs" in without.assumptions["prefetch"]


STUDY = Path(__file__).resolve().parents[2] / "examples" / "evalrun-study.yaml"


def _held(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[float, str]:
    argv = ["plan", "--evalrun", str(STUDY), "--nodes", str(NODES), "--estimate", "--questions", "200"]
    assert main([*argv, "--format", "json", *flags]) == 0
    data = json.loads(capsys.readouterr().out)
    estimate = data.get("estimate", data)
    return float(estimate["totals"]["gpu_hours_held"]), str(estimate["assumptions"]["prefetch"])


def test_plan_prefetches_for_a_run_with_a_model_cache_unless_told_not_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    default, said = _held(capsys)
    off, said_off = _held(capsys, "--no-prefetch")
    on, _ = _held(capsys, "--prefetch")
    assert default == on < off  # the study names spec.modelCache: prefetch is the default
    assert said.startswith("weights downloaded") and said_off.startswith("none")
