"""Admission validation: each rule rejects with the field named, and a good EvalRun passes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from factories import build_evalrun, model_entry
from kubejury_operator.validation import FieldProblem, admission_message, validate_evalrun

# A live object as the API server sends it (uid and generation are Kubernetes's own).
BODY: dict[str, Any] = build_evalrun(
    "study",
    uid="u-1",
    generation=1,
    benchmark="s3://bench/q.jsonl",
    models=[
        model_entry("qwen3.5-27b", "hf://Qwen/Qwen3.5-27B", parameters="27B"),
        model_entry("qwq-32b-gguf", "hf://Qwen/QwQ-32B-GGUF", runtime="llamacpp", quantization="Q4_K_M"),
    ],
    judges=[
        model_entry(
            "deepseek",
            "https://api.deepseek.com/v1",
            runtime="openai",
            apiKeySecretRef={"name": "deepseek", "key": "api-key"},
        )
    ],
    hfTokenSecretRef={"name": "hf", "key": "HF_TOKEN"},
    storage={"uri": "s3://results", "credentialsSecretRef": {"name": "s3"}},
)

SECRETS = {
    ("deepseek", "api-key"),
    ("hf", "HF_TOKEN"),
    ("s3", "AWS_ACCESS_KEY_ID"),
    ("s3", "AWS_SECRET_ACCESS_KEY"),
}


def present(name: str, key: str) -> bool:
    return (name, key) in SECRETS


def body(**spec_changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BODY)
    data["spec"].update(spec_changes)
    return data


def paths(problems: list[FieldProblem]) -> list[str]:
    return [p.path for p in problems]


def test_good_evalrun_is_admitted() -> None:
    assert validate_evalrun(BODY, secrets_present=present) == []


def test_missing_secret_and_key_are_named() -> None:
    problems = validate_evalrun(
        BODY,
        secrets_present=lambda name, key: (
            (name, key) in SECRETS - {("s3", "AWS_SECRET_ACCESS_KEY"), ("deepseek", "api-key")}
        ),
    )
    assert paths(problems) == ["spec.judges[0].apiKeySecretRef", "spec.storage.credentialsSecretRef"]
    assert "'AWS_SECRET_ACCESS_KEY'" in problems[1].message
    assert validate_evalrun(BODY, secrets_present=None) == []  # no cluster: not checked


def test_duplicate_names() -> None:
    models = [*BODY["spec"]["models"], {"name": "qwen3.5-27b", "source": "hf://x/y"}]
    problems = validate_evalrun(body(models=models))
    assert paths(problems) == ["spec.models[2].name"]
    assert "unique" in problems[0].message


def test_duplicate_judges_and_series() -> None:
    judge = {"name": "j", "runtime": "llamacpp"}
    problems = validate_evalrun(body(judges=[judge, judge], series=[{"name": "s"}, {"name": "S"}]))
    assert set(paths(problems)) == {"spec.judges[1].name", "spec.series[1].name"}


def test_at_least_one_judge() -> None:
    problems = validate_evalrun(body(judges=[]))
    assert "spec.judges" in paths(problems)
    assert any("at least one" in p.message for p in problems)


def test_weights_for_every_level() -> None:
    problems = validate_evalrun(body(scoring={"levelWeights": {"1": 0.6, "2": 0.8}}))
    assert paths(problems) == ["spec.scoring.levelWeights"]
    assert "missing: 3" in problems[0].message
    filtered = body(scoring={"levelWeights": {"1": 1.0}})
    filtered["spec"]["benchmark"]["filters"] = {"levels": [1]}
    assert validate_evalrun(filtered) == []


@pytest.mark.parametrize(
    ("runtime", "quantization", "ok"),
    [
        ("vllm", "fp8", True),
        ("vllm", "Q4_K_M", False),
        ("llamacpp", "q6_k", True),
        ("llamacpp", "fp8", False),
        ("ollama", "nvfp4", False),
        ("ollama", "Q8_0", True),
        ("vllm", "awq", False),  # needs an AWQ checkpoint; the model says bf16 (default)
    ],
)
def test_explicit_quantization_vs_runtime(runtime: str, quantization: str, ok: bool) -> None:
    model = {"name": "m", "source": "hf://a/b", "runtime": runtime, "quantization": quantization}
    problems = validate_evalrun(body(models=[model]))
    if ok:
        assert problems == []
    else:
        assert paths(problems) == ["spec.models[0].quantization"], problems


def test_schema_problems_are_reported_too() -> None:
    problems = validate_evalrun(
        body(maxConcurrentModels=0, judges=[{"name": "j", "runtime": "llamacpp", "typo": 1}])
    )
    assert set(paths(problems)) == {"spec.maxConcurrentModels", "spec.judges[0].typo"}


def test_admission_message_lists_fields() -> None:
    problems = [FieldProblem(f"spec.models[{i}].name", "bad") for i in range(25)]
    message = admission_message(problems)
    assert message.startswith("invalid EvalRun: spec.models[0].name: bad;")
    assert "and 5 more" in message


NAN = float("nan")


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        (
            {"models": [{"name": "m", "source": "hf://a/b", "resources": {"memory": "1E"}}]},
            "spec.models[0].resources.memory",
        ),
        (
            {"models": [{"name": "m", "source": "hf://a/b", "resources": {"memory": "500m"}}]},
            "spec.models[0].resources.memory",
        ),
        (
            {"models": [{"name": "m", "source": "hf://a/b", "resources": {"cpu": "-1"}}]},
            "spec.models[0].resources.cpu",
        ),
        ({"scoring": {"levelWeights": {1: NAN, 2: 0.8, 3: 1.0}}}, "spec.scoring.levelWeights.1"),
        ({"scoring": {"tiers": [{"tier": "S", "minWeighted": NAN}]}}, "spec.scoring.tiers[0].minWeighted"),
        ({"judging": {"promptTemplate": "{question} {reference}"}}, "spec.judging.promptTemplate"),
        ({"concurrency": {"requestTimeoutSeconds": float("inf")}}, "spec.concurrency.requestTimeoutSeconds"),
        ({"concurrency": {"maxResponseBytes": 10**15}}, "spec.concurrency.maxResponseBytes"),
        ({"modelCache": {"claimName": "weights", "mountPath": "/tmp"}}, "spec.modelCache.mountPath"),
        ({"series": [{"name": "Report"}]}, "spec.series[0].name"),
    ],
)
def test_a_spec_that_used_to_fail_late_is_refused_at_admission_naming_the_field(
    changes: dict[str, Any], path: str
) -> None:
    assert path in paths(validate_evalrun(body(**changes))), changes
