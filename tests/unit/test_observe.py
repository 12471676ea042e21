"""What a reconcile observes (kubejury_operator.observe): children from the watch-fed caches,
Secrets from the in-memory Kubernetes API, progress from storage (read once, then reused)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from factories import build_cluster_run, build_evalrun, model_entry, watched_caches
from kubejury.config.spec import parse_evalrun
from kubejury_operator import observe, run_storage
from kubejury_operator import vocabulary as vocab
from kubejury_operator.observed import JobState, Observed
from kubejury_operator.progress_cache import ProgressCache
from kubejury_operator.tenancy import TenantPolicy
from kubejury_operator.testing import FakeKubeApi

LOG = logging.getLogger("test")


def child(kind: str, name: str, component: str = "server", **status: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "evals", "labels": vocab.labels("r", component)}
    return {"kind": kind, "metadata": meta, "spec": {"replicas": 1}, "status": status}


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"kind": "Secret", "metadata": {"name": name, "namespace": "evals"}, "stringData": data}


def run_with_secrets() -> dict[str, Any]:
    judge = model_entry("j", runtime="openai", source="https://api.example.com/v1")
    judge["apiKeySecretRef"] = {"name": "judge-key", "key": "api-key"}
    storage = {"uri": "s3://b/runs", "credentialsSecretRef": {"name": "s3"}}
    return build_evalrun(judges=[judge], storage=storage)


async def test_a_runs_children_come_from_the_caches_and_only_secrets_are_asked_of_the_api() -> None:
    evalrun = parse_evalrun(run_with_secrets())
    api = FakeKubeApi(secret("s3", AWS_ACCESS_KEY_ID="k"), secret("judge-key", other="x"))
    caches = watched_caches(
        [
            child("Deployment", "kj-r-m-qwen", readyReplicas=1, replicas=1),
            child("Job", "kj-r-aggregate", component="aggregate", succeeded=1),
            child("Service", "kj-r-m-qwen"),
            child("ConfigMap", "kj-r-spec", component="spec"),
        ]
    )
    observed = await observe.observe_cluster(api, caches, "evals", "r", evalrun)
    assert (
        set(observed.deployments) == {"kj-r-m-qwen"}
        and observed.deployments["kj-r-m-qwen"].ready_replicas == 1
    )
    assert set(observed.jobs) == {"kj-r-aggregate"}
    assert observed.present == {("Service", "kj-r-m-qwen"), ("ConfigMap", "kj-r-spec")}
    assert observed.missing_secrets == ("judge-key/api-key",)
    assert set(api.verbs()) == {"secret_keys"}  # nothing listed


async def test_a_secret_missing_altogether_is_named_once() -> None:
    evalrun = parse_evalrun(run_with_secrets())
    missing = await observe.missing_secrets(FakeKubeApi(), "evals", evalrun.spec)
    assert missing == ("judge-key/api-key", "s3")


def reader(api: FakeKubeApi | None = None) -> observe.StorageReader:
    return observe.StorageReader(api or FakeKubeApi(), TenantPolicy(), ProgressCache(), LOG)


async def test_progress_is_read_once_and_reused_while_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []

    def read(*args: Any, **kwargs: Any) -> tuple[dict[Any, Any], dict[str, Any] | None]:
        calls.append(args[4])
        return {}, {"score": 1.0} if args[4] else None

    monkeypatch.setattr(run_storage, "read_progress_and_summary", read)
    evalrun, run, storage = parse_evalrun(build_evalrun()), build_cluster_run(), reader()
    first = await observe.observe_storage(storage, evalrun, run, Observed(), {}, now=100.0)
    again = await observe.observe_storage(storage, evalrun, run, Observed(), {}, now=101.0)
    assert calls == [False] and first.summary is None and again.summary is None
    aggregated = Observed(jobs={vocab.aggregation_job_name(run.ref.name): JobState(succeeded=True)})
    done = await observe.observe_storage(storage, evalrun, run, aggregated, {}, now=101.5)
    assert calls == [False, True] and done.summary == {"score": 1.0}  # read at once, with the report


async def test_a_finished_run_reads_nothing_and_storage_trouble_leaves_the_counters_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("storage is down")

    monkeypatch.setattr(run_storage, "read_progress_and_summary", broken)
    evalrun, run = parse_evalrun(build_evalrun()), build_cluster_run()
    seen = Observed(jobs={"kj-r-x": JobState()})
    for finished in ({"phase": "Failed"}, {"phase": "Succeeded", "summary": {}}):
        assert await observe.observe_storage(reader(), evalrun, run, seen, finished, now=1.0) is seen
    assert (
        await observe.observe_storage(reader(), evalrun, run, seen, {"phase": "Generating"}, now=1.0) is seen
    )
