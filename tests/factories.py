"""Builders tests share: EvalRuns, score cubes, and the operator's planning inputs.

Why this module exists: tests that hand-wrote whole EvalRun bodies repeated the apiVersion, kind
and a benchmark/models/judges skeleton, and drifted whenever the spec changed; six test modules
each built a ScoreCube their own way. Here each skeleton is written once; a test states only what
it is about::

    build_evalrun(models=[model_entry("qwen", parameters="27B")], storage={"uri": "s3://b/runs"})
    build_evalrun_yaml(name="quick", benchmark="bench.jsonl", models=[model_entry("tiny", runtime="llamacpp")])
    score_cube([[[8, 6], [9, 5]]], judges=("A", "B"))

Keyword arguments of :func:`build_evalrun` beyond the named ones are spec fields, spelt as in the
CRD (``cleanupPolicy="Delete"``, ``maxConcurrentModels=2``). Every call returns a fresh object.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import kopf
import numpy as np
import numpy.typing as npt
import yaml

from kubejury.records.placement import Placement
from kubejury.records.reuse import Refusal, ReuseDocument, StageReuse
from kubejury.records.sequential import ModelState, SequentialDocument
from kubejury.runtimes import recorded_runtime
from kubejury.stats.cube import ScoreCube
from kubejury_operator import vocabulary as vocab
from kubejury_operator import watched
from kubejury_operator.cluster_run import ClusterRun
from kubejury_operator.observed import DeploymentState, JobState, OomKill
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.tenancy import TenantPolicy
from kubejury_operator.validation import admission_message, validate_evalrun
from kubejury_operator.watched import Caches

API_VERSION = "kubejury.io/v1alpha1"
KIND = "EvalRun"

Entry = dict[str, Any]  # one model or judge, spelt as in the CRD


def model_entry(name: str, source: str | None = None, **fields: Any) -> Entry:
    """A model or judge entry; ``source`` defaults to ``hf://org/<name>`` unless the runtime is
    one that needs none (llamacpp's embedded model, an external endpoint)."""
    entry: Entry = {"name": name}
    if source is not None:
        entry["source"] = source
    elif _names_a_source(fields.get("runtime")):
        entry["source"] = f"hf://org/{name}"
    entry.update(fields)
    return entry


def _names_a_source(runtime: object) -> bool:
    """Whether an entry of ``runtime`` is given a default source: not when the runtime serves its
    embedded model without one, nor when it calls an external endpoint. No runtime (the default) and
    a name the registry does not know (a validation test's) get one."""
    known = recorded_runtime(runtime) if isinstance(runtime, str) else None
    return known is None or not (known.default_source_embedded or known.external)


DEFAULT_MODELS: tuple[Entry, ...] = (model_entry("qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B"),)
DEFAULT_JUDGES: tuple[Entry, ...] = (model_entry("judge", "hf://google/gemma-4-31b", parameters="31B"),)


def build_evalrun(
    name: str = "r",
    *,
    namespace: str | None = "evals",
    uid: str | None = None,
    generation: int | None = None,
    benchmark: str | dict[str, Any] = "s3://b/bench.jsonl",
    models: Sequence[Entry] = DEFAULT_MODELS,
    judges: Sequence[Entry] = DEFAULT_JUDGES,
    **spec: Any,
) -> dict[str, Any]:
    """An EvalRun object as the API server would hold it (``namespace=None`` leaves it out, as a
    file a user writes would). ``benchmark`` is its URI, or the whole benchmark object (with
    ``filters``). Other spec fields come as keyword arguments."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if generation is not None:
        metadata["generation"] = generation
    body: dict[str, Any] = {
        "benchmark": {"uri": benchmark} if isinstance(benchmark, str) else dict(benchmark),
        "models": [dict(m) for m in models],
        "judges": [dict(j) for j in judges],
    }
    body.update(spec)
    return copy.deepcopy({"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body})


def build_evalrun_yaml(name: str = "r", **fields: Any) -> str:
    """The same EvalRun as a YAML file (no namespace unless given)."""
    fields.setdefault("namespace", None)
    return yaml.safe_dump(build_evalrun(name, **fields), sort_keys=False)


def as_kopf_body(obj: dict[str, Any]) -> kopf.Body:
    """An object as kopf hands it to a handler: a read-only view over the raw JSON."""
    return kopf.Body(cast(kopf.RawBody, obj))  # RawBody is a TypedDict of the same JSON object


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> dict[str, str]:
    """A Node taint as ``kubectl get node -o json`` prints it (``value`` left out when ``None``)."""
    result = {"key": key, "effect": effect}
    if value is not None:
        result["value"] = value
    return result


def toleration(key: str, value: str | None = None, effect: str = "NoSchedule") -> dict[str, str]:
    """A Pod toleration of that taint: ``Equal`` with a value, ``Exists`` without one."""
    if value is None:
        return {"key": key, "operator": "Exists", "effect": effect}
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


GPU_TAINT = taint("nvidia.com/gpu", "present")
TEAM_B_TAINT = taint("dedicated", "team-b")
CONTROL_PLANE_TAINT = taint("node-role.kubernetes.io/control-plane")


Mutation = Callable[[dict[str, Any]], None]


def spec_set(path: str, value: Any) -> Mutation:
    """A mutation of an EvalRun body that sets ``spec.<path>`` (dots and ``[i]``, as in the field
    paths admission names)."""

    def mutate(body: dict[str, Any]) -> None:
        parts = path.replace("[", ".").replace("]", "").split(".")
        node: Any = body["spec"]
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[parts[-1]] = value

    return mutate


def chained(*mutations: Mutation) -> Mutation:
    """The mutations applied in turn."""

    def mutate(body: dict[str, Any]) -> None:
        for one in mutations:
            one(body)

    return mutate


#: (label, mutation of a run the chart admits, the field admission must name): what a tenant tried
#: with only the chart's ``evalrun-editor`` role (issues 28 and 29). Admission on the real control
#: plane (tests/e2e/test_tenant_refusals_e2e.py), ``kubejury validate`` and ``kubejury plan
#: --manifests`` must each refuse every one with the same text.
HOSTILE_SPECS: tuple[tuple[str, Mutation, str], ...] = (
    ("foreign-job-image", spec_set("jobs.image", "docker.io/attacker/anything:latest"), "spec.jobs.image"),
    (
        "trust-remote-code",
        spec_set("models[0].extraArgs", ["--trust-remote-code"]),
        "spec.models[0].extraArgs[0]",
    ),
    (
        "flag-with-leading-space",
        spec_set("models[0].extraArgs", [" --trust-remote-code"]),
        "spec.models[0].extraArgs[0]",
    ),
    (
        "flag-with-underscores",
        spec_set("models[0].extraArgs", ["--trust_remote_code"]),
        "spec.models[0].extraArgs[0]",
    ),
    ("flag-abbreviated", spec_set("models[0].extraArgs", ["--trust-remote"]), "spec.models[0].extraArgs[0]"),
    (
        "flags-from-a-file",
        spec_set("models[0].extraArgs", ["--config", "/tmp/f.yaml"]),
        "spec.models[0].extraArgs[0]",
    ),
    ("upper-case-pvc-source", spec_set("models[0].source", "PVC://victim-claim/m"), "spec.models[0].source"),
    (
        "other-teams-weights",
        spec_set("models[0].source", "s3://other-team-bucket/w"),
        "spec.models[0].source",
    ),
    (
        "other-teams-benchmark",
        spec_set("benchmark.uri", "s3://other-team-bucket/q.jsonl"),
        "spec.benchmark.uri",
    ),
    (
        "foreign-storage-endpoint",
        spec_set("storage.endpointUrl", "http://evil.example:9000"),
        "spec.storage.endpointUrl",
    ),
    (
        "other-teams-benchmark-naming-a-secret",
        chained(
            spec_set("storage.credentialsSecretRef", {"name": "kubejury-storage"}),
            spec_set("benchmark.uri", "s3://other-team-bucket/q.jsonl"),
        ),
        "spec.benchmark.uri",
    ),
    (
        "reserved-nodes",
        spec_set("models[0].nodeSelector", {"dedicated": "team-b"}),
        "spec.models[0].nodeSelector.dedicated",
    ),
)


#: A cluster whose chart lets team namespaces store under s3://evals/<namespace>, through one MinIO:
#: its settings ConfigMap as `kubectl get cm <release>-kubejury-settings -o yaml` prints it.
CLUSTER_SETTINGS: dict[str, str] = {
    "KUBEJURY_ALLOWED_STORAGE_ROOTS": '["s3://evals/{namespace}"]',
    "KUBEJURY_ALLOWED_JOB_IMAGES": '["ghcr.io/kubejury/kubejury:0.1.0"]',
    "KUBEJURY_ALLOWED_CLAIMS": '["kubejury-results"]',
    "KUBEJURY_ALLOWED_SERVER_FLAGS": "[]",
    "KUBEJURY_ALLOWED_STORAGE_ENDPOINTS": '["http://minio.minio:9000"]',
}


def benign_run() -> dict[str, Any]:
    """What a tenant of namespace team-a may run on that cluster: its own prefix, its own bucket."""
    return build_evalrun(
        "team-run",
        namespace="team-a",
        benchmark="s3://evals/team-a/questions.jsonl",
        storage={"uri": "s3://evals/team-a/runs", "endpointUrl": "http://minio.minio:9000"},
    )


def hostile_run(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    body = benign_run()
    mutate(body)
    return body


def write_yaml(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def cluster_settings_file(tmp_path: Path, data: dict[str, str] = CLUSTER_SETTINGS) -> Path:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kj-settings"}, "data": data}
    return write_yaml(tmp_path / "settings.yaml", configmap)


def admission_answer(body: dict[str, Any], env: dict[str, str]) -> str:
    """What the webhook answers for ``body`` on a cluster whose chart wrote ``env``."""
    return admission_message(validate_evalrun(body, policy=TenantPolicy.from_env(env)))


# ------------------------------------------------------------------------------ score cubes

QuestionCell = tuple[str, str, int]  # question id, domain, level
Scores = Sequence[Sequence[Sequence[float]]] | npt.NDArray[Any]  # models × questions × judges
Grid = Sequence[Sequence[float]] | npt.NDArray[Any]  # models × questions


def _optional_floats(values: Grid | None) -> npt.NDArray[np.float64] | None:
    return None if values is None else np.asarray(values, dtype=np.float64)


def score_cube(
    scores: Scores,
    *,
    series: str = "default",
    models: Sequence[str] | None = None,
    judges: Sequence[str] | None = None,
    questions: Sequence[QuestionCell] | None = None,
    has_record: Sequence[Sequence[bool]] | npt.NDArray[Any] | None = None,
    answer_chars: Grid | None = None,
    completion_tokens: Grid | None = None,
    latency_s: Grid | None = None,
) -> ScoreCube:
    """A ScoreCube from its ``scores`` (models × questions × judges, NaN for null or absent).

    Names default to ``m0, m1, …``, ``j0, j1, …`` and questions ``q0, q1, …`` of one domain ``d`` at
    level 1; ``questions`` are given in cube order ((level, domain, id), as tables.py sorts them),
    and the cube's domains and levels are the sorted distinct values. ``has_record`` defaults to
    "every model was asked every question". The per-answer arrays are models × questions."""
    array = np.asarray(scores, dtype=np.float64)
    n_models, n_questions, n_judges = array.shape
    cells = list(questions) if questions else [(f"q{i}", "d", 1) for i in range(n_questions)]
    domains = tuple(sorted({domain for _, domain, _ in cells}))
    levels = tuple(sorted({level for _, _, level in cells}))
    record = np.ones((n_models, n_questions), dtype=np.bool_) if has_record is None else has_record
    return ScoreCube(
        series=series,
        models=tuple(models) if models else tuple(f"m{i}" for i in range(n_models)),
        judges=tuple(judges) if judges else tuple(f"j{i}" for i in range(n_judges)),
        question_ids=tuple(qid for qid, _, _ in cells),
        domains=domains,
        levels=levels,
        question_domain=np.array([domains.index(domain) for _, domain, _ in cells], dtype=np.int64),
        question_level=np.array([levels.index(level) for _, _, level in cells], dtype=np.int64),
        scores=array,
        has_record=np.asarray(record, dtype=np.bool_),
        answer_chars=_optional_floats(answer_chars),
        completion_tokens=_optional_floats(completion_tokens),
        latency_s=_optional_floats(latency_s),
    )


def paired_cube(
    offsets: Sequence[float],
    *,
    per_cell: int = 8,
    domains: Sequence[str] = ("law", "med", "tax"),
    levels: Sequence[int] = (1, 2, 3),
    noise: float = 0.6,
    seed: int = 3,
) -> ScoreCube:
    """Models ``m0, m1, …`` that share every question's difficulty (so their differences are
    paired) and differ by ``offsets[k]`` points, with independent judge noise (three judges)."""
    rng = np.random.default_rng(seed)
    questions = [
        (f"{domain}-{level}-{k:03d}", domain, level)
        for level in levels
        for domain in domains
        for k in range(per_cell)
    ]
    base = rng.normal(7.0, 1.0, size=(1, len(questions), 1))
    jitter = rng.normal(0.0, noise, size=(len(offsets), len(questions), 3))
    scores = np.clip(base + jitter + np.asarray(offsets, dtype=np.float64)[:, None, None], 0.0, 10.0)
    return score_cube(scores, judges=("a", "b", "c"), questions=questions)


def score_cube_by_id(
    questions: Sequence[QuestionCell],
    models: Mapping[str, Mapping[str, Sequence[float] | None]],
    judges: Sequence[str] = ("a", "b", "c"),
    series: str = "default",
) -> ScoreCube:
    """A ScoreCube from each model's judge scores per question id (``None``: no record at all, so
    the question was not asked of that model); questions are put in cube order first."""
    ordered = sorted(questions, key=lambda cell: (cell[2], cell[1], cell[0]))
    scores = np.full((len(models), len(ordered), len(judges)), np.nan)
    has_record = np.zeros((len(models), len(ordered)), dtype=np.bool_)
    for m, rows in enumerate(models.values()):
        for q, (qid, _, _) in enumerate(ordered):
            row = rows.get(qid)
            if row is not None:
                scores[m, q] = row
                has_record[m, q] = True
    return score_cube(
        scores, series=series, models=tuple(models), judges=judges, questions=ordered, has_record=has_record
    )


# ------------------------------------------------------------------------------ the planner's inputs
# A run ``r`` in namespace ``ns`` as the reconcile planner sees it (its ClusterRun) and the world it
# observes (Deployments, Jobs, objects present), for tests of plan() phase by phase.

H100_PLACEMENT = Placement(
    runtime="vllm",
    quantization="fp8",
    tensor_parallel_size=1,
    node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    reason="Hopper: FP8 fits on 1 GPU",
    gpu_product="NVIDIA-H100-80GB-HBM3",
)
RUN_REF = vocab.RunRef(name="r", namespace="ns", uid="uid-1")
RUN_SERIES = ("primary", "t08")
JOB_DONE = JobState(succeeded=True)
JOB_RUNNING = JobState()
JOB_FAILED = JobState(failed=True, message="BackoffLimitExceeded")
BASE_PRESENT = frozenset({("ConfigMap", "kj-r-spec"), ("ServiceAccount", "kj-r-job")})


def endpoint(
    role: str,
    name: str,
    placement: Placement | None = H100_PLACEMENT,
    runtime: str = "vllm",
    key: str | None = None,
) -> vocab.Endpoint:
    """A model (``role="model"``) or judge served in the cluster, or hosted when ``runtime="openai"``."""
    hosted = runtime == "openai"
    return vocab.Endpoint(
        key=key or vocab.endpoint_key(role, name),
        name=name,
        source="https://api.example.com/v1" if hosted else f"hf://org/{name}",
        served_model=name,
        runtime=runtime,
        placement=None if hosted else placement,
    )


def build_cluster_run(
    models: Iterable[vocab.Endpoint] = (), judges: Iterable[vocab.Endpoint] = (), max_models: int = 2
) -> ClusterRun:
    """Run ``r``'s ClusterRun: models ``a``, ``b``, ``c`` and judge ``j`` unless given."""
    return ClusterRun(
        ref=RUN_REF,
        generation=1,
        body={"metadata": {"name": "r"}, "spec": {"x": 1}},
        models=tuple(models) or (endpoint("model", "a"), endpoint("model", "b"), endpoint("model", "c")),
        judges=tuple(judges) or (endpoint("judge", "j"),),
        series=RUN_SERIES,
        max_concurrent_models=max_models,
        settings=WorkloadSettings(),
        storage=vocab.JobStorage(uri="s3://b/runs"),
    )


