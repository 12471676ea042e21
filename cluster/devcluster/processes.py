"""The dev cluster's long-running processes: started once, found again by pid file, stopped for sure.

Why a module of its own: the control plane (:mod:`devcluster.cluster`) and a real node
(:mod:`devcluster.realnode`) both run daemons that must outlive the Python process that started
them (``make cluster-up`` returns) and be stopped later by another (``make cluster-down``). Each
daemon gets ``<state>/pids/<name>.pid`` (pid, kernel start time, executable) and
``<state>/logs/<name>.log``. Stopping kills only a process whose pid file still matches its start
time and executable, never by name, so a reused pid is never taken for ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

STOP_TIMEOUT = 20.0


class ClusterError(RuntimeError):
    """A component failed to start or to become ready; the message names it and quotes its log."""


#: Processes this Python process started: their Popen is the authority on whether they still run,
#: and stopping them also reaps them (no zombies in a long pytest session).
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def pid_file(state: Path, name: str) -> Path:
    return state / "pids" / f"{name}.pid"


def log_file(state: Path, name: str) -> Path:
    return state / "logs" / f"{name}.log"


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/pid/stat), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def running_pid(state: Path, name: str) -> int | None:
    """The pid of daemon ``name`` if the pid file names a live process we started, else None.

    A child of this process is asked directly; otherwise (``make cluster-down`` in a new process) the
    pid must still have the start time and executable the pid file recorded.
    """
    path = pid_file(state, name)
    try:
        pid_text, start, binary = path.read_text().split("\n")[:3]
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    child = CHILDREN.get(pid)
    if child is not None:
        return pid if child.poll() is None else None
    if start_time(pid) != start:
        return None
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None
    return pid if argv0 == binary else None


def launch(
    state: Path,
    name: str,
    argv: Sequence[str],
    *,
    executable: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start ``argv`` in its own session with its log and pid file; its pid.

    ``executable`` is what the process runs once started, when ``argv`` begins with a wrapper that
    execs it (``nsenter --net=... -- kubelet``): the pid file records it, so the process is found
    again by what it became. ``env`` is added to this process's environment.
    """
    for sub in ("logs", "pids"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    with log_file(state, name).open("w") as log:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # our own process group: a Ctrl-C of the caller does not reach it
            cwd=state,
            env={**os.environ, **(env or {})},
        )
    CHILDREN[process.pid] = process
    binary = executable or Path(argv[0])
    pid_file(state, name).write_text(f"{process.pid}\n{start_time(process.pid) or ''}\n{binary}\n")
    return process.pid


def stop(state: Path, name: str, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM daemon ``name``, SIGKILL it after ``timeout``; whether it was running."""
    pid = running_pid(state, name)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while running_pid(state, name) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if running_pid(state, name) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        child = CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
    pid_file(state, name).unlink(missing_ok=True)
    return pid is not None


def wait(what: str, ready: Callable[[], bool], state: Path, names: Sequence[str], timeout: float) -> None:
    """Poll ``ready`` until true; fail early, quoting its log, if one of the daemons ``names`` has
    exited, and on timeout quote all their logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        for name in names:
            if running_pid(state, name) is None:
                log = log_file(state, name)
                raise ClusterError(
                    f"{name} exited while waiting for {what}; last lines of {log}:\n{tail(log)}"
                )
        time.sleep(0.5)
    logs = "\n".join(f"--- {log_file(state, n)}:\n{tail(log_file(state, n))}" for n in names)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")


def built(script: Path, override_env: str) -> Path:
    """The directory a build script prints on its last stdout line, building it first if needed;
    ``$override_env`` names a directory to use instead (one home for kube, node and Kueue builds)."""
    env = os.environ.get(override_env)
    if env:
        return Path(env)
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"{script} failed (exit {result.returncode}); see its output above")
    return Path(result.stdout.strip().splitlines()[-1])
