"""The benchmark's EvalRuns: the study's own spec (``examples/evalrun-study.yaml``), N times.

Why this module exists: the figures are only worth something with a realistic run — 16 models
(vLLM in FP8/NVFP4/MXFP4 and Ollama GGUF builds), a jury of three judges (two share an evaluated
model's server, one is a hosted API behind a Secret), ``maxConcurrentModels: 4`` — so the runs are
the study's spec with only what a benchmark cluster needs changed: the storage is the chart's
file:// results claim (no S3 credentials), no model-cache claim, and 1 or 2 generation series
(runs alternate, so a scale has both). Pure: it returns bodies; the harness creates them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab

REPO = Path(__file__).resolve().parents[2]
STUDY = REPO / "examples" / "evalrun-study.yaml"
RESULTS_URI = "file:///var/lib/kubejury/results"  # the chart's results mount (operator_up.RESULTS_MOUNT)
RESULTS_CLAIM = "kubejury-results"
BENCH_LABEL = "kubejury.io/benchmark"  # on every EvalRun the benchmark creates: the round's id
HOSTED_KEY_SECRET = "deepseek-api"  # the hosted judge's apiKeySecretRef in the study spec
HF_TOKEN_SECRET = "hf-token"


@dataclass(frozen=True)
class RunName:
    namespace: str
    name: str


def namespaces(count: int, prefix: str = "bench") -> list[str]:
    return [f"{prefix}-{i:02d}" for i in range(count)]


def run_names(runs: int, namespace_count: int = 10, prefix: str = "bench") -> list[RunName]:
    """``runs`` runs spread round-robin over ``min(runs, namespace_count)`` namespaces; names are
    zero-padded so that no run's name is a prefix of another's (children are matched by prefix)."""
    spaces = namespaces(max(1, min(runs, namespace_count)), prefix)
    return [RunName(spaces[i % len(spaces)], f"run-{i:03d}") for i in range(runs)]


def study_spec() -> dict[str, Any]:
    document = yaml.safe_load(STUDY.read_text(encoding="utf-8"))
    spec: dict[str, Any] = document["spec"]
    return spec


def evalrun(
    run: RunName, index: int, round_id: str, *, base: Mapping[str, Any] | None = None, shards: int = 1
) -> dict[str, Any]:
    """The study's spec as run ``index`` of the benchmark: file:// storage on the results claim, no
    model cache, 2 series for even ``index`` and 1 for odd, ``generationShards`` = ``shards``."""
    spec = copy.deepcopy(dict(base if base is not None else study_spec()))
    spec["series"] = spec["series"][: 2 if index % 2 == 0 else 1]
    spec["storage"] = {"uri": RESULTS_URI, "persistentVolumeClaim": RESULTS_CLAIM}
    spec["benchmark"] = {**spec["benchmark"], "uri": f"{RESULTS_URI}/benchmarks/professional-ru.jsonl"}
    spec.pop("modelCache", None)  # the chart allows only the results claim here
    spec["jobs"] = {**spec.get("jobs", {}), "generationShards": shards}
    return {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {"name": run.name, "namespace": run.namespace, "labels": {BENCH_LABEL: round_id}},
        "spec": spec,
    }


def secrets(namespace: str) -> list[dict[str, Any]]:
    """The Secrets the study spec references (placeholder values: nothing calls the hosted API)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": HOSTED_KEY_SECRET, "namespace": namespace},
            "stringData": {"api-key": "benchmark-placeholder"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": HF_TOKEN_SECRET, "namespace": namespace},
            "stringData": {"HF_TOKEN": "benchmark-placeholder"},
        },
    ]


def server_deployments(body: Mapping[str, Any], nodes: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(the first wave, every) model-server Deployment of the run ``body`` (with its uid) on
    ``nodes``: the first wave is what the operator's own planner creates on a run's first
    reconcile (placement, then ``maxConcurrentModels`` models and the judges' servers)."""
    from kubejury.config.spec import parse_evalrun
    from kubejury.placement.gpu_nodes import parse_node_list
    from kubejury.placement.planner import plan_placements
    from kubejury_operator.cluster_run import cluster_run
    from kubejury_operator.facts import in_cluster_servers
    from kubejury_operator.observed import Observed
    from kubejury_operator.reconcile import plan

    evalrun = parse_evalrun(dict(body))
    placements = plan_placements(evalrun.spec, parse_node_list(nodes))
    run = cluster_run(body, evalrun, placements, opsettings.WorkloadSettings())
    first = plan(run, Observed(), {}, "2026-12-01T00:00:00Z")
    wave = [a.name for a in first.actions if a.verb == "create" and a.kind == "Deployment"]
    every = [vocab.workload_name(run.ref.name, key) for key in in_cluster_servers(run)]
    return wave, every
