"""SIMULATED: the kubelet of the operator's Job pods, as a fast path that runs no inference.

Why this module exists: the scale benchmark measures the control plane — the operator, the API
server, etcd — not inference. KWOK leaves pods owned by a Job alone (``devcluster.kwok_config``);
in the e2e suite ``tests/e2e/kubelet_runner.py`` runs their real command, which at hundreds of
runs would measure Python start-up and the stub servers instead. This fast kubelet does what a
finished stage leaves behind, and nothing else:

1. It **watches** (one list+watch, no per-pod polling) the pods carrying the operator's labels of
   a stage (``kubejury.io/component`` generate/judge/aggregate) that the real scheduler has bound
   to a node (``spec.nodeName`` set), Pending, not being deleted.
2. From the pod's own spec it reads what the real container would: the stage, series, model or
   judge and shard from ``args`` (``$(JOB_COMPLETION_INDEX)`` from the Job controller's
   ``batch.kubernetes.io/job-completion-index`` annotation), and the run's storage from the spec
   ConfigMap the pod mounts (its ``spec.storage.uri`` is the run's own prefix). The file:// URI,
   a path inside the pod (the results claim's mount), is translated to the claim's host directory.
3. It marks the pod ``Running`` (Ready, container running) and writes the stage's progress record
   with the engine's own :class:`kubejury.stages.ProgressTracker` under
   :class:`kubejury.files.storage.RunLayout` — where the real stage writes it — in state
   ``running``; after ``--hold`` seconds (drawn per pod, uniformly from a range: with a fixed time
   every Job would finish at the same phase of the operator's 15 s timer) it writes the record ``succeeded`` with every item done
   (generation: the benchmark's questions, divided among shards; judging: every answer stored in
   the series so far, a later round starting from what the earlier ones judged), and for the aggregation Job a real ``report.json`` (made once by the
   engine, :mod:`.report_template`) and the ``aggregate-report`` record.
4. It marks the pod ``Succeeded`` with a terminated container (``exitCode: 0``), as a kubelet
   reports it; the real Job controller then completes the Job.

No answers or judgments are written (the operator never reads them), no stub model servers run,
and nothing fails. KWOK's ``pod-delete`` stage still removes pods being deleted.

Run: ``python -m benchmarks.operator_scale.fast_kubelet --kubeconfig K --results-dir D --report R``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .kube import Credentials, Kube, KubeError

log = logging.getLogger("fast-kubelet")

STAGE_COMPONENTS = ("generate", "judge", "aggregate")
POD_SELECTOR = (
    "app.kubernetes.io/managed-by=kubejury-operator,kubejury.io/component in (generate,judge,aggregate)"
)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
RESULTS_MOUNT = "/var/lib/kubejury/results"  # the chart's storage.resultsMountPath
QUESTIONS = 1440  # the study's benchmark: 16 domains x 3 levels x 30 questions
SPEC_FILE = "evalrun.yaml"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------- pure reading


@dataclass(frozen=True)
class StageWork:
    """What one Job pod's container would do, read from its args."""

    stage: str  # generate | judge | aggregate
    series: str = ""
    name: str = ""  # the model (generate) or judge (judge)
    shard: tuple[int, int] | None = None  # (index, count) of a sharded generation


def hold_range(text: str) -> tuple[float, float]:
    """``"5"`` → (5, 5); ``"2-20"`` → (2, 20): how long a simulated Job pod runs, drawn uniformly."""
    low, _, high = text.partition("-")
    bounds = (float(low), float(high or low))
    if bounds[0] < 0 or bounds[1] < bounds[0]:
        raise ValueError(f"hold {text!r}: expected S or MIN-MAX with 0 <= MIN <= MAX")
    return bounds


def _expand(arg: str, env: Mapping[str, str]) -> str:
    for key, value in env.items():
        arg = arg.replace(f"$({key})", value)
    return arg


def _flag(args: Sequence[str], name: str) -> str:
    for i, arg in enumerate(args[:-1]):
        if arg == name:
            return args[i + 1]
    return ""


