"""Issue 11 on the real control plane: what the chart's roles and label policy let a tenant do.

Two namespaces, two users reached through impersonation (``kubectl --as``), each holding only what
the chart ships for people: the built-in ``edit`` role in their own namespace, which
``evalrun-editor`` aggregates into, and ``view`` elsewhere (``evalrun-viewer``). The chart is
rendered by helm with a release name of its own (webhook off: no operator runs here) and applied by
the cluster admin; its cluster-scoped objects are removed afterwards so that other tests' operators
are not held to this release's ServiceAccount. Nothing here is simulated but the nodes (KWOK).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from devcluster import Cluster
from factories import build_evalrun, model_entry
from kubejury_operator import handlers

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CHART = Path(__file__).resolve().parents[3] / "charts" / "kubejury"


def helm() -> str:
    found = shutil.which("helm") or str(Path.home() / ".cache" / "kubejury" / "bin" / "helm")
    if not Path(found).is_file():
        pytest.fail("helm is missing: run make helm")
    return found


LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubejury-operator"


class Tenancy:
    def __init__(self, cluster: Cluster, suffix: str) -> None:
        self.cluster = cluster
        self.release = f"t{suffix}"
        self.release_ns = f"kj-{suffix}"
        self.team_a, self.team_b = f"team-a-{suffix}", f"team-b-{suffix}"
        self.alice, self.bob = f"alice-{suffix}", f"bob-{suffix}"
        self.operator = f"system:serviceaccount:{self.release_ns}:{self.release}-kubejury"

    def as_user(self, user: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(self.cluster.kubectl_path),
                "--kubeconfig",
                str(self.cluster.kubeconfig),
                "--as",
                user,
                *args,
            ],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )


@pytest.fixture(scope="module")
def tenancy(kube_cluster: Cluster) -> Iterator[Tenancy]:
    t = Tenancy(kube_cluster, uuid.uuid4().hex[:6])
    for ns in (t.release_ns, t.team_a, t.team_b):
        kube_cluster.kubectl("create", "namespace", ns)
    rendered = subprocess.run(
        [
            helm(),
            "template",
            t.release,
            str(CHART),
            "--namespace",
            t.release_ns,
            "--include-crds",
            "--kube-version",
            "1.36.3",
            "--set",
            "webhook.enabled=false",
            "--set",
            f"jobs.serviceAccount.extraNamespaces={{{t.team_a},{t.team_b}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    cluster_scoped = [
        o
        for o in objects
        if o["kind"]
        in (
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
    ]
    kube_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
    # alice edits team-a, bob edits team-b; each may view the other's namespace.
    for user, own, other in ((t.alice, t.team_a, t.team_b), (t.bob, t.team_b, t.team_a)):
        kube_cluster.kubectl(
            "create", "rolebinding", f"{user}-edit", "--clusterrole=edit", f"--user={user}", "-n", own
        )
        kube_cluster.kubectl(
            "create", "rolebinding", f"{user}-view", "--clusterrole=view", f"--user={user}", "-n", other
        )
    _wait_for_policy(t)
    yield t
    for obj in cluster_scoped:
        kube_cluster.kubectl(
            "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False
        )
    for ns in (t.release_ns, t.team_a, t.team_b):
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]},
    }


def _deployment(name: str, labels: dict[str, str]) -> dict[str, Any]:
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**selector, **labels}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]},
            },
        },
    }


def _wait_for_policy(t: Tenancy) -> None:
    """A new ValidatingAdmissionPolicy takes a moment to be enforced: probe with a throw-away pod."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = _pod(f"probe-{uuid.uuid4().hex[:6]}", {LABEL: MANAGED_BY})
        result = t.as_user(
            t.alice, "create", "--dry-run=server", "-n", t.team_a, "-f", "-", input=json.dumps(probe)
        )
        if result.returncode != 0 and "kubejury" in result.stderr:
            return
        time.sleep(1)
    raise AssertionError("the chart's ValidatingAdmissionPolicy was not enforced within 60 s")


def test_the_chart_roles_let_an_author_create_evalruns_only_in_their_namespace(tenancy: Tenancy) -> None:
    t = tenancy
    run = json.dumps(build_evalrun("mine", namespace=t.team_a))
    created = t.as_user(t.alice, "create", "-f", "-", input=run)
    assert created.returncode == 0, created.stderr
    elsewhere = json.dumps(build_evalrun("theirs", namespace=t.team_b))
    refused = t.as_user(t.alice, "create", "-f", "-", input=elsewhere)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    # bob may read alice's run (view aggregates evalrun-viewer) but not change or delete it
    read = t.as_user(t.bob, "get", "evalrun", "mine", "-n", t.team_a, "-o", "name")
    assert read.returncode == 0, read.stderr
    deleted = t.as_user(t.bob, "delete", "evalrun", "mine", "-n", t.team_a)
    assert deleted.returncode != 0 and "forbidden" in deleted.stderr.lower()
    # ...nor read the Secrets of alice's namespace, which an EvalRun may name
    secrets = t.as_user(t.bob, "get", "secrets", "-n", t.team_a)
    assert secrets.returncode != 0 and "forbidden" in secrets.stderr.lower()


