"""The planner for a run with ``spec.budget`` (issue 27): questions asked look by look on the cluster.

Per look: generation Jobs of the continuing models, the look's judging Jobs once they all
succeeded, then the look Job; the ``sequential.json`` that Job stores says which models stopped,
and a stopped model's server is scaled to zero in the reconcile that reads it. Once every model
stopped, the aggregation runs as for any run. docs/operator.md, "Sequential budgets".
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import orjson

from factories import (
    BASE_PRESENT,
    JOB_DONE,
    JOB_RUNNING,
    RUN_SERIES,
    budgeted_cluster_run,
    build_evalrun,
    judge_jobs,
    look_generation_jobs,
    oom_killed,
    present_for,
    ready_servers,
    sequential_document,
    workload_of,
)
from kubejury.config.spec import parse_evalrun
from kubejury.files.storage import LocalStorage
from kubejury.records.progress import ProgressRecord
from kubejury_operator import observe
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import cluster_run
from kubejury_operator.manifests import SPEC_PATH
from kubejury_operator.observed import JobState, Observed
from kubejury_operator.progress_cache import ProgressCache
from kubejury_operator.reconcile import Plan, plan
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.tenancy import TenantPolicy, run_storage_uri
from kubejury_operator.testing import FakeKubeApi

NOW = "2026-11-30T02:00:00Z"
LOG = logging.getLogger("test")
MODELS = ("a", "b", "c")
SERVERS = ("m-a", "m-b", "m-c")


def creates(p: Plan, kind: str = "Job") -> set[str]:
    return {a.name for a in p.actions if a.verb == "create" and a.kind == kind}


def scales(p: Plan) -> dict[str, int | None]:
    return {a.name: a.replicas for a in p.actions if a.verb == "scale"}


def args_of(p: Plan, name: str) -> list[str]:
    action = next(a for a in p.actions if a.name == name)
    assert action.manifest is not None
    return list(action.manifest["spec"]["template"]["spec"]["containers"][0]["args"])


def gen(model: str, look: int, series: str = "primary") -> str:
    return vocab.look_generation_job_name("r", model, series, look)


def judge(look: int, series: str = "primary") -> str:
    return vocab.judge_job_name("r", "j", series, look)


def at_look(
    look: int,
    *,
    generated: tuple[str, ...] = (),
    judged: bool = False,
    stopped: dict[str, int] | None = None,
    servers: tuple[str, ...] = SERVERS,
    jobs: dict[str, JobState] | None = None,
) -> Observed:
    """The run during look ``look``: the document of the look before it (none before look 1),
    ``generated`` models' Jobs of the look succeeded, and (``judged``) its judging Jobs too."""
    stopped = stopped or {}
    found = {**look_generation_jobs(generated, look, JOB_DONE), **(jobs or {})}
    if judged:
        found.update(judge_jobs(["j"], JOB_DONE, round_=look))
    document = sequential_document(look - 1, stopped) if look > 1 else None
    return Observed(
        deployments=ready_servers(*servers),
        jobs=found,
        present=present_for(*servers),
        sequential=document,
    )


# ------------------------------------------------------------------------------------ look 1


def test_look_one_asks_every_model_its_prefix_once_its_server_is_ready() -> None:
    run = budgeted_cluster_run()
    starting = plan(run, Observed(present=BASE_PRESENT), {}, NOW)
    assert creates(starting, "Deployment") == {workload_of(k) for k in SERVERS}
    assert not creates(starting)  # no Job before a server is ready

    ready = plan(run, at_look(1), {}, NOW)
    assert creates(ready) == {gen(m, 1, s) for m in MODELS for s in RUN_SERIES}
    assert args_of(ready, gen("a", 1))[-2:] == ["--look", "1"]
    assert workload_of("j-j") not in scales(ready) and workload_of("j-j") not in creates(ready, "Deployment")
    assert ready.phase == "Provisioning" and plan(run, at_look(1, generated=("a",)), {}, NOW).phase == (
        "Generating"
    )


