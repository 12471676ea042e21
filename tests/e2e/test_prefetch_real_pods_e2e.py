"""Weights before the server, on real pods (issue 26, part 3): the same GGUF downloaded at a known
rate, once by the llama.cpp server itself and once by a prefetch Job, and what each server's
bring-up (Pod creation → Ready) then costs, as the EvalRun status reports it.

Real: the dev cluster with a real node (:mod:`devcluster.realnode`: kubelet, containerd, runc, CNI,
kube-proxy, CoreDNS); the chart installed by ``helm install`` with the image built from the
Dockerfile (the operator is the chart's Deployment pod); the llama.cpp server image
(``scripts/build_llama_image.sh``, ``llama-server`` build 11312 compiled with ``-DLLAMA_OPENSSL=ON``);
the prefetch Job's container (``kubejury prefetch``); the model, the project's SmolLM2-135M
Q4_1 GGUF, which llama.cpp really loads; and both downloads. The weights are served by a hub on
this machine (:mod:`hub_stub`, the hub API's refs, tree and resolve calls) behind a proxy that
delivers :data:`RATE` bytes per second (:mod:`throttle_proxy`), listening on the host's end of the
real node's veth: the pods reach it by the chart's hub mirror setting (``inference.hubEndpoint``,
given to servers and prefetch Jobs as ``HF_ENDPOINT``, which llama.cpp's ``--hf-repo`` downloader
reads after ``MODEL_ENDPOINT``). Nothing leaves the machine.

Two runs, one after the other, of the same one-model EvalRun:

1. **self-download** — no model cache claim, so nothing is prefetched: the server Pod runs
   ``llama-server --hf-repo <repo>:Q4_1`` and downloads the GGUF itself before it can be Ready;
2. **prefetched** — the run names a cache claim (``spec.modelCache``; the chart has
   ``modelCache.prefetch`` on): a CPU-only Job downloads the same bytes through the same link
   first, and the server, created only after it succeeded, loads ``--model <cache>/…/model.gguf``.

SIMULATED: the GPUs. The real node is a CPU node, so these servers are CPU placements (0 GPUs)
and their ``bringUpGpuSeconds`` is 0 × ``bringUpSeconds``. On a GPU placement the status's
``bringUpGpuSeconds`` is the GPUs × the same ``bringUpSeconds`` (:mod:`kubejury_operator.gpu_accounting`,
checked on KWOK GPU nodes by :mod:`test_prefetch_e2e`), so ``bringUpSeconds`` is the figure compared
here. The real-pods walkthrough (:mod:`test_real_pods_e2e`) starts its own real-node cluster and
stops it; this module does the same (a real node is one per cluster, and the two modules install
the chart with different values).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_kube import parse_time
from hub_stub import HubStub, repo_of
from real_pods import (
    CHART,
    NAMESPACE,
    RELEASE,
    REPO,
    RESULTS_CLAIM,
    User,
    build_archive,
    claim,
    describe,
    results_dir,
    results_volume,
    wait_until,
)
from real_pods import run as run_command
from throttle_proxy import ThrottledProxy

from devcluster import Cluster, start_cluster
from devcluster.cluster import DEFAULT_NODES_FILE
from devcluster.realnode import RealNode, local_volume
from kubejury.config.embedded_models import SMOLLM2_135M
from kubejury.files.weight_cache import COMPLETE_MARKER, GGUF_ENTRY, gguf_selection, model_dir
from kubejury.local.embedded import embedded_model_path

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

MODEL = SMOLLM2_135M
MODEL_NAME = "smollm2-135m"
HUB_REPO = "kubejury-e2e/SmolLM2-135M-Instruct-GGUF"
SOURCE = f"hf://{HUB_REPO}"
QUANTIZATION = MODEL.quantization.upper()
#: Bytes per second through the proxy: the 94 MiB GGUF takes about 37 s, twice (once per run).
RATE = 5 << 19
CACHE_CLAIM = "kj-weights"
CACHE_MOUNT = "/models/cache"
SELF_DOWNLOAD = "self-download"
PREFETCHED = "prefetched"
SERVER_SELECTOR = "kubejury.io/component=server"
READY_LIMIT_S = 20.0
WAIT_S = 420.0


@dataclass
class Bringup:
    """What one run's server bring-up looked like, from the API and the hub's side."""

    run: str
    server: dict[str, Any] = field(default_factory=dict)  # status.gpu.servers.<model>
    container: dict[str, Any] = field(default_factory=dict)  # the Deployment's server container
    deployment_created: float = 0.0
    pod_created: float = 0.0
    pod_ready: float = 0.0
    prefetch_jobs: list[dict[str, Any]] = field(default_factory=list)
    hub_requests: list[str] = field(default_factory=list)
    server_log: str = ""


@dataclass
class Record:
    user: User
    node: RealNode
    hub_url: str
    weight_bytes: int
    gguf_path: str
    hub_commit: str
    runs: dict[str, Bringup] = field(default_factory=dict)
    started: str = ""  # UTC, when the first run was applied
    load_start: str = ""
    load_end: str = ""

    @property
    def download_s(self) -> float:
        """What the link's rate lets the GGUF take, at the least."""
        return self.weight_bytes / RATE


