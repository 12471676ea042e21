"""The operator's Prometheus metrics: the one home of metric side effects.

Why this module exists: handlers and the reconcile loop must not each invent metric names and
labels, and Prometheus must never see unbounded label sets. Everything the operator exports is
declared here, on a dedicated registry (``REGISTRY``), with these cardinality rules:

* no per-question, per-answer or per-request labels, ever;
* per-run series carry ``namespace`` and ``name`` (plus a model/judge/stage name from the run's
  spec); they are bounded by the runs that exist and are removed by :func:`forget_run` when a run is
  deleted;
* error ``kind`` and ``stage``/``phase`` labels come from closed sets (:data:`ERROR_KINDS`,
  :data:`STAGES`, :data:`PHASES`); an unknown error kind is folded into ``"other"``.

The operator is level-triggered: on each reconcile, :func:`observation` reads the run's new status
and the Jobs' progress records into a :class:`RunObservation` of *cumulative* counts, the ETA and
the durations of finished stages; :func:`observe_run` turns it into counter increments and gauge
values. The first observation of a run in this process only sets a baseline (the previous
operator process already counted that work), so an operator restart does not produce a burst of
phantom rate. Everything is derived from the status and the records, never from what this process
remembers of earlier reconciles, so a restarted operator reports the same figures.

Every metric is documented in ``docs/metrics.md``; a test checks the dashboards only query series
declared here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from kubejury.inference.client import ErrorKind
from kubejury.records.gpu_usage import GpuUsage
from kubejury.records.progress import ProgressRecord
from kubejury.records.run_status import RunStatus
from kubejury.records.timestamps import now_time, seconds_between

PHASES: tuple[str, ...] = (
    "Pending",
    "Provisioning",
    "Generating",
    "Judging",
    "Aggregating",
    "Succeeded",
    "Failed",
)
"""EvalRun phases; any other phase string is reported as ``Unknown``."""

UNKNOWN_PHASE = "Unknown"

STAGES: tuple[str, ...] = ("provisioning", "generation", "judging", "aggregation")
"""Pipeline stages used for progress, ETA and duration labels."""

ERROR_KINDS: tuple[str, ...] = (*get_args(ErrorKind), "parse", "other")
"""Request error kinds (closed set, keeps ``kubejury_request_errors_total`` bounded): the engine
client's :data:`kubejury.inference.client.ErrorKind` values, ``parse`` (a judge reply without a score) and
``other`` for anything else."""

STAGE_DURATION_BUCKETS: tuple[float, ...] = (
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    28800.0,
    57600.0,
    86400.0,
)
"""Stage durations range from seconds (aggregation) to a day (generation of a 120B model)."""

RECONCILE_DURATION_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
API_SECONDS_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""A request to the Kubernetes API: milliseconds on an idle API server, seconds behind a queue."""

REGISTRY = CollectorRegistry(auto_describe=True)
"""The registry ``start_metrics_server`` serves; tests introspect it."""

ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_K = TypeVar("_K", str, tuple[str, str])

_RUN = ("namespace", "name")

