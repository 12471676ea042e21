"""The in-memory FakeKubeApi keeps the real gateway's semantics: one contract, run against both.

Every ``contract`` test runs twice: against :class:`FakeKubeApi` and against the real
:class:`KubeGateway` speaking HTTP to KMock's API emulator on loopback (as
tests/integration/operator/test_gateway.py does), so a unit test that passes on the fake would
pass on the gateway. The fake's test-side helpers (seeding, call records, refusals) are checked
on the fake alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from emulated_api import emulated_gateway
from factories import build_evalrun
from kubejury_operator.gateway import GatewayError
from kubejury_operator.kube_api import KubeApi
from kubejury_operator.testing import Call, FakeKubeApi, merge_patch

LEAK = "judge failed: 401 from https://bob:pa55word@api.example/v1 echoing Bearer sk-abcdefghijkl0123"


@pytest.fixture(params=["fake", "gateway"])
async def api(request: pytest.FixtureRequest) -> AsyncIterator[KubeApi]:
    if request.param == "fake":
        yield FakeKubeApi()
        return
    async with emulated_gateway() as (gateway, _emulator):
        yield gateway


def configmap(name: str, *, namespace: str = "ns", labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ns"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"replicas": replicas},
    }


def names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(str(o["metadata"]["name"]) for o in objects)


# ------------------------------------------------------------------------------ the contract


async def test_contract_create_answers_false_for_a_name_that_exists_and_get_none_when_missing(
    api: KubeApi,
) -> None:
    assert await api.create(configmap("a")) is True
    assert await api.create({**configmap("a"), "data": {"k": "other"}}) is False
    got = await api.get("ConfigMap", "ns", "a")
    assert got is not None and got["data"] == {"k": "v"}
    assert await api.get("ConfigMap", "ns", "absent") is None
    assert await api.get("ConfigMap", "other-ns", "a") is None


async def test_contract_patch_is_a_json_merge_patch_where_null_deletes_a_key(api: KubeApi) -> None:
    await api.create({**configmap("a"), "data": {"keep": "1", "drop": "2", "change": "3"}})
    patched = await api.patch("ConfigMap", "ns", "a", {"data": {"drop": None, "change": "new", "add": "4"}})
    expected = {"keep": "1", "change": "new", "add": "4"}
    assert patched is not None and patched["data"] == expected
    assert (await api.get("ConfigMap", "ns", "a") or {})["data"] == expected


async def test_contract_patch_of_a_missing_object_answers_none_and_without_body_an_empty_dict(
    api: KubeApi,
) -> None:
    assert await api.patch("Deployment", "ns", "missing", {"spec": {"replicas": 1}}) is None
    await api.create(deployment("d"))
    assert await api.patch("Deployment", "ns", "d", {"spec": {"paused": True}}, want_body=False) == {}
    assert (await api.get("Deployment", "ns", "d") or {})["spec"] == {"replicas": 1, "paused": True}


async def test_contract_scale_sets_the_replicas_and_leaves_the_rest_of_the_spec(api: KubeApi) -> None:
    await api.create({**deployment("d", replicas=1), "spec": {"replicas": 1, "selector": {"app": "d"}}})
    await api.scale("Deployment", "ns", "d", 0)
    assert (await api.get("Deployment", "ns", "d") or {})["spec"] == {"replicas": 0, "selector": {"app": "d"}}


async def test_contract_status_patches_merge_through_the_status_subresource(api: KubeApi) -> None:
    await api.create(build_evalrun("r", namespace="ns"))
    await api.patch_status("EvalRun", "ns", "r", {"phase": "Generating", "conditions": [{"type": "Ready"}]})
    await api.patch_status("EvalRun", "ns", "r", {"phase": "Judging"})
    await api.patch(
        "EvalRun", "ns", "r", {"status": {"startedAt": "2026-12-03T08:00:00Z"}}, subresource="status"
    )
    run = await api.get("EvalRun", "ns", "r") or {}
    assert run["status"] == {
        "phase": "Judging",
        "conditions": [{"type": "Ready"}],
        "startedAt": "2026-12-03T08:00:00Z",
    }
    assert run["spec"] == build_evalrun("r", namespace="ns")["spec"]


async def test_contract_a_status_carries_no_credential_an_error_echoed(api: KubeApi) -> None:
    await api.create(build_evalrun("r", namespace="ns"))
    await api.patch_status("EvalRun", "ns", "r", {"conditions": [{"type": "Ready", "message": LEAK}]})
    status = str((await api.get("EvalRun", "ns", "r") or {})["status"])
    assert "pa55word" not in status and "sk-abcdefghijkl0123" not in status
    assert "api.example" in status


async def test_contract_delete_answers_false_when_the_object_is_already_gone(api: KubeApi) -> None:
    await api.create(configmap("a"))
    assert await api.delete("ConfigMap", "ns", "a") is True
    assert await api.delete("ConfigMap", "ns", "a") is False
    assert await api.get("ConfigMap", "ns", "a") is None


async def test_contract_list_keeps_only_objects_of_the_namespace_carrying_every_label(api: KubeApi) -> None:
    await api.create(configmap("a", labels={"kubejury.io/run": "r1", "role": "x"}))
    await api.create(configmap("b", labels={"kubejury.io/run": "r2", "role": "x"}))
    await api.create(configmap("c", labels={"kubejury.io/run": "r1"}))
    await api.create(configmap("d", namespace="elsewhere", labels={"kubejury.io/run": "r1", "role": "x"}))
    assert names(await api.list_objects("ConfigMap", "ns", {"kubejury.io/run": "r1", "role": "x"})) == ["a"]
    assert names(await api.list_objects("ConfigMap", "ns", {"kubejury.io/run": "r1"})) == ["a", "c"]
    assert names(await api.list_objects("ConfigMap", "ns")) == ["a", "b", "c"]
    assert names(await api.list_objects("ConfigMap", None, {"role": "x"})) == ["a", "b", "d"]


async def test_contract_nodes_are_listed_cluster_wide(api: KubeApi) -> None:
    for name in ("gpu-1", "cpu-1"):
        await api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assert names(await api.list_nodes()) == ["cpu-1", "gpu-1"]


async def test_contract_a_secret_shows_its_keys_and_decoded_values_from_data_and_string_data(
    api: KubeApi,
) -> None:
    metadata = {"name": "s", "namespace": "ns"}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": {"token": "c2stdGVzdA=="}}
    await api.create({**secret, "stringData": {"region": "eu"}})
    assert await api.secret_keys("ns", "s") == frozenset({"token", "region"})
    assert await api.secret_data("ns", "s") == {"token": "sk-test", "region": "eu"}
    assert await api.secret_keys("ns", "absent") is None
    assert await api.secret_data("ns", "absent") is None


async def test_contract_an_event_names_its_object_and_carries_no_credential(api: KubeApi) -> None:
    involved = build_evalrun("r", namespace="ns", uid="u-1")
    await api.post_event(involved, "Warning", "StageFailed", LEAK)
    (event,) = await api.list_objects("Event", "ns")
    assert event["involvedObject"]["uid"] == "u-1" and event["involvedObject"]["name"] == "r"
    assert (event["type"], event["reason"]) == ("Warning", "StageFailed")
    assert "pa55word" not in event["message"] and "sk-abcdefghijkl0123" not in event["message"]


# ------------------------------------------------------------------------------ the fake alone


def test_the_fake_satisfies_the_kube_api_protocol() -> None:
    _: KubeApi = FakeKubeApi()  # mypy --strict checks the assignment: every verb, same signature
    assert isinstance(_, FakeKubeApi)


def test_merge_patch_follows_the_rfc_7386_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch(["a"], {"a": "b"}) == {"a": "b"}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}


async def test_seeded_objects_get_a_uid_and_are_read_back_by_kind_without_recording_a_call() -> None:
    fake = FakeKubeApi(configmap("a"), configmap("b", namespace="other"), deployment("d"))
    assert names(fake.objects("ConfigMap")) == ["a", "b"]
    assert names(fake.objects("ConfigMap", "other")) == ["b"]
    assert all(obj["metadata"]["uid"] for obj in fake.objects("ConfigMap"))
    assert fake.calls == []
    assert await fake.create(configmap("a")) is False


async def test_answers_are_copies_so_a_caller_cannot_change_the_store() -> None:
    fake = FakeKubeApi(configmap("a"))
    got = await fake.get("ConfigMap", "ns", "a") or {}
    got["data"]["k"] = "changed"
    assert fake.objects("ConfigMap")[0]["data"] == {"k": "v"}


async def test_every_verb_is_recorded_with_its_kind_namespace_and_name() -> None:
    fake = FakeKubeApi()
    await fake.secret_keys("ns", "creds")
    await fake.list_nodes()
    await fake.delete("Job", "ns", "j")
    assert fake.calls == [
        Call("secret_keys", "Secret", "ns", "creds"),
        Call("list_nodes", "Node"),
        Call("delete", "Job", "ns", "j"),
    ]
    assert fake.verbs() == ["secret_keys", "list_nodes", "delete"]


async def test_a_failed_verb_raises_the_api_servers_status_until_healed() -> None:
    fake = FakeKubeApi()
    fake.fail("create", 403, kind="Job", reason="Forbidden", message='jobs.batch is forbidden: User "x"')
    with pytest.raises(GatewayError) as refused:
        await fake.create(
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
        )
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")
    assert "jobs.batch is forbidden" in refused.value.api_message
    assert await fake.create(configmap("a")) is True  # another kind is not refused
    fake.heal("create", kind="Job")
    assert await fake.create(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    )


async def test_a_failure_without_a_kind_refuses_the_verb_for_every_kind() -> None:
    fake = FakeKubeApi()
    fake.fail("patch_status", 422, reason="Invalid")
    with pytest.raises(GatewayError, match="422"):
        await fake.patch_status("EvalRun", "ns", "r", {"phase": "Failed"})


async def test_events_are_readable_by_reason() -> None:
    fake = FakeKubeApi()
    run = build_evalrun("r", namespace="ns")
    await fake.post_event(run, "Normal", "Generating", "Generating answers.")
    await fake.post_event(run, "Warning", "StageFailed", "boom")
    assert [e["message"] for e in fake.events("StageFailed")] == ["boom"]
    assert len(fake.events()) == 2


async def test_an_object_without_a_namespace_lands_in_default_and_close_is_remembered() -> None:
    fake = FakeKubeApi()
    await fake.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert (await fake.get("ConfigMap", "default", "a") or {})["metadata"]["namespace"] == "default"
    await fake.close()
    assert fake.closed


async def test_a_kind_the_gateway_cannot_address_and_an_object_without_a_name_are_refused_by_field() -> None:
    fake = FakeKubeApi()
    with pytest.raises(KeyError, match="kind: 'CronJob'"):
        await fake.get("CronJob", "ns", "c")
    with pytest.raises(ValueError, match=r"metadata\.name"):
        fake.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
