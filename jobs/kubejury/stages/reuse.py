"""The reuse step: copy the answers and judgments of earlier runs that this run would make again.

Why this module exists: a leaderboard grows by one model at a time, and each earlier answer and
judgment cost GPU-hours that a new run of N+1 models would spend again. Every stored record says
what made it — its stage's fingerprint document (``…/fingerprints/<stage>-<name>.json``) and, per
record, the hash of what the model or judge was shown. So a record can be copied exactly when
everything that determined it is the same here:

- **an answer**: its model's generation parts are this run's (model source, checkpoint,
  quantization, runtime, served name, every field of the series), and the question text it
  answered hashes to this benchmark's question of that id (``question_sha256``);
- **a judgment**: its judge's parts are this run's (judge model and serving, prompt template,
  variant, language, sampling, retries, output format, seeds, anonymizer version) and what the
  judge saw — question, reference and the answer as anonymized *in this run* — hashes the same
  (``input_sha256``). So it does not matter which other models the source judged, nor in what order.

Records are **copied** into this run's own prefix (each marked ``reused_from``, and carrying this
run's fingerprint digest): deleting a source run, even with ``cleanupPolicy: Delete``, never
removes what this run uses, and the aggregation reads one run's records as it always did. Copies
are written as Parquet shards, whatever the source holds: a source made before issue 26 (JSONL
shards) lends its records like any other.

Every part that differs is named (:func:`kubejury.provenance.reuse_differences`) and its records
are left to be made again; the outcome is one :class:`~kubejury.records.reuse.ReuseDocument` at
``<run>/reuse.json``. A stage fully covered by copies also gets a complete progress record, so the
operator and ``kubejury run`` start no server for it. Copying is idempotent: a rerun copies only
what is still missing and counts every copy the run holds.

Sources are read with the storage the caller opened (the run's own settings and credentials); the
caller decides which prefixes those are (``kubejury reuse`` accepts only siblings of the run's
own prefix, ``kubejury run`` only run folders of its own storage root).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubejury.config.spec import EvalRun
from kubejury.files.benchmark import Question
from kubejury.files.shards import write_records
from kubejury.files.storage import RunLayout, Storage
from kubejury.judging.anonymize import Scrubber, mapping_document
from kubejury.provenance import find, reuse_differences
from kubejury.records.fingerprint import StageFingerprint
from kubejury.records.progress import ProgressRecord
from kubejury.records.results import AnswerRecord, JudgmentRecord, RecordFormatError, question_sha256
from kubejury.records.reuse import Refusal, ReuseDocument, StageReuse
from kubejury.records.timestamps import now_time
from kubejury.stages.generate import STAGE as GENERATE
from kubejury.stages.generate import read_answers
from kubejury.stages.judge import STAGE as JUDGE
from kubejury.stages.judge import build_items, read_judgments
from kubejury.stages.runner import is_final

#: How many per-question refusals of one stage are listed one by one before they are summed up.
LISTED_QUESTIONS = 10


@dataclass(frozen=True)
class Source:
    """An earlier run to copy from: its name (``spec.reuse.from``), storage and layout."""

    name: str
    storage: Storage
    layout: RunLayout


@dataclass(frozen=True)
class ReuseInputs:
    """This run: its spec, questions (after the filters), stage fingerprints, storage and layout."""

    evalrun: EvalRun
    questions: Sequence[Question]
    fingerprints: Sequence[StageFingerprint]
    storage: Storage
    layout: RunLayout


def reuse_records(run: ReuseInputs, sources: Sequence[Source], *, write: bool = True) -> ReuseDocument:
    """Copy every reusable record of ``sources`` into ``run`` (in source order: the first source
    holding a record wins) and return — and, with ``write``, store — the reuse document.

    ``write=False`` changes nothing: ``kubejury plan --estimate`` uses it to count what would be
    copied."""
    spec = run.evalrun.spec
    readable, missing = _readable_sources(sources)
    stages: list[StageReuse] = []
    for series in spec.series:
        answers_now: dict[str, list[AnswerRecord]] = {}
        generated: set[str] = set()
        for model in spec.models:
            stage, answers = _reuse_answers(run, readable, series.name, model.name, write)
            stages.append(stage)
            answers_now[model.name] = answers
            if stage.complete:
                generated.add(model.name)
        for judge in spec.judges:
            stages.append(
                _reuse_judgments(run, readable, series.name, judge.name, answers_now, generated, write)
            )
    document = ReuseDocument(
        sources=tuple(s.name for s in sources), stages=tuple(stages), missing_sources=missing
    )
    if write:
        run.storage.write_json(run.layout.reuse_key, document.to_json())
    return document


def _readable_sources(sources: Sequence[Source]) -> tuple[list[Source], tuple[Refusal, ...]]:
    """The sources that hold a stored run, and a refusal for each that holds nothing."""
    readable: list[Source] = []
    missing: list[Refusal] = []
    for source in sources:
        if source.storage.read_json_or_none(source.layout.spec_key) is None:
            missing.append(
                Refusal(source.name, f"run {source.name} has no stored spec: nothing of it is reused")
            )
        else:
            readable.append(source)
    return readable, tuple(missing)


# ------------------------------------------------------------------------------------- answers


def _reuse_answers(
    run: ReuseInputs, sources: Sequence[Source], series: str, model: str, write: bool
) -> tuple[StageReuse, list[AnswerRecord]]:
    """One model's answers of one series: what is copied, and every final answer the run then holds."""
    current = find(run.fingerprints, GENERATE, series, model)
    held = {r.question_id: r for r in read_answers(run.storage, run.layout, series, model) if is_final(r)}
    from_runs = _copied_counts(held.values())
    refused: list[Refusal] = []
    copies: list[AnswerRecord] = []
    for source in sources:
        wanted = [q for q in run.questions if q.id not in held]
        if not wanted:
            break
        theirs = _source_fingerprint(source, series, GENERATE, model)
        if theirs is None:
            continue  # the source never generated this model's answers of this series
        differences = reuse_differences(current, theirs)
        if differences:
            refused.extend(Refusal(source.name, reason) for reason in differences)
            continue
        stored = {r.question_id: r for r in read_answers(source.storage, source.layout, series, model)}
        taken, why_not = _answers_to_copy(wanted, stored, theirs, source.name)
        refused.extend(why_not)
        for record in taken:
            copy = dataclasses.replace(record, fingerprint=current.digest, reused_from=source.name)
            copies.append(copy)
            held[copy.question_id] = copy
            from_runs[source.name] = from_runs.get(source.name, 0) + 1
    complete = all(q.id in held for q in run.questions)
    if write and copies:
        prefix = run.layout.answers_prefix(series, model)
        write_records(run.storage, prefix, copies)
        _store_fingerprint(run, current, run.layout.fingerprint_key(series, GENERATE, model))
    if write and complete and from_runs:
        _store_progress(run, current, len(run.questions), sum(from_runs.values()))
    stage = StageReuse(
        stage=GENERATE,
        series=series,
        name=model,
        needed=len(run.questions),
        from_runs=from_runs,
        complete=complete and bool(from_runs),
        refused=tuple(refused),
    )
    order = {q.id: i for i, q in enumerate(run.questions)}
    answers = sorted((r for r in held.values() if r.question_id in order), key=lambda r: order[r.question_id])
    return stage, answers


