"""Weights before GPUs on the real control plane (issue 26, part 3): a model whose weights take a
known time to download holds its GPUs for seconds before its server is Ready, not for the download.

Real: the control plane (etcd, kube-apiserver with admission, controller-manager, scheduler), KWOK
GPU nodes, the chart installed by helm with ``modelCache.claimName`` and ``modelCache.prefetch``,
the operator as its ServiceAccount, the prefetch Job's process (``kubejury prefetch`` from this
checkout, run by the e2e kubelet with the cache claim's volume bind-mounted at its mountPath), an
S3 server (moto over HTTP) holding the weights, and the download itself: every byte passes a
loopback proxy that delivers :data:`RATE` bytes per second (:mod:`throttle_proxy`), so the
:data:`WEIGHT_BYTES` take about :data:`DOWNLOAD_S` seconds.

SIMULATED (as in every KWOK e2e, see ``kubelet_runner``): the model server. KWOK marks its Pod Ready
once scheduled and a stub answers on its Service; nothing loads the weights on a GPU. So "without
the prefetch" is not run here as a server of its own: a server that downloads its own weights reads
the same bytes through the same link before it can be Ready, so its bring-up would hold its GPUs for
at least the download time this test measures (the prefetch Job's start → completion) — that is the
figure the status's ``bringUpGpuSeconds`` is compared with.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from e2e_kube import RESULTS_URI, describe_namespace, parse_time, status_of, wait_for
from e2e_runs import FINAL, prepare, run_to_the_end
from kubeapi import ApiError, KubeApi, KubeConfig
from operator_up import NAMESPACE, OperatorState, down, ensure_host_claim, helm_uninstall, up
from throttle_proxy import ThrottledProxy

from devcluster import Cluster
from kubejury.files.weight_cache import COMPLETE_MARKER, model_dir
from kubejury.testing.fault_server import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

RATE = 1 << 20  # bytes per second through the proxy
DOWNLOAD_S = 32
WEIGHT_BYTES = RATE * DOWNLOAD_S
BUCKET = "weights"
SOURCE = f"s3://{BUCKET}/alpha-8b"
CACHE_CLAIM = "kj-weights"
CACHE_MOUNT = "/models/cache"
KEYS = "weights-keys"
TEST_NS = "e2e-prefetch"
RUN = "prefetched"
HELD_BEFORE_READY_LIMIT_S = 20.0


@pytest.fixture(scope="module")
def weights_link() -> Iterator[tuple[str, bytes]]:
    """moto on loopback with the model's weights, behind the throttled proxy: (proxy URL, weights)."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    client.create_bucket(Bucket=BUCKET)
    weights = os.urandom(WEIGHT_BYTES)
    client.put_object(Bucket=BUCKET, Key="alpha-8b/model.safetensors", Body=weights)
    client.put_object(
        Bucket=BUCKET, Key="alpha-8b/config.json", Body=b'{"architectures": ["LlamaForCausalLM"]}'
    )
    proxy = ThrottledProxy(("127.0.0.1", port), RATE)
    try:
        yield proxy.url, weights
    finally:
        proxy.close()
        server.stop()


