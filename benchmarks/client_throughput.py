"""Side-by-side throughput of kubejury's generation stage, lm-eval and inspect-ai on one stub server.

Why: the pipeline issue requires kubejury's *real* stage code path (request building, the client
with its retry bookkeeping, response parsing, records, shard writes to a ``file://`` storage in a
temp dir, progress records) to reach given throughput and CPU figures, measured in one run next
to lm-eval 0.4.13 ``local-chat-completions`` and inspect-ai 0.3.285 against the same server.

How: ``benchmarks/stub_server.py`` runs pinned to one core (``--server-cpu``); every client runs
as a fresh process pinned to the other (``--harness-cpu``) and sends ``--requests`` chat requests
with ``--concurrency`` in flight. Clients run interleaved (round-robin within each repeat) so
background load on this shared machine hits them alike; the median of ``--repeats`` runs is
reported. Measured per run:

- req/s: requests ÷ the request phase (from the call that starts the work to its return; imports
  and set-up excluded), and end-to-end req/s including process start-up;
- start-up: process spawn → the stub's first request (the stub timestamps it);
- CPU-ms per request: the client process's user+system CPU during the request phase ÷ requests
  (and the whole process's CPU, start-up included, ÷ requests).

lm-eval and inspect-ai are installed in a separate venv (default ``~/.cache/kubejury/bench-venv``;
created by ``--setup``), never in the project's venv.

Run everything (≈10 minutes on 2 cores): ``python benchmarks/client_throughput.py``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_BENCH_VENV = (
    Path(os.environ.get("KUBEJURY_CACHE", Path.home() / ".cache" / "kubejury")) / "bench-venv"
)
BENCH_PACKAGES = ["lm-eval==0.4.13", "inspect-ai==0.3.285", "openai"]
CLIENTS = ("kubejury", "aiohttp-bare", "lm-eval", "inspect-ai")
QUESTION = "Каков общий срок исковой давности по гражданскому праву РФ и с какого момента он исчисляется?"


# ---------------------------------------------------------------------------------------------
# Children: one client each, run in a fresh process. Each prints one JSON line of timings.
# ---------------------------------------------------------------------------------------------


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def child_kubejury(url: str, n: int, concurrency: int) -> dict[str, Any]:
    from kubejury.benchmark import Question
    from kubejury.client import ChatClient, ClientSettings
    from kubejury.spec import ModelSpec, Series
    from kubejury.stages import StageOptions, read_answers, run_async, run_generation
    from kubejury.storage import LocalStorage, RunLayout

    questions = [Question(f"q{i:05d}", "law", 1 + i % 3, f"{QUESTION} ({i})", "Три года.") for i in range(n)]
    model = ModelSpec(name="stub", runtime="vllm", source=url, servedModel="stub-model")
    series = Series(name="primary", temperature=0.0, repetition_penalty=1.2, max_tokens=256, seed=1)
    layout = RunLayout("bench")
    with tempfile.TemporaryDirectory(prefix="kubejury-bench-") as tmp:
        storage = LocalStorage(tmp)

        async def main() -> dict[str, Any]:
            settings = ClientSettings(max_in_flight=concurrency)
            async with ChatClient(url, settings=settings, runtime="vllm") as client:
                cpu0, t0 = _cpu(), time.time()
                summary = await run_generation(
                    storage=storage,
                    layout=layout,
                    model=model,
                    series=series,
                    questions=questions,
                    client=client,
                    options=StageOptions(),
                )
                t1, cpu1 = time.time(), _cpu()
            return {
                "t0": t0,
                "t1": t1,
                "cpu": cpu1 - cpu0,
                "ok": summary.written - summary.errors,
                "shards": len(summary.shards),
                "retries": client.stats.retries,
            }

        out = run_async(main())
        answers = read_answers(storage, layout, "primary", "stub")
        out["stored"] = sum(1 for a in answers if a["error"] is None and a["answer"])
    return out


def child_aiohttp_bare(url: str, n: int, concurrency: int) -> dict[str, Any]:
    """Plain aiohttp + orjson, no retries, no records: the floor of what any client can do."""
    import asyncio

    import aiohttp
    import orjson
    import uvloop

    async def main() -> dict[str, Any]:
        connector = aiohttp.TCPConnector(limit=concurrency)
        ok = 0
        async with aiohttp.ClientSession(connector=connector) as session:
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                nonlocal ok
                body = orjson.dumps(
                    {"model": "stub-model", "messages": [{"role": "user", "content": QUESTION}]}
                )
                async with sem, session.post(url + "/chat/completions", data=body) as resp:
                    data = orjson.loads(await resp.read())
                    ok += bool(data["choices"][0]["message"]["content"])

            cpu0, t0 = _cpu(), time.time()
            await asyncio.gather(*(one(i) for i in range(n)))
            t1, cpu1 = time.time(), _cpu()
        return {"t0": t0, "t1": t1, "cpu": cpu1 - cpu0, "ok": ok}

    return uvloop.run(main())


def child_lm_eval(url: str, n: int, concurrency: int) -> dict[str, Any]:
    from lm_eval.api.instance import Instance
    from lm_eval.models.api_models import JsonChatStr
    from lm_eval.models.openai_completions import LocalChatCompletion

    lm = LocalChatCompletion(
        base_url=url + "/chat/completions",
        model="stub-model",
        num_concurrent=concurrency,
        max_retries=3,
        tokenizer_backend=None,
        tokenized_requests=False,
    )
    requests = [
        Instance(
            request_type="generate_until",
            doc={},
            arguments=(
                JsonChatStr(
                    json.dumps([{"role": "user", "content": f"{QUESTION} ({i})"}], ensure_ascii=False)
                ),
                {"until": [], "max_gen_toks": 256, "temperature": 0},
            ),
            idx=i,
        )
        for i in range(n)
    ]
    cpu0, t0 = _cpu(), time.time()
    outputs = lm.generate_until(requests, disable_tqdm=True)
    t1, cpu1 = time.time(), _cpu()
    return {"t0": t0, "t1": t1, "cpu": cpu1 - cpu0, "ok": sum(1 for o in outputs if o)}


def child_inspect_ai(url: str, n: int, concurrency: int) -> dict[str, Any]:
    os.environ.setdefault("STUB_API_KEY", "none")
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.solver import generate

    dataset = MemoryDataset([Sample(input=f"{QUESTION} ({i})", target="Три года.", id=i) for i in range(n)])
    task = Task(dataset=dataset, solver=generate())
    with tempfile.TemporaryDirectory(prefix="inspect-bench-") as log_dir:
        cpu0, t0 = _cpu(), time.time()
        logs = eval(
            task,
            model="openai-api/stub/stub-model",
            model_base_url=url,
            max_connections=concurrency,
            max_samples=concurrency,
            max_tokens=256,
            temperature=0.0,
            display="none",
            log_dir=log_dir,
            score=False,
        )
        t1, cpu1 = time.time(), _cpu()
        samples = logs[0].samples or []
        ok = sum(1 for s in samples if s.output and s.output.completion)
    return {"t0": t0, "t1": t1, "cpu": cpu1 - cpu0, "ok": ok, "status": logs[0].status}


CHILDREN = {
    "kubejury": child_kubejury,
    "aiohttp-bare": child_aiohttp_bare,
    "lm-eval": child_lm_eval,
    "inspect-ai": child_inspect_ai,
}


# ---------------------------------------------------------------------------------------------
# Parent: stub server, pinning, repeats, medians, the Markdown report.
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _http(method: str, url: str) -> Any:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null") if method == "GET" else None


def _taskset(cpu: int | None) -> list[str]:
    if cpu is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(cpu)]


class Stub:
    def __init__(self, latency: float, cpu: int | None) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [
            *_taskset(cpu),
            sys.executable,
            str(HERE / "stub_server.py"),
            "--port",
            str(self.port),
            "--latency",
            str(latency),
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                _http("GET", self.base + "/stats")
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("stub server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def python_for(client: str, bench_venv: Path) -> str:
    if client in ("lm-eval", "inspect-ai"):
        return str(bench_venv / "bin" / "python")
    return sys.executable


def run_child(client: str, stub: Stub, args: argparse.Namespace) -> dict[str, Any]:
    _http("POST", stub.base + "/stats/reset")
    cmd = [
        *_taskset(args.harness_cpu),
        python_for(client, args.bench_venv),
        str(Path(__file__).resolve()),
        "--child",
        client,
        "--url",
        stub.base + "/v1",
        "--requests",
        str(args.requests),
        "--concurrency",
        str(args.concurrency),
    ]
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO / "jobs"),
        TOKENIZERS_PARALLELISM="false",
        INSPECT_DISPLAY="none",
        PYTHONWARNINGS="ignore",
    )
    spawned = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    ended = time.time()
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{client} failed ({proc.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    stats = _http("GET", stub.base + "/stats")
    n = args.requests
    phase = result["t1"] - result["t0"]
    return {
        "client": client,
        "req_s": n / phase,
        "e2e_req_s": n / (ended - spawned),
        "startup_s": (stats["first_at"] - spawned) if stats["first_at"] else float("nan"),
        "cpu_ms_req": 1000 * result["cpu"] / n,
        "cpu_ms_req_total": 1000 * (usage.ru_utime + usage.ru_stime) / n,
        "ok": result["ok"],
        "server_count": stats["count"],
        "extra": {k: v for k, v in result.items() if k not in ("t0", "t1", "cpu", "ok")},
    }


def machine_note() -> dict[str, Any]:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu_model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else [],
    }


def busy_processes(limit: int = 5) -> list[str]:
    """Other processes using CPU right now (contention on a shared machine)."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [line.strip() for line in out.stdout.splitlines()[1:] if line.strip()]
    return [r for r in rows if float(r.split()[0]) >= 5.0][:limit]


