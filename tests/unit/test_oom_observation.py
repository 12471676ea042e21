"""Why a failed Job's Pods died: the OOM kill read from their containers' termination reason, and
the Pods listed only for a failed Job that has no replacement yet (never on every reconcile)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from factories import JOB_DONE, JOB_FAILED, JOB_RUNNING, job_pod
from kubejury_operator import observe
from kubejury_operator import vocabulary as vocab
from kubejury_operator.gateway import GatewayError
from kubejury_operator.observed import JobState, Observed, OomKill, RetryNote, oom_kill
from kubejury_operator.testing import FakeKubeApi

GEN = vocab.generation_job_name("r", "a", "primary")
JUDGE = vocab.judge_job_name("r", "j", "primary", 1)


def pod_lists(api: FakeKubeApi) -> list[str | None]:
    """The namespaces of every Pod list the code under test made."""
    return [c.namespace for c in api.calls if c.verb == "list_objects" and c.kind == "Pod"]


# ------------------------------------------------------------------------- reading the Pods


def test_an_oom_killed_container_is_read_with_its_exit_code_and_memory_limit() -> None:
    kill = oom_kill([job_pod(GEN, limit="64Mi", name="p1")])
    assert kill == OomKill(
        pod="p1", container="stage", exit_code=137, memory_limit="64Mi", memory_request="32Mi"
    )


def test_an_oom_kill_in_the_last_state_counts_too() -> None:
    kill = oom_kill([job_pod(GEN, last_state=True)])
    assert kill is not None and kill.exit_code == 137


def test_a_container_that_died_for_another_reason_is_no_oom_kill() -> None:
    assert oom_kill([job_pod(GEN, reason="Error")]) is None
    assert oom_kill([]) is None


def test_a_kill_without_a_memory_limit_is_read_as_such() -> None:
    kill = oom_kill([job_pod(GEN, limit=None)])
    assert kill is not None and kill.memory_limit is None


def test_the_latest_oom_kill_among_the_pods_is_the_one_read() -> None:
    pods = [
        job_pod(GEN, limit="64Mi", finished_at="2026-11-30T02:00:00Z", name="early"),
        job_pod(GEN, reason="Error", finished_at="2026-11-30T04:00:00Z", name="other"),
        job_pod(GEN, limit="64Mi", finished_at="2026-11-30T03:00:00Z", name="late"),
    ]
    kill = oom_kill(pods)
    assert kill is not None and kill.pod == "late"


# ----------------------------------------------------------------------------- when they are read


async def test_the_pods_of_a_failed_job_are_listed_by_its_job_name_label_and_the_oom_kept() -> None:
    api = FakeKubeApi(job_pod(GEN), job_pod(JUDGE, reason="Error"))
    observed = Observed(jobs={GEN: JOB_FAILED, JUDGE: JOB_RUNNING})
    seen = await observe.observe_oom_kills(api, "evals", observed)
    assert pod_lists(api) == ["evals"]
    kill = seen.jobs[GEN].oom
    assert kill is not None and kill.memory_limit == "64Mi"
    assert seen.jobs[JUDGE] == JOB_RUNNING


async def test_a_failed_job_whose_pods_show_no_oom_keeps_no_oom() -> None:
    api = FakeKubeApi(job_pod(GEN, reason="Error"), job_pod(JUDGE))
    seen = await observe.observe_oom_kills(api, "evals", Observed(jobs={GEN: JOB_FAILED}))
    assert seen.jobs[GEN] == JOB_FAILED  # another Job's OOM-killed Pod is not this Job's


async def test_running_and_succeeded_jobs_cost_no_pod_list() -> None:
    api = FakeKubeApi(job_pod(GEN))
    observed = Observed(jobs={GEN: JOB_RUNNING, JUDGE: JOB_DONE})
    assert await observe.observe_oom_kills(api, "evals", observed) == observed
    assert pod_lists(api) == []


async def test_a_failed_job_already_replaced_costs_no_pod_list() -> None:
    api = FakeKubeApi(job_pod(GEN))
    retry = vocab.oom_retry_job_name(GEN, 1)
    note = RetryNote(
        slot=GEN, attempt=1, replaced=GEN, container="stage", killed_at="64Mi", memory_limit="128Mi"
    )
    observed = Observed(jobs={GEN: JOB_FAILED, retry: replace(JOB_RUNNING, retry=note)})
    assert await observe.observe_oom_kills(api, "evals", observed) == observed
    assert pod_lists(api) == []


async def test_a_refused_pod_list_is_retried_later_rather_than_read_as_no_oom() -> None:
    api = FakeKubeApi(job_pod(GEN))
    api.fail("list_objects", kind="Pod")
    with pytest.raises(Exception, match=GEN) as raised:
        await observe.observe_oom_kills(api, "evals", Observed(jobs={GEN: JOB_FAILED}))
    assert not isinstance(raised.value, GatewayError)  # a kopf.TemporaryError: the reconcile is retried


def test_job_state_reads_no_retry_note_from_an_ordinary_job() -> None:
    assert JobState().retry is None and JobState().attempt == 0
