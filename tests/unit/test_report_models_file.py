"""The ``--models`` file: list, mapping and sectioned shapes; errors name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubejury.errors import InputError
from kubejury.report.aggregate import JudgeRelation
from kubejury.report.models_file import load_models_file, parse_models_file


def test_list_form() -> None:
    parsed = parse_models_file(
        "- name: Qwen3.5-27B\n  parameters: 27B\n  quantization: FP8\n  family: qwen\n  gpuMemoryGiB: 40\n"
        "- name: tiny\n  parameters: 270M\n",
        "m.yaml",
    )
    qwen = parsed.models["Qwen3.5-27B"]
    assert (qwen.parameters, qwen.parameters_label, qwen.quantization, qwen.family, qwen.gpu_memory_gib) == (
        27e9,
        "27B",
        "FP8",
        "qwen",
        40.0,
    )
    assert parsed.models["tiny"].parameters == 270e6
    assert parsed.judges == {}


def test_mapping_form_with_size_shorthand_and_numbers() -> None:
    parsed = parse_models_file(
        "Gemma-4-26B-A4B: 26B-A4B\nbig:\n  parameters: 1.2e11\n  gpu_memory_gib: 80.5\nbare:\n", "m"
    )
    assert parsed.models["Gemma-4-26B-A4B"].parameters == 26e9
    assert parsed.models["Gemma-4-26B-A4B"].parameters_label == "26B-A4B"
    assert parsed.models["big"].parameters == 1.2e11 and parsed.models["big"].gpu_memory_gib == 80.5
    assert parsed.models["bare"].parameters is None


def test_sections_with_judges() -> None:
    parsed = parse_models_file(
        "models:\n  GPT-OSS-120B: {parameters: 120B, family: gpt-oss}\n"
        "judges:\n  gpt-judge: {sameAs: GPT-OSS-120B}\n  glm-judge:\n    family: glm\n"
        "  other: GPT-OSS-120B\n",
        "m",
    )
    assert parsed.models["GPT-OSS-120B"].family == "gpt-oss"
    assert parsed.judges == {
        "gpt-judge": JudgeRelation(same_as="GPT-OSS-120B"),
        "glm-judge": JudgeRelation(family="glm"),
        "other": JudgeRelation(same_as="GPT-OSS-120B"),
    }


@pytest.mark.parametrize(
    ("text", "location", "field", "message"),
    [
        ("a:\n  parameters: 27B\nb:\n  paramters: 9B\n", "line 3", "paramters", "unknown key"),
        ("- name: a\n- parameters: 9B\n", "line 2", "name", "non-empty name"),
        ("a:\n  parameters: lots\n", "line 1", "parameters", "cannot read parameter count"),
        ("a:\n  parameters: .nan\n", "line 1", "parameters", "cannot read parameter count"),
        ("a:\n  gpuMemoryGiB: -3\n", "line 1", "gpuMemoryGiB", "positive"),
        ("- name: a\n- name: a\n", "line 2", "name", "listed twice"),
        ("models: [a: 1\n", "line", None, "not valid YAML"),
        ("models: 3\n", "line 1", None, "list or a mapping"),
        ("models: {}\nextra: 1\n", None, "extra", "no other top-level key"),
        ("judges:\n  j: {sameAs: m, weight: 2}\n", "line 2", "weight", "unknown key"),
        ("a:\n  quantization: [1]\n", "line 1", "quantization", "must be a string"),
    ],
)
def test_errors_name_line_and_field(text: str, location: str | None, field: str | None, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_models_file(text, "models.yaml")
    error = caught.value
    assert error.source == "models.yaml"
    assert message in error.detail
    if location is not None:
        assert error.location is not None and error.location.startswith(location)
    assert error.field == field


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(InputError, match="empty"):
        load_models_file(empty)
    with pytest.raises(InputError, match="not found"):
        load_models_file(tmp_path / "absent.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"a: 1\n\xff\xfe\n")
    with pytest.raises(InputError, match="line 2"):
        load_models_file(binary)
