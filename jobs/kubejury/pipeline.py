"""Glue that runs an EvalRun's stages: load and check inputs, open storage, reach endpoints, call stages.

``kubejury run`` (local mode, all stages in one process) and ``kubejury generate|judge|aggregate``
(one stage per operator Job) both go through here, so the two paths cannot drift apart. Loading
(:func:`load_inputs`) reads and validates *everything* — the spec, the benchmark, the filters —
before anything is written: a bad spec or benchmark fails with an :class:`InputError` and leaves
storage untouched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kubejury.config.spec import Concurrency, EvalRun, ModelSpec, Series, StorageSpec, load_evalrun
from kubejury.errors import ConfigError, InputError, KubejuryError, SpecChanged
from kubejury.files.benchmark import Benchmark, Format, Question, parse_benchmark
from kubejury.files.storage import STORAGE_MOUNT_ENV, RunLayout, Storage, open_storage, read_uri, safe_name
from kubejury.inference.client import ClientSettings, EndpointPool
from kubejury.records.fingerprint import StageFingerprint
from kubejury.records.results import AnswerRecord, JudgmentRecord
from kubejury.runtimes import runtime_of
from kubejury.stages import ProgressView, StageOptions, StageSummary, run_generation, run_judging
from kubejury.stages.generate import read_answers
from kubejury.stages.judge import read_judgments

if TYPE_CHECKING:
    import polars as pl

    from kubejury.records.reuse import ReuseDocument
    from kubejury.records.sequential import SequentialDocument
    from kubejury.stages.reuse import ReuseInputs, Source

ENDPOINT_ENV = "KUBEJURY_ENDPOINT"
T = TypeVar("T")


@dataclass(frozen=True)
class LoadedRun:
    """A run as the engine loaded it: the validated spec, its filtered questions, its storage and
    where each file lives in it. Everything a stage needs."""

    evalrun: EvalRun
    spec_source: str
    benchmark: Benchmark  # after the spec's filters
    storage: Storage
    layout: RunLayout

    @property
    def name(self) -> str:
        return self.evalrun.name

    @functools.cached_property
    def fingerprints(self) -> list[StageFingerprint]:
        """Every stage's fingerprint under this spec and benchmark (see :mod:`kubejury.provenance`)."""
        from kubejury.provenance import run_fingerprints

        return run_fingerprints(self.evalrun, self.benchmark)

    def fingerprint(self, stage: str, series: str, name: str) -> StageFingerprint:
        from kubejury.provenance import find

        return find(self.fingerprints, stage, series, name)

    @property
    def question_ids(self) -> list[str]:
        return [q.id for q in self.benchmark.questions]