def reusing_cluster_run(*sources: str, max_models: int = 3) -> ClusterRun:
    """Run ``r`` (models ``a``, ``b``, ``c``, judge ``j``) whose spec reuses ``sources``."""
    return replace(build_cluster_run(max_models=max_models), reuse_from=sources or ("run-a",))


def reuse_document(
    source: str = "run-a",
    *,
    models: Iterable[str] = (),
    judged: Mapping[str, Iterable[str]] | None = None,
    judges_complete: Iterable[str] = (),
    series: Iterable[str] = RUN_SERIES,
    answers: int = 4,
    refused: Iterable[Refusal] = (),
) -> ReuseDocument:
    """The document a reuse step writes after copying from ``source``: every answer of each of
    ``models`` (``answers`` per series), and for each judge of ``judged`` the judgments of the
    models named (all of their answers: they are its ``covered_models``); ``judges_complete``: judges
    with nothing left to judge. ``refused`` are put on the first stage."""
    models, series = tuple(models), tuple(series)
    stages: list[StageReuse] = []
    for name in series:
        for model in models:
            stages.append(StageReuse("generate", name, model, answers, {source: answers}, complete=True))
        for judge, covered in (judged or {}).items():
            covered = tuple(covered)
            stages.append(
                StageReuse(
                    "judge",
                    name,
                    judge,
                    answers * len(covered),
                    {source: answers * len(covered)} if covered else {},
                    complete=judge in tuple(judges_complete),
                    covered_models=covered,
                )
            )
    first = [replace(stages[0], refused=tuple(refused))] if stages else []
    return ReuseDocument(sources=(source,), stages=(*first, *stages[1:]))


