"""GPU time per model server of a run: held (Ready) and used (its Jobs running), one typed record.

Why this module exists: the operator measures GPU time from what it observes (server Pods Ready,
Jobs running) and keeps it in ``status.gpu``; its metrics export it; the aggregation Job receives it
and the report prints GPU-hours, quality per GPU-hour and the share of GPU time held idle. Three
processes read the same record, so it has one definition here and one JSON form (the status form,
camelCase), written by :meth:`GpuUsage.to_json` and read by :meth:`GpuUsage.from_json`.

Definitions (docs/operator.md, "GPU accounting"):

* **held** — GPU-seconds a model server was Ready: Ready time × the GPUs its Pod requests. Bring-up
  (image pull, weight loading) before Ready is not held time by this definition.
* **used** — GPU-seconds during which at least one generation or judging Job that sends its
  requests to the server was running (from the Job's ``startTime`` to its completion), × GPUs.
  Two Jobs on one server at once (a model's series, or a shared model-and-judge server) count once.
* **idle share** — 1 − used / held over every server of the run.
* **bring-up held** — GPU-seconds a server's Pod held its GPUs before it was Ready (creation →
  Ready × GPUs, summed over its bring-ups): weight download and loading. Apart from held; small when
  the weights were prefetched into the model cache before the server was created.

An interval still open (server Ready now, a Job running now) is kept as its start
(``readySince``, ``inUseSince``) instead of a number that grows, so the stored status changes only
when something starts or stops; readers add ``now − start`` (:meth:`ServerGpuUsage.held_at`).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubejury.records.timestamps import format_time, parse_time, seconds_between

SECONDS_PER_HOUR = 3600.0
# The aggregation Job's environment variable holding the run's GpuUsage JSON (set by the operator).
GPU_USAGE_ENV = "KUBEJURY_GPU_USAGE"


class GpuUsageError(ValueError):
    """A GPU usage document that is not one (names the field)."""


def from_environment(environ: Mapping[str, str]) -> GpuUsage | None:
    """The usage the operator handed the aggregation Job (:data:`GPU_USAGE_ENV`); ``None`` when
    absent (local runs, runs without in-cluster servers). A malformed value is an error naming
    the variable, not a silently missing section."""
    import json

    text = environ.get(GPU_USAGE_ENV, "").strip()
    if not text:
        return None
    try:
        return GpuUsage.from_json(json.loads(text))
    except (ValueError, GpuUsageError) as exc:
        raise GpuUsageError(f"{GPU_USAGE_ENV}: {exc}") from exc


@dataclass(frozen=True)
class ServerGpuUsage:
    """One model server's GPU time (a judge sharing a model's server is that one server)."""

    name: str  # the model's name (or the judge's, for a judge-only server)
    role: str  # "model", "judge" or "model+judge"
    gpus: int  # GPUs per replica (tensor parallel size); 0 on CPU
    gpu_product: str | None = None
    held_gpu_seconds: float = 0.0  # closed Ready intervals
    used_gpu_seconds: float = 0.0  # closed in-use intervals
    ready_since: str | None = None  # open Ready interval
    in_use_since: str | None = None  # open in-use interval
    held_until: str | None = None  # when the last held interval was closed (never counted twice)
    bring_up_seconds: float = 0.0  # longest Pod creation → Ready seen (not held time by definition)
    bring_up_gpu_seconds: float = 0.0  # bring-up held: Pod creation → Ready × GPUs, every bring-up

    def held_at(self, now: str) -> float:
        """GPU-seconds held up to ``now`` (the open interval included)."""
        return self.held_gpu_seconds + self.gpus * seconds_between(self.ready_since, now)

    def used_at(self, now: str) -> float:
        """GPU-seconds used up to ``now``; never more than held."""
        used = self.used_gpu_seconds + self.gpus * seconds_between(self.in_use_since, now)
        return min(used, self.held_at(now)) if self.gpus else used

    def to_json(self) -> dict[str, Any]:
        # A closed interval is written as null, not left out: the status is written with a merge
        # patch, which keeps every key a patch leaves out (the interval would stay open).
        return {
            "role": self.role,
            "gpus": self.gpus,
            "gpuProduct": self.gpu_product,
            "heldGpuSeconds": round(self.held_gpu_seconds, 1),
            "usedGpuSeconds": round(self.used_gpu_seconds, 1),
            "readySince": self.ready_since,
            "inUseSince": self.in_use_since,
            "heldUntil": self.held_until,
            "bringUpSeconds": round(self.bring_up_seconds, 1),
            "bringUpGpuSeconds": round(self.bring_up_gpu_seconds, 1),
        }

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> ServerGpuUsage:
        where = f"gpu.servers.{name}"
        if not isinstance(data, Mapping):
            raise GpuUsageError(f"{where}: expected an object, got {type(data).__name__}")

        def number(key: str) -> float:
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise GpuUsageError(f"{where}.{key}: expected a number ≥ 0, got {value!r}")
            return float(value)

        def text(key: str) -> str | None:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise GpuUsageError(f"{where}.{key}: expected a string, got {value!r}")
            return value or None

        for key in ("readySince", "inUseSince", "heldUntil"):
            try:
                parse_time(text(key))
            except ValueError as exc:
                raise GpuUsageError(f"{where}.{key}: not a timestamp: {data.get(key)!r}") from exc
        return cls(
            name=name,
            role=text("role") or "model",
            gpus=int(number("gpus")),
            gpu_product=text("gpuProduct"),
            held_gpu_seconds=number("heldGpuSeconds"),
            used_gpu_seconds=number("usedGpuSeconds"),
            ready_since=text("readySince"),
            in_use_since=text("inUseSince"),
            held_until=text("heldUntil"),
            bring_up_seconds=number("bringUpSeconds"),
            bring_up_gpu_seconds=number("bringUpGpuSeconds"),
        )


@dataclass(frozen=True)
class GpuUsage:
    """Every model server of one run, in the order of the run's spec."""

    servers: tuple[ServerGpuUsage, ...] = ()

    def by_name(self) -> dict[str, ServerGpuUsage]:
        return {s.name: s for s in self.servers}

    def held_at(self, now: str) -> float:
        return sum(s.held_at(now) for s in self.servers)

    def used_at(self, now: str) -> float:
        return sum(s.used_at(now) for s in self.servers)

    def idle_share_at(self, now: str) -> float | None:
        """Share of held GPU time during which no Job used the server; ``None`` when nothing was held."""
        held = self.held_at(now)
        return None if held <= 0 else max(0.0, 1.0 - self.used_at(now) / held)

    @property
    def lead_seconds(self) -> float:
        """The longest bring-up seen in the run: how early a server must start to be Ready in time."""
        return max((s.bring_up_seconds for s in self.servers), default=0.0)

    @property
    def open(self) -> bool:
        """Some interval is still running (a server Ready or a Job running)."""
        return any(s.ready_since or s.in_use_since for s in self.servers)

    def to_json(self) -> dict[str, Any]:
        """The ``status.gpu`` form; totals only of closed intervals (readers add open ones)."""
        held = sum(s.held_gpu_seconds for s in self.servers)
        used = sum(s.used_gpu_seconds for s in self.servers)
        idle = None if self.open or held <= 0 else round(max(0.0, 1.0 - min(used, held) / held), 4)
        return {
            "servers": {s.name: s.to_json() for s in self.servers},
            "heldGpuSeconds": round(held, 1),
            "usedGpuSeconds": round(used, 1),
            "bringUpGpuSeconds": round(sum(s.bring_up_gpu_seconds for s in self.servers), 1),
            "idleShare": idle,  # null while a server is up or a Job runs
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> GpuUsage:
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise GpuUsageError(f"gpu: expected an object, got {type(data).__name__}")
        servers = data.get("servers") or {}
        if not isinstance(servers, Mapping):
            raise GpuUsageError("gpu.servers: expected an object of server name → usage")
        return cls(tuple(ServerGpuUsage.from_json(str(n), v) for n, v in servers.items()))


@dataclass(frozen=True)
class ModelCost:
    """A row of the report's GPU cost table."""

    name: str
    role: str
    gpus: int
    gpu_product: str | None
    held_gpu_hours: float
    used_gpu_hours: float
    weighted: float | None  # W in the primary series (models only)

    @property
    def weighted_per_gpu_hour(self) -> float | None:
        """Quality per GPU-hour: W divided by the GPU-hours the model's server was held."""
        if self.weighted is None or self.held_gpu_hours <= 0:
            return None
        return self.weighted / self.held_gpu_hours


def cost_rows(usage: GpuUsage, now: str, weighted: Mapping[str, float | None]) -> list[ModelCost]:
    """GPU-hours per server with W per GPU-hour for evaluated models (``weighted``: W by model)."""
    return [
        ModelCost(
            name=s.name,
            role=s.role,
            gpus=s.gpus,
            gpu_product=s.gpu_product,
            held_gpu_hours=s.held_at(now) / SECONDS_PER_HOUR,
            used_gpu_hours=s.used_at(now) / SECONDS_PER_HOUR,
            weighted=weighted.get(s.name) if "model" in s.role else None,
        )
        for s in usage.servers
    ]


def report_section(
    usage: GpuUsage, now: str, weighted: Mapping[str, float | None], source: str
) -> dict[str, Any]:
    """report.json's ``gpu_usage``: per server GPU-hours and W per GPU-hour, the run's idle share."""
    rows = cost_rows(usage, now, weighted)
    held = sum(r.held_gpu_hours for r in rows)
    used = sum(r.used_gpu_hours for r in rows)
    return {
        "source": source,
        "as_of": now,
        "held_gpu_hours": held,
        "used_gpu_hours": used,
        "idle_share": None if held <= 0 else max(0.0, 1.0 - used / held),
        "servers": {
            r.name: {
                "role": r.role,
                "gpus": r.gpus,
                "gpu_product": r.gpu_product,
                "held_gpu_hours": r.held_gpu_hours,
                "used_gpu_hours": r.used_gpu_hours,
                "weighted": r.weighted,
                "weighted_per_gpu_hour": r.weighted_per_gpu_hour,
            }
            for r in rows
        },
    }


def merge_intervals(intervals: Sequence[tuple[str, str | None]], now: str) -> tuple[float, str | None]:
    """(seconds covered by the *finished* part of the union, start of the part still open).

    ``intervals`` are (start, end or ``None`` while running); a running interval reaches ``now``.
    Overlapping intervals count once. The open part is the union's segment that contains a running
    interval; everything before it is finished and will never change.
    """
    end_of_time = parse_time(now)
    assert end_of_time is not None
    spans: list[tuple[datetime.datetime, datetime.datetime, bool]] = []
    for start, end in intervals:
        begin = parse_time(start)
        if begin is None:
            continue
        finish = parse_time(end) if end else None
        spans.append((begin, finish or max(begin, end_of_time), finish is None))
    spans.sort(key=lambda s: s[0])
    closed = 0.0
    segments: list[tuple[datetime.datetime, datetime.datetime, bool]] = []
    for begin, finish, running in spans:
        if segments and begin <= segments[-1][1]:
            first, last, was_running = segments[-1]
            segments[-1] = (first, max(last, finish), was_running or running)
        else:
            segments.append((begin, finish, running))
    open_start: str | None = None
    for begin, finish, running in segments:
        if running:
            open_start = format_time(begin) if open_start is None else open_start
        else:
            closed += (finish - begin).total_seconds()
    return closed, open_start
