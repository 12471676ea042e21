"""Kueue in the operator (issue 25): queue labels, what is read of Kueue's objects, the ``Queued``
condition, ``status.queue``, the guards against partial holds, and the progress deadline."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from factories import (
    BASE_PRESENT,
    CLUSTER_QUEUE,
    JOB_DONE,
    JOB_RUNNING,
    QUEUE,
    build_cluster_run,
    build_evalrun,
    cluster_queue,
    generation_jobs,
    judge_jobs,
    kueue_server_pod,
    kueue_workload,
    local_queue,
    present_for,
    queued_cluster_run,
    ready_servers,
    suspended,
    watched_caches,
    workload_of,
)
from kubejury.config.spec import SpecError, parse_evalrun
from kubejury.records.run_status import QueueStatus, RunStatus
from kubejury_operator import queueing
from kubejury_operator import vocabulary as vocab
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.observe import observe_queue
from kubejury_operator.observed import (
    DeploymentState,
    Observed,
    job_state,
    servers_admitted_at,
    servers_bringup_seconds,
    servers_gated,
    servers_ready_since,
)
from kubejury_operator.queue_observed import (
    FlavourUse,
    QueueState,
    cluster_queue_usage,
    pending_workloads,
)
from kubejury_operator.reconcile import Plan, plan
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.testing import FakeKubeApi

NOW = "2026-11-30T02:00:00Z"
MINUTE_AGO = "2026-11-30T01:59:00Z"
SECONDS_AGO = "2026-11-30T01:59:50Z"
HOUR_AGO = "2026-11-30T01:00:00Z"
A, B, J = "m-a", "m-b", "j-j"


def created(p: Plan, kind: str) -> dict[str, dict[str, Any]]:
    return {a.name: a.manifest for a in p.actions if a.verb == "create" and a.kind == kind and a.manifest}


def deleted(p: Plan) -> set[str]:
    return {a.name for a in p.actions if a.verb == "delete"}


def scales(p: Plan) -> dict[str, int | None]:
    return {a.name: a.replicas for a in p.actions if a.verb == "scale"}


def queued_condition(p: Plan) -> dict[str, Any] | None:
    return next((c for c in p.status["conditions"] if c["type"] == "Queued"), None)


# ------------------------------------------------------------------------------ queue name


def _queue_of(body: dict[str, Any], settings: WorkloadSettings) -> str | None:
    return cluster_run(body, parse_evalrun(body), {}, settings).queue_name


def test_spec_queue_name_wins_and_kueue_enabled_falls_back_to_the_default_local_queue() -> None:
    named, unnamed = build_evalrun(queueName="team-a"), build_evalrun()
    on, off = WorkloadSettings(kueue_enabled=True), WorkloadSettings()
    assert _queue_of(named, off) == _queue_of(named, on) == "team-a"
    assert _queue_of(unnamed, on) == "default"
    assert _queue_of(unnamed, off) is None


@pytest.mark.parametrize("bad", ["Team", "a_b", "-a", "a" * 64])
def test_queue_name_must_be_a_dns_label(bad: str) -> None:
    with pytest.raises(SpecError, match="queueName"):
        parse_evalrun(build_evalrun(queueName=bad))


def test_every_job_and_deployment_created_carries_the_queue_label_and_nothing_else_changes() -> None:
    queued, plain = queued_cluster_run(), build_cluster_run()
    servers = Observed(present=BASE_PRESENT)
    up = Observed(deployments=ready_servers(A, B), present=BASE_PRESENT | present_for(A, B))
    for observed in (servers, up):
        with_queue, without = plan(queued, observed, {}, NOW), plan(plain, observed, {}, NOW)
        for kind in ("Deployment", "Job"):
            labelled, bare = created(with_queue, kind), created(without, kind)
            assert labelled.keys() == bare.keys()
            for name, manifest in labelled.items():
                assert manifest["metadata"]["labels"][vocab.LABEL_QUEUE_NAME] == QUEUE
                expected = dict(bare[name])
                expected["metadata"] = {
                    **bare[name]["metadata"],
                    "labels": {**bare[name]["metadata"]["labels"], vocab.LABEL_QUEUE_NAME: QUEUE},
                }
                assert (
                    manifest == expected
                )  # no suspend, no gate, no pod-group label: Kueue's webhooks do that
        assert not any(vocab.LABEL_QUEUE_NAME in str(a.manifest) for a in without.actions)
    assert created(plan(queued, servers, {}, NOW), "Deployment")
    assert created(plan(queued, up, {}, NOW), "Job")


def test_judge_aggregation_and_reuse_jobs_are_labelled_too() -> None:
    run = queued_cluster_run()
    judging = Observed(
        jobs=generation_jobs("abc", JOB_DONE),
        deployments=ready_servers(J),
        present=BASE_PRESENT | present_for(J),
    )
    jobs = created(plan(run, judging, {}, NOW), "Job")
    assert jobs and all(j["metadata"]["labels"][vocab.LABEL_QUEUE_NAME] == QUEUE for j in jobs.values())
    aggregating = Observed(
        jobs={**generation_jobs("abc", JOB_DONE), **judge_jobs("j", JOB_DONE)}, present=BASE_PRESENT
    )
    (aggregation,) = created(plan(run, aggregating, {}, NOW), "Job").values()
    assert aggregation["metadata"]["labels"][vocab.LABEL_QUEUE_NAME] == QUEUE
    reusing = replace(run, reuse_from=("run-a",))
    from kubejury_operator.observed import ReuseSource, ReuseSources

    sources = ReuseSources(usable=(ReuseSource("run-a", "s3://b/runs/ns/run-a-1234"),))
    (reuse,) = created(
        plan(reusing, Observed(present=BASE_PRESENT, reuse_sources=sources), {}, NOW), "Job"
    ).values()
    assert reuse["metadata"]["labels"][vocab.LABEL_QUEUE_NAME] == QUEUE


# ------------------------------------------------------------------- reading Kueue's objects


def test_pending_workloads_are_the_runs_own_that_hold_no_quota() -> None:
    pod = f"{workload_of(A)}-0"
    job = vocab.generation_job_name("r", "b", "primary")
    workloads = [
        kueue_workload("Pod", pod),
        kueue_workload("Job", job, reserved=True),
        kueue_workload("Job", "someone-elses"),
        kueue_workload(
            "Job", "kj-r-agg", reason="Inadmissible", message="LocalQueue gpu-queue doesn't exist"
        ),
    ]
    found = pending_workloads(workloads, [job, "kj-r-agg"], {pod: A})
    assert [p.owner for p in found] == [f"model-server {A}", "Job kj-r-agg"]
    assert found[0].requests[0] == ("nvidia.com/gpu", "1")
    assert found[0].flavour("nvidia.com/gpu") == "h100"
    both = replace(
        found[0],
        message="insufficient unused quota for cpu in flavor cpu, 1 more needed; "
        "insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed",
    )
    assert (both.flavour("nvidia.com/gpu"), both.flavour("cpu"), both.flavour("memory")) == (
        "h100",
        "cpu",
        "cpu",
    )
    assert found[1].reason == "Inadmissible"


def test_cluster_queue_usage_is_reservation_against_nominal_quota() -> None:
    usage = cluster_queue_usage(cluster_queue(gpus=8, in_use=6))
    assert FlavourUse("h100", "nvidia.com/gpu", "6", "8") in usage
    assert FlavourUse("default", "cpu", "10", "64") in usage
    assert cluster_queue_usage(None) == ()


def test_gated_and_admitted_server_pods_and_suspended_jobs_are_observed() -> None:
    pods = [
        kueue_server_pod(A, gated=True),
        kueue_server_pod(B, scheduled_at=MINUTE_AGO, ready_at=SECONDS_AGO, created=HOUR_AGO),
    ]
    assert servers_gated(pods) == {A: "2026-11-30T01:00:00Z"}
    assert servers_admitted_at(pods) == {B: MINUTE_AGO}
    # a gated Pod is never Ready: the time it queues is not GPU time held
    assert servers_ready_since(pods) == {B: SECONDS_AGO}
    # bring-up counts from admission, not creation: the hour queued is not bring-up
    assert servers_bringup_seconds(pods) == {B: 50.0}
    job = job_state(
        {"status": {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime": NOW}]}}
    )
    assert job.suspended_since == NOW and not job.finished


def _observe(api: FakeKubeApi, run: ClusterRun, observed: Observed, readable: bool = True) -> Observed:
    pods = [kueue_server_pod(A, gated=True)] if observed.servers_gated else []
    return asyncio.run(observe_queue(api, watched_caches(pods), run, observed, {}, readable))


def test_observe_queue_reads_the_local_queue_its_cluster_queue_and_the_runs_workloads() -> None:
    pod = f"{workload_of(A)}-0"
    api = FakeKubeApi(local_queue(), cluster_queue(), kueue_workload("Pod", pod))
    waiting = Observed(deployments={workload_of(A): DeploymentState(replicas=1)}, servers_gated={A: HOUR_AGO})
    queue = _observe(api, queued_cluster_run(), waiting).queue
    assert queue is not None and queue.found and queue.cluster_queue == CLUSTER_QUEUE
    assert [p.owner for p in queue.pending] == [f"model-server {A}"]
    assert api.verbs() == ["get", "get", "list_objects"]


def test_observe_queue_reads_nothing_when_everything_is_admitted_or_the_run_is_not_queued() -> None:
    api = FakeKubeApi(local_queue(), cluster_queue())
    running = Observed(deployments=ready_servers(A), jobs=generation_jobs("a", JOB_RUNNING))
    assert _observe(api, queued_cluster_run(), running).queue is None
    assert _observe(api, build_cluster_run(), Observed()).queue is None
    assert api.calls == []


def test_a_missing_local_queue_is_found_missing_and_unreadable_kueue_is_said() -> None:
    missing = _observe(FakeKubeApi(), queued_cluster_run(), Observed()).queue
    assert missing == QueueState(local_queue=QUEUE, found=False)
    api = FakeKubeApi(local_queue())
    unread = _observe(api, queued_cluster_run(), Observed(), readable=False).queue
    assert unread is not None and unread.error and "kueue.enabled" in unread.error
    assert api.calls == []


# ------------------------------------------------------------------------ Queued condition


def test_a_server_waiting_for_quota_is_queued_naming_the_queues_and_what_is_pending() -> None:
    queue = QueueState(
        local_queue=QUEUE,
        cluster_queue=CLUSTER_QUEUE,
        usage=cluster_queue_usage(cluster_queue(gpus=8, in_use=8)),
        pending=pending_workloads([kueue_workload("Pod", "p-a")], [], {"p-a": A}),
    )
    observed = Observed(
        deployments={workload_of(A): DeploymentState(replicas=1)},
        present=BASE_PRESENT | present_for(A),
        servers_gated={A: HOUR_AGO},
        queue=queue,
    )
    p = plan(queued_cluster_run(), observed, {}, NOW)
    cond = queued_condition(p)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "WaitingForQuota"
    assert cond["message"] == (
        f"LocalQueue {QUEUE} (ClusterQueue {CLUSTER_QUEUE}): "
        "model-server a: 1 nvidia.com/gpu of flavour h100 pending; 8 of 8 in use."
    )
    assert p.status["queue"] == {
        "localQueue": QUEUE,
        "clusterQueue": CLUSTER_QUEUE,
        "waitingSince": NOW,
        "waitedSeconds": 0.0,
    }
    assert ("Normal", "Queued") in {(e.type, e.reason) for e in p.events}


def test_a_missing_local_queue_blocks_the_run_with_a_clear_condition() -> None:
    observed = Observed(queue=QueueState(local_queue=QUEUE, found=False))
    p = plan(queued_cluster_run(), observed, {}, NOW)
    assert p.actions == () and p.phase == "Pending"
    cond = queued_condition(p)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "LocalQueueNotFound")
    assert f"LocalQueue '{QUEUE}' does not exist in namespace 'ns'" in cond["message"]
    provisioned = next(c for c in p.status["conditions"] if c["type"] == "ModelsProvisioned")
    assert provisioned["reason"] == "LocalQueueNotFound"
    assert ("Warning", "LocalQueueNotFound") in {(e.type, e.reason) for e in p.events}


def test_an_admitted_run_is_not_queued_and_a_run_without_a_queue_has_no_such_condition() -> None:
    up = Observed(deployments=ready_servers(A, B), present=BASE_PRESENT | present_for(A, B))
    cond = queued_condition(plan(queued_cluster_run(), up, {}, NOW))
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Admitted")
    unqueued = plan(build_cluster_run(), up, {}, NOW)
    assert queued_condition(unqueued) is None and "queue" not in unqueued.status


def test_waited_time_opens_while_queued_and_closes_when_admitted() -> None:
    run = queued_cluster_run()
    waiting = Observed(deployments={workload_of(A): DeploymentState(replicas=1)}, servers_gated={A: HOUR_AGO})
    first = plan(run, waiting, {}, HOUR_AGO)
    assert first.status["queue"]["waitingSince"] == HOUR_AGO
    admitted = Observed(deployments=ready_servers(A, B), present=BASE_PRESENT | present_for(A, B))
    later = plan(run, admitted, first.status, NOW)
    assert later.status["queue"]["waitingSince"] is None
    assert later.status["queue"]["waitedSeconds"] == 3600.0
    back = RunStatus.from_json(later.status).queue
    assert back == QueueStatus(
        local_queue=QUEUE, cluster_queue=None, waiting_since=None, waited_seconds=3600.0
    )


# -------------------------------------------------------------------------------- guards


GEN_A = vocab.generation_job_name("r", "a", "primary")
GEN_A2 = vocab.generation_job_name("r", "a", "t08")


def _with_server(jobs: dict[str, Any], **kw: Any) -> Observed:
    jobs = {name: replace(job, server=A) for name, job in jobs.items()}
    return Observed(deployments=ready_servers(A), present=BASE_PRESENT | present_for(A), jobs=jobs, **kw)


GUARD_CASES: list[tuple[str, Observed, frozenset[str], set[str]]] = [
    (
        "every Job of a Ready server unadmitted past the grace: release the server, delete the Jobs",
        _with_server({GEN_A: suspended(MINUTE_AGO), GEN_A2: suspended(MINUTE_AGO)}),
        frozenset({A}),
        {GEN_A, GEN_A2},
    ),
    (
        "within the grace: wait",
        _with_server({GEN_A: suspended(SECONDS_AGO), GEN_A2: suspended(MINUTE_AGO)}),
        frozenset(),
        set(),
    ),
    (
        "one Job of the server admitted and running: the server is used, the other waits",
        _with_server({GEN_A: JOB_RUNNING, GEN_A2: suspended(HOUR_AGO)}),
        frozenset(),
        set(),
    ),
    (
        "a finished Job does not count",
        _with_server({GEN_A: JOB_DONE, GEN_A2: suspended(HOUR_AGO)}),
        frozenset({A}),
        {GEN_A2},
    ),
    (
        "server preempted (its new Pod is gated): its Jobs stop",
        Observed(
            deployments={workload_of(A): DeploymentState(replicas=1)},
            jobs={GEN_A: replace(JOB_RUNNING, server=A), GEN_A2: replace(JOB_DONE, server=A)},
            servers_gated={A: NOW},
        ),
        frozenset(),
        {GEN_A},
    ),
    (
        "server not Ready but not gated (a crash, not Kueue): nothing",
        Observed(
            deployments={workload_of(A): DeploymentState(replicas=1)},
            jobs={GEN_A: replace(JOB_RUNNING, server=A)},
        ),
        frozenset(),
        set(),
    ),
]


@pytest.mark.parametrize(
    ("case", "observed", "release", "stop"), GUARD_CASES, ids=[c[0] for c in GUARD_CASES]
)
def test_guards(case: str, observed: Observed, release: frozenset[str], stop: set[str]) -> None:
    found = queueing.guards(queued_cluster_run(), observed, NOW)
    assert (found.release, set(found.stop)) == (release, stop)
    assert queueing.guards(build_cluster_run(), observed, NOW) == queueing.Guards()  # never without a queue


def test_guard_one_in_the_plan_scales_the_server_to_zero_and_deletes_its_jobs() -> None:
    observed = _with_server({GEN_A: suspended(MINUTE_AGO), GEN_A2: suspended(MINUTE_AGO)})
    p = plan(queued_cluster_run(), observed, {}, NOW)
    assert scales(p)[workload_of(A)] == 0
    assert deleted(p) == {GEN_A, GEN_A2}
    assert not created(p, "Job")


def test_guard_two_in_the_plan_deletes_the_jobs_of_a_preempted_server() -> None:
    observed = GUARD_CASES[4][1]
    p = plan(queued_cluster_run(), replace(observed, present=BASE_PRESENT | present_for(A)), {}, NOW)
    assert deleted(p) == {GEN_A}
    assert workload_of(A) not in scales(p)  # it stays wanted: its gated Pod queues again


def test_the_grace_is_a_setting() -> None:
    observed = _with_server({GEN_A: suspended(SECONDS_AGO), GEN_A2: suspended(SECONDS_AGO)})
    assert queueing.guards(queued_cluster_run(kueue_job_grace_seconds=5), observed, NOW).release == {A}


# ---------------------------------------------------------------------- progress deadline

STALLED = DeploymentState(replicas=1, stalled=True, message="ReplicaSet has timed out progressing.")


@pytest.mark.parametrize(
    ("queued", "gated", "admitted", "fails"),
    [
        (True, True, None, False),  # waiting for quota: the deadline does not count
        (True, False, MINUTE_AGO, False),  # admitted a minute ago: loading, the deadline counts from here
        (True, False, "2026-11-29T01:00:00Z", True),  # admitted a day ago and still not Ready
        (False, False, None, True),  # no queue: as before
        (False, True, None, True),  # a gate that is not Kueue's on an unqueued run: as before
    ],
)
def test_a_queued_servers_progress_deadline_counts_from_its_admission(
    queued: bool, gated: bool, admitted: str | None, fails: bool
) -> None:
    run = queued_cluster_run() if queued else build_cluster_run()
    observed = Observed(
        deployments={workload_of(A): STALLED},
        present=BASE_PRESENT | present_for(A),
        servers_gated={A: HOUR_AGO} if gated else {},
        servers_admitted_at={A: admitted} if admitted else {},
    )
    assert (plan(run, observed, {}, NOW).phase == "Failed") is fails


# ------------------------------------------------------------------------------- the CRD


def test_kubectl_get_shows_the_queued_reason() -> None:
    from kubejury_operator.crd import PRINTER_COLUMNS

    column = next(c for c in PRINTER_COLUMNS if c["name"] == "Queued")
    assert column["jsonPath"] == '.status.conditions[?(@.type=="Queued")].reason'


def test_gpu_accounting_holds_nothing_while_the_server_pod_is_gated() -> None:
    run = queued_cluster_run()
    waiting = Observed(
        deployments={workload_of(A): DeploymentState(replicas=1)},
        present=BASE_PRESENT | present_for(A),
        servers_gated={A: HOUR_AGO},
        servers_ready_since=servers_ready_since([kueue_server_pod(A, gated=True)]),
    )
    p = plan(run, waiting, {}, NOW)
    gpu = (p.status.get("gpu") or {}).get("servers") or {}
    assert all(not s.get("readySince") and not s.get("heldGpuSeconds") for s in gpu.values())


def test_the_evalruns_priority_class_label_is_copied_with_the_queue_label() -> None:
    body = build_evalrun(queueName="team-a")
    body["metadata"]["labels"] = {vocab.LABEL_PRIORITY_CLASS: "high"}
    run = cluster_run(body, parse_evalrun(body), {}, WorkloadSettings())
    assert run.priority_class == "high"
    (deployment, *_) = created(
        plan(replace(queued_cluster_run(), priority_class="high"), Observed(), {}, NOW), "Deployment"
    ).values()
    assert deployment["metadata"]["labels"][vocab.LABEL_PRIORITY_CLASS] == "high"
    unqueued = replace(build_cluster_run(), priority_class="high")  # no queue: no Kueue label at all
    assert all(
        vocab.LABEL_PRIORITY_CLASS not in str(a.manifest) for a in plan(unqueued, Observed(), {}, NOW).actions
    )