@pytest.mark.parametrize("make", [_pod, _deployment], ids=["pod", "deployment"])
def test_a_tenant_cannot_forge_the_label_the_network_policy_trusts(tenancy: Tenancy, make: Any) -> None:
    t = tenancy
    name = f"forged-{make.__name__.strip('_')}"
    forged = t.as_user(
        t.alice, "create", "-n", t.team_a, "-f", "-", input=json.dumps(make(name, {LABEL: MANAGED_BY}))
    )
    assert forged.returncode != 0
    assert "only the kubejury operator" in forged.stderr, forged.stderr
    plain = t.as_user(
        t.alice, "create", "-n", t.team_a, "-f", "-", input=json.dumps(make(f"{name}-plain", {}))
    )
    assert plain.returncode == 0, plain.stderr


def test_the_operator_service_account_may_create_what_carries_the_label(tenancy: Tenancy) -> None:
    t = tenancy
    deployment = _deployment("kj-server", {LABEL: MANAGED_BY})
    created = t.as_user(
        t.operator, "create", "--dry-run=server", "-n", t.team_a, "-f", "-", input=json.dumps(deployment)
    )
    assert created.returncode == 0, created.stderr


def test_the_inference_network_policy_covers_every_run_namespace(tenancy: Tenancy) -> None:
    t = tenancy
    for ns in (t.release_ns, t.team_a, t.team_b):
        policies = t.cluster.get_json("networkpolicies", "-n", ns)["items"]
        assert [p for p in policies if p["metadata"]["name"].endswith("-inference")], ns


