"""A Job whose container was OOM-killed: named in a condition, replaced with twice the memory up to
the chart's cap, and past the cap the run fails naming the OOM (issue 23, "Faults on real pods")."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from chart_harness import of_kind, render
from factories import (
    JOB_DONE,
    JOB_FAILED,
    JOB_RUNNING,
    RUN_SERIES,
    build_cluster_run,
    generation_jobs,
    judge_jobs,
    oom_killed,
    present_for,
    ready_servers,
)
from kubejury_operator import oom_retry
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun, with_settings
from kubejury_operator.expectations import Expectations
from kubejury_operator.observed import DeploymentState, JobState, Observed, current_attempts, job_state
from kubejury_operator.reconcile import Action, Plan, plan
from kubejury_operator.settings import WorkloadSettings

NOW = "2026-11-30T02:00:00Z"
GEN_A = vocab.generation_job_name("r", "a", "primary")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def condition(p: Plan, ctype: str) -> dict[str, Any]:
    return next(c for c in p.status["conditions"] if c["type"] == ctype)


def created_jobs(p: Plan) -> dict[str, Action]:
    return {a.name: a for a in p.actions if a.verb == "create" and a.kind == "Job"}


def stage_container(manifest: dict[str, Any] | None) -> dict[str, Any]:
    assert manifest is not None
    return dict(manifest["spec"]["template"]["spec"]["containers"][0])


def generating(jobs: dict[str, JobState]) -> Observed:
    """Models a and b generating (their servers up), with ``jobs`` observed."""
    return Observed(
        deployments=ready_servers("m-a", "m-b", "j-j"), jobs=jobs, present=present_for("m-a", "m-b", "j-j")
    )


def replacement_of(p: Plan, slot: str, attempt: int = 1) -> dict[str, Any]:
    name = vocab.oom_retry_job_name(slot, attempt)
    actions = created_jobs(p)
    assert name in actions, f"{name} not created: {sorted(actions)}"
    manifest = actions[name].manifest
    assert manifest is not None
    return manifest


def observe_created(observed: Observed, manifest: dict[str, Any], state: JobState) -> Observed:
    """``observed`` once the created Job is seen by the watch in ``state`` (its annotations kept)."""
    seen = replace(job_state(manifest), succeeded=state.succeeded, failed=state.failed, oom=state.oom)
    return replace(observed, jobs={**observed.jobs, manifest["metadata"]["name"]: seen})


# ------------------------------------------------------------------------------------ naming


def test_a_replacement_is_named_from_its_job_and_attempt_deterministically_and_dns_safe() -> None:
    long_slot = vocab.generation_job_name("r" * 40, "m" * 30, "s" * 20)
    assert len(long_slot) == vocab.JOB_NAME_LIMIT
    names = {vocab.oom_retry_job_name(slot, n) for slot in (GEN_A, long_slot) for n in (1, 2, 12)}
    assert len(names) == 6
    for name in names:
        assert DNS_LABEL.match(name) and len(name) <= vocab.JOB_NAME_LIMIT, name
    assert vocab.oom_retry_job_name(GEN_A, 1) == vocab.oom_retry_job_name(GEN_A, 1) == f"{GEN_A}-oom1"
    assert vocab.oom_retry_job_name(long_slot, 1) != vocab.oom_retry_job_name(long_slot[:-1] + "x", 1)


@pytest.mark.parametrize(
    ("limit", "cap", "expected"),
    [("64Mi", "8Gi", "128Mi"), ("3Gi", "8Gi", "6Gi"), ("6Gi", "8Gi", "8Gi"), ("8Gi", "8Gi", None)],
)
def test_the_memory_limit_doubles_up_to_the_cap_and_not_past_it(
    limit: str, cap: str, expected: str | None
) -> None:
    assert oom_retry.next_memory_limit(limit, cap) == expected


# ----------------------------------------------------------------------------- the planner


def test_an_oom_killed_generation_job_is_replaced_with_twice_the_memory_and_the_run_goes_on() -> None:
    observed = generating({**generation_jobs(["a"], oom_killed("64Mi", "32Mi"), series=("primary",))})
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)

    assert p.phase == "Generating"
    container = stage_container(replacement_of(p, GEN_A))
    assert container["resources"]["limits"]["memory"] == "128Mi"
    assert container["resources"]["requests"]["memory"] == "64Mi"
    assert container["args"][:1] == ["generate"] and "a" in container["args"]
    healthy = condition(p, "JobsHealthy")
    assert healthy["status"] == "False" and healthy["reason"] == "OOMKilled"
    assert GEN_A in healthy["message"] and "64Mi" in healthy["message"] and "128Mi" in healthy["message"]
    assert condition(p, "Failed")["status"] == "False"
    warnings = [e for e in p.events if e.reason == "OOMKilled"]
    assert len(warnings) == 1 and warnings[0].type == "Warning" and "exit code 137" in warnings[0].message


def test_the_request_is_raised_with_the_limit_but_never_above_it() -> None:
    observed = generating(generation_jobs(["a"], oom_killed("64Mi", "64Mi"), series=("primary",)))
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    resources = stage_container(replacement_of(p, GEN_A))["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "128Mi"
    assert resources["requests"]["cpu"] == "500m"  # the rest of the chart's resources is kept


def test_the_replacement_is_the_same_job_but_for_its_name_memory_and_what_it_replaces() -> None:
    run = build_cluster_run()
    observed = generating(generation_jobs(["a"], oom_killed(), series=("primary",)))
    manifest = replacement_of(plan(run, observed, {"phase": "Generating"}, NOW), GEN_A)
    first = plan(run, generating({}), {"phase": "Generating"}, NOW)
    original = created_jobs(first)[GEN_A].manifest
    assert original is not None
    assert manifest["spec"]["template"]["metadata"] == original["spec"]["template"]["metadata"]
    assert {k: v for k, v in stage_container(manifest).items() if k != "resources"} == {
        k: v for k, v in stage_container(original).items() if k != "resources"
    }
    note = job_state(manifest).retry
    assert note is not None and (note.slot, note.attempt, note.replaced) == (GEN_A, 1, GEN_A)
    assert (note.killed_at, note.memory_limit) == ("64Mi", "128Mi")


def test_while_the_replacement_runs_nothing_is_created_again_and_the_condition_still_names_the_oom() -> None:
    run = build_cluster_run()
    observed = generating(generation_jobs(["a"], oom_killed(), series=("primary",)))
    first = plan(run, observed, {"phase": "Generating"}, NOW)
    running = observe_created(observed, replacement_of(first, GEN_A), JOB_RUNNING)
    p = plan(run, running, first.status, NOW)
    assert GEN_A not in created_jobs(p) and vocab.oom_retry_job_name(GEN_A, 1) not in created_jobs(p)
    assert p.phase == "Generating"
    assert condition(p, "JobsHealthy")["reason"] == "OOMKilled"
    assert condition(p, "JobsHealthy")["message"] == condition(first, "JobsHealthy")["message"]
    assert not [e for e in p.events if e.reason == "OOMKilled"]  # one Warning per OOM kill


def test_a_succeeded_replacement_counts_as_generated_and_the_condition_names_the_recovery() -> None:
    run = build_cluster_run()
    observed = generating(generation_jobs(["a"], oom_killed(), series=("primary",)))
    first = plan(run, observed, {"phase": "Generating"}, NOW)
    done = observe_created(observed, replacement_of(first, GEN_A), JOB_DONE)
    p = plan(run, done, first.status, NOW)
    assert p.status["stages"]["generation"]["jobsDone"] == 1
    healthy = condition(p, "JobsHealthy")
    assert healthy["status"] == "True" and healthy["reason"] == "RecoveredFromOOMKill"
    retried = vocab.oom_retry_job_name(GEN_A, 1)
    assert all(part in healthy["message"] for part in (GEN_A, retried, "64Mi", "128Mi"))
    assert [e.type for e in p.events if e.reason == "RecoveredFromOOMKill"] == ["Normal"]


def test_an_oom_killed_replacement_is_replaced_again_with_twice_its_memory() -> None:
    run = build_cluster_run()
    observed = generating(generation_jobs(["a"], oom_killed("64Mi"), series=("primary",)))
    first = plan(run, observed, {"phase": "Generating"}, NOW)
    again = observe_created(observed, replacement_of(first, GEN_A), oom_killed("128Mi", "64Mi"))
    p = plan(run, again, first.status, NOW)
    resources = stage_container(replacement_of(p, GEN_A, attempt=2))["resources"]
    assert resources["limits"]["memory"] == "256Mi"
    message = condition(p, "JobsHealthy")["message"]
    assert vocab.oom_retry_job_name(GEN_A, 1) in message and "256Mi" in message


def test_at_the_cap_the_run_fails_naming_the_oom() -> None:
    run = with_settings(build_cluster_run(), job_oom_max_memory="128Mi")
    observed = generating(generation_jobs(["a"], oom_killed("128Mi"), series=("primary",)))
    p = plan(run, observed, {"phase": "Generating"}, NOW)
    assert p.phase == "Failed"
    assert created_jobs(p) == {}
    failed = condition(p, "Failed")["message"]
    assert GEN_A in failed and "OOMKilled" in failed and "128Mi" in failed
    healthy = condition(p, "JobsHealthy")
    assert (
        healthy["status"] == "False"
        and healthy["reason"] == "OOMKilled"
        and "not retried" in healthy["message"]
    )


def test_an_oom_kill_without_a_memory_limit_is_not_retried_and_fails_naming_it() -> None:
    observed = generating(generation_jobs(["a"], oom_killed(limit=None), series=("primary",)))
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert p.phase == "Failed" and created_jobs(p) == {}
    assert "OOMKilled" in condition(p, "Failed")["message"]


def test_a_failure_that_is_not_an_oom_kill_fails_the_run_as_before() -> None:
    observed = generating(generation_jobs(["a"], JOB_FAILED, series=("primary",)))
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert p.phase == "Failed" and created_jobs(p) == {}
    assert "OOMKilled" not in condition(p, "Failed")["message"]
    healthy = condition(p, "JobsHealthy")
    assert (healthy["status"], healthy["reason"]) == ("True", "NoOOMKill")


def test_an_oom_killed_judge_round_is_replaced_with_the_same_round_and_models() -> None:
    run = build_cluster_run()
    observed = Observed(
        deployments=ready_servers("j-j"),
        jobs={
            **generation_jobs("abc", JOB_DONE),
            **judge_jobs(["j"], JOB_DONE, series=("t08",)),
            **judge_jobs(["j"], oom_killed(), series=("primary",), complete=3),
        },
        present=present_for("j-j"),
    )
    p = plan(run, observed, {"phase": "Judging"}, NOW)
    slot = vocab.judge_job_name("r", "j", "primary", 1)
    manifest = replacement_of(p, slot)
    assert manifest["metadata"]["annotations"][vocab.ANNOTATION_MODELS_COMPLETE] == "3"
    assert stage_container(manifest)["args"][:1] == ["judge"]
    assert p.phase == "Judging"
    done = plan(run, observe_created(observed, manifest, JOB_DONE), p.status, NOW)
    assert done.phase == "Aggregating"


def test_an_oom_killed_aggregation_is_replaced_and_its_success_ends_the_run() -> None:
    run = build_cluster_run()
    agg = vocab.aggregation_job_name("r")
    judged = {**generation_jobs("abc", JOB_DONE), **judge_jobs(["j"], JOB_DONE)}
    observed = Observed(jobs={**judged, agg: oom_killed()}, present=present_for())
    p = plan(run, observed, {"phase": "Aggregating"}, NOW)
    assert p.phase == "Aggregating"
    manifest = replacement_of(p, agg)
    assert stage_container(manifest)["args"][:1] == ["aggregate"]
    done = replace(observe_created(observed, manifest, JOB_DONE), summary={"primarySeries": "primary"})
    assert plan(run, done, p.status, NOW).phase == "Succeeded"


def test_the_latest_attempt_stands_for_its_job() -> None:
    run: ClusterRun = build_cluster_run()
    observed = generating(generation_jobs(["a"], oom_killed(), series=("primary",)))
    manifest = replacement_of(plan(run, observed, {"phase": "Generating"}, NOW), GEN_A)
    seen = observe_created(observed, manifest, JOB_DONE)
    assert set(current_attempts(seen.jobs)) == {GEN_A} | set(generation_jobs([], JOB_DONE))
    assert current_attempts(seen.jobs)[GEN_A].succeeded


def test_a_replacement_just_created_is_seen_through_the_expectations_before_the_watch_shows_it() -> None:
    run = build_cluster_run()
    observed = generating(generation_jobs(["a"], oom_killed(), series=("primary",)))
    first = plan(run, observed, {"phase": "Generating"}, NOW)
    expectations = Expectations()
    name = vocab.oom_retry_job_name(GEN_A, 1)
    expectations.expect_created("Job", name, replacement_of(first, GEN_A), 0.0)
    p = plan(run, expectations.view(observed), first.status, NOW)
    assert name not in created_jobs(p) and GEN_A not in created_jobs(p) and p.phase == "Generating"


def test_every_series_of_the_run_is_unaffected_by_another_series_oom() -> None:
    observed = generating(
        {
            **generation_jobs(["a"], oom_killed(), series=("primary",)),
            **generation_jobs(["a"], JOB_RUNNING, series=(RUN_SERIES[1],)),
        }
    )
    p = plan(build_cluster_run(), observed, {"phase": "Generating"}, NOW)
    assert set(created_jobs(p)) >= {vocab.oom_retry_job_name(GEN_A, 1)}
    assert vocab.generation_job_name("r", "a", RUN_SERIES[1]) not in created_jobs(p)


def test_a_replacement_validates_against_the_kubernetes_schemas_even_for_the_longest_indexed_job() -> None:
    run = replace(
        build_cluster_run(), ref=vocab.RunRef(name="r" * 50, namespace="ns", uid="u"), generation_shards=64
    )
    slot = vocab.generation_job_name(run.ref.name, "a", "primary")
    server = {vocab.workload_name(run.ref.name, "m-a"): DeploymentState(replicas=1, ready_replicas=1)}
    observed = Observed(deployments=server, jobs={slot: oom_killed("64Mi")})
    manifest = replacement_of(plan(run, observed, {"phase": "Generating"}, NOW), slot)
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    assert manifest["spec"]["completionMode"] == "Indexed" and manifest["spec"]["completions"] == 64
    assert (
        DNS_LABEL.match(f"{manifest['metadata']['name']}-63") and len(manifest["metadata"]["name"]) + 3 <= 63
    )


# ------------------------------------------------------------------------------- the chart


def chart_settings(tmp_path: Path, values: dict[str, Any]) -> WorkloadSettings:
    """The operator's settings as the chart's settings ConfigMap (``envFrom``) hands them over."""
    configmap = next(
        c
        for c in of_kind(render(tmp_path, values), "ConfigMap")
        if c["metadata"]["name"].endswith("-settings")
    )
    return WorkloadSettings.from_env(configmap["data"])


def test_the_cap_is_the_charts_jobs_oom_retry_max_memory(tmp_path: Path) -> None:
    assert chart_settings(tmp_path, {}).job_oom_max_memory == "8Gi" == WorkloadSettings().job_oom_max_memory
    lowered = chart_settings(tmp_path, {"jobs": {"oomRetry": {"maxMemory": "1Gi"}}})
    assert lowered.job_oom_max_memory == "1Gi"


def test_the_chart_refuses_a_cap_that_is_no_memory_quantity(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="/jobs/oomRetry/maxMemory"):
        render(tmp_path, {"jobs": {"oomRetry": {"maxMemory": "lots"}}})
