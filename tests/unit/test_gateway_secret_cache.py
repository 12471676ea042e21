"""The gateway reads a Secret at most once per TTL while it exists, and a missing one every time:
an EvalRun waiting or running costs about one Secret read per 5 minutes, not one per reconcile."""

from __future__ import annotations

from typing import Any

from kubejury_operator.gateway import SECRET_TTL_SECONDS, ApiCredentials, KubeGateway


class CountingGateway(KubeGateway):
    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(ApiCredentials(server="https://127.0.0.1:1"), clock=lambda: self.now)
        self.stored: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []

    async def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.gets.append(name)
        return self.stored.get(name)


async def test_a_present_secret_is_read_once_per_ttl_and_a_missing_one_every_time() -> None:
    gw = CountingGateway()
    assert await gw.secret_keys("ns", "key") is None
    assert await gw.secret_keys("ns", "key") is None
    assert gw.gets == ["key", "key"]  # missing: asked again, so a waiting run starts once it exists
    gw.stored["key"] = {"data": {"token": "c2stMQ=="}}
    assert await gw.secret_keys("ns", "key") == frozenset({"token"})
    gw.now += SECRET_TTL_SECONDS / 2
    assert await gw.secret_data("ns", "key") == {"token": "sk-1"}
    assert gw.gets == ["key", "key", "key"]  # within the TTL: no request
    gw.stored["key"] = {"data": {"token": "c2stMg=="}}  # rotated
    gw.now += SECRET_TTL_SECONDS
    assert await gw.secret_data("ns", "key") == {"token": "sk-2"}
    assert len(gw.gets) == 4