def stage_work(pod: Mapping[str, Any]) -> StageWork:
    """The stage, series, model/judge and shard of a Job pod (``kubejury <stage> --series S …``)."""
    container = pod["spec"]["containers"][0]
    annotations = pod["metadata"].get("annotations") or {}
    env = {"JOB_COMPLETION_INDEX": str(annotations.get(COMPLETION_INDEX, "0"))}
    args = [_expand(str(a), env) for a in container.get("args") or []]
    if not args or args[0] not in STAGE_COMPONENTS:
        raise ValueError(f"pod {pod['metadata'].get('name')}: not a kubejury stage: {args[:1]}")
    stage = args[0]
    shards = _flag(args, "--shards")
    shard = (int(_flag(args, "--shard-index")), int(shards)) if shards else None
    name = _flag(args, "--model") if stage == "generate" else _flag(args, "--judge")
    return StageWork(stage=stage, series=_flag(args, "--series"), name=name, shard=shard)


def spec_configmap(pod: Mapping[str, Any]) -> str:
    for volume in pod["spec"].get("volumes") or []:
        if volume.get("name") == "spec" and volume.get("configMap"):
            return str(volume["configMap"]["name"])
    raise ValueError(f"pod {pod['metadata'].get('name')} mounts no spec ConfigMap")


def host_root(storage_uri: str, results_dir: Path, mount: str = RESULTS_MOUNT) -> Path:
    """The host directory of a run's file:// storage URI as the pod sees it (the claim's mount)."""
    path = storage_uri.removeprefix("file://")
    if not path.startswith(mount.rstrip("/") + "/"):
        raise ValueError(f"storage {storage_uri} is not under the results mount {mount}")
    return results_dir / path[len(mount.rstrip("/")) + 1 :]


def running_status(pod: Mapping[str, Any], started: str) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {
        "phase": "Running",
        "startTime": started,
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": started}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        ],
    }


def succeeded_status(pod: Mapping[str, Any], started: str, finished: str) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {
        "phase": "Succeeded",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": finished,
            },
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished},
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": started,
                        "finishedAt": finished,
                    }
                },
            }
        ],
    }


# ------------------------------------------------------------------------------------ storage


@dataclass(frozen=True)
class RunStorage:
    run: str  # the run's name (RunLayout's root inside its own prefix)
    root: Path  # host directory of the run's own prefix


def write_stage_records(
    target: RunStorage, work: StageWork, *, finished: bool, report: bytes | None = None
) -> None:
    """The progress record (and for aggregation, report.json) the real stage leaves in storage:
    ``running`` with nothing done at the start, ``succeeded`` with everything done at the end."""
    from kubejury.files.storage import RunLayout, open_storage
    from kubejury.stages import ProgressTracker

    storage = open_storage(f"file://{target.root}")
    layout = RunLayout(target.run)
    if work.stage == "aggregate":
        tracker = ProgressTracker("aggregate", "*", "report", total=1)
        key = layout.run_progress_key("aggregate", "report")
        if finished:
            if report is not None:
                storage.write_bytes(f"{layout.report_prefix}/report.json", report)
            tracker.advance()
            tracker.finish("succeeded", storage.uri_for(f"{layout.report_prefix}/report.json"))
        storage.write_json(key, tracker.record())
        return
    key = layout.progress_key(work.series, work.stage, work.name, work.shard)
    resumed = 0
    if work.stage == "generate":
        count = work.shard[1] if work.shard else 1
        total = QUESTIONS // count + (1 if work.shard and work.shard[0] < QUESTIONS % count else 0)
    else:  # judging: every answer stored in the series so far (the generation records say how many);
        # a later round resumes from what the earlier ones judged, as the engine's stage does
        total = answers_stored(storage, layout, work.series)
        resumed = min(total, recorded_done(storage, key))
    tracker = ProgressTracker(work.stage, work.series, work.name, total=total, resumed=resumed)
    if finished:
        tracker.counts = dataclasses.replace(tracker.counts, done=total)
        tracker.finish("succeeded")
    storage.write_json(key, tracker.record())


def recorded_done(storage: Any, key: str) -> int:
    """``done`` of the progress record already stored under ``key`` (0 when there is none)."""
    from kubejury.records.progress import ProgressRecord

    record = storage.read_json_or_none(key)
    return ProgressRecord.from_json(record).done if isinstance(record, dict) else 0


