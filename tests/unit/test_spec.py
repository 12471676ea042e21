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


# ----------------------------------------------------------------------------- issue 29, finding 9:
# specs that were admitted and then failed late (or crashed the reconcile) are refused up front.


def messages_at(data: dict[str, Any], path: str) -> list[str]:
    """The messages of the problems found at exactly ``path``."""
    return [p.removeprefix(path + ": ") for p in problems_of(data) if p.startswith(path + ": ")]


def with_resources(**resources: Any) -> dict[str, Any]:
    return doc(models=[{"name": "m", "source": "hf://a/b", "resources": resources}])


@pytest.mark.parametrize(
    "memory", ["1E", "500m", "-5Gi", "1.2.3Gi", "0", "0Gi", "1e3", "1Pi", "65Ti", "100000T", "+2Gi", "1024"]
)
def test_a_memory_request_the_planner_cannot_use_is_refused_naming_the_field_with_an_example(
    memory: str,
) -> None:
    messages = messages_at(with_resources(memory=memory), "spec.models[0].resources.memory")
    assert messages, f"{memory!r} was admitted"
    assert "64Gi" in messages[0]


@pytest.mark.parametrize("memory", ["64Gi", "512Mi", "8G", "1.5Gi", "2Ti", "64Ti", "1048576", "900M"])
def test_memory_requests_in_bytes_with_a_binary_or_decimal_suffix_are_accepted_and_the_planner_reads_them(
    memory: str,
) -> None:
    from kubejury.config.spec_rules import memory_quantity_bytes
    from kubejury_operator.manifests import memory_bytes

    resources = parse_evalrun(with_resources(memory=memory)).spec.models[0].resources
    assert resources.memory == memory
    assert memory_quantity_bytes(memory) == memory_bytes(memory)


@pytest.mark.parametrize("cpu", ["-1", "0", "0m", "1.2.3", "1e3", "2k", "0.0001", "1025", "2000000m", "1Gi"])
def test_a_cpu_request_that_is_not_a_positive_count_of_cores_is_refused_naming_the_field(cpu: str) -> None:
    messages = messages_at(with_resources(cpu=cpu), "spec.models[0].resources.cpu")
    assert messages, f"{cpu!r} was admitted"
    assert "500m" in messages[0]


@pytest.mark.parametrize("cpu", ["8", "500m", "0.5", "1.25", "1024", "100m"])
def test_cpu_requests_in_cores_or_millicores_are_accepted(cpu: str) -> None:
    assert parse_evalrun(with_resources(cpu=cpu)).spec.models[0].resources.cpu == cpu


NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"scoring": {"levelWeights": {1: NAN, 2: 0.8, 3: 1.0}}}, "spec.scoring.levelWeights.1"),
        ({"scoring": {"levelWeights": {1: INF, 2: 0.8, 3: 1.0}}}, "spec.scoring.levelWeights.1"),
        ({"scoring": {"tiers": [{"tier": "S", "minWeighted": NAN}]}}, "spec.scoring.tiers[0].minWeighted"),
        ({"scoring": {"tiers": [{"tier": "S", "minWeighted": -INF}]}}, "spec.scoring.tiers[0].minWeighted"),
        (
            {"scoring": {"tiers": [{"tier": "S", "maxDegradation": INF}]}},
            "spec.scoring.tiers[0].maxDegradation",
        ),
        ({"scoring": {"tiers": [{"tier": "S", "maxSigma": INF}]}}, "spec.scoring.tiers[0].maxSigma"),
        ({"scoring": {"confidence": NAN}}, "spec.scoring.confidence"),
        ({"series": [{"name": "s", "temperature": NAN}]}, "spec.series[0].temperature"),
        ({"series": [{"name": "s", "topP": NAN}]}, "spec.series[0].topP"),
        ({"series": [{"name": "s", "repetitionPenalty": INF}]}, "spec.series[0].repetitionPenalty"),
        ({"judging": {"temperature": NAN}}, "spec.judging.temperature"),
        ({"concurrency": {"requestTimeoutSeconds": INF}}, "spec.concurrency.requestTimeoutSeconds"),
        ({"concurrency": {"requestTimeoutSeconds": NAN}}, "spec.concurrency.requestTimeoutSeconds"),
        ({"concurrency": {"maxErrorShare": NAN}}, "spec.concurrency.maxErrorShare"),
        (
            {"models": [{"name": "m", "source": "a/b", "resources": {"gpuMemoryGiB": INF}}]},
            "spec.models[0].resources.gpuMemoryGiB",
        ),
        (
            {"models": [{"name": "m", "source": "a/b", "gpuMemoryUtilization": NAN}]},
            "spec.models[0].gpuMemoryUtilization",
        ),
    ],
)
def test_a_non_finite_number_is_refused_wherever_the_spec_holds_a_float(
    changes: dict[str, Any], path: str
) -> None:
    assert messages_at(doc(**changes), path), f"{path} admitted a non-finite number"


