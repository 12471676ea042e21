"""The planner's vocabulary: run and endpoint records, child names and labels, with no builder behind them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kubejury import runtimes
from kubejury.config import spec
from kubejury_operator import vocabulary as vc

RUN = vc.RunRef(name="study", namespace="evals", uid="0b7c7a4e-1111-2222-3333-444455556666")


def endpoint(runtime: str, source: str = "hf://org/m") -> vc.Endpoint:
    return vc.Endpoint(key="m-m", name="m", source=source, served_model="m", runtime=runtime)


def test_owner_api_version_and_kind_are_the_engines_one_definition() -> None:
    assert vc.EVALRUN_API_VERSION == f"{spec.API_GROUP}/{spec.API_VERSION}" == spec.API_VERSION_FULL
    assert vc.EVALRUN_KIND == spec.KIND == "EvalRun"


@pytest.mark.parametrize("name", runtimes.RUNTIME_NAMES)
def test_an_endpoint_is_in_the_cluster_exactly_when_its_runtime_says_so(name: str) -> None:
    assert endpoint(name).in_cluster is runtimes.runtime_of(name).in_cluster


def test_jobs_reach_an_in_cluster_server_through_its_service_and_an_external_one_at_its_source() -> None:
    served = vc.endpoint_url(RUN, endpoint("vllm"))
    assert served == f"http://{vc.workload_name('study', 'm-m')}.evals.svc:{vc.SERVING_PORT}/v1"
    assert vc.endpoint_url(RUN, endpoint("openai", "https://api.example.invalid/v1")) == (
        "https://api.example.invalid/v1"
    )


def test_labels_name_the_manager_the_run_the_component_and_each_extra_under_kubejury_io() -> None:
    labels = vc.labels("study", "server", endpoint="m-Qwen/Qwen3")
    assert labels[vc.LABEL_MANAGED_BY] == vc.MANAGED_BY
    assert labels[vc.LABEL_RUN] == "study"
    assert labels[vc.LABEL_COMPONENT] == "server"
    assert labels[vc.LABEL_ENDPOINT] == vc.label_value("m-Qwen/Qwen3") != "m-Qwen/Qwen3"


def test_the_vocabulary_imports_no_builder_and_no_settings() -> None:
    source = Path(vc.__file__).read_text()
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not {m for m in imported if m.startswith("kubejury_operator")}, imported
