"""Before a run: tokens, time and GPU-hours per model and stage, on the user's nodes.

Why this module exists: GPU time is the scarce resource of a shared cluster, and an EvalRun says
nothing about it until it has spent it. ``kubejury plan --estimate`` answers before the run, from
the spec, the placements (:mod:`kubejury.placement.planner`) and the benchmark's size:

* **tokens** per model and stage — generation: questions × series prompts (question, system
  prompt, chat template) and answers of the expected length (capped by each series' ``maxTokens``);
  judging: questions × series × models prompts (the judging template with question, reference
  answer and the answer) and verdicts;
* **time** of each stage on the server placement chose (:mod:`kubejury.placement.server_model`),
  from the roofline (:mod:`kubejury.placement.roofline`) and the GPU's datasheet figures
  (:mod:`kubejury.placement.gpu_specs`), with token counts from :mod:`kubejury.placement.workload`;
* **GPU-hours** busy (stage time × GPUs) and held (model servers' whole life × GPUs, bring-up
  and idle waits included), and the **wall time** of the run, from a schedule that follows the
  operator's: at most ``maxConcurrentModels`` evaluated models generating at once, in bring-up
  order, each next one brought up during the tail of the one whose slot it takes;
  a judge's server up only while it has answers to judge (brought up when a model's answers
  arrive, scaled to zero when none wait, as the operator does); a model that is also a judge
  (``sameAs``) served once, outside the budget.

With ``prefetch`` (a model cache claim with ``modelCache.prefetch``: the operator downloads weights
in a CPU-only Job before it creates a server), a server's GPUs are held from its server start only
(:data:`~kubejury.placement.server_model.STARTUP_FIXED_SECONDS`; reading the weights from the cache is
assumed to be part of it), and its download (the weights at
:data:`~kubejury.placement.server_model.WEIGHT_LOAD_BYTES_PER_SECOND`, each download at that rate on
its own) runs on CPU before. The operator starts the downloads of the models holding a slot and of
the next ``maxConcurrentModels`` in bring-up order, so a download overlaps earlier models' serving
from the second wave on; the first wave's downloads, and any that end after their slot frees, delay
the server's start (wall time) but hold no GPU.

With :class:`~kubejury.placement.remaining.RemainingWork` (a run with ``spec.reuse.from``), only
what earlier runs' copies leave is estimated: each stage's requests and tokens scaled by the share
left, no server for a model whose every answer is copied (its answers are there from the start),
and a judge's server up only for the judgments still to make.

With ``spec.budget`` (sequential mode), :func:`sequential_remaining` turns an assumed share of
questions used into a :class:`~kubejury.placement.remaining.RemainingWork`, so the same estimate
gives the expected saving; the share and where it comes from are reported (:data:`SEQUENTIAL_SHARES`).

It also decides the order evaluated models are brought up in (:func:`bringup_plan`), for the
operator and for ``--order``. Pure: no I/O, no clock. Every assumption is a named constant and is
reported with the estimate.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kubejury.config.spec import EvalRunSpec, ModelSpec
from kubejury.judging.judge_prompt import JudgePrompt
from kubejury.placement.remaining import RemainingWork
from kubejury.placement.roofline import DEFAULT_EFFICIENCY, Efficiency, stage_time
from kubejury.placement.server_model import (
    STARTUP_FIXED_SECONDS,
    WEIGHT_LOAD_BYTES_PER_SECOND,
    ServerFacts,
    server_facts,
    startup_seconds,
)
from kubejury.placement.workload import (
    CHAT_TEMPLATE_TOKENS,
    DEFAULT_QUESTION_TOKENS,
    DEFAULT_REFERENCE_TOKENS,
    Workload,
    chars_per_token,
    tokens_of,
)
from kubejury.records.placement import Placement
from kubejury.runtimes import judge_placement, judge_shares_server
from kubejury.stats.sequential import DEFAULT_MARGIN as SEQUENTIAL_DEFAULT_MARGIN

Stage = Literal["generation", "judging"]


# ----------------------------------------------------------------------------------------------
# Stages
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageEstimate:
    """One model's generation, or one judge's judging: tokens, and time where it can be known."""

    name: str
    stage: Stage
    requests: int
    prompt_tokens: int
    output_tokens: int
    gpus: int
    device: str | None
    precision: str | None
    seconds: float | None
    batch: int | None = None
    bound: str | None = None
    note: str = ""

    @property
    def gpu_hours(self) -> float | None:
        return None if self.seconds is None else self.seconds * self.gpus / 3600

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "gpus": self.gpus,
            "device": self.device,
            "precision": self.precision,
            "hours": None if self.seconds is None else round(self.seconds / 3600, 3),
            "gpu_hours": None if self.gpu_hours is None else round(self.gpu_hours, 3),
            "batch": self.batch,
            "bound": self.bound,
            "note": self.note,
        }


def _stage(
    name: str,
    stage: Stage,
    facts: ServerFacts,
    *,
    requests: int,
    prompt_tokens: float,
    output_tokens: float,
    in_flight: int,
    efficiency: Efficiency,
    cached_prompt_tokens: float = 0.0,
) -> StageEstimate:
    if facts.server is None:
        return StageEstimate(
            name,
            stage,
            requests,
            round(prompt_tokens),
            round(output_tokens),
            facts.gpus,
            None,
            None,
            None,
            note=facts.note,
        )
    timing = stage_time(
        facts.server,
        requests=requests,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        in_flight=in_flight,
        cached_prompt_tokens=cached_prompt_tokens,
        efficiency=efficiency,
    )
    note = "CPU node: rough (assumed 50 GB/s)" if facts.gpus == 0 else ""
    return StageEstimate(
        name,
        stage,
        requests,
        round(prompt_tokens),
        round(output_tokens),
        facts.gpus,
        facts.device,
        facts.precision,
        timing.seconds,
        batch=timing.step.batch,
        bound=timing.step.bound,
        note=note,
    )


def _reused_stage(name: str, stage: Stage, facts: ServerFacts, note: str) -> StageEstimate:
    """A stage every record of which is copied from earlier runs: nothing runs, no GPU time."""
    return StageEstimate(name, stage, 0, 0, 0, facts.gpus, facts.device, facts.precision, 0.0, note=note)


def _reuse_note(left: int, full: int, noun: str) -> str:
    return f"reuse: {full - left:,} of {full:,} {noun} copied" if left < full else ""


def _placement_of(placements: Mapping[str, Placement], entry: ModelSpec, judge: bool) -> Placement | None:
    if judge:
        return judge_placement(placements, entry.name)
    return placements.get(entry.name)


def _generation_in_flight(spec: EvalRunSpec) -> int:
    """Requests in flight per model server while generating: every series' Jobs (and their shards)
    run at once, each keeping ``requestsPerEndpoint`` outstanding."""
    return spec.concurrency.requests_per_endpoint * spec.jobs.generation_shards * len(spec.series)


@dataclass(frozen=True)
class _Stages:
    """Every stage of a run, the servers they run on and how judges map onto servers."""

    stages: tuple[StageEstimate, ...]
    facts: Mapping[str, ServerFacts]  # "model:<name>" / "judge:<name>" → the server
    judge_server: Mapping[str, str]  # judge name → its server's key
    assumptions: Mapping[str, Any]
    remaining: RemainingWork | None = None  # what reuse leaves (None: everything)

    def generates(self, model: str) -> bool:
        """The model has answers to generate (reuse did not copy all of them)."""
        return self.remaining is None or self.remaining.answers_left(model) > 0

    def judging_weights(self, judge: str, models: Sequence[str]) -> dict[str, float]:
        """The share of the judge's stage time spent on each model's answers (summing to 1, or
        empty when nothing is left to judge)."""
        if self.remaining is None:
            return {m: 1 / len(models) for m in models} if models else {}
        left = {m: self.remaining.judgments_left(judge, m) for m in models}
        total = sum(left.values())
        return {m: n / total for m, n in left.items() if n > 0} if total else {}

    def seconds(self, stage: Stage) -> dict[str, float]:
        return {s.name: s.seconds or 0.0 for s in self.stages if s.stage == stage}


def _stages(
    spec: EvalRunSpec,
    placements: Mapping[str, Placement],
    workload: Workload,
    efficiency: Efficiency,
    remaining: RemainingWork | None = None,
) -> _Stages:
    """Tokens and time of every model's generation and every judge's judging (of what reuse
    leaves, with ``remaining``)."""
    language = spec.judging.language or spec.benchmark.language
    q = workload.questions
    series = spec.series
    answer_per_series = [min(workload.answer_tokens, s.max_tokens) for s in series]

    # --- generation, per evaluated model (the same tokens for each) ---------------------------
    gen_prompt = sum(
        q * (workload.question_tokens + tokens_of(s.system_prompt or "", language) + CHAT_TEMPLATE_TOKENS)
        for s in series
    )
    gen_output = q * sum(answer_per_series)
    gen_in_flight = _generation_in_flight(spec)
    facts: dict[str, ServerFacts] = {}
    stages: list[StageEstimate] = []
    for model in spec.models:
        placement = _placement_of(placements, model, judge=False)
        f = server_facts(model, placement) if placement else ServerFacts(None, note="no placement")
        facts[f"model:{model.name}"] = f
        share = 1.0 if remaining is None else remaining.generation_share(model.name)
        note = (
            ""
            if remaining is None
            else _reuse_note(remaining.answers_left(model.name), remaining.per_model, "answers")
        )
        if share == 0.0:
            stages.append(_reused_stage(model.name, "generation", f, note))
            continue
        stage = _stage(
            model.name,
            "generation",
            f,
            requests=round(q * len(series) * share),
            prompt_tokens=gen_prompt * share,
            output_tokens=gen_output * share,
            in_flight=gen_in_flight,
            efficiency=efficiency,
        )
        stages.append(_with_note(stage, note))

    # --- judging, per judge --------------------------------------------------------------------
    rendered = JudgePrompt.create(spec.judging.prompt_template, language=language).render("", "", "")
    template_tokens = tokens_of(rendered, language)
    # the template's opening, before the question, is the same in every request: served from the
    # prefix cache (vLLM's automatic prefix caching; llama.cpp's per-slot prompt cache)
    shared_prefix_tokens = tokens_of(rendered.split("<<<", 1)[0], language)
    judge_requests = q * len(series) * len(spec.models)
    mean_answer = sum(answer_per_series) / len(answer_per_series)
    judge_prompt = judge_requests * (
        template_tokens
        + workload.question_tokens
        + workload.reference_tokens
        + mean_answer
        + CHAT_TEMPLATE_TOKENS
    )
    judge_output = judge_requests * min(workload.verdict_tokens, spec.judging.max_tokens)
    judge_in_flight = spec.concurrency.requests_per_endpoint * len(series)
    by_name = {m.name: m for m in spec.models}
    judge_server: dict[str, str] = {}
    for judge in spec.judges:
        twin = by_name.get(judge.same_as) if judge.same_as else None
        key = (
            f"model:{twin.name}"
            if twin is not None and judge_shares_server(twin, judge)
            else f"judge:{judge.name}"
        )
        judge_server[judge.name] = key
        placement = _placement_of(placements, judge, judge=True)
        if key.startswith("judge:"):
            facts[key] = (
                server_facts(judge, placement) if placement else ServerFacts(None, note="no placement")
            )
        share, note = _judging_share(judge.name, [m.name for m in spec.models], remaining)
        if share == 0.0:
            stages.append(_reused_stage(judge.name, "judging", facts[key], note))
            continue
        stage = _stage(
            judge.name,
            "judging",
            facts[key],
            requests=round(judge_requests * share),
            prompt_tokens=judge_prompt * share,
            output_tokens=judge_output * share,
            in_flight=judge_in_flight,
            efficiency=efficiency,
            cached_prompt_tokens=judge_requests * share * shared_prefix_tokens,
        )
        stages.append(_with_note(stage, note))
    return _Stages(
        stages=tuple(stages),
        facts=facts,
        judge_server=judge_server,
        remaining=remaining,
        assumptions={
            "decode_bandwidth_efficiency": efficiency.bandwidth,
            "compute_efficiency": efficiency.compute,
            "chars_per_token": chars_per_token(language),
            "chat_template_tokens": CHAT_TEMPLATE_TOKENS,
            "judge_template_tokens": template_tokens,
            "judge_template_cached_prefix_tokens": shared_prefix_tokens,
            "generation_in_flight": gen_in_flight,
            "judging_in_flight": judge_in_flight,
            "startup": f"{STARTUP_FIXED_SECONDS:g} s + weights at {WEIGHT_LOAD_BYTES_PER_SECOND / 1e9:g} GB/s",
            "not_modelled": "aggregation Job; retries; node capacity beyond placement; hosted (openai) endpoints' time",
        },
    )


def _judging_share(judge: str, models: Sequence[str], remaining: RemainingWork | None) -> tuple[float, str]:
    """The share of the judge's judgments still to make over every model, and the stage's note."""
    if remaining is None or not models:
        return 1.0, ""
    left = sum(remaining.judgments_left(judge, m) for m in models)
    full = remaining.per_model * len(models)
    share = 1.0 if full <= 0 else left / full
    return share, _reuse_note(left, full, "judgments")


def _with_note(stage: StageEstimate, note: str) -> StageEstimate:
    if not note:
        return stage
    return replace(stage, note=f"{stage.note}; {note}" if stage.note else note)


# ----------------------------------------------------------------------------------------------
# The schedule
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerWindow:
    """One model server's life in the schedule (seconds from the run's start)."""

    name: str
    gpus: int
    start: float
    ready: float
    end: float

    @property
    def held_gpu_hours(self) -> float:
        return (self.end - self.start) * self.gpus / 3600

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "start_hours": round(self.start / 3600, 3),
            "ready_hours": round(self.ready / 3600, 3),
            "end_hours": round(self.end / 3600, 3),
            "held_gpu_hours": round(self.held_gpu_hours, 3),
        }


Order = Literal["spec", "longest-first"]


def bringup_order(names: Sequence[str], seconds: Mapping[str, float], order: Order) -> list[str]:
    """The order budgeted models' servers come up: as in the spec, or the longest (by estimated
    bring-up + generation time) first, spec order breaking ties. Longest-first keeps a long model
    from starting last and running alone while the other slots sit empty."""
    if order == "spec":
        return list(names)
    position = {name: i for i, name in enumerate(names)}
    return sorted(names, key=lambda n: (-seconds.get(n, 0.0), position[n]))


@dataclass(frozen=True)
class RunEstimate:
    """The estimate of one run: stages, the schedule's server windows and the totals."""

    workload: Workload
    stages: tuple[StageEstimate, ...]
    servers: tuple[ServerWindow, ...]
    order: tuple[str, ...]
    max_concurrent_models: int
    makespan_seconds: float
    answers_seconds: float = 0.0  # when the last model has answered every question
    assumptions: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_hours_busy(self) -> float:
        return sum(s.gpu_hours or 0.0 for s in self.stages)

    @property
    def gpu_hours_held(self) -> float:
        return sum(w.held_gpu_hours for w in self.servers)

    @property
    def not_estimated(self) -> list[str]:
        return [f"{s.name} ({s.stage})" for s in self.stages if s.seconds is None]

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload.to_json(),
            "stages": [s.to_json() for s in self.stages],
            "servers": [w.to_json() for w in self.servers],
            "bringup_order": list(self.order),
            "max_concurrent_models": self.max_concurrent_models,
            "totals": {
                "prompt_tokens": sum(s.prompt_tokens for s in self.stages),
                "output_tokens": sum(s.output_tokens for s in self.stages),
                "gpu_hours_busy": round(self.gpu_hours_busy, 3),
                "gpu_hours_held": round(self.gpu_hours_held, 3),
                "wall_hours": round(self.makespan_seconds / 3600, 3),
                "answers_done_hours": round(self.answers_seconds / 3600, 3),
            },
            "not_estimated": self.not_estimated,
            "assumptions": dict(self.assumptions),
        }