def test_yaml_nan_and_inf_are_refused_naming_the_field() -> None:
    from kubejury.config.spec import parse_evalrun_yaml

    text = yaml.safe_dump(MINIMAL, sort_keys=False) + (
        "  scoring:\n    levelWeights: {1: .nan, 2: 0.8, 3: 1.0}\n    tiers:\n      - {tier: S, minWeighted: .inf}\n"
    )
    with pytest.raises(SpecError) as info:
        parse_evalrun_yaml(text, "run.yaml")
    paths = {p.path for p in info.value.problems}
    assert {"spec.scoring.levelWeights.1", "spec.scoring.tiers[0].minWeighted"} <= paths


def test_the_default_and_study_settings_stay_admissible_with_finite_floats_only() -> None:
    from kubejury.config.spec import STUDY_SERIES

    run = parse_evalrun(doc(series=[s.model_dump(mode="json") for s in STUDY_SERIES]))
    assert [s.name for s in run.spec.series] == ["primary", "t08-rp12", "t0-rp105"]
    assert run.spec.scoring_config().tiers == DEFAULT_TIERS


TEMPLATE = "Q: {question}\nR: {reference}\nA: {answer}\n"


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("Q: {question}\nR: {reference}\n", "{answer}"),
        ("R: {reference}\nA: {answer}\n", "{question}"),
        ("Q: {question}\nA: {answer}\n", "{reference}"),
        (TEMPLATE + "again: {answer}", "{answer}"),
        (TEMPLATE + "{answers}", "{answers}"),
        (TEMPLATE + "{ answer }", "{ answer }"),
        (TEMPLATE + "{Answer}", "{Answer}"),
        (TEMPLATE + "{model_name}", "{model_name}"),
    ],
)
def test_a_judging_template_without_each_placeholder_once_or_with_an_unknown_one_is_refused(
    template: str, fragment: str
) -> None:
    messages = messages_at(doc(judging={"promptTemplate": template}), "spec.judging.promptTemplate")
    assert messages, f"{template!r} was admitted"
    assert fragment in messages[0]


def test_a_judging_template_may_show_a_json_example_because_rendering_substitutes_only_the_placeholders() -> (
    None
):
    from kubejury.judging.judge_prompt import JudgePrompt

    template = (
        TEMPLATE + 'Reply as {"rationale": "…", "score": 7} or end with [[7]]. Stray } and { are text too.'
    )
    run = parse_evalrun(doc(judging={"promptTemplate": template}))
    assert run.spec.judging.prompt_template == template.strip()
    rendered = JudgePrompt.create(run.spec.judging.prompt_template, language="en").render("q", "r", "a")
    assert '{"rationale": "…", "score": 7}' in rendered


