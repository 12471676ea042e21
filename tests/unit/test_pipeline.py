"""The pipeline glue: which endpoint an entry uses, selection by name, loading and filtering inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from kubejury import pipeline
from kubejury.config.spec import ModelSpec
from kubejury.errors import ConfigError, InputError
from kubejury.files.shards import write_records
from kubejury.records.results import AnswerRecord, JudgmentRecord

REPO = Path(__file__).resolve().parents[2]


def test_endpoint_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pipeline.ENDPOINT_ENV, raising=False)
    local = ModelSpec(name="g", runtime="llamacpp")
    remote = ModelSpec(name="r", runtime="openai", source="https://api.example.com/v1")
    vllm = ModelSpec(name="v", runtime="vllm", source="hf://org/repo")
    urls = {"g": "http://127.0.0.1:9/v1"}
    assert pipeline.endpoint_of(local, urls) == "http://127.0.0.1:9/v1"
    assert pipeline.endpoint_of(remote, urls) == "https://api.example.com/v1"
    assert pipeline.endpoint_of(remote, urls, override="http://x/v1") == "http://x/v1"
    with pytest.raises(ConfigError, match="no endpoint for 'v'"):
        pipeline.endpoint_of(vllm, urls)
    monkeypatch.setenv(pipeline.ENDPOINT_ENV, "http://svc:8000/v1")
    assert pipeline.endpoint_of(vllm, urls) == "http://svc:8000/v1"


def test_the_api_key_comes_only_from_the_secret_ref_never_from_a_named_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11, finding 2: apiKeyEnv: AWS_SECRET_ACCESS_KEY sent the storage secret as the key."""
    with pytest.raises(ValidationError, match="apiKeyEnv"):
        ModelSpec.model_validate(
            {"name": "r", "runtime": "openai", "source": "https://x/v1", "apiKeyEnv": "AWS_SECRET_ACCESS_KEY"}
        )
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "storage-secret")
    monkeypatch.setenv("KUBEJURY_API_KEY", "sekret")
    hosted = ModelSpec.model_validate(
        {
            "name": "r",
            "runtime": "openai",
            "source": "https://x/v1",
            "apiKeySecretRef": {"name": "k", "key": "t"},
        }
    )
    assert pipeline.api_key_of(hosted) == "sekret"
    assert pipeline.api_key_of(ModelSpec(name="r", runtime="openai", source="https://x/v1")) is None
    assert pipeline.api_key_of(ModelSpec(name="g", runtime="llamacpp")) is None


def test_select_by_name() -> None:
    entries = [ModelSpec(name="a", runtime="llamacpp"), ModelSpec(name="b", runtime="llamacpp")]
    assert pipeline.select(entries, None, "model") == entries
    assert [e.name for e in pipeline.select(entries, ["b"], "model")] == ["b"]
    with pytest.raises(ConfigError, match="unknown model 'c'; the spec has: a, b"):
        pipeline.select(entries, ["c"], "model")


def test_load_inputs_applies_filters_and_writes_nothing(tmp_path: Path) -> None:
    shutil.copy(REPO / "examples" / "quickstart.yaml", tmp_path / "quickstart.yaml")
    shutil.copy(REPO / "examples" / "benchmark-ru-sample.jsonl", tmp_path / "benchmark-ru-sample.jsonl")
    out = tmp_path / "out"
    inputs = pipeline.load_inputs(str(tmp_path / "quickstart.yaml"), out=str(out))
    assert len(inputs.benchmark.questions) == 6  # 1 domain x 3 levels x limitPerCell 2 (of 96)
    assert set(inputs.benchmark.domains) == {"law"}
    assert inputs.layout.run == "quickstart"
    assert not out.exists()
    assert pipeline.record_spec(inputs) is True
    assert pipeline.record_spec(inputs) is True  # same spec again: nothing to report
    assert (out / "quickstart" / "spec.json").is_file()


def test_filters_that_leave_nothing(tmp_path: Path) -> None:
    text = (REPO / "examples" / "quickstart.yaml").read_text(encoding="utf-8")
    spec = tmp_path / "s.yaml"
    spec.write_text(text.replace("      domains: [law]", "      levels: [3]\n      domains: [law]"))
    shutil.copy(REPO / "examples" / "benchmark-ru-sample.jsonl", tmp_path / "benchmark-ru-sample.jsonl")
    inputs = pipeline.load_inputs(str(spec))
    assert [q.id for q in inputs.benchmark.questions] == ["law-3-01", "law-3-02"]
    bad = text.replace("      limitPerCell: 2", "      levels: [4]")
    spec.write_text(bad)
    with pytest.raises((InputError, ConfigError)):
        pipeline.load_inputs(str(spec))


def test_shards_partition_the_questions() -> None:
    questions = list(range(10))
    parts = [pipeline.shard_questions(questions, (i, 3)) for i in range(3)]
    assert sorted(q for part in parts for q in part) == questions
    assert parts[0] == [0, 3, 6, 9]
    assert pipeline.shard_questions(questions, None) == questions
    with pytest.raises(ConfigError, match="shard index 3"):
        pipeline.shard_questions(questions, (3, 3))


def _quickstart(tmp_path: Path) -> pipeline.LoadedRun:
    shutil.copy(REPO / "examples" / "quickstart.yaml", tmp_path / "quickstart.yaml")
    shutil.copy(REPO / "examples" / "benchmark-ru-sample.jsonl", tmp_path / "benchmark-ru-sample.jsonl")
    return pipeline.load_inputs(str(tmp_path / "quickstart.yaml"), out=str(tmp_path / "out"))


def test_stored_records_are_typed_one_per_key_in_benchmark_order_whatever_retries_left(
    tmp_path: Path,
) -> None:
    inputs = _quickstart(tmp_path)
    spec = inputs.evalrun.spec
    series, model, judge = spec.series[0].name, spec.models[0].name, spec.judges[0].name
    first, second = inputs.question_ids[:2]
    answers_at = inputs.layout.answers_prefix(series, model)
    failed = AnswerRecord(
        question_id=second, model=model, series=series, error="timeout", error_kind="timeout"
    )
    write_records(inputs.storage, answers_at, [failed])
    answered = [
        AnswerRecord(question_id=qid, model=model, series=series, answer=f"answer {qid}")
        for qid in (second, first)
    ]
    inputs.storage.write_jsonl_shard(answers_at, [a.to_json() for a in answered])  # an older run's shard
    verdict = JudgmentRecord(question_id=first, model=model, series=series, judge=judge, score=6.0)
    write_records(inputs.storage, inputs.layout.judgments_prefix(series, judge), [verdict])

    answers, judgments = pipeline.stored_records(inputs)

    assert answers == [answered[1], answered[0]]  # the rerun's answer replaced the failed one
    assert judgments == [verdict]