def _judging_windows(
    startup: float,
    jobs: Sequence[tuple[float, float]],
    generating_until: float | None,
    earliest: float = 0.0,
) -> list[tuple[float, float, float]]:
    """(start, ready, end) of each time a judge's server is up, as the operator runs it: brought up
    one bring-up ahead of the first answers it will judge (so it is Ready when they arrive),
    judging rounds back to back while answers keep arriving, kept up when the next answers arrive
    within a bring-up, else scaled to zero and brought up again ahead of them. A server that also
    generates (``sameAs``) is up from the start until its own generation ends
    (``generating_until``) and judges what waits then."""
    windows: list[tuple[float, float, float]] = []
    current: list[float] | None = None  # [start, ready, busy until]
    if generating_until is not None:
        current = [earliest, earliest + startup, generating_until]
    for arrival, duration in sorted(jobs):
        if current is not None and arrival - startup > current[2]:
            windows.append((current[0], current[1], current[2]))
            current = None
        if current is None:
            start = max(arrival - startup, windows[-1][2] if windows else 0.0, earliest)
            current = [start, start + startup, start + startup]
        current[2] = max(current[2], arrival) + duration
    if current is not None:
        windows.append((current[0], current[1], current[2]))
    return windows


@dataclass(frozen=True)
class _Schedule:
    order: tuple[str, ...]
    windows: tuple[ServerWindow, ...]
    makespan: float
    answers: float