def _benchmark_format(fmt: str) -> Format | None:
    return {"auto": None, "json": "jsonl", "jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}.get(fmt)


def load_questions(evalrun: EvalRun, *, base_dir: Path | None, spec_source: str) -> Benchmark:
    """The benchmark the spec points to, parsed, validated and filtered."""
    bench_spec = evalrun.spec.benchmark
    storage_spec = evalrun.spec.storage
    data = read_uri(
        bench_spec.uri,
        endpoint_url=storage_spec.endpoint_url,
        region=storage_spec.region,
        base_dir=base_dir,
    )
    benchmark = parse_benchmark(data, bench_spec.uri, _benchmark_format(bench_spec.format))
    filters = bench_spec.filters
    if filters.domains:
        unknown = [d for d in filters.domains if d not in benchmark.domains]
        if unknown:
            raise InputError(
                spec_source,
                f"{', '.join(map(repr, unknown))} not in the benchmark; its domains: {', '.join(benchmark.domains)}",
                field="spec.benchmark.filters.domains",
            )
    if filters.levels:
        unknown_levels = [lvl for lvl in filters.levels if lvl not in benchmark.levels]
        if unknown_levels:
            raise InputError(
                spec_source,
                f"level(s) {unknown_levels} not in the benchmark; its levels: {list(benchmark.levels)}",
                field="spec.benchmark.filters.levels",
            )
    filtered = benchmark.filter(filters.domains, filters.levels, filters.limit_per_cell)
    if not filtered.questions:
        raise InputError(spec_source, "the filters leave no question to ask", field="spec.benchmark.filters")
    return filtered


def _links_checked_from(uri: str) -> str | None:
    """The mount the operator named, when ``uri`` lies below it; else ``None`` (the root itself)."""
    mount = os.environ.get(STORAGE_MOUNT_ENV)
    if not mount or not uri.startswith("file://"):
        return None
    path = uri.removeprefix("file://").rstrip("/")
    return mount if path == mount.rstrip("/") or path.startswith(mount.rstrip("/") + "/") else None


def open_run_storage(storage_spec: StorageSpec, out: str | None = None) -> Storage:
    """Storage for results: ``--out`` when given, else ``spec.storage.uri`` (relative paths: from the CWD)."""
    uri = out or storage_spec.uri
    return open_storage(
        uri,
        endpoint_url=storage_spec.endpoint_url,
        region=storage_spec.region,
        # Path-style unless switched off: MinIO/Ceph need it (also when their endpoint comes from the
        # environment), and AWS S3 still accepts it.
        path_style=storage_spec.path_style if storage_spec.path_style is not None else True,
        no_links_below=_links_checked_from(uri),
    )


def load_inputs(spec_path: str, *, out: str | None = None) -> LoadedRun:
    """Load and check the spec and its benchmark; open (but do not write to) storage."""
    evalrun = load_evalrun(spec_path)
    base_dir = Path(spec_path).resolve().parent
    benchmark = load_questions(evalrun, base_dir=base_dir, spec_source=spec_path)
    storage = open_run_storage(evalrun.spec.storage, out)
    return LoadedRun(evalrun, spec_path, benchmark, storage, RunLayout(evalrun.name))


def _spec_digest(document: Any) -> str:
    import hashlib

    import orjson

    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def record_spec(inputs: LoadedRun) -> bool:
    """Store the spec next to the results; returns False when a *different* spec was stored before.

    ``spec.json`` is the latest spec; every spec ever used for the run is also kept, never
    overwritten, as ``spec-history/<digest>.json`` (content-addressed), so an earlier spec is not lost.
    """
    key = inputs.layout.spec_key
    document = inputs.evalrun.model_dump(mode="json", by_alias=True, exclude_none=True)
    previous = inputs.storage.read_json_or_none(key)
    for kept in (previous, document):
        if kept is None:
            continue
        history_key = f"{inputs.layout.run}/spec-history/{_spec_digest(kept)}.json"
        if inputs.storage.read_json_or_none(history_key) is None:
            inputs.storage.write_json(history_key, kept)
    if previous == document:
        return True
    inputs.storage.write_json(key, document)
    return previous is None


def spec_changes(inputs: LoadedRun) -> list[str]:
    """Stages whose stored records were made under another spec, each with what changed.

    Empty when the run folder is new or every stored stage fingerprint matches this spec.
    """
    changes: list[str] = []
    for fp in inputs.fingerprints:
        stored = inputs.storage.read_json_or_none(inputs.layout.fingerprint_key(fp.series, fp.stage, fp.name))
        if stored is None:
            continue
        before = StageFingerprint.from_json(stored)
        if before.digest != fp.digest:
            what = "; ".join(fp.changes_from(before)) or "fingerprint differs"
            changes.append(f"{fp.stage} {fp.name}/{fp.series}: {what}")
    return changes


def spec_changed_error(inputs: LoadedRun, changes: Sequence[str]) -> SpecChanged:
    shown = list(changes[:6]) + ([f"… and {len(changes) - 6} more"] if len(changes) > 6 else [])
    return SpecChanged(
        f"run {inputs.name!r} in {inputs.storage.uri_for(inputs.layout.run)} holds records of a different "
        f"spec ({' | '.join(shown)}). Nothing was written. Stored records are never mixed with new ones: "
        "rerun with --new-version to write a new version beside this one, or give the EvalRun a new "
        "metadata.name"
    )


def new_version(inputs: LoadedRun, limit: int = 1000) -> LoadedRun:
    """The same run under the first free version name ``<run>.v<N>`` (N ≥ 2) whose stored records,
    if any, match this spec: the old version stays as it is, beside it."""
    for n in range(2, limit):
        candidate = dataclasses.replace(inputs, layout=RunLayout(f"{inputs.name}.v{n}"))
        if not spec_changes(candidate):
            return candidate
    raise ConfigError(f"run {inputs.name!r} has {limit} versions already; give the EvalRun a new name")


def reuse_inputs(inputs: LoadedRun) -> ReuseInputs:
    """What the reuse step needs of this run (:mod:`kubejury.stages.reuse`)."""
    from kubejury.stages.reuse import ReuseInputs

    return ReuseInputs(
        inputs.evalrun, inputs.benchmark.questions, inputs.fingerprints, inputs.storage, inputs.layout
    )


def local_sources(inputs: LoadedRun) -> list[Source]:
    """``spec.reuse.from`` as run folders of this run's own storage root (local mode)."""
    sources = []
    for i, name in enumerate(inputs.evalrun.spec.reuse.from_runs):
        if name == inputs.layout.run:
            raise ConfigError(f"spec.reuse.from[{i}]: {name!r} is this run; a run cannot reuse itself")
        sources.append(source_at(inputs, name, None))
    return sources


def source_at(inputs: LoadedRun, name: str, uri: str | None) -> Source:
    """The earlier run ``name`` stored at its own prefix ``uri`` (opened with this run's storage
    settings and credentials), or — without ``uri`` — as a run folder of this run's storage."""
    from kubejury.stages.reuse import Source

    safe_name(name, "source run name")
    if uri is None:
        return Source(name, inputs.storage, RunLayout(name))
    return Source(name, open_run_storage(inputs.evalrun.spec.storage, uri), RunLayout(name))


def reuse(inputs: LoadedRun, sources: Sequence[Source], *, write: bool = True) -> ReuseDocument:
    """Copy what ``sources`` hold that this run would make again; the reuse document."""
    from kubejury.stages.reuse import reuse_records

    return reuse_records(reuse_inputs(inputs), sources, write=write)


def stored_reuse(inputs: LoadedRun) -> ReuseDocument | None:
    """The run's stored reuse document (``None``: the run reused nothing, or predates reuse)."""
    from kubejury.records.reuse import ReuseDocument

    stored = inputs.storage.read_json_or_none(inputs.layout.reuse_key)
    return None if stored is None else ReuseDocument.from_json(stored)


def stored_sequential(inputs: LoadedRun) -> SequentialDocument | None:
    """The run's stored sequential document (``None``: no budget, or no look done yet)."""
    from kubejury.stages.waves import read_document

    return read_document(inputs.storage, inputs.layout.run)


def client_settings(concurrency: Concurrency) -> ClientSettings:
    return ClientSettings(
        max_in_flight=concurrency.requests_per_endpoint,
        request_timeout_s=concurrency.request_timeout_seconds,
        max_attempts=concurrency.max_attempts,
        max_response_bytes=concurrency.max_response_bytes,
    )


def stage_options(concurrency: Concurrency, options: StageOptions | None = None) -> StageOptions:
    """The stage knobs given (or the defaults) with the spec's error threshold."""
    return dataclasses.replace(options or StageOptions(), max_error_share=concurrency.max_error_share)


def endpoint_of(entry: ModelSpec, local_urls: Mapping[str, str], override: str | None = None) -> str:
    """Base URL (``…/v1``) where ``entry`` is served."""
    if override:
        return override
    if entry.name in local_urls:
        return local_urls[entry.name]
    if runtime_of(entry.runtime).external and entry.source:
        return entry.source
    env = os.environ.get(ENDPOINT_ENV)
    if env:
        return env
    raise ConfigError(
        f"no endpoint for {entry.name!r} (runtime {entry.runtime}): local mode serves runtime llamacpp itself; "
        f"for other runtimes use runtime: openai with the server's base URL as source, or pass --endpoint"
    )


def api_key_of(entry: ModelSpec) -> str | None:
    """The API key of an entry with ``apiKeySecretRef``: ``$KUBEJURY_API_KEY`` (the operator puts
    that Secret key there, in that entry's Job only). No other variable is ever read as a key."""
    return os.environ.get("KUBEJURY_API_KEY") if entry.api_key_secret_ref is not None else None


def select(entries: Sequence[Any], names: Sequence[str] | None, what: str) -> list[Any]:
    """Entries with the given names (all when ``names`` is empty), or a ConfigError naming the choices."""
    if not names:
        return list(entries)
    by_name = {e.name: e for e in entries}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ConfigError(
            f"unknown {what} {', '.join(map(repr, unknown))}; the spec has: {', '.join(by_name)}"
        )
    return [by_name[n] for n in names]


async def _gather_stage(coros: Sequence[Awaitable[T]]) -> list[T]:
    """Run stage coroutines together; when some fail, let the others finish, then raise the first error."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    for error in errors:
        if not isinstance(error, Exception):
            raise error  # KeyboardInterrupt / CancelledError
    if errors:
        first = errors[0]
        if len(errors) > 1 and isinstance(first, KubejuryError):
            raise type(first)(f"{first} (and {len(errors) - 1} more stage failure(s))") from first
        raise first
    return [r for r in results if not isinstance(r, BaseException)]


async def generate(
    inputs: LoadedRun,
    pool: EndpointPool,
    endpoints: Mapping[str, str],
    *,
    models: Sequence[ModelSpec],
    series: Sequence[Series],
    options: StageOptions | None = None,
    view: ProgressView | None = None,
    shard: tuple[int, int] | None = None,
    questions: Sequence[Question] | None = None,
) -> list[StageSummary]:
    """Generation for every (model, series) given, concurrently; endpoints: model name → base URL.

    ``shard=(index, count)`` asks only every ``count``-th question starting at ``index`` (one
    completion of an Indexed Job); shards write distinct questions into the same answers folder.
    ``questions``: only these of the benchmark (a budgeted run's look); default all of them.
    """
    questions = shard_questions(inputs.benchmark.questions if questions is None else questions, shard)
    coros = []
    for s in series:
        for model in models:
            client = pool.get(endpoints[model.name], api_key=api_key_of(model), runtime=model.runtime)
            coros.append(
                run_generation(
                    storage=inputs.storage,
                    layout=inputs.layout,
                    model=model,
                    series=s,
                    questions=questions,
                    client=client,
                    options=stage_options(inputs.evalrun.spec.concurrency, options),
                    view=view,
                    shard=shard,
                    fingerprint=inputs.fingerprint("generate", s.name, model.name),
                )
            )
    return await _gather_stage(coros)


def shard_questions(questions: Sequence[T], shard: tuple[int, int] | None) -> list[T]:
    """The questions of one shard: ``questions[index::count]`` (all of them without sharding)."""
    if shard is None:
        return list(questions)
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard index {index} is not within 0..{count - 1} (shards: {count})")
    return list(questions[index::count])


async def judge(
    inputs: LoadedRun,
    pool: EndpointPool,
    endpoints: Mapping[str, str],
    *,
    judges: Sequence[ModelSpec],
    series: Sequence[Series],
    options: StageOptions | None = None,
    view: ProgressView | None = None,
    serial_endpoints: Collection[str] = (),
    questions: Sequence[Question] | None = None,
) -> list[StageSummary]:
    """Judging of every stored answer of every model, by every judge given, for every series given
    (``questions``: the answers to these only, a budgeted run's look; default every question).

    Judges run concurrently, except those whose endpoint is in ``serial_endpoints`` (servers that
    answer one request at a time, like local llama.cpp): those take turns, one judge after the
    other, so each judge's long shared prompt prefix stays in the server's cache between requests.
    """
    spec = inputs.evalrun.spec
    model_names = [m.name for m in spec.models]
    asked = inputs.benchmark.questions if questions is None else questions
    lanes: dict[str, list[Callable[[], Awaitable[StageSummary]]]] = {}
    for s in series:
        for j in judges:
            client = pool.get(endpoints[j.name], api_key=api_key_of(j), runtime=j.runtime)

            def job(j: Any = j, s: Series = s, client: Any = client) -> Awaitable[StageSummary]:
                return run_judging(
                    storage=inputs.storage,
                    layout=inputs.layout,
                    judge=j,
                    judging=spec.judging,
                    series=s.name,
                    models=model_names,
                    questions=asked,
                    client=client,
                    seed=spec.scoring.seed,
                    language=spec.benchmark.language,
                    options=stage_options(spec.concurrency, options),
                    view=view,
                    fingerprint=inputs.fingerprint("judge", s.name, j.name),
                )

            url = endpoints[j.name]
            lane = url if url in serial_endpoints else f"{url}#{j.name}#{s.name}"
            lanes.setdefault(lane, []).append(job)

    async def run_lane(jobs: list[Callable[[], Awaitable[StageSummary]]]) -> list[StageSummary]:
        return [await job() for job in jobs]

    results = await _gather_stage([run_lane(jobs) for jobs in lanes.values()])
    return [summary for lane in results for summary in lane]


def stored_judgments(inputs: LoadedRun) -> tuple[list[tuple[str, pl.DataFrame]], list[JudgmentRecord]]:
    """All judgments of the run, one per key (the latest final one), read column-wise from the
    shards — only :data:`~kubejury.files.shards.AGGREGATION_COLUMNS`, not the rationale: per
    (series, judge) folder its URI and a frame of the columns the engine scores, and the
    fingerprint witnesses of all of them (what the stale-records check reads)."""
    from kubejury.files import shards
    from kubejury.files.tables import JUDGMENT_SCHEMA

    parts, witnesses = [], []
    for s in inputs.evalrun.spec.series:
        for j in inputs.evalrun.spec.judges:
            prefix = inputs.layout.judgments_prefix(s.name, j.name)
            frame = shards.stage_frame(inputs.storage, prefix, JudgmentRecord, shards.AGGREGATION_COLUMNS)
            if frame is not None:
                latest = shards.latest_rows(frame, ("question_id", "model"))
                witnesses.extend(shards.fingerprint_witnesses(latest))
                parts.append((inputs.storage.uri_for(prefix + "/"), latest.select(*JUDGMENT_SCHEMA)))
    return parts, witnesses


def stored_records(
    inputs: LoadedRun, *, judgments: bool = True
) -> tuple[list[AnswerRecord], list[JudgmentRecord]]:
    """All answers and judgments of the run (one record per key), across series, models and judges;
    without ``judgments``, the answers only (the aggregation reads judgments column-wise)."""
    spec = inputs.evalrun.spec
    answers: list[AnswerRecord] = []
    stored: list[JudgmentRecord] = []
    order = inputs.question_ids
    for s in spec.series:
        for m in spec.models:
            answers.extend(read_answers(inputs.storage, inputs.layout, s.name, m.name, order=order))
        for j in spec.judges if judgments else ():
            stored.extend(read_judgments(inputs.storage, inputs.layout, s.name, j.name))
    return answers, stored


def aggregate_run(inputs: LoadedRun, *, work_dir: Path | None = None) -> tuple[Any, dict[str, str]]:
    """Aggregate the stored judgments (and answers) of the run; write the reports next to the data.

    Reads one record per key (so retried requests never count twice) — the judgments column-wise
    from their shards (:func:`stored_judgments`) and handed to the engine as loaded judgments, the
    answers through the stages' reader into one scratch Parquet file for its columnar loader — runs
    :func:`kubejury.report.aggregate.aggregate` and stores report.json/.md/.html under ``<run>/report/``, keeping a progress record at ``<run>/progress/aggregate-report.json``.
    Returns the Analysis and file name → URI written.
    """
    from kubejury.stages import ProgressTracker

    tracker = ProgressTracker("aggregate", "*", "report", total=1)
    progress_key = inputs.layout.run_progress_key("aggregate", "report")
    inputs.storage.write_json(progress_key, tracker.record())
    try:
        analysis, written = _aggregate(inputs, work_dir)
    except BaseException as exc:
        tracker.finish("failed", f"{type(exc).__name__}: {exc}")
        inputs.storage.write_json(progress_key, tracker.record())
        raise
    tracker.advance()
    tracker.finish("succeeded", written.get("report.html", ""))
    inputs.storage.write_json(progress_key, tracker.record())
    return analysis, written


def _aggregate(inputs: LoadedRun, work_dir: Path | None) -> tuple[Any, dict[str, str]]:
    import tempfile

    from kubejury.files import shards
    from kubejury.files.tables import judgments_from_frames
    from kubejury.modelinfo import ModelInfo
    from kubejury.report import write_reports
    from kubejury.report.aggregate import JudgeRelation, aggregate

    spec = inputs.evalrun.spec
    answers = stored_records(inputs, judgments=False)[0]
    parts, witnesses = stored_judgments(inputs)
    if not parts:
        raise ConfigError(
            f"run {inputs.name!r} has no stored judgments yet: run generation and judging first"
        )
    model_infos = {
        m.name: ModelInfo(
            name=m.name,
            parameters=m.parameter_count,
            parameters_label=m.parameters,
            quantization=m.quantization,
            family=m.family,
        )
        for m in spec.models
    }
    relations = {j.name: JudgeRelation(same_as=j.same_as, family=j.family) for j in spec.judges}
    from kubejury.provenance import report_provenance, stale_records
    from kubejury.records.gpu_usage import from_environment as gpu_usage_from_environment

    stale = stale_records(inputs.fingerprints, [*answers, *witnesses])
    if stale:
        raise SpecChanged(
            f"run {inputs.layout.run!r}: stored records of {', '.join(stale)} were made under a different "
            "spec; a report would present them as this spec's. Rerun with the spec that made them, or "
            "run this spec with --new-version"
        )
    provenance = report_provenance(inputs.fingerprints, inputs.evalrun, answers)
    gpu_usage = gpu_usage_from_environment(os.environ)  # set by the operator on its aggregation Job
    loaded = judgments_from_frames(parts)
    del parts
    with tempfile.TemporaryDirectory(prefix="kubejury-aggregate-", dir=work_dir) as scratch:
        answers_file = Path(scratch) / "answers.parquet"
        if answers:
            shards.write_file(answers_file, answers)
        analysis = aggregate(
            inputs.benchmark,
            loaded,
            str(answers_file) if answers else None,
            model_infos=model_infos,
            judge_relations=relations,
            config=spec.scoring_config(),
            comparisons=spec.comparisons_to_run(),
            inputs={
                "run": inputs.layout.run,
                "spec": inputs.spec_source,
                "storage": inputs.storage.uri_for(inputs.layout.run),
                "judgments": inputs.storage.uri_for(f"{inputs.layout.run}/<series>/judgments/"),
                "answers": inputs.storage.uri_for(f"{inputs.layout.run}/<series>/answers/"),
            },
        )
    written = write_reports(
        analysis,
        inputs.storage,
        prefix=inputs.layout.report_prefix + "/",
        provenance=provenance,
        gpu_usage=gpu_usage,
        reuse=stored_reuse(inputs),
        sequential=stored_sequential(inputs) if spec.budget is not None else None,
    )
    return analysis, written
