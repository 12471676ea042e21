"""EvalRun spec: what it accepts, what it normalises, and how it says what is wrong."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from factories import build_evalrun, model_entry
from kubejury.config.spec import (
    EMBEDDED_SOURCE,
    EvalRun,
    SpecError,
    load_evalrun,
    parse_evalrun,
)
from kubejury.errors import InputError
from kubejury.stats.scoring import DEFAULT_TIERS

MINIMAL: dict[str, Any] = build_evalrun(
    "smoke",
    namespace=None,
    benchmark="s3://bench/questions.jsonl",
    models=[model_entry("qwen3.5-27b", "hf://Qwen/Qwen3.5-27B", parameters="27B")],
    judges=[model_entry("gpt-oss-120b", "hf://openai/gpt-oss-120b", checkpoint="mxfp4")],
)


def doc(**spec_changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    data["spec"].update(spec_changes)
    return data


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_evalrun(data, "run.yaml")
    return [str(p) for p in info.value.problems]


def test_minimal_run_gets_the_study_defaults() -> None:
    run = parse_evalrun(MINIMAL)
    spec = run.spec
    assert run.name == "smoke"
    assert spec.benchmark.language == "ru"
    assert [(s.name, s.temperature, s.repetition_penalty) for s in spec.series] == [("primary", 0.0, 1.2)]
    assert spec.concurrency.requests_per_endpoint == 64
    assert spec.models[0].served_model == "qwen3.5-27b"
    assert spec.models[0].checkpoint == "bf16"
    assert spec.models[0].parameter_count == pytest.approx(27e9)
    config = spec.scoring_config()
    assert config.level_weights == {1: 0.6, 2: 0.8, 3: 1.0}
    assert config.tiers == DEFAULT_TIERS
    assert config.primary_series == "primary"


def test_camel_case_out_and_snake_case_in() -> None:
    run = parse_evalrun(MINIMAL)
    dumped = run.model_dump(mode="json")
    assert "servedModel" in dumped["spec"]["models"][0]
    assert "limitPerCell" in dumped["spec"]["benchmark"]["filters"]
    assert parse_evalrun(dumped) == run  # round trip
    snake = doc(models=[{"name": "m", "source": "org/repo", "max_model_len": 4096}])
    assert parse_evalrun(snake).spec.models[0].max_model_len == 4096


def test_quantization_is_case_insensitive_and_lower_cased() -> None:
    data = doc(
        models=[{"name": "qwq", "source": "hf://a/b", "runtime": "llamacpp", "quantization": "Q4_K_M"}]
    )
    model = parse_evalrun(data).spec.models[0]
    assert model.quantization == "q4_k_m"
    assert model.checkpoint == "gguf"
    assert (
        parse_evalrun(doc(models=[{"name": "x", "source": "a/b", "quantization": "FP8"}]))
        .spec.models[0]
        .quantization
        == "fp8"
    )


def test_sources_are_normalised() -> None:
    data = doc(models=[{"name": "a", "source": "Qwen/Qwen3.5-27B"}, {"name": "b", "source": "/models/m"}])
    assert [m.source for m in parse_evalrun(data).spec.models] == [
        "hf://Qwen/Qwen3.5-27B",
        "file:///models/m",
    ]


def test_llamacpp_without_source_serves_the_embedded_model() -> None:
    model = parse_evalrun(doc(models=[{"name": "tiny", "runtime": "llamacpp"}])).spec.models[0]
    assert model.source == EMBEDDED_SOURCE and model.is_embedded
    assert model.chat_format == "gemma"
    assert model.parameters == "0.27B"


def test_the_second_embedded_model_brings_its_own_facts() -> None:
    entry = {"name": "smol", "runtime": "llamacpp", "source": "embedded://smollm2-135m-instruct-q4_1"}
    model = parse_evalrun(doc(models=[entry])).spec.models[0]
    assert model.is_embedded and model.checkpoint == "gguf"
    assert model.chat_format is None  # an instruct model: the chat template in its GGUF
    assert (model.parameters, model.family) == ("0.135B", "smollm2")


def test_openai_endpoint_with_secret() -> None:
    data = doc(
        judges=[
            {
                "name": "deepseek",
                "runtime": "openai",
                "source": "https://api.deepseek.com/v1",
                "servedModel": "deepseek-chat",
                "apiKeySecretRef": {"name": "deepseek", "key": "api-key"},
            }
        ]
    )
    judge = parse_evalrun(data).spec.judges[0]
    assert judge.request_model == "deepseek-chat"
    assert judge.api_key_secret_ref is not None and judge.api_key_secret_ref.key == "api-key"
    assert not judge.deployed


@pytest.mark.parametrize(
    ("entry", "path", "fragment"),
    [
        (
            {"name": "m", "source": "a/b", "quantization": "q4_k_m"},
            "spec.models[0].quantization",
            "llamacpp or ollama",
        ),
        (
            {"name": "m", "source": "a/b", "runtime": "llamacpp", "quantization": "fp8"},
            "spec.models[0].quantization",
            "vLLM only",
        ),
        (
            {"name": "m", "source": "a/b", "runtime": "ollama", "quantization": "awq"},
            "spec.models[0].quantization",
            "vLLM only",
        ),
        (
            {"name": "m", "source": "a/b", "quantization": "nvfp4"},
            "spec.models[0].quantization",
            "checkpoint nvfp4",
        ),
        ({"name": "m", "source": "hf://a/b", "runtime": "openai"}, "spec.models[0].source", "http(s)"),
        ({"name": "m", "source": "https://x/v1"}, "spec.models[0].source", "runtime: openai"),
        ({"name": "m", "source": "a/b", "quantization": "q9_z"}, "spec.models[0].quantization", "Q4_K_M"),
        ({"name": "m", "source": "a/b", "runtime": "tgi"}, "spec.models[0].runtime", "'vllm'"),
        ({"name": "m", "runtime": "vllm"}, "spec.models[0].source", "needs a source"),
    ],
)
def test_runtime_and_quantization_rules_name_the_field(
    entry: dict[str, Any], path: str, fragment: str
) -> None:
    problems = problems_of(doc(models=[entry]))
    matching = [p for p in problems if p.startswith(path + ":")]
    assert matching, problems
    assert any(fragment in p for p in matching), matching


def test_gguf_and_mxfp4_allowed_on_llamacpp() -> None:
    data = doc(
        models=[
            {
                "name": "oss",
                "source": "hf://ggml-org/gpt-oss-20b-GGUF",
                "runtime": "llamacpp",
                "quantization": "MXFP4",
            }
        ]
    )
    assert parse_evalrun(data).spec.models[0].quantization == "mxfp4"


def test_every_problem_is_listed_at_once() -> None:
    data = doc(
        models=[
            {"name": "dup", "source": "a/b"},
            {"name": "dup", "source": "a/c", "colour": "red"},
        ],
        judges=[],
        series=[{"name": "s"}, {"name": "s", "topP": 0}],
    )
    problems = problems_of(data)
    text = "\n".join(problems)
    assert "spec.models[1].name: model name 'dup' is already used by spec.models[0]" in text
    assert "spec.models[1].colour: unknown field; allowed here: name, source" in text
    assert any(p.startswith("spec.judges:") for p in problems)
    assert any(p.startswith("spec.series[1].name:") for p in problems)
    assert any(p.startswith("spec.series[1].topP:") for p in problems)


def test_kubernetes_name_collisions_are_rejected() -> None:
    problems = problems_of(
        doc(models=[{"name": "Qwen_3", "source": "a/b"}, {"name": "qwen-3", "source": "a/c"}])
    )
    assert any("collides" in p and p.startswith("spec.models[1].name") for p in problems)


def test_same_as_must_name_a_model() -> None:
    judges = [{"name": "j", "source": "a/b", "sameAs": "missing"}]
    assert any(p.startswith("spec.judges[0].sameAs:") for p in problems_of(doc(judges=judges)))
    judges[0]["sameAs"] = "qwen3.5-27b"
    assert parse_evalrun(doc(judges=judges)).spec.judges[0].same_as == "qwen3.5-27b"


def test_level_weights_cover_the_levels_asked() -> None:
    data = doc(scoring={"levelWeights": {"1": 0.5, "2": 1}})
    assert any("missing: 3" in p for p in problems_of(data))
    data["spec"]["benchmark"]["filters"] = {"levels": [1, 2]}
    assert parse_evalrun(data).spec.scoring.level_weights == {1: 0.5, 2: 1.0}
    negative = doc(scoring={"levelWeights": {1: 0.6, 2: 0, 3: 1}})
    assert any(
        p.startswith("spec.scoring.levelWeights.2:") and "positive" in p for p in problems_of(negative)
    )


def test_unknown_top_level_and_wrong_kind() -> None:
    data = copy.deepcopy(MINIMAL)
    data["kind"] = "Job"
    data["extra"] = 1
    problems = problems_of(data)
    assert any(p.startswith("kind:") and "'EvalRun'" in p for p in problems)
    assert any(p.startswith("extra: unknown field") for p in problems)


def test_metadata_from_a_live_object_and_status_are_accepted() -> None:
    data = copy.deepcopy(MINIMAL)
    data["metadata"].update({"uid": "1234", "resourceVersion": "7", "namespace": "eval"})
    data["status"] = {"phase": "Generating"}
    run = parse_evalrun(data)
    assert run.metadata.namespace == "eval"
    assert "status" not in run.model_dump()


def test_load_reports_lines(tmp_path: Path) -> None:
    data = doc(models=[{"name": "m", "source": "a/b", "quantization": "gguf-ish"}])
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_evalrun(file)
    line = next(i for i, text in enumerate(file.read_text().splitlines(), 1) if "gguf-ish" in text)
    assert f"line {line}: spec.models[0].quantization" in str(info.value)
    assert str(file) in str(info.value)


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text("apiVersion: kubejury.io/v1alpha1\nspec:\n  models: [a\n  judges: 1\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_evalrun(file)
    assert info.value.location is not None and info.value.location.startswith("line ")
    assert "not valid YAML" in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(InputError, match="file not found"):
        load_evalrun("/nonexistent/run.yaml")


def test_evalrun_model_validate_applies_cross_field_rules() -> None:
    data = doc(models=[{"name": "a", "source": "a/b"}, {"name": "a", "source": "a/c"}])
    with pytest.raises(Exception, match="must be unique"):
        EvalRun.model_validate(data)


def test_pattern_errors_say_what_is_allowed() -> None:
    data = doc(models=[{"name": "bad name", "source": "a/b"}])
    data["metadata"]["name"] = "Study_1"
    problems = problems_of(data)
    assert any(
        p.startswith("metadata.name: 'Study_1' is not allowed here: Name of the run (DNS-1123")
        for p in problems
    )
    assert any(
        p.startswith("spec.models[0].name: 'bad name' is not allowed here: Unique name") for p in problems
    )
