"""Progress as plain lines, for output that is not a terminal (CI logs, files, ``kubectl logs``).

Rich bars redraw one screen region, which a log file or a Job's log cannot show: there they either
print nothing for minutes or a wall of control characters. When stdout is not a terminal the
commands use :class:`LineProgressView` instead: every ``interval`` seconds (10 by default,
``$KUBEJURY_PROGRESS_INTERVAL`` or the constructor for tests) it prints one line per active stage —
done/total, rate, errors, ETA — and one more line when a stage ends. :class:`Heartbeat` does the
same for work without counters (aggregation). :func:`progress_view` picks bars or lines.

Lines are printed from a small background thread, so they keep coming while the event loop waits
on a slow model; the stages only hand over their latest record (:meth:`LineProgressView.update`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from kubejury.stages.progress import RichProgressView

DEFAULT_INTERVAL_S = 10.0
INTERVAL_ENV = "KUBEJURY_PROGRESS_INTERVAL"


def default_interval() -> float:
    """Seconds between progress lines: ``$KUBEJURY_PROGRESS_INTERVAL``, else 10."""
    raw = os.environ.get(INTERVAL_ENV)
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def progress_line(record: dict[str, Any], elapsed_s: float | None = None) -> str:
    """One line for one progress record (see :class:`kubejury.records.progress.ProgressRecord`)."""
    total = int(record.get("total") or 0)
    done = int(record.get("done") or 0)
    rate = float(record.get("rate_per_s") or 0.0)
    errors = int(record.get("errors") or 0)
    unparsed = int(record.get("parse_failures") or 0)
    state = str(record.get("state") or "running")
    percent = f" ({100 * done / total:.0f}%)" if total else ""
    parts = [
        f"{record.get('stage')} {record.get('series')}/{record.get('name')}: {done}/{total}{percent}",
        f"{rate:.2f}/s",
        f"{errors} errors",
    ]
    if unparsed:
        parts.append(f"{unparsed} unparsed")
    if state == "running":
        remaining = total - done
        if remaining <= 0:
            parts.append("ETA 0s")
        elif rate > 0:
            parts.append(f"ETA {format_duration(remaining / rate)}")
        else:
            parts.append("ETA unknown")
    else:
        ended = state if elapsed_s is None else f"{state} after {format_duration(elapsed_s)}"
        parts.append(ended + (f": {record['message']}" if record.get("message") else ""))
    return "progress " + ", ".join(parts)


class _Ticker:
    """Calls ``tick`` every ``interval`` seconds on a daemon thread until stopped."""

    def __init__(self, interval: float, tick: Callable[[], None]) -> None:
        self.interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubejury-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._tick()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


class LineProgressView:
    """Plain progress lines: each active stage every ``interval`` seconds, and each stage's end."""

    def __init__(self, *, interval: float | None = None, stream: TextIO | None = None) -> None:
        self.interval = default_interval() if interval is None else interval
        self._stream = stream
        self._latest: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._first_seen: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()
        self._ticker = _Ticker(self.interval, self.print_active)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def __enter__(self) -> LineProgressView:
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticker.stop()

    def update(self, record: dict[str, Any]) -> None:
        key = (str(record["stage"]), str(record["series"]), str(record["name"]))
        now = time.monotonic()
        with self._lock:
            previous = self._latest.get(key)
            self._latest[key] = record
            self._first_seen.setdefault(key, now)
            started = self._first_seen[key]
        ended = record.get("state") not in (None, "running")
        if ended and (previous is None or previous.get("state") in (None, "running")):
            self._print(progress_line(record, elapsed_s=now - started))

    def print_active(self) -> None:
        """One line per stage still running (what the ticker prints every interval)."""
        with self._lock:
            active = [r for r in self._latest.values() if r.get("state") in (None, "running")]
        for record in active:
            self._print(progress_line(record))


class Heartbeat:
    """``<label>: running for N s`` every ``interval`` seconds, for work without counters."""

    def __init__(self, label: str, *, interval: float | None = None, stream: TextIO | None = None) -> None:
        self.label = label
        self.interval = default_interval() if interval is None else interval
        self._stream = stream
        self._started = time.monotonic()
        self._ticker = _Ticker(self.interval, self._beat)

    def _beat(self) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        elapsed = format_duration(time.monotonic() - self._started)
        print(f"progress {self.label}: running for {elapsed}", file=stream, flush=True)

    def __enter__(self) -> Heartbeat:
        self._started = time.monotonic()
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticker.stop()


def progress_view(
    *, bars: bool | None = None, stream: TextIO | None = None, interval: float | None = None
) -> RichProgressView | LineProgressView:
    """Rich bars on a terminal, plain lines otherwise; ``bars`` True/False forces one kind.

    ``stream`` is what decides (default stdout), and where lines go.
    """
    out = stream if stream is not None else sys.stdout
    if bars is None:
        isatty = getattr(out, "isatty", None)
        bars = bool(isatty and isatty())
    if bars:
        return RichProgressView()
    return LineProgressView(interval=interval, stream=stream)
