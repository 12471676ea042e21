"""The Kubernetes gateway against KMock's API emulator on loopback (real HTTP, real JSON).

Checks the semantics the operator relies on, independent of the emulator's gaps: create reports
"already there" on 409, delete is idempotent on 404, list filters by labels itself (KMock ignores
label selectors), merge patches reach the status subresource, Secrets expose keys only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest

from emulated_api import emulated_gateway
from factories import build_evalrun
from kubejury_operator.gateway import FIELD_MANAGER, USER_AGENT, ApiCredentials, KubeGateway, selector

pytestmark = pytest.mark.integration


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[KubeGateway, kmock.KubernetesEmulator]]:
    async with emulated_gateway() as (gw, k8s):
        yield gw, k8s


def configmap(name: str, run: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "labels": {"kubejury.io/run": run}},
        "data": {"k": "v"},
    }


async def test_create_conflict_list_filter_delete(
    gateway: tuple[KubeGateway, kmock.KubernetesEmulator],
) -> None:
    gw, _ = gateway
    assert await gw.create(configmap("a", "r1")) is True
    assert await gw.create(configmap("a", "r1")) is False  # 409: already there
    assert await gw.create(configmap("b", "r2")) is True
    listed = await gw.list_objects("ConfigMap", "ns", {"kubejury.io/run": "r1"})
    assert [o["metadata"]["name"] for o in listed] == ["a"]
    assert await gw.delete("ConfigMap", "ns", "a") is True
    assert await gw.delete("ConfigMap", "ns", "a") is False  # 404: already gone
    assert await gw.get("ConfigMap", "ns", "a") is None


async def test_scale_and_status_patch(gateway: tuple[KubeGateway, kmock.KubernetesEmulator]) -> None:
    gw, _ = gateway
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"replicas": 1},
    }
    await gw.create(dep)
    await gw.scale("Deployment", "ns", "d", 0)
    assert (await gw.get("Deployment", "ns", "d") or {})["spec"]["replicas"] == 0
    run = build_evalrun("r", namespace="ns")
    await gw.create(run)
    await gw.patch_status("EvalRun", "ns", "r", {"phase": "Generating", "conditions": [{"type": "Ready"}]})
    await gw.patch_status("EvalRun", "ns", "r", {"phase": "Judging"})
    status = (await gw.get("EvalRun", "ns", "r") or {})["status"]
    assert status == {"phase": "Judging", "conditions": [{"type": "Ready"}]}
    assert await gw.patch("Deployment", "ns", "missing", {"spec": {"replicas": 1}}) is None


async def test_secret_keys_and_events(gateway: tuple[KubeGateway, kmock.KubernetesEmulator]) -> None:
    gw, k8s = gateway
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns"},
        "data": {"token": "c2stdGVzdA=="},
    }
    await gw.create(secret)
    assert await gw.secret_keys("ns", "s") == frozenset({"token"})
    assert await gw.secret_keys("ns", "absent") is None
    assert await gw.secret_data("ns", "s") == {"token": "sk-test"}
    involved = build_evalrun("r", namespace="ns", uid="u")
    await gw.post_event(involved, "Normal", "Generating", "Generating answers.")
    events = [obj.raw for (res, _, _), obj in k8s.objects.items() if res.plural == "events"]
    assert len(events) == 1
    assert events[0]["involvedObject"]["uid"] == "u" and events[0]["reason"] == "Generating"


def test_selector_and_credentials() -> None:
    assert selector({"b": "2", "a": "1"}) == "a=1,b=2"
    creds = ApiCredentials(server="https://k8s:6443", token="t")
    assert creds.headers() == {"Authorization": "Bearer t", "User-Agent": USER_AGENT}
    assert ApiCredentials(server="http://127.0.0.1:1").ssl_context() is False


async def test_every_write_names_the_operators_one_field_manager(
    gateway: tuple[KubeGateway, kmock.KubernetesEmulator],
) -> None:
    gw, k8s = gateway
    await gw.create(configmap("a", "r1"))
    await gw.patch("ConfigMap", "ns", "a", {"data": {"k": "w"}})
    await gw.get("ConfigMap", "ns", "a")
    seen = [
        (str(r.method).rsplit(".", 1)[-1].upper(), dict(r.params), r.headers.get("User-Agent"))
        for r in k8s._requests
    ]
    writes = [(method, params) for method, params, _ in seen if method in ("POST", "PATCH")]
    assert writes == [("POST", {"fieldManager": FIELD_MANAGER}), ("PATCH", {"fieldManager": FIELD_MANAGER})]
    assert [params for method, params, _ in seen if method == "GET"] == [{}]  # a read names none
    assert {agent for _, _, agent in seen} == {USER_AGENT}