RUNS = Gauge(
    "kubejury_runs",
    "EvalRuns known to this operator, by phase.",
    ["phase"],
    registry=REGISTRY,
)
RUN_PROGRESS_ITEMS = Gauge(
    "kubejury_run_progress_items",
    "Items finished so far in a run's stage (answers generated, judgments made, series aggregated).",
    [*_RUN, "stage"],
    registry=REGISTRY,
)
RUN_TOTAL_ITEMS = Gauge(
    "kubejury_run_total_items",
    "Items a run's stage has to finish in total.",
    [*_RUN, "stage"],
    registry=REGISTRY,
)
RUN_ETA_SECONDS = Gauge(
    "kubejury_run_eta_seconds",
    "Estimated seconds until the run finishes; absent while no estimate exists.",
    list(_RUN),
    registry=REGISTRY,
)
ITEMS_GENERATED = Counter(
    "kubejury_items_generated",
    "Answers generated, by run and answering model.",
    [*_RUN, "model"],
    registry=REGISTRY,
)
ITEMS_JUDGED = Counter(
    "kubejury_items_judged",
    "Judgments made, by run and judge.",
    [*_RUN, "judge"],
    registry=REGISTRY,
)
REQUEST_ERRORS = Counter(
    "kubejury_request_errors",
    "Failed requests to model endpoints (after the client's own retries gave up or per attempt, as the"
    " Jobs record them), by run, endpoint (model or judge name) and error kind.",
    [*_RUN, "endpoint", "kind"],
    registry=REGISTRY,
)
JUDGE_PARSE_FAILURES = Counter(
    "kubejury_judge_parse_failures",
    "Judge replies from which no verdict could be parsed, by run and judge.",
    [*_RUN, "judge"],
    registry=REGISTRY,
)
STAGE_DURATION = Histogram(
    "kubejury_stage_duration_seconds",
    "Wall-clock duration of finished run stages.",
    ["stage"],
    buckets=STAGE_DURATION_BUCKETS,
    registry=REGISTRY,
)
RECONCILES = Counter(
    "kubejury_reconcile",
    "Reconcile handler invocations, by handler.",
    ["handler"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "kubejury_reconcile_errors",
    "Reconcile handler invocations that raised, by handler.",
    ["handler"],
    registry=REGISTRY,
)
RECONCILE_DURATION = Histogram(
    "kubejury_reconcile_duration_seconds",
    "Time spent in one reconcile handler invocation, by handler.",
    ["handler"],
    buckets=RECONCILE_DURATION_BUCKETS,
    registry=REGISTRY,
)
API_QUEUE = Histogram(
    "kubejury_api_queue_seconds",
    "Time a request of the operator to the Kubernetes API waited for a place in flight, by lane.",
    ["lane"],
    buckets=API_SECONDS_BUCKETS,
    registry=REGISTRY,
)
API_REQUEST = Histogram(
    "kubejury_api_request_seconds",
    "Time a request of the operator to the Kubernetes API took once sent, by HTTP method.",
    ["method"],
    buckets=API_SECONDS_BUCKETS,
    registry=REGISTRY,
)
BUILD_INFO = Gauge(
    "kubejury_build_info",
    "Always 1; the label carries the operator version.",
    ["version"],
    registry=REGISTRY,
)

for _phase in (*PHASES, UNKNOWN_PHASE):
    RUNS.labels(phase=_phase).set(0)
for _stage in STAGES:
    STAGE_DURATION.labels(stage=_stage)


GPU_LABELS = (*_RUN, "model", "role")
_gpu_usage: dict[tuple[str, str], GpuUsage] = {}  # the runs' status.gpu, read at scrape time


class _GpuSecondsCollector(Collector):
    """``kubejury_gpu_held_seconds_total`` and ``kubejury_gpu_used_seconds_total`` per model server
    (labels namespace, name, model, role): computed when Prometheus scrapes, from each run's
    ``status.gpu`` with its open intervals counted up to that moment, so they grow smoothly while
    the status itself changes only when a server or Job starts or stops."""

    def describe(self) -> list[CounterMetricFamily]:
        return self._families()

    def collect(self) -> list[CounterMetricFamily]:
        now = now_time()
        held, used = self._families()
        with _lock:
            runs = list(_gpu_usage.items())
        for (namespace, name), usage in runs:
            for server in usage.servers:
                labels = [namespace, name, server.name, server.role]
                held.add_metric(labels, server.held_at(now))
                used.add_metric(labels, server.used_at(now))
        return [held, used]

    @staticmethod
    def _families() -> list[CounterMetricFamily]:
        return [
            CounterMetricFamily(
                "kubejury_gpu_held_seconds",
                "GPU-seconds a run's model server was Ready (Ready time x GPUs), by model or judge.",
                labels=GPU_LABELS,
            ),
            CounterMetricFamily(
                "kubejury_gpu_used_seconds",
                "GPU-seconds during which a run's generation or judging Jobs ran against the server.",
                labels=GPU_LABELS,
            ),
        ]


REGISTRY.register(_GpuSecondsCollector())


@dataclass(frozen=True)
class StageProgress:
    """Done/total counters of one stage of one run, as read from the stages' progress records."""

    done: int
    total: int


@dataclass(frozen=True)
class RunObservation:
    """What the operator knows about one run at one reconcile; all counts are cumulative.

    ``generated`` maps answering model → answers so far, ``judged`` judge → judgments so far,
    ``request_errors`` (endpoint, kind) → errors so far, ``parse_failures`` judge → failures so
    far, ``stage_durations`` stage → seconds for stages that have finished.
    """

    namespace: str
    name: str
    phase: str
    progress: Mapping[str, StageProgress] = field(default_factory=dict)
    eta_seconds: float | None = None
    generated: Mapping[str, int] = field(default_factory=dict)
    judged: Mapping[str, int] = field(default_factory=dict)
    request_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    parse_failures: Mapping[str, int] = field(default_factory=dict)
    stage_durations: Mapping[str, float] = field(default_factory=dict)
    gpu: GpuUsage | None = None  # status.gpu


@dataclass
class _RunMemory:
    """What this process last saw of a run: needed to turn cumulative counts into increments and
    to know which labelled series to remove when the run goes away."""

    phase: str
    stages: set[str] = field(default_factory=set)
    has_eta: bool = False
    generated: dict[str, int] = field(default_factory=dict)
    judged: dict[str, int] = field(default_factory=dict)
    request_errors: dict[tuple[str, str], int] = field(default_factory=dict)
    parse_failures: dict[str, int] = field(default_factory=dict)
    durations_seen: set[str] = field(default_factory=set)


_lock = threading.Lock()
_runs: dict[tuple[str, str], _RunMemory] = {}


def normalize_phase(phase: str | None) -> str:
    """The phase label for ``phase``: one of :data:`PHASES`, else ``Unknown``."""
    return phase if phase in PHASES else UNKNOWN_PHASE


def normalize_error_kind(kind: str) -> str:
    """The ``kind`` label for an error kind: one of :data:`ERROR_KINDS`, else ``other``."""
    return kind if kind in ERROR_KINDS else "other"


def _check_stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; metrics stages are {', '.join(STAGES)}")
    return stage


def _advance(previous: dict[_K, int], key: _K, current: int, first_sight: bool) -> int:
    """Record ``current`` for ``key`` and return how much the counter should grow.

    On first sight of a run the increment is zero (baseline: an earlier operator process counted
    that work). A key that appears later in a run's life counts in full. A cumulative count that
    went down (records rewritten) re-baselines without a negative increment.
    """
    before = previous.get(key)
    previous[key] = current
    if first_sight:
        return 0
    if before is None:
        return max(current, 0)
    return max(current - before, 0)


def _refresh_phase_gauge() -> None:
    counts = dict.fromkeys((*PHASES, UNKNOWN_PHASE), 0)
    for memory in _runs.values():
        counts[memory.phase] += 1
    for phase, count in counts.items():
        RUNS.labels(phase=phase).set(count)


# --------------------------------------------------------------- from status and records


ProgressByStage = Mapping[tuple[str, str, str], ProgressRecord]  # (stage, series, name) -> record


def _seconds_between(start: str, end: str) -> float | None:
    """Seconds from ``start`` to ``end`` (never below 0); ``None`` when either is no timestamp."""
    try:
        return seconds_between(start, end)
    except ValueError:
        return None


def stage_durations(status: Mapping[str, Any] | RunStatus) -> dict[str, float]:
    """Durations of the finished stages, from the status: generation from ``startedAt`` to
    ``GenerationComplete``, judging from there to ``JudgingComplete``, aggregation from there to
    ``Succeeded`` (each a condition's ``lastTransitionTime`` while it is True)."""
    record = status if isinstance(status, RunStatus) else RunStatus.from_json(status)

    def flipped(ctype: str) -> str:
        c = record.condition(ctype)
        return c.last_transition_time if c is not None and c.is_true else ""

    durations: dict[str, float] = {}
    for stage, start, end in (
        ("generation", record.started_at, flipped("GenerationComplete")),
        ("judging", flipped("GenerationComplete"), flipped("JudgingComplete")),
        ("aggregation", flipped("JudgingComplete"), flipped("Succeeded")),
    ):
        if start and end and (seconds := _seconds_between(start, end)) is not None:
            durations[stage] = seconds
    return durations


def eta_seconds(phase: str, progress: Mapping[str, StageProgress], records: ProgressByStage) -> float | None:
    """Seconds until the answers and judgments are done: the items left divided by the rate the
    running stages report in their progress records; ``None`` once finished or while nothing runs."""
    rate = sum(r.rate_per_s for r in records.values() if r.running)
    done = sum(p.done for s, p in progress.items() if s in ("generation", "judging"))
    total = sum(p.total for s, p in progress.items() if s in ("generation", "judging"))
    if rate <= 0 or total <= done or phase in ("Succeeded", "Failed"):
        return None
    return (total - done) / rate


def observation(
    namespace: str, name: str, status: Mapping[str, Any] | RunStatus, records: ProgressByStage
) -> RunObservation:
    """One reconcile's :class:`RunObservation` of a run, from its new status (as written, or read
    as :class:`~kubejury.records.run_status.RunStatus`) and progress records."""
    stored = status if isinstance(status, RunStatus) else RunStatus.from_json(status)
    generated: dict[str, int] = {}
    judged: dict[str, int] = {}
    errors: dict[tuple[str, str], int] = {}
    parse_failures: dict[str, int] = {}
    for (stage, _series, who), record in records.items():
        target = generated if stage == "generate" else judged
        target[who] = target.get(who, 0) + record.done
        if record.errors:  # the stages count errors without a kind
            errors[(who, "other")] = errors.get((who, "other"), 0) + record.errors
        if stage == "judge":
            parse_failures[who] = parse_failures.get(who, 0) + record.parse_failures
    progress = {
        counts.stage: StageProgress(done=counts.done, total=counts.total)
        for counts in stored.stages
        if counts.stage in STAGES
    }
    phase = stored.phase
    # A status edited by hand reads as no GPU usage: no GPU series rather than a failed reconcile.
    gpu = stored.gpu if stored.gpu.servers else None
    return RunObservation(
        namespace=namespace,
        name=name,
        phase=phase,
        progress=progress,
        eta_seconds=eta_seconds(phase, progress, records),
        generated=generated,
        judged=judged,
        request_errors=errors,
        parse_failures=parse_failures,
        stage_durations=stage_durations(stored),
        gpu=gpu,
    )


def observe_run(observation: RunObservation) -> None:
    """Update every per-run series from one reconcile's view of a run."""
    key = (observation.namespace, observation.name)
    ns, name = key
    phase = normalize_phase(observation.phase)
    for stage in (*observation.progress, *observation.stage_durations):
        _check_stage(stage)
    with _lock:
        memory = _runs.get(key)
        first_sight = memory is None
        if memory is None:
            memory = _RunMemory(phase=phase)
            _runs[key] = memory
        memory.phase = phase
        _refresh_phase_gauge()
        if observation.gpu is not None:
            _gpu_usage[key] = observation.gpu

        for stage, progress in observation.progress.items():
            RUN_PROGRESS_ITEMS.labels(ns, name, stage).set(progress.done)
            RUN_TOTAL_ITEMS.labels(ns, name, stage).set(progress.total)
            memory.stages.add(stage)

        eta = observation.eta_seconds
        if eta is None:
            if memory.has_eta:
                RUN_ETA_SECONDS.remove(ns, name)
                memory.has_eta = False
        else:
            RUN_ETA_SECONDS.labels(ns, name).set(max(eta, 0.0))
            memory.has_eta = True

        for model, count in observation.generated.items():
            grow = _advance(memory.generated, model, count, first_sight)
            series = ITEMS_GENERATED.labels(ns, name, model)
            if grow:
                series.inc(grow)
        for judge, count in observation.judged.items():
            grow = _advance(memory.judged, judge, count, first_sight)
            series = ITEMS_JUDGED.labels(ns, name, judge)
            if grow:
                series.inc(grow)
        merged_errors: dict[tuple[str, str], int] = {}
        for (endpoint, kind), count in observation.request_errors.items():
            label_key = (endpoint, normalize_error_kind(kind))
            merged_errors[label_key] = merged_errors.get(label_key, 0) + count
        for (endpoint, kind), count in merged_errors.items():
            grow = _advance(memory.request_errors, (endpoint, kind), count, first_sight)
            series = REQUEST_ERRORS.labels(ns, name, endpoint, kind)
            if grow:
                series.inc(grow)
        for judge, count in observation.parse_failures.items():
            grow = _advance(memory.parse_failures, judge, count, first_sight)
            series = JUDGE_PARSE_FAILURES.labels(ns, name, judge)
            if grow:
                series.inc(grow)

        for stage, seconds in observation.stage_durations.items():
            if stage in memory.durations_seen:
                continue
            memory.durations_seen.add(stage)
            if not first_sight:
                STAGE_DURATION.labels(stage=stage).observe(max(seconds, 0.0))


def forget_run(namespace: str, name: str) -> None:
    """Remove every series of a deleted run (keeps cardinality bounded by live runs)."""
    with _lock:
        _gpu_usage.pop((namespace, name), None)
        memory = _runs.pop((namespace, name), None)
        if memory is None:
            return
        for stage in memory.stages:
            RUN_PROGRESS_ITEMS.remove(namespace, name, stage)
            RUN_TOTAL_ITEMS.remove(namespace, name, stage)
        if memory.has_eta:
            RUN_ETA_SECONDS.remove(namespace, name)
        for model in memory.generated:
            ITEMS_GENERATED.remove(namespace, name, model)
        for judge in memory.judged:
            ITEMS_JUDGED.remove(namespace, name, judge)
        for endpoint, kind in memory.request_errors:
            REQUEST_ERRORS.remove(namespace, name, endpoint, kind)
        for judge in memory.parse_failures:
            JUDGE_PARSE_FAILURES.remove(namespace, name, judge)
        _refresh_phase_gauge()


def known_runs() -> frozenset[tuple[str, str]]:
    """(namespace, name) of the runs that currently have series."""
    with _lock:
        return frozenset(_runs)


def observe_stage_duration(stage: str, seconds: float) -> None:
    """Record one finished stage's duration directly (for callers that time a stage themselves)."""
    STAGE_DURATION.labels(stage=_check_stage(stage)).observe(max(seconds, 0.0))


@contextmanager
def track_reconcile(handler: str) -> Iterator[None]:
    """Count, time and (on exception) count as error one invocation of a kopf handler.

    ``handler`` must be a fixed name from code (e.g. ``"create"``, ``"timer"``), never user data.
    The exception is re-raised unchanged so kopf's retry logic still applies.
    """
    RECONCILES.labels(handler=handler).inc()
    started = time.monotonic()
    try:
        yield
    except BaseException:
        RECONCILE_ERRORS.labels(handler=handler).inc()
        raise
    finally:
        RECONCILE_DURATION.labels(handler=handler).observe(time.monotonic() - started)


def observe_api_request(lane: str, method: str, waited: float, took: float) -> None:
    """One request of the gateway: ``waited`` seconds for its place in ``lane``
    (:mod:`kubejury_operator.lanes`), then ``took`` seconds on the wire. Labels are fixed in code."""
    API_QUEUE.labels(lane=lane).observe(waited)
    API_REQUEST.labels(method=method).observe(took)


def set_build_info(version: str) -> None:
    """Publish the running operator version as ``kubejury_build_info{version=...} 1``."""
    BUILD_INFO.clear()
    BUILD_INFO.labels(version=version).set(1)


def metric_names() -> frozenset[str]:
    """Every sample name this registry can expose (e.g. ``kubejury_items_judged_total``,
    ``kubejury_stage_duration_seconds_bucket``); used by the dashboard test."""
    names: set[str] = set()
    for metric in REGISTRY.collect():
        names.add(metric.name)
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("_count", "_sum", "_created"),
            "gauge": ("",),
            "info": ("_info",),
        }.get(metric.type, ("",))
        names.update(metric.name + suffix for suffix in suffixes)
    return frozenset(names)