def _answers_to_copy(
    wanted: Sequence[Question], stored: Mapping[str, AnswerRecord], theirs: StageFingerprint, source: str
) -> tuple[list[AnswerRecord], list[Refusal]]:
    """The source's answers to ``wanted`` that may be copied, and why the others may not."""
    taken: list[AnswerRecord] = []
    changed: list[str] = []
    unhashed = 0
    for question in wanted:
        record = stored.get(question.id)
        if (
            record is None
            or not is_final(record)
            or record.answer is None
            or not theirs.accepts(record.fingerprint)
        ):
            continue
        if record.question_sha256 is None:
            unhashed += 1
        elif record.question_sha256 != question_sha256(question.question):
            changed.append(question.id)
        else:
            taken.append(record)
    refused = _question_refusals(source, changed, "changed: its answer is made again")
    if unhashed:
        refused.append(
            Refusal(source, f"{unhashed} answers were stored by a kubejury without question hashes", unhashed)
        )
    return taken, refused


# ------------------------------------------------------------------------------------ judgments


def _reuse_judgments(
    run: ReuseInputs,
    sources: Sequence[Source],
    series: str,
    judge: str,
    answers_now: Mapping[str, list[AnswerRecord]],
    generated: set[str],
    write: bool,
) -> StageReuse:
    """One judge's judgments of one series, for the answers the run holds after the answer copies."""
    spec = run.evalrun.spec
    current = find(run.fingerprints, JUDGE, series, judge)
    scrubber = Scrubber([m.name for m in spec.models])
    items, mapping, _ = build_items(
        run.questions, dict(answers_now), seed=spec.scoring.seed, scrubber=scrubber
    )
    held = {
        (r.question_id, r.model): r
        for r in read_judgments(run.storage, run.layout, series, judge)
        if is_final(r)
    }
    from_runs = _copied_counts(held.values())
    refused: list[Refusal] = []
    copies: list[JudgmentRecord] = []
    for source in sources:
        wanted = [item for item in items if (item.question.id, item.model) not in held]
        if not wanted:
            break
        theirs = _source_fingerprint(source, series, JUDGE, judge)
        if theirs is None:
            continue
        differences = reuse_differences(current, theirs)
        if differences:
            refused.extend(Refusal(source.name, reason) for reason in differences)
            continue
        stored = {
            (r.question_id, r.model): r for r in read_judgments(source.storage, source.layout, series, judge)
        }
        changed: list[str] = []
        for item in wanted:
            record = stored.get((item.question.id, item.model))
            if record is None or not is_final(record) or not theirs.accepts(record.fingerprint):
                continue
            if record.input_sha256 != item.input_sha256:
                changed.append(f"{item.question.id} ({item.model})")
                continue
            copy = dataclasses.replace(
                record, answer_id=item.answer_id, fingerprint=current.digest, reused_from=source.name
            )
            copies.append(copy)
            held[(item.question.id, item.model)] = copy
            from_runs[source.name] = from_runs.get(source.name, 0) + 1
        refused.extend(
            _question_refusals(
                source.name, changed, "changed what the judge sees (question, reference or answer)"
            )
        )
    covered = tuple(
        m.name
        for m in spec.models
        if m.name in generated
        and all((item.question.id, item.model) in held for item in items if item.model == m.name)
    )
    complete = bool(from_runs) and len(covered) == len(spec.models)
    if write and copies:
        write_records(run.storage, run.layout.judgments_prefix(series, judge), copies)
        _store_fingerprint(run, current, run.layout.fingerprint_key(series, JUDGE, judge))
        run.storage.write_json(
            run.layout.anonymization_key(series),
            mapping_document(mapping, spec.scoring.seed, series).to_json(),
        )
    if write and complete:
        _store_progress(run, current, len(items), sum(from_runs.values()))
    return StageReuse(
        stage=JUDGE,
        series=series,
        name=judge,
        needed=len(items),
        from_runs=from_runs,
        complete=complete,
        refused=tuple(refused),
        covered_models=covered,
    )


