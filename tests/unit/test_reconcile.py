"""The reconcile planner, phase by phase: observed world in, actions and status out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from factories import (
    BASE_PRESENT,
    H100_PLACEMENT,
    JOB_DONE,
    JOB_FAILED,
    JOB_RUNNING,
    RUN_SERIES,
    build_cluster_run,
    build_evalrun,
    endpoint,
    generation_jobs,
    judge_jobs,
    model_entry,
    present_for,
    ready_servers,
    workload_of,
)
from kubejury.records.placement import Placement
from kubejury.records.progress import ProgressRecord
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import cluster_run
from kubejury_operator.observed import DeploymentState, JobState, Observed
from kubejury_operator.reconcile import Action, Plan, plan
from kubejury_operator.status import summary_from_report

NOW = "2026-11-30T02:00:00Z"
LATER = "2026-11-30T03:00:00Z"
NO_FIT = replace(H100_PLACEMENT, schedulable=False, reason="needs 260 GiB; largest node has 80 GiB (1x H100)")


def creates(p: Plan, kind: str) -> set[str]:
    return {a.name for a in p.actions if a.verb == "create" and a.kind == kind}


def scales(p: Plan) -> dict[str, int | None]:
    return {a.name: a.replicas for a in p.actions if a.verb == "scale"}


def condition(p: Plan, ctype: str) -> dict[str, Any]:
    return next(c for c in p.status["conditions"] if c["type"] == ctype)


# ------------------------------------------------------------------------------- phase table


CASES: list[tuple[str, Observed, str]] = [
    ("nothing yet", Observed(), "Provisioning"),
    (
        "servers starting",
        Observed(
            deployments={workload_of("m-a"): DeploymentState(1), workload_of("j-j"): DeploymentState(1)},
            present=present_for("m-a", "j-j"),
        ),
        "Provisioning",
    ),
    (
        "first model generating",
        Observed(
            deployments=ready_servers("m-a", "m-b", "j-j"),
            jobs=generation_jobs(["a"], JOB_RUNNING),
            present=present_for("m-a", "m-b", "j-j"),
        ),
        "Generating",
    ),
    (
        "all generated, judges running",
        Observed(
            deployments=ready_servers("j-j"),
            jobs={**generation_jobs("abc", JOB_DONE), **judge_jobs("j", JOB_RUNNING)},
            present=present_for("j-j"),
        ),
        "Judging",
    ),
    (
        "all judged",
        Observed(
            deployments=ready_servers("j-j"),
            jobs={**generation_jobs("abc", JOB_DONE), **judge_jobs("j", JOB_DONE)},
            present=present_for("j-j"),
        ),
        "Aggregating",
    ),
    (
        "aggregated",
        Observed(
            jobs={
                **generation_jobs("abc", JOB_DONE),
                **judge_jobs("j", JOB_DONE),
                "kj-r-aggregate": JOB_DONE,
            },
            present=BASE_PRESENT,
        ),
        "Succeeded",
    ),
    (
        "a generation job failed",
        Observed(
            deployments=ready_servers("m-a", "j-j"),
            jobs=generation_jobs(["a"], JOB_FAILED),
            present=present_for("m-a"),
        ),
        "Failed",
    ),
    (
        "a server never came up",
        Observed(
            deployments={workload_of("m-a"): DeploymentState(1, stalled=True, message="0/3 nodes available")}
        ),
        "Failed",
    ),
]


@pytest.mark.parametrize(("observed", "phase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_phase_table(observed: Observed, phase: str) -> None:
    p = plan(build_cluster_run(), observed, {"phase": "Generating"} if observed.jobs else {}, NOW)
    assert p.phase == phase
    assert condition(p, "Succeeded")["status"] == ("True" if phase == "Succeeded" else "False")
    assert condition(p, "Failed")["status"] == ("True" if phase == "Failed" else "False")
    for c in p.status["conditions"]:
        assert c["reason"][:1].isupper() and " " not in c["reason"]
        assert c["message"].endswith(".") and c["message"][:1].isupper()
        assert c["observedGeneration"] == 1
        assert c["lastTransitionTime"] == NOW


# ------------------------------------------------------------------------------- behaviours


def test_fresh_run_creates_spec_identity_and_at_most_max_concurrent_model_servers() -> None:
    p = plan(build_cluster_run(max_models=2), Observed(), {}, NOW)
    assert creates(p, "ConfigMap") == {"kj-r-spec"}
    assert creates(p, "ServiceAccount") == {"kj-r-job"}
    # models a and b (budget 2); the judge waits for answers to judge (judges only while judging)
    assert creates(p, "Deployment") == {workload_of("m-a"), workload_of("m-b")}
    assert creates(p, "Service") == creates(p, "Deployment")
    assert creates(p, "Job") == set()
    assert p.status["placement"]["a"]["quantization"] == "fp8"
    assert [e.reason for e in p.events] == ["Provisioning", "Placement"]  # the placement's prose: an Event


def test_generation_starts_per_series_when_the_server_is_ready() -> None:
    observed = Observed(
        deployments={
            **ready_servers("m-a"),
            workload_of("m-b"): DeploymentState(1),
            workload_of("j-j"): DeploymentState(1),
        },
        present=present_for("m-a", "m-b", "j-j"),
    )
    p = plan(build_cluster_run(), observed, {"phase": "Provisioning"}, NOW)
    assert creates(p, "Job") == {
        vocab.generation_job_name("r", "a", "primary"),
        vocab.generation_job_name("r", "a", "t08"),
    }
    job = next(a for a in p.actions if a.name == vocab.generation_job_name("r", "a", "primary"))
    assert job.manifest is not None
    args = job.manifest["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--endpoint") + 1] == f"http://{workload_of('m-a')}.ns.svc:8000/v1"
    assert p.phase == "Provisioning"  # jobs only requested this round
    assert condition(p, "ModelsProvisioned")["status"] == "False"
    assert "b" in condition(p, "ModelsProvisioned")["message"]


def test_finished_model_is_scaled_to_zero_and_the_next_one_starts_and_judging_is_pipelined() -> None:
    observed = Observed(
        deployments=ready_servers("m-a", "m-b", "j-j"),
        jobs={**generation_jobs(["a"], JOB_DONE), **generation_jobs(["b"], JOB_RUNNING)},
        present=present_for("m-a", "m-b", "j-j"),
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert scales(p) == {workload_of("m-a"): 0}
    assert creates(p, "Deployment") == {workload_of("m-c")}
    # a's answers exist: the judge starts on both series while b is still generating
    assert creates(p, "Job") == {
        vocab.judge_job_name("r", "j", "primary", 1),
        vocab.judge_job_name("r", "j", "t08", 1),
    }
    assert p.phase == "Generating"


def test_a_server_of_the_run_under_a_name_the_planner_no_longer_uses_is_scaled_to_zero() -> None:
    """Issue 29's names end in a hash: after an upgrade, a running server under its old name
    (``kj-r-m-a``) must not keep its GPUs until the run is deleted."""
    observed = Observed(
        deployments={**ready_servers("m-a", "j-j"), "kj-r-m-a": DeploymentState(1, 1)},
        present=present_for("m-a", "j-j"),
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert scales(p).get("kj-r-m-a") == 0


def test_judge_waits_for_its_server() -> None:
    observed = Observed(
        deployments={**ready_servers("m-a", "m-b"), workload_of("j-j"): DeploymentState(1)},
        jobs={**generation_jobs(["a"], JOB_DONE), **generation_jobs(["b"], JOB_RUNNING)},
        present=present_for("m-a", "m-b", "j-j"),
    )
    assert not {n for n in creates(plan(build_cluster_run(), observed, {}, NOW), "Job") if "judge" in n}


def test_judges_kept_until_judging_ends_then_scaled_down_and_aggregation_created() -> None:
    during = Observed(
        deployments=ready_servers("j-j"),
        jobs={**generation_jobs("abc", JOB_DONE), **judge_jobs("j", JOB_RUNNING)},
        present=present_for("j-j"),
    )
    assert scales(plan(build_cluster_run(), during, {"phase": "Judging"}, NOW)) == {}
    after = Observed(
        deployments=ready_servers("j-j"),
        jobs={**generation_jobs("abc", JOB_DONE), **judge_jobs("j", JOB_DONE)},
        present=present_for("j-j"),
    )
    p = plan(build_cluster_run(), after, {"phase": "Judging"}, NOW)
    assert scales(p) == {workload_of("j-j"): 0}
    assert creates(p, "Job") == {"kj-r-aggregate"}
    assert condition(p, "JudgingComplete")["status"] == "True"


def test_succeeded_carries_the_summary_and_scales_everything_down() -> None:
    observed = Observed(
        deployments={workload_of("j-j"): DeploymentState(1, 1)},
        jobs={**generation_jobs("abc", JOB_DONE), **judge_jobs("j", JOB_DONE), "kj-r-aggregate": JOB_DONE},
        present=present_for("j-j"),
        summary={"leader": "b", "leaderWeighted": 8.7, "ranking": [{"model": "b", "weighted": 8.7}]},
    )
    p = plan(build_cluster_run(), observed, {"phase": "Aggregating"}, NOW)
    assert p.phase == "Succeeded"
    assert p.status["summary"]["leader"] == "b"
    assert scales(p) == {workload_of("j-j"): 0}
    assert creates(p, "Job") == set()
    assert condition(p, "Ready")["status"] == "True"
    assert p.events[0].reason == "Succeeded" and "b" in p.events[0].message


def test_failure_scales_down_and_names_the_job() -> None:
    observed = Observed(
        deployments=ready_servers("m-a", "m-b", "j-j"),
        jobs=generation_jobs(["a"], JOB_FAILED),
        present=present_for("m-a", "m-b", "j-j"),
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert p.phase == "Failed"
    assert set(scales(p).values()) == {0}
    assert vocab.generation_job_name("r", "a", "primary") in condition(p, "Failed")["message"]
    assert p.events[0].type == "Warning"
    assert creates(p, "Job") == set()


def test_failed_job_condition_carries_the_stage_s_own_reason() -> None:
    """A stage that fails on its error share says why in its progress record (e.g. HTTP 401 from the
    endpoint); the Failed condition repeats that reason instead of only the Job's BackoffLimitExceeded."""
    stage_reason = "40 of 40 requests failed (max error share 0.5): HTTP 401 Unauthorized from http://m-a/v1"
    observed = Observed(
        deployments=ready_servers("m-a", "m-b", "j-j"),
        jobs=generation_jobs(["a"], JOB_FAILED, series=("primary",)),
        present=present_for("m-a", "m-b", "j-j"),
        progress={
            ("generate", "primary", "a"): ProgressRecord(
                total=40, done=40, errors=40, state="failed", message=stage_reason
            ),
            ("generate", "primary", "b"): ProgressRecord(
                total=40, done=1, state="failed", message="unrelated"
            ),
        },
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    message = condition(p, "Failed")["message"]
    assert vocab.generation_job_name("r", "a", "primary") in message
    assert stage_reason in message
    assert "unrelated" not in message


def test_failed_judge_round_condition_carries_the_judging_stage_s_reason() -> None:
    reason = "12 of 12 requests failed (max error share 0.5): HTTP 403 Forbidden from http://j/v1"
    observed = Observed(
        deployments=ready_servers("m-a", "m-b", "m-c", "j-j"),
        jobs={
            **generation_jobs(["a", "b", "c"], JOB_DONE),
            **judge_jobs(["j"], JOB_FAILED, series=("primary",)),
        },
        present=present_for("m-a", "m-b", "m-c", "j-j"),
        progress={
            ("judge", "primary", "j"): ProgressRecord(total=12, errors=12, state="failed", message=reason)
        },
    )
    p = plan(build_cluster_run(), observed, {"phase": "Judging"}, NOW)
    message = condition(p, "Failed")["message"]
    assert vocab.judge_job_name("r", "j", "primary", 1) in message
    assert reason in message


def test_unschedulable_model_deploys_nothing_and_says_why() -> None:
    run = build_cluster_run(models=(endpoint("model", "a"), endpoint("model", "huge", NO_FIT)))
    p = plan(run, Observed(), {}, NOW)
    assert p.phase == "Pending"
    assert p.actions == ()
    cond = condition(p, "Unschedulable")
    assert cond["status"] == "True" and cond["reason"] == "ModelDoesNotFit"
    assert "huge" in cond["message"] and "260 GiB" in cond["message"]
    assert p.status["placement"]["huge"]["schedulable"] is False
    assert p.events[0].type == "Warning"
    # unchanged world, next tick: no new events (no event storm), lastTransitionTime kept
    p2 = plan(run, Observed(), p.status, LATER)
    assert p2.events == ()
    assert condition(p2, "Unschedulable")["lastTransitionTime"] == NOW


def test_progress_record_counts_as_done_without_its_job() -> None:
    """Resume: a finished generation whose Job was deleted is not re-run."""
    progress = {
        ("generate", s, "a"): ProgressRecord(done=10, total=10, state="succeeded") for s in RUN_SERIES
    }
    observed = Observed(
        deployments=ready_servers("m-a", "m-b", "j-j"),
        progress=progress,
        present=present_for("m-a", "m-b", "j-j"),
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert not {n for n in creates(p, "Job") if n.startswith("kj-r-gen-a-")}
    assert scales(p) == {workload_of("m-a"): 0}
    assert p.status["stages"]["generation"]["done"] == 20
    assert p.status["progress"] == "20/20"


def test_progress_counters_sum_records() -> None:
    progress = {
        ("generate", "primary", "a"): ProgressRecord(done=5, total=10),
        ("judge", "primary", "j"): ProgressRecord(done=2, total=30),
    }
    p = plan(build_cluster_run(), Observed(progress=progress), {}, NOW)
    assert p.status["stages"]["generation"] == {
        "done": 5,
        "total": 10,
        "jobsDone": 0,
        "jobs": 6,
        "models": {"a": {"done": 5, "total": 10}, "b": {"done": 0, "total": 0}, "c": {"done": 0, "total": 0}},
    }
    assert p.status["stages"]["judging"]["judges"] == {"j": {"done": 2, "total": 30}}
    assert p.status["progress"] == "7/40"


def test_judge_same_as_a_model_shares_its_server_and_keeps_it() -> None:
    a = endpoint("model", "a")
    judge_a = endpoint("judge", "ja", key=a.key)
    run = build_cluster_run(models=(a, endpoint("model", "b")), judges=(judge_a,), max_models=1)
    p = plan(run, Observed(), {}, NOW)
    assert creates(p, "Deployment") == {workload_of("m-a"), workload_of("m-b")}  # a's server is the judge's
    observed = Observed(
        deployments=ready_servers("m-a", "m-b"),
        jobs=generation_jobs(["a"], JOB_DONE),
        present=present_for("m-a", "m-b"),
    )
    p = plan(run, observed, {"phase": "Generating"}, NOW)
    assert workload_of("m-a") not in scales(p)  # still judging
    assert vocab.judge_job_name("r", "ja", "primary", 1) in creates(p, "Job")


def test_openai_judge_needs_no_server() -> None:
    run = build_cluster_run(judges=(endpoint("judge", "hosted", runtime="openai"),))
    p = plan(run, Observed(), {}, NOW)
    assert workload_of("j-hosted") not in creates(p, "Deployment")
    observed = Observed(
        deployments=ready_servers("m-a", "m-b"),
        jobs=generation_jobs(["a"], JOB_DONE),
        present=present_for("m-a", "m-b"),
    )
    assert vocab.judge_job_name("r", "hosted", "primary", 1) in creates(plan(run, observed, {}, NOW), "Job")


def test_existing_children_are_not_recreated() -> None:
    observed = Observed(
        deployments=ready_servers("m-a", "m-b"),
        jobs=generation_jobs(["a", "b"], JOB_RUNNING),
        present=present_for("m-a", "m-b"),
    )
    assert plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW).actions == ()


def test_terminal_phase_is_sticky() -> None:
    done = plan(
        build_cluster_run(),
        Observed(
            jobs={
                **generation_jobs("abc", JOB_DONE),
                **judge_jobs("j", JOB_DONE),
                "kj-r-aggregate": JOB_DONE,
            },
            present=BASE_PRESENT,
        ),
        {"phase": "Aggregating"},
        NOW,
    )
    # later the Jobs are gone (TTL): the run stays Succeeded, keeps its status, re-creates nothing
    again = plan(build_cluster_run(), Observed(present=BASE_PRESENT), done.status, LATER)
    assert again.phase == "Succeeded"
    assert again.actions == ()
    assert again.status == done.status
    assert again.events == ()
    # a server somebody scaled up again is scaled back to zero, nothing else
    stray = Observed(deployments=ready_servers("j-j"), present=BASE_PRESENT)
    assert [a.describe() for a in plan(build_cluster_run(), stray, done.status, LATER).actions] == [
        f"scale Deployment/{workload_of('j-j')} to 0"
    ]


def test_missing_secret_blocks_with_a_clear_condition() -> None:
    p = plan(build_cluster_run(), Observed(missing_secrets=("deepseek-key",)), {}, NOW)
    assert p.phase == "Pending"
    assert p.actions == ()
    assert "deepseek-key" in condition(p, "ModelsProvisioned")["message"]


def test_sharded_generation_job() -> None:
    run = replace(build_cluster_run(), generation_shards=3)
    observed = Observed(deployments=ready_servers("m-a"), present=present_for("m-a"))
    job = next(
        a
        for a in plan(run, observed, {}, NOW).actions
        if a.name == vocab.generation_job_name("r", "a", "primary")
    )
    assert isinstance(job, Action) and job.manifest is not None
    assert job.manifest["spec"]["completionMode"] == "Indexed"


def test_summary_from_report_keeps_only_the_aggregate() -> None:
    report = {
        "primary_series": "primary",
        "series": {
            "primary": {
                "ranking": ["b", "a"],
                "models": {
                    "a": {
                        "weighted": 7.12345,
                        "weighted_ci95": [6.9, 7.3],
                        "degradation": 1.1,
                        "judge_sigma": 0.4,
                        "tier": "C",
                    },
                    "b": {
                        "weighted": 8.7,
                        "weighted_ci95": [8.5, 8.9],
                        "degradation": 0.5,
                        "judge_sigma": 0.3,
                        "tier": "A",
                    },
                },
                "domain_leaders": {"law": "b"},
                "answers": ["per-answer data that must not leak"],
            }
        },
    }
    summary = summary_from_report(report, "s3://b/runs/r/report/")
    assert summary["leader"] == "b"
    assert summary["ranking"][1] == {
        "rank": 2,
        "model": "a",
        "weighted": 7.123,
        "weightedCI": [6.9, 7.3],
        "degradation": 1.1,
        "sigma": 0.4,
        "tier": "C",
    }
    assert summary["domainLeaders"] == {"law": "b"}
    assert summary["tiers"] == {"b": "A", "a": "C"}
    assert "per-answer" not in repr(summary)


def test_progress_record_reading_takes_one_spelling() -> None:
    """Missing fields take their defaults; a field of the wrong type is an error naming it."""
    rec = ProgressRecord.from_json({"done": 3, "total": 9, "errors": 3, "state": "succeeded"})
    assert (rec.done, rec.total, rec.errors, rec.complete) == (3, 9, 3, True)
    assert ProgressRecord.from_json({}).complete is False
    with pytest.raises(ValueError, match="'errors'"):
        ProgressRecord.from_json({"errors": {"timeout": 2}})
    with pytest.raises(ValueError, match="'state'"):
        ProgressRecord.from_json({"state": "complete"})


def test_run_inputs_from_a_real_spec() -> None:
    from kubejury.config.spec import parse_evalrun

    body = build_evalrun(
        "study",
        uid="u-1",
        generation=3,
        models=[
            model_entry("qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B"),
            model_entry("gemma", "hf://google/gemma-4-31b", parameters="31B"),
        ],
        judges=[
            model_entry("qwen-judge", "hf://Qwen/Qwen3.5-27B", sameAs="qwen"),
            model_entry(
                "deepseek",
                "https://api.deepseek.com/v1",
                runtime="openai",
                apiKeySecretRef={"name": "ds", "key": "token"},
            ),
        ],
        storage={"uri": "s3://b/runs", "credentialsSecretRef": {"name": "s3"}},
        maxConcurrentModels=1,
        startupTimeoutSeconds=3600,
    )
    evalrun = parse_evalrun(body)
    run = cluster_run(
        body,
        evalrun,
        {"qwen": H100_PLACEMENT, "gemma": H100_PLACEMENT, "qwen-judge": H100_PLACEMENT},
        opsettings.WorkloadSettings(),
    )
    assert run.ref == vocab.RunRef("study", "evals", "u-1")
    assert run.generation == 3
    assert [m.key for m in run.models] == ["m-qwen", "m-gemma"]
    assert [j.key for j in run.judges] == ["m-qwen", "j-deepseek"]  # sameAs shares the server
    assert run.judges[1].api_key_secret == "ds" and run.judges[1].api_key_key == "token"
    assert run.settings.startup_budget_seconds == 3600
    assert run.storage.credentials_secret == "s3"
    assert run.series == ("primary",)
    p = plan(run, Observed(), {}, NOW)
    # qwen is kept up as a judge (not counted), gemma fills the one-model budget
    assert creates(p, "Deployment") == {
        vocab.workload_name("study", "m-qwen"),
        vocab.workload_name("study", "m-gemma"),
    }


def test_judging_rounds_follow_generation() -> None:
    """A round per batch of finished models; only the round that saw every model completes judging."""
    first_round = judge_jobs("j", JOB_DONE, complete=1)
    observed = Observed(
        deployments=ready_servers("m-b", "m-c", "j-j"),
        jobs={**generation_jobs(["a", "b"], JOB_DONE), **generation_jobs(["c"], JOB_RUNNING), **first_round},
        present=present_for("m-b", "m-c", "j-j"),
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    second = {a.name: a for a in p.actions if a.kind == "Job"}
    assert set(second) == {
        vocab.judge_job_name("r", "j", "primary", 2),
        vocab.judge_job_name("r", "j", "t08", 2),
    }
    manifest = second[vocab.judge_job_name("r", "j", "primary", 2)].manifest
    assert manifest is not None
    assert manifest["metadata"]["annotations"] == {
        "kubejury.io/round": "2",
        "kubejury.io/models-complete": "2",
    }
    # while a round runs, no other round of the same (judge, series) starts
    running = {
        **observed.jobs,
        **judge_jobs("j", JOB_RUNNING, round_=2, complete=2),
        **generation_jobs(["c"], JOB_DONE),
    }
    p = plan(build_cluster_run(), replace(observed, jobs=running), {"phase": "Generating"}, NOW)
    assert not [a for a in p.actions if a.kind == "Job"]
    assert p.phase == "Judging"
    # round 2 done, all models finished: the final round 3 starts; judging is not complete before it
    finished = {**running, **judge_jobs("j", JOB_DONE, round_=2, complete=2)}
    p = plan(build_cluster_run(), replace(observed, jobs=finished), {"phase": "Judging"}, NOW)
    assert {a.name for a in p.actions if a.kind == "Job"} == {
        vocab.judge_job_name("r", "j", "primary", 3),
        vocab.judge_job_name("r", "j", "t08", 3),
    }
    assert condition(p, "JudgingComplete")["status"] == "False"
    final = {**finished, **judge_jobs("j", JOB_DONE, round_=3, complete=3)}
    p = plan(build_cluster_run(), replace(observed, jobs=final), {"phase": "Judging"}, NOW)
    assert p.phase == "Aggregating"


def test_job_state_reads_conditions_and_round_annotation() -> None:
    from kubejury_operator.observed import deployment_state, job_state, progress_key

    job = {
        "metadata": {"annotations": {"kubejury.io/models-complete": "2"}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    assert job_state(job) == JobState(succeeded=True, models_complete=2)
    failed = {
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    }
    assert job_state(failed).failed and job_state(failed).message == "BackoffLimitExceeded"
    assert not job_state({}).finished
    stalled = {
        "spec": {"replicas": 1},
        "status": {
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
        },
    }
    assert deployment_state(stalled).stalled
    assert deployment_state({"spec": {"replicas": 1}, "status": {"readyReplicas": 1}}).ready
    assert progress_key("primary", "r/primary/progress/generate-qwen-3.json") == (
        "generate",
        "primary",
        "qwen-3",
    )
    assert progress_key("primary", "r/primary/progress/other.json") is None


def test_server_pods_waiting_for_a_node_are_reported_unschedulable() -> None:
    from kubejury_operator.observed import pod_scheduling_problems

    pods = [
        {
            "metadata": {"labels": {"kubejury.io/component": "server", "kubejury.io/endpoint": "m-a"}},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        },
        {
            "metadata": {"labels": {"kubejury.io/component": "server", "kubejury.io/endpoint": "m-b"}},
            "status": {"phase": "Running"},
        },
    ]
    waiting = pod_scheduling_problems(pods)
    assert waiting == {"m-a": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}
    observed = Observed(
        deployments={workload_of("m-a"): DeploymentState(1), **ready_servers("m-b", "j-j")},
        present=present_for("m-a", "m-b", "j-j"),
        unschedulable_pods=waiting,
    )
    p = plan(build_cluster_run(), observed, {"phase": "Provisioning"}, NOW)
    cond = condition(p, "Unschedulable")
    assert cond["status"] == "True" and cond["reason"] == "NoNodeAvailable"
    assert "a: 0/3 nodes" in cond["message"]
    # bounded: once the Deployment's progress deadline passes, the run fails and scales down
    stalled = replace(
        observed, deployments={**observed.deployments, workload_of("m-a"): DeploymentState(1, stalled=True)}
    )
    p = plan(build_cluster_run(), stalled, {"phase": "Provisioning"}, NOW)
    assert p.phase == "Failed" and set(scales(p).values()) == {0}


def test_local_only_sources_are_unschedulable_in_a_cluster() -> None:
    from kubejury.config.spec import parse_evalrun

    body = build_evalrun(
        "demo",
        models=[model_entry("tiny", runtime="llamacpp")],  # the embedded Gemma-3 270M
        judges=[model_entry("j", "https://api.example.com/v1", runtime="openai")],
    )
    evalrun = parse_evalrun(body)
    cpu = Placement(runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0)
    run = cluster_run(body, evalrun, {"tiny": cpu}, opsettings.WorkloadSettings())
    p = plan(run, Observed(), {}, NOW)
    assert p.phase == "Pending" and p.actions == ()
    assert "local mode" in condition(p, "Unschedulable")["message"]


def test_sharded_generation_progress_is_merged_and_complete_only_when_every_shard_is() -> None:
    from kubejury_operator.observed import collect_progress

    def record(done: int, total: int, state: str) -> dict[str, Any]:
        return {"done": done, "total": total, "errors": 1, "state": state, "rate_per_s": 2.0}

    prefix = "r/primary/progress/"
    two_of_three = [
        ("primary", prefix + "generate-qwen3.5-27b.shard-0-of-3.json", record(32, 32, "succeeded")),
        ("primary", prefix + "generate-qwen3.5-27b.shard-2-of-3.json", record(10, 32, "running")),
        ("primary", prefix + "judge-j1.json", record(5, 64, "running")),
    ]
    progress = collect_progress(two_of_three)
    merged = progress[("generate", "primary", "qwen3.5-27b")]
    assert (merged.done, merged.total, merged.errors, merged.rate_per_s) == (42, 64, 2, 4.0)
    assert merged.running and not merged.complete
    assert progress[("judge", "primary", "j1")].done == 5
    assert set(progress) == {("generate", "primary", "qwen3.5-27b"), ("judge", "primary", "j1")}

    # One shard done and the others not yet started must not read as "generation complete".
    assert not collect_progress(two_of_three[:1])[("generate", "primary", "qwen3.5-27b")].complete
    every_shard = [
        ("primary", prefix + f"generate-qwen3.5-27b.shard-{i}-of-3.json", record(32, 32, "succeeded"))
        for i in range(3)
    ]
    assert collect_progress(every_shard)[("generate", "primary", "qwen3.5-27b")].complete


def test_the_stages_own_progress_record_reads_as_complete() -> None:
    """The record the engine writes (kubejury.stages.progress) is what the operator must understand."""
    from kubejury.stages.progress import ProgressTracker

    tracker = ProgressTracker("generate", "primary", "m1", total=3)
    for _ in range(3):
        tracker.advance()
    tracker.finish("succeeded")
    record = ProgressRecord.from_json(tracker.record())
    assert record.complete and (record.done, record.total) == (3, 3)
    tracker.finish("failed", "boom")
    assert not ProgressRecord.from_json(tracker.record()).complete


def test_a_judges_server_is_up_only_while_it_has_a_round_running_or_due() -> None:
    """GPU accounting's policy: no judge holds GPUs waiting for answers."""
    run = build_cluster_run(max_models=3)
    generating = Observed(
        deployments=ready_servers("m-a", "m-b", "m-c", "j-j"),
        jobs=generation_jobs(["a", "b", "c"], JOB_RUNNING),
        present=present_for("m-a", "m-b", "m-c", "j-j"),
    )
    assert scales(plan(run, generating, {"phase": "Generating"}, NOW)) == {workload_of("j-j"): 0}
    a_done = replace(generating, jobs={**generating.jobs, **generation_jobs(["a"], JOB_DONE)})
    due = plan(run, a_done, {"phase": "Generating"}, NOW)
    assert scales(due) == {workload_of("m-a"): 0}  # a is done; the judge stays up: a round is due
    assert {
        vocab.judge_job_name("r", "j", "primary", 1),
        vocab.judge_job_name("r", "j", "t08", 1),
    } <= creates(due, "Job")
    judged = replace(a_done, jobs={**a_done.jobs, **judge_jobs(["j"], JOB_DONE, complete=1)})
    assert scales(plan(run, judged, {"phase": "Generating"}, NOW)) == {
        workload_of("j-j"): 0,
        workload_of("m-a"): 0,
    }
    running = replace(a_done, jobs={**a_done.jobs, **judge_jobs(["j"], JOB_RUNNING, complete=1)})
    assert workload_of("j-j") not in scales(plan(run, running, {"phase": "Generating"}, NOW))


def progress(model: str, done: int, total: int, rate: float, series: str = "primary") -> ProgressRecord:
    return ProgressRecord(
        stage="generate", series=series, name=model, total=total, done=done, rate_per_s=rate
    )


def test_bring_up_overlaps_the_tail_of_a_model_finishing_within_the_bring_up_time_seen() -> None:
    """Lead time = the longest Pod creation → Ready seen in the run (here 60 s on model a's server)."""
    run = replace(build_cluster_run(max_models=1), series=("primary",))
    generating = Observed(
        deployments=ready_servers("m-a"),
        jobs=generation_jobs(["a"], JOB_RUNNING, ("primary",)),
        present=present_for("m-a"),
        servers_ready_since={"m-a": NOW},
        servers_bringup_seconds={"m-a": 60.0},
    )
    far = replace(generating, progress={("generate", "primary", "a"): progress("a", 10, 100, 1.0)})
    assert creates(plan(run, far, {"phase": "Generating"}, NOW), "Deployment") == set()  # 90 s left
    near = replace(generating, progress={("generate", "primary", "a"): progress("a", 50, 100, 1.0)})
    p = plan(run, near, {"phase": "Generating"}, NOW)  # 50 s left < 60 s bring-up
    assert creates(p, "Deployment") == {workload_of("m-b"), workload_of("j-j")}  # next model and the judge
    no_rate = replace(generating, progress={("generate", "primary", "a"): progress("a", 50, 100, 0.0)})
    assert creates(plan(run, no_rate, {"phase": "Generating"}, NOW), "Deployment") == set()
    unseen = replace(near, servers_bringup_seconds={})  # no bring-up seen yet: nothing starts early
    assert creates(plan(run, unseen, {"phase": "Generating"}, NOW), "Deployment") == set()
    remembered = {"phase": "Generating", "gpu": {"servers": {"a": {"gpus": 1, "bringUpSeconds": 60}}}}
    assert workload_of("m-b") in creates(plan(run, unseen, remembered, NOW), "Deployment")


def test_a_reconcile_whose_caches_lag_behind_its_own_writes_sends_none_of_them_again() -> None:
    """The watch-fed caches show the operator's creates and scales a moment after it made them:
    seen through its expectations, the next reconcile neither re-creates nor re-scales."""
    from kubejury_operator.expectations import Expectations

    run = build_cluster_run()
    lagging = Observed(
        deployments=ready_servers("m-a", "m-b"),
        jobs=generation_jobs(["a"], JOB_DONE),
        present=present_for("m-a", "m-b"),
    )
    first = plan(run, lagging, {"phase": "Generating"}, NOW)
    assert scales(first) == {workload_of("m-a"): 0}
    assert (
        creates(first, "Deployment") == creates(first, "Service") == {workload_of("m-c"), workload_of("j-j")}
    )
    assert creates(first, "Job") == {
        vocab.generation_job_name("r", "b", "primary"),
        vocab.generation_job_name("r", "b", "t08"),
    }
    expectations = Expectations()
    for action in first.actions:
        if action.verb == "create" and action.manifest is not None:
            expectations.expect_created(action.kind, action.name, action.manifest, 100.0)
        elif action.verb == "scale" and action.replicas is not None:
            expectations.expect_scaled(action.name, action.replicas, 100.0)

    expectations.settle(lagging, 100.5)  # the caches still show the world before those writes
    again = plan(run, expectations.view(lagging), {"phase": "Generating"}, NOW)
    assert again.actions == ()
    assert again.status["stages"] == first.status["stages"]
    assert plan(run, lagging, {"phase": "Generating"}, NOW).actions == first.actions  # without them
