"""EvalRuns admitted by a real Kueue (issue 25), on the real control plane.

Why this module exists: the unit tests show what the planner decides for a queued run; here Kueue
v0.17 itself (``kueue_cluster``: its release manifests, its webhooks and its manager, see
``devcluster.kueue``) suspends the Jobs, gates the model servers' Pods, admits them against a
ClusterQueue of 8 H100 GPUs, and preempts. The operator runs as the chart's ServiceAccount with
``kueue.enabled`` (read-only RBAC on Kueue's objects). What is simulated is what the other e2e
modules simulate (``kubelet_runner``); the hosted judge is a stub in this process, so each run's
only GPUs are its model's server.

* Two runs whose models need 12 GPUs together: one runs, the other is ``Queued`` (naming its
  LocalQueue, ClusterQueue and what is pending), both complete, and at no sampled moment do the
  admitted GPUs exceed 8 — read from the ClusterQueue's own reservation and from the Pods bound.
* A higher-priority run preempts a lower one mid-generation; the lower one then completes with
  exactly one answer and one judgment per key.
* A ``queueName`` naming a LocalQueue that does not exist: a clear condition, nothing created.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from e2e_kube import (
    QUALITY,
    PodRecorder,
    answer_keys,
    conditions,
    describe_namespace,
    gpu_evalrun,
    gpu_request,
    judgment_keys,
    status_of,
    wait_for,
)
from e2e_runs import prepare, run_to_the_end
from e2e_stub_openai import StubOpenAI
from kubeapi import KubeApi, KubeConfig
from kubelet_runner import ANSWER_SECONDS_ANNOTATION
from operator_up import OperatorState, down, helm_uninstall, up

from devcluster import Cluster
from kubejury_operator import vocabulary as vocab

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

H100 = "NVIDIA-H100-80GB-HBM3"
GPU = "nvidia.com/gpu"
QUOTA = 8
CLUSTER_QUEUE = "e2e-h100"
LOCAL_QUEUE = "gpu-queue"
QUESTIONS = 6  # gpu_evalrun's filters: law and finance × levels 1-3, one question each
RECONCILE_INTERVAL_S = 2.0


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def kueue_operator(kueue_cluster: Cluster) -> Iterator[OperatorState]:
    """The chart with ``kueue.enabled`` and the operator (as its ServiceAccount) on the Kueue
    cluster, as ``conftest.kube_operator`` does on the plain one."""
    state_dir = kueue_cluster.state_dir.resolve()
    work = state_dir
    if state_dir.is_relative_to("/tmp"):  # every Job pod mounts an emptyDir over /tmp
        digest = hashlib.sha1(str(state_dir).encode()).hexdigest()[:10]
        work = Path.home() / ".cache" / "kubejury" / "e2e" / f"work-{digest}"
    try:
        state = asyncio.run(
            up(
                kueue_cluster.state_dir,
                work_dir=work,
                reconcile_interval=RECONCILE_INTERVAL_S,
                quality=QUALITY,
                extra_values={"kueue.enabled": "true"},
            )
        )
        yield state
    finally:
        down(work)
        helm_uninstall(kueue_cluster.kubeconfig)
        if work != state_dir and not os.environ.get("KUBEJURY_E2E_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
async def kapi(kueue_cluster: Cluster) -> AsyncIterator[KubeApi]:
    """The Kueue cluster's API as its admin."""
    async with KubeApi(KubeConfig.load(kueue_cluster.kubeconfig)) as client:
        yield client


@pytest.fixture
async def hosted_judge() -> AsyncIterator[StubOpenAI]:
    async with StubOpenAI(QUALITY) as server:
        yield server


# ----------------------------------------------------------------------------- the queues


async def ensure_queues(api: KubeApi, namespace: str) -> None:
    """ResourceFlavors ``h100`` (the H100 nodes) and ``cpu``; the ClusterQueue of 8 H100 GPUs (and
    CPU and memory enough for everything), preempting lower priorities within itself; low and high
    WorkloadPriorityClasses; the LocalQueue ``gpu-queue`` in ``namespace``."""
    flavours: list[dict[str, Any]] = [
        {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": H100}}},
        {"metadata": {"name": "cpu"}, "spec": {}},
    ]
    for flavour in flavours:
        await api.apply(
            "resourceflavors",
            None,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", **flavour},
        )
    for name, value in (("low", 100), ("high", 1000)):
        priority = {"metadata": {"name": name}, "value": value, "description": f"e2e {name}"}
        await api.apply(
            "workloadpriorityclasses",
            None,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", **priority},
        )
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "cpu",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "1000"},
                                {"name": "memory", "nominalQuota": "10Ti"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": str(QUOTA)}]}],
                },
            ],
        },
    }
    await api.apply("clusterqueues", None, cluster_queue)
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    await api.apply("localqueues", namespace, local)


