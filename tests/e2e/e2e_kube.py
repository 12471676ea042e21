"""Helpers of the control-plane e2e tests: waiting, EvalRun bodies, stored records, the audit log.

Why this module exists: the tests read as specifications of the operator's behaviour on a real
API server; the polling, the storage layout and the audit-log arithmetic live here.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeapi import KubeApi

from kubejury.files import shards

REPO = Path(__file__).resolve().parents[2]
OPERATOR_USER = "system:serviceaccount:kubejury:kubejury"
RESULTS_URI = "file:///var/lib/kubejury/results"
#: Answer quality per served model for the stub servers: the judges' verdicts follow it.
QUALITY = {"alpha": 9, "beta": 6, "judge-a": 5, "qwen2.5-0.5b": 4, "qwen2.5-1.5b": 8}


@dataclass(frozen=True)
class RunWindow:
    namespace: str
    name: str
    started: float  # epoch seconds: created
    finished: float | None  # epoch seconds: reached a final phase (None: never)


@dataclass
class ApiLoad:
    """EvalRuns the tests ran, for the end-of-session API load figure (conftest)."""

    audit_log: Path | None = None
    runs: list[RunWindow] = field(default_factory=list)


API_LOAD = ApiLoad()


def parse_time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def wait_for(
    check: Callable[[], Awaitable[Any]],
    timeout: float,
    what: str,
    diagnose: Callable[[], Awaitable[str]] | None = None,
    interval: float = 1.0,
) -> Any:
    """Poll ``check`` until it returns something truthy; on timeout fail with ``diagnose()``."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            detail = await diagnose() if diagnose is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{detail}")
        await asyncio.sleep(interval)


async def status_of(api: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    obj = await api.get("evalruns", namespace, name)
    return dict((obj or {}).get("status") or {})


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


async def describe_namespace(api: KubeApi, namespace: str, operator_log: Path | None = None) -> str:
    """What a human would look at when a run is stuck: runs, Jobs, pods, events, operator log."""
    lines = []
    for run in await api.list("evalruns", namespace):
        status = run.get("status") or {}
        lines.append(
            f"EvalRun {run['metadata']['name']}: phase={status.get('phase')} progress={status.get('progress')}"
        )
        for cond in status.get("conditions") or []:
            lines.append(
                f"  {cond.get('type')}={cond.get('status')} {cond.get('reason')}: {cond.get('message')}"
            )
    for job in await api.list("jobs", namespace):
        lines.append(f"Job {job['metadata']['name']}: {json.dumps(job.get('status') or {})[:300]}")
    for pod in await api.list("pods", namespace):
        status = pod.get("status") or {}
        lines.append(
            f"Pod {pod['metadata']['name']} node={pod['spec'].get('nodeName')} phase={status.get('phase')}"
        )
        for cond in status.get("conditions") or []:
            if cond.get("status") != "True" and cond.get("message"):
                lines.append(f"  {cond.get('type')}: {cond.get('message')}")
    events = await api.list("events", namespace)
    for event in events[-15:]:
        lines.append(f"Event {event.get('reason')}: {event.get('message')}")
    if operator_log is not None and operator_log.exists():
        lines.append("--- operator log tail ---")
        lines.append(operator_log.read_text(errors="replace")[-4000:])
    return "\n".join(lines)


async def ensure_namespace(api: KubeApi, namespace: str) -> None:
    if await api.get("namespaces", None, namespace) is None:
        await api.create("namespaces", None, {"metadata": {"name": namespace}})


def gpu_evalrun(name: str, namespace: str, hosted_url: str, **spec: Any) -> dict[str, Any]:
    """Two vLLM models on GPUs, one vLLM judge and one hosted (openai) judge, the Russian sample."""
    body: dict[str, Any] = {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "benchmark": {
                "uri": f"{RESULTS_URI}/benchmark-ru-sample.jsonl",
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
                    "source": hosted_url,
                    "servedModel": "hosted-judge",
                    "apiKeySecretRef": {"name": "hosted-key", "key": "token"},
                },
            ],
            "series": [{"name": "primary", "temperature": 0, "repetitionPenalty": 1.2}],
            "scoring": {"bootstrapSamples": 50},
            "storage": {"uri": RESULTS_URI, "persistentVolumeClaim": "kubejury-results"},
            "maxConcurrentModels": 2,
            "cleanupPolicy": "Retain",
        },
    }
    body["spec"].update(spec)
    return body


def _records(directory: Path) -> Iterator[dict[str, Any]]:
    """Every record a folder's shards hold: Parquet (what the stages write since issue 26) and JSONL
    (runs stored before it), each file as the engine's reader sees it."""
    for shard in sorted(directory.glob("part-*.parquet")):
        yield from shards.table_rows(shards.read_table(str(shard), str(shard)), str(shard))
    for shard in sorted(directory.glob("part-*.jsonl")):
        for line in shard.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def run_roots(results: Path, namespace: str, run: str) -> list[Path]:
    """Where a run's records are under the storage root: ``<ns>/<run>-<uid prefix>/<run>/`` (the
    layout keeps namespaces and same-named runs apart), or ``<run>/`` in the older layout."""
    roots = [results / run] if (results / run).is_dir() else []
    return roots + sorted(p for p in results.glob(f"{namespace}/{run}-*/{run}") if p.is_dir())


