"""A leaderboard that grows, on the real control plane (issue 24): adding a model runs only it.

Why this module exists: the unit tests show the planner's decisions for a run that reuses earlier
runs; here the whole chain runs — the operator reads the source EvalRun from the API, computes its
storage prefix from its uid, creates the reuse Job (the real ``kubejury reuse`` of this checkout,
run by the simulated kubelet), reads the ``reuse.json`` it writes and plans from it. What is
simulated is what the other e2e modules simulate (``kubelet_runner``). The hosted judge is a stub
in this process, so every judging request it gets is seen: an answer of the stubs carries its
model's ``quality=N`` mark (``e2e_kube.QUALITY``; ``gamma`` has none and gets the default, 5).

Run A evaluates alpha and beta; run B adds gamma and reuses A; A is deleted with its results
(``cleanupPolicy: Delete``) and run C reuses B for all three models: B's copies are its own, so C
runs no model server at all. A run naming a source that does not exist waits with a condition.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from e2e_kube import (
    QUALITY,
    PodRecorder,
    answer_keys,
    conditions,
    describe_namespace,
    gpu_evalrun,
    judgment_keys,
    parse_time,
    run_containers,
    run_roots,
    status_of,
    wait_for,
)
from e2e_runs import prepare, run_to_the_end
from e2e_stub_openai import StubOpenAI
from kubeapi import ApiError, KubeApi
from operator_up import OperatorState

from kubejury_operator import vocabulary as vocab

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

NAMESPACE = "e2e-reuse"
QUESTIONS = 6  # law and finance × levels 1-3, one question each (gpu_evalrun's filters)
GAMMA = {"name": "gamma", "source": "hf://example/gamma-8b", "parameters": "8B"}
GAMMA_MARK = 5  # the stubs' default quality: gamma is not in QUALITY
QUALITY_MARK = re.compile(r"quality=(\d+)")


@pytest.fixture
async def hosted_judge() -> AsyncIterator[StubOpenAI]:
    async with StubOpenAI(QUALITY) as server:
        yield server


def leaderboard_run(
    name: str, hosted_url: str, *, gamma: bool, reuse: list[str] | None = None
) -> dict[str, Any]:
    """alpha and beta (and gamma), judged by judge-a (an in-cluster server) and a hosted judge;
    results deleted with the run."""
    body = gpu_evalrun(name, NAMESPACE, hosted_url, cleanupPolicy="Delete")
    if gamma:
        body["spec"]["models"].append(dict(GAMMA))
    if reuse is not None:
        body["spec"]["reuse"] = {"from": reuse}
    return body


def judged_marks(prompts: list[str]) -> collections.Counter[int]:
    """How many judging requests saw an answer of each quality mark (the answer is the last mark)."""
    return collections.Counter(int(QUALITY_MARK.findall(p)[-1]) for p in prompts if QUALITY_MARK.search(p))


async def finished(api: KubeApi, state: OperatorState, name: str) -> dict[str, Any]:
    status = await run_to_the_end(api, state, NAMESPACE, name)
    assert status["phase"] == "Succeeded", await describe_namespace(api, NAMESPACE, state.operator_log)
    return status


async def run_recorded(
    api: KubeApi, state: OperatorState, body: dict[str, Any]
) -> tuple[dict[str, Any], PodRecorder]:
    """Create the run and wait for it to succeed, recording every Pod bound to a node meanwhile."""
    recorder = PodRecorder(api, NAMESPACE)
    recording = asyncio.create_task(recorder.run())
    try:
        await api.create("evalruns", NAMESPACE, body)
        status = await finished(api, state, body["metadata"]["name"])
    finally:
        recording.cancel()
    return status, recorder


def of_run(pods: list[dict[str, Any]], run: str) -> list[dict[str, Any]]:
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(vocab.LABEL_RUN) == run]


def served(pods: list[dict[str, Any]]) -> set[str]:
    """The endpoint keys (m-<model>, j-<judge>) of model-server Pods."""
    return {str(p["metadata"]["labels"][vocab.LABEL_ENDPOINT]) for p in pods}


async def jobs_of(api: KubeApi, run: str) -> dict[str, dict[str, Any]]:
    return {
        j["metadata"]["name"]: j
        for j in await api.list("jobs", NAMESPACE)
        if (j["metadata"].get("labels") or {}).get(vocab.LABEL_RUN) == run
    }


def report_of(state: OperatorState, run: str) -> dict[str, Any]:
    (root,) = run_roots(state.results_dir, NAMESPACE, run)
    report: dict[str, Any] = json.loads((root / "report" / "report.json").read_text())
    return report


def reused_from(source: str, models: list[str]) -> dict[str, Any]:
    """status.reuse.models as it is when every answer of ``models`` came from ``source``."""
    return {m: {"reused": QUESTIONS, "fromRuns": {source: QUESTIONS}} for m in models}


async def test_adding_a_model_runs_only_its_generation_and_the_judgments_of_its_answers(
    api: KubeApi, kube_operator: OperatorState, hosted_judge: StubOpenAI
) -> None:
    for run in ("lb-a", "lb-b", "lb-c"):
        await prepare(api, kube_operator, NAMESPACE, run)
    results = kube_operator.results_dir

    # Run A: alpha and beta, everything made.
    await run_recorded(api, kube_operator, leaderboard_run("lb-a", hosted_judge.url, gamma=False))
    judged_by_a = judged_marks(hosted_judge.judge_prompts)
    assert judged_by_a == {QUALITY["alpha"]: QUESTIONS, QUALITY["beta"]: QUESTIONS}, judged_by_a
    hosted_judge.judge_prompts.clear()

    # Run B: alpha, beta and gamma, reusing A.
    status_b, pods_b = await run_recorded(
        api, kube_operator, leaderboard_run("lb-b", hosted_judge.url, gamma=True, reuse=["lb-a"])
    )
    servers_b = of_run(pods_b.model_server_pods(), "lb-b")
    assert served(servers_b) == {"m-gamma", "j-judge-a"}, served(servers_b)  # no server for alpha or beta
    assert len([p for p in servers_b if served([p]) == {"j-judge-a"}]) == 1  # the judge came up once
    assert judged_marks(hosted_judge.judge_prompts) == {GAMMA_MARK: QUESTIONS}  # gamma's answers only

    jobs = await jobs_of(api, "lb-b")
    reuse_job = jobs[vocab.reuse_job_name("lb-b")]
    copied_at = parse_time(reuse_job["status"]["completionTime"])
    later = [j for n, j in jobs.items() if n != vocab.reuse_job_name("lb-b")]
    later += [
        d for d in await api.list("deployments", NAMESPACE) if d["metadata"]["name"].startswith("kj-lb-b-")
    ]
    assert later and all(parse_time(o["metadata"]["creationTimestamp"]) >= copied_at for o in later), [
        (o["metadata"]["name"], o["metadata"]["creationTimestamp"]) for o in later
    ]
    generation = {n for n in jobs if "-gen-" in n}
    assert generation == {vocab.generation_job_name("lb-b", "gamma", "primary")}, generation

    assert status_b["reuse"]["sources"] == ["lb-a"] and status_b["reuse"]["copied"] is True
    nothing = {"reused": 0, "fromRuns": {}}
    assert status_b["reuse"]["models"] == {**reused_from("lb-a", ["alpha", "beta"]), "gamma": nothing}, (
        status_b["reuse"]
    )
    judges_b = status_b["reuse"]["judges"]
    assert judges_b == {
        j: {"reused": 2 * QUESTIONS, "fromRuns": {"lb-a": 2 * QUESTIONS}} for j in ("judge-a", "hosted")
    }, judges_b
    report_reuse = report_of(kube_operator, "lb-b")["reuse"]
    assert {m: e["from_runs"] for m, e in report_reuse["models"].items() if e["from_runs"]} == {
        "alpha": {"lb-a": QUESTIONS},
        "beta": {"lb-a": QUESTIONS},
    }, report_reuse

    answers = answer_keys(results, NAMESPACE, "lb-b")
    judgments = judgment_keys(results, NAMESPACE, "lb-b")
    assert len(answers) == 3 * QUESTIONS and set(answers.values()) == {1}, answers.most_common(3)
    assert len(judgments) == 2 * 3 * QUESTIONS and set(judgments.values()) == {1}, judgments.most_common(3)

    # A deleted with its results: B's copies are B's own.
    await api.delete("evalruns", NAMESPACE, "lb-a")

    async def a_gone() -> bool:
        return await api.get("evalruns", NAMESPACE, "lb-a") is None and not any(
            p.exists() for p in run_containers(results, NAMESPACE, "lb-a")
        )

    await wait_for(a_gone, 60, "run lb-a and its results to be deleted")
    assert answer_keys(results, NAMESPACE, "lb-b") == answers
    assert judgment_keys(results, NAMESPACE, "lb-b") == judgments
    hosted_judge.judge_prompts.clear()

    # Run C reuses B for every record: the reuse Job, then the aggregation; no server at all.
    status_c, pods_c = await run_recorded(
        api, kube_operator, leaderboard_run("lb-c", hosted_judge.url, gamma=True, reuse=["lb-b"])
    )
    assert of_run(pods_c.model_server_pods(), "lb-c") == []
    assert hosted_judge.judge_prompts == []
    assert set(await jobs_of(api, "lb-c")) == {
        vocab.reuse_job_name("lb-c"),
        vocab.aggregation_job_name("lb-c"),
    }
    assert status_c["reuse"]["models"] == reused_from("lb-b", ["alpha", "beta", "gamma"])
    assert status_c["summary"]["leader"] == status_b["summary"]["leader"] == "alpha"
    assert len(answer_keys(results, NAMESPACE, "lb-c")) == 3 * QUESTIONS

    for run in ("lb-b", "lb-c"):
        await api.delete("evalruns", NAMESPACE, run)


async def test_a_run_naming_a_source_that_does_not_exist_waits_with_a_condition_naming_the_field(
    api: KubeApi, kube_operator: OperatorState
) -> None:
    name = "lb-missing"
    await prepare(api, kube_operator, NAMESPACE, name)
    await api.create(
        "evalruns",
        NAMESPACE,
        leaderboard_run(name, "http://unused.invalid/v1", gamma=False, reuse=["lb-nope"]),
    )

    async def refused() -> dict[str, Any] | None:
        cond = conditions(await status_of(api, NAMESPACE, name)).get("ModelsProvisioned") or {}
        return cond if cond.get("reason") == "ReuseSourceRefused" else None

    cond = await wait_for(
        refused,
        60,
        "ReuseSourceRefused",
        lambda: describe_namespace(api, NAMESPACE, kube_operator.operator_log),
    )
    assert "spec.reuse.from[0]: no EvalRun 'lb-nope' in namespace 'e2e-reuse'" in cond["message"], cond
    await asyncio.sleep(4)  # two reconciles later: still nothing created
    assert (await status_of(api, NAMESPACE, name))["phase"] == "Pending"
    assert not await jobs_of(api, name)
    assert not [
        d for d in await api.list("deployments", NAMESPACE) if d["metadata"]["name"].startswith(f"kj-{name}-")
    ]
    await api.delete("evalruns", NAMESPACE, name)


async def test_a_run_naming_itself_is_rejected_at_admission(
    api: KubeApi, kube_operator: OperatorState
) -> None:
    await prepare(api, kube_operator, NAMESPACE)
    with pytest.raises(ApiError) as rejected:
        await api.create(
            "evalruns",
            NAMESPACE,
            leaderboard_run("lb-self", "http://unused.invalid/v1", gamma=False, reuse=["lb-self"]),
        )
    assert "spec.reuse.from[0]" in rejected.value.message, rejected.value.message