def setup_bench_venv(path: Path) -> None:
    if not (path / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(path / "bin" / "pip"), "install", "-q", *BENCH_PACKAGES], check=True)


def versions(bench_venv: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    import aiohttp

    out["aiohttp"] = aiohttp.__version__
    probe = "import importlib.metadata as m; print(m.version('lm-eval'), m.version('inspect-ai'))"
    try:
        text = subprocess.run(
            [python_for("lm-eval", bench_venv), "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split()
        out["lm-eval"], out["inspect-ai"] = text[0], text[1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        pass
    return out


def report(
    rows: dict[float, dict[str, list[dict[str, Any]]]], args: argparse.Namespace, notes: dict[str, Any]
) -> str:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    lines = [
        "# Client throughput: kubejury generation stage vs lm-eval vs inspect-ai",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `python benchmarks/client_throughput.py"
        f"{' ' + ' '.join(args.argv) if args.argv else ''}`.",
        f"{args.requests} chat requests, {args.concurrency} in flight; harness pinned to CPU {args.harness_cpu}, "
        f"stub server (`benchmarks/stub_server.py`, aiohttp + uvloop) pinned to CPU {args.server_cpu}; "
        f"median of {args.repeats} runs per cell, clients interleaved within each repeat.",
        "",
        f"Machine: {notes['machine']['cpu']} ({notes['machine']['cores']} cores), Python "
        f"{notes['machine']['python']}; versions: "
        + ", ".join(f"{k} {v}" for k, v in notes["versions"].items()),
        "",
        "- **req/s**: requests ÷ the request phase (the call that does the work; imports and set-up excluded).",
        "- **e2e req/s**: requests ÷ (process spawn → exit), start-up included.",
        "- **start-up**: process spawn → first request seen by the stub.",
        "- **CPU-ms/req**: client CPU (user+sys) in the request phase ÷ requests; *total* includes start-up.",
        "- kubejury = the real generation stage (`kubejury.stages.run_generation`): request bodies from the "
        "series, `ChatClient` with retry bookkeeping, response parsing, answers records, shards written to a "
        "`file://` storage in a temp dir, progress records; every answer is read back and counted.",
        "- aiohttp-bare = a bare aiohttp + orjson loop (no retries, no records): the floor.",
        "",
    ]
    for latency in sorted(rows):
        per_client = rows[latency]
        limit = args.concurrency / latency if latency else None
        title = f"## {latency * 1000:.0f} ms server" + (f" (limit {limit:,.0f} req/s)" if limit else "")
        lines += [
            title,
            "",
            "| client | req/s | e2e req/s | start-up s | CPU-ms/req | CPU-ms/req total | runs (req/s) |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for client, runs in per_client.items():
            lines.append(
                f"| {client} | {med([r['req_s'] for r in runs]):,.0f} | {med([r['e2e_req_s'] for r in runs]):,.0f} | "
                f"{med([r['startup_s'] for r in runs]):.2f} | {med([r['cpu_ms_req'] for r in runs]):.3f} | "
                f"{med([r['cpu_ms_req_total'] for r in runs]):.3f} | "
                + ", ".join(f"{r['req_s']:,.0f}" for r in runs)
                + " |"
            )
        kj = per_client.get("kubejury")
        ratios = []
        if kj:
            for other in ("lm-eval", "inspect-ai"):
                if other in per_client:
                    ratio = med([r["req_s"] for r in kj]) / med([r["req_s"] for r in per_client[other]])
                    ratios.append(f"kubejury ÷ {other} = **{ratio:.1f}×**")
        if ratios:
            lines += ["", "Ratios (median req/s): " + "; ".join(ratios) + "."]
        lines.append("")
    lines += [
        "## Contention",
        "",
        f"Load average before: {' '.join(notes['load_before'])}; after: {' '.join(notes['load_after'])}.",
        "Other processes using ≥ 5% CPU at the start: " + ("; ".join(notes["busy_before"]) or "none") + ".",
        "Other processes using ≥ 5% CPU at the end: " + ("; ".join(notes["busy_after"]) or "none") + ".",
        "The machine is shared (2 cores, other sessions building and testing); absolute figures move with that "
        "load, the ratios within one run much less.",
        "",
    ]
    return "\n".join(lines)


def parent(args: argparse.Namespace) -> int:
    if args.setup:
        setup_bench_venv(args.bench_venv)
    clients = [c for c in args.clients.split(",") if c]
    for client in clients:
        if client not in CHILDREN:
            raise SystemExit(f"unknown client {client!r}; choose from {', '.join(CHILDREN)}")
        if client in ("lm-eval", "inspect-ai") and not Path(python_for(client, args.bench_venv)).exists():
            raise SystemExit(f"{client} needs the bench venv {args.bench_venv}: rerun with --setup")
    notes: dict[str, Any] = {
        "machine": machine_note(),
        "versions": versions(args.bench_venv),
        "busy_before": busy_processes(),
    }
    notes["load_before"] = notes["machine"]["loadavg"]
    rows: dict[float, dict[str, list[dict[str, Any]]]] = {}
    for latency in [float(x) for x in args.latencies.split(",")]:
        stub = Stub(latency, args.server_cpu)
        try:
            rows[latency] = {c: [] for c in clients}
            for repeat in range(args.repeats):
                for client in clients:
                    row = run_child(client, stub, args)
                    rows[latency][client].append(row)
                    print(
                        f"latency {latency * 1000:.0f} ms, run {repeat + 1}: {client:12s} {row['req_s']:8,.0f} req/s "
                        f"start-up {row['startup_s']:.2f} s  CPU {row['cpu_ms_req']:.3f} ms/req  "
                        f"ok {row['ok']}/{args.requests}",
                        flush=True,
                    )
        finally:
            stub.stop()
    notes["busy_after"] = busy_processes()
    notes["load_after"] = machine_note()["loadavg"]
    text = report(rows, args, notes)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latencies", default="0,0.2", help="server latencies in seconds, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--harness-cpu", type=int, default=0)
    parser.add_argument("--server-cpu", type=int, default=1)
    parser.add_argument("--bench-venv", type=Path, default=DEFAULT_BENCH_VENV)
    parser.add_argument(
        "--setup", action="store_true", help="create/update the bench venv with lm-eval and inspect-ai"
    )
    parser.add_argument("--out", default=str(HERE / "results" / "client_throughput.md"))
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(raw)
    args.argv = raw
    if args.child:
        result = CHILDREN[args.child](args.url, args.requests, args.concurrency)
        print(json.dumps(result))
        return 0
    return parent(args)


if __name__ == "__main__":
    raise SystemExit(main())
