"""The operator's side of reuse (issue 24): which earlier runs a run may copy from, the reuse Job
first and alone, and planning that brings up servers only for what is still to make.

The planner under test is the pure ``plan``: it is given what it would observe. Observation is run
on the in-memory Kubernetes API; storage on a temporary folder.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from factories import (
    BASE_PRESENT,
    JOB_DONE,
    JOB_FAILED,
    JOB_RUNNING,
    RUN_SERIES,
    build_cluster_run,
    build_evalrun,
    generation_jobs,
    judge_jobs,
    present_for,
    ready_servers,
    reuse_document,
    reusing_cluster_run,
    workload_of,
)
from kubejury.config.spec import StorageSpec, parse_evalrun
from kubejury.files.storage import LocalStorage
from kubejury.records.reuse import Refusal, ReuseDocumentError
from kubejury.records.run_status import MAX_REUSE_REFUSALS, ReuseStatus, RunStatus
from kubejury_operator import observe, run_storage
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.facts import observe_facts
from kubejury_operator.manifests import SPEC_PATH
from kubejury_operator.observed import Observed, ReuseSource, ReuseSources, reuse_sources
from kubejury_operator.progress_cache import ProgressCache
from kubejury_operator.reconcile import Plan, judging_due, plan
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.status import reuse_message
from kubejury_operator.tenancy import TenantPolicy, run_storage_uri
from kubejury_operator.testing import FakeKubeApi
from kubejury_operator.validation import validate_evalrun

NOW = "2026-11-30T02:00:00Z"
LOG = logging.getLogger("test")
REUSE_JOB = vocab.reuse_job_name("r")
REPO = Path(__file__).resolve().parents[2]
SOURCE_URI = "s3://b/runs/ns/run-a-uid-a"
USABLE = ReuseSources(usable=(ReuseSource("run-a", SOURCE_URI),))
# a and b were generated and judged by run-a; c is new
A_AND_B = reuse_document(models=("a", "b"), judged={"j": ("a", "b")})


def creates(p: Plan, kind: str) -> set[str]:
    return {a.name for a in p.actions if a.verb == "create" and a.kind == kind}


def scaled_up(p: Plan) -> set[str]:
    return {a.name for a in p.actions if a.verb == "scale" and a.replicas} | creates(p, "Deployment")


def condition(p: Plan, ctype: str) -> dict[str, Any]:
    return next(c for c in p.status["conditions"] if c["type"] == ctype)


def after_reuse(document: Any = A_AND_B, **changes: Any) -> Observed:
    """The reuse Job succeeded and its document was read."""
    base = Observed(jobs={REUSE_JOB: JOB_DONE}, present=BASE_PRESENT, reuse=document, reuse_sources=USABLE)
    return replace(base, **changes)


# ------------------------------------------------------------------------ resolving the sources


OWN = StorageSpec.model_validate(
    {"uri": "s3://b/runs", "endpointUrl": "http://minio:9000", "credentialsSecretRef": {"name": "s3"}}
)
REF = vocab.RunRef("r", "ns", "uid-r")


def source_body(name: str = "run-a", uid: str | None = "uid-a", **storage: Any) -> dict[str, Any]:
    body = build_evalrun(name, namespace="ns", uid=uid)
    body["spec"]["storage"] = {
        "uri": "s3://b/runs",
        "endpointUrl": "http://minio:9000",
        "credentialsSecretRef": {"name": "s3"},
        **storage,
    }
    return body


def test_a_source_of_the_same_storage_is_read_at_the_prefix_its_uid_gives() -> None:
    resolved = reuse_sources(["run-a"], REF, OWN, {"run-a": source_body()})
    assert resolved.refusals == ()
    assert resolved.usable == (ReuseSource("run-a", run_storage_uri("s3://b/runs", "ns", "run-a", "uid-a")),)


def test_a_source_that_does_not_exist_is_refused_naming_its_field() -> None:
    resolved = reuse_sources(["run-a", "gone"], REF, OWN, {"run-a": source_body(), "gone": None})
    assert [s.name for s in resolved.usable] == ["run-a"]
    assert resolved.refusals == ("spec.reuse.from[1]: no EvalRun 'gone' in namespace 'ns'",)


def test_a_source_being_deleted_counts_as_gone() -> None:
    body = source_body()
    body["metadata"]["deletionTimestamp"] = NOW
    assert reuse_sources(["run-a"], REF, OWN, {"run-a": body}).usable == ()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("uri", "s3://b/other"),
        ("endpointUrl", "http://other:9000"),
        ("region", "eu-west-1"),
        ("pathStyle", False),
        ("credentialsSecretRef", {"name": "someone-elses"}),
        ("persistentVolumeClaim", "other-claim"),
    ],
)
def test_a_source_stored_elsewhere_or_read_with_other_credentials_is_refused(field: str, value: Any) -> None:
    resolved = reuse_sources(["run-a"], REF, OWN, {"run-a": source_body(**{field: value})})
    assert resolved.usable == ()
    (refusal,) = resolved.refusals
    assert refusal.startswith("spec.reuse.from[0]: EvalRun 'run-a': ")
    assert f"spec.storage.{field} differs" in refusal and "this run's credentials" in refusal


def test_path_style_is_compared_as_it_takes_effect() -> None:
    explicit = source_body(pathStyle=True)  # the default with an endpoint
    assert reuse_sources(["run-a"], REF, OWN, {"run-a": explicit}).refusals == ()


def test_the_run_itself_is_refused_even_when_it_exists() -> None:
    resolved = reuse_sources(["r"], REF, OWN, {"r": source_body("r", uid="uid-r")})
    assert resolved.refusals == ("spec.reuse.from[0]: a run cannot reuse itself",)


def test_admission_rejects_a_run_that_names_itself() -> None:
    body = build_evalrun("r", reuse={"from": ["run-a", "r"]})
    problems = validate_evalrun(body)
    assert [p.path for p in problems] == ["spec.reuse.from[1]"]
    assert validate_evalrun(build_evalrun("r", reuse={"from": ["run-a"]})) == []


def reusing_evalrun_body() -> dict[str, Any]:
    storage = {
        "uri": "s3://b/runs",
        "endpointUrl": "http://minio:9000",
        "credentialsSecretRef": {"name": "s3"},
    }
    return build_evalrun(
        "r", namespace="ns", uid="uid-r", storage=storage, reuse={"from": ["run-a", "run-x"]}
    )


def real_run(body: dict[str, Any]) -> ClusterRun:
    return cluster_run(body, parse_evalrun(body), {}, WorkloadSettings())


async def test_observation_reads_the_sources_from_the_runs_own_namespace_only() -> None:
    body = reusing_evalrun_body()
    elsewhere = source_body("run-x")
    elsewhere["metadata"]["namespace"] = "other"
    api = FakeKubeApi(source_body("run-a"), elsewhere)
    seen = await observe.observe_reuse_sources(api, real_run(body), parse_evalrun(body), Observed())
    assert [s.name for s in seen.reuse_sources.usable] == ["run-a"]
    assert seen.reuse_sources.refusals == ("spec.reuse.from[1]: no EvalRun 'run-x' in namespace 'ns'",)


async def test_once_the_reuse_step_is_done_the_sources_are_not_read_and_may_be_deleted() -> None:
    body = reusing_evalrun_body()
    api = FakeKubeApi()  # both sources deleted since
    done = Observed(jobs={vocab.reuse_job_name("r"): JOB_DONE})
    seen = await observe.observe_reuse_sources(api, real_run(body), parse_evalrun(body), done)
    assert seen is done and not [c for c in api.calls if c.verb == "get"]


async def test_a_run_without_reuse_reads_no_evalrun() -> None:
    body = build_evalrun("r", namespace="ns", uid="uid-r")
    api = FakeKubeApi()
    seen = await observe.observe_reuse_sources(api, real_run(body), parse_evalrun(body), Observed())
    assert seen == Observed() and api.calls == []


# ------------------------------------------------------------------------- the reuse Job first


def test_the_reuse_job_is_created_first_and_alone() -> None:
    run = reusing_cluster_run()
    first = plan(run, Observed(reuse_sources=USABLE), {}, NOW)
    assert creates(first, "Job") == {REUSE_JOB}
    assert creates(first, "Deployment") == set() and scaled_up(first) == set()
    assert {"ConfigMap", "ServiceAccount"} <= {a.kind for a in first.actions}  # the Job mounts the spec
    job = next(a.manifest for a in first.actions if a.name == REUSE_JOB)
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["reuse", "--evalrun", SPEC_PATH, "--source", f"run-a={SOURCE_URI}"]
    assert job["metadata"]["labels"][vocab.LABEL_COMPONENT] == "reuse"
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert condition(first, "ModelsProvisioned")["reason"] == "CopyingReusedRecords"


def test_nothing_else_starts_while_the_reuse_job_runs() -> None:
    run = reusing_cluster_run()
    running = Observed(jobs={REUSE_JOB: JOB_RUNNING}, present=BASE_PRESENT, reuse_sources=USABLE)
    p = plan(run, running, {"phase": "Provisioning"}, NOW)
    assert p.actions == () and p.phase == "Provisioning"


def test_the_sources_are_passed_in_the_order_the_spec_prefers_them() -> None:
    run = reusing_cluster_run("run-b", "run-a")
    sources = ReuseSources(
        usable=(ReuseSource("run-b", "s3://b/runs/ns/run-b-2"), ReuseSource("run-a", SOURCE_URI))
    )
    job = next(
        a.manifest for a in plan(run, Observed(reuse_sources=sources), {}, NOW).actions if a.name == REUSE_JOB
    )
    assert job is not None
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[3:] == ["--source", "run-b=s3://b/runs/ns/run-b-2", "--source", f"run-a={SOURCE_URI}"]


def test_no_reuse_job_is_created_before_every_source_was_read() -> None:
    run = reusing_cluster_run("run-a", "run-b")
    assert creates(plan(run, Observed(reuse_sources=USABLE), {}, NOW), "Job") == set()
    assert creates(plan(run, Observed(), {}, NOW), "Job") == set()


def test_the_preview_shows_the_reuse_job_first_with_each_source_at_its_prefix() -> None:
    from kubejury.placement.gpu_nodes import parse_node_list
    from kubejury.placement.planner import plan_placements
    from kubejury_operator.preview import PREVIEW_SOURCE_UID, simulate

    body = build_evalrun("r", namespace="ns", storage={"uri": "s3://b/runs"}, reuse={"from": ["run-a"]})
    evalrun = parse_evalrun(body)
    nodes = parse_node_list(orjson.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_bytes()))
    created = simulate(cluster_run(body, evalrun, plan_placements(evalrun.spec, nodes), WorkloadSettings()))
    jobs = [m for m in created if m["kind"] == "Job"]
    assert jobs[0]["metadata"]["name"] == REUSE_JOB
    uri = run_storage_uri("s3://b/runs", "ns", "run-a", PREVIEW_SOURCE_UID)
    assert jobs[0]["spec"]["template"]["spec"]["containers"][0]["args"][-1] == f"run-a={uri}"
    assert [m["kind"] for m in created].index("Job") < [m["kind"] for m in created].index("Deployment")


def test_a_refused_source_blocks_the_run_like_a_missing_secret_and_it_starts_once_fixed() -> None:
    run = reusing_cluster_run("run-a", "gone")
    refused = ReuseSources(
        usable=USABLE.usable, refusals=("spec.reuse.from[1]: no EvalRun 'gone' in namespace 'ns'",)
    )
    blocked = plan(run, Observed(reuse_sources=refused), {}, NOW)
    assert blocked.actions == () and blocked.phase == "Pending"
    provisioned = condition(blocked, "ModelsProvisioned")
    assert provisioned["status"] == "False" and provisioned["reason"] == "ReuseSourceRefused"
    assert "spec.reuse.from[1]: no EvalRun 'gone'" in provisioned["message"]
    assert blocked.status["reuse"]["refused"] == ["spec.reuse.from[1]: no EvalRun 'gone' in namespace 'ns'"]
    assert any("spec.reuse.from[1]" in e.message for e in blocked.events)
    both = ReuseSources(usable=(*USABLE.usable, ReuseSource("gone", "s3://b/runs/ns/gone-uid-g")))
    fixed = plan(run, Observed(reuse_sources=both), blocked.status, NOW)
    assert creates(fixed, "Job") == {REUSE_JOB}


def test_a_failed_reuse_job_fails_the_run_with_the_jobs_reason() -> None:
    run = reusing_cluster_run()
    p = plan(
        run, Observed(jobs={REUSE_JOB: JOB_FAILED}, reuse_sources=USABLE), {"phase": "Provisioning"}, NOW
    )
    assert p.phase == "Failed"
    assert f"Job {REUSE_JOB} failed: BackoffLimitExceeded" in condition(p, "Failed")["message"]
    assert scaled_up(p) == set() and creates(p, "Job") == set()


def test_an_oom_killed_reuse_job_is_replaced_with_the_same_sources() -> None:
    from factories import oom_killed

    run = reusing_cluster_run()
    p = plan(
        run, Observed(jobs={REUSE_JOB: oom_killed()}, reuse_sources=USABLE), {"phase": "Provisioning"}, NOW
    )
    (retry,) = creates(p, "Job")
    assert retry == vocab.oom_retry_job_name(REUSE_JOB, 1)
    job = next(a.manifest for a in p.actions if a.name == retry)
    assert (
        job is not None and f"run-a={SOURCE_URI}" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    )


# ------------------------------------------------------------------- planning after the reuse step


def test_facts_count_stages_the_reuse_step_copied_whole_as_done() -> None:
    run = reusing_cluster_run()
    document = reuse_document(models=("a", "b"), judged={"j": ("a", "b", "c")}, judges_complete=("j",))
    facts = observe_facts(run, after_reuse(document), "Provisioning")
    assert facts.generated == {(m, s) for m in ("a", "b") for s in RUN_SERIES}
    assert facts.judged == {("j", s) for s in RUN_SERIES}
    assert not facts.reusing and not facts.blocked


def test_a_complete_progress_record_alone_also_counts_as_generated() -> None:
    from kubejury.records.progress import ProgressRecord

    run = replace(reusing_cluster_run(), series=("primary",))
    record = ProgressRecord(stage="generate", series="primary", name="a", total=4, done=4, state="succeeded")
    seen = after_reuse(None, progress={("generate", "primary", "a"): record})
    assert observe_facts(run, seen, "Provisioning").generated == {("a", "primary")}


def test_servers_come_up_only_for_the_model_with_answers_to_generate() -> None:
    run = reusing_cluster_run()
    p = plan(run, after_reuse(), {"phase": "Provisioning"}, NOW)
    assert scaled_up(p) == {workload_of("m-c")}  # not a, not b, and not the judge: nothing to judge yet
    served = after_reuse(deployments=ready_servers("m-c"), present=present_for("m-c"))
    p = plan(run, served, {"phase": "Provisioning"}, NOW)
    assert creates(p, "Job") == {vocab.generation_job_name("r", "c", s) for s in RUN_SERIES}


def test_the_judge_is_not_due_for_models_whose_every_answer_has_a_copied_judgment() -> None:
    run = reusing_cluster_run()
    judge = run.judges[0]
    generating = after_reuse(jobs={REUSE_JOB: JOB_DONE, **generation_jobs(["c"], JOB_RUNNING)})
    assert not judging_due(run, generating, observe_facts(run, generating, "Generating"), judge)
    uncovered = after_reuse(
        reuse_document(models=("a", "b"), judged={"j": ("a",)}),
        jobs={REUSE_JOB: JOB_DONE, **generation_jobs(["c"], JOB_RUNNING)},
    )
    assert judging_due(run, uncovered, observe_facts(run, uncovered, "Generating"), judge)  # b has none


def test_one_round_judges_the_new_model_once_it_finished_and_it_is_the_last() -> None:
    run = reusing_cluster_run()
    c_done = after_reuse(
        jobs={REUSE_JOB: JOB_DONE, **generation_jobs(["c"], JOB_DONE)},
        deployments=ready_servers("j-j"),
        present=present_for("j-j"),
    )
    p = plan(run, c_done, {"phase": "Judging"}, NOW)
    assert scaled_up(p) == set() and p.phase == "Judging"  # the judge's server is already up
    rounds = {vocab.judge_job_name("r", "j", s, 1) for s in RUN_SERIES}
    assert creates(p, "Job") == rounds
    judge_job = next(a.manifest for a in p.actions if a.name in rounds)
    assert judge_job is not None
    assert judge_job["metadata"]["annotations"][vocab.ANNOTATION_MODELS_COMPLETE] == "3"
    judged = replace(c_done, jobs={**c_done.jobs, **judge_jobs(["j"], JOB_DONE, complete=3)})
    finished = plan(run, judged, {"phase": "Judging"}, NOW)
    assert creates(finished, "Job") == {vocab.aggregation_job_name("r")}
    assert finished.phase == "Aggregating"


def test_a_run_whose_every_record_is_reused_goes_from_the_reuse_job_to_aggregation_with_no_server() -> None:
    run = reusing_cluster_run()
    everything = reuse_document(models=("a", "b", "c"), judged={"j": ("a", "b", "c")}, judges_complete=("j",))
    p = plan(run, after_reuse(everything), {"phase": "Provisioning"}, NOW)
    assert scaled_up(p) == set()
    assert creates(p, "Job") == {vocab.aggregation_job_name("r")} and p.phase == "Aggregating"
    assert condition(p, "ModelsProvisioned")["reason"] == "NoServersNeeded"


def test_without_reuse_nothing_changes() -> None:
    run = build_cluster_run()
    p = plan(run, Observed(), {}, NOW)
    assert REUSE_JOB not in creates(p, "Job") and "reuse" not in p.status
    assert creates(p, "Deployment")  # servers start at once, as always
    assert run.reuse_from == () and real_run(build_evalrun("r", uid="u")).reuse_from == ()


# ---------------------------------------------------------------------------------------- status


def test_status_reuse_says_per_model_and_judge_what_was_copied_from_which_run() -> None:
    run = reusing_cluster_run()
    p = plan(run, after_reuse(), {"phase": "Provisioning"}, NOW)
    assert p.status["reuse"] == {
        "sources": ["run-a"],
        "copied": True,
        "models": {
            "a": {"reused": 8, "fromRuns": {"run-a": 8}},
            "b": {"reused": 8, "fromRuns": {"run-a": 8}},
        },
        "judges": {"j": {"reused": 16, "fromRuns": {"run-a": 16}}},
        "refused": [],
    }
    assert RunStatus.from_json(p.status).reuse == ReuseStatus.from_json(p.status["reuse"])


def test_copied_records_count_in_the_progress_of_a_stage_no_job_of_this_run_touched() -> None:
    everything = reuse_document(models=("a", "b", "c"), judged={"j": ("a", "b", "c")}, judges_complete=("j",))
    status = plan(reusing_cluster_run(), after_reuse(everything), {"phase": "Provisioning"}, NOW).status
    assert status["stages"]["judging"]["judges"] == {"j": {"done": 24, "total": 24}}
    assert status["stages"]["generation"]["models"]["c"] == {"done": 8, "total": 8}
    assert status["progress"] == "48/48"


def test_refusals_in_status_are_capped_to_short_lines() -> None:
    refusals = [Refusal("run-a", f"question q{i} changed " + "x" * 400, 1) for i in range(12)]
    document = reuse_document(models=("a",), refused=refusals)
    status = plan(reusing_cluster_run(), after_reuse(document), {"phase": "Provisioning"}, NOW).status
    refused = status["reuse"]["refused"]
    assert len(refused) == MAX_REUSE_REFUSALS + 1 and refused[-1] == "and 7 more"
    assert refused[0].startswith("model a (primary) from run-a: question q0 changed")
    assert all(len(line) <= 240 for line in refused)


def test_an_event_says_what_was_reused_when_the_document_is_first_read_and_only_then() -> None:
    run = reusing_cluster_run()
    first = plan(run, after_reuse(), {"phase": "Provisioning"}, NOW)
    reused = [e for e in first.events if e.reason == "Reused"]
    assert [e.message for e in reused] == ["Reused 16 answers and 16 judgments from run-a."]
    again = plan(run, after_reuse(), first.status, NOW)
    assert not [e for e in again.events if e.reason == "Reused"]


def test_the_event_names_refusals_and_several_sources() -> None:
    document = replace(
        reuse_document(models=("a",), refused=[Refusal("run-b", "judge j: prompt template changed")]),
        sources=("run-a", "run-b"),
    )
    assert reuse_message(document) == (
        "Reused 8 answers and 0 judgments from run-a; "
        "refused: model a (primary) from run-b: judge j: prompt template changed"
    )


def test_before_the_document_status_reuse_names_the_sources_and_a_note_when_it_does_not_read() -> None:
    run = reusing_cluster_run()
    waiting = plan(run, Observed(reuse_sources=USABLE), {}, NOW)
    assert waiting.status["reuse"] == {
        "sources": ["run-a"],
        "copied": False,
        "models": {},
        "judges": {},
        "refused": [],
    }
    broken = after_reuse(None, reuse_note="reuse.json does not read: field 'stages': must be a list")
    p = plan(run, broken, {"phase": "Provisioning"}, NOW)
    assert p.status["reuse"]["note"].startswith("reuse.json does not read")
    assert scaled_up(p) == {workload_of("m-a"), workload_of("m-b"), workload_of("m-c")}  # nothing skipped


# --------------------------------------------------------------------- reading the reuse document


def file_evalrun(root: Path) -> Any:
    return parse_evalrun(
        build_evalrun("r", uid="0123456789ab", storage={"uri": root.as_uri()}, reuse={"from": ["run-a"]})
    )


def store_document(root: Path, data: bytes) -> None:
    uri = run_storage_uri(root.as_uri(), "evals", "r", "0123456789ab")
    LocalStorage(uri.removeprefix("file://")).write_bytes("r/reuse.json", data)


def test_the_reuse_document_is_read_from_the_runs_own_prefix(tmp_path: Path) -> None:
    ref = vocab.RunRef("r", "evals", "0123456789ab")
    assert run_storage.read_reuse_document(file_evalrun(tmp_path), ref, None) is None
    store_document(tmp_path, orjson.dumps(A_AND_B.to_json()))
    assert run_storage.read_reuse_document(file_evalrun(tmp_path), ref, None) == A_AND_B


@pytest.mark.parametrize("data", [b"not json", b'{"stages": 3}', b" " * 5000 + b"{}"])
def test_a_reuse_document_that_does_not_read_names_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes
) -> None:
    monkeypatch.setattr(run_storage, "REUSE_DOCUMENT_MAX_BYTES", 4096)
    store_document(tmp_path, data)
    with pytest.raises(ReuseDocumentError, match=r"reuse\.json"):
        run_storage.read_reuse_document(
            file_evalrun(tmp_path), vocab.RunRef("r", "evals", "0123456789ab"), None
        )


def file_cluster_run(root: Path) -> ClusterRun:
    body = build_evalrun("r", uid="0123456789ab", storage={"uri": root.as_uri()}, reuse={"from": ["run-a"]})
    return real_run(body)


def reader(cache: ProgressCache | None = None) -> observe.StorageReader:
    return observe.StorageReader(FakeKubeApi(), TenantPolicy(), cache or ProgressCache(), LOG)


async def test_the_document_is_read_once_the_reuse_job_succeeded_and_then_kept(tmp_path: Path) -> None:
    evalrun, run, cache = file_evalrun(tmp_path), file_cluster_run(tmp_path), ProgressCache()
    store_document(tmp_path, orjson.dumps(A_AND_B.to_json()))
    running = Observed(jobs={REUSE_JOB: JOB_RUNNING})
    assert (await observe.observe_reuse_document(reader(cache), evalrun, run, running, {})).reuse is None
    done = Observed(jobs={REUSE_JOB: JOB_DONE})
    assert (await observe.observe_reuse_document(reader(cache), evalrun, run, done, {})).reuse == A_AND_B
    store_document(tmp_path, b"overwritten")  # never read again: the document is written once
    assert (
        await observe.observe_reuse_document(reader(cache), evalrun, run, Observed(), {})
    ).reuse == A_AND_B


async def test_an_unreadable_document_is_reported_in_a_note(tmp_path: Path) -> None:
    evalrun, run = file_evalrun(tmp_path), file_cluster_run(tmp_path)
    store_document(tmp_path, b'{"stages": 3}')
    seen = await observe.observe_reuse_document(
        reader(), evalrun, run, Observed(jobs={REUSE_JOB: JOB_DONE}), {}
    )
    assert seen.reuse is None and seen.reuse_note is not None and "stages" in seen.reuse_note


def test_a_stored_status_reuse_that_is_not_one_reads_as_empty_parts() -> None:
    stored = RunStatus.from_json(
        {"phase": "Generating", "reuse": {"sources": 3, "models": {"a": 1}, "copied": "yes"}}
    )
    assert stored.reuse == ReuseStatus()
    assert RunStatus.from_json({"phase": "Generating"}).reuse is None
    assert "reuse" not in RunStatus(phase="Generating").to_json()