def _budgeted(spec: EvalRunSpec, st: _Stages) -> list[str]:
    """Evaluated models whose servers count against ``maxConcurrentModels``, in spec order:
    deployed ones with answers to generate that do not also serve a judge."""
    shared = {key for key in st.judge_server.values() if key.startswith("model:")}
    return [
        m.name
        for m in spec.models
        if st.facts[f"model:{m.name}"].server is not None
        and f"model:{m.name}" not in shared
        and st.generates(m.name)
    ]


def download_seconds(facts: ServerFacts) -> float:
    """A prefetch Job's download of the server's weights (at :data:`WEIGHT_LOAD_BYTES_PER_SECOND`)."""
    return facts.weight_bytes / WEIGHT_LOAD_BYTES_PER_SECOND


def _gpu_bringup(facts: ServerFacts, prefetch: bool) -> float:
    """Bring-up held on GPUs: the server start alone when the weights are prefetched, else the whole
    :func:`~kubejury.placement.server_model.startup_seconds` (download and load included)."""
    return STARTUP_FIXED_SECONDS if prefetch else startup_seconds(facts)


def _schedule(spec: EvalRunSpec, st: _Stages, order: Order, prefetch: bool = False) -> _Schedule:
    """When each server comes up, is ready and goes down, following the operator's rules (with
    ``prefetch``: downloads first, on CPU, as the module docstring says)."""
    gen_seconds = st.seconds("generation")
    judge_seconds = st.seconds("judging")
    facts = st.facts
    budgeted = _budgeted(spec, st)
    wanted = {n: startup_seconds(facts[f"model:{n}"]) + gen_seconds[n] for n in budgeted}
    sequence = bringup_order(budgeted, wanted, order)
    slots: list[tuple[float, float]] = [(0.0, 0.0)] * min(
        max(1, spec.max_concurrent_models), max(1, len(sequence))
    )
    heapq.heapify(slots)
    windows: list[ServerWindow] = []
    answers_at: dict[str, float] = {m.name: 0.0 for m in spec.models}
    wanted_at: list[float] = []  # when each model in sequence took its slot (its server was wanted)
    lookahead = max(1, spec.max_concurrent_models)
    for position, name in enumerate(sequence):
        # bring-up overlaps the tail of the model whose slot it takes (the operator starts it one
        # bring-up before that model's generation ends), so it is Ready as the slot frees
        # (never before that model is generating: the operator needs its progress rate)
        bringup = _gpu_bringup(facts[f"model:{name}"], prefetch)
        free_at, holder_ready = heapq.heappop(slots)
        start = max(0.0, holder_ready, free_at - bringup)
        wanted_at.append(start)
        if prefetch:  # the server is created once its download, begun a lookahead earlier, is done
            began = wanted_at[position - lookahead] if position >= len(slots) + lookahead else 0.0
            start = max(start, began + download_seconds(facts[f"model:{name}"]))
        ready = start + bringup
        end = ready + gen_seconds[name]
        heapq.heappush(slots, (end, ready))
        answers_at[name] = end
        windows.append(ServerWindow(name, facts[f"model:{name}"].gpus, start, ready, end))
    # servers outside the budget: judges' (and the models they also are)
    deployed = {key for key, f in facts.items() if f.server is not None}
    own_generation_end: dict[str, float] = {}
    for key in sorted({k for k in st.judge_server.values() if k.startswith("model:") and k in deployed}):
        name = key.split(":", 1)[1]
        if st.generates(name):  # else its answers were copied: there from the start
            first = _gpu_bringup(facts[key], prefetch) + (download_seconds(facts[key]) if prefetch else 0.0)
            answers_at[name] = own_generation_end[key] = first + gen_seconds[name]
    models = [m.name for m in spec.models]
    for key in sorted({k for k in st.judge_server.values() if k in deployed}):
        jobs = [
            (answers_at[model], judge_seconds[j.name] * weight)
            for j in spec.judges
            if st.judge_server[j.name] == key
            for model, weight in st.judging_weights(j.name, models).items()
        ]
        name = key.split(":", 1)[1]
        earliest = download_seconds(facts[key]) if prefetch else 0.0  # judges' downloads begin at once
        for start, ready, end in _judging_windows(
            _gpu_bringup(facts[key], prefetch), jobs, own_generation_end.get(key), earliest
        ):
            windows.append(ServerWindow(name, facts[key].gpus, start, ready, end))
    return _Schedule(
        order=tuple(sequence),
        windows=tuple(windows),
        makespan=max([w.end for w in windows] + [0.0]),
        answers=max(answers_at.values(), default=0.0),
    )


