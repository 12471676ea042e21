"""The gateway reads a Secret at most once per TTL while it exists, and a missing one every time:
an EvalRun waiting or running costs about one Secret read per 5 minutes, not one per reconcile.

The real :class:`KubeGateway` speaks HTTP to KMock's API emulator on loopback, and the reads are
counted from the requests the emulator received; the test only moves the gateway's clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import kmock
import pytest

from emulated_api import emulated_gateway
from kubejury_operator.gateway import SECRET_TTL_SECONDS, KubeGateway


@dataclass
class ManualClock:
    """A monotonic clock that moves only when the test says so."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class EmulatedCluster:
    """The gateway under test, the emulator it talks to and the clock it reads."""

    gateway: KubeGateway
    emulator: kmock.KubernetesEmulator
    clock: ManualClock

    def secret_reads(self, name: str) -> int:
        """How many times the emulator was asked for the Secret ``name`` (a GET of that object)."""
        return sum(
            1
            for request in self.emulator
            if request.action == kmock.action.FETCH
            and request.resource is not None
            and request.resource.plural == "secrets"
            and request.name == name
        )


@pytest.fixture
async def cluster() -> AsyncIterator[EmulatedCluster]:
    clock = ManualClock()
    async with emulated_gateway(clock=clock) as (gateway, k8s):
        yield EmulatedCluster(gateway, k8s, clock)


def secret(name: str, token_base64: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ns"},
        "data": {"token": token_base64},
    }


async def test_a_present_secret_is_read_once_per_ttl_and_a_missing_one_every_time(
    cluster: EmulatedCluster,
) -> None:
    gw = cluster.gateway
    assert await gw.secret_keys("ns", "key") is None
    assert await gw.secret_keys("ns", "key") is None
    assert cluster.secret_reads("key") == 2  # missing: asked again, so a waiting run starts once it exists
    assert await gw.create(secret("key", "c2stMQ=="))
    assert await gw.secret_keys("ns", "key") == frozenset({"token"})
    cluster.clock.now += SECRET_TTL_SECONDS / 2
    assert await gw.secret_data("ns", "key") == {"token": "sk-1"}
    assert cluster.secret_reads("key") == 3  # within the TTL: no request
    await gw.patch("Secret", "ns", "key", {"data": {"token": "c2stMg=="}})  # rotated
    cluster.clock.now += SECRET_TTL_SECONDS
    assert await gw.secret_data("ns", "key") == {"token": "sk-2"}
    assert cluster.secret_reads("key") == 4