async def _keys_secret(api: KubeApi, namespace: str) -> None:
    with contextlib.suppress(ApiError):
        await api.create("namespaces", None, {"metadata": {"name": namespace}})
    secret = {
        "metadata": {"name": KEYS, "namespace": namespace},
        "stringData": {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
    }
    await api.apply("secrets", namespace, secret)


@pytest.fixture(scope="module")
def prefetch_operator(kube_cluster: Cluster, weights_link: tuple[str, bytes]) -> Iterator[OperatorState]:
    """The chart with a model cache claim and prefetch on, its S3 endpoint the throttled link."""
    # The cluster's work directory, as conftest.kube_operator takes it: the results claim's
    # PersistentVolume, made by the first module on this cluster, points into it (never under /tmp,
    # which Job pods mount over).
    state_dir = kube_cluster.state_dir.resolve()
    work = state_dir
    if state_dir.is_relative_to("/tmp"):
        digest = hashlib.sha1(str(state_dir).encode()).hexdigest()[:10]
        work = Path.home() / ".cache" / "kubejury" / "e2e" / f"work-{digest}"

    async def keys_everywhere() -> None:
        async with KubeApi(KubeConfig.load(kube_cluster.kubeconfig)) as api:
            for namespace in (NAMESPACE, TEST_NS):
                await _keys_secret(api, namespace)

    asyncio.run(keys_everywhere())
    values = {
        "modelCache.claimName": CACHE_CLAIM,
        "modelCache.prefetch": "true",
        "storage.s3Endpoint": weights_link[0],
        "storage.credentials.secretName": KEYS,
        "security.storageRoots[0]": f"s3://{BUCKET}",
    }
    try:
        yield asyncio.run(
            up(kube_cluster.state_dir, work_dir=work, reconcile_interval=2.0, extra_values=values)
        )
    finally:
        down(work)
        helm_uninstall(kube_cluster.kubeconfig)
        if work != state_dir and not os.environ.get("KUBEJURY_E2E_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


def evalrun() -> dict[str, Any]:
    """One vLLM model on an H100 with s3:// weights, judged by itself (one server, no other weights)."""
    return {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {"name": RUN, "namespace": TEST_NS},
        "spec": {
            "benchmark": {
                "uri": f"{RESULTS_URI}/benchmark-ru-sample.jsonl",
                "filters": {"domains": ["law"], "levels": [1, 2, 3], "limitPerCell": 1},
            },
            "models": [{"name": "alpha", "source": SOURCE, "parameters": "8B"}],
            "judges": [{"name": "judge-alpha", "source": SOURCE, "parameters": "8B", "sameAs": "alpha"}],
            "series": [{"name": "primary", "temperature": 0}],
            "scoring": {"bootstrapSamples": 50},
            "storage": {"uri": RESULTS_URI, "persistentVolumeClaim": "kubejury-results"},
            "maxConcurrentModels": 1,
            "cleanupPolicy": "Retain",
        },
    }


async def _prefetch_job(api: KubeApi) -> dict[str, Any]:
    jobs = await api.list("jobs", TEST_NS, labels="kubejury.io/component=prefetch")
    assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
    return jobs[0]


async def test_a_prefetched_model_holds_its_gpus_seconds_not_the_download_before_ready(
    prefetch_operator: OperatorState, weights_link: tuple[str, bytes], kube_cluster: Cluster
) -> None:
    state = prefetch_operator
    cache_dir = Path(state.work_dir) / "volumes" / CACHE_CLAIM
    async with KubeApi(KubeConfig.load(kube_cluster.kubeconfig)) as api:
        await prepare(api, state, TEST_NS, RUN, hosted_key=False)
        await ensure_host_claim(api, TEST_NS, CACHE_CLAIM, cache_dir)
        await api.create("evalruns", TEST_NS, evalrun())

        async def gpu_entry() -> dict[str, Any] | None:
            status = await status_of(api, TEST_NS, RUN)
            alpha = ((status.get("gpu") or {}).get("servers") or {}).get("alpha") or {}
            return status if alpha.get("readySince") or alpha.get("heldGpuSeconds") else None

        status = await wait_for(
            gpu_entry,
            DOWNLOAD_S * 4 + 120,
            "the prefetched server to be Ready",
            lambda: describe_namespace(api, TEST_NS, state.operator_log),
        )
        job = await _prefetch_job(api)
        deployments = await api.list("deployments", TEST_NS, labels="kubejury.io/component=server")
        final = await run_to_the_end(api, state, TEST_NS, RUN)

    # the download really took the link's time, in a Job that asked for no GPU
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert not any("gpu" in key for part in container["resources"].values() for key in part)
    download_s = parse_time(job["status"]["completionTime"]) - parse_time(job["status"]["startTime"])
    assert download_s >= 0.8 * DOWNLOAD_S, download_s
    # the server was created only after its weights were in the cache, and loads them from there
    [deployment] = deployments
    created = parse_time(deployment["metadata"]["creationTimestamp"])
    assert created >= parse_time(job["status"]["completionTime"])
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    folder = model_dir(CACHE_MOUNT, SOURCE, "")
    assert args[args.index("--model") + 1] == folder
    on_disk = cache_dir / Path(folder).relative_to(CACHE_MOUNT)
    assert json.loads((on_disk / COMPLETE_MARKER).read_text())["source"] == SOURCE
    digest = hashlib.sha256((on_disk / "model.safetensors").read_bytes()).hexdigest()
    assert digest == hashlib.sha256(weights_link[1]).hexdigest()
    # bring-up held: seconds of GPU time before Ready, against the download a server would have waited for
    alpha = status["gpu"]["servers"]["alpha"]
    gpus = int(alpha["gpus"])
    held_before_ready = float(alpha["bringUpGpuSeconds"])
    without_prefetch = download_s * gpus
    print(
        f"\nprefetch e2e: download {download_s:.1f} s at {RATE / 2**20:g} MiB/s ({WEIGHT_BYTES / 2**20:g} MiB); "
        f"bring-up held {held_before_ready:.1f} GPU-s on {gpus} GPU(s) with the prefetch, "
        f">= {without_prefetch:.1f} GPU-s without it"
    )
    assert gpus >= 1
    assert float(alpha["bringUpSeconds"]) < HELD_BEFORE_READY_LIMIT_S
    assert held_before_ready < HELD_BEFORE_READY_LIMIT_S * gpus
    assert held_before_ready < without_prefetch
    assert final["phase"] in FINAL
    assert final["phase"] == "Succeeded", final.get("conditions")
    assert final["gpu"]["bringUpGpuSeconds"] == pytest.approx(held_before_ready, abs=0.2)
