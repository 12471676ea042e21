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
CLIENTS = ("kubejury", "aiohttp-bare", "lm-eval", "lm-eval-cli", "inspect-ai")
EXTERNAL = ("lm-eval-cli",)  # run as the tool's own command line, not through a child function
QUESTION = "Каков общий срок исковой давности по гражданскому праву РФ и с какого момента он исчисляется?"


# ---------------------------------------------------------------------------------------------
# Children: one client each, run in a fresh process. Each prints one JSON line of timings.
# ---------------------------------------------------------------------------------------------


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def child_kubejury(url: str, n: int, concurrency: int) -> dict[str, Any]:
    from kubejury.config.spec import ModelSpec, Series
    from kubejury.files.benchmark import Question
    from kubejury.files.storage import LocalStorage, RunLayout
    from kubejury.inference.client import ChatClient, ClientSettings
    from kubejury.stages import StageOptions, run_async, run_generation
    from kubejury.stages.generate import read_answers

    questions = [Question(f"q{i:05d}", "law", 1 + i % 3, f"{QUESTION} ({i})", "Три года.") for i in range(n)]
    model = ModelSpec(name="stub", runtime="vllm", source=url, served_model="stub-model")
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
        out["stored"] = sum(1 for a in answers if a.error is None and a.answer)
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
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def python_for(client: str, bench_venv: Path) -> str:
    if client in ("lm-eval", "lm-eval-cli", "inspect-ai"):
        return str(bench_venv / "bin" / "python")
    return sys.executable


LM_EVAL_TASK = """\
task: kubejury_bench
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{reference}}}}"
generation_kwargs:
  until: []
  max_gen_toks: 256
  temperature: 0
metric_list:
  - metric: exact_match
"""


def lm_eval_cli_command(stub: Stub, args: argparse.Namespace, workdir: Path) -> list[str]:
    """``lm_eval run --model local-chat-completions`` on a task of ``--requests`` local questions."""
    data = workdir / "questions.jsonl"
    with data.open("w", encoding="utf-8") as handle:
        for i in range(args.requests):
            handle.write(
                json.dumps({"question": f"{QUESTION} ({i})", "reference": "Три года."}, ensure_ascii=False)
            )
            handle.write("\n")
    (workdir / "kubejury_bench.yaml").write_text(LM_EVAL_TASK.format(data=data), encoding="utf-8")
    model_args = (
        f"base_url={stub.base}/v1/chat/completions,model=stub-model,num_concurrent={args.concurrency},"
        "max_retries=3,tokenized_requests=False,tokenizer_backend=None"
    )
    return [
        str(args.bench_venv / "bin" / "lm_eval"),
        "run",
        "--model",
        "local-chat-completions",
        "--model_args",
        model_args,
        "--tasks",
        "kubejury_bench",
        "--include_path",
        str(workdir),
        "--apply_chat_template",
    ]


def run_child(client: str, stub: Stub, args: argparse.Namespace, latency: float) -> dict[str, Any]:
    _http("POST", stub.base + "/stats/reset")
    workdir = Path(tempfile.mkdtemp(prefix="kubejury-bench-"))
    if client in EXTERNAL:
        cmd = [*_taskset(args.harness_cpu), *lm_eval_cli_command(stub, args, workdir)]
    else:
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
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
    )
    try:
        _children_cpu_delta()  # baseline: only this child's CPU is counted below
        spawned = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=workdir)
        stdout_b, stderr_b = proc.communicate()
        ended = time.time()
        usage = _children_cpu_delta()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{client} failed ({proc.returncode}):\n{stderr_b.decode()[-3000:]}")
    stats = _http("GET", stub.base + "/stats")
    n = args.requests
    served = (stats["last_at"] - stats["first_at"] + latency) if stats["count"] else float("nan")
    row: dict[str, Any] = {
        "client": client,
        "server_req_s": stats["count"] / served if stats["count"] else 0.0,
        "e2e_req_s": n / (ended - spawned),
        "startup_s": (stats["first_at"] - spawned) if stats["first_at"] else float("nan"),
        "cpu_ms_req_total": 1000 * usage / n,
        "server_count": stats["count"],
    }
    if client in EXTERNAL:
        row.update(req_s=None, cpu_ms_req=None, ok=stats["count"], extra={})
    else:
        result = json.loads(stdout_b.decode().strip().splitlines()[-1])
        row.update(
            req_s=n / (result["t1"] - result["t0"]),
            cpu_ms_req=1000 * result["cpu"] / n,
            ok=result["ok"],
            extra={k: v for k, v in result.items() if k not in ("t0", "t1", "cpu", "ok")},
        )
    return row


