"""Fixtures for the operator e2e tests: KMock API server, simulated cluster, stub model server, kopf."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import kmock
import pytest
from e2e_cluster import SimulatedCluster, declare_resources
from e2e_stub_openai import StubOpenAI

RECONCILE_INTERVAL_S = 0.5
OperatorFactory = Callable[[], contextlib.AbstractAsyncContextManager[None]]


@pytest.fixture
async def stub() -> AsyncIterator[StubOpenAI]:
    # Model quality the stub's verdicts reflect: "alpha" answers best, so it must lead the ranking.
    async with StubOpenAI(quality={"alpha": 9, "beta": 6, "judge-a": 5}) as server:
        yield server


@pytest.fixture
async def cluster(stub: StubOpenAI, tmp_path: Path) -> AsyncIterator[SimulatedCluster]:
    async with kmock.KubernetesEmulator() as k8s, kmock.Server(k8s) as server:
        declare_resources(k8s)
        simulated = SimulatedCluster(k8s, str(server.url), stub.url, tmp_path)
        async with simulated.running():
            yield simulated


@pytest.fixture
def operator(cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch) -> OperatorFactory:
    """``async with operator():`` runs the real kopf operator in-process until the block ends."""
    monkeypatch.setenv("KUBEJURY_KUBE_SERVER", cluster.api)
    import kopf

    from kubejury_operator import handlers

    # Its own registry with a short reconcile interval, so a whole run completes in about a minute.
    registry = handlers.register(kopf.OperatorRegistry(), interval=RECONCILE_INTERVAL_S)

    @contextlib.asynccontextmanager
    async def running() -> AsyncIterator[None]:
        stop = asyncio.Event()
        ready = asyncio.Event()
        task = asyncio.create_task(
            kopf.operator(
                clusterwide=True,
                standalone=True,
                memo=kopf.Memo(),
                registry=registry,
                stop_flag=stop,
                ready_flag=ready,
            )
        )
        try:
            await asyncio.wait_for(ready.wait(), timeout=30)
            yield
        finally:
            stop.set()
            try:
                await asyncio.wait_for(task, timeout=30)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    return running
