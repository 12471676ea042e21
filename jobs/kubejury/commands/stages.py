"""``kubejury generate|judge|aggregate``: one pipeline stage, as the operator's Jobs run it.

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
from typing import TYPE_CHECKING

from kubejury import pipeline

if TYPE_CHECKING:
    from kubejury.stages import StageSummary


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    helps = {
        "generate": "generation stage: ask one model every question of one series",
        "judge": "judging stage: one judge scores the anonymized answers of one series",
        "aggregate": "aggregation stage: compute the report from stored judgments",
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
                        inputs, pool, endpoints, models=entries, series=series, view=view, shard=shard
                    )
                )
            return list(
                await pipeline.judge(inputs, pool, endpoints, judges=entries, series=series, view=view)
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
