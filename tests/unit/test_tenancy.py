"""What an EvalRun's author may reach (issue 11): storage layout, the chart's allow-lists, admission."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from factories import as_kopf_body, build_evalrun, model_entry
from kubejury.config.spec import parse_evalrun
from kubejury_operator import handlers
from kubejury_operator.cluster_run import cluster_run
from kubejury_operator.gateway import ApiCredentials
from kubejury_operator.reconciler import reconcile
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.tenancy import TenantPolicy, policy_problems, run_storage_uri
from kubejury_operator.testing import FakeKubeApi
from kubejury_operator.validation import validate_evalrun

SIMULATED_API = ApiCredentials(server="https://simulated-api.invalid")  # never reached


def fields(problems: list[Any]) -> list[str]:
    return [p.path for p in problems]


# ----------------------------------------------------------------------------- finding 1: layout


def test_a_runs_storage_is_its_namespace_name_and_uid_below_the_root() -> None:
    assert run_storage_uri("s3://b/runs/", "team-a", "r", "0123456789ab") == "s3://b/runs/team-a/r-01234567"


def test_same_named_runs_of_two_namespaces_get_different_storage_in_their_jobs_spec() -> None:
    stores = []
    for namespace, uid in (("team-a", "aaaaaaaa-1"), ("team-b", "bbbbbbbb-1")):
        body = build_evalrun("results", namespace=namespace, storage={"uri": "file:///data/root"})
        body["metadata"]["uid"] = uid
        run = cluster_run(body, parse_evalrun(body), {}, WorkloadSettings(results_pvc="results"))
        stores.append((run.storage.uri, run.body["spec"]["storage"]["uri"], run.report_uri))
    assert stores[0][0] == "file:///data/root/team-a/results-aaaaaaaa"
    assert stores[1][0] == "file:///data/root/team-b/results-bbbbbbbb"
    assert stores[0][1] == stores[0][0]  # the Jobs read the same prefix from their spec ConfigMap
    assert stores[0][2] == "file:///data/root/team-a/results-aaaaaaaa/results/report/"


def test_storage_uri_outside_the_charts_roots_is_rejected_naming_the_chart_value() -> None:
    policy = TenantPolicy(storage_roots=("s3://shared/{namespace}", "file:///var/lib/kubejury/results"))
    bench = "s3://shared/team-a/bench.jsonl"
    ok = build_evalrun(namespace="team-a", benchmark=bench, storage={"uri": "s3://shared/team-a/mine"})
    assert policy_problems(ok, policy) == []
    for uri in (
        "s3://shared/team-b",
        "s3://shared/team-a-evil",
        "s3://other/team-a",
        "file:///var/lib/kubejury/results/../../../etc",
        "file:///var/lib/kubejury",
    ):
        problems = policy_problems(
            build_evalrun(namespace="team-a", benchmark=bench, storage={"uri": uri}), policy
        )
        assert fields(problems) == ["spec.storage.uri"], uri
        assert "security.storageRoots" in problems[0].message
    assert fields(policy_problems(ok, TenantPolicy(storage_roots=()))) == [
        "spec.storage.uri",
        "spec.benchmark.uri",
    ]


# ----------------------------------------------------------------------- finding 4: allow-lists


def test_job_image_claims_and_dangerous_flags_need_the_chart_naming_field_and_value() -> None:
    body = build_evalrun(
        models=[
            model_entry("a", extraArgs=["--trust-remote-code"]),
            model_entry("b", source="pvc://someone-elses/weights", runtime="vllm"),
        ],
        jobs={"image": "evil.example/steal:1"},
        storage={"uri": "file:///r", "persistentVolumeClaim": "their-results"},
        modelCache={"claimName": "their-cache"},
    )
    policy = TenantPolicy(job_images=("ghcr.io/kubejury/kubejury:*",), claims=("kubejury-results",))
    problems = {p.path: p.message for p in policy_problems(body, policy)}
    assert set(problems) == {
        "spec.jobs.image",
        "spec.storage.persistentVolumeClaim",
        "spec.modelCache.claimName",
        "spec.models[1].source",
        "spec.models[0].extraArgs[0]",
    }
    assert "security.allowedJobImages" in problems["spec.jobs.image"]
    assert "security.allowedClaims" in problems["spec.modelCache.claimName"]
    assert "security.allowedServerFlags" in problems["spec.models[0].extraArgs[0]"]
    allowing = TenantPolicy(
        job_images=("evil.example/steal:1",),
        claims=("their-results", "their-cache", "someone-elses"),
        server_flags=("--trust-remote-code",),
    )
    assert policy_problems(body, allowing) == []


def test_a_flag_given_with_equals_is_the_same_flag() -> None:
    body = build_evalrun(models=[model_entry("a", extraArgs=["--download-dir=/etc"])])
    assert fields(policy_problems(body, TenantPolicy())) == ["spec.models[0].extraArgs[0]"]


def test_the_chart_sets_the_policy_through_the_environment() -> None:
    policy = TenantPolicy.from_env(
        {
            "KUBEJURY_ALLOWED_STORAGE_ROOTS": '["s3://b/{namespace}"]',
            "KUBEJURY_ALLOWED_JOB_IMAGES": "[]",
            "KUBEJURY_ALLOWED_CLAIMS": '["c"]',
        }
    )
    assert policy.roots_for("ns") == ("s3://b/ns",)
    assert policy.job_images == () and policy.claims == ("c",) and policy.server_flags == ()


def test_admission_applies_the_policy() -> None:
    body = build_evalrun(jobs={"image": "evil.example/x:1"})
    problems = validate_evalrun(body, policy=TenantPolicy(job_images=()))
    assert "spec.jobs.image" in fields(problems)


def test_reconcile_marks_a_run_beyond_the_policy_invalid_even_without_the_webhook() -> None:
    body = build_evalrun(jobs={"image": "evil.example/x:1"})
    body["metadata"]["uid"] = "u-1"
    api = FakeKubeApi(body)
    runtime = OperatorRuntime(
        settings=WorkloadSettings(),
        credentials=SIMULATED_API,
        policy=TenantPolicy(job_images=()),
    )
    runtime._gateway = api
    with pytest.raises(kopf.PermanentError, match=r"security\.allowedJobImages"):
        asyncio.run(reconcile(runtime, body, SimpleNamespace(info=print, warning=print)))
    writes = [
        call.verb for call in api.calls if call.verb in ("patch_status", "post_event", "create", "scale")
    ]
    assert writes and writes[0] == "patch_status"
    assert api.objects("EvalRun")[0]["status"]["phase"] == "Failed"
    assert "list_nodes" not in api.verbs(), "nothing is planned for a run beyond the policy"
    assert "create" not in api.verbs()


# ------------------------------------------------------------ finding 6: no Secret oracle


def test_the_webhook_answers_the_same_whether_a_referenced_secret_exists_or_not() -> None:
    """Simulated API (in memory): the webhook must not look Secrets up at all, so a user who
    cannot read Secrets learns nothing about them from admission."""
    exists = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "exists", "namespace": "evals"}}
    api = FakeKubeApi({**exists, "stringData": {"api-key": "sk-test"}})
    runtime = OperatorRuntime(settings=WorkloadSettings(), credentials=SIMULATED_API)
    runtime._gateway = api
    outcomes = []
    for secret in ("exists", "does-not-exist"):
        judge = model_entry("j", runtime="openai", source="https://api.example.com/v1")
        judge["apiKeySecretRef"] = {"name": secret, "key": "api-key"}
        body = build_evalrun(judges=[judge])
        try:
            asyncio.run(handlers.validate(body=as_kopf_body(body), memo=SimpleNamespace(kubejury=runtime)))
            outcomes.append("admitted")
        except kopf.AdmissionError as exc:
            outcomes.append(str(exc))
    assert outcomes == ["admitted", "admitted"]
    assert [call for call in api.calls if call.kind == "Secret"] == []
