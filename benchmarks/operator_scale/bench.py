"""One benchmark invocation: a cluster, then one round per scale, each measured alone.

Why this module exists: it is the procedure of docs/benchmarks.md, in order. Setup: a dev cluster
(``devcluster``) with the node mix of :mod:`.nodemix`, its controller-manager and scheduler given
more API QPS than the defaults (so that the Job controller is not the bottleneck at 100 runs), the
namespaces with the results claim and the Secrets the study spec references, and the report
template. Then for every scale, with the operator's one design (watch-fed caches; the list-per-tick
design before issue 13 was removed in issue 22, its figures are the recorded baseline the report
shows beside these — :func:`.report.baseline`):

1. ``helm upgrade --install`` of the chart with ``operator.extraEnv`` pointing the operator at the
   source copy, and the operator started from the chart's Deployment with a token of the chart's
   ServiceAccount —
   ``tests/e2e/operator_up.py``'s ``up``, reused as is; the reconcile interval is the chart's
   default (15 s). The fast kubelet (:mod:`.fast_kubelet`) starts beside it.
2. The benchmark's watches on EvalRuns and Jobs start; the /proc counters and the audit log's
   size are read; the N EvalRuns are created (round-robin over the namespaces).
3. **Active window**: until every run is finished (``Succeeded`` with a summary, or ``Failed``).
4. **Idle window**: ``--idle`` seconds more with every run finished.
5. Teardown: the runs are deleted (the operator's finalizer runs), the benchmark waits until
   every child is gone, stops the fast kubelet and the operator, and removes the runs' files.

Figures of a round come from :mod:`.measure` (audit log, delays) and :mod:`.procstat` (/proc).

Designs (issue 26): every scale runs once per ``--designs`` entry, one after the other on the same
cluster: ``lean`` (the operator as it is) and ``full`` (``KUBEJURY_STATUS_FORMAT=full``: the status
with the placement's prose, kopf's diff-base annotation and the default field managers, as before
issue 26 — a switch kept only for this comparison). Each round records the EvalRun's size as the
benchmark's watch saw it (with and without ``managedFields``, the diff-base annotation, the status
and its placement) and the API server's CPU-seconds per status patch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp

from . import measure, nodemix, procstat, report_template, workload
from .kube import Credentials, Kube, KubeError

log = logging.getLogger("operator-scale")

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / "tests" / "e2e"
MANAGED = "app.kubernetes.io/managed-by=kubejury-operator"
CHILD_RESOURCES = ("jobs", "deployments", "pods")
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The benchmark cluster's controller-manager and scheduler: more client QPS than the defaults
#: (20/30 and 50/100), as large clusters configure them; the tests' clusters keep the defaults.
#: The API server keeps its audit log in one file (it rotates at 100 MB by default). The node
#: lifecycle controller waits 10 min, not 40 s, before it calls a node whose Lease lapsed NotReady:
#: KWOK's nodes never die, and on 2 saturated cores their Leases lapsed while every simulated
#: component shared the cores with the API server — their server Pods were then marked NotReady,
#: which KWOK never undoes, and runs stalled (a real kubelet is not on the API server's cores).
CLUSTER_EXTRA_ARGS: dict[str, list[str]] = {
    "kube-controller-manager": [
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--concurrent-job-syncs=20",
        "--node-monitor-grace-period=10m",
    ],
    "kube-scheduler": ["--kube-api-qps=200", "--kube-api-burst=400"],
    # the audit log is read by windows: keep it one file (the default rotates it every 100 MB)
    "kube-apiserver": ["--audit-log-maxsize=1000000"],
}
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Options:
    scales: tuple[int, ...]
    nodes: int
    namespaces: int
    idle_s: float
    hold: str  # the fast kubelet's --hold: S or MIN-MAX seconds
    shards: int
    round_timeout_s: float
    teardown_timeout_s: float
    state: Path
    keep_cluster: bool
    designs: tuple[str, ...] = ("lean",)  # "lean" (the operator) and/or "full" (before issue 26)


def e2e_module(name: str) -> ModuleType:
    """A module of tests/e2e (``operator_up``, ``kubeapi``), imported as the e2e suite imports it."""
    if str(E2E) not in sys.path:
        sys.path.insert(0, str(E2E))
    return importlib.import_module(name)


SOURCES = (
    ("operator/kubejury_operator", "kubejury_operator"),
    ("jobs/kubejury", "kubejury"),
    ("charts/kubejury", "charts/kubejury"),
)


@dataclass(frozen=True)
class Source:
    """The operator, engine and chart every round runs: a copy taken when the benchmark starts, so
    that edits to the working tree during an hour-long benchmark (another engineer's) cannot make
    two rounds measure different code. The operator and the fast kubelet import from it
    (``PYTHONPATH``, ahead of the editable install); helm installs its chart."""

    root: Path
    digest: str
    git_head: str
    tree_clean: bool  # the working tree had no uncommitted change there

    @property
    def chart(self) -> Path:
        return self.root / "charts" / "kubejury"

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "git_head": self.git_head, "tree_clean": self.tree_clean}


def snapshot_source(work: Path) -> Source:
    root = work / "source"
    shutil.rmtree(root, ignore_errors=True)
    digest = hashlib.sha256()
    for relative, target in SOURCES:
        shutil.copytree(REPO / relative, root / target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for path in sorted(p for p in (root / target).rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", *(r for r, _ in SOURCES)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return Source(root, digest.hexdigest()[:12], head.stdout.strip() or "?", not dirty.stdout.strip())


#: The status format each design runs the operator with (``KUBEJURY_STATUS_FORMAT``).
DESIGN_FORMATS = {"lean": "lean", "full": "full"}


def source_values(source: Path | None = None, design: str = "lean") -> dict[str, str]:
    """The chart values (``operator.extraEnv``) that make the operator import the source copy (a
    host path: only the local operator process of this harness uses it) and run ``design``'s
    status format."""
    values = {
        "operator.extraEnv[0].name": "KUBEJURY_STATUS_FORMAT",
        "operator.extraEnv[0].value": DESIGN_FORMATS[design],
    }
    if source is not None:
        values |= {"operator.extraEnv[1].name": "PYTHONPATH", "operator.extraEnv[1].value": str(source)}
    return values


# ------------------------------------------------------------------------------------- setup


@dataclass
class Bench:
    """The running benchmark: its cluster, admin client, work directory and node list."""

    options: Options
    cluster: Any  # devcluster.Cluster
    kube: Kube
    nodes: dict[str, Any]
    report_path: Path
    source: Source
    started: float = field(default_factory=time.time)

    @property
    def work(self) -> Path:
        return self.options.state.resolve()

    @property
    def results_dir(self) -> Path:
        return self.work / "volumes" / str(e2e_module("operator_up").RESULTS_CLAIM)

    def round_dir(self, round_id: str) -> Path:
        path = self.work / "bench" / round_id
        path.mkdir(parents=True, exist_ok=True)
        return path


def start_cluster(options: Options) -> tuple[Any, dict[str, Any]]:
    sys.path.insert(0, str(REPO / "cluster"))
    devcluster = importlib.import_module("devcluster")
    options.state.mkdir(parents=True, exist_ok=True)
    nodes = nodemix.node_list(options.nodes)
    nodes_file = options.state / f"nodes-{options.nodes}.json"
    nodes_file.write_text(json.dumps(nodes), encoding="utf-8")
    devcluster.stop_cluster(options.state.resolve())  # a fresh etcd and audit log for every invocation
    for rotated in options.state.resolve().glob("audit-*.log"):  # an earlier invocation's
        rotated.unlink()
    log.info("starting the dev cluster with %d nodes in %s", options.nodes, options.state)
    cluster = devcluster.start_cluster(nodes_file, options.state.resolve(), extra_args=CLUSTER_EXTRA_ARGS)
    return cluster, nodes


async def prepare_namespaces(bench: Bench) -> None:
    """Each namespace with the results claim (hostPath, as ``operator_up`` makes it) and Secrets."""
    operator_up, kubeapi = e2e_module("operator_up"), e2e_module("kubeapi")
    async with kubeapi.KubeApi(kubeapi.KubeConfig.load(bench.cluster.kubeconfig)) as api:
        for namespace in workload.namespaces(min(bench.options.namespaces, max(bench.options.scales))):
            await operator_up.ensure_results_claim(api, namespace, bench.results_dir)
            for secret in workload.secrets(namespace):
                await bench.kube.ensure("secrets", namespace, secret)


def prepare_report(bench_dir: Path) -> Path:
    spec = workload.study_spec()
    return report_template.write(
        bench_dir / "report-template.json",
        [m["name"] for m in spec["models"]],
        [j["name"] for j in spec["judges"]],
    )


# ------------------------------------------------------------------------------------- a round


@dataclass
class Observed:
    """What the benchmark's own watches saw during a round."""

    runs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # created objects
    points: dict[tuple[str, str], list[measure.StatusPoint]] = field(default_factory=dict)
    phases: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], list[measure.JobDone]] = field(default_factory=dict)
    seen_complete: set[tuple[str, str]] = field(default_factory=set)
    job_counts: dict[str, int] = field(default_factory=dict)
    created_at: dict[tuple[str, str], float] = field(default_factory=dict)  # just before its create
    models: int = 16
    sizes: measure.SizeTally = field(default_factory=measure.SizeTally)
    writes: measure.WriteTally = field(default_factory=measure.WriteTally)

    def on_evalrun(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        if kind == "DELETED":
            self.writes.forget(key)
            return
        self.sizes.add(obj)
        status = obj.get("status") or {}
        self.writes.add(key, status)
        point = measure.status_point(time.time(), status, measure.status_written(meta))
        history = self.points.setdefault(key, [])
        last = history[-1] if history else None
        if last is None or (
            last.phase,
            last.generation_jobs_done,
            last.judging_jobs_done,
            last.summary,
        ) != (point.phase, point.generation_jobs_done, point.judging_jobs_done, point.summary):
            history.append(point)
        self.phases[key] = (point.phase, point.summary)

    def on_job(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        key = (str(meta["namespace"]), str(meta["name"]))
        run = (str(meta["namespace"]), str(labels.get("kubejury.io/run", "")))
        if kind == "DELETED" or run not in self.runs or key in self.seen_complete:
            return
        complete = any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in (obj.get("status") or {}).get("conditions") or []
        )
        if not complete:
            return
        self.seen_complete.add(key)
        component = str(labels.get("kubejury.io/component", ""))
        annotations = meta.get("annotations") or {}
        final = component != "judge" or int(annotations.get("kubejury.io/models-complete", 0)) >= self.models
        completed = measure.completed_at(obj.get("status") or {})
        self.jobs.setdefault(run, []).append(measure.JobDone(component, time.time(), final, completed))
        counted = f"{component}{'' if final or component != 'judge' else ' (earlier round)'}"
        self.job_counts[counted] = self.job_counts.get(counted, 0) + 1

    def finished(self) -> list[tuple[str, str]]:
        return [
            key
            for key in self.runs
            if self.phases.get(key, ("", False))[0] == "Failed" or self.phases.get(key) == ("Succeeded", True)
        ]


def cpu_samples(bench: Bench, operator_pid: int, extra: Mapping[str, int]) -> dict[str, procstat.Sample]:
    found: dict[str, procstat.Sample] = {}
    pids = {name: procstat.pid_file(bench.work / "pids" / f"{name}.pid") for name in COMPONENTS}
    for name, pid in {**pids, "operator": operator_pid, **extra}.items():
        sampled = procstat.sample(pid) if pid else None
        if sampled is not None:
            found[name] = sampled
    return found


def cpu_between(
    first: Mapping[str, procstat.Sample], second: Mapping[str, procstat.Sample], seconds: float
) -> dict[str, dict[str, float]]:
    return {
        name: {
            "cpu_s": round(second[name].cpu_s - first[name].cpu_s, 2),
            "cores": round((second[name].cpu_s - first[name].cpu_s) / max(seconds, 1e-9), 4),
        }
        for name in first
        if name in second
    }


def start_fast_kubelet(bench: Bench, round_dir: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "benchmarks.operator_scale.fast_kubelet"]
    argv += ["--kubeconfig", str(bench.cluster.kubeconfig), "--results-dir", str(bench.results_dir)]
    argv += ["--report", str(bench.report_path), "--hold", bench.options.hold]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bench.source.root), str(REPO)])}
    with (round_dir / "fast-kubelet.log").open("ab") as out:
        return subprocess.Popen(
            argv,
            cwd=str(REPO),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/evalruns.kubejury.io"


async def status_schema(bench: Bench, design: str) -> None:
    """The EvalRun CRD's status schema of ``design``: atomic status parts for ``lean``, every leaf
    owned apart for ``full`` (``kubejury_operator.crd``'s ``atomic_status``). Helm installs the
    chart's CRD only once, so each round sets it (no EvalRun exists between rounds)."""
    from kubejury_operator import crd as crdmod

    versions = crdmod.crd(atomic_status=design != "full")["spec"]["versions"]
    await bench.kube.request(
        "PATCH", CRD_PATH, {"spec": {"versions": versions}}, content_type="application/merge-patch+json"
    )
    log.info("  EvalRun CRD: %s status schema", "atomic" if design != "full" else "per-leaf")
    await asyncio.sleep(3)  # the API server re-creates the CRD's storage


async def create_runs(
    bench: Bench, names: Sequence[workload.RunName], round_id: str, observed: Observed
) -> None:
    base = workload.study_spec()
    limit = asyncio.Semaphore(8)

    async def one(index: int, run: workload.RunName) -> None:
        body = workload.evalrun(run, index, round_id, base=base, shards=bench.options.shards)
        async with limit:
            observed.created_at[(run.namespace, run.name)] = time.time()
            created = await bench.kube.create("evalruns", run.namespace, body)
        observed.runs[(run.namespace, run.name)] = created

    observed.runs.update({(r.namespace, r.name): {} for r in names})  # jobs are matched from the start
    await asyncio.gather(*(one(i, r) for i, r in enumerate(names)))


async def wait_finished(observed: Observed, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while time.monotonic() < deadline:
        done = len(observed.finished())
        if done == len(observed.runs):
            return True
        if time.monotonic() - last_report > 60:
            phases: dict[str, int] = {}
            for key in observed.runs:
                phase = observed.phases.get(key, ("(none)", False))[0] or "(none)"
                phases[phase] = phases.get(phase, 0) + 1
            log.info(
                "  %d/%d runs finished; phases %s; jobs complete %s",
                done,
                len(observed.runs),
                phases,
                observed.job_counts,
            )
            last_report = time.monotonic()
        await asyncio.sleep(0.5)
    return False


async def teardown(bench: Bench, round_id: str, names: Sequence[workload.RunName]) -> None:
    """Delete the round's runs (the operator's finalizer runs), wait until no child is left."""
    selector = f"{workload.BENCH_LABEL}={round_id}"
    for namespace in sorted({r.namespace for r in names}):
        with contextlib.suppress(KubeError):
            await bench.kube.delete_collection("evalruns", namespace, selector)
    deadline = time.monotonic() + bench.options.teardown_timeout_s
    while time.monotonic() < deadline:
        left = 0
        for ns in {r.namespace for r in names}:
            left += len((await bench.kube.list("evalruns", ns, labels=selector)).get("items") or [])
        if left == 0:
            break
        await asyncio.sleep(2)
    else:
        log.warning(
            "runs of %s still there after %.0fs: removing finalizers",
            round_id,
            bench.options.teardown_timeout_s,
        )
        for run in names:
            with contextlib.suppress(KubeError):
                await bench.kube.request(
                    "PATCH",
                    f"/apis/kubejury.io/v1alpha1/namespaces/{run.namespace}/evalruns/{run.name}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
    while time.monotonic() < deadline + 300:
        left = 0
        for resource in CHILD_RESOURCES:
            for ns in {r.namespace for r in names}:
                left += len((await bench.kube.list(resource, ns, labels=MANAGED, limit=1)).get("items") or [])
        if left == 0:
            return
        await asyncio.sleep(2)
    log.warning("children of %s still present after teardown", round_id)


@dataclass(frozen=True)
class AuditMark:
    """Where the audit log stood: its inode and size (the API server may rotate it)."""

    inode: int
    size: int
    at: float


def audit_mark(bench: Bench) -> AuditMark:
    try:
        stat = bench.cluster.audit_log.stat()
    except OSError:
        return AuditMark(0, 0, time.time())
    return AuditMark(int(stat.st_ino), int(stat.st_size), time.time())


def _read_lines(path: Path, start: int, end: int | None, tally: measure.AuditTally) -> None:
    with path.open("rb") as handle:
        handle.seek(start)
        remaining = float("inf") if end is None else end - start
        tail = b""
        while remaining > 0:
            chunk = handle.read(int(min(remaining, 8 << 20)))
            if not chunk:
                break
            remaining -= len(chunk)
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            tally.add_lines(lines)
        tally.add_lines([tail])


def read_audit(bench: Bench, first: AuditMark, last: AuditMark, tally: measure.AuditTally) -> None:
    """The audit events written between two marks into ``tally``: the slice of ``audit.log`` when
    it was not rotated in between; otherwise every rotated file written to since (the API server
    names them ``audit-<time>.log``) and the new ``audit.log`` — the tally keeps only its windows."""
    log_path = bench.cluster.audit_log
    if first.inode == last.inode and first.size <= last.size:
        _read_lines(log_path, first.size, last.size, tally)
        return
    log.info("  the audit log was rotated during the round: reading the rotated files too")
    for rotated in sorted(log_path.parent.glob("audit-*.log")):
        if rotated.stat().st_mtime >= first.at - 1:
            _read_lines(rotated, 0, None, tally)
    _read_lines(log_path, 0, last.size, tally)


def remove_results(bench: Bench, names: Sequence[workload.RunName]) -> None:
    for run in names:
        for path in (bench.results_dir / run.namespace).glob(f"{run.name}-*"):
            shutil.rmtree(path, ignore_errors=True)


PEAK_SPAN_S = 30.0  # "peak cores": the busiest 30 s of a window


def sampler(
    bench: Bench,
    operator_pid: int,
    loads: list[float],
    cpu: dict[str, list[tuple[float, float]]],
    stop: asyncio.Event,
) -> asyncio.Task[None]:
    """Every 5 s: the load average, and the CPU-seconds of the operator, kube-apiserver and etcd
    (for the busiest stretch of each window)."""
    pids = {"operator": operator_pid}
    for name in ("kube-apiserver", "etcd"):
        pids[name] = procstat.pid_file(bench.work / "pids" / f"{name}.pid") or 0

    async def sample() -> None:
        while not stop.is_set():
            loads.append(os.getloadavg()[0])
            for name, pid in pids.items():
                found = procstat.sample(pid) if pid else None
                if found is not None:
                    cpu.setdefault(name, []).append((time.time(), found.cpu_s))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 5)

    return asyncio.get_running_loop().create_task(sample())


def peaks(
    cpu: Mapping[str, Sequence[tuple[float, float]]], start: float, end: float
) -> dict[str, float | None]:
    return {
        name: measure.peak_rate([(t, v) for t, v in samples if start <= t <= end], PEAK_SPAN_S)
        for name, samples in cpu.items()
    }


async def run_round(bench: Bench, scale: int, design: str = "lean") -> dict[str, Any]:
    """One scale of one design, measured alone (module docstring, steps 1-5)."""
    options = bench.options
    round_id = f"{design}{scale:03d}"
    round_dir = bench.round_dir(round_id)
    names = workload.run_names(scale, options.namespaces, prefix="bench")
    names = [workload.RunName(r.namespace, f"{round_id}-{r.name.removeprefix('run-')}") for r in names]
    operator_up: Any = e2e_module("operator_up")
    log.info("round %s: %s design, %d runs (source %s)", round_id, design, scale, bench.source.digest)
    operator_up.CHART = bench.source.chart  # helm installs the copy's chart
    state = await operator_up.up(
        options.state.resolve(),
        work_dir=bench.work,
        extra_values=source_values(bench.source.root, design),
        start_kubelet=False,
    )
    await status_schema(bench, design)
    kubelet = start_fast_kubelet(bench, round_dir)
    observed = Observed(models=len(workload.study_spec()["models"]))
    stop = asyncio.Event()
    synced = [asyncio.Event(), asyncio.Event()]
    watches = [
        asyncio.create_task(
            bench.kube.watch(
                "evalruns",
                observed.on_evalrun,
                stop,
                labels=f"{workload.BENCH_LABEL}={round_id}",
                synced=synced[0],
            )
        ),
        asyncio.create_task(
            bench.kube.watch("jobs", observed.on_job, stop, labels=MANAGED, synced=synced[1])
        ),
    ]
    loads: list[float] = []
    cpu_series: dict[str, list[tuple[float, float]]] = {}
    sampling = sampler(bench, state.operator_pid, loads, cpu_series, stop)
    try:
        await asyncio.wait_for(asyncio.gather(*(s.wait() for s in synced)), 60)
        await asyncio.sleep(5)  # the operator's start-up (its first lists) stays out of the windows
        extra = {"fast-kubelet": kubelet.pid, "benchmark": os.getpid()}
        audit_start = audit_mark(bench)
        t_start = time.time()
        apiserver_before = await apiserver_metrics(bench)
        before = cpu_samples(bench, state.operator_pid, extra)
        await create_runs(bench, names, round_id, observed)
        t_created = time.time()
        all_done = await wait_finished(observed, options.round_timeout_s)
        t_done = time.time()
        at_done = cpu_samples(bench, state.operator_pid, extra)
        histograms = await operator_histograms(state.metrics_port)
        apiserver_times = measure.apiserver_request_seconds(apiserver_before, await apiserver_metrics(bench))
        log.info(
            "  %s: %s after %.0f s; idle window %.0f s",
            round_id,
            "all finished" if all_done else "TIMED OUT",
            t_done - t_start,
            options.idle_s,
        )
        await asyncio.sleep(options.idle_s)
        t_idle = time.time()
        after = cpu_samples(bench, state.operator_pid, extra)
        await asyncio.sleep(1)
        audit_end = audit_mark(bench)
    except BaseException:
        stop_process(kubelet)
        raise
    finally:
        stop.set()
        for task in [*watches, sampling]:
            with contextlib.suppress(Exception):
                await task
    peak_rss_kib = after.get("operator", procstat.Sample(0, 0, 0)).peak_rss_kib
    log.info("  %s: tearing down", round_id)
    await teardown(bench, round_id, names)
    stop_process(kubelet)
    operator_up.down(bench.work)
    remove_results(bench, names)

    windows = [measure.Window("active", t_start, t_done), measure.Window("idle", t_done, t_idle)]
    tally = measure.AuditTally(windows)
    await asyncio.to_thread(read_audit, bench, audit_start, audit_end, tally)
    result = summarize_round(
        bench,
        design=design,
        scale=scale,
        round_id=round_id,
        observed=observed,
        tally=tally,
        cpu=(before, at_done, after),
        times=(t_start, t_created, t_done, t_idle),
        all_done=all_done,
        peak_rss_kib=peak_rss_kib,
        loads=loads,
        cpu_series=cpu_series,
    )
    result["source"] = bench.source.to_json()
    result["evalrun_bytes"] = observed.sizes.to_json()
    result["status_writes"] = observed.writes.to_json()
    result["operator_histograms"] = histograms
    result["apiserver_request_seconds"] = apiserver_times
    return result


async def apiserver_metrics(bench: Bench) -> str:
    """The API server's ``/metrics`` text; empty when it cannot be read (the figures are then absent)."""
    try:
        return await bench.kube.text("/metrics")
    except (KubeError, aiohttp.ClientError, TimeoutError) as exc:
        log.warning("  the API server's /metrics could not be read: %s", exc)
        return ""


async def operator_histograms(port: int) -> dict[str, Any]:
    """The operator's reconcile and API request histograms (:func:`measure.operator_histograms`),
    read from its ``/metrics`` at the end of the active window; empty when it does not answer."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("  the operator's /metrics did not answer: %s", exc)
        return {}
    return measure.operator_histograms(text)


def summarize_round(
    bench: Bench,
    *,
    design: str,
    scale: int,
    round_id: str,
    observed: Observed,
    tally: measure.AuditTally,
    cpu: tuple[Mapping[str, procstat.Sample], Mapping[str, procstat.Sample], Mapping[str, procstat.Sample]],
    times: tuple[float, float, float, float],
    all_done: bool,
    peak_rss_kib: int,
    loads: Sequence[float],
    cpu_series: Mapping[str, Sequence[tuple[float, float]]],
) -> dict[str, Any]:
    t_start, t_created, t_done, t_idle = times
    active, idle = tally.load("active"), tally.load("idle")
    finished = observed.finished()
    succeeded = sum(1 for k in observed.runs if observed.phases.get(k) == ("Succeeded", True))
    # status delay, per run then pooled
    delays: list[measure.Delay] = []
    server_delays: list[measure.Delay] = []
    missing = server_missing = 0
    for key in observed.runs:
        found, lost = measure.status_delays(observed.jobs.get(key, []), observed.points.get(key, []))
        delays += found
        missing += lost
        found, lost = measure.status_delays(
            observed.jobs.get(key, []), observed.points.get(key, []), server_clock=True
        )
        server_delays += found
        server_missing += lost
    # time to create the servers, from the audit log
    created_at = observed.created_at
    creations = measure.deployment_creations(tally.operator, list(observed.runs))
    first_wave: list[float] = []
    every: list[float] = []
    wave_size = 0
    for key, obj in observed.runs.items():
        if not obj or key not in created_at:
            continue
        wave, all_servers = workload.server_deployments(obj, bench.nodes["items"])
        wave_size = len(wave)
        first = measure.time_to_create(created_at[key], creations.get(key, {}), wave)
        last = measure.time_to_create(created_at[key], creations.get(key, {}), all_servers)
        if first is not None:
            first_wave.append(first)
        if last is not None:
            every.append(last)
    cpu_active = cpu_between(cpu[0], cpu[1], t_done - t_start)
    cpu_idle = cpu_between(cpu[1], cpu[2], t_idle - t_done)
    peak_active = peaks(cpu_series, t_start, t_done)
    active_requests = active.operator_total * active.window.minutes
    status_patches = measure.repeated_writes(tally.operator, active.window, "patch", "evalruns/status")
    return {
        "round": round_id,
        "design": design,
        "runs": scale,
        "namespaces": len({k[0] for k in observed.runs}),
        "all_finished": all_done,
        "outcome": {
            "succeeded": succeeded,
            "failed": sum(1 for k in observed.runs if observed.phases.get(k, ("", False))[0] == "Failed"),
            "unfinished": len(observed.runs) - len(finished),
        },
        "wall_s": {
            "create_all_runs": round(t_created - t_start, 2),
            "active": round(t_done - t_start, 2),
            "idle": round(t_idle - t_done, 2),
        },
        "operator": {
            "cpu_s_active": cpu_active.get("operator", {}).get("cpu_s"),
            "cores_active": cpu_active.get("operator", {}).get("cores"),
            "peak_cores_active_30s": _round(peak_active.get("operator"), 4),
            "cpu_s_per_run_active": _round(
                (cpu_active.get("operator", {}).get("cpu_s") or 0) / max(scale, 1), 3
            ),
            "cpu_s_idle": cpu_idle.get("operator", {}).get("cpu_s"),
            "cores_idle": cpu_idle.get("operator", {}).get("cores"),
            "peak_rss_mib": round(peak_rss_kib / 1024, 1),
        },
        "processes": {
            "active": cpu_active,
            "idle": cpu_idle,
            "peak_cores_active_30s": {k: _round(v, 4) for k, v in peak_active.items()},
        },
        "api": {
            "active": active.to_json(),
            "idle": idle.to_json(),
            "operator_per_run_per_min_active": round(active.operator_total / max(scale, 1), 3),
            "operator_requests_active": round(active_requests),
            "operator_requests_per_run_active": round(active_requests / max(scale, 1), 1),
            "operator_per_finished_run_per_min_idle": round(idle.operator_total / max(len(finished), 1), 3),
            "operator_403": measure.forbidden(tally.operator),
            "operator_deployment_patches_active": measure.repeated_writes(
                tally.operator, active.window, "patch", "deployments"
            ),
            "operator_status_patches_active": status_patches,
            "apiserver_cpu_s_per_status_patch": measure.per_request(
                cpu_active.get("kube-apiserver", {}).get("cpu_s"), status_patches.get("requests")
            ),
            "apiserver_cpu_s_per_operator_request": measure.per_request(
                cpu_active.get("kube-apiserver", {}).get("cpu_s"), round(active_requests)
            ),
        },
        "status_delay_s": measure.delay_summary(delays, missing),
        "status_delay_server_clock_s": measure.delay_summary(server_delays, server_missing),
        "deployments_s": {
            "first_wave_size": wave_size,
            "first_wave": measure.distribution(first_wave),
            "all_servers": measure.distribution(every),
        },
        "jobs_complete": dict(sorted(observed.job_counts.items())),
        "load_average_1m": {
            "mean": round(sum(loads) / len(loads), 2) if loads else None,
            "max": round(max(loads), 2) if loads else None,
        },
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# ------------------------------------------------------------------------------------- driver


async def run(options: Options) -> dict[str, Any]:
    """Every round of ``options``; the results document (:mod:`.report` writes it out)."""
    source = snapshot_source(options.state.resolve())
    log.info(
        "operator, engine and chart copied to %s (digest %s, HEAD %s)",
        source.root,
        source.digest,
        source.git_head,
    )
    cluster, nodes = start_cluster(options)
    try:
        report_path = prepare_report(options.state.resolve() / "bench")
        async with Kube(Credentials.load(cluster.kubeconfig)) as kube:
            bench = Bench(options, cluster, kube, nodes, report_path, source)
            await prepare_namespaces(bench)
            rounds = []
            for scale in options.scales:
                for design in options.designs:
                    rounds.append(await run_round(bench, scale, design))
                    log.info("  %s", json.dumps(rounds[-1]["operator"]))
                    partial = options.state.resolve() / "bench" / "rounds-so-far.json"
                    partial.write_text(json.dumps(rounds, indent=1) + "\n", encoding="utf-8")
        return {
            "rounds": rounds,
            "nodes": nodemix.counts(options.nodes),
            "gpus": nodemix.gpus_by_product(nodes),
        }
    finally:
        operator_up = e2e_module("operator_up")
        operator_up.down(options.state.resolve())  # a round cut short leaves its operator running
        with contextlib.suppress(Exception):
            operator_up.helm_uninstall(cluster.kubeconfig)
        if not options.keep_cluster:
            cluster.stop()