@pytest.mark.parametrize("seconds", [3601, 1e9])
def test_a_request_timeout_beyond_an_hour_is_refused(seconds: float) -> None:
    messages = messages_at(
        doc(concurrency={"requestTimeoutSeconds": seconds}), "spec.concurrency.requestTimeoutSeconds"
    )
    assert messages and "3600" in messages[0]


def test_a_request_timeout_of_an_hour_is_accepted() -> None:
    run = parse_evalrun(doc(concurrency={"requestTimeoutSeconds": 3600}))
    assert run.spec.concurrency.request_timeout_seconds == 3600


@pytest.mark.parametrize("size", [10**15, 32 * 1024 * 1024 + 1])
def test_a_response_cap_above_32_mib_is_refused(size: int) -> None:
    messages = messages_at(doc(concurrency={"maxResponseBytes": size}), "spec.concurrency.maxResponseBytes")
    assert messages and "33554432" in messages[0]


def test_the_response_cap_may_be_lowered() -> None:
    run = parse_evalrun(doc(concurrency={"maxResponseBytes": 1024 * 1024}))
    assert run.spec.concurrency.max_response_bytes == 1024 * 1024


@pytest.mark.parametrize(
    "mount_path",
    [
        "/tmp",
        "/tmp/",
        "/tmp/cache",
        "//tmp",
        "/dev/shm",
        "/dev",
        "/",
        "/models/src",
        "/models/src/cache",
        "/models",
        "/proc/cache",
        "/etc/hosts",
        "/var",
        "/var/run/secrets/kubernetes.io/serviceaccount",
        "/cache/../tmp",
        "/models/./src",
    ],
)
def test_a_model_cache_mount_path_colliding_with_the_server_pods_own_mounts_is_refused(
    mount_path: str,
) -> None:
    data = doc(modelCache={"claimName": "weights", "mountPath": mount_path})
    assert messages_at(data, "spec.modelCache.mountPath"), f"{mount_path!r} was admitted"


@pytest.mark.parametrize(
    "mount_path", ["/models/cache", "/cache", "/mnt/models", "/data/hf", "/models/cache/"]
)
def test_a_model_cache_mount_path_of_its_own_is_accepted(mount_path: str) -> None:
    run = parse_evalrun(doc(modelCache={"claimName": "weights", "mountPath": mount_path}))
    assert run.spec.model_cache is not None
    assert run.spec.model_cache.mount_path == mount_path.rstrip("/")


# ----------------------------------------------------------------------------- issue 29, low findings


@pytest.mark.parametrize(
    ("written", "parsed"),
    [("S3://Bucket/Runs", "s3://Bucket/Runs"), ("File:///data/Runs", "file:///data/Runs")],
)
def test_the_storage_uri_scheme_is_lower_cased_and_the_rest_kept(written: str, parsed: str) -> None:
    assert parse_evalrun(doc(storage={"uri": written})).spec.storage.uri == parsed


@pytest.mark.parametrize(
    ("written", "parsed"),
    [
        ("S3://Bench/Q.jsonl", "s3://Bench/Q.jsonl"),
        ("FILE:///data/Q.jsonl", "file:///data/Q.jsonl"),
        ("HTTPS://Host/Q.jsonl", "https://Host/Q.jsonl"),
        ("bench/Q.jsonl", "bench/Q.jsonl"),
    ],
)
def test_the_benchmark_uri_scheme_is_lower_cased_and_the_rest_kept(written: str, parsed: str) -> None:
    data = doc()
    data["spec"]["benchmark"]["uri"] = written
    assert parse_evalrun(data).spec.benchmark.uri == parsed


@pytest.mark.parametrize("name", ["Report", "REPORT", "Progress", "Spec.json", "Spec-History"])
def test_reserved_series_names_are_refused_whatever_their_case(name: str) -> None:
    messages = messages_at(doc(series=[{"name": name}]), "spec.series[0].name")
    assert messages and "reserved" in messages[0]