_FAMILIES: tuple[Gauge | Counter | Histogram, ...] = (
    RUNS,
    RUN_PROGRESS_ITEMS,
    RUN_TOTAL_ITEMS,
    RUN_ETA_SECONDS,
    ITEMS_GENERATED,
    ITEMS_JUDGED,
    REQUEST_ERRORS,
    JUDGE_PARSE_FAILURES,
    STAGE_DURATION,
    RECONCILES,
    RECONCILE_ERRORS,
    RECONCILE_DURATION,
    API_QUEUE,
    API_REQUEST,
    BUILD_INFO,
)


def metric_labels() -> dict[str, frozenset[str]]:
    """Label names of every ``kubejury_*`` sample name (``le`` included for histogram buckets);
    the dashboard test checks that queries only group and filter by labels that exist."""
    result: dict[str, frozenset[str]] = {}
    for family in _FAMILIES:
        (described,) = list(family.describe())
        labels = frozenset(family._labelnames)
        if described.type == "counter":
            result[described.name + "_total"] = labels
        elif described.type == "histogram":
            result[described.name + "_bucket"] = labels | {"le"}
            result[described.name + "_sum"] = labels
            result[described.name + "_count"] = labels
        else:
            result[described.name] = labels
    for gpu_family in _GpuSecondsCollector._families():
        result[gpu_family.name + "_total"] = frozenset(GPU_LABELS)
    return result


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> None:
    """Serve ``REGISTRY`` on ``http://addr:port/metrics`` from a background thread."""
    start_http_server(port, addr=addr, registry=REGISTRY)


def _reset_for_tests() -> None:
    """Forget every run (tests only)."""
    for namespace, name in list(known_runs()):
        forget_run(namespace, name)
