"""Expectations: a write is seen as made until the caches show it, and no longer than the TTL."""

from __future__ import annotations

from kubejury_operator import manifests as mf
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab
from kubejury_operator.expectations import EXPECTATION_TTL_SECONDS, Expectations
from kubejury_operator.observed import DeploymentState, JobState, Observed

REF = vocab.RunRef("r", "evals", "uid-1")
JOB = mf.aggregation_job(REF, opsettings.WorkloadSettings(), vocab.JobStorage(uri="s3://b/runs"))
JOB_NAME = JOB["metadata"]["name"]


def test_a_created_job_is_seen_not_started_until_the_cache_shows_it() -> None:
    expectations = Expectations()
    expectations.expect_created("Job", JOB_NAME, JOB, now=10.0)
    expectations.settle(Observed(), now=11.0)
    assert expectations.view(Observed()).jobs == {JOB_NAME: JobState()}
    shown = Observed(jobs={JOB_NAME: JobState(succeeded=True)})
    expectations.settle(shown, now=12.0)
    assert not expectations and expectations.view(shown) is shown


def test_a_scale_is_seen_at_the_replicas_sent_until_the_cache_shows_them() -> None:
    name = "kj-r-m-a"
    before = Observed(deployments={name: DeploymentState(replicas=1, ready_replicas=1)})
    expectations = Expectations()
    expectations.expect_scaled(name, 0, now=10.0)
    expectations.settle(before, now=10.5)
    seen = expectations.view(before).deployments[name]
    assert seen.replicas == 0 and not seen.ready
    expectations.settle(Observed(deployments={name: DeploymentState(replicas=0)}), now=11.0)
    assert not expectations


def test_other_children_are_present_and_a_write_never_shown_is_forgotten_after_the_ttl() -> None:
    expectations = Expectations()
    expectations.expect_created("Service", "kj-r-m-a", {"metadata": {"name": "kj-r-m-a"}}, now=10.0)
    expectations.expect_scaled("kj-r-m-b", 1, now=10.0)
    observed = Observed(deployments={"kj-r-m-b": DeploymentState(replicas=0)})
    assert ("Service", "kj-r-m-a") in expectations.view(observed).present
    expectations.settle(observed, now=10.0 + EXPECTATION_TTL_SECONDS / 2)
    assert expectations
    expectations.settle(observed, now=10.0 + EXPECTATION_TTL_SECONDS + 1)
    assert not expectations  # lost: the planner sees the cache again and writes it once more
