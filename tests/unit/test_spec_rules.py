"""Cross-field rules on raw EvalRun spec mappings (what the webhook sees before any parsing)."""

from __future__ import annotations

from typing import Any

import pytest

from kubejury.config.spec_rules import (
    ALL_QUANTIZATIONS,
    FieldProblem,
    is_gguf_type,
    kube_name,
    mount_path_problem,
    normalize_quantization,
    spec_problems,
)
from kubejury.records.placement import Placement
from kubejury_operator import manifests
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab


def test_vocabularies() -> None:
    assert normalize_quantization(" Q4_K_M ") == "q4_k_m"
    assert is_gguf_type("Q6_K") and is_gguf_type("mxfp4") and not is_gguf_type("fp8")
    assert {"auto", "fp8", "nvfp4", "mxfp4", "bf16", "awq", "gptq", "q4_k_m"} <= set(ALL_QUANTIZATIONS)
    assert kube_name("Qwen3.5_27B") == "qwen3-5-27b"


def test_raw_snake_and_camel_keys() -> None:
    raw = {
        "models": [{"name": "a", "source": "a/b", "runtime": "llamacpp", "quantization": "FP8"}],
        "judges": [{"name": "j", "runtime": "vllm", "gguf_path": "/m.gguf"}],
    }
    problems = spec_problems(raw)
    assert [p.path for p in problems] == ["spec.models[0].quantization"]
    assert "vLLM only" in problems[0].message


def test_malformed_input_is_reported_not_crashing() -> None:
    problems = spec_problems(
        {"models": "nonsense", "judges": [1, None], "scoring": {"levelWeights": {"x": 1}}}, prefix=""
    )
    paths = [p.path for p in problems]
    assert "models" in paths
    assert "scoring.levelWeights.x" in paths
    assert str(FieldProblem("a.b", "bad")) == "a.b: bad"


def test_clean_spec_has_no_problems() -> None:
    spec = {
        "models": [{"name": "m", "source": "hf://a/b", "quantization": "fp8"}],
        "judges": [{"name": "j", "runtime": "openai", "source": "https://x/v1", "sameAs": "m"}],
        "series": [{"name": "s"}],
        "scoring": {"levelWeights": {"1": 0.6, "2": 0.8, "3": 1.0}},
    }
    assert spec_problems(spec) == []


def test_an_unknown_embedded_model_is_named_with_the_ones_kubejury_carries() -> None:
    raw = {
        "models": [
            {"name": "a", "runtime": "llamacpp", "source": "embedded://smollm2-135m-instruct-q4_1"},
            {"name": "b", "runtime": "llamacpp", "source": "embedded://llama-70b"},
        ],
        "judges": [{"name": "j", "runtime": "llamacpp"}],
    }
    problems = spec_problems(raw)
    assert [p.path for p in problems] == ["spec.models[1].source"]
    assert "embedded://llama-70b" in problems[0].message
    assert "embedded://gemma-3-270m-q4_k_m" in problems[0].message
    assert "embedded://smollm2-135m-instruct-q4_1" in problems[0].message


def test_a_non_finite_level_weight_is_named_in_the_raw_spec() -> None:
    raw = {
        "models": [{"name": "m", "source": "hf://a/b"}],
        "judges": [{"name": "j", "source": "hf://a/c"}],
        "scoring": {"levelWeights": {"1": float("nan"), "2": float("inf"), "3": 1.0}},
    }
    problems = {p.path: p.message for p in spec_problems(raw)}
    assert set(problems) == {"spec.scoring.levelWeights.1", "spec.scoring.levelWeights.2"}
    assert all("finite" in message for message in problems.values())


def test_reserved_series_names_compare_without_case_in_the_raw_spec() -> None:
    raw = {
        "models": [{"name": "m", "source": "hf://a/b"}],
        "judges": [{"name": "j", "source": "hf://a/c"}],
        "series": [{"name": "Report"}, {"name": "s"}],
    }
    assert [p.path for p in spec_problems(raw)] == ["spec.series[0].name"]


def test_a_name_ending_like_a_shard_file_in_any_case_is_refused() -> None:
    raw = {
        "models": [{"name": "m.SHARD-1-OF-2", "source": "hf://a/b"}],
        "judges": [{"name": "j", "source": "hf://a/c"}],
    }
    assert [p.path for p in spec_problems(raw)] == ["spec.models[0].name"]


def _server_mounts(runtime: str, source: str, gpus: int) -> list[dict[str, Any]]:
    """The volume mounts of the model server Deployment the operator builds for one model."""
    placement = Placement(runtime=runtime, quantization="auto", tensor_parallel_size=gpus)
    endpoint = vocab.Endpoint(
        key=f"m-{runtime}",
        name=runtime,
        source=source,
        served_model=runtime,
        runtime=runtime,
        placement=placement,
    )
    run = vocab.RunRef(name="r", namespace="evals", uid="u-1")
    deployment = manifests.model_deployment(run, endpoint, 1, opsettings.WorkloadSettings())
    mounts: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    return mounts


@pytest.mark.parametrize(
    ("runtime", "source", "gpus"),
    [
        ("vllm", "pvc://weights/qwen", 1),
        ("llamacpp", "pvc://weights/qwq.gguf", 0),
        ("llamacpp", "hf://Qwen/QwQ-32B-GGUF", 1),
        ("ollama", "ollama://mixtral:8x7b", 1),
    ],
)
def test_every_other_mount_of_a_model_server_pod_is_a_path_the_model_cache_may_not_take(
    runtime: str, source: str, gpus: int
) -> None:
    mounts = _server_mounts(runtime, source, gpus)
    assert any(mount["name"] == "model-cache" for mount in mounts)
    for mount in mounts:
        if mount["name"] != "model-cache":
            assert mount_path_problem(mount["mountPath"]) is not None, mount