def budgeted_cluster_run(max_models: int = 3, looks: int = 3) -> ClusterRun:
    """Run ``r`` (models ``a``, ``b``, ``c``, judge ``j``) with a sequential budget of ``looks`` looks."""
    return replace(build_cluster_run(max_models=max_models), budget_goal="leading-group", budget_looks=looks)


def sequential_document(
    looks_done: int,
    stopped: Mapping[str, int] | None = None,
    *,
    models: Iterable[str] = ("a", "b", "c"),
    prefix_sizes: Sequence[int] = (12, 24, 36),
) -> SequentialDocument:
    """The ``sequential.json`` a look Job stores after ``looks_done`` looks: each model of
    ``stopped`` stopped at the look given (out: below a), the others continue."""
    stopped = dict(stopped or {})
    states = [
        ModelState(
            model=m,
            status="stopped" if m in stopped else "continue",
            reason="out: below a" if m in stopped else "",
            look=stopped.get(m, looks_done),
            questions=prefix_sizes[stopped.get(m, looks_done) - 1] if stopped.get(m, looks_done) else 0,
        )
        for m in models
    ]
    return SequentialDocument(
        goal="leading-group",
        confidence=0.95,
        margin=0.0,
        seed=0,
        total_questions=prefix_sizes[-1],
        prefix_sizes=list(prefix_sizes),
        looks_done=looks_done,
        models=states,
    )


