"""The ``kubejury`` command line: one entry point, one module per subcommand.

Each subcommand lives in ``kubejury.commands.<name>`` and exposes ``add_parser(subparsers)`` and
``run(args) -> int``. Modules are imported lazily so that ``kubejury plan`` does not pay for
matplotlib and ``kubejury report`` does not pay for aiohttp. Errors a user can act on
(:class:`kubejury.errors.KubejuryError`) are printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from kubejury import __version__
from kubejury.errors import KubejuryError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("kubejury.commands.run", "run a whole EvalRun locally (no cluster): generate, judge, report"),
    "generate": ("kubejury.commands.stages", "generation stage: ask one model every question of one series"),
    "judge": (
        "kubejury.commands.stages",
        "judging stage: one judge scores the anonymized answers of one series",
    ),
    "aggregate": ("kubejury.commands.stages", "aggregation stage: compute the report from stored judgments"),
    "look": (
        "kubejury.commands.stages",
        "sequential look (spec.budget): decide from the stored judgments which models continue",
    ),
    "reuse": (
        "kubejury.commands.reuse",
        "reuse stage: copy the records of earlier runs this run would make again",
    ),
    "prefetch": (
        "kubejury.commands.prefetch",
        "download a model's weights (hf://, s3://) into the model cache, resumably",
    ),
    "report": ("kubejury.commands.report", "compute report.json/.md/.html from benchmark and judgment files"),
    "export": (
        "kubejury.commands.export",
        "write a run's answers and judgments as JSONL (one record per key)",
    ),
    "plan": ("kubejury.commands.plan", "dry run of GPU placement: what the operator would deploy, per model"),
    "validate": ("kubejury.commands.validate", "check an EvalRun file and print what is wrong, by field"),
    "status": (
        "kubejury.commands.status",
        "show an EvalRun's phase, conditions, progress, placement and ranking from the cluster",
    ),
    "anonymize": (
        "kubejury.commands.anonymize",
        "print an answer (stdin) as a judge would see it; replaced spans on stderr",
    ),
}


class _CommandModule(Protocol):
    def add_parser(
        self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str
    ) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _load(name: str) -> _CommandModule:
    module_name, _ = COMMANDS[name]
    return cast(_CommandModule, importlib.import_module(module_name))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubejury", description="LLM evaluation with a jury of LLM judges.")
    parser.add_argument("--version", action="version", version=f"kubejury {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        if name == only:
            _load(name).add_parser(subparsers, name)
        else:
            # Only the chosen command's module is imported; the others just appear in --help.
            subparsers.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if a in COMMANDS), None)
    parser = build_parser(only=command)
    args = parser.parse_args(args_list)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return _load(args.command).run(args)
    except KubejuryError as exc:
        print(f"kubejury {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
