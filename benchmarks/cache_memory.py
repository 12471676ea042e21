"""Memory of the operator's watch-fed caches: whole objects against the observed part, side by side.

Why this exists: the scale benchmark (``benchmarks/operator_scale``) saw the watch design's operator
peak at 524 MiB with 30 runs, over issue 13's 500 MiB target for 100 runs. Most of a cache entry
was what no observer reads — Pod and Job templates, their env, volumes and probes. This measures,
in one process and one run, what the kopf index entries of N runs' children take when the whole
object is kept (the design before) and when only :func:`kubejury_operator.watched.observed_part`
is kept (now).

The children are the operator's own: ``kubejury plan --manifests``' replay of its planner
(:func:`kubejury_operator.preview.render`) for ``examples/evalrun-study.yaml`` (16 models, 3
judges) on ``cluster/nodes.yaml``, plus one Pod per Deployment and per Job built from their
templates, each with a status as the API server returns it (conditions, times), and
``metadata.managedFields`` left out (kopf's watch sees them; counting them would favour the trim
more). Memory is Python's allocation (``tracemalloc``) of the entries as kopf stores them (plain
dicts), which is what the index holds; it is not the process RSS.

Run: ``python benchmarks/cache_memory.py [--runs 100]``; writes
``benchmarks/results/cache_memory.md``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kubejury_operator import watched
from kubejury_operator.preview import render

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cache_memory.md"
NOW = "2026-12-01T10:00:00Z"


def with_status(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.update(uid="0f8e7c1a-2b3c-4d5e-8f90-123456789abc", resourceVersion="123456", creationTimestamp=NOW)
    if obj["kind"] == "Deployment":
        obj["status"] = {
            "replicas": 1,
            "readyReplicas": 1,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }
    elif obj["kind"] == "Job":
        obj["status"] = {
            "startTime": NOW,
            "completionTime": NOW,
            "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": NOW}],
        }
    return obj


def pod_of(owner: dict[str, Any], index: int) -> dict[str, Any]:
    template = owner["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **copy.deepcopy(template.get("metadata") or {}),
            "name": f"{owner['metadata']['name']}-{index:05d}",
            "namespace": owner["metadata"]["namespace"],
            "creationTimestamp": NOW,
            "uid": f"pod-{index}",
        },
        "spec": {**copy.deepcopy(template["spec"]), "nodeName": "gpu-h100-0"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "startTime": NOW,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": NOW}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
        },
    }


def run_children(runs: int) -> list[dict[str, Any]]:
    nodes = yaml.safe_load((ROOT / "cluster" / "nodes.yaml").read_text())
    one = render(str(ROOT / "examples" / "evalrun-study.yaml"), nodes, {}, namespace="bench")
    objects: list[dict[str, Any]] = []
    for r in range(runs):
        for i, manifest in enumerate(one):
            obj = with_status(manifest)
            obj["metadata"]["namespace"] = f"team-{r % 10}"
            obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), "kubejury.io/run": f"run-{r}"}
            objects.append(obj)
            if obj["kind"] in ("Deployment", "Job"):
                objects.append(pod_of(obj, r * 1000 + i))
    return objects


def measure(objects: list[dict[str, Any]], entry: Callable[[dict[str, Any]], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [entry(o) for o in objects]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return after - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    objects = run_children(args.runs)
    whole = measure(objects, watched.plain)
    trimmed = measure(objects, watched.observed_part)
    kinds: dict[str, int] = {}
    for o in objects:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    mib = 1024 * 1024
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    text = f"""# Watch-fed cache memory: whole objects vs the observed part

`python benchmarks/cache_memory.py --runs {args.runs}` — run of {started}, load {load} (1/5/15 min).
Method and what is counted: the module docstring of `benchmarks/cache_memory.py`.

{args.runs} runs of `examples/evalrun-study.yaml`: {len(objects)} children in the caches
({", ".join(f"{n} {k}s" for k, n in sorted(kinds.items()))}).

| cache entry | memory | per run |
|---|---|---|
| whole object (before) | {whole / mib:.1f} MiB | {whole / args.runs / 1024:.0f} KiB |
| observed part (now) | {trimmed / mib:.1f} MiB | {trimmed / args.runs / 1024:.0f} KiB |
| ratio | {whole / max(trimmed, 1):.1f}× smaller | |
"""
    RESULTS.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