def look_generation_jobs(
    models: Iterable[str], look: int, state: JobState, series: Iterable[str] = RUN_SERIES
) -> dict[str, JobState]:
    """Observed generation Jobs of run ``r``'s look ``look``, one per model and series, all in ``state``."""
    return {vocab.look_generation_job_name("r", m, s, look): state for m in models for s in series}


def workload_of(key: str) -> str:
    """The Deployment (and Service) name of run ``r``'s server for endpoint ``key``."""
    return vocab.workload_name("r", key)


def ready_servers(*keys: str) -> dict[str, DeploymentState]:
    """Observed Deployments: each endpoint's server up with one ready replica."""
    return {workload_of(k): DeploymentState(replicas=1, ready_replicas=1) for k in keys}


def generation_jobs(
    models: Iterable[str], state: JobState, series: Iterable[str] = RUN_SERIES
) -> dict[str, JobState]:
    """Observed generation Jobs of run ``r``, one per model and series, all in ``state``."""
    return {vocab.generation_job_name("r", m, s): state for m in models for s in series}


def judge_jobs(
    judges: Iterable[str],
    state: JobState,
    series: Iterable[str] = RUN_SERIES,
    round_: int = 1,
    complete: int = 3,
) -> dict[str, JobState]:
    """Observed judge Jobs of run ``r`` (round ``round_``), each having judged ``complete`` models."""
    return {
        vocab.judge_job_name("r", j, s, round_): replace(state, models_complete=complete)
        for j in judges
        for s in series
    }


