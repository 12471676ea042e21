"""Start, wait for and always stop local ``llama-cpp-python`` servers (local mode only).

``kubejury run`` serves every ``runtime: llamacpp`` model and judge on this machine. Entries that
would run the same server (same GGUF file, chat format, context size and extra arguments — e.g. a
model and the judge that is the same embedded model) share one process; the machine's cores are
split between the processes (:func:`threads_per_server`). Each server listens on a free
127.0.0.1 port and is stopped when the ``with`` block ends, on success, on error and on Ctrl-C; on
Linux the child also gets SIGKILL if this process is killed outright (``PR_SET_PDEATHSIG``), so a
killed run never leaves a server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kubejury.config.embedded_models import embedded_model
from kubejury.config.spec import ModelSpec
from kubejury.errors import ConfigError
from kubejury.local.embedded import cache_dir, embedded_model_path
from kubejury.runtimes import runtime_of

DEFAULT_STARTUP_TIMEOUT_S = 240.0
_LOG_TAIL_CHARS = 2000


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Threads of a lone server: ``$KUBEJURY_LLAMA_THREADS``, else half the CPUs this process may use (1–8).

    Half, because llama.cpp's threads spin while they wait for each other: on a 2-core machine
    that is also doing other work, 2 threads measured 1.9 tokens/s against 11.3 for 1 thread.
    """
    return threads_per_server(1)


