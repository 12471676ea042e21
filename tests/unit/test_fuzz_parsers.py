"""Fuzzing the parsers of user files (issue 12 §7): the only exception that may come out is InputError.

Hypothesis generates text and documents around each format's shape (valid records with a field
mutated, hostile YAML, deep nesting, huge numbers, odd line separators) as well as plain noise.
Budgets are small and fixed (``max_examples``, no deadline per example) so ``make test`` spends
well under a minute here; raise ``KUBEJURY_FUZZ_EXAMPLES`` for a longer campaign.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kubejury.config.spec import parse_evalrun_yaml
from kubejury.errors import InputError
from kubejury.files.benchmark import parse_benchmark
from kubejury.files.tables import load_answers, load_judgments
from kubejury.placement.gpu_nodes import load_nodes_text

pytestmark = pytest.mark.fuzz

BUDGET = settings(
    max_examples=int(os.environ.get("KUBEJURY_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=os.environ.get("KUBEJURY_FUZZ_RANDOM") is None,  # reproducible in CI
)

SEPARATORS = ["\n", "\r\n", "\r", "\u2028", "\u0085", "\x00", "\ufeff"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["9" * 5000, "$x$", "[[10]]", "\u2028", "&a", "*a", "<<: *a"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
noise = st.one_of(
    st.text(max_size=400),
    st.builds(
        "".join,
        st.lists(
            st.sampled_from(["[", "{", "]", "}", '"', ":", ",", "&a ", "*a", "- ", *SEPARATORS]), max_size=300
        ),
    ),
    st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=3000).map(
        lambda n: "a:\n" + "".join(" " * i + "- \n" for i in range(n))
    ),
)


def _only_input_errors(call: Any) -> None:
    """Run ``call``; an InputError is the expected refusal, anything else fails the test."""
    with contextlib.suppress(InputError):
        call()


# ----------------------------------------------------------------------------------- spec


SPEC: dict[str, Any] = {
    "apiVersion": "kubejury.io/v1alpha1",
    "kind": "EvalRun",
    "metadata": {"name": "demo"},
    "spec": {
        "benchmark": {"uri": "bench.jsonl"},
        "models": [{"name": "m1", "runtime": "openai", "source": "http://127.0.0.1:1/v1"}],
        "judges": [{"name": "j1", "runtime": "openai", "source": "http://127.0.0.1:1/v1"}],
    },
}


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    doc = json.loads(json.dumps(SPEC))
    target = draw(
        st.sampled_from(
            [doc, doc["spec"], doc["spec"]["models"][0], doc["metadata"], doc["spec"]["benchmark"]]
        )
    )
    key = draw(st.one_of(st.sampled_from(list(target)), st.text(max_size=10)))
    target[key] = draw(json_values)
    text = json.dumps(doc) if draw(st.booleans()) else _yaml(doc)
    return text + draw(st.sampled_from(["", *SEPARATORS, "\nkind: EvalRun\n", "\n&x a: *x\n"]))


def _yaml(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc, allow_unicode=True)


@BUDGET
@given(st.one_of(mutated_specs(), noise))
@example("\x1f")  # found by this test: the YAML reader refused it before any error handling
@example(_yaml({**SPEC, "spec": {**SPEC["spec"], "models": [{"name": []}]}}))  # found: unhashable name
def test_the_spec_loader_raises_nothing_but_input_errors(text: str) -> None:
    _only_input_errors(lambda: parse_evalrun_yaml(text, "spec.yaml"))


# ----------------------------------------------------------------------------------- benchmark


QUESTION = {"id": "q1", "domain": "d", "level": 1, "question": "q?", "reference": "r"}


@st.composite
def benchmark_bytes(draw: st.DrawFn) -> bytes:
    records = []
    for i in range(draw(st.integers(min_value=0, max_value=4))):
        record: dict[str, Any] = {**QUESTION, "id": f"q{i}"}
        if draw(st.booleans()):
            record[draw(st.sampled_from([*QUESTION, "metadata", "extra"]))] = draw(json_values)
        records.append(record)
    if draw(st.booleans()):
        header = ",".join(QUESTION)
        lines = [header] + [
            ",".join(json.dumps(v) if not isinstance(v, str) else v for v in r.values()) for r in records
        ]
        text = "\n".join(lines)
    else:
        sep = draw(st.sampled_from(SEPARATORS))
        text = sep.join(json.dumps(r, ensure_ascii=draw(st.booleans())) for r in records)
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff"]))
    return prefix + text.encode("utf-8", "surrogatepass")


@BUDGET
@given(
    st.one_of(benchmark_bytes(), noise.map(lambda t: t.encode("utf-8", "surrogatepass"))),
    st.sampled_from([None, "jsonl", "csv"]),
)
def test_the_benchmark_parser_raises_nothing_but_input_errors(data: bytes, fmt: Any) -> None:
    _only_input_errors(lambda: parse_benchmark(data, "bench", fmt))


# ----------------------------------------------------------------------------------- judgments, answers


JUDGMENT = {"question_id": "q1", "model": "m", "judge": "j", "score": 7, "series": "t"}
ANSWER = {
    "question_id": "q1",
    "model": "m",
    "answer": "a",
    "finish_reason": "stop",
    "usage": {"prompt_tokens": 1},
}


@st.composite
def table_bytes(draw: st.DrawFn, template: dict[str, Any]) -> bytes:
    lines = []
    for i in range(draw(st.integers(min_value=0, max_value=4))):
        record: dict[str, Any] = {**template, "question_id": f"q{i}"}
        if draw(st.booleans()):
            record[draw(st.sampled_from(list(template)))] = draw(json_values)
        lines.append(json.dumps(record))
    text = draw(st.sampled_from(["\n", "\r\n", "\u2028\n"])).join(lines) + draw(
        st.sampled_from(["", "\n", "{"])
    )
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + text.encode("utf-8", "surrogatepass")


def _load_file(loader: Any, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.jsonl"
        path.write_bytes(data)
        _only_input_errors(lambda: loader(str(path)))


@BUDGET
@given(st.one_of(table_bytes(JUDGMENT), noise.map(str.encode)))
def test_the_judgments_reader_raises_nothing_but_input_errors(data: bytes) -> None:
    _load_file(load_judgments, data)


@BUDGET
@given(st.one_of(table_bytes(ANSWER), noise.map(str.encode)))
def test_the_answers_reader_raises_nothing_but_input_errors(data: bytes) -> None:
    _load_file(load_answers, data)


# ----------------------------------------------------------------------------------- nodes file


@st.composite
def node_lists(draw: st.DrawFn) -> str:
    node: dict[str, Any] = {
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "1Ti"}},
        "spec": {"taints": []},
    }
    part = draw(
        st.sampled_from([node, node["metadata"], node["status"], node["status"]["allocatable"], node["spec"]])
    )
    part[draw(st.sampled_from([*part, "x"]))] = draw(json_values)
    doc = {"kind": "List", "items": [node]}
    return json.dumps(doc) if draw(st.booleans()) else _yaml(doc)


@BUDGET
@given(st.one_of(node_lists(), noise))
def test_the_nodes_file_reader_raises_nothing_but_input_errors(text: str) -> None:
    _only_input_errors(lambda: load_nodes_text(text, "nodes.json"))
