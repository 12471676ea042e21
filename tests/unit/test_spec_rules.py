"""Cross-field rules on raw EvalRun spec mappings (what the webhook sees before any parsing)."""

from __future__ import annotations

from kubejury.config.spec_rules import (
    ALL_QUANTIZATIONS,
    FieldProblem,
    is_gguf_type,
    kube_name,
    normalize_quantization,
    spec_problems,
)


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