def estimate_run(
    spec: EvalRunSpec,
    placements: Mapping[str, Placement],
    workload: Workload,
    *,
    order: Order = "spec",
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    remaining: RemainingWork | None = None,
    prefetch: bool = False,
) -> RunEstimate:
    """Tokens, time and GPU-hours of a run, or of what ``remaining`` says reuse leaves of it, with
    the weights downloaded before the servers when ``prefetch`` (see the module docstring)."""
    st = _stages(spec, placements, workload, efficiency, remaining)
    schedule = _schedule(spec, st, order, prefetch)
    return RunEstimate(
        workload=workload,
        stages=st.stages,
        servers=schedule.windows,
        order=schedule.order,
        max_concurrent_models=max(1, spec.max_concurrent_models),
        makespan_seconds=schedule.makespan,
        answers_seconds=schedule.answers,
        assumptions={**st.assumptions, "bringup_order": order, "prefetch": _prefetch_assumption(prefetch)},
    )


def _prefetch_assumption(prefetch: bool) -> str:
    if not prefetch:
        return "none: each server downloads its weights while holding its GPUs (bring-up = startup)"
    return (
        f"weights downloaded on CPU before the server at {WEIGHT_LOAD_BYTES_PER_SECOND / 1e9:g} GB/s per "
        f"download; GPUs held from the server start, {STARTUP_FIXED_SECONDS:g} s; downloads begin "
        "maxConcurrentModels models ahead, so only the first wave (and a download outlasting its slot) waits"
    )


