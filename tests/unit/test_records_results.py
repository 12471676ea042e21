"""Answer and judgment records cross from a stage Job to every reader: what one writes, the other reads.

The lines below marked "format 1" are exactly what the stages wrote before the records were typed
(keys as ``storage.write_shard`` writes them); they must still read, and a record written now must
carry the same keys plus ``format``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kubejury.files.benchmark import Question
from kubejury.inference.client import ChatResult
from kubejury.judging.anonymize import Scrubber
from kubejury.judging.judge_prompt import Verdict
from kubejury.records.results import (
    RESULTS_FORMAT,
    AnswerRecord,
    JudgmentRecord,
    RecordFormatError,
    TokenUsage,
    field_types,
    judged_sha256,
    question_sha256,
    required_fields,
)
from kubejury.stages.generate import answer_record
from kubejury.stages.judge import JudgingItem, build_items, judgment_record

FORMAT_1_ANSWER: dict[str, Any] = {
    "answer": "Договор — соглашение сторон.",
    "attempts": 2,
    "error": None,
    "error_kind": None,
    "finish_reason": "stop",
    "fingerprint": "0123456789abcdef",
    "latency_s": 1.2345,
    "model": "qwen3.5-27b",
    "question_id": "law-001",
    "series": "primary",
    "server_version": "b4321",
    "usage": {"completion_tokens": 40, "prompt_tokens": 12},
}
FORMAT_1_JUDGMENT: dict[str, Any] = {
    "answer_id": "m-7f3a",
    "asks": 1,
    "error": None,
    "error_kind": None,
    "judge": "gpt-oss-120b",
    "latency_s": 0.5,
    "model": "qwen3.5-27b",
    "question_id": "law-001",
    "rationale": "Matches the reference.",
    "score": 9.0,
    "series": "primary",
    "usage": {"completion_tokens": 30, "prompt_tokens": 400},
}


def through_storage(record: AnswerRecord | JudgmentRecord) -> dict[str, Any]:
    """What a reader gets back: the record's JSON as text, parsed again."""
    loaded: dict[str, Any] = json.loads(json.dumps(record.to_json(), sort_keys=True))
    return loaded


def test_a_format_1_answer_line_reads_and_is_written_back_with_the_same_keys_plus_format() -> None:
    record = AnswerRecord.from_json(FORMAT_1_ANSWER)
    assert record.usage == TokenUsage(prompt_tokens=12, completion_tokens=40)
    assert record.latency_s == 1.2345 and record.attempts == 2 and record.server_version == "b4321"
    assert through_storage(record) == {**FORMAT_1_ANSWER, "format": RESULTS_FORMAT}


def test_a_format_1_judgment_line_reads_and_is_written_back_with_the_same_keys_plus_format() -> None:
    record = JudgmentRecord.from_json(FORMAT_1_JUDGMENT)
    assert (record.judge, record.answer_id, record.score, record.asks) == ("gpt-oss-120b", "m-7f3a", 9.0, 1)
    assert through_storage(record) == {**FORMAT_1_JUDGMENT, "format": RESULTS_FORMAT}


@pytest.mark.parametrize("record_type", [AnswerRecord, JudgmentRecord])
def test_what_is_written_now_reads_back_as_the_same_record(
    record_type: type[AnswerRecord] | type[JudgmentRecord],
) -> None:
    line = FORMAT_1_ANSWER if record_type is AnswerRecord else FORMAT_1_JUDGMENT
    record = record_type.from_json(line)
    assert record_type.from_json(through_storage(record)) == record


def test_a_line_from_an_older_job_without_server_version_or_fingerprint_reads_with_them_unset() -> None:
    old = {k: v for k, v in FORMAT_1_ANSWER.items() if k not in ("server_version", "fingerprint")}
    record = AnswerRecord.from_json(old)
    assert record.server_version is None and record.fingerprint is None
    assert "fingerprint" not in record.to_json(), "a stage without a fingerprint writes no such key"
    assert record.to_json()["server_version"] is None


