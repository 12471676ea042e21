"""A budgeted EvalRun on the real control plane (issue 27): a clearly worse model stops early.

Why this module exists: the unit tests show the planner's looks; here the whole chain runs — the
operator creates each look's generation Jobs (``kubejury generate --look K``, run by the simulated
kubelet), the look's judging Job, the look Job (``kubejury look --look K``) that stores
``sequential.json``, reads it, scales the stopped model's server to zero while the others go on,
and the run ends with the aggregation as any run, its report carrying the sequential section.

Three models served by the stubs (``e2e_kube.QUALITY``: alpha 9, qwen2.5-1.5b 8, qwen2.5-0.5b 4),
judged by a hosted stub in this process whose score is the answer's quality mark give or take
one point (a hash of the prompt picks it), so the two strong models are close and the weak one is
far below: it must be out after the first look, its Deployment at zero replicas while the run is
still generating for the others.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from e2e_kube import QUALITY, RESULTS_URI, describe_namespace, gpu_evalrun, run_roots, status_of
from e2e_runs import prepare, run_to_the_end
from e2e_stub_openai import StubOpenAI
from kubeapi import KubeApi
from operator_up import OperatorState

from kubejury_operator import vocabulary as vocab

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

NAMESPACE = "e2e-budget"
RUN = "budgeted"
STRONG, CLOSE, WEAK = "alpha", "qwen2.5-1.5b", "qwen2.5-0.5b"
DOMAINS, LEVELS, PER_CELL = ("law", "finance"), (1, 2, 3), 8  # 48 questions: looks of 12, 24, 48
MARK = re.compile(r"quality=(\d+)")


class NoisyJudge(StubOpenAI):
    """The hosted judge: the answer's quality mark −1, +0 or +1 (a hash of the prompt picks it)."""

    @staticmethod
    def _verdict(prompt: str) -> str:
        marks = MARK.findall(prompt)
        noise = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 3 - 1
        score = (int(marks[-1]) if marks else 5) + noise
        return json.dumps({"score": max(0, min(10, score)), "rationale": "stub verdict"})


@pytest.fixture
async def hosted_judge() -> AsyncIterator[StubOpenAI]:
    async with NoisyJudge(QUALITY) as server:
        yield server


def write_benchmark(state: OperatorState) -> str:
    rows = [
        {
            "id": f"{d}-{lvl}-{i}",
            "domain": d,
            "level": lvl,
            "question": f"Вопрос {d} {lvl} {i}?",
            "reference": "Эталон.",
        }
        for d in DOMAINS
        for lvl in LEVELS
        for i in range(PER_CELL)
    ]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (state.results_dir / "budget-benchmark.jsonl").write_text(text, encoding="utf-8")
    return f"{RESULTS_URI}/budget-benchmark.jsonl"


def budgeted_run(hosted_url: str, benchmark: str) -> dict[str, Any]:
    body = gpu_evalrun(RUN, NAMESPACE, hosted_url, maxConcurrentModels=3)
    spec = body["spec"]
    spec["benchmark"] = {"uri": benchmark}
    spec["models"] = [
        {"name": STRONG, "source": "hf://example/alpha-8b", "parameters": "8B"},
        {"name": CLOSE, "source": "hf://example/qwen-1.5b", "parameters": "1.5B"},
        {"name": WEAK, "source": "hf://example/qwen-0.5b", "parameters": "0.5B"},
    ]
    spec["judges"] = [j for j in spec["judges"] if j["name"] == "hosted"]
    spec["budget"] = {
        "mode": "sequential",
        "goal": "leading-group",
        "minPerCell": 2,
        "looks": [0.25, 0.5, 1.0],
    }
    # Issue 27's equivalence on the cluster as well: the aggregation Job computes the pair and the
    # operator carries its verdict into status.summary.
    spec["comparisons"] = [{"a": STRONG, "b": WEAK, "margin": 0.5}]
    return body