#: The nominal workload the operator orders bring-up by: only the models' relative times matter.
NOMINAL_WORKLOAD = Workload(
    questions=1000,
    question_tokens=DEFAULT_QUESTION_TOKENS,
    reference_tokens=DEFAULT_REFERENCE_TOKENS,
    source="nominal (for ordering only)",
)


def longest_first(
    spec: EvalRunSpec, placements: Mapping[str, Placement], workload: Workload = NOMINAL_WORKLOAD
) -> list[str]:
    """Evaluated models' names, the longest to bring up and generate first (spec order otherwise).

    Models without an estimate (no size, hosted, unschedulable) count as zero and keep their spec
    order after the others; models that serve a judge too are ordered like the others (the
    operator does not count them against its budget).
    """
    st = _stages(spec, placements, workload, DEFAULT_EFFICIENCY)
    gen_seconds = st.seconds("generation")
    times = {
        m.name: startup_seconds(st.facts[f"model:{m.name}"]) + gen_seconds[m.name]
        if st.facts[f"model:{m.name}"].server is not None
        else 0.0
        for m in spec.models
    }
    return bringup_order([m.name for m in spec.models], times, "longest-first")


def bringup_plan(
    spec: EvalRunSpec, placements: Mapping[str, Placement], workload: Workload = NOMINAL_WORKLOAD
) -> tuple[Order, list[str]]:
    """The bring-up order the operator uses under its ``maxConcurrentModels`` budget, and which rule.

    Longest first shortens the time to the last answer (the longest model no longer starts last
    and runs alone), but judging is pipelined: when the short models come last their answers
    arrive faster than judges can judge them and the run can end later
    (``benchmarks/results/bringup_order.md``). So: longest first unless the estimated run ends
    sooner in spec order; spec order also when the budget holds every budgeted model (order cannot
    matter). The list names every evaluated model: the budgeted ones in the chosen order, then the
    others in spec order.
    """
    names = [m.name for m in spec.models]
    if spec.max_concurrent_models >= len(names):
        return "spec", names
    st = _stages(spec, placements, workload, DEFAULT_EFFICIENCY)
    if spec.max_concurrent_models >= len(_budgeted(spec, st)):
        return "spec", names
    longest = _schedule(spec, st, "longest-first")
    if longest.makespan <= _schedule(spec, st, "spec").makespan:
        return "longest-first", [*longest.order, *(n for n in names if n not in longest.order)]
    return "spec", names


