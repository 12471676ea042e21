"""``kubejury reuse``: the reuse stage, as the operator's CPU-only reuse Job runs it (issue 24).

Copies the answers and judgments of earlier runs that this run would make again
(:mod:`kubejury.stages.reuse`), writes ``<run>/reuse.json`` and prints one line per stage that
copied or refused something. The operator runs it before any server, with one ``--source`` per
``spec.reuse.from`` entry: ``NAME=URI``, the URI being that run's own storage prefix, which the
operator computed from the source EvalRun's uid. The sources are opened with this run's storage
settings and credentials, and a URI that is not a sibling of this run's own prefix (same parent:
the namespace's prefix) is refused — the Job reads nothing outside its namespace's storage.
Without ``=URI`` (``kubejury reuse --source NAME``) the source is a run folder of the same storage
root, as in local mode.

Exit code 0 when the step ran (also when nothing could be reused), 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re

from kubejury import pipeline
from kubejury.errors import ConfigError
from kubejury.records.reuse import ReuseDocument
from kubejury.stages.reuse import Source


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    text = "reuse stage: copy the records of earlier runs this run would make again"
    parser = subparsers.add_parser(name, help=text, description=text)
    parser.add_argument(
        "--evalrun",
        default=os.environ.get("KUBEJURY_EVALRUN") or None,
        required=not os.environ.get("KUBEJURY_EVALRUN"),
        metavar="FILE",
        help="EvalRun file (env KUBEJURY_EVALRUN)",
    )
    parser.add_argument(
        "--out", default=os.environ.get("KUBEJURY_OUT") or None, metavar="URI", help="output root"
    )
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="NAME[=URI]",
        help="an earlier run to copy from: its name, and its own storage prefix when it has one "
        "(a sibling of this run's); default: spec.reuse.from, as run folders of the same root",
    )
    parser.add_argument("--dry-run", action="store_true", help="count what would be copied; write nothing")


def run(args: argparse.Namespace) -> int:
    inputs = pipeline.load_inputs(args.evalrun, out=args.out)
    sources = _sources(inputs, args.source) if args.source else pipeline.local_sources(inputs)
    if not args.dry_run:
        pipeline.record_spec(inputs)
    document = pipeline.reuse(inputs, sources, write=not args.dry_run)
    for line in summary_lines(document):
        print(line, flush=True)
    return 0


def _sources(inputs: pipeline.LoadedRun, given: list[str]) -> list[Source]:
    own = inputs.storage.uri_for("").rstrip("/")
    sources = []
    for item in given:
        name, sep, uri = item.partition("=")
        if name == inputs.layout.run:
            raise ConfigError(f"--source {item}: {name!r} is this run; a run cannot reuse itself")
        if sep:
            _check_sibling(item, name, uri.rstrip("/"), own)
        sources.append(pipeline.source_at(inputs, name, uri.rstrip("/") if sep else None))
    return sources


def _check_sibling(item: str, name: str, uri: str, own: str) -> None:
    """``uri`` is ``<parent of own>/<name>-<uid prefix>``: the source run's own prefix beside this one."""
    parent, base = posixpath.split(uri)
    if (
        ".." in uri.split("/")
        or parent != posixpath.split(own)[0]
        or not re.fullmatch(rf"{re.escape(name)}(-[a-z0-9]{{1,8}})?", base)
    ):
        raise ConfigError(
            f"--source {item}: not a run prefix beside this run's ({posixpath.split(own)[0]}/{name}-<uid>); "
            "reuse reads only runs of this run's own namespace prefix"
        )


def summary_lines(document: ReuseDocument) -> list[str]:
    """One line per stage that copied or refused records, then each missing source."""
    lines = []
    for stage in document.stages:
        if not stage.from_runs and not stage.refused:
            continue
        froms = ", ".join(f"{n} from {run}" for run, n in sorted(stage.from_runs.items())) or "nothing"
        done = " (complete: nothing left to run)" if stage.complete else ""
        lines.append(f"reuse {stage.stage} {stage.series}/{stage.name}: {froms} of {stage.needed}{done}")
        lines.extend(f"  refused from {r.source}: {r.reason}" for r in stage.refused)
    lines.extend(f"reuse: {r.reason}" for r in document.missing_sources)
    return lines