def queued_run(
    name: str,
    namespace: str,
    hosted_url: str,
    gpus: int,
    *,
    queue: str = LOCAL_QUEUE,
    priority: str | None = None,
) -> dict[str, Any]:
    """One model on ``gpus`` H100 GPUs, judged by the hosted stub only, admitted through ``queue``."""
    body = gpu_evalrun(name, namespace, hosted_url, queueName=queue)
    body["spec"]["models"] = [
        {
            "name": f"model-{name}",
            "source": f"hf://example/{name}-70b",
            "parameters": "70B",
            "resources": {"gpus": gpus},
            "nodeSelector": {"nvidia.com/gpu.product": H100},
        }
    ]
    body["spec"]["judges"] = [j for j in body["spec"]["judges"] if j.get("runtime") == "openai"]
    body["spec"]["concurrency"] = {"requestsPerEndpoint": 1}  # answers one after another
    if priority is not None:
        body["metadata"]["labels"] = {vocab.LABEL_PRIORITY_CLASS: priority}
    return body


@dataclass
class GpuSampler:
    """Samples, every half second, the H100 GPUs the ClusterQueue has reserved and the GPUs of the
    model-server Pods bound to a node and not terminating (Kueue's own account and the Pods')."""

    api: KubeApi
    namespace: str
    reserved: list[int] = field(default_factory=list)
    bound: list[int] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            try:
                cq = await self.api.get("clusterqueues", None, CLUSTER_QUEUE) or {}
                total = 0
                for flavour in (cq.get("status") or {}).get("flavorsReservation") or []:
                    for resource in flavour.get("resources") or []:
                        if resource.get("name") == GPU:
                            total += int(resource.get("total") or 0)
                self.reserved.append(total)
                pods = await self.api.list("pods", self.namespace)
                self.bound.append(
                    sum(
                        gpu_request(p)
                        for p in pods
                        if p["spec"].get("nodeName")
                        and not p["metadata"].get("deletionTimestamp")
                        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                    )
                )
            except Exception:  # a poll failing must not end the sampling
                pass
            await asyncio.sleep(0.5)


def diagnoser(api: KubeApi, namespace: str, state: OperatorState) -> Callable[[], Awaitable[str]]:
    """What a timed-out wait prints: the namespace's objects and the operator's log."""

    async def diagnose() -> str:
        return await describe_namespace(api, namespace, state.operator_log)

    return diagnose


async def queued_reason(api: KubeApi, namespace: str, name: str) -> str:
    return str((conditions(await status_of(api, namespace, name)).get("Queued") or {}).get("reason") or "")


def exactly_once(state: OperatorState, namespace: str, run: str, judges: int = 1) -> None:
    answers = answer_keys(state.results_dir, namespace, run)
    judgments = judgment_keys(state.results_dir, namespace, run)
    assert len(answers) == QUESTIONS and set(answers.values()) == {1}, answers.most_common(3)
    assert len(judgments) == judges * QUESTIONS and set(judgments.values()) == {1}, judgments.most_common(3)


# ---------------------------------------------------------------------------------- tests


