"""The runtime registry: one answer per runtime to what every part used to ask by string comparison."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import pytest

from kubejury import runtimes
from kubejury.config.spec import ModelSpec, Runtime
from kubejury.errors import ConfigError
from kubejury.placement.server_model import compute_precision
from kubejury.runtimes import (
    LLAMACPP,
    OLLAMA,
    OPENAI,
    VLLM,
    UnknownRuntimeError,
    judge_placement,
    judge_placement_key,
    judge_shares_server,
    runtime_of,
)


@dataclass(frozen=True)
class Entry:
    name: str
    runtime: str = "vllm"
    source: str | None = "hf://org/m"
    quantization: str = "auto"
    same_as: str | None = None


def test_every_runtime_the_spec_allows_is_in_the_registry_and_nothing_else() -> None:
    assert set(get_args(Runtime)) == set(runtimes.REGISTRY) == set(runtimes.RUNTIME_NAMES)


def test_runtime_of_returns_the_registered_object_for_each_name() -> None:
    for name, runtime in runtimes.REGISTRY.items():
        assert runtime_of(name) is runtime
        assert runtime.name == name


def test_an_unknown_runtime_name_is_refused_with_the_names_that_are_known() -> None:
    with pytest.raises(UnknownRuntimeError) as caught:
        runtime_of("tgi")
    message = str(caught.value)
    assert "'tgi'" in message
    assert all(name in message for name in ("vllm", "llamacpp", "ollama", "openai"))
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)


def test_only_the_external_openai_runtime_runs_outside_the_cluster() -> None:
    assert [r.name for r in runtimes.REGISTRY.values() if r.in_cluster] == ["vllm", "llamacpp", "ollama"]
    assert OPENAI.external and not VLLM.external


def test_llamacpp_and_ollama_serve_gguf_and_default_to_a_gguf_checkpoint() -> None:
    assert runtimes.gguf_runtime_names() == ("llamacpp", "ollama")
    assert LLAMACPP.default_checkpoint == OLLAMA.default_checkpoint == "gguf"
    assert VLLM.default_checkpoint == "bf16"
    assert OPENAI.default_checkpoint is None


def test_runtime_specific_abilities_belong_to_exactly_one_runtime() -> None:
    def holders(attribute: str) -> list[str]:
        return [r.name for r in runtimes.REGISTRY.values() if getattr(r, attribute)]

    assert holders("reads_s3_weights") == ["vllm"]
    assert holders("pulls_ollama_tags") == ["ollama"]
    assert holders("default_source_embedded") == ["llamacpp"]
    assert holders("starts_in_local_mode") == ["llamacpp"]
    assert holders("low_precision_kernels") == ["vllm"]


def test_each_runtime_places_the_repetition_penalty_where_its_server_reads_it() -> None:
    assert VLLM.repetition_penalty_path == ("repetition_penalty",)
    assert LLAMACPP.repetition_penalty_path == ("repeat_penalty",)
    assert OLLAMA.repetition_penalty_path == ("options", "repeat_penalty")
    assert OPENAI.repetition_penalty_path == ()


def test_a_judge_that_is_a_model_run_the_same_way_shares_its_server() -> None:
    model = Entry("qwen")
    assert judge_shares_server(model, Entry("qwen-judge", same_as="qwen"))


@pytest.mark.parametrize(
    "judge",
    [
        Entry("j", same_as=None),
        Entry("j", same_as="other"),
        Entry("j", same_as="qwen", runtime="llamacpp"),
        Entry("j", same_as="qwen", source="hf://org/other"),
        Entry("j", same_as="qwen", quantization="fp8"),
    ],
    ids=["no-sameAs", "sameAs-another-model", "other-runtime", "other-source", "other-quantization"],
)
def test_a_judge_differing_from_the_model_in_identity_or_serving_gets_its_own_server(judge: Entry) -> None:
    assert not judge_shares_server(Entry("qwen"), judge)


def test_an_external_endpoint_is_never_a_shared_server() -> None:
    model = Entry("gpt", runtime="openai", source="https://api.example.invalid/v1")
    judge = Entry("j", runtime="openai", source="https://api.example.invalid/v1", same_as="gpt")
    assert not judge_shares_server(model, judge)


def test_the_sharing_rule_reads_parsed_spec_entries() -> None:
    model = ModelSpec(name="qwen", source="hf://org/q")
    judge = ModelSpec(name="q2", source="hf://org/q")
    assert not judge_shares_server(model, Entry(judge.name, judge.runtime, judge.source, judge.quantization))
    assert judge_shares_server(model, Entry("q2", model.runtime, model.source, model.quantization, "qwen"))


def test_a_judge_placement_prefers_its_own_key_then_the_shared_name() -> None:
    assert judge_placement_key("gemma") == "gemma (judge)"
    assert judge_placement({"gemma": 1, "gemma (judge)": 2}, "gemma") == 2
    assert judge_placement({"gemma": 1}, "gemma") == 1
    assert judge_placement({"other": 1}, "gemma") is None


def test_a_runtime_named_in_a_record_read_back_is_looked_up_without_refusing_an_unknown_name() -> None:
    assert runtimes.recorded_runtime("ollama") is OLLAMA
    assert runtimes.recorded_runtime("") is None


def test_a_placement_read_back_without_a_runtime_is_estimated_in_bf16_instead_of_refused() -> None:
    assert compute_precision("fp8", "9.0", "") == "bf16"
    assert compute_precision("fp8", "9.0", "vllm") == "fp8"
