"""The benchmark's arithmetic, pure: audit-log requests per minute, percentiles, status delays,
and the time to create each run's model servers.

Why this module exists: every figure in ``benchmarks/results/operator_scale.md`` is computed here
from recorded observations (audit-log lines, watch timestamps), so the method can be unit-tested
without a cluster (``tests/unit/test_operator_scale_bench.py``) and read in one place.

* **Requests** are counted from the API server's audit log (level Metadata): one request is the
  ``ResponseComplete`` event of a normal request, or the ``ResponseStarted`` event of a watch (a
  watch completes only when it closes), at its ``requestReceivedTimestamp``.
* **Status delay** of a Job: from the moment the benchmark's watch on Jobs first saw the Job's
  ``Complete`` condition to the first EvalRun status (seen by its watch on EvalRuns) that reflects
  it — for generation the k-th completed generation Job is reflected when
  ``status.stages.generation.jobsDone`` reaches k; for judging the same with the final judging
  rounds (``kubejury.io/models-complete`` = all models; earlier rounds change no status field);
  for aggregation, phase ``Succeeded`` with a summary. A status that already showed it (the
  operator may count a generation done from its progress record) counts as 0 s and is reported
  as "early".
* The same delay **on the API server's clock**: from the Job's ``Complete`` condition's
  ``lastTransitionTime`` to the time the API server recorded for the status write that reflects
  it (the ``status`` entry of the EvalRun's ``managedFields``). Both are whole seconds, so each
  delay is ±1 s; what it leaves out is the benchmark's own watches — on a saturated machine they
  receive events seconds late, and the watch-clock delay then measures the benchmark as much as
  the operator.
"""

from __future__ import annotations

import datetime
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

OPERATOR_USER = "system:serviceaccount:kubejury:kubejury"


def parse_time(text: str) -> float:
    """RFC 3339 (the audit log's microseconds, or the API's seconds) → epoch seconds."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0-100) with linear interpolation between ranks; None when empty."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, p50, p99 and max of ``values``."""
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


# ---------------------------------------------------------------------------------- audit log


@dataclass(frozen=True, slots=True)
class Request:
    """One API request from the audit log."""

    at: float  # requestReceivedTimestamp, epoch seconds
    user: str
    verb: str
    resource: str  # "pods", "evalruns/status", … ("" for a non-resource URL)
    namespace: str
    name: str
    code: int


def request_of(event: Mapping[str, Any]) -> Request | None:
    """The request an audit event stands for, or None when the event is not the one to count
    (see the module docstring: ResponseComplete, or ResponseStarted of a watch)."""
    stage = event.get("stage")
    verb = str(event.get("verb") or "")
    if not (
        (stage == "ResponseComplete" and verb != "watch") or (stage == "ResponseStarted" and verb == "watch")
    ):
        return None
    ref = event.get("objectRef") or {}
    resource = str(ref.get("resource") or "")
    if ref.get("subresource"):
        resource += f"/{ref['subresource']}"
    return Request(
        at=parse_time(str(event.get("requestReceivedTimestamp") or event.get("stageTimestamp"))),
        user=str((event.get("user") or {}).get("username") or ""),
        verb=verb,
        resource=resource,
        namespace=str(ref.get("namespace") or ""),
        name=str(ref.get("name") or ""),
        code=int((event.get("responseStatus") or {}).get("code") or 0),
    )


def requests_from_lines(lines: Iterable[bytes]) -> Iterator[Request]:
    """Requests of audit-log lines (JSON, one event per line); a torn or foreign line is skipped."""
    for line in lines:
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        request = request_of(event) if isinstance(event, dict) else None
        if request is not None:
            yield request


@dataclass(frozen=True)
class Window:
    name: str  # "active" | "idle"
    start: float
    end: float

    @property
    def minutes(self) -> float:
        return max(self.end - self.start, 1e-9) / 60.0

    def holds(self, at: float) -> bool:
        return self.start <= at < self.end