_children_cpu_seen = 0.0


def _children_cpu_delta() -> float:
    """CPU (user+sys) of children reaped since the last call (the child just waited for)."""
    global _children_cpu_seen
    t = os.times()
    total = t.children_user + t.children_system
    delta, _children_cpu_seen = total - _children_cpu_seen, total
    return delta


def load1() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def wait_for_quiet(threshold: float, max_wait_s: float) -> float:
    """On a shared machine, give other people's bursts a chance to pass; returns the load when starting."""
    deadline = time.time() + max_wait_s
    while load1() >= threshold and time.time() < deadline:
        time.sleep(2.0)
    return load1()


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


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def report(
    rows: dict[float, dict[str, list[dict[str, Any]]]], args: argparse.Namespace, notes: dict[str, Any]
) -> str:
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
        "Columns:",
        "",
        "- **req/s**: requests ÷ the request phase, timed inside the client process around the call that does "
        "the work (imports and set-up excluded). Not available for a tool run as its own command line.",
        "- **server req/s**: requests ÷ (last request − first request seen by the stub + one server latency); "
        "the same yardstick for every client, command lines included.",
        "- **e2e req/s**: requests ÷ (process spawn → exit), start-up and shutdown included.",
        "- **start-up**: process spawn → first request seen by the stub.",
        "- **CPU-ms/req**: the client's CPU (user+sys) in the request phase ÷ requests; **total**: the whole "
        "process (start-up included) ÷ requests.",
        "",
        "Clients:",
        "",
        "- **kubejury**: the real generation stage, `kubejury.stages.run_generation` on uvloop: request bodies "
        "built from an EvalRun series (vLLM sampling mapping), `ChatClient` with its retry bookkeeping and "
        "per-attempt deadlines, response parsing, answers records, immutable shards written atomically to a "
        "`file://` storage in a temp dir (fsync'ed), progress records; afterwards every stored answer is read "
        "back and counted (outside the timing).",
        "- **aiohttp-bare**: one aiohttp + orjson coroutine per request behind a semaphore, no retries, no "
        "records: what a hand-written client typically does.",
        "- **lm-eval**: lm-eval's `local-chat-completions` model (`LocalChatCompletion.generate_until`) called "
        "from Python with `num_concurrent` = in-flight requests, no tokenizer.",
        "- **lm-eval-cli**: the same model through lm-eval's command line on a local JSONL task of the same "
        "questions (`lm_eval run --model local-chat-completions --apply_chat_template`), as a user runs it.",
        "- **inspect-ai**: `inspect_ai.eval()` of a task with the same questions, `generate()` solver, model "
        "`openai-api/stub/stub-model`, `max_connections` = `max_samples` = in-flight requests, no scorer.",
        "",
    ]
    for latency in sorted(rows):
        per_client = rows[latency]
        limit = args.concurrency / latency if latency else None
        title = f"## {latency * 1000:.0f} ms server" + (f" (limit {limit:,.0f} req/s)" if limit else "")
        header = (
            "| client | req/s | server req/s | e2e req/s | start-up s | CPU-ms/req | CPU-ms/req total "
            "| req/s of each run | load at start of each run |"
        )
        lines += [title, "", header, "|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for client, runs in per_client.items():
            each = ", ".join(
                _fmt(r["req_s"] if r["req_s"] is not None else r["server_req_s"], ",.0f") for r in runs
            )
            lines.append(
                f"| {client} | {_fmt(_med(runs, 'req_s'), ',.0f')} | {_fmt(_med(runs, 'server_req_s'), ',.0f')} | "
                f"{_fmt(_med(runs, 'e2e_req_s'), ',.0f')} | {_fmt(_med(runs, 'startup_s'), '.2f')} | "
                f"{_fmt(_med(runs, 'cpu_ms_req'), '.3f')} | {_fmt(_med(runs, 'cpu_ms_req_total'), '.3f')} | {each} | "
                + ", ".join(_fmt(r.get("load1"), ".1f") for r in runs)
                + " |"
            )
        kj = per_client.get("kubejury")
        if kj:
            ratios = []
            for other, runs in per_client.items():
                if other == "kubejury":
                    continue
                parts = []
                for key, label in (
                    ("req_s", "req/s"),
                    ("server_req_s", "server req/s"),
                    ("e2e_req_s", "e2e"),
                ):
                    a, b = _med(kj, key), _med(runs, key)
                    if a is not None and b:
                        parts.append(f"{label} {a / b:.1f}×")
                ratios.append(f"- kubejury ÷ {other}: " + ", ".join(parts))
            lines += ["", "Ratios of medians:", "", *ratios]
        lines.append("")
    lines += targets_section(rows)
    lines += [
        "## Contention",
        "",
        f"Before each run the script waited (at most {args.quiet_wait:g} s) for the 1-minute load average to drop "
        f"below {args.quiet_load:g}; the load at the start of each run is in the tables.",
        f"Load average before: {' '.join(notes['load_before'])}; after: {' '.join(notes['load_after'])}.",
        "Other processes using ≥ 5% CPU at the start: " + ("; ".join(notes["busy_before"]) or "none") + ".",
        "Other processes using ≥ 5% CPU at the end: " + ("; ".join(notes["busy_after"]) or "none") + ".",
        "",
    ]
    return "\n".join(lines)


def targets_section(rows: dict[float, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """The pipeline issue's targets against this run's medians (kubejury's generation stage)."""
    out = ["## Targets (pipeline issue) against this run's medians", ""]

    def check(label: str, value: float | None, ok: bool | None, shown: str) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "**not met**")
        out.append(f"- {label}: {shown if value is not None else '—'} → {verdict}")

    slow, fast = rows.get(0.2, {}), rows.get(0.0, {})
    kj_slow, kj_fast = slow.get("kubejury", []), fast.get("kubejury", [])
    v = _med(kj_slow, "req_s")
    check(
        "200 ms server, ≥ 1,150 req/s at 256 in flight",
        v,
        None if v is None else v >= 1150,
        f"{v or 0:,.0f} req/s",
    )
    for other, key in (("lm-eval", "req_s"), ("lm-eval-cli", "e2e_req_s")):
        a, b = _med(kj_slow, key), _med(slow.get(other, []), key)
        ratio = a / b if a is not None and b else None
        check(
            f"200 ms server, ≥ 5× {other} ({'request phase' if key == 'req_s' else 'end to end'})",
            ratio,
            None if ratio is None else ratio >= 5,
            f"{ratio or 0:.1f}×",
        )
    v = _med(kj_fast, "req_s")
    check(
        "instant server, ≥ 2,000 req/s on one core",
        v,
        None if v is None else v >= 2000,
        f"{v or 0:,.0f} req/s",
    )
    v = _med(kj_fast, "cpu_ms_req")
    check("instant server, ≤ 0.5 CPU-ms per request", v, None if v is None else v <= 0.5, f"{v or 0:.3f} ms")
    for label, runs in (("instant", kj_fast), ("200 ms", kj_slow)):
        v = _med(runs, "startup_s")
        check(
            f"start-up to first request < 1 s ({label} server runs)",
            v,
            None if v is None else v < 1.0,
            f"{v or 0:.2f} s",
        )
    out.append("")
    return out


def parent(args: argparse.Namespace) -> int:
    if args.setup:
        setup_bench_venv(args.bench_venv)
    clients = [c for c in args.clients.split(",") if c]
    for client in clients:
        if client not in CHILDREN and client not in EXTERNAL:
            raise SystemExit(f"unknown client {client!r}; choose from {', '.join(CLIENTS)}")
        if (
            client in ("lm-eval", "lm-eval-cli", "inspect-ai")
            and not Path(python_for(client, args.bench_venv)).exists()
        ):
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
                    load = wait_for_quiet(args.quiet_load, args.quiet_wait)
                    row = run_child(client, stub, args, latency)
                    row["load1"] = load
                    rows[latency][client].append(row)
                    phase = f"{row['req_s']:8,.0f}" if row["req_s"] is not None else "       —"
                    print(
                        f"latency {latency * 1000:.0f} ms, run {repeat + 1}: {client:12s} {phase} req/s "
                        f"(server {row['server_req_s']:,.0f}, e2e {row['e2e_req_s']:,.0f})  "
                        f"start-up {row['startup_s']:.2f} s  CPU {row['cpu_ms_req_total']:.3f} ms/req total  "
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
        raw = {"rows": {str(k): v for k, v in rows.items()}, "notes": notes, "argv": args.argv}
        Path(args.out).with_suffix(".json").write_text(
            json.dumps(raw, indent=1, default=str), encoding="utf-8"
        )
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
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=1.5,
        help="before each run, wait until the 1-minute load average is below this ...",
    )
    parser.add_argument("--quiet-wait", type=float, default=60.0, help="... for at most this many seconds")
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
