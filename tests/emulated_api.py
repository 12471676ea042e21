"""The real Kubernetes gateway talking HTTP to KMock's API emulator on loopback.

Why this module exists: the gateway's own tests, the contract tests that hold the in-memory fake to
the gateway's semantics, and the Secret-cache test each need the same emulator serving the same
kinds, with a :class:`~kubejury_operator.gateway.KubeGateway` pointed at it; this is that set-up once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import kmock

from kubejury_operator.gateway import ApiCredentials, KubeGateway

#: (API path, kind, namespaced) of every kind the emulator serves.
EMULATED_KINDS: tuple[tuple[str, str, bool], ...] = (
    ("v1/configmaps", "ConfigMap", True),
    ("v1/secrets", "Secret", True),
    ("v1/events", "Event", True),
    ("v1/nodes", "Node", False),
    ("apps/v1/deployments", "Deployment", True),
    ("kubejury.io/v1alpha1/evalruns", "EvalRun", True),
)


@asynccontextmanager
async def emulated_gateway(
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[tuple[KubeGateway, kmock.KubernetesEmulator]]:
    """A gateway (reading ``clock``) and the emulator it talks to, serving :data:`EMULATED_KINDS`."""
    async with kmock.KubernetesEmulator() as k8s, kmock.Server(k8s) as server:
        for path, kind, namespaced in EMULATED_KINDS:
            k8s.resources[path] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs={"list", "get", "create"}
            )
        async with KubeGateway(ApiCredentials(server=str(server.url)), clock=clock) as gateway:
            yield gateway, k8s