@dataclass
class WindowLoad:
    """Requests per minute in one window: the operator's by verb and by verb+resource, everyone's by
    verb, and each user's total."""

    window: Window
    operator_by_verb: dict[str, float] = field(default_factory=dict)
    operator_by_verb_resource: dict[str, float] = field(default_factory=dict)
    all_by_verb: dict[str, float] = field(default_factory=dict)
    by_user: dict[str, float] = field(default_factory=dict)
    operator_refused: dict[str, int] = field(default_factory=dict)  # "create jobs 409" → count

    @property
    def operator_total(self) -> float:
        return sum(self.operator_by_verb.values())

    @property
    def all_total(self) -> float:
        return sum(self.all_by_verb.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "window": {"name": self.window.name, "start": self.window.start, "end": self.window.end},
            "minutes": round(self.window.minutes, 3),
            "operator_per_min": round(self.operator_total, 2),
            "operator_by_verb_per_min": _rounded(self.operator_by_verb),
            "operator_by_verb_resource_per_min": _rounded(self.operator_by_verb_resource),
            "all_per_min": round(self.all_total, 2),
            "all_by_verb_per_min": _rounded(self.all_by_verb),
            "by_user_per_min": _rounded(dict(sorted(self.by_user.items(), key=lambda kv: -kv[1])[:15])),
            "operator_refused": dict(sorted(self.operator_refused.items(), key=lambda kv: -kv[1])),
        }


def _rounded(values: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in sorted(values.items(), key=lambda kv: -kv[1])}


class AuditTally:
    """Requests of the audit log added one at a time: counts per window for everyone, and the
    operator's requests kept whole (they are few; the Deployment creations are read from them)."""

    def __init__(self, windows: Sequence[Window], operator_user: str = OPERATOR_USER) -> None:
        self.windows = list(windows)
        self.operator_user = operator_user
        self.operator: list[Request] = []
        self._all: dict[str, Counter[str]] = {w.name: Counter() for w in self.windows}
        self._users: dict[str, Counter[str]] = {w.name: Counter() for w in self.windows}

    def add(self, request: Request) -> None:
        if request.user == self.operator_user:
            self.operator.append(request)
        for window in self.windows:
            if window.holds(request.at):
                self._all[window.name][request.verb] += 1
                self._users[window.name][request.user] += 1

    def add_lines(self, lines: Iterable[bytes]) -> None:
        for request in requests_from_lines(lines):
            self.add(request)

    def load(self, name: str) -> WindowLoad:
        """Requests per minute in the window called ``name`` (see :class:`WindowLoad`)."""
        window = next(w for w in self.windows if w.name == name)
        op_verb: Counter[str] = Counter()
        op_resource: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        for r in self.operator:
            if window.holds(r.at):
                op_verb[r.verb] += 1
                op_resource[f"{r.verb} {r.resource}"] += 1
                if r.code >= 400:
                    refused[f"{r.verb} {r.resource} {r.code}"] += 1
        per = window.minutes
        return WindowLoad(
            window,
            operator_by_verb={k: v / per for k, v in op_verb.items()},
            operator_by_verb_resource={k: v / per for k, v in op_resource.items()},
            all_by_verb={k: v / per for k, v in self._all[name].items()},
            by_user={k: v / per for k, v in self._users[name].items()},
            operator_refused=dict(refused),
        )


def window_load(
    requests: Iterable[Request], window: Window, operator_user: str = OPERATOR_USER
) -> WindowLoad:
    """Requests per minute in ``window`` (see :class:`WindowLoad`)."""
    tally = AuditTally([window], operator_user)
    for request in requests:
        tally.add(request)
    return tally.load(window.name)


def repeated_writes(
    requests: Iterable[Request], window: Window, verb: str, resource: str, operator_user: str = OPERATOR_USER
) -> dict[str, float | int]:
    """How often the operator sent ``verb`` to the same object of ``resource`` in ``window``
    (e.g. scale patches of one Deployment): requests, distinct objects, the most for one object."""
    per_object: Counter[tuple[str, str]] = Counter(
        (r.namespace, r.name)
        for r in requests
        if r.user == operator_user and r.verb == verb and r.resource == resource and window.holds(r.at)
    )
    total = sum(per_object.values())
    return {
        "requests": total,
        "objects": len(per_object),
        "max_per_object": max(per_object.values(), default=0),
        "mean_per_object": round(total / len(per_object), 2) if per_object else 0.0,
    }


def forbidden(requests: Iterable[Request], operator_user: str = OPERATOR_USER) -> int:
    """The operator's requests the API server refused with 403 (RBAC must allow all it does)."""
    return sum(1 for r in requests if r.user == operator_user and r.code == 403)


# --------------------------------------------------------------------------- server creation


