"""Every object the operator builds is valid Kubernetes, and carries what the issue requires.

Validation uses the real OpenAPI-derived JSON schemas shipped by ``kubernetes-validate`` (strict
mode: unknown fields are errors) for the oldest and newest Kubernetes versions we support.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kubejury import runtimes
from kubejury.records.placement import Placement
from kubejury_operator import manifests as m
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab

OLDEST_K8S = "1.29"
NEWEST_K8S = kubernetes_validate.latest_version()
RUN = vocab.RunRef(name="study", namespace="evals", uid="0b7c7a4e-1111-2222-3333-444455556666")
SETTINGS = opsettings.WorkloadSettings(model_cache_pvc="model-cache", storage_secret="s3-creds")
STORAGE = vocab.JobStorage(uri="s3://bucket/runs")


def placed(**changes: Any) -> Placement:
    """A vLLM placement on two H100s, with ``changes``."""
    decided: dict[str, Any] = {
        "runtime": "vllm",
        "quantization": "fp8",
        "tensor_parallel_size": 2,
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    }
    return Placement(**{**decided, **changes})


VLLM = vocab.Endpoint(
    key="m-qwen3-27b",
    name="qwen3-27b",
    source="hf://Qwen/Qwen3.5-27B",
    served_model="qwen3-27b",
    runtime="vllm",
    checkpoint="bf16",
    placement=placed(),
    max_model_len=16384,
)
GPT_OSS = vocab.Endpoint(
    key="m-gpt-oss-120b",
    name="gpt-oss-120b",
    source="pvc://weights/openai/gpt-oss-120b",
    served_model="openai/gpt-oss-120b",
    runtime="vllm",
    checkpoint="mxfp4",
    placement=placed(quantization="mxfp4", tensor_parallel_size=1),
)
LLAMACPP_GPU = vocab.Endpoint(
    key="m-qwq-32b-gguf",
    name="qwq-32b-gguf",
    source="hf://Qwen/QwQ-32B-GGUF",
    served_model="qwq",
    runtime="llamacpp",
    checkpoint="gguf",
    placement=placed(
        runtime="llamacpp",
        quantization="q4_k_m",
        tensor_parallel_size=1,
        node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
    ),
)
LLAMACPP_CPU = vocab.Endpoint(
    key="j-gemma",
    name="gemma",
    source="pvc://models/gemma-3-270m-q4_k_m.gguf",
    served_model="gemma",
    runtime="llamacpp",
    placement=placed(runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0, node_selector={}),
    cpu="2",
    memory="2Gi",
)
OLLAMA = vocab.Endpoint(
    key="m-llama",
    name="llama",
    source="ollama://llama3.1:8b",
    served_model="llama3.1:8b",
    runtime="ollama",
    placement=placed(
        runtime="ollama",
        quantization="q4_k_m",
        tensor_parallel_size=1,
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A10"},
    ),
)
HOSTED = vocab.Endpoint(
    key="j-deepseek",
    name="deepseek",
    source="https://api.deepseek.com/v1",
    served_model="deepseek-chat",
    runtime="openai",
    api_key_secret="deepseek-key",
)
IN_CLUSTER = [VLLM, GPT_OSS, LLAMACPP_GPU, LLAMACPP_CPU, OLLAMA]


def all_manifests() -> list[vocab.Manifest]:
    objects: list[vocab.Manifest] = [
        m.spec_configmap(RUN, {"spec": {"models": [{"name": "qwen3-27b"}], "series": [{"name": "primary"}]}}),
        m.job_service_account(RUN),
    ]
    for endpoint in IN_CLUSTER:
        objects.append(m.model_deployment(RUN, endpoint, 1, SETTINGS))
        objects.append(m.model_service(RUN, endpoint))
    objects.append(m.generation_job(RUN, VLLM, "primary", SETTINGS, STORAGE))
    objects.append(m.generation_job(RUN, GPT_OSS, "t08", SETTINGS, STORAGE, shards=4))
    objects.append(m.judge_job(RUN, HOSTED, "primary", SETTINGS, STORAGE))
    objects.append(
        m.judge_job(RUN, LLAMACPP_CPU, "primary", SETTINGS, vocab.JobStorage(uri="file:///results"))
    )
    objects.append(
        m.aggregation_job(
            RUN, opsettings.WorkloadSettings(results_pvc="results"), vocab.JobStorage("file:///data")
        )
    )
    return objects


def _id(obj: vocab.Manifest) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("version", [OLDEST_K8S, NEWEST_K8S])
@pytest.mark.parametrize("obj", all_manifests(), ids=_id)
def test_every_manifest_validates_against_kubernetes_schemas(obj: vocab.Manifest, version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_can_fail() -> None:
    bad = m.model_deployment(RUN, VLLM, 1, SETTINGS)
    bad["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["httpGet"]["pathh"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, NEWEST_K8S, strict=True)


def _container(obj: vocab.Manifest) -> dict[str, Any]:
    containers: list[dict[str, Any]] = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_vllm_deployment_carries_planned_args_gpus_and_probes() -> None:
    dep = m.model_deployment(RUN, VLLM, 1, SETTINGS)
    c = _container(dep)
    args = c["args"]
    assert _flag(args, "--served-model-name") == "qwen3-27b"
    assert _flag(args, "--model") == "Qwen/Qwen3.5-27B"
    assert _flag(args, "--quantization") == "fp8"  # bf16 checkpoint quantized on load
    assert _flag(args, "--tensor-parallel-size") == "2"
    assert _flag(args, "--max-model-len") == "16384"
    assert _flag(args, "--gpu-memory-utilization") == "0.9"
    assert _flag(args, "--generation-config") == "vllm"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "2"
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 1800
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}} in pod["volumes"]
    hf = next(e for e in c["env"] if e["name"] == "HF_TOKEN")
    assert hf["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert dep["metadata"]["ownerReferences"][0]["uid"] == RUN.uid
    assert (
        dep["spec"]["selector"]["matchLabels"].items()
        <= dep["spec"]["template"]["metadata"]["labels"].items()
    )


def test_startup_budget_is_configurable() -> None:
    settings = opsettings.WorkloadSettings(startup_budget_seconds=3600)
    probe = _container(m.model_deployment(RUN, VLLM, 1, settings))["startupProbe"]
    assert probe["failureThreshold"] * probe["periodSeconds"] == 3600


def test_native_checkpoint_format_needs_no_quantization_flag() -> None:
    args = _container(m.model_deployment(RUN, GPT_OSS, 1, SETTINGS))["args"]
    assert "--quantization" not in args
    assert _flag(args, "--model") == "/models/src/openai/gpt-oss-120b"
    pod = m.model_deployment(RUN, GPT_OSS, 1, SETTINGS)["spec"]["template"]["spec"]
    assert {
        "name": "model-source",
        "persistentVolumeClaim": {"claimName": "weights", "readOnly": True},
    } in pod["volumes"]


def test_placement_quantization_flag_is_not_duplicated() -> None:
    endpoint = vocab.Endpoint(**{**VLLM.__dict__, "placement": placed(vllm_args=("--quantization", "fp8"))})
    args = _container(m.model_deployment(RUN, endpoint, 1, SETTINGS))["args"]
    assert args.count("--quantization") == 1


def test_gguf_runtimes() -> None:
    gpu = _container(m.model_deployment(RUN, LLAMACPP_GPU, 1, SETTINGS))
    assert _flag(gpu["args"], "--hf-repo") == "Qwen/QwQ-32B-GGUF:Q4_K_M"
    assert _flag(gpu["args"], "--alias") == "qwq"
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "1"
    cpu_dep = m.model_deployment(RUN, LLAMACPP_CPU, 1, SETTINGS)
    cpu = _container(cpu_dep)
    assert "nvidia.com/gpu" not in cpu["resources"].get("limits", {})
    assert "tolerations" not in cpu_dep["spec"]["template"]["spec"]
    assert "--n-gpu-layers" not in cpu["args"]
    ollama = _container(m.model_deployment(RUN, OLLAMA, 1, SETTINGS))
    assert {"name": "KUBEJURY_OLLAMA_MODEL", "value": "llama3.1:8b"} in ollama["env"]
    assert {"name": "KUBEJURY_OLLAMA_SOURCE", "value": "llama3.1:8b"} in ollama["env"]
    renamed = vocab.Endpoint(**{**OLLAMA.__dict__, "served_model": "llama"})
    env = _container(m.model_deployment(RUN, renamed, 1, SETTINGS))["env"]
    assert {"name": "KUBEJURY_OLLAMA_SOURCE", "value": "llama3.1:8b"} in env
    assert {"name": "KUBEJURY_OLLAMA_MODEL", "value": "llama"} in env


def test_every_in_cluster_runtime_has_a_serving_builder_and_no_external_one_has() -> None:
    in_cluster = {r.name for r in runtimes.REGISTRY.values() if r.in_cluster}
    assert set(m.SERVING_BUILDERS) == in_cluster


def test_an_endpoint_placed_with_an_external_runtime_gets_no_workload() -> None:
    external = vocab.Endpoint(**{**VLLM.__dict__, "runtime": "openai"})
    with pytest.raises(ValueError, match="runtime 'openai' has no in-cluster workload"):
        m.model_deployment(RUN, external, 1, SETTINGS)


def test_openai_runtime_gets_no_workload() -> None:
    with pytest.raises(ValueError, match="openai"):
        m.model_deployment(RUN, HOSTED, 1, SETTINGS)
    assert vocab.endpoint_url(RUN, HOSTED) == "https://api.deepseek.com/v1"


def test_jobs_have_no_api_access_and_restricted_security() -> None:
    for job in [o for o in all_manifests() if o["kind"] == "Job"]:
        pod = job["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["serviceAccountName"] == "kj-study-job"
        assert pod["restartPolicy"] == "Never"
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = _container(job)["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert job["spec"]["backoffLimit"] == SETTINGS.job_backoff_limit
        assert job["spec"]["activeDeadlineSeconds"] > 0
        assert job["metadata"]["ownerReferences"][0]["kind"] == "EvalRun"
    sa = m.job_service_account(RUN)
    assert sa["automountServiceAccountToken"] is False


def test_job_commands() -> None:
    gen = _container(m.generation_job(RUN, VLLM, "primary", SETTINGS, STORAGE))
    assert gen["command"] == ["kubejury"]
    assert gen["args"] == [
        "generate",
        "--evalrun",
        "/etc/kubejury/evalrun.yaml",
        "--series",
        "primary",
        "--model",
        "qwen3-27b",
        "--endpoint",
        f"http://{vocab.workload_name('study', 'm-qwen3-27b')}.evals.svc:8000/v1",
    ]
    # Only the storage Secret's S3 keys, one by one (issue 11, finding 2): never envFrom.
    assert "envFrom" not in gen
    secret_env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in gen["env"] if "valueFrom" in e}
    assert set(secret_env) == set(m.STORAGE_SECRET_ENV)
    assert {ref["name"] for ref in secret_env.values()} == {"s3-creds"}
    judge = _container(m.judge_job(RUN, HOSTED, "primary", SETTINGS, STORAGE))
    assert judge["args"][:2] == ["judge", "--evalrun"]
    assert _flag(judge["args"], "--endpoint") == "https://api.deepseek.com/v1"
    key = next(e for e in judge["env"] if e["name"] == "KUBEJURY_API_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "deepseek-key", "key": "api-key"}
    agg = _container(m.aggregation_job(RUN, SETTINGS, STORAGE))
    assert agg["args"] == ["aggregate", "--evalrun", "/etc/kubejury/evalrun.yaml"]


def test_a_job_storing_on_file_holds_no_storage_secret_and_only_its_own_api_key() -> None:
    """Issue 11, finding 2: Job pods hold only the secrets they use."""
    on_file = vocab.JobStorage(uri="file:///var/lib/kubejury/results/evals/study-1")
    for job in (
        m.generation_job(RUN, VLLM, "primary", SETTINGS, on_file),
        m.aggregation_job(RUN, SETTINGS, on_file),
    ):
        container = _container(job)
        assert "envFrom" not in container
        assert not [e for e in container["env"] if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]]
    judge = _container(m.judge_job(RUN, HOSTED, "primary", SETTINGS, on_file))
    refs = [e["valueFrom"]["secretKeyRef"] for e in judge["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert refs == [{"name": "deepseek-key", "key": "api-key"}]


def test_sharded_generation_is_an_indexed_job() -> None:
    job = m.generation_job(RUN, GPT_OSS, "t08", SETTINGS, STORAGE, shards=4)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == 4
    args = _container(job)["args"]
    assert _flag(args, "--shards") == "4"
    assert _flag(args, "--shard-index") == "$(JOB_COMPLETION_INDEX)"


def test_spec_configmap_holds_the_spec_only() -> None:
    cm = m.spec_configmap(
        RUN,
        {
            "metadata": {"name": "study", "managedFields": [{}]},
            "spec": {"a": 1},
            "status": {"phase": "Generating"},
        },
    )
    doc = yaml.safe_load(cm["data"]["evalrun.yaml"])
    assert doc == {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {"name": "study", "namespace": "evals"},
        "spec": {"a": 1},
    }


def test_names_are_deterministic_valid_and_distinct() -> None:
    long_model = "a-very-long-model-name-that-goes-on-and-on-forever-and-ever-v1"
    a = vocab.generation_job_name("a-long-evalrun-name", long_model, "primary")
    b = vocab.generation_job_name("a-long-evalrun-name", long_model, "secondary")
    assert a == vocab.generation_job_name("a-long-evalrun-name", long_model, "primary")
    assert a != b
    for name in (a, b, vocab.workload_name("Run_With.Caps", "m-Qwen/Qwen3")):
        assert len(name) <= 63
        assert name == name.lower()
        assert name[0].isalnum() and name[-1].isalnum()
    assert len(vocab.workload_name("x" * 80, "m-y")) <= 52
    assert vocab.generation_job_name("r", "m", "s").startswith("kj-r-gen-m-s-")


def test_settings_from_env() -> None:
    s = opsettings.WorkloadSettings.from_env(
        {
            "KUBEJURY_JOB_IMAGE": "img:1",
            "KUBEJURY_MODEL_CACHE_PVC": "",
            "KUBEJURY_STARTUP_BUDGET_SECONDS": "600",
        }
    )
    assert s.job_image == "img:1"
    assert s.model_cache_pvc is None
    assert s.startup_budget_seconds == 600


def test_settings_from_chart_json_env() -> None:
    s = opsettings.WorkloadSettings.from_env(
        {
            "KUBEJURY_GPU_TOLERATIONS": '[{"key": "gpu-pool", "operator": "Exists", "effect": "NoSchedule"}]',
            "KUBEJURY_JOB_RESOURCES": '{"requests": {"cpu": "1"}}',
        }
    )
    assert s.job_resources == {"requests": {"cpu": "1"}}
    pod = m.model_deployment(RUN, VLLM, 1, s)["spec"]["template"]["spec"]
    assert {"key": "gpu-pool", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    with pytest.raises(ValueError, match="KUBEJURY_JOB_RESOURCES"):
        opsettings.WorkloadSettings.from_env({"KUBEJURY_JOB_RESOURCES": "[]"})


# ------------------------------------------------------------------- tolerations: only GPU + chart

BROAD = placed(
    tolerations=(
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    )
)


def _pod_tolerations(placement: Placement, settings: opsettings.WorkloadSettings) -> list[dict[str, Any]]:
    endpoint = vocab.Endpoint(**{**VLLM.__dict__, "placement": placement})
    tolerations: list[dict[str, Any]] = m.model_deployment(RUN, endpoint, 1, settings)["spec"]["template"][
        "spec"
    ]["tolerations"]
    return tolerations


def test_a_recorded_placement_cannot_make_the_pod_tolerate_a_taint_the_chart_does_not_list() -> None:
    """A placement pinned in status before the planner was fixed still tolerated every taint."""
    keys = {t["key"] for t in _pod_tolerations(BROAD, SETTINGS)}
    assert keys == {"nvidia.com/gpu"}


def test_the_pod_tolerates_the_gpu_taint_and_the_chart_tolerations_only() -> None:
    team_b = {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}
    settings = opsettings.WorkloadSettings(extra_tolerations=(team_b,))
    tolerations = _pod_tolerations(BROAD, settings)
    assert [t for t in tolerations if t["key"] != "nvidia.com/gpu"] == [team_b]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_a_chart_gpu_toleration_that_is_no_object_is_refused_when_the_settings_are_read() -> None:
    with pytest.raises(ValueError, match=r"KUBEJURY_GPU_TOLERATIONS\[0\]"):
        opsettings.WorkloadSettings.from_env({"KUBEJURY_GPU_TOLERATIONS": '["dedicated"]'})


def test_job_pods_run_as_the_images_user_and_the_operators_uid_so_both_can_write_the_results_claim() -> None:
    """Issue 23, found on a real kubelet: the operator pod (fsGroup 10001) mounted the shared
    results claim first, the kubelet gave it group 10001, and the Jobs (uid and fsGroup 65532) were
    refused ``mkdir`` on it. One uid for the image, the chart's operator pod and the Jobs."""
    repo = Path(__file__).resolve().parents[2]
    image_user = re.search(r"^USER (\d+):(\d+)$", (repo / "Dockerfile").read_text(), re.M)
    chart_uid = re.search(r"runAsUser: (\d+)", (repo / "charts/kubejury/templates/_helpers.tpl").read_text())
    assert image_user and chart_uid
    job_security = m.restricted_pod_security(opsettings.WorkloadSettings().job_uid)
    assert job_security["runAsUser"] == int(image_user[1]) == int(chart_uid[1])
    assert job_security["fsGroup"] == int(image_user[2])
