"""``kubejury plan --manifests``: the objects the operator would create, and what a GPU cluster needs of them.

Each test reads the YAML stream the command prints — the operator's own planner and builders, run
offline — the way a user reviews ``helm template``. The findings of issue 10 (manifest half) are
asserted here on the rendered objects: writable caches for uid 1000, a vLLM new enough for the
study's models, the CUDA llama.cpp build on GPUs, Ollama's context, S3 settings in every pod that
needs them, model-server QoS and labels that keep Job Pods out of the servers' Services.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from factories import (
    CLUSTER_SETTINGS,
    HOSTILE_SPECS,
    admission_answer,
    benign_run,
    build_evalrun_yaml,
    cluster_settings_file,
    hostile_run,
    model_entry,
    write_yaml,
)
from kubejury.cli import main
from kubejury_operator import chart_defaults, images
from kubejury_operator import manifests as mf
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab
from kubejury_operator.observed import pod_scheduling_problems

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "examples" / "evalrun-study.yaml"
NODES = ROOT / "examples" / "nodes"
H100 = NODES / "h100-cluster.json"
CPU_ONLY = NODES / "cpu-only.json"

Manifest = dict[str, Any]

#: The allow-lists of a cluster whose admin let the runs of these tests in: their storage roots (the
#: study's bucket, write_run's defaults, S3 weights) and model cache claims. The manifests tests are
#: about what is created, so they preview on such a cluster; the policy itself is tested below.
ADMIN_SETTINGS = {
    "kind": "ConfigMap",
    "data": {
        "KUBEJURY_ALLOWED_STORAGE_ROOTS": '["s3://kubejury", "s3://results/runs", "s3://b", "s3://weights"]',
        "KUBEJURY_ALLOWED_CLAIMS": '["kubejury-model-cache", "weights"]',
    },
}


@pytest.fixture(scope="module")
def admin_settings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("settings") / "admin-settings.yaml"
    path.write_text(yaml.safe_dump(ADMIN_SETTINGS), encoding="utf-8")
    return path


def plan_manifests(
    evalrun: Path, nodes: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> list[Manifest]:
    if "--settings" not in extra:
        settings = evalrun.parent / "admin-settings.yaml"
        settings.write_text(yaml.safe_dump(ADMIN_SETTINGS), encoding="utf-8")
        extra = (*extra, "--settings", str(settings))
    code = main(["plan", "--evalrun", str(evalrun), "--nodes", str(nodes), "--manifests", *extra])
    out = capsys.readouterr().out
    assert code == 0
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(objects: Iterable[Manifest], kind: str) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind]


def container(obj: Manifest) -> dict[str, Any]:
    containers: list[dict[str, Any]] = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(obj: Manifest) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(obj).get("env", [])}


def write_run(
    tmp_path: Path, models: list[dict[str, Any]], judges: list[dict[str, Any]], **spec: Any
) -> Path:
    path = tmp_path / "run.yaml"
    spec.setdefault("storage", {"uri": "s3://results/runs"})
    judges = judges or [model_entry("judge", "https://judge.example.com/v1", runtime="openai")]
    path.write_text(build_evalrun_yaml("r", models=models, judges=judges, **spec), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def study(admin_settings: Path) -> list[Manifest]:
    """The study's objects on the H100 sample nodes (rendered once: capsys is per test)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(
            [
                "plan",
                "--evalrun",
                str(STUDY),
                "--nodes",
                str(H100),
                "--manifests",
                "--settings",
                str(admin_settings),
            ]
        )
    assert code == 0
    return [doc for doc in yaml.safe_load_all(buffer.getvalue()) if doc]


# ------------------------------------------------------------------------------- the stream itself