def test_the_looks_judging_waits_for_every_continuing_model_then_the_look_job_for_the_judging() -> None:
    run = budgeted_cluster_run()
    partly = plan(run, at_look(1, generated=("a", "b")), {}, NOW)
    assert not any(n.startswith("kj-r-judge") for n in creates(partly))
    assert workload_of("j-j") not in creates(partly, "Deployment")  # no judge server while answers come

    generated = plan(run, at_look(1, generated=MODELS), {}, NOW)
    assert workload_of("j-j") in creates(generated, "Deployment")  # the judge comes up for the look
    with_judge = at_look(1, generated=MODELS, servers=(*SERVERS, "j-j"))
    judging = plan(run, with_judge, {}, NOW)
    assert creates(judging) == {judge(1, s) for s in RUN_SERIES}
    assert args_of(judging, judge(1))[-2:] == ["--look", "1"]
    assert scales(judging) == {}  # the models' servers stay up across looks while slots allow

    judged = plan(run, at_look(1, generated=MODELS, judged=True, servers=(*SERVERS, "j-j")), {}, NOW)
    look_job = vocab.look_job_name("r", 1)
    assert creates(judged) == {look_job} and look_job == "kj-r-look-l1"
    assert args_of(judged, look_job) == ["look", "--evalrun", SPEC_PATH, "--look", "1"]
    assert scales(judged) == {workload_of("j-j"): 0}  # nothing left to judge until the next look
    assert judged.phase == "Generating"


# ---------------------------------------------------------------------------- stops and looks


def test_a_stopped_model_is_scaled_to_zero_at_once_and_asked_nothing_more() -> None:
    run = budgeted_cluster_run()
    p = plan(run, at_look(2, stopped={"c": 1}), {}, NOW)
    assert scales(p) == {workload_of("m-c"): 0}
    assert creates(p) == {gen(m, 2, s) for m in ("a", "b") for s in RUN_SERIES}
    assert args_of(p, gen("a", 2))[-2:] == ["--look", "2"]
    budget = p.status["budget"]
    assert budget["looksDone"] == 1 and budget["looks"] == 3 and budget["goal"] == "leading-group"
    assert budget["models"]["c"] == {
        "status": "stopped",
        "questions": 12,
        "look": 1,
        "reason": "out: below a",
    }
    assert budget["models"]["a"]["status"] == "continue"


def test_the_next_look_judges_once_the_continuing_models_generated_it() -> None:
    run = budgeted_cluster_run()
    servers = ("m-a", "m-b", "j-j")
    p = plan(run, at_look(2, generated=("a", "b"), stopped={"c": 1}, servers=servers), {}, NOW)
    assert creates(p) == {judge(2, s) for s in RUN_SERIES}


def test_with_fewer_slots_than_models_a_model_that_generated_the_look_gives_its_slot_up() -> None:
    run = budgeted_cluster_run(max_models=1)
    first = plan(run, at_look(1, servers=("m-a",)), {}, NOW)
    assert creates(first) == {gen("a", 1, s) for s in RUN_SERIES}
    assert workload_of("m-b") not in creates(first, "Deployment")
    done_a = plan(run, at_look(1, generated=("a",), servers=("m-a",)), {}, NOW)
    assert scales(done_a) == {workload_of("m-a"): 0}
    assert workload_of("m-b") in creates(done_a, "Deployment")


def test_once_every_model_stopped_the_run_aggregates_with_every_server_at_zero() -> None:
    run = budgeted_cluster_run()
    last = sequential_document(2, {"a": 2, "b": 2, "c": 1})
    observed = replace(at_look(3, servers=(*SERVERS, "j-j")), sequential=last)
    p = plan(run, observed, {}, NOW)
    assert creates(p) == {vocab.aggregation_job_name("r")}
    assert scales(p) == {workload_of(k): 0 for k in (*SERVERS, "j-j")}
    assert p.phase == "Aggregating"
    assert {m: e["status"] for m, e in p.status["budget"]["models"].items()} == dict.fromkeys(
        MODELS, "stopped"
    )


def test_an_oom_killed_look_generation_job_is_replaced_for_the_same_look() -> None:
    run = budgeted_cluster_run()
    p = plan(run, at_look(2, stopped={"c": 1}, jobs={gen("a", 2): oom_killed()}), {}, NOW)
    retry = vocab.oom_retry_job_name(gen("a", 2), 1)
    assert retry in creates(p)
    assert args_of(p, retry)[-2:] == ["--look", "2"]
    assert p.phase != "Failed"


