"""``kubejury validate F…``: check EvalRun files before running or applying them.

Prints every problem of every file as ``<file>, line N: <field path>: <what is allowed>`` so a
user fixes everything in one pass, and a one-line summary for files that are fine.
"""

from __future__ import annotations

import argparse
import sys

from kubejury.config.spec import load_evalrun
from kubejury.errors import InputError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="check an EvalRun file and print what is wrong, by field",
        description="Validate EvalRun YAML files: schema and cross-field rules, every problem with its field path.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="EvalRun YAML or JSON file(s)")


def run(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            evalrun = load_evalrun(path)
        except InputError as exc:
            failed += 1
            print(f"kubejury validate: error: {exc}", file=sys.stderr)
            continue
        spec = evalrun.spec
        print(
            f"{path}: ok — EvalRun {evalrun.name!r}: {len(spec.models)} model(s), {len(spec.judges)} judge(s), "
            f"{len(spec.series)} series (primary {spec.primary_series.name!r})"
        )
    return 2 if failed else 0
