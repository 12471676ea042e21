"""spec.comparisons: validated pairs, and one checkpoint's precisions compared without being asked."""

from __future__ import annotations

from typing import Any

import pytest

from factories import build_evalrun, model_entry
from kubejury.config.comparisons import ModelFacts, checkpoint_key, nominal_bits, precision_pairs
from kubejury.config.spec import SpecError, parse_evalrun
from kubejury.stats.equivalence import DEFAULT_MARGIN, ComparisonRequest

QWQ_Q6 = model_entry(
    "qwq-q6", "ollama://qwq:32b-q6_K", runtime="ollama", servedModel="qwq:32b-q6_K", quantization="Q6_K"
)
QWQ_Q4 = model_entry(
    "qwq-q4", "ollama://qwq:32b-q4_K_M", runtime="ollama", servedModel="qwq:32b-q4_K_M", quantization="Q4_K_M"
)
OTHER = model_entry("qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B")


def problems(**spec: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_evalrun(build_evalrun(**spec))
    return [str(p) for p in caught.value.problems]


def test_named_comparisons_come_first_with_their_margin() -> None:
    run = parse_evalrun(
        build_evalrun(models=[OTHER, QWQ_Q6], comparisons=[{"a": "qwen", "b": "qwq-q6", "margin": 0.5}])
    )
    assert run.spec.comparisons_to_run() == [ComparisonRequest("qwen", "qwq-q6", 0.5, "spec")]
    default = parse_evalrun(build_evalrun(models=[OTHER, QWQ_Q6], comparisons=[{"a": "qwen", "b": "qwq-q6"}]))
    assert default.spec.comparisons[0].margin == DEFAULT_MARGIN


def test_one_checkpoint_in_two_precisions_is_compared_automatically_higher_first() -> None:
    run = parse_evalrun(build_evalrun(models=[QWQ_Q4, OTHER, QWQ_Q6]))
    assert run.spec.comparisons_to_run() == [
        ComparisonRequest("qwq-q6", "qwq-q4", DEFAULT_MARGIN, "automatic")
    ]


def test_a_pair_the_spec_names_is_not_added_twice() -> None:
    named = [{"a": "qwq-q4", "b": "qwq-q6", "margin": 0.1}]
    run = parse_evalrun(build_evalrun(models=[QWQ_Q6, QWQ_Q4], comparisons=named))
    assert run.spec.comparisons_to_run() == [ComparisonRequest("qwq-q4", "qwq-q6", 0.1, "spec")]


@pytest.mark.parametrize(
    ("first", "second", "paired"),
    [
        # one GGUF repository served at two types
        (
            ("hf://org/Model-GGUF", "q6_k", "gguf", "llamacpp"),
            ("hf://org/Model-GGUF", "q4_k_m", "gguf", "llamacpp"),
            True,
        ),
        # a bf16 checkpoint at fp8 and its NVFP4 checkpoint (the format of the checkpoint is its precision)
        (("hf://org/M", "fp8", "bf16", "vllm"), ("hf://org/M-NVFP4", "auto", "nvfp4", "vllm"), True),
        # auto on a bf16 checkpoint: the planner decides, so nothing is known to differ
        (("hf://org/M", "auto", "bf16", "vllm"), ("hf://org/M", "fp8", "bf16", "vllm"), False),
        # the same precision twice is not a precision pair
        (("hf://org/M", "fp8", "bf16", "vllm"), ("hf://org/M", "fp8", "bf16", "vllm"), False),
        # two checkpoints
        (("hf://org/M-7B", "fp8", "bf16", "vllm"), ("hf://org/M-8B", "bf16", "bf16", "vllm"), False),
        # endpoints are not checkpoints
        (
            ("https://api.x/v1", "fp8", "bf16", "openai"),
            ("https://api.x/v1", "bf16", "bf16", "openai"),
            False,
        ),
    ],
)
def test_what_counts_as_one_checkpoint_in_two_precisions(
    first: tuple[str, str, str, str], second: tuple[str, str, str, str], paired: bool
) -> None:
    models = [ModelFacts("one", *first), ModelFacts("two", *second)]
    assert bool(precision_pairs(models)) is paired


def test_precision_words_and_bits() -> None:
    q6 = ModelFacts("a", "ollama://qwq:32b-q6_K", "q6_k", "gguf", "ollama")
    assert checkpoint_key(q6) == "ollama/qwq/32b"
    assert [nominal_bits(p) for p in ("bf16", "fp8", "q6_k", "q4_k_m", "nvfp4", "awq")] == [16, 8, 6, 4, 4, 4]


def test_comparison_problems_name_the_field() -> None:
    found = problems(
        models=[OTHER, QWQ_Q6],
        comparisons=[
            {"a": "qwen", "b": "missing"},
            {"a": "qwen", "b": "qwen"},
            {"a": "qwen", "b": "qwq-q6"},
            {"a": "qwq-q6", "b": "qwen"},
            {"a": "qwen", "b": "qwq-q6", "margin": 0},
        ],
    )
    assert any(p.startswith("spec.comparisons[0].b:") and "'missing'" in p and "qwen" in p for p in found)
    assert any(p.startswith("spec.comparisons[1]:") and "two different models" in p for p in found)
    assert any(p.startswith("spec.comparisons[3]:") and "comparisons[2]" in p for p in found)
    assert any(p.startswith("spec.comparisons[4].margin:") and "greater than 0" in p for p in found)
