"""``kubejury anonymize``: show what a judge would see of an answer, and what was replaced.

Reads an answer on stdin and prints it exactly as the judging stage hands it to a judge (the same
:class:`kubejury.judging.anonymize.Scrubber`), so a user can check the anonymizer on their own
models' answers. Every replaced or removed span of the input is listed on stderr with its
character offsets, so stdout stays the judge's text and nothing else.
"""

from __future__ import annotations

import argparse
import sys

from kubejury.errors import InputError
from kubejury.judging.anonymize import Scrubber


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="print an answer (stdin) as a judge would see it; replaced spans on stderr",
        description=(
            "Read an answer on stdin and print what a judge would see: self-identifications replaced by "
            "a neutral token, reasoning blocks and chat-template tokens removed, everything else as written. "
            "Each changed span is listed on stderr."
        ),
    )
    parser.add_argument(
        "--names",
        default="",
        metavar="A,B,…",
        help="the run's model names (comma-separated): replaced wherever they occur, as in a run",
    )


def _read_stdin() -> str:
    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:  # a text stream without bytes underneath (tests, embedding)
        return sys.stdin.read()
    data = raw.read()
    try:
        return str(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InputError("stdin", f"not valid UTF-8 at byte offset {error.start}") from None


def run(args: argparse.Namespace) -> int:
    names = [name.strip() for name in str(args.names).split(",") if name.strip()]
    text = _read_stdin()
    result = Scrubber(names).anonymize(text)
    sys.stdout.write(result.text)
    sys.stdout.flush()
    for r in result.replacements:
        shown = r.token if r.token else "(removed)"
        print(f"{r.start}-{r.end} {r.reason}: {r.original!r} -> {shown}", file=sys.stderr)
    if not result.replacements:
        print("nothing replaced", file=sys.stderr)
    return 0