@pytest.mark.parametrize(
    ("renew_after", "renewed"), [("1", True), ("4102444800", False)], ids=["due", "not-due"]
)
def test_helm_upgrade_renews_the_webhook_certificate_once_it_is_due(
    kube_cluster: Cluster, renew_after: str, renewed: bool
) -> None:
    """Finding 8: the chart-generated certificate is kept across upgrades only until its
    kubejury.io/renew-after; helm reads the existing Secret from the real API server (lookup)."""
    suffix = uuid.uuid4().hex[:6]
    namespace, release = f"kj-cert-{suffix}", f"c{suffix}"
    kube_cluster.kubectl("create", "namespace", namespace)
    old = base64.b64encode(b"old-certificate").decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{release}-kubejury-webhook-tls",
            "namespace": namespace,
            # as a previous `helm install` of this release left it
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {
                "kubejury.io/renew-after": renew_after,
                "meta.helm.sh/release-name": release,
                "meta.helm.sh/release-namespace": namespace,
            },
        },
        "data": {"tls.crt": old, "tls.key": old, "ca.crt": old},
    }
    try:
        kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))
        rendered = subprocess.run(
            [helm(), "template", release, str(CHART), "--namespace", namespace, "--dry-run=server"],
            capture_output=True,
            text=True,
            check=False,
            env=kube_cluster.env(),
        )
        assert rendered.returncode == 0, rendered.stderr
        (tls,) = [
            o
            for o in yaml.safe_load_all(rendered.stdout)
            if o and o["kind"] == "Secret" and o["metadata"]["name"].endswith("-webhook-tls")
        ]
        assert (tls["data"]["tls.crt"] != old) is renewed
        assert (tls["metadata"]["annotations"]["kubejury.io/renew-after"] != renew_after) is renewed
        if renewed:
            assert base64.b64decode(tls["data"]["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    finally:
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_any_secret_of_the_namespace_as_api_key_grants_nothing_the_author_lacks(tenancy: Tenancy) -> None:
    """Finding 3, accepted (docs/security.md): apiKeySecretRef may name any Secret of the run's
    namespace, because whoever may create EvalRuns there (edit) may read those Secrets already; it
    cannot name a Secret of another namespace."""
    t = tenancy
    for ns in (t.team_a, t.team_b):
        t.cluster.kubectl("create", "secret", "generic", "db-admin-password", "--from-literal=pw=x", "-n", ns)
    own = t.as_user(t.alice, "get", "secret", "db-admin-password", "-n", t.team_a, "-o", "name")
    assert own.returncode == 0, own.stderr
    other = t.as_user(t.alice, "get", "secret", "db-admin-password", "-n", t.team_b)
    assert other.returncode != 0 and "forbidden" in other.stderr.lower()
    judge = {
        "name": "hosted",
        "runtime": "openai",
        "source": "https://api.example.com/v1",
        "apiKeySecretRef": {"name": "db-admin-password", "key": "pw", "namespace": t.team_b},
    }
    run = build_evalrun("cross-namespace", namespace=t.team_a, judges=[judge])
    refused = t.as_user(t.alice, "create", "-f", "-", input=json.dumps(run))
    assert refused.returncode != 0 and "namespace" in refused.stderr, refused.stderr


@pytest.fixture
def webhook(kube_cluster: Cluster, tenancy: Tenancy) -> Iterator[None]:
    """The operator's handlers with their admission webhook, in kopf in this process; the API server
    calls it over TLS at 127.0.0.1 (the API server's own serving certificate names that address)
    for EvalRuns of team-a only, through a ValidatingWebhookConfiguration removed afterwards."""
    from kubejury.testing.fault_server import free_port

    account = f"kj-oracle-{tenancy.release}"
    kube_cluster.kubectl("create", "serviceaccount", account, "-n", "kube-system")
    kube_cluster.kubectl(
        "create",
        "clusterrolebinding",
        account,
        "--clusterrole=cluster-admin",
        f"--serviceaccount=kube-system:{account}",
    )
    token = kube_cluster.kubectl("create", "token", account, "-n", "kube-system").strip()
    pki = kube_cluster.ca_file.parent
    port = free_port()
    env = {
        "KUBEJURY_KUBE_SERVER": kube_cluster.api_url,
        "KUBEJURY_KUBE_TOKEN": token,
        "KUBEJURY_KUBE_INSECURE": "true",
        "KUBEJURY_WEBHOOK_PORT": str(port),
        "KUBEJURY_WEBHOOK_ADDR": "127.0.0.1",
        "KUBEJURY_WEBHOOK_CERT": str(pki / "apiserver.crt"),
        "KUBEJURY_WEBHOOK_KEY": str(pki / "apiserver.key"),
    }
    registry = handlers.register(kopf.OperatorRegistry(), interval=3600, env=env)
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(
            kopf.operator(registry=registry, namespaces=[tenancy.team_b], standalone=True, stop_flag=stop)
        ),
        daemon=True,
    )
    thread.start()
    name = f"{tenancy.release}-oracle.kubejury.io"
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "validate-evalrun.evalruns.kubejury.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/validate-evalrun",
                    "caBundle": base64.b64encode(kube_cluster.ca_file.read_bytes()).decode(),
                },
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenancy.team_a}},
                "rules": [
                    {
                        "apiGroups": ["kubejury.io"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["evalruns"],
                    }
                ],
            }
        ],
    }
    try:
        kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(configuration))
        # two models of one name: only the webhook checks that
        invalid = build_evalrun(
            "probe", namespace=tenancy.team_a, models=[model_entry("q"), model_entry("q")]
        )
        deadline = time.monotonic() + 60
        while True:
            probe = tenancy.as_user(
                tenancy.alice, "create", "--dry-run=server", "-f", "-", input=json.dumps(invalid)
            )
            if "invalid EvalRun" in probe.stderr:
                break
            assert time.monotonic() < deadline, f"the webhook did not answer within 60 s: {probe.stderr}"
            time.sleep(1)
        yield
    finally:
        kube_cluster.kubectl(
            "delete", "validatingwebhookconfiguration", name, "--ignore-not-found", check=False
        )
        stop.set()
        thread.join(timeout=30)
        kube_cluster.kubectl("delete", "clusterrolebinding", account, "--ignore-not-found", check=False)
        kube_cluster.kubectl(
            "delete", "serviceaccount", account, "-n", "kube-system", "--ignore-not-found", check=False
        )


def test_the_webhook_does_not_tell_who_cannot_read_secrets_whether_one_exists(
    kube_cluster: Cluster, tenancy: Tenancy, webhook: None
) -> None:
    """Finding 6: carol holds only evalrun-editor in team-a (no Secret read). Naming an existing
    and a missing Secret as the API key gets the same admission answer."""
    t = tenancy
    carol = f"carol-{t.release}"
    kube_cluster.kubectl(
        "create",
        "rolebinding",
        carol,
        f"--clusterrole={t.release}-kubejury-evalrun-editor",
        f"--user={carol}",
        "-n",
        t.team_a,
    )
    kube_cluster.kubectl("create", "secret", "generic", "exists", "--from-literal=pw=x", "-n", t.team_a)
    assert t.as_user(carol, "get", "secret", "exists", "-n", t.team_a).returncode != 0
    answers = []
    for secret in ("exists", "does-not-exist"):
        judge = {
            "name": "hosted",
            "runtime": "openai",
            "source": "https://api.example.com/v1",
            "apiKeySecretRef": {"name": secret, "key": "pw"},
        }
        run = build_evalrun(f"probe-{secret}", namespace=t.team_a, judges=[judge])
        result = t.as_user(carol, "create", "--dry-run=server", "-f", "-", input=json.dumps(run))
        answers.append((result.returncode, result.stderr.replace(secret, "<secret>")))
    assert answers[0] == answers[1], answers
    assert answers[0][0] == 0, answers