def deployment_creations(
    requests: Iterable[Request], runs: Sequence[tuple[str, str]], operator_user: str = OPERATOR_USER
) -> dict[tuple[str, str], dict[str, float]]:
    """(namespace, run) → Deployment name → when the operator's create of it succeeded (201).
    A Deployment belongs to the run whose ``kj-<run>-`` prefix its name has (run names are
    chosen so that none is a prefix of another)."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in runs:
        by_namespace.setdefault(namespace, []).append(name)
    found: dict[tuple[str, str], dict[str, float]] = {run: {} for run in runs}
    for r in requests:
        if r.user != operator_user or r.verb != "create" or r.resource != "deployments" or r.code != 201:
            continue
        for name in by_namespace.get(r.namespace, []):
            if r.name.startswith(f"kj-{name}-"):
                found[(r.namespace, name)].setdefault(r.name, r.at)
    return found


def time_to_create(created_at: float, creations: Mapping[str, float], wanted: Iterable[str]) -> float | None:
    """Seconds from a run's creation until every Deployment in ``wanted`` was created (None if one
    never was)."""
    names = list(wanted)
    if not names or any(n not in creations for n in names):
        return None
    return max(creations[n] for n in names) - created_at


# ------------------------------------------------------------------------------ status delay


@dataclass(frozen=True)
class JobDone:
    """A Job of one run, and when the benchmark's Job watch first saw it Complete."""

    kind: str  # "generate" | "judge" | "aggregate"
    at: float
    final: bool = True  # judging: the round created after every model's answers existed
    completed: float | None = None  # the Complete condition's lastTransitionTime (API server clock)


@dataclass(frozen=True)
class StatusPoint:
    """An EvalRun status as the benchmark's watch saw it."""

    at: float
    phase: str
    generation_jobs_done: int
    judging_jobs_done: int
    summary: bool
    written: float | None = None  # when the API server recorded this status's write


def status_point(at: float, status: Mapping[str, Any], written: float | None = None) -> StatusPoint:
    stages = status.get("stages") or {}
    return StatusPoint(
        at=at,
        phase=str(status.get("phase") or ""),
        generation_jobs_done=int((stages.get("generation") or {}).get("jobsDone") or 0),
        judging_jobs_done=int((stages.get("judging") or {}).get("jobsDone") or 0),
        summary=status.get("summary") is not None,
        written=written,
    )


def status_written(meta: Mapping[str, Any]) -> float | None:
    """When the API server recorded the object's latest status write: the newest ``time`` of its
    ``managedFields`` entries for the ``status`` subresource (whole seconds)."""
    times = [
        parse_time(str(entry["time"]))
        for entry in meta.get("managedFields") or []
        if isinstance(entry, Mapping) and entry.get("subresource") == "status" and entry.get("time")
    ]
    return max(times) if times else None


def completed_at(status: Mapping[str, Any]) -> float | None:
    """A Job's ``Complete=True`` condition's ``lastTransitionTime`` (whole seconds)."""
    for c in status.get("conditions") or []:
        if c.get("type") == "Complete" and c.get("status") == "True" and c.get("lastTransitionTime"):
            return parse_time(str(c["lastTransitionTime"]))
    return None


@dataclass(frozen=True)
class Delay:
    kind: str
    seconds: float  # ≥ 0
    early: bool  # the status reflected it before the Job was seen Complete


def _reflected(points: Sequence[StatusPoint], done: float, test: Any, server: bool) -> Delay | None:
    for point in points:
        if test(point):
            at = point.written if server else point.at
            if at is None:
                return None
            return Delay("", max(0.0, at - done), at < done)
    return None