def test_a_fingerprint_tagged_on_is_written() -> None:
    record = JudgmentRecord(question_id="q", model="m", judge="j").with_fingerprint("feed")
    assert record.to_json()["fingerprint"] == "feed"


def test_a_hand_written_judgment_with_only_the_required_keys_reads_in_the_default_series() -> None:
    record = JudgmentRecord.from_json(
        {"question_id": 7, "model": "m", "judge": "j", "score": 8, "series": None}
    )
    assert (record.question_id, record.series, record.score) == ("7", "default", 8.0)


def test_unknown_keys_of_a_line_are_not_kept() -> None:
    record = AnswerRecord.from_json(
        {**FORMAT_1_ANSWER, "usage": {"prompt_tokens": 1, "total_tokens": 3}, "x": 1}
    )
    assert record.usage == TokenUsage(prompt_tokens=1, completion_tokens=None)
    assert "x" not in record.to_json()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            {**FORMAT_1_ANSWER, "latency_s": "1.2"},
            r"answer record field 'latency_s': must be a number, got str",
        ),
        ({**FORMAT_1_ANSWER, "latency_s": True}, r"field 'latency_s': must be a number, got bool"),
        ({**FORMAT_1_ANSWER, "attempts": 1.5}, r"field 'attempts': must be an integer"),
        ({**FORMAT_1_ANSWER, "answer": ["a"]}, r"field 'answer': must be a string, got list"),
        (
            {**FORMAT_1_ANSWER, "usage": {"prompt_tokens": "12"}},
            r"answer record field 'usage.prompt_tokens': must be an integer",
        ),
        ({**FORMAT_1_ANSWER, "usage": 12}, r"field 'usage': must be an object"),
        ({**FORMAT_1_ANSWER, "model": None}, r"answer record field 'model': required, but missing or null"),
        ({**FORMAT_1_ANSWER, "format": "2"}, r"field 'format': '2' is not a format number"),
        (
            {**FORMAT_1_ANSWER, "format": 3},
            r"field 'format': format 3 is newer than this kubejury reads \(2\)",
        ),
    ],
)
def test_a_bad_answer_line_is_refused_naming_the_field(line: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        AnswerRecord.from_json(line)


def test_a_judgment_without_its_judge_is_refused_naming_the_field() -> None:
    line = {k: v for k, v in FORMAT_1_JUDGMENT.items() if k != "judge"}
    with pytest.raises(RecordFormatError, match=r"judgment record field 'judge': required"):
        JudgmentRecord.from_json(line)


def test_field_types_name_every_field_with_its_value_type_and_the_keys_every_line_needs() -> None:
    assert field_types(AnswerRecord) == {
        "question_id": str,
        "model": str,
        "series": str,
        "answer": str,
        "finish_reason": str,
        "usage": TokenUsage,
        "latency_s": float,
        "attempts": int,
        "error": str,
        "error_kind": str,
        "server_version": str,
        "fingerprint": str,
        "question_sha256": str,
        "reused_from": str,
    }
    copied = dataclasses.replace(
        JudgmentRecord.from_json(FORMAT_1_JUDGMENT).with_fingerprint("f"), input_sha256="h", reused_from="r"
    )
    assert set(field_types(JudgmentRecord)) | {"format"} == set(copied.to_json())
    assert required_fields(AnswerRecord) == ("question_id", "model")
    assert required_fields(JudgmentRecord) == ("question_id", "model", "judge")


FORMATS_DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def documented_fields(heading: str) -> list[str]:
    """The first column of the first table under the docs/formats.md section ``## <heading>…``."""
    section = FORMATS_DOC.read_text(encoding="utf-8").split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("heading", "record_type"), [("Answers", AnswerRecord), ("Judgments", JudgmentRecord)]
)
def test_docs_formats_lists_every_field_of_the_record_in_order_and_names_its_type(
    heading: str, record_type: type[AnswerRecord] | type[JudgmentRecord]
) -> None:
    assert documented_fields(heading) == [*field_types(record_type), "format"]
    assert f"`kubejury.records.results.{record_type.__name__}`" in FORMATS_DOC.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------ what the stages write


