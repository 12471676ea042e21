"""The chart's default tenant policy as the local tools read it, checked against the real ``helm template``.

``kubejury validate`` and ``kubejury plan --manifests`` apply, without ``--settings``, the allow-lists a
default install of the chart gives the operator (issue 28, section 1). They read them from
``charts/kubejury/values.yaml`` (:mod:`kubejury_operator.chart_defaults`); these tests hold that reading
to what helm itself writes into the settings ConfigMap, for the default values and for values that
exercise every branch of the template, so the two cannot drift apart silently.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from chart_harness import CHART, render, settings_data
from kubejury.errors import InputError
from kubejury_operator import chart_defaults
from kubejury_operator.tenancy import TenantPolicy

POLICY_PREFIX = "KUBEJURY_ALLOWED_"

#: Values that take every branch of the policy part of the settings template: a results claim (adds a
#: file:// root and a claim), a model cache claim, duplicates (uniq), an image digest, extra lists.
EVERY_BRANCH: dict[str, Any] = {
    "image": {"repository": "registry.example/kubejury", "digest": "sha256:" + "a" * 64},
    "storage": {
        "resultsClaimName": "kubejury-results",
        "resultsMountPath": "/var/lib/kubejury/results",
        "s3Endpoint": "http://minio.minio:9000",
    },
    "modelCache": {"claimName": "model-cache"},
    "security": {
        "storageRoots": ["s3://evals/{namespace}", "file:///var/lib/kubejury/results"],
        "allowedJobImages": [
            "registry.example/kubejury-extra:*",
            "registry.example/kubejury@sha256:" + "a" * 64,
        ],
        "allowedClaims": ["shared-weights", "model-cache"],
        "allowedServerFlags": ["--trust-remote-code"],
        "storageEndpoints": ["https://s3.example.com", "http://minio.minio:9000"],
        "allowedNodeSelectorKeys": ["nvidia.com/gpu.product", "example.com/pool"],
    },
}

#: What tests/e2e/operator_up.py installs: the results claim and a tag instead of the appVersion.
E2E_LIKE: dict[str, Any] = {
    "image": {"tag": "dev"},
    "storage": {"resultsClaimName": "kubejury-results", "resultsMountPath": "/var/lib/kubejury/results"},
}


def merged(base: Any, override: Any) -> Any:
    """Values as helm merges them: mappings key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merged(base.get(key), value)
        return out
    return copy.deepcopy(override)


def helm_policy_env(tmp_path: Path, values: dict[str, Any] | None = None) -> dict[str, str]:
    data = settings_data(render(tmp_path, values))
    return {key: value for key, value in data.items() if key.startswith(POLICY_PREFIX)}


def chart_metadata() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    return loaded


def default_values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    return loaded


def test_without_values_the_policy_env_is_byte_for_byte_what_helm_renders_into_the_settings_configmap(
    tmp_path: Path,
) -> None:
    assert chart_defaults.default_policy_env() == helm_policy_env(tmp_path)


@pytest.mark.parametrize("values", [EVERY_BRANCH, E2E_LIKE], ids=["every-branch", "e2e-like"])
def test_for_any_values_the_policy_env_is_what_helm_renders_into_the_settings_configmap(
    values: dict[str, Any], tmp_path: Path
) -> None:
    ours = chart_defaults.policy_env(merged(default_values(), values), chart_metadata())
    assert ours == helm_policy_env(tmp_path, values)


def test_the_default_policy_allows_only_the_charts_own_image_and_no_storage_root_claim_or_extra_flag() -> (
    None
):
    policy = TenantPolicy.from_env(chart_defaults.default_policy_env())
    assert policy.storage_roots == ()
    assert policy.claims == ()
    assert policy.job_images == (f"ghcr.io/kubejury/kubejury:{chart_metadata()['appVersion']}",)
    assert policy.server_flags == ()


def test_a_checkout_without_the_chart_gives_an_error_naming_the_missing_file_and_the_settings_option(
    tmp_path: Path,
) -> None:
    with pytest.raises(InputError) as refused:
        chart_defaults.default_policy_env(tmp_path / "no-chart")
    message = str(refused.value)
    assert str(tmp_path / "no-chart" / "values.yaml") in message
    assert "--settings" in message


def test_a_values_file_that_is_not_a_mapping_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text("- just\n- a list\n", encoding="utf-8")
    (tmp_path / "Chart.yaml").write_text("appVersion: '1'\n", encoding="utf-8")
    with pytest.raises(InputError) as refused:
        chart_defaults.default_policy_env(tmp_path)
    assert str(tmp_path / "values.yaml") in str(refused.value)
