"""``kubejury generate|judge|aggregate|look``: one pipeline stage, as the operator's Jobs run it.

Each Job runs one stage for one (series, model) or (series, judge), with the EvalRun file mounted
from a ConfigMap. Every option also reads an environment variable, so a Job template can set
them without building command lines:

=================  ======================  ==========================================================
option             environment             meaning
=================  ======================  ==========================================================
``--evalrun``      ``KUBEJURY_EVALRUN``    the EvalRun YAML/JSON file
``--series``       ``KUBEJURY_SERIES``     series name (default: every series of the spec)
``--model``        ``KUBEJURY_MODEL``      generate: model name (default: every model)
``--judge``        ``KUBEJURY_JUDGE``      judge: judge name (default: every judge)
``--endpoint``     ``KUBEJURY_ENDPOINT``   base URL (``…/v1``) of the server; default: ``source`` for
                                           runtime openai
``--out``          ``KUBEJURY_OUT``        output root overriding ``spec.storage.uri``
``--shards``       —                       generate: split the questions into N shards (Indexed Job)
``--shard-index``  ``JOB_COMPLETION_INDEX``  generate: the shard this process asks (0-based)
``--look``         ``KUBEJURY_LOOK``       a run with ``spec.budget``: generate and judge ask only
                                           look K's prefix (generate: the models still continuing);
                                           ``look`` decides look K and stores sequential.json
=================  ======================  ==========================================================

Same functions as ``kubejury run`` (:mod:`kubejury.pipeline`); exit code 0 when the stage
completed, 2 on bad input or configuration, 3 when the model server could not be reached (what
was done is stored; the Job's retry resumes).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from kubejury import pipeline

if TYPE_CHECKING:
    from kubejury.stages import StageSummary
    from kubejury.stages.waves import WavePlan
    from kubejury.stats.sequential import SequentialOutcome


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    helps = {
        "generate": "generation stage: ask one model every question of one series",
        "judge": "judging stage: one judge scores the anonymized answers of one series",
        "aggregate": "aggregation stage: compute the report from stored judgments",
        "look": "sequential look (spec.budget): decide from the stored judgments which models continue",
    }
    parser = subparsers.add_parser(name, help=helps[name], description=helps[name])
    parser.add_argument(
        "--evalrun",
        default=_env("KUBEJURY_EVALRUN"),
        required=_env("KUBEJURY_EVALRUN") is None,
        metavar="FILE",
        help="EvalRun file (env KUBEJURY_EVALRUN)",
    )
    parser.add_argument(
        "--out", default=_env("KUBEJURY_OUT"), metavar="URI", help="output root (env KUBEJURY_OUT)"
    )
    if name in ("generate", "judge"):
        parser.add_argument(
            "--series", default=_env("KUBEJURY_SERIES"), help="series name; default all (env KUBEJURY_SERIES)"
        )
        parser.add_argument(
            "--endpoint",
            default=_env("KUBEJURY_ENDPOINT"),
            metavar="URL",
            help="server base URL, e.g. http://model-svc:8000/v1 (env KUBEJURY_ENDPOINT)",
        )
        parser.add_argument(
            "--progress",
            action="store_true",
            help="progress bars even when stdout is not a terminal (default: bars on a terminal, else a line "
            "per stage every 10 s, env KUBEJURY_PROGRESS_INTERVAL)",
        )
    if name == "generate":
        parser.add_argument(
            "--model", default=_env("KUBEJURY_MODEL"), help="model name; default all (env KUBEJURY_MODEL)"
        )
        parser.add_argument(
            "--shards", type=int, default=1, help="split the questions into this many shards (Indexed Job)"
        )
        parser.add_argument(
            "--shard-index",
            type=int,
            default=int(_env("JOB_COMPLETION_INDEX") or 0),
            help="which shard this process asks (env JOB_COMPLETION_INDEX)",
        )
    if name == "judge":
        parser.add_argument(
            "--judge", default=_env("KUBEJURY_JUDGE"), help="judge name; default all (env KUBEJURY_JUDGE)"
        )
    if name in ("generate", "judge", "look"):
        look = _env("KUBEJURY_LOOK")
        parser.add_argument(
            "--look",
            type=_look_number,
            default=_look_number(look) if look else None,
            required=name == "look" and look is None,
            metavar="K",
            help="a run with spec.budget: look K (1-based) of its sequential plan (env KUBEJURY_LOOK)",
        )


def _look_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a look is a whole number from 1, got {text!r}")
    return value


def _look(inputs: pipeline.LoadedRun, look: int) -> tuple[WavePlan, SequentialOutcome]:
    """The run's sequential plan and its decision after the looks before ``look`` (what look
    ``look`` asks: its prefix, of the models still continuing)."""
    from kubejury.errors import ConfigError
    from kubejury.stages.waves import plan_waves

    spec = inputs.evalrun.spec
    budget = spec.sequential_budget()
    if budget is None:
        raise ConfigError("--look is for a run with spec.budget, and this spec has none")
    plan = plan_waves([m.name for m in spec.models], inputs.benchmark, budget, spec.scoring.level_weights)
    if look > plan.n_looks:
        raise ConfigError(f"--look {look}: this run's plan has {plan.n_looks} looks")
    return plan, plan.decide(_judgments(inputs), look - 1)


def _judgments(inputs: pipeline.LoadedRun) -> list[Any]:
    from kubejury.stages.waves import primary_judgments

    spec = inputs.evalrun.spec
    return primary_judgments(
        inputs.storage, inputs.layout, spec.primary_series.name, [j.name for j in spec.judges]
    )


def _decide_look(inputs: pipeline.LoadedRun, look: int) -> int:
    """``kubejury look --look K``: decide look K on the stored judgments, store sequential.json."""
    from kubejury.stages.waves import write_document

    plan, _ = _look(inputs, look)
    outcome = plan.decide(_judgments(inputs), look)
    write_document(inputs.storage, inputs.layout.run, plan.document(outcome))
    for m in outcome.models:
        said = "continues" if m.status == "continue" else f"stopped: {m.reason}"
        print(f"look {look}/{plan.n_looks} {m.model}: {m.questions} questions, {said}", flush=True)
    return 0


def _print_summaries(summaries: list[StageSummary]) -> None:
    for s in summaries:
        print(
            f"{s.stage} {s.series}/{s.name}: {s.resumed} already stored, {s.written} written, "
            f"{s.errors} errors, {s.parse_failures} unparsed, {s.skipped} skipped, "
            f"{s.elapsed_s:.1f}s",
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    from kubejury.inference.client import EndpointPool
    from kubejury.stages import EndpointUnavailable, run_async
    from kubejury.stages.progress_lines import Heartbeat, progress_view
    from kubejury.stages.runner import Terminated

    inputs = pipeline.load_inputs(args.evalrun, out=args.out)
    spec = inputs.evalrun.spec
    if args.command == "look":
        return _decide_look(inputs, args.look)
    if args.command == "aggregate":
        beat = contextlib.nullcontext() if sys.stdout.isatty() else Heartbeat(f"aggregate {inputs.name}")
        with beat:
            _, written = pipeline.aggregate_run(inputs)
        for name, uri in written.items():
            print(f"{name}: {uri}")
        return 0

    series = pipeline.select(spec.series, [args.series] if args.series else None, "series")
    if args.command == "generate":
        entries = pipeline.select(spec.models, [args.model] if args.model else None, "model")
    else:
        entries = pipeline.select(spec.judges, [args.judge] if args.judge else None, "judge")
    questions = None
    if args.look is not None:
        plan, before = _look(inputs, args.look)
        questions = plan.prefix(args.look - 1)
        if args.command == "generate":  # a model stopped at an earlier look asks nothing more
            entries = [e for e in entries if before.outcome(e.name).status == "continue"]
    endpoints = {e.name: pipeline.endpoint_of(e, {}, override=args.endpoint) for e in entries}
    pipeline.record_spec(inputs)

    async def main() -> list[StageSummary]:
        view = progress_view(bars=True if args.progress else None)
        pool = EndpointPool(pipeline.client_settings(spec.concurrency))
        try:
            if view is not None:
                view.__enter__()
            if args.command == "generate":
                shard = (args.shard_index, args.shards) if args.shards > 1 else None
                return list(
                    await pipeline.generate(
                        inputs,
                        pool,
                        endpoints,
                        models=entries,
                        series=series,
                        view=view,
                        shard=shard,
                        questions=questions,
                    )
                )
            return list(
                await pipeline.judge(
                    inputs, pool, endpoints, judges=entries, series=series, view=view, questions=questions
                )
            )
        finally:
            if view is not None:
                view.__exit__(None, None, None)
            await pool.close()

    try:
        summaries = run_async(main())
    except EndpointUnavailable as exc:
        print(f"kubejury {args.command}: {exc}", file=sys.stderr)
        return 3
    except Terminated as exc:
        print(f"kubejury {args.command}: {exc}", file=sys.stderr)
        return Terminated.exit_code
    _print_summaries(summaries)
    return 0
