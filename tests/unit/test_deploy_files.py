"""The files a user deploys with, besides the chart: the Dockerfile (one image, pinned base,
non-root, no build tools in the final stage), the kind cluster config and the two cluster examples
(which must pass the EvalRun spec, the same check the CRD and admission webhook apply).

No container is built here (the test machine has no Docker daemon); the Dockerfile is checked as
text, instruction by instruction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kubejury.config import spec

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions of each stage as (INSTRUCTION, arguments), line continuations joined."""
    text = (ROOT / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    stages: list[list[tuple[str, str]]] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction, args.strip()))
    return stages


def test_dockerfile_is_multi_stage_with_a_pinned_base() -> None:
    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.M)
    assert base, "the base image is set once, in ARG PYTHON_IMAGE"
    image = base[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), (
        f"base image {image!r} must pin python 3.11 to a patch release (and may add a digest)"
    )
    stages = dockerfile_stages()
    assert len(stages) >= 2
    assert all(args.split()[0] == "${PYTHON_IMAGE}" for (_, args), *_ in stages)


def test_final_stage_runs_as_numeric_non_root_user_without_build_tools() -> None:
    final = dockerfile_stages()[-1]
    users = [args for instruction, args in final if instruction == "USER"]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric non-root USER (runAsNonRoot can check it)"
    runs = " ".join(args for instruction, args in final if instruction == "RUN")
    for tool in ("apt-get install", "build-essential", "gcc", "pip install", "make "):
        assert tool not in runs, f"final stage installs build tooling: {tool!r}"
    copies = [args for instruction, args in final if instruction == "COPY"]
    assert copies and all(c.startswith("--from=") for c in copies), (
        "the final stage only copies built artifacts"
    )
    assert any(instruction == "CMD" and "kubejury-operator" in args for instruction, args in final)


def test_dockerignore_keeps_the_context_to_what_the_build_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied: set[str] = set()
    for instruction, args in dockerfile_stages()[0]:
        if instruction == "COPY" and not args.startswith("--from="):
            copied.update(p.rstrip("/").removeprefix("./") for p in args.split()[:-1])
    assert copied and copied <= allowed, f"COPY needs {copied - allowed} in .dockerignore's allow list"


def test_kind_config_has_workers_for_the_cpu_walkthrough() -> None:
    config = yaml.safe_load((ROOT / "kind-config.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [node["role"] for node in config["nodes"]]
    assert roles.count("control-plane") == 1 and roles.count("worker") >= 1
    assert config["name"] == "kubejury"  # the README's kind section loads the image with --name kubejury


@pytest.mark.parametrize("name", ["evalrun-kind-cpu.yaml", "evalrun-study.yaml"])
def test_cluster_examples_are_valid_evalruns(name: str) -> None:
    document = yaml.safe_load((ROOT / "examples" / name).read_text())
    run = spec.EvalRun.model_validate(document)
    assert run.metadata.namespace == "kubejury"  # where the README's kind section and the chart put things


def test_kind_example_runs_gguf_on_llamacpp_with_file_storage_on_the_shared_claim() -> None:
    run = spec.EvalRun.model_validate(
        yaml.safe_load((ROOT / "examples" / "evalrun-kind-cpu.yaml").read_text())
    )
    for entry in run.spec.all_endpoints():
        assert entry.runtime == "llamacpp"
        assert spec.is_gguf_type(entry.quantization)
        assert not entry.node_selector  # any untainted CPU node will do
    assert run.spec.storage.uri.startswith("file:///var/lib/kubejury/results")
    assert run.spec.storage.persistent_volume_claim == "kubejury-results"
    assert run.spec.benchmark.uri.startswith(run.spec.storage.uri)
    kind_doc = (ROOT / "README.md").read_text()  # its "Try it on kind" section
    assert "storage.resultsClaimName=kubejury-results" in kind_doc
    assert "kubectl apply -f examples/evalrun-kind-cpu.yaml" in kind_doc


def test_study_example_is_the_study_setup() -> None:
    run = spec.EvalRun.model_validate(yaml.safe_load((ROOT / "examples" / "evalrun-study.yaml").read_text()))
    models = {m.name: m for m in run.spec.models}
    # 15 models, 16 configurations (QwQ-32B twice)
    assert len(models) == 16
    assert len({m.family for m in models.values() if m.name.startswith("qwq")}) == 1
    for named in (
        "qwen3.5-27b",
        "gpt-oss-120b",
        "gemma-4-31b",
        "gemma-4-26b-a4b",
        "qwen3.5-9b",
        "glm-4.7-flash",
        "gpt-oss-20b",
        "nemotron-70b",
        "calme-2.4-rys-78b",
        "mistral-nemo-12b",
        "qwq-32b-q6_k",
        "qwq-32b-q4_k_m",
    ):
        assert named in models
    assert models["qwq-32b-q6_k"].runtime == "ollama" and models["qwq-32b-q6_k"].quantization == "q6_k"
    assert models["qwq-32b-q4_k_m"].runtime == "ollama" and models["qwq-32b-q4_k_m"].quantization == "q4_k_m"
    assert models["glm-4.7-flash"].checkpoint == "nvfp4"
    assert models["gpt-oss-120b"].checkpoint == "mxfp4"
    judges = {j.name: j for j in run.spec.judges}
    assert len(judges) == 3
    hosted = [j for j in judges.values() if j.runtime == "openai"]
    assert len(hosted) == 1 and hosted[0].api_key_secret_ref is not None
    assert {j.same_as for j in judges.values()} == {"glm-4.7-flash", "gpt-oss-120b", None}
    assert len(run.spec.series) == 4
    primary = run.spec.series[0]
    assert (primary.temperature, primary.repetition_penalty) == (0.0, 1.2)
    assert run.spec.scoring.level_weights == {1: 0.6, 2: 0.8, 3: 1.0}


@pytest.mark.parametrize("name", ["evalrun-kind-cpu.yaml", "evalrun-study.yaml"])
def test_cluster_examples_fit_the_crd_schema(name: str) -> None:
    """What the API server checks on `kubectl apply`: the CRD's structural schema (OpenAPI 3.0,
    whose boolean exclusiveMinimum/Maximum are draft-4 semantics). Unknown fields are the spec's
    business (checked above); here types, enums, patterns and required fields."""
    import jsonschema

    crd = yaml.safe_load((ROOT / "crds" / "evalruns.kubejury.io.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    validator = jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"])
    document = yaml.safe_load((ROOT / "examples" / name).read_text())
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(document)]
    assert not errors, errors
    broken = yaml.safe_load((ROOT / "examples" / name).read_text())
    broken["spec"]["models"][0]["maxModelLen"] = "long"
    assert list(validator.iter_errors(broken)), "the schema check can fail"