def test_the_stream_holds_every_kind_of_child_and_validates(study: list[Manifest]) -> None:
    kinds = {o["kind"] for o in study}
    assert {"ConfigMap", "ServiceAccount", "Deployment", "Service", "Job"} <= kinds
    names = [(o["kind"], o["metadata"]["name"]) for o in study]
    assert len(names) == len(set(names)), "an object is created twice"
    seen: set[tuple[str, str]] = set()
    for obj in study:
        identity = (obj["kind"], str(obj.get("spec", {}).get("template", {}).get("spec", {}).keys()))
        if identity in seen:
            continue  # one of each shape is enough for the schema check
        seen.add(identity)
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_every_server_of_the_study_and_its_jobs_appear(study: list[Manifest]) -> None:
    spec = yaml.safe_load(STUDY.read_text(encoding="utf-8"))["spec"]
    deployed = [m for m in spec["models"] if m.get("runtime", "vllm") != "openai"]
    deployments = {d["metadata"]["name"] for d in of_kind(study, "Deployment")}
    for model in deployed:
        assert vocab.workload_name("study", vocab.endpoint_key("model", model["name"])) in deployments
    generation = [
        j for j in of_kind(study, "Job") if j["metadata"]["labels"][vocab.LABEL_COMPONENT] == "generate"
    ]
    assert len(generation) == len(deployed) * len(spec["series"])
    assert of_kind(study, "Job")[-1]["metadata"]["name"] == vocab.aggregation_job_name("study")


def test_the_first_objects_are_what_the_first_reconcile_creates(study: list[Manifest]) -> None:
    assert [o["kind"] for o in study[:2]] == ["ConfigMap", "ServiceAccount"]
    assert study[2]["kind"] == "Deployment"  # then servers, never a Job before a server is ready