# -------------------------------------------------------------------------------------- shared


def _copied_counts(records: Iterable[AnswerRecord] | Iterable[JudgmentRecord]) -> dict[str, int]:
    """Source run → records of this run copied from it (copies made by an earlier reuse step)."""
    counts: dict[str, int] = {}
    for record in records:
        if record.reused_from is not None:
            counts[record.reused_from] = counts.get(record.reused_from, 0) + 1
    return counts


def _question_refusals(source: str, ids: Sequence[str], what: str) -> list[Refusal]:
    """One refusal per question up to :data:`LISTED_QUESTIONS`, then one for the rest."""
    listed = [Refusal(source, f"question {qid} {what}", 1) for qid in ids[:LISTED_QUESTIONS]]
    rest = len(ids) - LISTED_QUESTIONS
    if rest > 0:
        listed.append(Refusal(source, f"{rest} more questions {what}", rest))
    return listed


def _source_fingerprint(source: Source, series: str, stage: str, name: str) -> StageFingerprint | None:
    """The source stage's fingerprint document, or ``None`` when it has no such stage."""
    stored = source.storage.read_json_or_none(source.layout.fingerprint_key(series, stage, name))
    if not isinstance(stored, Mapping):
        return None
    try:
        return StageFingerprint.from_json(stored)
    except (ValueError, RecordFormatError):
        return None


def _store_fingerprint(run: ReuseInputs, current: StageFingerprint, key: str) -> None:
    if run.storage.read_json_or_none(key) is None:
        run.storage.write_json(key, current.to_json())


def _store_progress(run: ReuseInputs, current: StageFingerprint, total: int, reused: int) -> None:
    """A complete progress record for a stage every record of which was copied (so no server is
    brought up for it, and status shows it done)."""
    now = now_time()
    record = ProgressRecord(
        total=total,
        done=total,
        resumed=total,
        stage=current.stage,
        series=current.series,
        name=current.name,
        state="succeeded",
        message=f"{reused} records reused from earlier runs",
        started_at=now,
        updated_at=now,
        fingerprint=current.digest,
    )
    run.storage.write_json(
        run.layout.progress_key(current.series, current.stage, current.name), record.to_json()
    )
