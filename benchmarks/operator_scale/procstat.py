"""CPU time and peak memory of the measured processes, from /proc.

Why this module exists: the operator's CPU-seconds and peak RSS, and etcd's and the API server's
CPU, are read from the kernel's own accounting rather than from a sampler's guesses:
``utime + stime`` of ``/proc/<pid>/stat`` (fields 14 and 15, clock ticks; plus ``cutime`` and
``cstime`` of reaped children) and ``VmHWM`` of ``/proc/<pid>/status`` (the peak resident set).
A "component" is a process and the processes of its session (the operator runs in a session of
its own, started by ``tests/e2e/operator_up.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    cpu_s: float  # user + system seconds so far (the session's live processes and reaped children)
    peak_rss_kib: int  # the largest VmHWM among them
    pids: int


def parse_stat(text: str) -> tuple[int, float]:
    """(session id, CPU seconds incl. reaped children) of one ``/proc/<pid>/stat`` line."""
    fields = text.rsplit(")", 1)[1].split()
    # after the command: state(0) ppid(1) pgrp(2) session(3) … utime(11) stime(12) cutime(13) cstime(14)
    session = int(fields[3])
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return session, ticks / TICKS


def parse_hwm_kib(text: str) -> int:
    """``VmHWM`` (KiB) of one ``/proc/<pid>/status``; 0 when absent (a kernel thread, a zombie)."""
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def sample(pid: int, proc: Path = Path("/proc")) -> Sample | None:
    """CPU and peak RSS of ``pid`` and every process in its session (None when it is gone)."""
    stat = _read(proc / str(pid) / "stat")
    if stat is None:
        return None
    session, _ = parse_stat(stat)
    cpu = 0.0
    peak = 0
    count = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        text = _read(entry / "stat")
        if text is None:
            continue
        their_session, seconds = parse_stat(text)
        if int(entry.name) != pid and (their_session != session or session == 0):
            continue
        cpu += seconds
        peak = max(peak, parse_hwm_kib(_read(entry / "status") or ""))
        count += 1
    return Sample(cpu, peak, count)


def pid_file(path: Path) -> int | None:
    """The pid in a devcluster pid file (first line), if any."""
    text = _read(path)
    try:
        return int(text.split("\n", 1)[0]) if text else None
    except ValueError:
        return None