# ----------------------------------------------------------------------------------------------
# Sequential budgets
# ----------------------------------------------------------------------------------------------

#: Questions answered under a sequential budget, as a share of those asking all would make, per
#: goal: the medians of benchmarks/results/sequential.md (2,000 simulated runs of a study-like
#: population: 15 models spaced 0.05–0.2 W apart, 16 domains × 3 levels × 30 questions, three
#: biased, noisy judges; default looks and margin 0.1); goal comparisons: one named pair among
#: those 15 (margin 0.25), the largest median of its cases.
SEQUENTIAL_SHARES: Mapping[str, tuple[float, str]] = {
    "leading-group": (
        0.34,
        "median questions used by the leading-group goal on a study-like population (15 models spaced "
        "0.05–0.2 W apart; benchmarks/results/sequential.md): 34% of all; 13% on an easy one (one clear leader)",
    ),
    "full-ranking": (
        0.93,
        "median questions used by the full-ranking goal on a study-like population "
        "(benchmarks/results/sequential.md): 93% of all",
    ),
    "comparisons": (
        0.13,
        "median questions used by the comparisons goal with one named pair among 15 study-like models "
        "(margin 0.25; benchmarks/results/sequential.md): 13% of all for a pair half a margin apart, 11% at "
        "the margin or at zero; the models outside the named pairs stop at the first look (10%), so more "
        "pairs or fewer models use more",
    ),
}


