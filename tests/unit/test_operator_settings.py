"""The operator's settings: one field → variable table, true to the chart's ConfigMap and docs/chart.md."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from kubejury_operator import settings as st
from kubejury_operator.settings import ENVIRONMENT, READ_ELSEWHERE, WorkloadSettings

REPO = Path(__file__).resolve().parents[2]
CONFIGMAP = REPO / "charts" / "kubejury" / "templates" / "configmap.yaml"
CHART_DOC = REPO / "docs" / "chart.md"
CONCERNS = (
    st.ImageSettings,
    st.JobSettings,
    st.StorageSettings,
    st.ServerSettings,
    st.ModelCacheSettings,
    st.QueueSettings,
)

# Fields no chart variable sets: constants of the cluster or overridden per run from the spec.
NOT_FROM_THE_CHART = {
    "gpu_resource",
    "hf_token_key",
    "job_uid",
    "model_cache_mount",
    "model_cache_size_limit",
    "kueue_job_grace_seconds",  # guard 1's grace (docs/operator.md, "Kueue"): a fixed default
}

# A value each reader takes, and the value the field then holds.
SAMPLES: dict[Any, tuple[str, Any]] = {
    st.text_or_default: ("example:1", "example:1"),
    st.text_or_none: ("example", "example"),
    st.http_url_or_none: ("http://hub-mirror.example:8080/", "http://hub-mirror.example:8080"),
    st.integer: ("42", 42),
    st.decimal: ("0.5", 0.5),
    st.memory_quantity: ("16Gi", "16Gi"),
    st.boolean: ("true", True),
    st.json_object: ('{"requests": {"cpu": "1"}}', {"requests": {"cpu": "1"}}),
    st.tolerations: (
        '[{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]',
        ({"key": "pool", "operator": "Exists", "effect": "NoSchedule"},),
    ),
}


def template_variables(text: str) -> set[str]:
    """The variable names a ConfigMap template sets (``  NAME: value`` lines, comments aside)."""
    return set(re.findall(r"^\s+([A-Z][A-Z0-9_]*):", text, flags=re.MULTILINE))


def expand_braces(text: str) -> list[str]:
    """``A_{X,Y}_B`` → ``A_X_B``, ``A_Y_B`` (as docs/chart.md abbreviates related variables)."""
    match = re.search(r"\{([^{}]*)\}", text)
    if match is None:
        return [text]
    head, tail = text[: match.start()], text[match.end() :]
    return [name for option in match[1].split(",") for name in expand_braces(head + option + tail)]


def documented_variables(text: str) -> set[str]:
    """The variables the settings table of docs/chart.md names in its first column."""
    section = text.split("## Operator settings", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for row in re.findall(r"^\|([^|]*)\|", section, flags=re.MULTILINE):
        for quoted in re.findall(r"`([^`]+)`", row):
            names.update(expand_braces(quoted))
    return names


def test_template_reading_finds_set_variables_and_skips_template_syntax() -> None:
    text = 'data:\n  KUBEJURY_A: {{ .Values.a | quote }}\n  {{- if .x }}\n  AWS_REGION: ""\n  # NOT_ONE: x\n'
    assert template_variables(text) == {"KUBEJURY_A", "AWS_REGION"}


def test_brace_expansion_of_the_docs_abbreviations() -> None:
    assert expand_braces("K_{A,B}_S") == ["K_A_S", "K_B_S"]
    assert expand_braces("PLAIN") == ["PLAIN"]


def test_every_variable_of_the_table_is_set_by_the_charts_configmap() -> None:
    missing = {s.env for s in ENVIRONMENT} - template_variables(CONFIGMAP.read_text())
    assert not missing, f"the operator reads these, the chart never sets them: {sorted(missing)}"


def test_the_charts_configmap_sets_no_variable_the_operator_does_not_know() -> None:
    known = {s.env for s in ENVIRONMENT} | set(READ_ELSEWHERE)
    unknown = template_variables(CONFIGMAP.read_text()) - known
    assert not unknown, f"the chart sets these, nothing reads them: {sorted(unknown)}"


def test_docs_chart_lists_every_variable_the_chart_sets_and_no_other() -> None:
    assert documented_variables(CHART_DOC.read_text()) == template_variables(CONFIGMAP.read_text())


def test_each_variable_read_elsewhere_is_spelled_in_the_module_named_as_its_reader() -> None:
    for variable, reader in READ_ELSEWHERE.items():
        module = reader.split(".")[0] + "." + reader.split(".")[1]
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, reader
        assert f'"{variable}"' in Path(spec.origin).read_text(), f"{variable} is not read by {module}"


def test_the_table_names_each_field_and_each_variable_once() -> None:
    fields = [s.field for s in ENVIRONMENT]
    variables = [s.env for s in ENVIRONMENT]
    assert len(fields) == len(set(fields))
    assert len(variables) == len(set(variables))


def test_every_settings_field_is_in_the_table_or_known_to_come_from_elsewhere() -> None:
    all_fields = {f.name for f in dataclasses.fields(WorkloadSettings)}
    in_table = {s.field for s in ENVIRONMENT}
    assert in_table <= all_fields
    assert all_fields - in_table == NOT_FROM_THE_CHART


def test_each_field_belongs_to_exactly_one_concern_and_the_whole_declares_none_of_its_own() -> None:
    owners: dict[str, list[str]] = {}
    for concern in CONCERNS:
        for f in dataclasses.fields(concern):
            owners.setdefault(f.name, []).append(concern.__name__)
    assert all(len(names) == 1 for names in owners.values()), owners
    assert set(owners) == {f.name for f in dataclasses.fields(WorkloadSettings)}
    assert all(issubclass(WorkloadSettings, concern) for concern in CONCERNS)


@pytest.mark.parametrize("setting", ENVIRONMENT, ids=[s.env for s in ENVIRONMENT])
def test_from_env_reads_each_variable_into_its_field(setting: st.EnvSetting) -> None:
    raw, expected = SAMPLES[setting.read]
    read = WorkloadSettings.from_env({setting.env: raw})
    assert getattr(read, setting.field) == expected
    assert getattr(WorkloadSettings(), setting.field) != expected  # the variable changed it


def test_unset_variables_keep_the_defaults() -> None:
    assert WorkloadSettings.from_env({}) == WorkloadSettings()


def test_an_empty_variable_keeps_a_required_default_and_clears_an_optional_one() -> None:
    read = WorkloadSettings.from_env({"KUBEJURY_VLLM_IMAGE": "", "KUBEJURY_HF_TOKEN_SECRET": ""})
    assert read.vllm_image == WorkloadSettings().vllm_image
    assert read.hf_token_secret is None


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("KUBEJURY_MAX_MODEL_LEN", "8k"),
        ("KUBEJURY_GPU_MEMORY_UTILIZATION", "ninety"),
        ("KUBEJURY_JOB_RESOURCES", "{requests"),
        ("KUBEJURY_JOB_RESOURCES", "[]"),
        ("KUBEJURY_JOB_OOM_MAX_MEMORY", "lots"),
    ],
)
def test_a_value_that_cannot_be_read_is_refused_naming_its_variable(variable: str, raw: str) -> None:
    with pytest.raises(ValueError, match=variable):
        WorkloadSettings.from_env({variable: raw})


@pytest.mark.parametrize("raw", ["hub-mirror.example", "ftp://hub", "http://a b"])
def test_a_hub_endpoint_that_is_not_an_http_url_is_refused_naming_its_variable(raw: str) -> None:
    with pytest.raises(ValueError, match="KUBEJURY_HF_ENDPOINT must be an http"):
        WorkloadSettings.from_env({"KUBEJURY_HF_ENDPOINT": raw})
    assert WorkloadSettings.from_env({"KUBEJURY_HF_ENDPOINT": ""}).hub_endpoint is None
