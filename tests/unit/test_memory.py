"""What the operator remembers of a run (kubejury_operator.memory) and how it forgets it."""

from __future__ import annotations

import json
from pathlib import Path

from factories import build_evalrun
from kubejury.config.spec import parse_evalrun
from kubejury_operator.memory import RunMemory, run_key
from kubejury_operator.placing import compute_placements
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.work_queue import QueueTiming

REPO = Path(__file__).resolve().parents[2]


def test_a_runs_key_is_its_namespace_and_name_from_its_body_or_its_metadata() -> None:
    body = build_evalrun("r", namespace="team-a")
    assert run_key(body) == ("team-a", "r")
    assert run_key(body["metadata"]) == ("team-a", "r")
    assert run_key(build_evalrun("r", namespace=None)) == ("default", "r")
    assert run_key({"name": "r", "namespace": ""}) == ("default", "r")


def test_the_spec_is_parsed_again_only_when_its_generation_labels_or_annotations_change() -> None:
    memory = RunMemory()
    body = build_evalrun()
    body["metadata"].update(uid="u-1", generation=1)
    first, problems = memory.parsed_spec(body)
    assert first is not None and problems == []
    assert memory.parsed_spec({**body, "status": {"phase": "Generating"}})[0] is first
    relabelled = {**body, "metadata": {**body["metadata"], "labels": {"team": "a"}}}
    assert memory.parsed_spec(relabelled)[0] is not first


def test_the_problems_of_a_remembered_spec_are_a_copy_the_caller_may_extend() -> None:
    memory = RunMemory()
    body = build_evalrun(judges=[])
    _, problems = memory.parsed_spec(body)
    assert problems
    problems.append(problems[0])
    assert len(memory.parsed_spec(body)[1]) == len(problems) - 1


def test_the_planners_view_of_a_run_is_rebuilt_only_when_its_spec_or_pinned_placement_changes() -> None:
    memory = RunMemory()
    body = build_evalrun()
    body["metadata"].update(uid="u-1", generation=1)
    evalrun = parse_evalrun(body)
    nodes = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    placement = {n: p.to_json() for n, p in compute_placements(evalrun, nodes).items()}
    settings = WorkloadSettings()
    assert memory.pinned_run(body, evalrun, {"phase": "Pending", "placement": placement}, settings) is None
    running = {"phase": "Generating", "placement": placement}
    first = memory.pinned_run(body, evalrun, running, settings)
    assert first is not None and memory.pinned_run(body, evalrun, dict(running), settings) is first
    respec = {**body, "metadata": {**body["metadata"], "generation": 2}}
    assert memory.pinned_run(respec, evalrun, running, settings) is not first


def test_since_the_status_was_written_is_unknown_until_this_process_writes_it() -> None:
    memory = RunMemory()
    assert memory.since_status_written(100.0) is None
    memory.status_written_at = 97.5
    assert memory.since_status_written(100.0) == 2.5


def test_forgetting_a_run_drops_its_whole_memory_at_once() -> None:
    runtime = OperatorRuntime(settings=WorkloadSettings(), interval=7.0)
    memory = runtime.memory(("evals", "r"))
    assert runtime.memory(("evals", "r")) is memory
    assert memory.queue.timing == QueueTiming(interval=7.0)
    memory.status_written_at = 1.0
    memory.queue.last_ended = 1.0
    memory.expectations.expect_scaled("d", 1, now=1.0)
    runtime.forget(("evals", "r"))
    fresh = runtime.memory(("evals", "r"))
    assert fresh is not memory and fresh.status_written_at is None
    assert fresh.queue.last_ended is None and not fresh.expectations
    assert set(runtime.runs) == {("evals", "r")}
