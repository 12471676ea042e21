"""The reuse step (kubejury.stages.reuse): what an earlier run lends, and what it may not, part by part.

Source runs are stored the way the stages store them — records through ``to_json`` with the stage
fingerprint digest and the per-record hashes, fingerprint documents, a spec — on a real local
storage; the step under test is the real one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from factories import build_evalrun, model_entry
from kubejury.commands.reuse import _check_sibling
from kubejury.config.spec import EvalRun
from kubejury.errors import ConfigError
from kubejury.files.benchmark import Benchmark, Question
from kubejury.files.shards import write_records
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.judging.anonymize import Scrubber
from kubejury.provenance import find, run_fingerprints
from kubejury.records.progress import ProgressRecord
from kubejury.records.results import AnswerRecord, JudgmentRecord, question_sha256
from kubejury.records.reuse import ReuseDocument
from kubejury.stages.generate import read_answers
from kubejury.stages.judge import build_items, read_judgments
from kubejury.stages.reuse import ReuseInputs, Source, reuse_records

QUESTIONS = [
    Question(id=f"q{i}", domain="law", level=i, question=f"Вопрос {i}?", reference=f"Ответ {i}.")
    for i in (1, 2, 3)
]
OLD = [model_entry("alpha"), model_entry("beta")]
NEW = model_entry("gamma")
JUDGES = [model_entry("judge-a")]


def evalrun(name: str, models: Sequence[dict[str, Any]], **spec: Any) -> EvalRun:
    return EvalRun.model_validate(build_evalrun(name, namespace=None, models=models, judges=JUDGES, **spec))


def run_inputs(store: LocalStorage, run: EvalRun, questions: Sequence[Question] = QUESTIONS) -> ReuseInputs:
    bench = _benchmark(questions)
    return ReuseInputs(run, questions, run_fingerprints(run, bench), store, RunLayout(run.name))


def _benchmark(questions: Sequence[Question]) -> Benchmark:
    return Benchmark(questions=tuple(questions), source="test")


def store_source(store: LocalStorage, run: EvalRun, questions: Sequence[Question] = QUESTIONS) -> None:
    """What a finished run of ``run`` leaves in storage: spec, fingerprints, answers, judgments."""
    inputs = run_inputs(store, run, questions)
    layout, spec = inputs.layout, run.spec
    store.write_json(layout.spec_key, {"spec": "stored"})
    series = spec.series[0].name
    answers: dict[str, list[AnswerRecord]] = {}
    for model in spec.models:
        fp = find(inputs.fingerprints, "generate", series, model.name)
        store.write_json(layout.fingerprint_key(series, "generate", model.name), fp.to_json())
        answers[model.name] = [
            AnswerRecord(
                question_id=q.id,
                model=model.name,
                series=series,
                answer=f"{model.name} answers {q.id}",
                fingerprint=fp.digest,
                question_sha256=question_sha256(q.question),
            )
            for q in questions
        ]
        write_records(store, layout.answers_prefix(series, model.name), answers[model.name])
    scrubber = Scrubber([m.name for m in spec.models])
    items, _, _ = build_items(questions, answers, seed=spec.scoring.seed, scrubber=scrubber)
    for judge in spec.judges:
        fp = find(inputs.fingerprints, "judge", series, judge.name)
        store.write_json(layout.fingerprint_key(series, "judge", judge.name), fp.to_json())
        judgments = [
            JudgmentRecord(
                question_id=item.question.id,
                model=item.model,
                series=series,
                judge=judge.name,
                answer_id=item.answer_id,
                score=7.0,
                fingerprint=fp.digest,
                input_sha256=item.input_sha256,
            )
            for item in items
        ]
        write_records(store, layout.judgments_prefix(series, judge.name), judgments)


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path)


def grow(store: LocalStorage, *, write: bool = True, **spec: Any) -> tuple[ReuseDocument, ReuseInputs]:
    """``board`` (alpha, beta) is stored; ``grown`` adds gamma and reuses ``board``."""
    run = evalrun("grown", [*OLD, NEW], **spec)
    inputs = run_inputs(store, run)
    return reuse_records(inputs, [Source("board", store, RunLayout("board"))], write=write), inputs


def test_a_grown_run_copies_every_old_answer_and_judgment_and_leaves_the_new_model_to_run(
    store: LocalStorage,
) -> None:
    store_source(store, evalrun("board", OLD))
    document, inputs = grow(store)

    for model in ("alpha", "beta"):
        stage = document.stage("generate", "primary", model)
        assert stage is not None and stage.from_runs == {"board": 3} and stage.complete
        copied = read_answers(store, inputs.layout, "primary", model)
        assert [a.reused_from for a in copied] == ["board"] * 3
        assert {a.fingerprint for a in copied} == {
            find(inputs.fingerprints, "generate", "primary", model).digest
        }
    assert not document.complete("generate", "primary", "gamma")
    judging = document.stage("judge", "primary", "judge-a")
    assert judging is not None and judging.from_runs == {"board": 6}
    assert judging.covered_models == ("alpha", "beta") and not judging.complete
    assert len(read_judgments(store, inputs.layout, "primary", "judge-a")) == 6
    assert ReuseDocument.from_json(store.read_json_or_none(inputs.layout.reuse_key)) == document


def test_a_fully_copied_stage_gets_a_complete_progress_record_so_no_server_comes_up(
    store: LocalStorage,
) -> None:
    store_source(store, evalrun("board", OLD))
    run = evalrun("again", OLD)
    inputs = run_inputs(store, run)
    document = reuse_records(inputs, [Source("board", store, RunLayout("board"))])
    assert document.complete("judge", "primary", "judge-a")
    progress = store.read_json_or_none(inputs.layout.progress_key("primary", "generate", "alpha"))
    record = ProgressRecord.from_json(progress)
    assert record.state == "succeeded" and record.done == record.total == 3


def test_copying_again_copies_nothing_more_and_still_counts_what_the_run_holds(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    first, inputs = grow(store)
    second, _ = grow(store)
    assert second == first
    assert len(read_answers(store, inputs.layout, "primary", "alpha")) == 3
    assert len(store.shard_keys(inputs.layout.answers_prefix("primary", "alpha"))) == 1


def test_a_dry_run_counts_and_writes_nothing(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    document, inputs = grow(store, write=False)
    assert document.stage("generate", "primary", "alpha").reused == 3  # type: ignore[union-attr]
    assert store.list(f"{inputs.layout.run}/") == []


def test_a_changed_series_parameter_is_named_and_nothing_of_that_stage_is_copied(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    document, _ = grow(store, series=[{"name": "primary", "temperature": 0.7, "repetitionPenalty": 1.2}])
    stage = document.stage("generate", "primary", "alpha")
    assert stage is not None and stage.reused == 0
    assert any("model alpha: series primary temperature changed" in r.reason for r in stage.refused)


def test_a_changed_judge_prompt_refuses_its_judgments_but_not_the_answers(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    document, _ = grow(store, judging={"promptTemplate": "Оцени {answer} по {reference}: {question}"})
    assert document.stage("generate", "primary", "alpha").reused == 3  # type: ignore[union-attr]
    judging = document.stage("judge", "primary", "judge-a")
    assert judging is not None and judging.reused == 0
    assert [r.reason.split(" (")[0] for r in judging.refused] == ["judge judge-a: prompt template changed"]


def test_a_changed_question_is_named_and_only_its_records_are_made_again(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    changed = [QUESTIONS[0], dataclasses.replace(QUESTIONS[1], question="Вопрос 2, иначе?"), QUESTIONS[2]]
    run = evalrun("grown", [*OLD, NEW])
    document = reuse_records(run_inputs(store, run, changed), [Source("board", store, RunLayout("board"))])
    stage = document.stage("generate", "primary", "alpha")
    assert stage is not None and stage.from_runs == {"board": 2} and not stage.complete
    assert [r.reason for r in stage.refused] == ["question q2 changed: its answer is made again"]


def test_a_changed_reference_keeps_the_answer_and_refuses_the_judgment(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    changed = [QUESTIONS[0], dataclasses.replace(QUESTIONS[1], reference="Иной ответ."), QUESTIONS[2]]
    run = evalrun("grown", [*OLD, NEW])
    document = reuse_records(run_inputs(store, run, changed), [Source("board", store, RunLayout("board"))])
    assert document.stage("generate", "primary", "alpha").reused == 3  # type: ignore[union-attr]
    judging = document.stage("judge", "primary", "judge-a")
    assert judging is not None and judging.reused == 4
    assert {r.reason for r in judging.refused} == {
        f"question q2 ({m}) changed what the judge sees (question, reference or answer)"
        for m in ("alpha", "beta")
    }


def test_a_new_benchmark_question_is_asked_while_the_shared_ones_are_copied(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    more = [*QUESTIONS, Question(id="q4", domain="law", level=1, question="Вопрос 4?", reference="Ответ 4.")]
    run = evalrun("grown", OLD)
    document = reuse_records(run_inputs(store, run, more), [Source("board", store, RunLayout("board"))])
    stage = document.stage("generate", "primary", "alpha")
    assert stage is not None and stage.reused == 3 and stage.needed == 4 and not stage.complete


def test_records_without_hashes_from_an_older_kubejury_are_not_copied(store: LocalStorage) -> None:
    store_source(store, evalrun("board", OLD))
    layout = RunLayout("board")
    prefix = layout.answers_prefix("primary", "alpha")
    old = [
        {k: v for k, v in a.to_json().items() if k != "question_sha256"}
        for a in read_answers(store, layout, "primary", "alpha")
    ]
    for key in store.shard_keys(prefix):
        store.delete_prefix(key)
    store.write_jsonl_shard(prefix, old)
    document, _ = grow(store)
    stage = document.stage("generate", "primary", "alpha")
    assert stage is not None and stage.reused == 0
    assert [r.reason for r in stage.refused] == [
        "3 answers were stored by a kubejury without question hashes"
    ]


def test_a_source_that_holds_nothing_is_reported_not_fatal(store: LocalStorage) -> None:
    document, _ = grow(store)
    assert [r.reason for r in document.missing_sources] == [
        "run board has no stored spec: nothing of it is reused"
    ]
    assert all(s.reused == 0 for s in document.stages)


@pytest.mark.parametrize(
    ("uri", "allowed"),
    [
        ("s3://b/root/team-a/board-1a2b3c4d", True),
        ("s3://b/root/team-b/board-1a2b3c4d", False),  # another namespace's prefix
        ("s3://b/root/team-a/other-1a2b3c4d", False),  # another run's name
        ("s3://b/root/team-a/../team-b/board-1a2b3c4d", False),
        ("s3://b/root/team-a/board-1a2b3c4d/board", False),  # below a prefix, not one
    ],
)
def test_a_source_prefix_must_be_a_sibling_of_the_runs_own(uri: str, allowed: bool) -> None:
    own = "s3://b/root/team-a/grown-99aa88bb"
    if allowed:
        _check_sibling(f"board={uri}", "board", uri, own)
    else:
        with pytest.raises(ConfigError, match="not a run prefix beside this run's"):
            _check_sibling(f"board={uri}", "board", uri, own)