async def test_two_runs_over_the_quota_one_waits_both_complete_and_admitted_gpus_never_exceed_8(
    kapi: KubeApi, kueue_operator: OperatorState, hosted_judge: StubOpenAI
) -> None:
    namespace = "e2e-kueue-quota"
    for run in ("q-eight", "q-four"):
        await prepare(kapi, kueue_operator, namespace, run)
    await ensure_queues(kapi, namespace)
    sampler = GpuSampler(kapi, namespace)
    sampling = asyncio.create_task(sampler.run())
    diagnose = diagnoser(kapi, namespace, kueue_operator)
    try:
        await kapi.create("evalruns", namespace, queued_run("q-eight", namespace, hosted_judge.url, 8))
        await wait_for(
            lambda: _reserved(sampler, QUOTA), 120, "q-eight's server to hold all 8 GPUs", diagnose
        )
        await kapi.create("evalruns", namespace, queued_run("q-four", namespace, hosted_judge.url, 4))

        async def four_waits() -> dict[str, Any] | None:
            found = conditions(await status_of(kapi, namespace, "q-four")).get("Queued")
            return found if found and found.get("reason") == "WaitingForQuota" else None

        waiting = await wait_for(four_waits, 60, "q-four to be Queued", diagnose)
        assert waiting["status"] == "True"
        assert f"LocalQueue {LOCAL_QUEUE} (ClusterQueue {CLUSTER_QUEUE})" in waiting["message"], waiting
        assert "model-server model-q-four" in waiting["message"], waiting

        eight = await run_to_the_end(kapi, kueue_operator, namespace, "q-eight")
        four = await run_to_the_end(kapi, kueue_operator, namespace, "q-four")
    finally:
        sampling.cancel()
    assert eight["phase"] == "Succeeded" and four["phase"] == "Succeeded", await diagnose()
    assert four["queue"]["waitedSeconds"] > 0 and four["queue"]["clusterQueue"] == CLUSTER_QUEUE, four[
        "queue"
    ]
    assert four["gpu"]["heldGpuSeconds"] >= 0
    assert sampler.reserved and max(sampler.reserved) <= QUOTA, sampler.reserved
    assert sampler.bound and max(sampler.bound) <= QUOTA, sampler.bound
    assert QUOTA in sampler.reserved and 4 in sampler.reserved  # each had its turn
    exactly_once(kueue_operator, namespace, "q-eight")
    exactly_once(kueue_operator, namespace, "q-four")


async def _reserved(sampler: GpuSampler, gpus: int) -> bool:
    return bool(sampler.reserved) and sampler.reserved[-1] == gpus


async def test_a_higher_priority_run_preempts_a_lower_one_which_then_completes_exactly_once(
    kapi: KubeApi, kueue_operator: OperatorState, hosted_judge: StubOpenAI
) -> None:
    namespace = "e2e-kueue-priority"
    for run in ("q-low", "q-high"):
        await prepare(kapi, kueue_operator, namespace, run)
    await ensure_queues(kapi, namespace)
    # Slow model servers (5 s an answer, one request at a time: 30 s of generation), so the low run
    # is still generating when the high one comes.
    await kapi.patch(
        "namespaces", None, namespace, {"metadata": {"annotations": {ANSWER_SECONDS_ANNOTATION: "5"}}}
    )
    recorder = PodRecorder(kapi, namespace)
    recording = asyncio.create_task(recorder.run())
    diagnose = diagnoser(kapi, namespace, kueue_operator)
    try:
        await kapi.create(
            "evalruns", namespace, queued_run("q-low", namespace, hosted_judge.url, 8, priority="low")
        )
        generation = vocab.generation_job_name("q-low", "model-q-low", "primary")

        async def low_generating() -> dict[str, Any] | None:
            job = await kapi.get("jobs", namespace, generation)
            return job if job and (job.get("status") or {}).get("active") else None

        first = await wait_for(low_generating, 180, "q-low's generation Job to run", diagnose, interval=0.5)
        await kapi.create(
            "evalruns", namespace, queued_run("q-high", namespace, hosted_judge.url, 8, priority="high")
        )

        async def low_preempted() -> bool:
            return await queued_reason(kapi, namespace, "q-low") == "WaitingForQuota"

        await wait_for(low_preempted, 60, "q-low to be preempted and queued again", diagnose, interval=0.5)
        high = await run_to_the_end(kapi, kueue_operator, namespace, "q-high")
        low = await run_to_the_end(kapi, kueue_operator, namespace, "q-low")
    finally:
        recording.cancel()
    assert high["phase"] == "Succeeded" and low["phase"] == "Succeeded", await diagnose()
    low_servers = [
        p for p in recorder.model_server_pods() if p["metadata"]["labels"].get(vocab.LABEL_RUN) == "q-low"
    ]
    assert len(low_servers) >= 2, [
        p["metadata"]["name"] for p in low_servers
    ]  # preempted, then admitted again
    assert low["queue"]["waitedSeconds"] > 0, low["queue"]
    # guard 2: the Job of the preempted server was deleted, and made again once it was readmitted
    again = await kapi.get("jobs", namespace, generation)
    assert again is not None and again["metadata"]["uid"] != first["metadata"]["uid"]
    exactly_once(kueue_operator, namespace, "q-low")
    exactly_once(kueue_operator, namespace, "q-high")