@dataclass(frozen=True)
class SequentialAssumption:
    """The share of questions a budgeted run is assumed to use, and why."""

    share: float
    cap: float  # maxQuestions / questions (1 without a cap)
    why: str

    @property
    def used(self) -> float:
        """Questions answered, as a share of asking every model every question."""
        return self.share * self.cap


def sequential_assumption(spec: EvalRunSpec, questions: int) -> SequentialAssumption | None:
    """What an estimate assumes of ``spec.budget`` over ``questions`` questions (None: no budget)."""
    budget = spec.budget
    if budget is None:
        return None
    share, why = SEQUENTIAL_SHARES[budget.goal]
    cap = 1.0 if budget.max_questions is None else min(1.0, budget.max_questions / max(questions, 1))
    if budget.looks is not None or budget.margin != SEQUENTIAL_DEFAULT_MARGIN:
        why += (
            "; this budget's looks or margin differ from the simulated defaults, so the share is indicative"
        )
    if cap < 1.0:
        why += f"; maxQuestions {budget.max_questions} caps each model at {cap:.0%} of the {questions}"
    return SequentialAssumption(share, cap, why)


def sequential_remaining(
    assumption: SequentialAssumption, per_model: int, models: Sequence[str], judges: Sequence[str]
) -> RemainingWork:
    """The work a budgeted run makes under ``assumption``: every model answers the assumed share of
    its ``per_model`` answers, and every judge judges those answers."""
    left = round(assumption.used * per_model)
    return RemainingWork(
        per_model=per_model,
        answers=dict.fromkeys(models, left),
        judgments={j: dict.fromkeys(models, left) for j in judges},
    )
