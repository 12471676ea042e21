"""Inputs that used to crash or exhaust a stage get a clear error naming file, line/row and field.

Each case here crashed (RecursionError, ValueError, MemoryError, AttributeError, a mathtext
ParseException) or was silently misread before issue 12 §5. The rule checked: only
:class:`kubejury.errors.InputError` comes out, its message names the place, and it comes quickly.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from kubejury.config.spec import parse_evalrun_yaml
from kubejury.errors import InputError
from kubejury.files.benchmark import parse_benchmark
from kubejury.files.tables import load_judgments
from kubejury.placement.gpu_nodes import parse_node_list

MINIMAL_SPEC = """\
apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: demo
spec:
  benchmark:
    uri: bench.jsonl
  models:
    - name: m1
      runtime: openai
      source: http://127.0.0.1:1/v1
  judges:
    - name: j1
      runtime: openai
      source: http://127.0.0.1:1/v1
"""


def _question(**overrides: object) -> dict[str, object]:
    record: dict[str, object] = {"id": "q1", "domain": "d", "level": 1, "question": "q?", "reference": "r"}
    record.update(overrides)
    return record


# ----------------------------------------------------------------------------- the spec (YAML)


def test_a_yaml_alias_bomb_is_rejected_at_once_naming_the_line() -> None:
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    for i in range(1, 10):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]\n"
    assert len(bomb) < 700
    started = time.monotonic()
    with pytest.raises(InputError, match=r"line 2.*alias") as caught:
        parse_evalrun_yaml(bomb, "bomb.yaml")
    assert "bomb.yaml" in str(caught.value)
    assert time.monotonic() - started < 2


def test_deeply_nested_yaml_is_an_input_error_not_a_recursion_error() -> None:
    with pytest.raises(InputError, match=r"deep.yaml.*line 1.*nest"):
        parse_evalrun_yaml("a: " + "[" * 5000 + "]" * 5000, "deep.yaml")


def test_a_duplicate_yaml_key_is_an_error_naming_key_and_line() -> None:
    text = MINIMAL_SPEC.replace("kind: EvalRun\n", "kind: EvalRun\nkind: EvalRun\n")
    with pytest.raises(InputError, match=r"dup.yaml, line 3.*'kind'.*line 2"):
        parse_evalrun_yaml(text, "dup.yaml")


def test_a_5000_digit_integer_in_the_spec_is_an_input_error() -> None:
    text = MINIMAL_SPEC + "  maxConcurrentModels: " + "9" * 5000 + "\n"
    with pytest.raises(InputError, match=r"big.yaml, line 16.*5000 digits"):
        parse_evalrun_yaml(text, "big.yaml")


@pytest.mark.parametrize(
    ("extra", "line", "field"),
    [
        ("  scoring:\n    levelWeights: {1: .nan, 2: 0.8, 3: 1.0}\n", 17, "spec.scoring.levelWeights.1"),
        ("  concurrency:\n    requestTimeoutSeconds: .inf\n", 17, "spec.concurrency.requestTimeoutSeconds"),
        ("  modelCache:\n    claimName: weights\n    mountPath: /tmp\n", 18, "spec.modelCache.mountPath"),
    ],
    ids=["nan-weight", "infinite-timeout", "cache-over-tmp"],
)
def test_a_spec_value_that_used_to_fail_at_run_time_is_an_input_error_naming_line_and_field(
    extra: str, line: int, field: str
) -> None:
    with pytest.raises(InputError, match=rf"late.yaml.*line {line}: {re.escape(field)}:"):
        parse_evalrun_yaml(MINIMAL_SPEC + extra, "late.yaml")


def test_a_memory_request_the_planner_cannot_read_is_an_input_error_naming_line_and_field() -> None:
    text = MINIMAL_SPEC.replace(
        "    - name: m1\n      runtime: openai\n      source: http://127.0.0.1:1/v1\n",
        "    - name: m1\n      source: hf://org/m1\n      resources:\n        memory: 1E\n",
    )
    with pytest.raises(InputError, match=r"mem.yaml.*line 12: spec.models\[0\].resources.memory: '1E'.*64Gi"):
        parse_evalrun_yaml(text, "mem.yaml")


# ----------------------------------------------------------------------------- benchmarks


def test_deeply_nested_benchmark_metadata_is_an_input_error_naming_the_line() -> None:
    line = json.dumps(_question())[:-1] + ', "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    data = (json.dumps(_question(id="q0")) + "\n" + line + "\n").encode()
    with pytest.raises(InputError, match=r"b.jsonl, line 2.*nest"):
        parse_benchmark(data, "b.jsonl")


@pytest.mark.parametrize("field", ["id", "level"])
def test_a_5000_digit_integer_in_a_benchmark_is_an_input_error(field: str) -> None:
    line = json.dumps(_question(**{field: 7})).replace("7", "9" * 5000)
    with pytest.raises(InputError, match=r"b.jsonl, line 1.*digits"):
        parse_benchmark(line.encode(), "b.jsonl")


def test_line_separators_inside_json_strings_are_text_and_lines_stay_physical() -> None:
    first = json.dumps(_question(question="a\u2028b\u0085c"), ensure_ascii=False)
    data = (first + "\n" + '{"id": "q2", "broken\n').encode()
    with pytest.raises(InputError, match=r"line 2"):
        parse_benchmark(data, "b.jsonl")
    bench = parse_benchmark(first.encode(), "b.jsonl")
    assert bench.questions[0].question == "a\u2028b\u0085c"


def test_a_csv_field_as_long_as_a_jsonl_field_is_accepted() -> None:
    long_question = "x" * 300_000
    csv_bench = parse_benchmark(
        f"id,domain,level,question,reference\n1,d,1,{long_question},r\n".encode(), "b.csv"
    )
    jsonl_bench = parse_benchmark(json.dumps(_question(question=long_question)).encode(), "b.jsonl")
    assert csv_bench.questions[0].question == jsonl_bench.questions[0].question


# ----------------------------------------------------------------------------- judgments


def _judgment(**overrides: object) -> dict[str, object]:
    record: dict[str, object] = {"question_id": "q1", "model": "m", "judge": "j", "score": 7}
    record.update(overrides)
    return record


def test_a_5000_digit_judgment_score_is_an_input_error_naming_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(
        json.dumps(_judgment())
        + "\n"
        + json.dumps(_judgment(question_id="q2")).replace("7", "9" * 5000)
        + "\n"
    )
    with pytest.raises(InputError, match=r"j.jsonl, line 2.*score"):
        load_judgments(str(path))


def test_a_byte_order_mark_reads_the_same_in_judgments_as_in_benchmarks(tmp_path: Path) -> None:
    bench = parse_benchmark(b"\xef\xbb\xbf" + json.dumps(_question()).encode(), "b.jsonl")
    assert bench.ids == ("q1",)
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_judgment()).encode() + b"\n")
    judgments = load_judgments(str(path))
    assert len(judgments) == 1


# ----------------------------------------------------------------------------- nodes files


def test_a_node_whose_status_is_not_an_object_is_an_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"items\[0\]\.status"):
        parse_node_list({"items": [{"kind": "Node", "metadata": {"name": "n"}, "status": "x"}]})


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        "items: " + "[" * 5000 + "]" * 5000,
        'a: &a ["x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n',
    ],
    ids=["deep-json", "deep-yaml", "yaml-alias"],
)
def test_a_hostile_nodes_file_is_an_input_error(text: str) -> None:
    from kubejury.placement.gpu_nodes import NodesFileError, load_nodes_text

    with pytest.raises(NodesFileError):
        load_nodes_text(text, "nodes.json")
    assert issubclass(NodesFileError, InputError)