def test_an_unschedulable_run_prints_nothing_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], admin_settings: Path
) -> None:
    run = write_run(tmp_path, [model_entry("big", "hf://org/big", parameters="400B")], [])
    code = main(
        [
            "plan",
            "--evalrun",
            str(run),
            "--nodes",
            str(CPU_ONLY),
            "--manifests",
            "--fail-unschedulable",
            "--settings",
            str(admin_settings),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert "unschedulable" in captured.err
    assert not [d for d in yaml.safe_load_all(captured.out) if d]


# ------------------------------------------------------------ finding 1: caches the pod user owns


def _mounts(obj: Manifest) -> list[str]:
    return [m["mountPath"] for m in container(obj)["volumeMounts"] if not m.get("readOnly")]


@pytest.mark.parametrize(
    "cache", [None, {"claimName": "weights"}], ids=["emptyDir", "modelCache-default-path"]
)
def test_server_caches_are_in_writable_volumes_not_under_root(
    cache: dict[str, str] | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = [
        model_entry("qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B"),
        model_entry(
            "qwq", "hf://Qwen/QwQ-32B-GGUF", parameters="32B", runtime="llamacpp", quantization="Q4_K_M"
        ),
        model_entry(
            "mixtral", "ollama://mixtral:8x7b", parameters="47B-A13B", runtime="ollama", quantization="Q4_K_S"
        ),
    ]
    extra = {"modelCache": cache} if cache else {}
    run = write_run(tmp_path, models, [], maxConcurrentModels=3, **extra)
    deployments = of_kind(plan_manifests(run, H100, capsys), "Deployment")
    assert len(deployments) == 3
    for dep in deployments:
        env = env_of(dep)
        assert (
            dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 1000
        )  # not root, no passwd entry
        for name in ("HOME", "USER", "LOGNAME", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR"):
            assert env.get(name), f"{dep['metadata']['name']}: {name} is not set"
        writable = _mounts(dep)
        for name, value in env.items():
            if value.startswith("/"):
                assert not value.startswith("/root"), f"{name}={value} is under /root"
                assert any(value == m or value.startswith(m.rstrip("/") + "/") for m in writable), (
                    f"{dep['metadata']['name']}: {name}={value} is in no writable volume ({writable})"
                )


def test_model_cache_under_root_is_rejected_with_the_field_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(
        tmp_path,
        [model_entry("qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B")],
        [],
        modelCache={"claimName": "weights", "mountPath": "/root/.cache/huggingface"},
    )
    assert main(["validate", str(run)]) != 0
    err = capsys.readouterr().err
    assert "modelCache.mountPath" in err and "/root" in err


# ---------------------------------------------------------- finding 2: a vLLM for the study's models

# The study's vLLM models: checkpoint → (architecture, first vLLM release whose image serves it),
# from vLLM's supported-models list and release notes (see kubejury_operator/images.py).
FIRST_VLLM_RELEASE: dict[str, tuple[str, tuple[int, ...]]] = {
    "hf://Qwen/Qwen3.5-27B": ("Qwen3_5ForConditionalGeneration", (0, 17, 0)),
    "hf://Qwen/Qwen3.5-9B": ("Qwen3_5ForConditionalGeneration", (0, 17, 0)),
    # Gemma 4 came in v0.19.0, but needs transformers>=5.5 which only the v0.19.1 image ships.
    "hf://google/gemma-4-31b-it": ("Gemma4ForConditionalGeneration", (0, 19, 1)),
    "hf://google/gemma-4-26b-a4b-it": ("Gemma4ForConditionalGeneration", (0, 19, 1)),
    "hf://zai-org/GLM-4.7-Flash-NVFP4": ("Glm4MoeLiteForCausalLM", (0, 15, 0)),
    "hf://openai/gpt-oss-120b": ("GptOssForCausalLM", (0, 10, 1)),
    "hf://openai/gpt-oss-20b": ("GptOssForCausalLM", (0, 10, 1)),
    "hf://nvidia/Llama-3.1-Nemotron-70B-Instruct-HF": ("LlamaForCausalLM", (0, 5, 0)),
    "hf://MaziyarPanahi/calme-2.4-rys-78b": ("Qwen2ForCausalLM", (0, 5, 0)),
    "hf://mistralai/Mistral-Nemo-Instruct-2407": ("MistralForCausalLM", (0, 5, 3)),
    "hf://Qwen/Qwen3-8B": ("Qwen3ForCausalLM", (0, 8, 5)),
    "hf://google/gemma-3-27b-it": ("Gemma3ForConditionalGeneration", (0, 8, 0)),
    "hf://microsoft/phi-4": ("Phi3ForCausalLM", (0, 6, 0)),
}


def _tag_version(image: str) -> tuple[int, ...]:
    match = re.search(r":v(\d+)\.(\d+)\.(\d+)$", image)
    assert match, f"{image} is not pinned to a vX.Y.Z release"
    return tuple(int(part) for part in match.groups())


def test_the_vllm_image_serves_every_architecture_of_the_study(study: list[Manifest]) -> None:
    spec = yaml.safe_load(STUDY.read_text(encoding="utf-8"))["spec"]
    sources = {e["source"] for e in [*spec["models"], *spec["judges"]] if e.get("runtime", "vllm") == "vllm"}
    unknown = sources - set(FIRST_VLLM_RELEASE)
    assert not unknown, f"add the architecture and first vLLM release of {sorted(unknown)} to this table"
    needed = max(FIRST_VLLM_RELEASE[s][1] for s in sources)
    vllm_images = {
        container(d)["image"]
        for d in of_kind(study, "Deployment")
        if container(d)["command"] == ["vllm", "serve"]
    }
    assert vllm_images == {images.VLLM.reference}
    assert _tag_version(images.VLLM.reference) >= needed
    for architecture in {FIRST_VLLM_RELEASE[s][0] for s in sources}:
        family = architecture.split("For")[0]
        assert (
            family in images.VLLM.reason
            or architecture in images.VLLM.reason
            or family in ("GptOss", "Llama", "Qwen2", "Mistral", "Qwen3", "Gemma3", "Phi3")
        ), f"say why {architecture} runs on the pinned vLLM in images.VLLM.reason"


# ------------------------------------------------------- finding 3: the CUDA llama.cpp build on GPUs


def test_llamacpp_uses_the_cuda_build_on_gpus_and_the_cpu_build_on_cpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = model_entry(
        "qwq", "hf://Qwen/QwQ-32B-GGUF", parameters="32B", runtime="llamacpp", quantization="Q4_K_M"
    )
    run = write_run(tmp_path, [gguf], [])
    on_gpu = container(of_kind(plan_manifests(run, H100, capsys), "Deployment")[0])
    on_cpu = container(of_kind(plan_manifests(run, CPU_ONLY, capsys), "Deployment")[0])
    assert on_gpu["image"] == images.LLAMACPP_CUDA.reference
    assert "--n-gpu-layers" in on_gpu["args"] and "nvidia.com/gpu" in on_gpu["resources"]["limits"]
    assert on_cpu["image"] == images.LLAMACPP_CPU.reference
    assert "--n-gpu-layers" not in on_cpu["args"]
    # Same llama.cpp release either way.
    assert images.LLAMACPP_CUDA.reference.rsplit("-", 1)[1] == images.LLAMACPP_CPU.reference.rsplit("-", 1)[1]


# ---------------------------------------------------------------- finding 4: Ollama's context length


def test_ollama_servers_get_the_models_context_length(study: list[Manifest]) -> None:
    spec = yaml.safe_load(STUDY.read_text(encoding="utf-8"))["spec"]
    ollama = {m["name"]: m for m in spec["models"] if m.get("runtime") == "ollama"}
    assert ollama
    for name, model in ollama.items():
        dep = next(
            d
            for d in of_kind(study, "Deployment")
            if d["metadata"]["name"] == vocab.workload_name("study", vocab.endpoint_key("model", name))
        )
        env = env_of(dep)
        assert env["OLLAMA_CONTEXT_LENGTH"] == str(model["maxModelLen"])
        script = container(dep)["args"][0]
        # A model served under another name carries num_ctx itself (a model parameter wins over the default).
        assert "PARAMETER num_ctx" in script and "ollama create" in script


# ------------------------------------------------------ finding 7: the chart's S3 settings in every pod


def test_s3_settings_reach_every_job_and_s3_weight_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        yaml.safe_dump(
            {
                "kind": "ConfigMap",
                "data": {
                    "KUBEJURY_S3_ENDPOINT": "http://minio.minio:9000",
                    "AWS_REGION": "eu-central-1",
                    "KUBEJURY_STORAGE_SECRET": "kubejury-s3",
                },
            }
        )
    )
    models = [
        model_entry("from-s3", "s3://weights/qwen3.5-27b", parameters="27B"),
        model_entry("from-hf", "hf://Qwen/Qwen3.5-9B", parameters="9B"),
    ]
    run = write_run(
        tmp_path,
        models,
        [model_entry("judge", "hf://openai/gpt-oss-20b", parameters="21B-A3.6B", checkpoint="mxfp4")],
    )
    objects = plan_manifests(run, H100, capsys, "--settings", str(settings))
    jobs = of_kind(objects, "Job")
    assert jobs
    for job in jobs:
        env = env_of(job)
        assert env.get("KUBEJURY_S3_ENDPOINT") == "http://minio.minio:9000", job["metadata"]["name"]
        assert env.get("AWS_REGION") == "eu-central-1"
    servers = {d["metadata"]["name"]: container(d) for d in of_kind(objects, "Deployment")}
    s3_server = servers[vocab.workload_name("r", "m-from-s3")]
    s3_env = {e["name"]: e.get("value") for e in s3_server["env"]}
    assert s3_env["AWS_ENDPOINT_URL"] == "http://minio.minio:9000"
    assert s3_env["AWS_REGION"] == "eu-central-1"
    assert "envFrom" not in s3_server  # the Secret's S3 keys one by one, never the whole Secret
    s3_refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
        for e in s3_server["env"]
        if e["name"].startswith("AWS_") and "valueFrom" in e
    }
    assert s3_refs == {k: "kubejury-s3" for k in mf.STORAGE_SECRET_ENV if k != "AWS_ENDPOINT_URL"}
    assert "--load-format" in s3_server["args"]
    hf_server = servers[vocab.workload_name("r", "m-from-hf")]
    assert not [
        e for e in hf_server["env"] if "valueFrom" in e and "kubejury-s3" in str(e)
    ]  # only S3 weights


@pytest.mark.parametrize("runtime", ["llamacpp", "ollama"])
def test_gguf_runtimes_are_never_handed_s3_weights(
    runtime: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(
        tmp_path,
        [
            model_entry(
                "qwq",
                "s3://weights/qwq-32b-q4_k_m.gguf",
                parameters="32B",
                runtime=runtime,
                quantization="Q4_K_M",
            )
        ],
        [],
    )
    assert main(["validate", str(run)]) != 0
    err = capsys.readouterr().err
    assert "models[0].source" in err and "cannot read s3://" in err and "pvc://" in err


# -------------------------------------------------------------------- finding 9: model-server QoS


def _qos_class(pod: dict[str, Any]) -> str:
    """The Pod's QoS class as the kubelet computes it (requests/limits of its containers)."""
    resources = [c.get("resources", {}) for c in pod["containers"]]
    requests = [r.get("requests", {}) for r in resources]
    limits = [r.get("limits", {}) for r in resources]
    if not any(("cpu" in r or "memory" in r) for r in [*requests, *limits]):
        return "BestEffort"
    guaranteed = all(
        lim.get(k) and (req.get(k, lim.get(k)) == lim.get(k))
        for req, lim in zip(requests, limits, strict=True)
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def test_model_servers_are_never_best_effort_and_count_their_shared_memory(study: list[Manifest]) -> None:
    for dep in of_kind(study, "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert _qos_class(pod) != "BestEffort", dep["metadata"]["name"]
        requests = container(dep)["resources"]["requests"]
        assert "cpu" in requests and "memory" in requests
        shm = [v["emptyDir"] for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
        for volume in shm:
            assert mf.memory_bytes(requests["memory"]) >= mf.memory_bytes(
                volume["sizeLimit"]
            ) + mf.memory_bytes(opsettings.WorkloadSettings().server_memory_request)


def test_a_models_memory_is_its_request_and_limit_plus_shared_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = model_entry(
        "qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B", resources={"cpu": "8", "memory": "64Gi"}
    )
    run = write_run(tmp_path, [model], [])
    resources = container(of_kind(plan_manifests(run, H100, capsys), "Deployment")[0])["resources"]
    expected = f"{(64 + 16) * 1024}Mi"
    assert resources["requests"]["cpu"] == "8"
    assert resources["requests"]["memory"] == expected and resources["limits"]["memory"] == expected


def test_pods_do_not_chown_the_model_cache_at_every_start(study: list[Manifest]) -> None:
    for obj in [*of_kind(study, "Deployment"), *of_kind(study, "Job")]:
        security = obj["spec"]["template"]["spec"]["securityContext"]
        assert security["fsGroupChangePolicy"] == "OnRootMismatch", obj["metadata"]["name"]


# ---------------------------------------------------- finding 12: Job Pods are not model servers


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_no_service_selects_a_job_pod(study: list[Manifest]) -> None:
    jobs = of_kind(study, "Job")
    for job in jobs:
        assert vocab.LABEL_ENDPOINT not in job["spec"]["template"]["metadata"]["labels"]
    for service in of_kind(study, "Service"):
        selector = service["spec"]["selector"]
        assert not any(_selects(selector, j["spec"]["template"]["metadata"]["labels"]) for j in jobs)
        backing = [
            d
            for d in of_kind(study, "Deployment")
            if _selects(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert [d["metadata"]["name"] for d in backing] == [service["metadata"]["name"]]


def test_a_pending_job_pod_is_not_a_server_waiting_for_a_node(study: list[Manifest]) -> None:
    job = next(
        j for j in of_kind(study, "Job") if j["metadata"]["labels"][vocab.LABEL_COMPONENT] == "generate"
    )
    server = of_kind(study, "Deployment")[0]
    unschedulable = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes: Insufficient cpu",
            }
        ],
    }
    job_pod = {"metadata": {"labels": job["spec"]["template"]["metadata"]["labels"]}, "status": unschedulable}
    server_pod = {
        "metadata": {"labels": server["spec"]["template"]["metadata"]["labels"]},
        "status": unschedulable,
    }
    assert pod_scheduling_problems([job_pod]) == {}
    key = server["spec"]["template"]["metadata"]["labels"][vocab.LABEL_ENDPOINT]
    assert set(pod_scheduling_problems([job_pod, server_pod])) == {key}


# ------------------------- issue 28, section 1: a run admission refuses is refused here, with its message


def plan_refused(
    body: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> str:
    """Run ``plan --manifests`` on ``body``; assert it exits non-zero printing no object; its stderr."""
    run = write_yaml(tmp_path / "run.yaml", body)
    code = main(["plan", "--evalrun", str(run), "--nodes", str(H100), "--manifests", *extra])
    captured = capsys.readouterr()
    assert code != 0
    assert not [d for d in yaml.safe_load_all(captured.out) if d], "objects printed for a refused run"
    return captured.err


def test_plan_prints_the_objects_of_a_benign_run_under_the_clusters_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_yaml(tmp_path / "run.yaml", benign_run())
    objects = plan_manifests(run, H100, capsys, "--settings", str(cluster_settings_file(tmp_path)))
    assert of_kind(objects, "Deployment") and of_kind(objects, "Job")


@pytest.mark.parametrize(("label", "mutate", "field"), HOSTILE_SPECS, ids=[h[0] for h in HOSTILE_SPECS])
def test_plan_prints_no_object_for_each_hostile_run_and_admissions_own_message_on_stderr(
    label: str,
    mutate: Any,
    field: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = hostile_run(mutate)
    err = plan_refused(body, tmp_path, capsys, "--settings", str(cluster_settings_file(tmp_path)))
    assert f"{field}: " in err, (label, err)
    assert "add it to the chart value security." in err
    assert admission_answer(body, CLUSTER_SETTINGS) in err


def test_without_settings_plan_refuses_the_issues_foreign_image_and_flag_as_a_default_install_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run()
    body["spec"]["jobs"] = {"image": "docker.io/attacker/anything:latest"}
    body["spec"]["models"][0]["extraArgs"] = ["--trust-remote-code"]
    err = plan_refused(body, tmp_path, capsys)
    assert "spec.jobs.image: image docker.io/attacker/anything:latest is not allowed" in err
    assert "security.allowedJobImages" in err and "security.allowedServerFlags" in err
    assert admission_answer(body, chart_defaults.default_policy_env()) in err


def test_snake_case_keys_do_not_skip_the_clusters_policy_in_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run()
    body["spec"]["models"][0]["extra_args"] = ["--trust-remote-code"]
    err = plan_refused(body, tmp_path, capsys, "--settings", str(cluster_settings_file(tmp_path)))
    assert "spec.models[0].extraArgs[0]: " in err


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"KUBEJURY_ALLOWED_CLAIMS": ["a"', "not valid YAML"),
        ('{"KUBEJURY_ALLOWED_CLAIMS": "[not json"}', "KUBEJURY_ALLOWED_CLAIMS"),
        ('{"KUBEJURY_JOB_BACKOFF_LIMIT": "three"}', "KUBEJURY_JOB_BACKOFF_LIMIT"),
    ],
    ids=["bad-json", "variable-not-json", "workload-setting-not-a-number"],
)
def test_a_bad_settings_file_is_an_error_naming_the_file_and_the_variable_not_a_traceback(
    content: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "broken-settings.json"
    settings.write_text(content, encoding="utf-8")
    err = plan_refused(benign_run(), tmp_path, capsys, "--settings", str(settings))
    assert str(settings) in err and named in err, err


# ------------------------------- issue 23, real pods: a GGUF without a chat template, on llama-server


def test_llamacpp_servers_get_the_models_chat_format_as_llama_servers_chat_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gemma-3 270M's GGUF carries no chat template: local mode gives llama-cpp-python
    chat_format='gemma', but the cluster's llama-server fell back to ChatML and the answers echoed
    <|im_start|> tokens (found by running the real server image)."""
    with_format = model_entry(
        "gemma", "hf://org/gemma-gguf", parameters="0.27B", runtime="llamacpp", quantization="Q4_K_M"
    )
    with_format["chatFormat"] = "gemma"
    without = model_entry(
        "smol", "hf://org/smol-gguf", parameters="0.135B", runtime="llamacpp", quantization="Q4_1"
    )
    run = write_run(tmp_path, [with_format, without], [])
    deployments = of_kind(plan_manifests(run, CPU_ONLY, capsys), "Deployment")
    args = {d["metadata"]["name"]: container(d)["args"] for d in deployments}
    gemma = next(a for n, a in args.items() if "gemma" in n)
    smol = next(a for n, a in args.items() if "smol" in n)
    assert gemma[gemma.index("--chat-template") + 1] == "gemma"
    assert "--chat-template" not in smol


@pytest.mark.parametrize(("requests_per_endpoint", "slots"), [(2, 2), (64, 4)])
def test_every_llama_server_slot_has_room_for_a_whole_max_model_len(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], requests_per_endpoint: int, slots: int
) -> None:
    """Issue 23, found on a real llama-server: --ctx-size is the one KV cache its slots share, so
    with --ctx-size = maxModelLen four concurrent judge prompts of 1,300 tokens overflowed 2,048 and
    every request failed with HTTP 500 "Context size has been exceeded"."""
    gguf = model_entry(
        "smol",
        "hf://org/smol-gguf",
        parameters="0.135B",
        runtime="llamacpp",
        quantization="Q4_1",
        maxModelLen=2048,
    )
    run = write_run(tmp_path, [gguf], [], concurrency={"requestsPerEndpoint": requests_per_endpoint})
    args = container(of_kind(plan_manifests(run, CPU_ONLY, capsys), "Deployment")[0])["args"]
    assert args[args.index("--parallel") + 1] == str(slots)
    assert args[args.index("--ctx-size") + 1] == str(2048 * slots)