def oom_killed(
    limit: str | None = "64Mi", request: str | None = "32Mi", attempt_of: JobState = JOB_FAILED
) -> JobState:
    """A Job failed for good whose Pod's container ``stage`` was OOM-killed at ``limit`` (exit 137)."""
    kill = OomKill(pod="p-0", container="stage", exit_code=137, memory_limit=limit, memory_request=request)
    return replace(attempt_of, failed=True, oom=kill)


def job_pod(
    job: str,
    reason: str = "OOMKilled",
    limit: str | None = "64Mi",
    *,
    last_state: bool = False,
    finished_at: str = "2026-11-30T02:00:00Z",
    name: str | None = None,
) -> dict[str, Any]:
    """A failed Pod of Job ``job`` in namespace ``evals``: its container ``stage`` terminated with
    ``reason`` (in ``state``, or in ``lastState`` when ``last_state``), exit code 137 for an OOM kill."""
    terminated = {
        "reason": reason,
        "exitCode": 137 if reason == "OOMKilled" else 1,
        "finishedAt": finished_at,
    }
    resources: dict[str, Any] = {"requests": {"memory": "32Mi"}}
    if limit is not None:
        resources["limits"] = {"memory": limit}
    status = (
        {"lastState": {"terminated": terminated}, "state": {"running": {}}}
        if last_state
        else {"state": {"terminated": terminated}}
    )
    labels = {**vocab.labels("r", "generate"), "batch.kubernetes.io/job-name": job}
    return {
        "kind": "Pod",
        "metadata": {"name": name or f"{job}-x", "namespace": "evals", "labels": labels},
        "spec": {"containers": [{"name": "stage", "resources": resources}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "stage", **status}]},
    }