def status_delays(
    jobs: Sequence[JobDone], points: Sequence[StatusPoint], *, server_clock: bool = False
) -> tuple[list[Delay], int]:
    """The delay of every counted Job of one run (module docstring), and how many were never
    reflected while the benchmark watched (or, ``server_clock``, lack a server timestamp)."""
    ordered = sorted(points, key=lambda p: p.at)
    delays: list[Delay] = []
    missing = 0

    def when(job: JobDone) -> float | None:
        return job.completed if server_clock else job.at

    def reflected(done: float, test: Any) -> Delay | None:
        return _reflected(ordered, done, test, server_clock)

    for kind in ("generate", "judge"):
        done = sorted(t for j in jobs if j.kind == kind and j.final and (t := when(j)) is not None)
        missing += sum(1 for j in jobs if j.kind == kind and j.final and when(j) is None)
        for k, at in enumerate(done, start=1):
            if kind == "generate":
                found = reflected(at, lambda p, k=k: p.generation_jobs_done >= k)
            else:
                found = reflected(at, lambda p, k=k: p.judging_jobs_done >= k)
            if found is None:
                missing += 1
            else:
                delays.append(Delay(kind, found.seconds, found.early))
    for job in jobs:
        if job.kind == "aggregate":
            finished = when(job)
            found = (
                None
                if finished is None
                else reflected(finished, lambda p: p.phase == "Succeeded" and p.summary)
            )
            if found is None:
                missing += 1
            else:
                delays.append(Delay("aggregate", found.seconds, found.early))
    return delays, missing


def delay_summary(delays: Sequence[Delay], never_reflected: int) -> dict[str, Any]:
    """Percentiles of one round's status delays, pooled and per kind of Job, with the early and the
    never-reflected counts (the JSON's ``status_delay_s`` and ``status_delay_server_clock_s``)."""
    return {
        "all": distribution([d.seconds for d in delays]),
        **{
            kind: distribution([d.seconds for d in delays if d.kind == kind])
            for kind in ("generate", "judge", "aggregate")
        },
        "early": sum(1 for d in delays if d.early),
        "never_reflected": never_reflected,
    }


def peak_rate(samples: Sequence[tuple[float, float]], span: float) -> float | None:
    """The highest rate of a cumulative counter over any stretch of at least ``span`` seconds
    between two samples ``(time, value)`` (e.g. CPU-seconds → cores); None with too few samples."""
    ordered = sorted(samples)
    best: float | None = None
    j = 0
    for i in range(len(ordered)):
        j = max(j, i + 1)
        while j < len(ordered) and ordered[j][0] - ordered[i][0] < span:
            j += 1
        if j >= len(ordered):
            break
        rate = (ordered[j][1] - ordered[i][1]) / (ordered[j][0] - ordered[i][0])
        best = rate if best is None else max(best, rate)
    return best


def ratio(new: float | None, old: float | None) -> float | None:
    """``new / old`` (how many times the new design's figure is the old one's); None without both."""
    if new is None or old is None or old == 0:
        return None
    return new / old


# ---------------------------------------------------------------------------- EvalRun size

#: kopf's diff-base annotation (``KUBEJURY_STATUS_FORMAT=full`` writes it; the lean operator not)
DIFFBASE_ANNOTATION = "kubejury.io/last-handled-configuration"
SIZE_PARTS = (
    "total",
    "without_managed_fields",
    "managed_fields",
    "diffbase_annotation",
    "status",
    "placement",
)


def _compact(value: Any) -> int:
    return len(orjson.dumps(value))


def evalrun_bytes(obj: Mapping[str, Any]) -> dict[str, int]:
    """An EvalRun's size in bytes as compact JSON (as the API server sends it): whole, without
    ``metadata.managedFields``, the managedFields alone, kopf's diff-base annotation, the status
    and its placement."""
    meta = obj.get("metadata") or {}
    managed = meta.get("managedFields")
    lean = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    status = obj.get("status") or {}
    annotation = (meta.get("annotations") or {}).get(DIFFBASE_ANNOTATION)
    return {
        "total": _compact(obj),
        "without_managed_fields": _compact(lean),
        "managed_fields": _compact(managed) if managed else 0,
        "diffbase_annotation": len(str(annotation).encode()) if annotation is not None else 0,
        "status": _compact(status),
        "placement": _compact(status.get("placement")) if status.get("placement") else 0,
    }


@dataclass
class SizeTally:
    """The sizes of every EvalRun version a watch saw: the mean and the largest of each part
    (:func:`evalrun_bytes`), and the managedFields entries of the largest."""

    count: int = 0
    sums: dict[str, int] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)
    managers: list[str] = field(default_factory=list)

    def add(self, obj: Mapping[str, Any]) -> None:
        sizes = evalrun_bytes(obj)
        self.count += 1
        for part, value in sizes.items():
            self.sums[part] = self.sums.get(part, 0) + value
        if sizes["total"] >= self.largest.get("total", 0):
            self.largest = sizes
            self.managers = sorted(
                f"{e.get('manager')}/{e.get('operation')}/{e.get('subresource') or '-'}"
                for e in (obj.get("metadata") or {}).get("managedFields") or []
                if isinstance(e, Mapping)
            )

    def to_json(self) -> dict[str, Any]:
        mean = {
            part: round(self.sums.get(part, 0) / self.count) if self.count else None for part in SIZE_PARTS
        }
        return {
            "versions_seen": self.count,
            "mean": mean,
            "largest": dict(self.largest),
            "managers": self.managers,
        }


