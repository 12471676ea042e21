"""How the dev cluster turns Kueue's release manifests into a local install (devcluster.kueue): webhooks
called at a loopback URL with everything else as released, the Configuration a local manager runs, and
the release objects that are left out. The documents below have the shapes ``kubectl kustomize
config/default`` renders for Kueue v0.17.0, cut down to what the installer reads."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.kueue import (
    CONFIG_KEY,
    FRAMEWORKS,
    METRICS_CERT_DIR,
    KueueInstall,
    Ports,
    condition_status,
    local_client_config,
    manager_args,
    manager_argv,
    manager_configuration,
    release_configuration,
    split_release,
    with_configuration,
    with_local_conversion,
    with_local_webhooks,
)
from devcluster.processes import ClusterError

BASE = "https://127.0.0.1:40123"
CA = "Q0EgYnVuZGxl"
SERVICE = {"name": "kueue-webhook-service", "namespace": "kueue-system"}
EXCLUDED_NAMESPACES = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
    ]
}
RELEASED_CONFIGURATION: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5}},
    "clientConnection": {"qps": 50, "burst": 100},
    "waitForPodsReady": {"timeout": "5m"},
    "integrations": {"frameworks": ["batch/job", "ray.io/rayjob", "pod", "deployment", "statefulset"]},
}


def webhook(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {**SERVICE, "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [
            {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]}
        ],
        **extra,
    }


def crd(name: str, conversion: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "kueue.x-k8s.io", "names": {"plural": name.split(".")[0]}}
    if conversion:
        spec["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"service": {**SERVICE, "path": "/convert"}},
                "conversionReviewVersions": ["v1"],
            },
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": spec,
    }


def obj(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "kueue-system"}, **extra}


MUTATING: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "kueue-mutating-webhook-configuration"},
    "webhooks": [
        webhook("mpod.kb.io", "/mutate--v1-pod", namespaceSelector=EXCLUDED_NAMESPACES),
        webhook("mjob.kb.io", "/mutate-batch-v1-job", objectSelector={"matchLabels": {"a": "b"}}),
    ],
}
DEPLOYMENT = obj(
    "Deployment",
    "kueue-controller-manager",
    spec={
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "manager",
                        "args": ["--config=/controller_manager_config.yaml", "--zap-log-level=2"],
                    }
                ]
            }
        }
    },
)
RELEASE: list[dict[str, Any] | None] = [
    {"kind": "Namespace", "metadata": {"name": "kueue-system"}},
    crd("clusterqueues.kueue.x-k8s.io", conversion=True),
    crd("resourceflavors.kueue.x-k8s.io", conversion=False),
    obj("ServiceAccount", "kueue-controller-manager"),
    {"kind": "ClusterRole", "metadata": {"name": "kueue-manager-role"}},
    obj("ConfigMap", "kueue-manager-config", data={CONFIG_KEY: yaml.safe_dump(RELEASED_CONFIGURATION)}),
    obj("Secret", "kueue-webhook-server-cert"),
    obj("Service", "kueue-webhook-service"),
    DEPLOYMENT,
    {"kind": "APIService", "metadata": {"name": "v1beta2.visibility.kueue.x-k8s.io"}},
    MUTATING,
    None,
]


def test_the_release_is_sorted_into_crds_objects_and_webhooks_and_what_runs_elsewhere_is_left_out() -> None:
    release = split_release(RELEASE)
    assert [c["metadata"]["name"] for c in release.crds] == [
        "clusterqueues.kueue.x-k8s.io",
        "resourceflavors.kueue.x-k8s.io",
    ]
    assert [o["kind"] for o in release.objects] == ["Namespace", "ServiceAccount", "ClusterRole", "ConfigMap"]
    assert release.webhooks == [MUTATING]
    assert release.deployment == DEPLOYMENT
    assert release.skipped == [
        "Secret/kueue-webhook-server-cert",
        "Service/kueue-webhook-service",
        "Deployment/kueue-controller-manager",
        "APIService/v1beta2.visibility.kueue.x-k8s.io",
    ]


@pytest.mark.parametrize("missing", ["Deployment", "ConfigMap"])
def test_a_release_without_the_manager_deployment_or_its_configmap_is_refused(missing: str) -> None:
    with pytest.raises(ClusterError, match="Deployment or its ConfigMap"):
        split_release([d for d in RELEASE if d is None or d["kind"] != missing])


def test_every_webhook_is_called_at_the_loopback_url_with_the_ca_and_keeps_its_selectors_rules_and_policy() -> (
    None
):
    original = copy.deepcopy(MUTATING)
    local = with_local_webhooks(MUTATING, BASE, CA)
    assert original == MUTATING  # the release is not changed in place
    assert [w["clientConfig"] for w in local["webhooks"]] == [
        {"url": f"{BASE}/mutate--v1-pod", "caBundle": CA},
        {"url": f"{BASE}/mutate-batch-v1-job", "caBundle": CA},
    ]
    for released, rewritten in zip(MUTATING["webhooks"], local["webhooks"], strict=True):
        assert {k: v for k, v in rewritten.items() if k != "clientConfig"} == {
            k: v for k, v in released.items() if k != "clientConfig"
        }
    assert local["webhooks"][0]["namespaceSelector"] == EXCLUDED_NAMESPACES
    assert local["webhooks"][1]["objectSelector"] == {"matchLabels": {"a": "b"}}


def test_a_crd_conversion_webhook_is_called_at_the_loopback_url_and_a_crd_without_one_is_unchanged() -> None:
    with_webhook = crd("workloads.kueue.x-k8s.io", conversion=True)
    local = with_local_conversion(with_webhook, BASE, CA)
    assert local["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"{BASE}/convert", "caBundle": CA},
            "conversionReviewVersions": ["v1"],
        },
    }
    assert with_webhook["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    plain = crd("resourceflavors.kueue.x-k8s.io", conversion=False)
    assert with_local_conversion(plain, BASE, CA) == plain


def test_a_client_config_without_a_service_reference_is_refused() -> None:
    with pytest.raises(ClusterError, match="Service reference"):
        local_client_config({"url": "https://example.invalid/x"}, BASE, CA)


def test_the_local_configuration_serves_on_loopback_with_our_certificates_and_three_integrations() -> None:
    release = split_release(RELEASE)
    released = release_configuration(release)
    assert released == RELEASED_CONFIGURATION
    config = manager_configuration(released, Ports(webhook=1001, metrics=1002, health=1003), Path("/s/certs"))
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1001, "certDir": "/s/certs"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:1002"}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:1003"}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["integrations"] == {"frameworks": list(FRAMEWORKS)}
    assert set(FRAMEWORKS) == {"batch/job", "deployment", "pod"}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    assert config["leaderElection"] == {"leaderElect": False, "resourceName": "c1f6bfd2.kueue.x-k8s.io"}
    assert config["namespace"] == "kueue-system"
    assert "waitForPodsReady" not in config
    # What the release tunes is kept.
    assert config["clientConnection"] == {"qps": 50, "burst": 100}
    assert config["controller"] == RELEASED_CONFIGURATION["controller"]
    assert released == RELEASED_CONFIGURATION  # not changed in place


def test_the_applied_configmap_holds_the_configuration_that_runs_and_nothing_else_changes() -> None:
    release = split_release(RELEASE)
    running = {"kind": "Configuration", "webhook": {"port": 1001}}
    objects = with_configuration(release, running)
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    assert yaml.safe_load(config_map["data"][CONFIG_KEY]) == running
    assert [o for o in objects if o["kind"] != "ConfigMap"] == [
        o for o in release.objects if o["kind"] != "ConfigMap"
    ]


def test_the_manager_runs_the_release_arguments_in_a_mount_namespace_with_the_metrics_certificate() -> None:
    args = manager_args(DEPLOYMENT)
    assert args == ["--zap-log-level=2"]
    argv = manager_argv(
        Path("/c/bin/kueue"), args, Path("/s/config.yaml"), Path("/s/kubeconfig"), Path("/s/certs")
    )
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[argv.index("-c") + 1]
    assert f"mount --bind /s/certs {METRICS_CERT_DIR}" in script
    assert script.endswith('exec "$@"')
    assert argv[argv.index("-c") + 3 :] == [
        "/c/bin/kueue",
        "--config=/s/config.yaml",
        "--kubeconfig=/s/kubeconfig",
        "--zap-log-level=2",
    ]


def test_an_install_record_survives_cluster_json() -> None:
    install = KueueInstall(build_dir="/c/kueue-v0.17.0-abcd", webhook_port=1, metrics_port=2, health_port=3)
    assert KueueInstall.from_json(install.to_json()) == install
    assert install.binary == Path("/c/kueue-v0.17.0-abcd/bin/kueue")


def test_condition_status_reads_a_kueue_condition_or_none() -> None:
    queue = {"status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]}}
    assert condition_status(queue, "Active") == "True"
    assert condition_status(queue, "Admitted") is None
    assert condition_status({}, "Active") is None
