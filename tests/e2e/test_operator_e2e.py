"""kopf running for real against KMock's Kubernetes API: an EvalRun from creation to deletion.

The operator, the API traffic and every stage command are real. The kubelet, the Deployment and
Job controllers, cluster DNS, the model servers and the garbage collector are SIMULATED by
``e2e_cluster.SimulatedCluster`` (Deployments marked ready, each Job's command run locally against
a stub OpenAI-compatible server, owned objects deleted when their EvalRun is gone) — see that
module's docstring for exactly what is simulated and how.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import SimulatedCluster

from kubejury_operator import manifests as mf

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NS = "evals"
RUN_TIMEOUT_S = 240.0


def node_list() -> list[dict[str, Any]]:
    data = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())
    return list(data["items"])


def evalrun(name: str, out: Path, stub_url: str, **spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "benchmark": {
            "uri": (REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri(),
            "filters": {"domains": ["law", "finance"], "levels": [1, 2, 3], "limitPerCell": 1},
        },
        "models": [
            {"name": "alpha", "source": "hf://example/alpha-8b", "parameters": "8B"},
            {"name": "beta", "source": "hf://example/beta-9b", "parameters": "9B"},
        ],
        "judges": [
            {"name": "judge-a", "source": "hf://example/judge-14b", "parameters": "14B"},
            {
                "name": "hosted",
                "runtime": "openai",
                "source": stub_url,
                "servedModel": "hosted-judge",
                "apiKeySecretRef": {"name": "hosted-key", "key": "token"},
            },
        ],
        "series": [
            {"name": "primary", "temperature": 0, "repetitionPenalty": 1.2},
            {"name": "warm", "temperature": 0.8, "repetitionPenalty": 1.2},
        ],
        "scoring": {"bootstrapSamples": 50},
        "storage": {"uri": out.as_uri()},
        "maxConcurrentModels": 1,
        "cleanupPolicy": "Delete",
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        # The API server would assign uid, generation and resourceVersion; KMock does not, so the test
        # does (simulated). kopf's JSON patches test resourceVersion before adding its finalizer.
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "resourceVersion": "1",
        },
        "spec": spec,
    }


async def seed(cluster: SimulatedCluster) -> None:
    for node in node_list():
        await cluster.request("POST", "/api/v1/nodes", node)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hosted-key", "namespace": NS},
        "stringData": {"token": "sk-test"},
    }
    await cluster.request("POST", f"/api/v1/namespaces/{NS}/secrets", secret)


async def create(cluster: SimulatedCluster, body: dict[str, Any]) -> None:
    await cluster.request("POST", f"/apis/kubejury.io/v1alpha1/namespaces/{NS}/evalruns", body)


def status_of(cluster: SimulatedCluster, name: str) -> dict[str, Any]:
    obj = cluster.get("evalruns", NS, name)
    return dict((obj or {}).get("status") or {})


async def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, cluster: SimulatedCluster
) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.2)

    try:
        await asyncio.wait_for(poll(), timeout=timeout)
    except TimeoutError:
        runs: dict[str, Any] = {
            o["metadata"]["name"]: (o.get("status") or {}).get("conditions")
            for o in cluster.objects("evalruns")
        }
        runs["jobs"] = {o["metadata"]["name"]: o.get("status") for o in cluster.objects("jobs")}
        runs["job_runs"] = dict(cluster.job_runs)
        runs["simulation_errors"] = cluster.errors[-5:]
        runs["paused"] = cluster.paused
        runs["kmock_locked"] = cluster.k8s._lock.locked()
        logs = {k: v[-800:] for k, v in cluster.job_logs.items()}
        raise AssertionError(f"timed out waiting for {what}; evalruns={runs}; job logs={logs}") from None


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def answers_on_disk(out: Path, run: str) -> dict[tuple[str, str], list[str]]:
    """(series, model) → question ids of every stored answer record (duplicates kept)."""
    found: dict[tuple[str, str], list[str]] = {}
    for shard in (out / run).glob("*/answers/*/part-*.jsonl"):
        series, model = shard.parts[-4], shard.parts[-2]
        for line in shard.read_text().splitlines():
            if line.strip():
                found.setdefault((series, model), []).append(json.loads(line)["question_id"])
    return found


async def test_evalrun_succeeds_with_planned_workloads_then_delete_cleans_up(
    cluster: SimulatedCluster, operator: Callable[..., Any], tmp_path: Path
) -> None:
    out = tmp_path / "results"
    await seed(cluster)
    async with operator():
        await create(cluster, evalrun("study", out, cluster.stub_url))

        # The operator deploys the first model (GPU budget 1) and the in-cluster judge, not the hosted one.
        def first_servers() -> bool:
            names = {d["metadata"]["name"] for d in cluster.objects("deployments", NS)}
            return {"kj-study-m-alpha", "kj-study-j-judge-a"} <= names and "placement" in status_of(
                cluster, "study"
            )

        await wait_for(first_servers, 60, "the first model servers", cluster)
        names = {d["metadata"]["name"] for d in cluster.objects("deployments", NS)}
        assert "kj-study-m-beta" not in names, "maxConcurrentModels=1 must hold back the second model"
        assert "kj-study-j-hosted" not in names, "runtime openai gets no workload"
        alpha = cluster.get("deployments", NS, "kj-study-m-alpha")
        assert alpha is not None
        container = alpha["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        placement = status_of(cluster, "study").get("placement", {}).get("alpha") or {}
        assert args[args.index("--served-model-name") + 1] == "alpha"
        assert args[args.index("--generation-config") + 1] == "vllm"
        assert args[args.index("--tensor-parallel-size") + 1] == str(placement.get("tensorParallelSize"))
        assert placement.get("quantization") == "fp8"  # Hopper: FP8 on a bf16 checkpoint
        assert args[args.index("--quantization") + 1] == "fp8"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(placement.get("tensorParallelSize"))
        pod = alpha["spec"]["template"]["spec"]
        assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert cluster.get("services", NS, "kj-study-m-alpha") is not None
        assert cluster.get("configmaps", NS, "kj-study-spec") is not None
        sa = cluster.get("serviceaccounts", NS, "kj-study-job")
        assert sa is not None and sa["automountServiceAccountToken"] is False

        await wait_for(
            lambda: status_of(cluster, "study").get("phase") in ("Succeeded", "Failed"),
            RUN_TIMEOUT_S,
            "the run to finish",
            cluster,
        )
        status = status_of(cluster, "study")
        assert status["phase"] == "Succeeded", status

        # Jobs with the planned commands.
        jobs = {j["metadata"]["name"]: j for j in cluster.objects("jobs", NS)}
        run_uid = (cluster.get("evalruns", NS, "study") or {})["metadata"]["uid"]
        for model in ("alpha", "beta"):
            for series in ("primary", "warm"):
                job = jobs[mf.generation_job_name("study", model, series)]
                job_args = job["spec"]["template"]["spec"]["containers"][0]["args"]
                assert job_args[:2] == ["generate", "--evalrun"]
                assert (
                    job_args[job_args.index("--endpoint") + 1]
                    == f"http://kj-study-m-{model}.{NS}.svc:8000/v1"
                )
                assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
                assert job["metadata"]["ownerReferences"][0]["uid"] == run_uid
        hosted_rounds = [n for n in jobs if n.startswith("kj-study-judge-hosted-primary-")]
        assert hosted_rounds, jobs.keys()
        hosted_args = jobs[hosted_rounds[0]]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert (
            hosted_args[hosted_args.index("--endpoint") + 1] == cluster.stub_url
        )  # the openai source itself
        assert "kj-study-aggregate" in jobs
        assert all(runs == 1 for runs in cluster.job_runs.values()), cluster.job_runs

        # Budget held throughout; every model server scaled to zero at the end.
        assert cluster.max_model_servers_up == 1
        assert all(d["spec"]["replicas"] == 0 for d in cluster.objects("deployments", NS))

        # Status: conditions, counters, placement, summary only.
        conds = conditions(status)
        for ctype in ("Ready", "ModelsProvisioned", "GenerationComplete", "JudgingComplete", "Succeeded"):
            assert conds[ctype]["status"] == "True", (ctype, conds[ctype])
        assert conds["Unschedulable"]["status"] == "False"
        assert conds["Failed"]["status"] == "False"
        for cond in conds.values():
            assert cond["observedGeneration"] == 1 and cond["lastTransitionTime"]
        questions = 2 * 3  # 2 domains × 3 levels × 1 question
        generation = status["stages"]["generation"]
        judging = status["stages"]["judging"]
        assert generation["done"] == generation["total"] == questions * 2 * 2
        assert judging["done"] == judging["total"] == questions * 2 * 2 * 2
        assert status["progress"] == f"{questions * 12}/{questions * 12}"
        summary = status["summary"]
        assert summary["leader"] == "alpha", summary  # the stub's verdicts favour alpha
        assert [row["model"] for row in summary["ranking"]] == ["alpha", "beta"]
        assert summary["ranking"][0]["weighted"] > summary["ranking"][1]["weighted"]
        assert summary["reportUri"].startswith(out.as_uri())
        assert "answers" not in json.dumps(summary)

        def reasons() -> set[str]:
            return {str(e.get("reason")) for e in cluster.objects("events", NS)}

        await wait_for(lambda: "Succeeded" in reasons(), 10, "the Succeeded event", cluster)
        assert {"Provisioning", "Generating", "Judging", "Aggregating"} <= reasons(), reasons()

        # Operator metrics (same process): phase gauge and progress from the progress records.
        from kubejury_operator.metrics import REGISTRY

        assert (REGISTRY.get_sample_value("kubejury_runs", {"phase": "Succeeded"}) or 0) >= 1
        labels = {"namespace": NS, "name": "study", "stage": "generation"}
        assert REGISTRY.get_sample_value("kubejury_run_progress_items", labels) == questions * 4
        generated = REGISTRY.get_sample_value(
            "kubejury_items_generated_total", {"namespace": NS, "name": "study", "model": "alpha"}
        )
        assert generated is not None and generated > 0

        # Exactly one answer per (model, series, question).
        answers = answers_on_disk(out, "study")
        assert set(answers) == {(s, m) for s in ("primary", "warm") for m in ("alpha", "beta")}
        for ids in answers.values():
            assert len(ids) == len(set(ids)) == questions

        # Delete: the finalizer removes children and, with cleanupPolicy Delete, the stored results.
        await cluster.request("DELETE", f"/apis/kubejury.io/v1alpha1/namespaces/{NS}/evalruns/study")

        def gone() -> bool:
            return cluster.get("evalruns", NS, "study") is None and not any(
                cluster.objects(p, NS)
                for p in ("deployments", "services", "jobs", "configmaps", "serviceaccounts")
            )

        await wait_for(gone, 60, "the run and its children to be deleted", cluster)
        assert not [p for p in (out / "study").rglob("*") if p.is_file()], (
            "cleanupPolicy Delete keeps no results"
        )


async def test_operator_restart_mid_run_resumes_without_redoing_work(
    cluster: SimulatedCluster, operator: Callable[..., Any], tmp_path: Path
) -> None:
    out = tmp_path / "results"
    await seed(cluster)
    body = evalrun("resume", out, cluster.stub_url, series=[{"name": "primary"}], maxConcurrentModels=2)
    async with operator():
        await create(cluster, body)
        gen_alpha = mf.generation_job_name("resume", "alpha", "primary")

        def alpha_generated() -> bool:
            job = cluster.get("jobs", NS, gen_alpha)
            return bool(job and (job.get("status") or {}).get("succeeded"))

        await wait_for(alpha_generated, 90, "alpha's generation", cluster)
        cluster.paused = True  # the simulated kubelet starts no new Job while the operator is down
    before = {j["metadata"]["name"] for j in cluster.objects("jobs", NS)}
    phase_before = status_of(cluster, "resume").get("phase")
    assert phase_before not in (None, "Pending", "Succeeded"), phase_before

    async with operator():  # a new operator process: nothing in memory, only the cluster and storage
        cluster.paused = False
        await wait_for(
            lambda: status_of(cluster, "resume").get("phase") in ("Succeeded", "Failed"),
            RUN_TIMEOUT_S,
            "the resumed run",
            cluster,
        )
    status = status_of(cluster, "resume")
    assert status["phase"] == "Succeeded", status
    after = {j["metadata"]["name"] for j in cluster.objects("jobs", NS)}
    assert before <= after
    assert all(runs == 1 for runs in cluster.job_runs.values()), f"a Job ran twice: {cluster.job_runs}"
    assert status["startedAt"] <= conditions(status)["Succeeded"]["lastTransitionTime"]
    for ids in answers_on_disk(out, "resume").values():
        assert len(ids) == len(set(ids)) == 6


async def test_model_that_cannot_fit_is_unschedulable_and_nothing_is_left_pending(
    cluster: SimulatedCluster, operator: Callable[..., Any], tmp_path: Path
) -> None:
    await seed(cluster)
    huge = {"name": "huge", "source": "hf://example/huge-2t", "parameters": "2000B"}
    body = evalrun("toobig", tmp_path / "results", cluster.stub_url)
    body["spec"]["models"].append(huge)
    async with operator():
        await create(cluster, body)
        await wait_for(
            lambda: conditions(status_of(cluster, "toobig")).get("Unschedulable", {}).get("status") == "True",
            60,
            "the Unschedulable condition",
            cluster,
        )
        await asyncio.sleep(2.0)  # several reconciles later, still nothing deployed
        status = status_of(cluster, "toobig")
    cond = conditions(status)["Unschedulable"]
    assert status["phase"] == "Pending"
    assert cond["reason"] == "ModelDoesNotFit"
    assert "huge" in cond["message"] and "GiB" in cond["message"], cond["message"]
    assert status["placement"]["huge"]["schedulable"] is False
    assert status["placement"]["alpha"]["schedulable"] is True
    assert not cluster.objects("deployments", NS) and not cluster.objects("jobs", NS)
    warnings = [e for e in cluster.objects("events", NS) if e.get("reason") in ("Unschedulable", "Pending")]
    assert warnings and all(e["type"] == "Warning" for e in warnings)
