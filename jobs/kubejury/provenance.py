"""What determined each stage's records, computed from the spec and the benchmark (issue 12 §3).

Why this module exists: the fingerprint parts must be the same wherever they are computed (the
local ``kubejury run``, a generation Job, the aggregation Job), so one function per stage builds
them. A part changes exactly when the stored records would no longer be what the spec asks for:

- generation: the benchmark's content hash (questions after the filters); the model's source,
  checkpoint, quantization, runtime and served name; every field of the series;
- judging: the benchmark's content hash; the judge's model fields as above; the judging section
  (prompt template hash, language/variant, sampling, retries, output format); the anonymizer's
  version. What the judge is shown is hashed per judgment instead (issue 24), so adding a model
  changes no other model's judgments.

:func:`reuse_differences` compares a stage with the same stage of an earlier run for reuse
(issue 24): every part but the whole-benchmark hash must match, and each differing part is named.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubejury.config.spec import EvalRun, JudgeSpec, Judging, ModelSpec, Series
from kubejury.files.benchmark import Benchmark
from kubejury.judging.anonymize import ANONYMIZER_VERSION
from kubejury.judging.judge_prompt import DEFAULT_TEMPLATES
from kubejury.records.fingerprint import StageFingerprint, digest_of
from kubejury.records.results import AnswerRecord, JudgmentRecord, TokenUsage


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def benchmark_hash(benchmark: Benchmark) -> str:
    """SHA-256 of the questions asked (id, domain, level, question, reference), in order."""
    digest = hashlib.sha256()
    for q in benchmark.questions:
        digest.update(json.dumps([q.id, q.domain, q.level, q.question, q.reference]).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _model_parts(entry: ModelSpec, prefix: str) -> dict[str, str]:
    return {
        f"{prefix}.source": _text(entry.source),
        f"{prefix}.checkpoint": _text(entry.checkpoint),
        f"{prefix}.quantization": _text(entry.quantization),
        f"{prefix}.runtime": _text(entry.runtime),
        f"{prefix}.servedName": _text(entry.request_model),
    }


def judge_template(judging: Judging, language: str) -> str:
    """The judging prompt template in force (the spec's, else the built-in one of the language)."""
    if judging.prompt_template:
        return judging.prompt_template
    lang = (judging.language or language or "ru").lower()
    return DEFAULT_TEMPLATES.get(lang, DEFAULT_TEMPLATES["ru"])


def generation_fingerprint(bench_hash: str, model: ModelSpec, series: Series) -> StageFingerprint:
    parts = {"benchmark.sha256": bench_hash, **_model_parts(model, "model")}
    for key, value in series.model_dump(mode="json", by_alias=True).items():
        parts[f"series.{key}"] = _text(value)
    return StageFingerprint("generate", series.name, model.name, parts)


def judging_fingerprint(
    bench_hash: str,
    judge: JudgeSpec,
    judging: Judging,
    language: str,
    series: str,
    answers: Mapping[str, str],
    seed: int = 0,
) -> StageFingerprint:
    """``answers``: model name → generation digest of the answers judged.

    The parts are what the judge *is* and how it is asked; what it is shown (question, reference,
    anonymized answer) is hashed per judgment (``JudgmentRecord.input_sha256``), so a judgment
    depends only on what its judge saw — not on the other models of the run, nor on the order.
    Until issue 24 the parts named every model's generation digest (``answers.<model>``); that
    digest is kept in ``earlier_digests`` so records judged then still read as this stage's."""
    parts = {"benchmark.sha256": bench_hash, **_model_parts(judge, "judge")}
    parts["judge.promptVariant"] = _text(getattr(judge, "prompt_variant", None))
    parts["judge.seed"] = _text(judge.seed)
    parts["scoring.seed"] = _text(seed)  # the anonymization order and the default judge seed
    settings = judging.model_dump(mode="json", by_alias=True, exclude={"prompt_template"})
    for key, value in settings.items():
        if key != "promptTemplate":
            parts[f"judging.{key}"] = _text(value)
    parts["judging.language"] = _text(judging.language or language)
    parts["judging.promptTemplate.sha256"] = sha256_text(judge_template(judging, language))
    before_issue_24 = {**parts, **{f"answers.{model}": digest for model, digest in sorted(answers.items())}}
    parts["anonymization.version"] = str(ANONYMIZER_VERSION)
    return StageFingerprint("judge", series, judge.name, parts, earlier_digests=(digest_of(before_issue_24),))


#: Parts that name the whole benchmark: a record is compared question by question instead
#: (``question_sha256``, ``input_sha256``), so a source run with other questions still lends the
#: answers to the questions both share.
WHOLE_BENCHMARK_PARTS = frozenset({"benchmark.sha256"})


def reuse_differences(current: StageFingerprint, source: StageFingerprint) -> list[str]:
    """Why records of ``source``'s stage may not be copied into ``current``'s, one readable reason
    per part that differs (empty: they may, question by question)."""
    if current.stage != source.stage:
        return [f"stage {source.stage} is not {current.stage}"]
    mine = {k: v for k, v in current.parts.items() if k not in WHOLE_BENCHMARK_PARTS}
    theirs = {k: v for k, v in source.parts.items() if k not in WHOLE_BENCHMARK_PARTS}
    return [
        part_changed(current, key, theirs.get(key), mine.get(key))
        for key in sorted(set(mine) | set(theirs))
        if mine.get(key) != theirs.get(key)
    ]


_PART_NAMES = {
    "source": "model source",
    "checkpoint": "checkpoint",
    "quantization": "quantization",
    "runtime": "runtime",
    "servedName": "served model name",
    "promptVariant": "prompt variant",
    "promptTemplate.sha256": "prompt template",
    "version": "anonymization version",
}


def part_changed(fingerprint: StageFingerprint, key: str, before: str | None, after: str | None) -> str:
    """``judge judge-gemma: prompt template changed (3f2a… → 9c41…)``: one part, said plainly."""
    who = f"{'model' if fingerprint.stage == 'generate' else 'judge'} {fingerprint.name}"
    group, _, rest = key.partition(".")
    label = _PART_NAMES.get(rest, rest or group)
    if group == "series":
        label = f"series {fingerprint.series} {rest}"
    elif group in ("judging", "scoring", "anonymization") and rest not in _PART_NAMES:
        label = f"{group}.{rest}"
    elif group == "anonymization":
        label = _PART_NAMES[rest]
    return f"{who}: {label} changed ({_short(before)} → {_short(after)})"


def _short(value: str | None) -> str:
    if value is None:
        return "(none)"
    return value if len(value) <= 24 else value[:12] + "…"


def run_fingerprints(evalrun: EvalRun, benchmark: Benchmark) -> list[StageFingerprint]:
    """Every stage's fingerprint of a run: generation per (series, model), judging per (series, judge)."""
    spec = evalrun.spec
    bench_hash = benchmark_hash(benchmark)
    out: list[StageFingerprint] = []
    for series in spec.series:
        generated = {m.name: generation_fingerprint(bench_hash, m, series) for m in spec.models}
        out.extend(generated.values())
        answers = {name: fp.digest for name, fp in generated.items()}
        for judge in spec.judges:
            out.append(
                judging_fingerprint(
                    bench_hash,
                    judge,
                    spec.judging,
                    spec.benchmark.language,
                    series.name,
                    answers,
                    spec.scoring.seed,
                )
            )
    return out


def find(fingerprints: Sequence[StageFingerprint], stage: str, series: str, name: str) -> StageFingerprint:
    for fp in fingerprints:
        if (fp.stage, fp.series, fp.name) == (stage, series, name):
            return fp
    raise KeyError(f"{stage}/{series}/{name}")


def report_provenance(
    fingerprints: Sequence[StageFingerprint],
    evalrun: EvalRun,
    answers: Sequence[AnswerRecord],
) -> dict[str, Any]:
    """The ``provenance`` section of report.json: how each number can be traced to what made it.

    ``truncated`` counts, per series and model, the answers the runtime reported as cut at the
    token limit (``finish_reason: length``): such an answer is scored as the model's answer, but
    it is not the whole of it.
    """
    from kubejury import __version__

    spec = evalrun.spec
    return {
        "kubejury_version": __version__,
        "fingerprints": {f"{fp.stage}/{fp.series}/{fp.name}": fp.digest for fp in fingerprints},
        "judge_prompt_template_sha256": sha256_text(judge_template(spec.judging, spec.benchmark.language)),
        "servers": _servers(evalrun, _reported_versions(answers)),
        "truncated": _truncated(evalrun, answers),
        "answers": [_answer_row(record) for record in answers],
    }


def _reported_versions(answers: Sequence[AnswerRecord]) -> dict[str, set[str]]:
    """Model name → every server version its answers reported."""
    versions: dict[str, set[str]] = {}
    for record in answers:
        if record.server_version is not None:
            versions.setdefault(record.model, set()).add(record.server_version)
    return versions


def _servers(evalrun: EvalRun, versions: Mapping[str, set[str]]) -> dict[str, dict[str, Any]]:
    return {
        e.name: {
            "runtime": e.runtime,
            "served_name": e.request_model,
            "source": e.source,
            "reported_versions": sorted(versions.get(e.name, ())),
        }
        for e in evalrun.spec.all_endpoints()
    }


def _truncated(evalrun: EvalRun, answers: Sequence[AnswerRecord]) -> dict[str, dict[str, int]]:
    """Series → model → answers cut at the token limit (every model of the spec, zero included)."""
    spec = evalrun.spec
    truncated = {s.name: {m.name: 0 for m in spec.models} for s in spec.series}
    for record in answers:
        if record.finish_reason == "length":
            per_model = truncated.setdefault(record.series, {})
            per_model[record.model] = per_model.get(record.model, 0) + 1
    return truncated


def _answer_row(record: AnswerRecord) -> dict[str, Any]:
    usage = record.usage or TokenUsage()
    return {
        "series": record.series,
        "model": record.model,
        "question_id": record.question_id,
        "finish_reason": record.finish_reason,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "fingerprint": record.fingerprint,
    }


def stale_records(
    fingerprints: Sequence[StageFingerprint], records: Sequence[AnswerRecord | JudgmentRecord]
) -> list[str]:
    """Stages (``stage series/name``) whose records carry a fingerprint other than this spec's.

    An answer is checked against its model's generation fingerprint, a judgment against its judge's
    judging fingerprint; a record without a fingerprint, or of a stage the spec does not have, is
    not stale."""
    expected = {(fp.stage, fp.series, fp.name): fp for fp in fingerprints}
    stale = set()
    for record in records:
        stage, name = _made_by(record)
        fingerprint = expected.get((stage, record.series, name))
        if (
            record.fingerprint is not None
            and fingerprint is not None
            and not fingerprint.accepts(record.fingerprint)
        ):
            stale.add(f"{stage} {name}/{record.series}")
    return sorted(stale)


def _made_by(record: AnswerRecord | JudgmentRecord) -> tuple[str, str]:
    """The stage that made ``record`` and its model's or judge's name."""
    if isinstance(record, JudgmentRecord):
        return "judge", record.judge
    return "generate", record.model
