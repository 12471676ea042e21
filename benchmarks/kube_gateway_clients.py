"""The operator's hand-written gateway next to ``kubernetes_asyncio``, on the real API server.

Why: issue 14 §5 asks whether the operator's Kubernetes calls (``kubejury_operator.gateway``, a
small aiohttp client) should move to the official async client. This measures the two side by
side on the dev cluster's kube-apiserver, doing what a reconcile does: create objects (409 when
they exist), merge-patch them, read them back — ``--objects`` ConfigMaps per round, one call at a
time (as a reconcile applies its plan) and ``--concurrency`` in flight. Rounds alternate between
the clients (A B A B …) so the shared machine's background load hits both alike; the median of
``--rounds`` is reported. Each client runs in its own fresh process, so its import time and
resident memory are its own. Both use the same ServiceAccount token and CA.

Run (≈2 minutes on 2 cores; starts its own cluster unless ``KUBEJURY_CLUSTER_STATE`` names one):
``python benchmarks/kube_gateway_clients.py``; figures go to
``benchmarks/results/kube_gateway_clients.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "kube_gateway_clients.md"
CLIENTS = ("gateway", "kubernetes_asyncio")


def _rss_mib() -> float:
    """Resident memory now (``ru_maxrss`` would carry the forking parent's high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _config_map(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "kube-gateway"}},
        "data": {"spec.json": json.dumps({"name": name, "questions": list(range(20))})},
    }


# ------------------------------------------------------------------------------- child processes