def server(model: str) -> str:
    return vocab.workload_name(RUN, vocab.endpoint_key("model", model))


@dataclass
class ScaleWatch:
    """The first moment the weak model's Deployment was seen at zero replicas: the run's phase and
    the other servers' replicas then."""

    api: KubeApi
    seen: dict[str, Any] = field(default_factory=dict)

    async def run(self) -> None:
        while not self.seen:
            deployments = {
                d["metadata"]["name"]: int(d["spec"].get("replicas") or 0)
                for d in await self.api.list("deployments", NAMESPACE)
            }
            if deployments.get(server(WEAK)) == 0:
                status = await status_of(self.api, NAMESPACE, RUN)
                self.seen = {
                    "phase": status.get("phase"),
                    "replicas": deployments,
                    "budget": status.get("budget"),
                }
            await asyncio.sleep(0.3)


async def test_a_clearly_worse_model_stops_after_the_first_look_and_its_server_goes_to_zero(
    api: KubeApi, kube_operator: OperatorState, hosted_judge: StubOpenAI
) -> None:
    await prepare(api, kube_operator, NAMESPACE, RUN)
    body = budgeted_run(hosted_judge.url, write_benchmark(kube_operator))
    watch = ScaleWatch(api)
    watching = asyncio.create_task(watch.run())
    try:
        await api.create("evalruns", NAMESPACE, body)
        status = await run_to_the_end(api, kube_operator, NAMESPACE, RUN)
    finally:
        watching.cancel()
    assert status["phase"] == "Succeeded", await describe_namespace(
        api, NAMESPACE, kube_operator.operator_log
    )

    budget = status["budget"]
    models = budget["models"]
    weak = models[WEAK]
    assert weak["status"] == "stopped" and weak["reason"].startswith("out: below"), budget
    assert weak["look"] == 1 and weak["questions"] == 12, budget
    assert all(models[m]["look"] > 1 and models[m]["questions"] > 12 for m in (STRONG, CLOSE)), budget
    assert budget["looks"] == 3 and budget["looksDone"] >= 2, budget

    # The weak server went to zero while the run still generated for the others, which kept theirs.
    assert watch.seen["phase"] == "Generating", watch.seen
    assert watch.seen["replicas"][server(STRONG)] == 1 and watch.seen["replicas"][server(CLOSE)] == 1, (
        watch.seen
    )

    jobs = {j["metadata"]["name"] for j in await api.list("jobs", NAMESPACE)}
    generation = {n for n in jobs if "-gen-" in n}
    looks_done = budget["looksDone"]
    expected = {vocab.look_generation_job_name(RUN, WEAK, "primary", 1)} | {
        vocab.look_generation_job_name(RUN, m, "primary", k)
        for m in (STRONG, CLOSE)
        for k in range(1, min(models[m]["look"], looks_done) + 1)
    }
    assert generation == expected, sorted(generation)
    assert {vocab.look_job_name(RUN, k) for k in range(1, looks_done + 1)} <= jobs
    assert vocab.aggregation_job_name(RUN) in jobs

    # The hosted judge saw the weak model's 12 answers and no more.
    judged = [int(MARK.findall(p)[-1]) for p in hosted_judge.judge_prompts if MARK.search(p)]
    assert judged.count(QUALITY[WEAK]) == 12

    (root,) = run_roots(kube_operator.results_dir, NAMESPACE, RUN)
    section = json.loads((root / "report" / "report.json").read_text())["sequential"]
    assert section["models"][WEAK]["status"] == "stopped" and section["models"][WEAK]["questions"] == 12
    assert section["questions_used"] < section["questions_budgeted"] == 3 * 48

    # The named pair: judged 9 against 4 (±1), so "different" in the report and in status.summary.
    [pair] = status["summary"]["comparisons"]
    assert (pair["a"], pair["b"], pair["margin"], pair["verdict"]) == (STRONG, WEAK, 0.5, "different"), pair
    assert pair["difference"] > 0.5
