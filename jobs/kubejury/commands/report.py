"""``kubejury report``: benchmark + judgment files in, report.json / report.md / report.html out.

Judgments and answers are the stages' Parquet shards or JSONL (older runs, ``kubejury export``,
other tools); :mod:`kubejury.files.tables` reads both.

The command is a thin shell around :func:`kubejury.report.aggregate.aggregate` and
:func:`kubejury.report.write_reports`: it checks the command line first (inputs, then options, then
where the output goes) and names every problem at once, then parses options into a ScoringConfig,
model facts and judge relations, and either writes the three reports into ``--out`` or, with ``--format json``,
prints report.json on stdout and nothing else there (so it can be piped into ``jq``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from kubejury.config.spec_rules import MAX_BOOTSTRAP_SAMPLES
from kubejury.errors import InputError
from kubejury.stats.scoring import ScoringConfig


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="compute report.json/.md/.html from benchmark and judgment files",
        description=(
            "Aggregate judgments with the study's method plus bootstrap intervals, judge agreement and "
            "bias checks, and write report.json, report.md and report.html. JUDGMENTS and ANSWERS may each "
            "be a file (Parquet shards as the stages write them, or JSONL), a directory of *.parquet and "
            "*.jsonl files (or of folders of them, as a run's judgments/), or a quoted glob, and may be repeated."
        ),
    )
    parser.add_argument(
        "--benchmark", required=True, metavar="B", help="benchmark file (JSONL, CSV or Parquet)"
    )
    parser.add_argument(
        "--judgments", required=True, nargs="+", metavar="J", help="judgment file(s): Parquet shards or JSONL"
    )
    parser.add_argument(
        "--answers", nargs="+", metavar="A", help="answer file(s), Parquet or JSONL, for verbosity and cost"
    )
    parser.add_argument(
        "--models", metavar="M.yaml", help="model sizes, quantization, families, judge relations"
    )
    parser.add_argument("--experts", metavar="E.csv", help="expert scores: question_id, model, expert, score")
    parser.add_argument(
        "--weights", metavar="1=0.6,2=0.8,3=1.0", help="level weights (default: the study's 0.6/0.8/1.0)"
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=ScoringConfig().bootstrap_samples,
        metavar="N",
        help=f"bootstrap resamples, 0 (no intervals) to {MAX_BOOTSTRAP_SAMPLES} as in an EvalRun's spec",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="bootstrap seed (default 0)")
    parser.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument(
        "--primary-series", metavar="NAME", help="primary series (default: the first in the judgments)"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="directory to write report.json, report.md and report.html into"
    )
    parser.add_argument(
        "--format",
        choices=("all", "json"),
        default="all",
        help="'json': print report.json on stdout (also writes the files when --out is given)",
    )


def parse_weights(text: str) -> dict[int, float]:
    """``"1=0.6,2=0.8,3=1.0"`` → ``{1: 0.6, 2: 0.8, 3: 1.0}``."""
    weights: dict[int, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        level_text, sep, weight_text = part.partition("=")
        try:
            if not sep:
                raise ValueError
            level, weight = int(level_text), float(weight_text)
        except ValueError:
            raise InputError(
                "--weights", f"cannot read {part!r}: write LEVEL=WEIGHT, e.g. 1=0.6,2=0.8,3=1.0"
            ) from None
        if level <= 0 or not math.isfinite(weight) or weight < 0:
            raise InputError(
                "--weights", f"{part!r}: levels are positive integers and weights non-negative numbers"
            )
        if level in weights:
            raise InputError("--weights", f"level {level} is given twice")
        weights[level] = weight
    if not weights or sum(weights.values()) <= 0:
        raise InputError("--weights", "give at least one level with a positive weight")
    return weights


def _config(args: argparse.Namespace) -> ScoringConfig:
    defaults = ScoringConfig()
    return ScoringConfig(
        level_weights=parse_weights(args.weights) if args.weights else dict(defaults.level_weights),
        tiers=defaults.tiers,
        bootstrap_samples=args.bootstrap,
        confidence=args.confidence,
        seed=args.seed,
        primary_series=args.primary_series,
    )


def _file_problem(path: str, kind: str) -> InputError | None:
    return None if Path(path).is_file() else InputError(path, f"{kind} file not found")


def problems(args: argparse.Namespace) -> list[InputError]:
    """Everything wrong with the command line, inputs first, then options, then where output goes.

    Only what can be known without reading the files: that they exist (a file, a directory with
    ``*.parquet`` or ``*.jsonl`` files, a glob that matches) and that the options parse. A bad line inside a file is
    reported when the file is read, with its line and field.
    """
    from kubejury.files.tables import resolve_sources

    found: list[InputError] = []
    if problem := _file_problem(args.benchmark, "benchmark"):
        found.append(problem)
    for kind, sources in (("judgments", args.judgments), ("answers", args.answers or [])):
        for source in sources:
            try:
                resolve_sources(source, kind)
            except InputError as error:
                found.append(error)
    for kind, path in (("models", args.models), ("experts", args.experts)):
        if path is not None and (problem := _file_problem(path, kind)):
            found.append(problem)
    if args.weights:
        try:
            parse_weights(args.weights)
        except InputError as error:
            found.append(error)
    if not 0 <= args.bootstrap <= MAX_BOOTSTRAP_SAMPLES:
        found.append(
            InputError(
                "--bootstrap",
                f"must be 0 (no intervals) or a number of resamples up to {MAX_BOOTSTRAP_SAMPLES} "
                "(spec.scoring.bootstrapSamples has the same bound)",
            )
        )
    if not 0.0 < args.confidence < 1.0:
        found.append(InputError("--confidence", "must be between 0 and 1, e.g. 0.95"))
    if args.out is None and args.format != "json":
        found.append(
            InputError(
                "--out",
                "give a directory to write report.json, report.md and report.html into, "
                "or --format json to print report.json",
            )
        )
    return found


def run(args: argparse.Namespace) -> int:
    from kubejury.report import write_reports
    from kubejury.report.aggregate import aggregate
    from kubejury.report.json_report import build_document, dumps
    from kubejury.report.models_file import ModelsFile, load_models_file

    found = problems(args)
    if found:
        for problem in found:
            print(f"kubejury report: error: {problem}", file=sys.stderr)
        return 2
    config = _config(args)
    facts = load_models_file(args.models) if args.models else ModelsFile({}, {})
    analysis = aggregate(
        args.benchmark,
        args.judgments,
        answers=args.answers,
        experts=args.experts,
        model_infos=facts.models,
        judge_relations=facts.judges,
        config=config,
        inputs={"models": args.models},
    )
    if args.out is not None:
        try:
            written = write_reports(analysis, args.out)
        except OSError as error:
            raise InputError(args.out, f"cannot write the reports there: {error.strerror or error}") from None
        if args.format != "json":
            primary = analysis.series[analysis.primary_series].scores
            top = ", ".join(primary.ranking[:3])
            print(f"series {analysis.primary_series!r}: {len(primary.models)} models, top: {top}")
            for uri in written.values():
                print(f"wrote {uri}")
    if args.format == "json":
        sys.stdout.write(dumps(build_document(analysis)))
        sys.stdout.flush()
    return 0