def threads_per_server(servers: int, cpus: int | None = None) -> int:
    """Threads for each of ``servers`` servers running side by side (``$KUBEJURY_LLAMA_THREADS`` wins).

    The usable CPUs are split between the servers, and a lone server still gets only half of them
    (see :func:`default_threads`): two servers on 2 cores get one thread each, so both models
    answer at the same time instead of taking turns on the cores. Between 1 and 8 each.
    """
    env = os.environ.get("KUBEJURY_LLAMA_THREADS")
    if env:
        return max(1, int(env))
    available = _usable_cpus() if cpus is None else cpus
    return max(1, min(available // max(2, servers), 8))


def resolve_gguf(entry: ModelSpec) -> Path:
    """The local GGUF file a ``runtime: llamacpp`` entry serves."""
    if entry.gguf_path:
        path = Path(entry.gguf_path).expanduser()
    elif (embedded := embedded_model(entry.source)) is not None:
        return embedded_model_path(embedded)
    elif entry.source and entry.source.startswith("file://"):
        path = Path(entry.source[len("file://") :])
    else:
        raise ConfigError(
            f"model {entry.name!r}: local mode serves GGUF files only; set ggufPath to a local .gguf file "
            f"(source {entry.source!r} would need a download), or omit source for the embedded model"
        )
    if not path.is_file():
        raise ConfigError(f"model {entry.name!r}: GGUF file not found: {path}")
    return path


@dataclass(frozen=True)
class ServerPlan:
    """What one server process runs; entries with equal plans share the process."""

    model_path: Path
    chat_format: str | None
    n_ctx: int
    extra_args: tuple[str, ...] = ()
    alias: str = "local"

    def key(self) -> tuple[str, str | None, int, tuple[str, ...]]:
        return (str(self.model_path), self.chat_format, self.n_ctx, self.extra_args)


def plan_servers(
    entries: Sequence[ModelSpec], resolve: Callable[[ModelSpec], Path] = resolve_gguf
) -> tuple[list[ServerPlan], dict[str, int]]:
    """Distinct server plans for the ``runtime: llamacpp`` entries, and entry name → plan index."""
    plans: list[ServerPlan] = []
    index: dict[tuple[str, str | None, int, tuple[str, ...]], int] = {}
    of_entry: dict[str, int] = {}
    for entry in entries:
        if not runtime_of(entry.runtime).starts_in_local_mode:
            continue
        plan = ServerPlan(
            model_path=resolve(entry),
            chat_format=entry.chat_format,
            n_ctx=entry.max_model_len,
            extra_args=tuple(entry.extra_args),
            alias=entry.request_model,
        )
        key = plan.key()
        if key not in index:
            index[key] = len(plans)
            plans.append(plan)
        of_entry[entry.name] = index[key]
    return plans, of_entry


def server_command(plan: ServerPlan, port: int, *, threads: int, python: str = sys.executable) -> list[str]:
    """The server command line for a plan (``llama_cpp.server`` flags of llama-cpp-python 0.3.x)."""
    command = [
        python,
        "-m",
        # llama_cpp.server behind a shim that accepts OpenAI json_schema structured output.
        "kubejury.local.llama_entry",
        "--model",
        str(plan.model_path),
        "--model_alias",
        plan.alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(plan.n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        # Queue concurrent requests instead of aborting the one in progress.
        "--interrupt_requests",
        "False",
    ]
    if plan.chat_format:
        command += ["--chat_format", plan.chat_format]
    command += list(plan.extra_args)
    return command


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL the server when the process that started it dies (even by SIGKILL).

    SIGKILL, not SIGTERM: on SIGTERM uvicorn waits for the request in progress, and a rambling
    generation can take minutes. The server keeps no state worth a graceful exit.
    """
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class LlamaServer:
    """One ``llama-cpp-python`` server process on a loopback port."""

    plan: ServerPlan
    threads: int = field(default_factory=default_threads)
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    log_dir: Path | None = None
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL (``…/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Start the process and return once it answers ``GET /v1/models``."""
        log_dir = self.log_dir or cache_dir() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _attempt in range(3):  # a port picked free can be taken before the server binds it
            self.port = free_port()
            self.log_path = log_dir / f"llama-server-{self.plan.alias}-{self.port}.log"
            self._log = self.log_path.open("wb")
            self.process = subprocess.Popen(
                server_command(self.plan, self.port, threads=self.threads),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, and we stop the server in order
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            try:
                self._wait_ready()
                return
            except _PortTaken as exc:
                last_error = str(exc)
                self.stop()
        raise ConfigError(f"llama.cpp server could not bind a port: {last_error}")

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://127.0.0.1:{self.port}/v1/models"
        while True:
            code = self.process.poll()
            if code is not None:
                tail = self.log_tail()
                if "address already in use" in tail.lower():
                    raise _PortTaken(tail[-300:])
                self.stop()
                hint = ""
                if code in (-signal.SIGSEGV, 139):
                    hint = (
                        " (segmentation fault: the native llama.cpp build does not run on this CPU; "
                        "install the portable wheel: make llama-wheel)"
                    )
                raise ConfigError(
                    f"llama.cpp server for {self.plan.model_path.name} exited with code {code}{hint}; "
                    f"log {self.log_path}:\n{tail}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ConfigError(
                    f"llama.cpp server for {self.plan.model_path.name} not ready after "
                    f"{self.startup_timeout_s:.0f}s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def log_tail(self) -> str:
        if self._log is not None:
            with contextlib.suppress(ValueError):
                self._log.flush()
        if self.log_path is None or not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()[-_LOG_TAIL_CHARS:]
        return data.decode("utf-8", "replace")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate (then, after ``timeout_s``, kill) the process; safe to call twice."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait(timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _PortTaken(Exception):
    pass


class ServedUrls(dict[str, str]):
    """Entry name → base URL of the servers :func:`local_servers` started, and :meth:`release` to
    stop early the servers no entry needs any more (a budgeted run's stopped models)."""

    def __init__(self, servers: Sequence[LlamaServer], of_entry: Mapping[str, int]) -> None:
        super().__init__({name: servers[i].base_url for name, i in of_entry.items()})
        self._servers = servers
        self._of_entry = dict(of_entry)

    def release(self, needed: Collection[str]) -> list[ServerPlan]:
        """Stop every running server none of whose entries is in ``needed``; the plans stopped."""
        keep = {i for name, i in self._of_entry.items() if name in needed}
        stopped = []
        for i, server in enumerate(self._servers):
            if i not in keep and server.process is not None:
                server.stop()
                stopped.append(server.plan)
        return stopped


@contextlib.contextmanager
def local_servers(
    entries: Sequence[ModelSpec],
    *,
    on_start: Callable[[ServerPlan, str], None] | None = None,
    log_dir: Path | None = None,
    threads: int | None = None,
) -> Iterator[ServedUrls]:
    """Serve every ``runtime: llamacpp`` entry; yields entry name → base URL (``http://127.0.0.1:P/v1``)
    as :class:`ServedUrls`, whose ``release`` stops a server no entry needs any more.

    Servers start one after another (loading is CPU-bound) and all stop when the block exits, however
    it exits. Each gets ``threads`` threads, by default its share of the cores
    (:func:`threads_per_server`). Entries with other runtimes are not in the mapping.
    """
    plans, of_entry = plan_servers(entries)
    servers: list[LlamaServer] = []
    each = threads or threads_per_server(len(plans))
    try:
        for plan in plans:
            server = LlamaServer(plan, log_dir=log_dir, threads=each)
            servers.append(server)
            server.start()
            if on_start is not None:
                on_start(plan, server.base_url)
        yield ServedUrls(servers, of_entry)
    finally:
        for server in reversed(servers):
            server.stop()