def present_for(*keys: str) -> frozenset[tuple[str, str]]:
    """Objects present: the run's own ConfigMap and ServiceAccount plus a Service per endpoint."""
    return BASE_PRESENT | {("Service", workload_of(k)) for k in keys}


# --------------------------------------------------------------------------- watch-fed caches


def watched_caches(
    children: Iterable[Mapping[str, Any]] = (), nodes: Iterable[Mapping[str, Any]] = ()
) -> Caches:
    """The caches as kopf's indexes would hold ``children`` (each under its run label) and ``nodes``."""
    indexes: dict[str, dict[Any, list[Any]]] = {name: {} for name in watched.CHILD_INDEXES.values()}
    for child in children:
        entry = watched.child_entry(child)
        assert entry is not None, f"{child.get('kind')} {child.get('metadata')} is not a child of a run"
        for key, part in entry.items():
            indexes[watched.CHILD_INDEXES[str(child["kind"])]].setdefault(key, []).append(part)
    indexes[watched.NODE_INDEX] = {None: [watched.node_entry(n)[None] for n in nodes]} if nodes else {}
    caches = Caches.from_handler_kwargs(indexes)
    assert caches is not None
    return caches


# --------------------------------------------------------------------------- stored runs


def store_finished_run(spec_path: Path, root: Path, score: float = 5.0, *, jsonl: bool = False) -> None:
    """Store under ``root``, with the engine's own writers, what a finished ``kubejury run`` of the
    EvalRun at ``spec_path`` leaves for a later run to reuse — without any server: the spec, each
    stage's fingerprint document, an answer of every model to every question of every series
    (``question_sha256`` set) and every judge's judgment of each (``score``; ``input_sha256`` of the
    answer as anonymized), every record carrying its stage's digest. Records go into Parquet shards,
    as the stages write them, or with ``jsonl`` into the JSONL shards of a run made before issue 26."""
    from kubejury import pipeline
    from kubejury.files.shards import write_records
    from kubejury.judging.anonymize import Scrubber
    from kubejury.records.results import AnswerRecord, JudgmentRecord, question_sha256
    from kubejury.stages.generate import STAGE as GENERATE
    from kubejury.stages.judge import STAGE as JUDGE
    from kubejury.stages.judge import build_items

    inputs = pipeline.load_inputs(str(spec_path), out=str(root))
    pipeline.record_spec(inputs)
    spec, storage, layout = inputs.evalrun.spec, inputs.storage, inputs.layout
    questions = inputs.benchmark.questions

    def store(prefix: str, records: Sequence[AnswerRecord] | Sequence[JudgmentRecord]) -> None:
        if jsonl:
            storage.write_jsonl_shard(prefix, [r.to_json() for r in records])
        else:
            write_records(storage, prefix, records)

    for series in spec.series:
        answers: dict[str, list[AnswerRecord]] = {}
        for model in spec.models:
            fingerprint = inputs.fingerprint(GENERATE, series.name, model.name)
            storage.write_json(
                layout.fingerprint_key(series.name, GENERATE, model.name), fingerprint.to_json()
            )
            answers[model.name] = [
                AnswerRecord(
                    question_id=q.id,
                    model=model.name,
                    series=series.name,
                    answer=f"Answer {i} to question {q.id}.",
                    finish_reason="stop",
                    fingerprint=fingerprint.digest,
                    question_sha256=question_sha256(q.question),
                )
                for i, q in enumerate(questions)
            ]
            store(layout.answers_prefix(series.name, model.name), answers[model.name])
        scrubber = Scrubber([m.name for m in spec.models])
        items, _, _ = build_items(questions, answers, seed=spec.scoring.seed, scrubber=scrubber)
        for judge in spec.judges:
            fingerprint = inputs.fingerprint(JUDGE, series.name, judge.name)
            storage.write_json(layout.fingerprint_key(series.name, JUDGE, judge.name), fingerprint.to_json())
            judgments = [
                JudgmentRecord(
                    question_id=item.question.id,
                    model=item.model,
                    series=series.name,
                    judge=judge.name,
                    answer_id=item.answer_id,
                    score=score,
                    fingerprint=fingerprint.digest,
                    input_sha256=item.input_sha256,
                )
                for item in items
            ]
            store(layout.judgments_prefix(series.name, judge.name), judgments)