async def _gateway_round(
    server: str, token: str, ca: str, namespace: str, n: int, conc: int
) -> dict[str, float]:
    from kubejury_operator.gateway import ApiCredentials, KubeGateway

    gateway = KubeGateway(ApiCredentials(server=server, token=token, ca_path=ca))
    names = [f"gw-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    timings: dict[str, float] = {}
    try:

        async def one(name: str) -> None:
            await gateway.create(_config_map(namespace, name))
            await gateway.create(_config_map(namespace, name))  # 409: already there
            await gateway.patch("ConfigMap", namespace, name, {"data": {"phase": "Judging"}})
            await gateway.get("ConfigMap", namespace, name)

        await one(f"gw-warm-{uuid.uuid4().hex[:6]}")
        timings.update(await _timed_phases(one, names, conc))
    finally:
        await gateway.close()
    return timings


async def _asyncio_round(kubeconfig: str, namespace: str, n: int, conc: int) -> dict[str, float]:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    names = [f"ka-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    async with client.ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)

        async def one(name: str) -> None:
            for _ in range(2):
                try:
                    await core.create_namespaced_config_map(namespace, _config_map(namespace, name))  # type: ignore[arg-type]
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            await core.patch_namespaced_config_map(
                name,
                namespace,
                {"data": {"phase": "Judging"}},
                _content_type="application/merge-patch+json",  # type: ignore[call-arg]
            )
            await core.read_namespaced_config_map(name, namespace)

        await one(f"ka-warm-{uuid.uuid4().hex[:6]}")
        return await _timed_phases(one, names, conc)


async def _timed_phases(one: Any, names: list[str], conc: int) -> dict[str, float]:
    half = len(names) // 2
    start_wall, start_cpu = time.perf_counter(), _cpu()
    for name in names[:half]:
        await one(name)
    sequential = (time.perf_counter() - start_wall, _cpu() - start_cpu)
    semaphore = asyncio.Semaphore(conc)

    async def limited(name: str) -> None:
        async with semaphore:
            await one(name)

    start_wall, start_cpu = time.perf_counter(), _cpu()
    await asyncio.gather(*(limited(n) for n in names[half:]))
    concurrent = (time.perf_counter() - start_wall, _cpu() - start_cpu)
    calls = 4 * half
    return {
        "seq_ms_per_call": 1000 * sequential[0] / calls,
        "seq_cpu_ms_per_call": 1000 * sequential[1] / calls,
        "conc_calls_per_s": (4 * (len(names) - half)) / concurrent[0],
        "conc_cpu_ms_per_call": 1000 * concurrent[1] / (4 * (len(names) - half)),
    }


def child(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.client == "gateway":
        import kubejury_operator.gateway  # noqa: F401
    else:
        import kubernetes_asyncio.client
        import kubernetes_asyncio.config  # noqa: F401
    import_s = time.perf_counter() - started
    rss_after_import = _rss_mib()
    if args.client == "gateway":
        timings = asyncio.run(
            _gateway_round(args.server, args.token, args.ca, args.namespace, args.objects, args.concurrency)
        )
    else:
        timings = asyncio.run(_asyncio_round(args.kubeconfig, args.namespace, args.objects, args.concurrency))
    timings |= {
        "import_ms": 1000 * import_s,
        "rss_after_import_mib": rss_after_import,
        "rss_at_end_mib": _rss_mib(),
    }
    print(json.dumps(timings))
    return 0


# ---------------------------------------------------------------------------------------- driver


def _baseline_rss() -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--rss"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=200, help="ConfigMaps per round (4 calls each)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--rss", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=CLIENTS, dest="client")
    for flag in ("--server", "--token", "--ca", "--kubeconfig", "--namespace"):
        parser.add_argument(flag)
    args = parser.parse_args()
    if args.rss:
        print(_rss_mib())
        return 0
    if args.client:
        return child(args)

    sys.path.insert(0, str(REPO / "cluster"))
    from devcluster.cluster import DEFAULT_NODES_FILE, attach, start_cluster

    existing = os.environ.get("KUBEJURY_CLUSTER_STATE")
    with tempfile.TemporaryDirectory(prefix="kj-bench-kube-") as tmp:
        cluster = (
            attach(Path(existing)) if existing else start_cluster(DEFAULT_NODES_FILE, Path(tmp) / "cluster")
        )
        try:
            namespace = f"bench-{uuid.uuid4().hex[:6]}"
            cluster.kubectl("create", "namespace", namespace)
            cluster.kubectl("create", "serviceaccount", "bench", "-n", namespace)
            cluster.kubectl(
                "create", "rolebinding", "bench", "-n", namespace, "--clusterrole=edit",
                f"--serviceaccount={namespace}:bench",
            )  # fmt: skip
            token = cluster.kubectl("create", "token", "bench", "-n", namespace).strip()
            kubeconfig = cluster.write_token_kubeconfig(token, Path(tmp) / "kubeconfig")
            common = [
                "--objects", str(args.objects), "--concurrency", str(args.concurrency), "--namespace", namespace,
                "--server", cluster.api_url, "--token", token, "--ca", str(cluster.ca_file),
                "--kubeconfig", str(kubeconfig),
            ]  # fmt: skip
            results: dict[str, list[dict[str, float]]] = {c: [] for c in CLIENTS}
            for round_ in range(args.rounds):
                for client_name in CLIENTS if round_ % 2 == 0 else reversed(CLIENTS):
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", client_name, *common],
                        capture_output=True, text=True, check=True, cwd=REPO,
                    ).stdout  # fmt: skip
                    results[client_name].append(json.loads(out.strip().splitlines()[-1]))
                print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
            cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        finally:
            if not existing:
                cluster.stop()

    baseline = _baseline_rss()
    med = {c: {k: statistics.median(r[k] for r in results[c]) for k in results[c][0]} for c in CLIENTS}
    gw, ka = med["gateway"], med["kubernetes_asyncio"]
    rows = [
        ("sequential: ms per call (wall)", "seq_ms_per_call", "{:.2f}"),
        ("sequential: client CPU ms per call", "seq_cpu_ms_per_call", "{:.3f}"),
        (f"{args.concurrency} in flight: calls/s", "conc_calls_per_s", "{:.0f}"),
        (f"{args.concurrency} in flight: client CPU ms per call", "conc_cpu_ms_per_call", "{:.3f}"),
        ("import time, ms", "import_ms", "{:.0f}"),
        ("RSS after import, MiB", "rss_after_import_mib", "{:.1f}"),
        ("RSS after the round, MiB", "rss_at_end_mib", "{:.1f}"),
    ]
    lines = [
        "# Operator gateway vs kubernetes_asyncio on the real API server",
        "",
        "`python benchmarks/kube_gateway_clients.py` — this machine: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, the dev cluster's kube-apiserver on "
        f"loopback (TLS, ServiceAccount token). Per round and client: {args.objects} ConfigMaps × 4 calls "
        "(create, create again → 409, merge patch, get); the first half one call at a time, the second "
        f"half {args.concurrency} objects in flight. Median of {args.rounds} alternating rounds, each client "
        f"in a fresh process (a bare interpreter's RSS: {baseline:.1f} MiB).",
        "",
        "| measure | gateway (aiohttp) | kubernetes_asyncio | ratio (asyncio / gateway) |",
        "|---|---:|---:|---:|",
    ]
    for label, key, fmt in rows:
        lines.append(
            f"| {label} | {fmt.format(gw[key])} | {fmt.format(ka[key])} | {ka[key] / gw[key]:.2f}× |"
        )
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if not args.no_write:
        RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