def evalrun(name: str, prefetch: bool) -> dict[str, Any]:
    """examples/evalrun-kind-cpu.yaml with one model from the local hub, judged by itself, on one question."""
    run: dict[str, Any] = yaml.safe_load((REPO / "examples" / "evalrun-kind-cpu.yaml").read_text())
    run["metadata"]["name"] = name
    spec = run["spec"]
    spec["benchmark"]["filters"] = {"domains": ["law"], "levels": [1], "limitPerCell": 1}
    entry = {
        "name": MODEL_NAME,
        "runtime": "llamacpp",
        "source": SOURCE,
        "quantization": QUANTIZATION,
        "parameters": MODEL.parameters,
        "family": MODEL.family,
        "maxModelLen": 2048,
        "resources": {"cpu": "250m", "memory": "1Gi"},
    }
    spec["models"] = [entry]
    spec["judges"] = [
        {k: v for k, v in entry.items() if k != "resources"}
        | {"name": f"judge-{MODEL_NAME}", "sameAs": MODEL_NAME}
    ]
    spec["series"][0]["maxTokens"] = 16
    spec["judging"]["maxTokens"] = 16
    spec["startupTimeoutSeconds"] = 300
    spec["maxConcurrentModels"] = 1
    if prefetch:
        spec["modelCache"] = {"claimName": CACHE_CLAIM}
    return run


def install(record: Record) -> None:
    """The results and cache claims on the node, the benchmark on the results volume, the chart
    with the hub mirror set to the throttled link."""
    user, node = record.user, record.node
    user.kubectl("create", "namespace", NAMESPACE)
    user.apply(results_volume(node), local_volume(node, CACHE_CLAIM, size="1Gi", storage_class=""))
    user.apply(claim(RESULTS_CLAIM, "2Gi"), claim(CACHE_CLAIM, "1Gi"), namespace=NAMESPACE)
    benchmark = REPO / "examples" / "benchmark-ru-sample.jsonl"
    target = results_dir(node) / benchmark.name
    shutil.copyfile(benchmark, target)
    target.chmod(0o644)
    user.helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--set",
        f"watchNamespaces={{{NAMESPACE}}}",
        "--set",
        f"storage.resultsClaimName={RESULTS_CLAIM}",
        "--set",
        f"security.allowedClaims={{{CACHE_CLAIM}}}",
        "--set",
        "modelCache.prefetch=true",
        "--set",
        f"inference.hubEndpoint={record.hub_url}",
        "--set",
        "jobs.resources.requests.cpu=100m",
        "--wait",
        "--timeout",
        "5m",
    )


def apply_once_admitted(user: User, document: dict[str, Any]) -> None:
    """kubectl apply, again while the webhook is not listening yet (the operator pod just started:
    ``helm install --wait`` waits for its Deployment, not for its webhook server)."""
    argv = [str(user.cluster.kubectl_path), "-n", NAMESPACE, "apply", "-f", "-"]
    text = yaml.safe_dump(document)

    def applied() -> bool:
        done = run_command(argv, env=user.env(), input=text, check=False)
        if done.returncode != 0 and "failed calling webhook" not in done.stderr:
            raise AssertionError(f"kubectl apply refused the EvalRun: {done.stderr}")
        return done.returncode == 0

    wait_until("the webhook to admit the EvalRun", applied, 120, lambda: describe(user, NAMESPACE))


def _status(user: User, run: str) -> dict[str, Any]:
    done = user.kubectl_result("get", "evalrun", run, "-n", NAMESPACE, "-o", "json")
    return dict(json.loads(done.stdout).get("status") or {}) if done.returncode == 0 else {}