# --------------------------------------------------------------------------- Kueue (issue 25)

QUEUE = "gpu-queue"
CLUSTER_QUEUE = "gpus"


def queued_cluster_run(queue: str = QUEUE, **changes: Any) -> ClusterRun:
    """Run ``r`` (models ``a``, ``b``, ``c``, judge ``j``) admitted through Kueue's LocalQueue ``queue``;
    ``changes`` are :class:`~kubejury_operator.settings.WorkloadSettings` fields."""
    run = build_cluster_run()
    return replace(run, queue_name=queue, settings=replace(run.settings, **changes))


def suspended(since: str, state: JobState = JOB_RUNNING) -> JobState:
    """A Job Kueue keeps suspended (waiting for admission) since ``since``."""
    return replace(state, suspended_since=since)


def kueue_server_pod(
    key: str,
    name: str | None = None,
    *,
    gated: bool = False,
    scheduled_at: str | None = None,
    ready_at: str | None = None,
    created: str = "2026-11-30T01:00:00Z",
) -> dict[str, Any]:
    """A model-server Pod of run ``r`` as Kueue's deployment integration makes it: labelled
    ``kueue.x-k8s.io/managed``, held by the admission gate (``gated``), or scheduled at
    ``scheduled_at`` and Ready at ``ready_at``."""
    conditions: list[dict[str, Any]] = []
    if gated:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"})
    elif scheduled_at is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at})
    if ready_at is not None:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": ready_at})
    labels = {
        vocab.LABEL_MANAGED_BY: vocab.MANAGED_BY,
        vocab.LABEL_RUN: "r",
        vocab.LABEL_COMPONENT: "server",
        vocab.LABEL_ENDPOINT: key,
        vocab.LABEL_KUEUE_MANAGED: "true",
    }
    return {
        "kind": "Pod",
        "metadata": {
            "name": name or f"{workload_of(key)}-0",
            "namespace": "ns",
            "labels": labels,
            "creationTimestamp": created,
        },
        "status": {"phase": "Pending" if gated else "Running", "conditions": conditions},
    }