def chat_result(content: str | None = "Ответ", error: str | None = None) -> ChatResult:
    return ChatResult(
        content=content,
        finish_reason="stop" if error is None else None,
        prompt_tokens=12,
        completion_tokens=40,
        latency_s=1.23456,
        attempts=2,
        error=error,
        error_kind=None if error is None else "http",
        server_version="b4321",
    )


def test_the_generation_stage_writes_an_answer_record_with_today_s_keys() -> None:
    record = answer_record("law-001", "qwen3.5-27b", "primary", chat_result())
    assert isinstance(record, AnswerRecord)
    assert set(record.to_json()) == (set(FORMAT_1_ANSWER) - {"fingerprint"}) | {"format"}
    assert (record.answer, record.latency_s, record.usage) == ("Ответ", 1.2346, TokenUsage(12, 40))


def test_a_record_carries_the_hash_of_what_its_model_or_judge_saw_so_another_run_may_copy_it() -> None:
    question = Question(id="law-001", domain="law", level=1, question="Срок?", reference="Три года.")
    item = JudgingItem(question, "qwen3.5-27b", "m-7f3a", "Ответ [model]")
    judged = judgment_record(item, "primary", "judge-a", Verdict(score=9.0, rationale="ok"), chat_result(), 1)
    assert judged.input_sha256 == judged_sha256("Срок?", "Три года.", "Ответ [model]")
    assert judged_sha256("Срок?", "Три года.", "Ответ") != judged.input_sha256  # the answer as anonymized
    assert judged_sha256("Срок?", "Иначе.", "Ответ [model]") != judged.input_sha256  # the reference
    assert question_sha256("Срок?") != question_sha256("Срок? ")
    assert JudgmentRecord.from_json(judged.to_json()) == judged


def test_the_generation_stage_masks_its_secrets_in_every_text_field_of_the_record() -> None:
    leaked = chat_result(content=None, error="HTTP 401: bad key sk-secret-1")
    record = answer_record("law-001", "m", "primary", leaked, secrets=["sk-secret-1", None])
    assert record.answer is None and record.error is not None
    assert "sk-secret-1" not in json.dumps(record.to_json()) and record.usage == TokenUsage(12, 40)


def test_the_judging_stage_writes_a_judgment_record_with_today_s_keys() -> None:
    question = Question(id="law-001", domain="law", level=1, question="?", reference="!")
    item = JudgingItem(question, "qwen3.5-27b", "m-7f3a", "Ответ")
    record = judgment_record(item, "primary", "judge-a", Verdict(score=9.0, rationale="ok"), chat_result(), 1)
    assert set(record.to_json()) == set(FORMAT_1_JUDGMENT) | {"format", "input_sha256"}
    assert (record.score, record.error_kind, record.answer_id) == (9.0, None, "m-7f3a")
    failed = judgment_record(item, "primary", "judge-a", None, chat_result(None, "HTTP 500"), 2)
    assert (failed.score, failed.rationale, failed.error_kind, failed.asks) == (None, "", "http", 2)


def test_judging_skips_the_answers_whose_generation_failed_and_hides_model_names() -> None:
    questions = [Question(id=f"q{i}", domain="law", level=1, question="?", reference="!") for i in (1, 2)]
    answers = {
        "alpha": [
            AnswerRecord(question_id="q1", model="alpha", answer="I am alpha."),
            AnswerRecord(question_id="q2", model="alpha", answer=None, error="HTTP 500"),
        ]
    }
    items, mapping, skipped = build_items(questions, answers, seed=1, scrubber=Scrubber(["alpha"]))
    assert skipped == 1 and [item.question.id for item in items] == ["q1"]
    assert "alpha" not in items[0].text and items[0].answer_id == mapping["alpha"]
