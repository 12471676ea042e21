"""The operator brings models up in the estimate's order when ``maxConcurrentModels`` limits them.

Placements come from the real planner on the sample H100 node list; the planner under test is the
pure reconcile ``plan`` (nothing of Kubernetes is simulated: it is given what it would observe).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from factories import build_evalrun, model_entry
from kubejury.config.spec import parse_evalrun
from kubejury.placement.gpu_nodes import parse_node_list
from kubejury.placement.planner import plan_placements
from kubejury.records.placement import Placement
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.observed import Observed
from kubejury_operator.reconcile import plan

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"
NOW = "2026-11-30T02:00:00Z"
HOSTED_JUDGE = model_entry("hosted", "https://api.example.com/v1", runtime="openai")


def models(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Four 8B models, then whatever is given (in spec order)."""
    return [*(model_entry(f"small-{i}", parameters="8B") for i in range(4)), *extra]


def run_of(body: dict[str, Any], pinned: bool = False) -> ClusterRun:
    evalrun = parse_evalrun(body)
    placements = plan_placements(evalrun.spec, parse_node_list(json.loads(NODES.read_text(encoding="utf-8"))))
    if pinned:  # as read back from status.placement on later passes
        placements = {n: Placement.from_json(p.to_json(), name=n) for n, p in placements.items()}
    return cluster_run(body, evalrun, placements, opsettings.WorkloadSettings())


def deployments_created(run: ClusterRun) -> set[str]:
    return {
        a.name
        for a in plan(run, Observed(), {}, NOW).actions
        if a.verb == "create" and a.kind == "Deployment"
    }


def test_the_longest_model_takes_a_slot_first() -> None:
    large = model_entry("large", parameters="70B", quantization="bf16")
    run = run_of(build_evalrun(models=models(large), judges=[HOSTED_JUDGE], maxConcurrentModels=2))
    assert run.bringup_order[0] == "large"
    assert deployments_created(run) == {
        vocab.workload_name("r", "m-large"),
        vocab.workload_name("r", "m-small-0"),
    }


def test_the_order_is_the_same_from_placements_read_back_from_status() -> None:
    large = model_entry("large", parameters="70B", quantization="bf16")
    body = build_evalrun(models=models(large), judges=[HOSTED_JUDGE], maxConcurrentModels=2)
    assert run_of(body).bringup_order == run_of(body, pinned=True).bringup_order


def test_spec_order_when_every_model_fits_the_budget() -> None:
    large = model_entry("large", parameters="70B", quantization="bf16")
    run = run_of(build_evalrun(models=models(large), judges=[HOSTED_JUDGE], maxConcurrentModels=5))
    assert list(run.bringup_order) == ["small-0", "small-1", "small-2", "small-3", "large"]
    assert len(deployments_created(run)) == 5


def test_models_without_an_estimate_keep_spec_order_after_the_others() -> None:
    unsized = model_entry("unsized")
    large = model_entry("large", parameters="70B", quantization="bf16")
    run = run_of(
        build_evalrun(models=[unsized, *models(large)], judges=[HOSTED_JUDGE], maxConcurrentModels=2)
    )
    assert run.bringup_order[0] == "large"
    assert [m.name for m in run.models_in_bringup_order()][-1] == "unsized"
    assert run.models[0].name == "unsized"  # the run's own model list keeps spec order