def per_request(cpu_s: float | None, requests: float | int | None) -> float | None:
    """CPU-seconds per request (e.g. the API server's per status patch); None without requests."""
    if cpu_s is None or not requests:
        return None
    return round(float(cpu_s) / float(requests), 4)


# ------------------------------------------------------------------------- status writes by cause


def _leaf_paths(old: Any, new: Any, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The paths (object keys; list items as ``[]``) whose values differ between two statuses."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        paths: list[tuple[str, ...]] = []
        for key in sorted(set(old) | set(new)):
            paths += _leaf_paths(old.get(key), new.get(key), (*prefix, str(key)))
        return paths
    return [] if old == new else [prefix]


def _cause(path: tuple[str, ...]) -> str:
    """A changed path named as a cause: the server or stage name replaced by ``*``."""
    if path[:1] in (("stages",), ("placement",)) and len(path) > 2:
        return f"{path[0]}.*.{'.'.join(path[2:])}"
    if path[:2] == ("gpu", "servers") and len(path) > 3:
        return f"gpu.servers.*.{'.'.join(path[3:])}"
    return ".".join(path[:2])


def _conditions_cause(old: Any, new: Any) -> str | None:
    def facts(value: Any, message: bool) -> list[tuple[Any, ...]]:
        return [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message") if message else None)
            for c in value or []
            if isinstance(c, Mapping)
        ]

    if facts(old, False) != facts(new, False):
        return "conditions (status or reason)"
    if facts(old, True) != facts(new, True):
        return "conditions (message only)"
    return None


def write_causes(old: Mapping[str, Any], new: Mapping[str, Any]) -> set[str]:
    """What changed from one stored status to the next, as causes (:func:`_cause`); empty when
    nothing did (a write of the spec or metadata)."""
    rest_old = {k: v for k, v in old.items() if k != "conditions"}
    rest_new = {k: v for k, v in new.items() if k != "conditions"}
    causes = {_cause(p) for p in _leaf_paths(rest_old, rest_new, ())}
    conditions = _conditions_cause(old.get("conditions"), new.get("conditions"))
    return causes | ({conditions} if conditions else set())


#: Causes that are counters, not decisions: what the operator may write late (its
#: ``status.significant_part`` says which; this is the benchmark's own reading of a change)
COUNTER_CAUSES = (
    "progress",
    "conditions (message only)",
    "gpu.usedGpuSeconds",
    "gpu.servers.*.usedGpuSeconds",
    "gpu.servers.*.inUseSince",
)
COUNTER_CAUSE_PREFIXES = ("stages.*.done", "stages.*.total", "stages.*.judges.", "stages.*.models.")


def is_counter(cause: str) -> bool:
    """Whether a cause (:func:`write_causes`) is a counter rather than a decision."""
    return cause in COUNTER_CAUSES or cause.startswith(COUNTER_CAUSE_PREFIXES)


@dataclass
class WriteTally:
    """Every status change a watch saw, per run: how many, and which causes (:func:`write_causes`)
    each carried — a write carrying several counts once under each."""

    last: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    writes: dict[tuple[str, str], int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)
    alone: dict[str, int] = field(default_factory=dict)  # writes that carried only this cause
    counters_only: int = 0  # writes whose every cause is a counter (:func:`is_counter`)

    def add(self, key: tuple[str, str], status: Mapping[str, Any]) -> None:
        old = self.last.get(key)
        self.last[key] = dict(status)
        if old is None:
            return
        causes = write_causes(old, status)
        if not causes:
            return
        self.writes[key] = self.writes.get(key, 0) + 1
        for cause in causes:
            self.causes[cause] = self.causes.get(cause, 0) + 1
        self.counters_only += all(is_counter(c) for c in causes)
        if len(causes) == 1:
            (only,) = causes
            self.alone[only] = self.alone.get(only, 0) + 1

    def forget(self, key: tuple[str, str]) -> None:
        self.last.pop(key, None)

    def to_json(self) -> dict[str, Any]:
        runs = len(self.writes)
        per_run = (lambda n: round(n / runs, 2)) if runs else (lambda n: None)
        return {
            "runs": runs,
            "writes_per_run": per_run(sum(self.writes.values())),
            "counters_only_per_run": per_run(self.counters_only),
            "cause_per_run": {c: per_run(n) for c, n in sorted(self.causes.items(), key=lambda kv: -kv[1])},
            "only_cause_per_run": {
                c: per_run(n) for c, n in sorted(self.alone.items(), key=lambda kv: -kv[1])
            },
        }


# ----------------------------------------------------------------- the operator's own histograms

#: The operator's histograms read at the end of a round's active window, and the label each is by
OPERATOR_HISTOGRAMS = (
    ("kubejury_reconcile_duration_seconds", "handler"),
    ("kubejury_api_queue_seconds", "lane"),
    ("kubejury_api_request_seconds", "method"),
)


def _bucket_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """The upper bound of the bucket holding quantile ``q`` (cumulative ``(le, count)`` pairs)."""
    ordered = sorted(buckets)
    total = ordered[-1][1] if ordered else 0.0
    if not total:
        return None
    for upper, count in ordered:
        if count >= q * total:
            return upper
    return ordered[-1][0]


def operator_histograms(text: str) -> dict[str, dict[str, dict[str, float | None]]]:
    """Count, mean and bucket-bound p50/p99 of each :data:`OPERATOR_HISTOGRAMS` per label value,
    from the operator's ``/metrics`` text (a p99 of ``inf`` is beyond the last bucket)."""
    found: dict[str, dict[str, dict[str, float | None]]] = {}
    wanted = dict(OPERATOR_HISTOGRAMS)
    for family in text_string_to_metric_families(text):
        label = wanted.get(family.name)
        if label is None:
            continue
        parts: dict[str, dict[str, Any]] = {}
        for sample in family.samples:
            part = parts.setdefault(sample.labels.get(label, ""), {"buckets": []})
            if sample.name.endswith("_bucket"):
                part["buckets"].append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                part["count"] = sample.value
            elif sample.name.endswith("_sum"):
                part["sum"] = sample.value
        found[family.name] = {
            value: {
                "count": part.get("count", 0.0),
                "mean": round(part["sum"] / part["count"], 4) if part.get("count") else None,
                "p50": _bucket_quantile(part["buckets"], 0.5),
                "p99": _bucket_quantile(part["buckets"], 0.99),
            }
            for value, part in sorted(parts.items())
        }
    return found


# ------------------------------------------------------------- the API server's time per request

#: Long-running verbs: their duration is how long a client stayed connected, not work
LONG_RUNNING_VERBS = frozenset({"WATCH", "CONNECT"})


def _request_seconds(text: str) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(verb, resource, subresource) → (seconds, requests) of ``apiserver_request_duration_seconds``."""
    found: dict[tuple[str, str, str], tuple[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request_duration_seconds":
            continue
        for sample in family.samples:
            if not sample.name.endswith(("_sum", "_count")):
                continue
            labels = sample.labels
            key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
            seconds, count = found.get(key, (0.0, 0.0))
            if sample.name.endswith("_sum"):
                seconds += sample.value
            else:
                count += sample.value
            found[key] = (seconds, count)
    return found


def apiserver_request_seconds(before: str, after: str, top: int = 12) -> list[dict[str, Any]]:
    """The API server's own time per request between two reads of its ``/metrics`` (the active
    window): the ``top`` (verb, resource) pairs by total seconds, with requests and mean seconds.
    Watches and other long-running requests are left out."""
    start, end = _request_seconds(before), _request_seconds(after)
    rows: list[dict[str, Any]] = []
    for key, (seconds, count) in end.items():
        was_seconds, was_count = start.get(key, (0.0, 0.0))
        requests = count - was_count
        if key[0] in LONG_RUNNING_VERBS or requests <= 0:
            continue
        total = seconds - was_seconds
        rows.append(
            {
                "verb": key[0],
                "resource": key[1] + (f"/{key[2]}" if key[2] else ""),
                "requests": int(requests),
                "seconds": round(total, 1),
                "mean_s": round(total / requests, 4),
            }
        )
    return sorted(rows, key=lambda row: -float(row["seconds"]))[:top]