def _server_entry(user: User, run: str) -> dict[str, Any] | None:
    """status.gpu.servers.<model> once it names the server's bring-up (its Pod was seen Ready)."""
    status = _status(user, run)
    if status.get("phase") == "Failed":
        raise AssertionError(f"EvalRun {run} failed: {json.dumps(status.get('conditions'), indent=1)}")
    entry = ((status.get("gpu") or {}).get("servers") or {}).get(MODEL_NAME) or {}
    return dict(entry) if float(entry.get("bringUpSeconds") or 0) > 0 else None


def _ready_at(pod: dict[str, Any]) -> float:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            return parse_time(condition["lastTransitionTime"])
    return 0.0


def bring_up(record: Record, stub: HubStub, run: str, prefetch: bool) -> Bringup:
    """Apply the run, wait until its status names the server's bring-up, read what happened, then
    delete the run and wait until its server is gone (the next run has the node and the link alone)."""
    user = record.user
    asked_before = len(stub.requests)
    seen = Bringup(run)
    apply_once_admitted(user, evalrun(run, prefetch))
    seen.server = wait_until(
        f"EvalRun {run}'s server bring-up in its status",
        lambda: _server_entry(user, run),
        WAIT_S,
        lambda: describe(user, NAMESPACE),
        interval=1.0,
    )
    selector = f"kubejury.io/run={run}"
    [deployment] = user.get("deployments", "-n", NAMESPACE, "-l", f"{selector},{SERVER_SELECTOR}")["items"]
    seen.container = deployment["spec"]["template"]["spec"]["containers"][0]
    seen.deployment_created = parse_time(deployment["metadata"]["creationTimestamp"])
    ready = [p for p in user.pods(NAMESPACE, f"{selector},{SERVER_SELECTOR}") if _ready_at(p)]
    pod = min(ready, key=_ready_at)
    seen.pod_created, seen.pod_ready = parse_time(pod["metadata"]["creationTimestamp"]), _ready_at(pod)
    seen.server_log = user.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"], "--tail=400")
    seen.prefetch_jobs = user.get(
        "jobs", "-n", NAMESPACE, "-l", f"{selector},kubejury.io/component=prefetch"
    )["items"]
    seen.hub_requests = stub.requests[asked_before:]
    user.kubectl("delete", "evalrun", run, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_until(
        f"EvalRun {run}'s server pods to be gone",
        lambda: not user.pods(NAMESPACE, f"{selector},{SERVER_SELECTOR}"),
        120,
        lambda: describe(user, NAMESPACE),
    )
    return seen


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Record]:
    images = [build_archive("build_image.sh"), build_archive("build_llama_image.sh")]
    state = tmp_path_factory.mktemp("prefetch-real-node")
    cluster: Cluster = start_cluster(DEFAULT_NODES_FILE, state, real_node=True, images=images)
    gguf = embedded_model_path(MODEL)
    stub = HubStub(repo_of(HUB_REPO, [gguf]))
    proxy = None
    try:
        node = cluster.real_node()
        # On the host's end of the node's veth: pods reach it, nothing off this machine does.
        proxy = ThrottledProxy(stub.address, RATE, host=node.network.host_ip)
        folder = model_dir(CACHE_MOUNT, SOURCE, _selection())
        record = Record(User(cluster), node, proxy.url, gguf.stat().st_size, folder, stub.repo.commit)
        record.started, record.load_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), _load()
        install(record)
        for run, prefetch in ((SELF_DOWNLOAD, False), (PREFETCHED, True)):
            record.runs[run] = bring_up(record, stub, run, prefetch)
        record.load_end = _load()
        _print_figures(record)
        yield record
    finally:
        if proxy is not None:
            proxy.close()
        stub.close()
        cluster.stop()