def kueue_workload(
    owner_kind: str,
    owner: str,
    *,
    reserved: bool = False,
    reason: str = "Pending",
    message: str = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
    "in flavor h100, 1 more needed",
    requests: Mapping[str, str] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """A Kueue Workload owned by the Job or Pod ``owner``: holding quota (``reserved``) or pending."""
    quota = {"type": "QuotaReserved", "status": "True" if reserved else "False", "reason": reason}
    if not reserved:
        quota["message"] = message
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name or f"{owner_kind.lower()}-{owner}-1a2b3",
            "namespace": "ns",
            "ownerReferences": [{"kind": owner_kind, "name": owner, "controller": True}],
        },
        "spec": {"queueName": QUEUE},
        "status": {
            "conditions": [quota],
            "resourceRequests": [
                {"name": "main", "resources": dict(requests or {"cpu": "2", "nvidia.com/gpu": "1"})}
            ],
        },
    }


def local_queue(name: str = QUEUE, cluster_queue: str = CLUSTER_QUEUE) -> dict[str, Any]:
    """A Kueue LocalQueue in namespace ``ns`` pointing at ``cluster_queue``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"clusterQueue": cluster_queue},
    }


def cluster_queue(
    name: str = CLUSTER_QUEUE, gpus: int = 8, in_use: int = 8, flavour: str = "h100"
) -> dict[str, Any]:
    """A ClusterQueue with ``gpus`` of flavour ``flavour`` (and CPU in flavour ``default``), ``in_use``
    of them reserved."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "64"}]}],
                },
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavour,
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}],
                        }
                    ],
                },
            ]
        },
        "status": {
            "flavorsReservation": [
                {"name": flavour, "resources": [{"name": "nvidia.com/gpu", "total": str(in_use)}]},
                {"name": "default", "resources": [{"name": "cpu", "total": "10"}]},
            ]
        },
    }