def answers_stored(storage: Any, layout: Any, series: str) -> int:
    from kubejury.records.progress import ProgressRecord, parse_progress_file_name

    total = 0
    for key in storage.list(layout.progress_prefix(series)):
        parsed = parse_progress_file_name(key)
        if parsed is not None and parsed.stage == "generate":
            record = storage.read_json_or_none(key)
            if isinstance(record, dict):
                total += ProgressRecord.from_json(record).done
    return total


# ------------------------------------------------------------------------------------ the agent


@dataclass
class FastKubelet:
    """The watch loop and one task per Job pod (module docstring)."""

    kube: Kube
    results_dir: Path
    report: bytes
    hold_s: tuple[float, float]  # a pod runs a uniformly random time in this range
    rng: random.Random = field(default_factory=lambda: random.Random(13))
    handled: set[str] = field(default_factory=set)  # pod uids
    specs: dict[tuple[str, str], RunStorage] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    completed: int = 0
    failures: int = 0

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            return  # KWOK's pod-delete stage finishes a deletion
        if uid in self.handled or not pod["spec"].get("nodeName"):
            return
        if not any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or []):
            return
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return
        self.handled.add(uid)
        task = asyncio.get_running_loop().create_task(self.run_pod(pod))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def storage_of(self, pod: Mapping[str, Any]) -> RunStorage:
        key = (str(pod["metadata"]["namespace"]), spec_configmap(pod))
        found = self.specs.get(key)
        if found is None:
            configmap = await self.kube.get("configmaps", *key)
            if configmap is None:
                raise ValueError(f"ConfigMap {key[0]}/{key[1]} is missing")
            document = yaml.safe_load(configmap["data"][SPEC_FILE])
            uri = str(document["spec"]["storage"]["uri"])
            found = RunStorage(str(document["metadata"]["name"]), host_root(uri, self.results_dir))
            self.specs[key] = found
        return found

    async def run_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        try:
            work = stage_work(pod)
            target = await self.storage_of(pod)
            started = now()
            await asyncio.to_thread(write_stage_records, target, work, finished=False)
            if not await self.kube.patch_status(
                "pods", meta["namespace"], meta["name"], running_status(pod, started)
            ):
                return
            await asyncio.sleep(self.rng.uniform(*self.hold_s))
            await asyncio.to_thread(write_stage_records, target, work, finished=True, report=self.report)
            finished = now()
            await self.kube.patch_status(
                "pods", meta["namespace"], meta["name"], succeeded_status(pod, started, finished)
            )
            self.completed += 1
        except (KubeError, ValueError, OSError, KeyError) as exc:
            self.failures += 1
            self.handled.discard(str(meta["uid"]))  # a later event of the pod tries again
            log.warning("pod %s: %s", where, exc)


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> None:
    async with Kube(Credentials.load(args.kubeconfig), connections=args.connections) as kube:
        agent = FastKubelet(kube, args.results_dir, args.report.read_bytes(), hold_range(args.hold))
        reporter = asyncio.get_running_loop().create_task(_report(agent, stop))
        await kube.watch("pods", agent.on_pod, stop, labels=POD_SELECTOR, fields="spec.nodeName!=")
        reporter.cancel()
        for task in list(agent.tasks):
            task.cancel()
        log.info("stopped: %d pods completed, %d failures", agent.completed, agent.failures)


async def _report(agent: FastKubelet, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(30)
        log.info(
            "%d pods completed, %d in flight, %d failures", agent.completed, len(agent.tasks), agent.failures
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIMULATED kubelet for kubejury Job pods (benchmark fast path)"
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--results-dir", type=Path, required=True, help="host directory of the results claim")
    parser.add_argument("--report", type=Path, required=True, help="report.json the aggregation Jobs store")
    parser.add_argument(
        "--hold", default="2-20", help="seconds a Job pod stays Running: S or MIN-MAX (uniform)"
    )
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    json.loads(args.report.read_text(encoding="utf-8"))  # fail at once on a broken template

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args, stop)

    started = time.monotonic()
    asyncio.run(run())
    log.info("ran %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