def test_a_run_without_a_budget_has_no_budget_status_and_no_look_jobs() -> None:
    run = replace(budgeted_cluster_run(), budget_goal=None, budget_looks=0)
    p = plan(run, at_look(1), {}, NOW)
    assert "budget" not in p.status
    assert creates(p) == {vocab.generation_job_name("r", m, s) for m in MODELS for s in RUN_SERIES}


def test_before_the_first_look_status_budget_names_the_goal_only() -> None:
    p = plan(budgeted_cluster_run(), at_look(1), {}, NOW)
    assert p.status["budget"] == {"goal": "leading-group", "looksDone": 0, "looks": None, "models": {}}


def test_the_cluster_run_of_a_budgeted_spec_knows_its_goal_and_looks() -> None:
    body = build_evalrun("r", uid="u-1", budget={"goal": "leading-group", "looks": [0.5, 1.0]})
    run = cluster_run(body, parse_evalrun(body), {}, WorkloadSettings())
    assert run.budgeted and run.budget_goal == "leading-group" and run.budget_looks == 2


# ---------------------------------------------------------------------- reading sequential.json


async def test_sequential_json_is_read_once_per_look(tmp_path: Path) -> None:
    body = build_evalrun(
        "r", uid="0123456789ab", storage={"uri": tmp_path.as_uri()}, budget={"goal": "leading-group"}
    )
    evalrun = parse_evalrun(body)
    run = cluster_run(body, evalrun, {}, WorkloadSettings())
    store = LocalStorage(
        run_storage_uri(tmp_path.as_uri(), "evals", "r", "0123456789ab").removeprefix("file://")
    )
    cache = ProgressCache()
    reader = observe.StorageReader(FakeKubeApi(), TenantPolicy(), cache, LOG)

    async def seen(jobs: dict[str, JobState]) -> Observed:
        return await observe.observe_sequential_document(reader, evalrun, run, Observed(jobs=jobs), {})

    assert (await seen({})).sequential is None  # before the first look: nothing stored
    store.write_bytes("r/sequential.json", orjson.dumps(sequential_document(1, {"c": 1}).to_json()))
    assert (await seen({vocab.look_job_name("r", 1): JOB_RUNNING})).sequential is None  # not read again yet
    first = (await seen({vocab.look_job_name("r", 1): JOB_DONE})).sequential
    assert first is not None and first.stopped() == ["c"]
    store.write_bytes("r/sequential.json", b"overwritten")  # not read while look 2 is not decided
    assert (await seen({vocab.look_job_name("r", 1): JOB_DONE})).sequential == first
    later = sequential_document(2, {"c": 1, "b": 2})
    store.write_bytes("r/sequential.json", orjson.dumps(later.to_json()))
    assert (await seen({vocab.look_job_name("r", 2): JOB_DONE})).sequential == later


async def test_a_sequential_json_that_does_not_read_keeps_the_last_reading(tmp_path: Path) -> None:
    body = build_evalrun(
        "r", uid="0123456789ab", storage={"uri": tmp_path.as_uri()}, budget={"goal": "leading-group"}
    )
    evalrun = parse_evalrun(body)
    run = cluster_run(body, evalrun, {}, WorkloadSettings())
    store = LocalStorage(
        run_storage_uri(tmp_path.as_uri(), "evals", "r", "0123456789ab").removeprefix("file://")
    )
    store.write_bytes("r/sequential.json", b'{"goal": 3}')
    reader = observe.StorageReader(FakeKubeApi(), TenantPolicy(), ProgressCache(), LOG)
    done = Observed(jobs={vocab.look_job_name("r", 1): JOB_DONE})
    assert (await observe.observe_sequential_document(reader, evalrun, run, done, {})).sequential is None


def test_a_failed_look_generation_job_fails_the_run_with_its_stages_reason() -> None:
    failed = JobState(failed=True, message="BackoffLimitExceeded")
    record = ProgressRecord(
        stage="generate", series="primary", name="a", state="failed", message="HTTP 401 from the server"
    )
    observed = replace(
        at_look(2, stopped={"c": 1}, jobs={gen("a", 2): failed}),
        progress={("generate", "primary", "a"): record},
    )
    p = plan(budgeted_cluster_run(), observed, {}, NOW)
    assert p.phase == "Failed"
    assert any(gen("a", 2) in c["message"] and "HTTP 401" in c["message"] for c in p.status["conditions"])