def _load() -> str:
    """The 1-, 5- and 15-minute load averages (the machine is shared: figures come with their load)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _selection() -> str:
    return gguf_selection(SOURCE, "llamacpp", QUANTIZATION)


def _print_figures(record: Record) -> None:
    own, pre = record.runs[SELF_DOWNLOAD], record.runs[PREFETCHED]
    job = pre.prefetch_jobs[0]["status"] if pre.prefetch_jobs else {}
    job_s = (
        parse_time(job["completionTime"]) - parse_time(job["startTime"]) if job.get("completionTime") else 0.0
    )
    print(
        f"\nprefetch real-pods e2e ({record.started}, load {record.load_start} → {record.load_end}): "
        f"{record.weight_bytes / 2**20:.1f} MiB GGUF at {RATE / 2**20:g} MiB/s = {record.download_s:.1f} s; "
        f"bringUpSeconds self-download {own.server['bringUpSeconds']} s, "
        f"prefetched {pre.server['bringUpSeconds']} s (prefetch Job {job_s:.0f} s, CPU only)"
    )


# --- without the prefetch: the server downloads its own weights ---------------------------------


def test_without_a_cache_claim_the_llama_cpp_server_pulls_the_gguf_itself_from_the_hub_mirror(
    measured: Record,
) -> None:
    own = measured.runs[SELF_DOWNLOAD]
    args = own.container["args"]
    assert args[args.index("--hf-repo") + 1] == f"{HUB_REPO}:{QUANTIZATION}"
    assert "--model" not in args and not own.prefetch_jobs
    env = {e["name"]: e.get("value") for e in own.container["env"]}
    assert env["HF_ENDPOINT"] == measured.hub_url
    # llama.cpp's downloader: the refs, the tree at the commit, HEAD, then the file's bytes
    resolved = [r for r in own.hub_requests if f"/{HUB_REPO}/resolve/" in r and r.startswith("GET")]
    assert any(r.endswith(f"/{MODEL.file_name}") for r in resolved), own.hub_requests
    assert f"GET /api/models/{HUB_REPO}/refs" in own.hub_requests


def test_without_the_prefetch_the_servers_bring_up_is_at_least_the_download(measured: Record) -> None:
    own = measured.runs[SELF_DOWNLOAD]
    # Kubernetes' timestamps are whole seconds: one second of slack.
    assert float(own.server["bringUpSeconds"]) >= measured.download_s - 1.0, own.server
    assert own.pod_ready - own.pod_created == pytest.approx(float(own.server["bringUpSeconds"]), abs=1.0)


# --- with the prefetch: a CPU-only Job downloads, the server loads from the cache ---------------


def test_with_a_cache_claim_a_cpu_only_prefetch_job_downloads_the_same_bytes_first(measured: Record) -> None:
    pre = measured.runs[PREFETCHED]
    [job] = pre.prefetch_jobs
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["kubejury"] and container["args"][0] == "prefetch"
    assert not any("gpu" in key for part in container["resources"].values() for key in part)
    assert {e["name"]: e.get("value") for e in container["env"]}["HF_ENDPOINT"] == measured.hub_url
    status = job["status"]
    assert status.get("succeeded") == 1, status
    download_s = parse_time(status["completionTime"]) - parse_time(status["startTime"])
    assert download_s >= measured.download_s - 1.0, (download_s, measured.download_s)
    assert f"GET /{HUB_REPO}/resolve/main/{MODEL.file_name}" in pre.hub_requests
    # the weights on the claim are the GGUF's bytes, marked complete
    folder = measured.node.volumes_dir() / CACHE_CLAIM / Path(measured.gguf_path).relative_to(CACHE_MOUNT)
    assert json.loads((folder / COMPLETE_MARKER).read_text())["source"] == SOURCE
    assert (folder / MODEL.file_name).read_bytes() == embedded_model_path(MODEL).read_bytes()


def test_the_prefetched_server_is_created_after_the_download_and_loads_the_cache(measured: Record) -> None:
    pre = measured.runs[PREFETCHED]
    [job] = pre.prefetch_jobs
    assert pre.deployment_created >= parse_time(job["status"]["completionTime"])
    args = pre.container["args"]
    assert args[args.index("--model") + 1] == f"{measured.gguf_path}/{GGUF_ENTRY}"
    assert "--hf-repo" not in args
    # the server asked the hub nothing: llama.cpp names the commit, the prefetch Job asks for main
    assert pre.hub_requests and not any(measured.hub_commit in r for r in pre.hub_requests), pre.hub_requests


def test_with_the_prefetch_the_servers_bring_up_is_seconds_far_below_the_download(measured: Record) -> None:
    own, pre = measured.runs[SELF_DOWNLOAD], measured.runs[PREFETCHED]
    prefetched = float(pre.server["bringUpSeconds"])
    assert prefetched < READY_LIMIT_S, pre.server
    assert prefetched < measured.download_s, (pre.server, measured.download_s)
    assert prefetched < float(own.server["bringUpSeconds"]), (pre.server, own.server)
    assert pre.pod_ready - pre.pod_created == pytest.approx(prefetched, abs=1.0)


def test_on_the_cpu_node_no_gpu_is_held_and_the_gpu_figure_is_the_gpus_times_the_bring_up(
    measured: Record,
) -> None:
    for seen in measured.runs.values():
        gpus = int(seen.server["gpus"])
        assert gpus == 0, seen.server  # GPUs are simulated (KWOK nodes); the real node has none
        assert float(seen.server["bringUpGpuSeconds"]) == pytest.approx(
            gpus * float(seen.server["bringUpSeconds"]), abs=0.2
        )
