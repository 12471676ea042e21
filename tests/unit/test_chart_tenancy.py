"""The chart's tenancy objects (issue 11): user roles, the label policy, the allow-lists it passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chart_harness import CHART, NEWEST, of_kind, render, run_helm
from kubejury_operator.tenancy import DEFAULT_NODE_SELECTOR_KEYS, TenantPolicy


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(
        tmp_path_factory.mktemp("v"),
        {
            "storage": {"resultsClaimName": "results"},
            "security": {"allowedServerFlags": ["--trust-remote-code"]},
        },
        "--kube-version",
        NEWEST,
    )


def settings(objects: list[dict[str, Any]]) -> dict[str, str]:
    (cm,) = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-settings")]
    return dict(cm["data"])


def test_user_roles_aggregate_into_edit_and_view_and_grant_no_secrets(objects: list[dict[str, Any]]) -> None:
    roles = {r["metadata"]["name"]: r for r in of_kind(objects, "ClusterRole")}
    editor, viewer = roles["kj-kubejury-evalrun-editor"], roles["kj-kubejury-evalrun-viewer"]
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    for role in (editor, viewer):
        assert {g for rule in role["rules"] for g in rule["apiGroups"]} == {"kubejury.io"}
    assert "create" in editor["rules"][0]["verbs"]
    assert not {"create", "update", "patch", "delete"} & {v for r in viewer["rules"] for v in r["verbs"]}


def test_only_the_operator_may_label_pods_managed_by_kubejury(objects: list[dict[str, Any]]) -> None:
    policies = of_kind(objects, "ValidatingAdmissionPolicy")
    bindings = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert len(policies) == 2 and {b["spec"]["policyName"] for b in bindings} == {
        p["metadata"]["name"] for p in policies
    }
    resources = {
        r
        for p in policies
        for rule in p["spec"]["matchConstraints"]["resourceRules"]
        for r in rule["resources"]
    }
    assert {"pods", "deployments", "replicasets", "jobs"} <= resources
    for policy in policies:
        (check,) = policy["spec"]["validations"]
        assert "system:serviceaccount:kubejury:kj-kubejury" in check["expression"]
        assert "app.kubernetes.io/managed-by" in check["expression"]
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)


def test_network_policy_is_on_by_default(objects: list[dict[str, Any]]) -> None:
    assert [p for p in of_kind(objects, "NetworkPolicy") if p["metadata"]["name"].endswith("-inference")]


def test_allow_lists_reach_the_operator_with_the_charts_own_image_claim_and_root(
    objects: list[dict[str, Any]],
) -> None:
    data = settings(objects)
    assert json.loads(data["KUBEJURY_ALLOWED_STORAGE_ROOTS"]) == ["file:///var/lib/kubejury/results"]
    assert json.loads(data["KUBEJURY_ALLOWED_CLAIMS"]) == ["results"]
    assert len(json.loads(data["KUBEJURY_ALLOWED_JOB_IMAGES"])) == 1
    assert json.loads(data["KUBEJURY_ALLOWED_SERVER_FLAGS"]) == ["--trust-remote-code"]


def test_defaults_allow_no_storage_root_without_a_results_claim(tmp_path: Path) -> None:
    data = settings(render(tmp_path, {}))
    assert json.loads(data["KUBEJURY_ALLOWED_STORAGE_ROOTS"]) == []
    assert json.loads(data["KUBEJURY_ALLOWED_SERVER_FLAGS"]) == []


def test_storage_endpoints_are_the_charts_own_store_plus_those_it_lists(tmp_path: Path) -> None:
    values = {
        "storage": {"s3Endpoint": "http://minio.minio:9000"},
        "security": {"storageEndpoints": ["https://ceph.storage:443"]},
    }
    data = settings(render(tmp_path, values))
    assert json.loads(data["KUBEJURY_ALLOWED_STORAGE_ENDPOINTS"]) == [
        "http://minio.minio:9000",
        "https://ceph.storage:443",
    ]
    assert json.loads(settings(render(tmp_path, {}))["KUBEJURY_ALLOWED_STORAGE_ENDPOINTS"]) == []


def test_the_default_node_selector_keys_are_the_policys_own_defaults(tmp_path: Path) -> None:
    data = settings(render(tmp_path, {}))
    policy = TenantPolicy.from_env(data)
    assert policy.node_selector_keys == DEFAULT_NODE_SELECTOR_KEYS


@pytest.mark.parametrize("key", ["fullnameOverride", "nameOverride"])
def test_a_name_override_that_is_no_dns_label_is_refused_by_the_charts_schema(
    tmp_path: Path, key: str
) -> None:
    result = run_helm("template", "kj", str(CHART), values={key: "Evil_Name"}, tmp=tmp_path)
    assert result.returncode != 0
    assert key in result.stderr