async def test_a_missing_local_queue_gets_a_clear_condition_and_nothing_is_created(
    kapi: KubeApi, kueue_operator: OperatorState, hosted_judge: StubOpenAI
) -> None:
    namespace = "e2e-kueue-missing"
    await prepare(kapi, kueue_operator, namespace, "q-nowhere")
    body = queued_run("q-nowhere", namespace, hosted_judge.url, 4, queue="no-such-queue")
    await kapi.create("evalruns", namespace, body)
    diagnose = diagnoser(kapi, namespace, kueue_operator)

    async def reported() -> bool:
        return await queued_reason(kapi, namespace, "q-nowhere") == "LocalQueueNotFound"

    await wait_for(reported, 60, "q-nowhere's LocalQueueNotFound condition", diagnose)
    status = await status_of(kapi, namespace, "q-nowhere")
    queued = conditions(status)["Queued"]
    assert queued["status"] == "True" and "'no-such-queue' does not exist" in queued["message"], queued
    assert status["phase"] == "Pending"
    await asyncio.sleep(3 * RECONCILE_INTERVAL_S)  # still nothing, reconciles later
    for kind in ("deployments", "jobs"):
        owned = [
            o["metadata"]["name"]
            for o in await kapi.list(kind, namespace)
            if (o["metadata"].get("labels") or {}).get(vocab.LABEL_RUN) == "q-nowhere"
        ]
        assert owned == [], (kind, owned)
    await kapi.delete("evalruns", namespace, "q-nowhere")


async def test_a_server_whose_job_cannot_be_admitted_gives_its_gpus_back_after_the_grace(
    kapi: KubeApi, kueue_operator: OperatorState, hosted_judge: StubOpenAI
) -> None:
    """Guard 1: a ClusterQueue with CPU for the model server but none left for its Job. The server
    is admitted and Ready, its generation Job waits (Queued names it), and after the grace (60 s)
    the server is scaled to zero and the Job deleted — both are made again (they queue again)."""
    namespace = "e2e-kueue-starved"
    await prepare(kapi, kueue_operator, namespace, "q-starved")
    await ensure_queues(kapi, namespace)
    starved = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "e2e-starved"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "cpu",
                            # the server's own request (inference.serverRequests.cpu, 2): nothing left for a Job
                            "resources": [
                                {"name": "cpu", "nominalQuota": "2"},
                                {"name": "memory", "nominalQuota": "1Ti"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": str(QUOTA)}]}],
                },
            ],
        },
    }
    await kapi.apply("clusterqueues", None, starved)
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "starved", "namespace": namespace},
        "spec": {"clusterQueue": "e2e-starved"},
    }
    await kapi.apply("localqueues", namespace, local)
    diagnose = diagnoser(kapi, namespace, kueue_operator)
    recorder = PodRecorder(kapi, namespace)
    recording = asyncio.create_task(recorder.run())
    generation = vocab.generation_job_name("q-starved", "model-q-starved", "primary")
    try:
        await kapi.create(
            "evalruns", namespace, queued_run("q-starved", namespace, hosted_judge.url, 4, queue="starved")
        )

        async def job_waits() -> dict[str, Any] | None:
            found = conditions(await status_of(kapi, namespace, "q-starved")).get("Queued") or {}
            job = await kapi.get("jobs", namespace, generation)
            return job if job and f"Job {generation}" in str(found.get("message")) else None

        first = await wait_for(job_waits, 120, "q-starved's generation Job to wait for quota", diagnose)
        message = conditions(await status_of(kapi, namespace, "q-starved"))["Queued"]["message"]
        assert "ClusterQueue e2e-starved" in message and "cpu" in message, message

        async def released() -> bool:
            job = await kapi.get("jobs", namespace, generation)
            servers = [
                p
                for p in recorder.model_server_pods()
                if p["metadata"]["labels"].get(vocab.LABEL_RUN) == "q-starved"
            ]
            return len(servers) >= 2 and (job is None or job["metadata"]["uid"] != first["metadata"]["uid"])

        await wait_for(
            released, 150, "the server to be released and the Job deleted after the grace", diagnose
        )
        assert (await status_of(kapi, namespace, "q-starved")).get("phase") not in ("Failed", "Succeeded")
    finally:
        recording.cancel()
        await kapi.delete(
            "evalruns", namespace, "q-starved"
        )  # it would cycle: this queue never admits its Job
