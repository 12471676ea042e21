"""Provenance of a report: which stored records a spec made, and the report.json section that traces them.

The readers (`stale_records`, `report_provenance`) take the typed records the stages' readers
return (`AnswerRecord`, `JudgmentRecord`), so these tests build such records directly.
"""

from __future__ import annotations

from factories import build_evalrun, model_entry
from kubejury.config.spec import EvalRun, parse_evalrun
from kubejury.files.benchmark import Benchmark
from kubejury.provenance import find, report_provenance, run_fingerprints, stale_records
from kubejury.records.fingerprint import StageFingerprint
from kubejury.records.results import AnswerRecord, JudgmentRecord, TokenUsage


def _evalrun() -> EvalRun:
    return parse_evalrun(
        build_evalrun(
            models=[model_entry("qwen"), model_entry("gemma")],
            judges=[model_entry("judge")],
            series=[{"name": "t0"}, {"name": "t1", "temperature": 0.5}],
        )
    )


def _fingerprints(evalrun: EvalRun) -> list[StageFingerprint]:
    return run_fingerprints(evalrun, Benchmark(questions=(), source="bench.jsonl"))


def _answer(
    model: str,
    series: str,
    fingerprint: str | None,
    *,
    finish_reason: str | None = None,
    usage: TokenUsage | None = None,
    server_version: str | None = None,
) -> AnswerRecord:
    return AnswerRecord(
        question_id="q1",
        model=model,
        series=series,
        finish_reason=finish_reason,
        usage=usage,
        server_version=server_version,
        fingerprint=fingerprint,
    )


def _judgment(judge: str, series: str, fingerprint: str | None) -> JudgmentRecord:
    return JudgmentRecord(
        question_id="q1", model="qwen", series=series, judge=judge, score=7.0, fingerprint=fingerprint
    )


def test_records_carrying_their_stages_fingerprint_are_not_stale() -> None:
    fingerprints = _fingerprints(_evalrun())
    generated = find(fingerprints, "generate", "t0", "qwen").digest
    judged = find(fingerprints, "judge", "t1", "judge").digest
    records: list[AnswerRecord | JudgmentRecord] = [
        _answer("qwen", "t0", generated),
        _judgment("judge", "t1", judged),
    ]
    assert stale_records(fingerprints, records) == []


def test_an_answer_and_a_judgment_of_another_spec_are_named_by_stage_name_and_series() -> None:
    fingerprints = _fingerprints(_evalrun())
    records: list[AnswerRecord | JudgmentRecord] = [
        _judgment("judge", "t1", "0" * 16),
        _answer("gemma", "t0", "f" * 16),
        _answer("gemma", "t0", "e" * 16),
        _answer("qwen", "t1", find(fingerprints, "generate", "t1", "qwen").digest),
    ]
    assert stale_records(fingerprints, records) == ["generate gemma/t0", "judge judge/t1"]


def test_an_answer_is_checked_against_generation_and_a_judgment_against_judging_only() -> None:
    fingerprints = _fingerprints(_evalrun())
    judging_digest = find(fingerprints, "judge", "t0", "judge").digest
    # No model is called "judge": an answer of that name has no generation fingerprint to differ from.
    assert stale_records(fingerprints, [_answer("judge", "t0", judging_digest)]) == []
    # A judgment carrying a generation's digest differs from its judging fingerprint.
    generation_digest = find(fingerprints, "generate", "t0", "qwen").digest
    assert stale_records(fingerprints, [_judgment("judge", "t0", generation_digest)]) == ["judge judge/t0"]


def test_records_without_a_fingerprint_or_of_a_stage_the_spec_lacks_are_never_stale() -> None:
    fingerprints = _fingerprints(_evalrun())
    records: list[AnswerRecord | JudgmentRecord] = [
        _answer("qwen", "t0", None),
        _answer("llama", "t0", "a" * 16),
        _judgment("judge", "t9", "b" * 16),
    ]
    assert stale_records(fingerprints, records) == []


def test_report_provenance_reads_usage_versions_and_truncation_from_the_typed_answers() -> None:
    evalrun = _evalrun()
    fingerprints = _fingerprints(evalrun)
    answers = [
        _answer(
            "qwen",
            "t0",
            "d1",
            finish_reason="length",
            usage=TokenUsage(prompt_tokens=12, completion_tokens=34),
            server_version="vllm-0.9",
        ),
        _answer("qwen", "t1", None, finish_reason="stop", server_version="vllm-0.8"),
        _answer("gemma", "t1", "d2", finish_reason="length", usage=TokenUsage(completion_tokens=5)),
    ]
    section = report_provenance(fingerprints, evalrun, answers)
    assert section["truncated"] == {"t0": {"qwen": 1, "gemma": 0}, "t1": {"qwen": 0, "gemma": 1}}
    assert section["servers"]["qwen"]["reported_versions"] == ["vllm-0.8", "vllm-0.9"]
    assert section["servers"]["gemma"]["reported_versions"] == []
    assert section["servers"]["judge"] == {
        "runtime": "vllm",
        "served_name": "judge",
        "source": "hf://org/judge",
        "reported_versions": [],
    }
    assert section["answers"] == [
        {
            "series": "t0",
            "model": "qwen",
            "question_id": "q1",
            "finish_reason": "length",
            "prompt_tokens": 12,
            "completion_tokens": 34,
            "fingerprint": "d1",
        },
        {
            "series": "t1",
            "model": "qwen",
            "question_id": "q1",
            "finish_reason": "stop",
            "prompt_tokens": None,
            "completion_tokens": None,
            "fingerprint": None,
        },
        {
            "series": "t1",
            "model": "gemma",
            "question_id": "q1",
            "finish_reason": "length",
            "prompt_tokens": None,
            "completion_tokens": 5,
            "fingerprint": "d2",
        },
    ]
    assert section["fingerprints"] == {f"{fp.stage}/{fp.series}/{fp.name}": fp.digest for fp in fingerprints}
    assert len(section["fingerprints"]) == 6  # 2 series x (2 generations + 1 judging)


def test_a_truncated_answer_of_a_model_the_spec_no_longer_has_is_still_counted() -> None:
    evalrun = _evalrun()
    section = report_provenance(
        _fingerprints(evalrun), evalrun, [_answer("old", "t9", None, finish_reason="length")]
    )
    assert section["truncated"]["t9"] == {"old": 1}