def run_containers(results: Path, namespace: str, run: str) -> list[Path]:
    """The directories to remove so that no record of ``run`` is left (both layouts)."""
    return [results / run, *results.glob(f"{namespace}/{run}-*")]


def answer_keys(results: Path, namespace: str, run: str) -> collections.Counter[tuple[str, str, str]]:
    """(series, model, question id) → how many answer records are stored."""
    found: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for directory in (d for root in run_roots(results, namespace, run) for d in root.glob("*/answers/*")):
        series, model = directory.parts[-3], directory.parts[-1]
        for record in _records(directory):
            found[(series, model, str(record["question_id"]))] += 1
    return found


def judgment_keys(results: Path, namespace: str, run: str) -> collections.Counter[tuple[str, str, str, str]]:
    """(series, judge, model, question id) → how many judgment records are stored."""
    found: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
    for directory in (d for root in run_roots(results, namespace, run) for d in root.glob("*/judgments/*")):
        series, judge = directory.parts[-3], directory.parts[-1]
        for record in _records(directory):
            found[(series, judge, str(record["model"]), str(record["question_id"]))] += 1
    return found


def audit_entries(audit_log: Path) -> Iterator[dict[str, Any]]:
    with audit_log.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


def operator_requests(audit_log: Path) -> list[dict[str, Any]]:
    """Every completed request the operator's ServiceAccount made."""
    return [
        e
        for e in audit_entries(audit_log)
        if (e.get("user") or {}).get("username") == OPERATOR_USER and e.get("stage") == "ResponseComplete"
    ]


def _resource(entry: dict[str, Any]) -> str:
    ref = entry.get("objectRef") or {}
    resource = str(ref.get("resource") or entry.get("requestURI", "?"))
    return f"{resource}/{ref['subresource']}" if ref.get("subresource") else resource


def api_load_table(audit_log: Path, runs: list[RunWindow]) -> list[str]:
    """Requests per minute by the operator in each run's namespace, while running and after."""
    requests = operator_requests(audit_log)
    end_of_log = max((parse_time(e["stageTimestamp"]) for e in requests), default=time.time())
    lines = []
    for run in runs:
        finished = run.finished or end_of_log
        windows = {"running": (run.started, finished), "finished": (finished, end_of_log)}
        for label, (start, end) in windows.items():
            minutes = max((end - start) / 60.0, 1e-9)
            counts: collections.Counter[str] = collections.Counter()
            for entry in requests:
                at = parse_time(entry["stageTimestamp"])
                if (entry.get("objectRef") or {}).get("namespace") == run.namespace and start <= at < end:
                    counts[f"{entry.get('verb')} {_resource(entry)}"] += 1
            total = sum(counts.values())
            lines.append(
                f"{run.namespace}/{run.name} {label}: {total / minutes:.1f} req/min over {end - start:.0f}s"
                + ("" if total else " (none)")
            )
            for key, count in counts.most_common():
                lines.append(f"    {count / minutes:7.1f}/min  {key}")
    cluster_wide: collections.Counter[str] = collections.Counter(
        f"{e.get('verb')} {_resource(e)}" for e in requests if not (e.get("objectRef") or {}).get("namespace")
    )
    lines.append(f"cluster-scoped requests during the session: {dict(cluster_wide.most_common())}")
    return lines


@dataclass
class PodRecorder:
    """Every pod of a namespace as first seen bound to a node (model-server pods go away at the end)."""

    api: KubeApi
    namespace: str
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            try:
                for pod in await self.api.list("pods", self.namespace):
                    if pod["spec"].get("nodeName") and pod["metadata"]["name"] not in self.seen:
                        self.seen[pod["metadata"]["name"]] = pod
            except Exception:  # a poll failing must not end the recording
                pass
            await asyncio.sleep(0.5)

    def model_server_pods(self) -> list[dict[str, Any]]:
        """Pods of the operator's model-server Deployments (not the chart's own operator pod)."""
        return [
            p
            for p in self.seen.values()
            if any(r.get("kind") == "ReplicaSet" for r in p["metadata"].get("ownerReferences") or [])
            and (p["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "kubejury-operator"
        ]

    def job_pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.seen.values()
            if any(r.get("kind") == "Job" for r in p["metadata"].get("ownerReferences") or [])
        ]


def gpu_request(pod: dict[str, Any]) -> int:
    total = 0
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        total += int((resources.get("limits") or resources.get("requests") or {}).get("nvidia.com/gpu", 0))
    return total
