"""``kubejury export``: a run's answers and judgments as JSONL, for tools that read JSON lines.

Why this command exists: the stages store records as Parquet shards (issue 26), which other tools
— and ``kubejury report --judgments x.jsonl`` on another machine — may not read. This writes, from
a run's folder (local or ``s3://``), ``answers.jsonl`` and ``judgments.jsonl``: one record per key
(the latest final one, as every reader inside kubejury counts them), series by series, model and
judge by name, each line the record's JSON form (:meth:`~kubejury.records.results.AnswerRecord.to_json`,
``"format": 2``). Shards of either kind are read, so an older run exports the same way.

Exit code 0 when written, 2 on bad input (no such run, a shard that does not read).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

import orjson

from kubejury.errors import ConfigError
from kubejury.files.storage import LocalStorage, RunLayout, Storage, open_storage
from kubejury.records.results import AnswerRecord, JudgmentRecord

FORMATS = ("jsonl",)
_STAGE_FOLDER = re.compile(r"^(?P<series>[^/]+)/(?P<kind>answers|judgments)/(?P<name>[^/]+)/part-[^/]+$")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    text = "write a run's answers and judgments as JSONL (one record per key)"
    parser = subparsers.add_parser(
        name,
        help=text,
        description=text + ". RUN is the run's folder: a path, file:///… or s3://bucket/prefix/<run>.",
    )
    parser.add_argument("run", metavar="RUN", help="the run's folder (its storage root and the run's name)")
    parser.add_argument("--format", choices=FORMATS, default="jsonl", help="what to write (jsonl)")
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="directory to write answers.jsonl and judgments.jsonl into",
    )


def open_run(uri: str) -> tuple[Storage, RunLayout]:
    """The storage holding the run at ``uri`` and the run's layout (its last path segment)."""
    root, _, name = uri.rstrip("/").rpartition("/")
    if not name or not root:
        raise ConfigError(f"{uri!r}: give the run's folder, e.g. runs/quickstart or s3://bucket/prefix/run")
    if root.endswith(":/"):  # s3://bucket names a bucket, not a run in it
        raise ConfigError(f"{uri!r}: give the run's folder below the bucket, e.g. s3://bucket/run")
    return open_storage(root), RunLayout(name)


def stage_folders(storage: Storage, layout: RunLayout) -> dict[str, dict[str, list[str]]]:
    """Series → ``answers``/``judgments`` → the model or judge names with shards, in name order."""
    found: dict[str, dict[str, set[str]]] = {}
    prefix = layout.run + "/"
    for key in storage.list(prefix):
        match = _STAGE_FOLDER.match(key[len(prefix) :])
        if match:
            kinds = found.setdefault(match["series"], {"answers": set(), "judgments": set()})
            kinds[match["kind"]].add(match["name"])
    return {
        series: {kind: sorted(names) for kind, names in kinds.items()}
        for series, kinds in sorted(found.items())
    }


def jsonl(records: Sequence[AnswerRecord] | Sequence[JudgmentRecord]) -> bytes:
    """Records as JSON lines, keys sorted (the form the stages wrote before issue 26)."""
    return b"".join(orjson.dumps(r.to_json(), option=orjson.OPT_SORT_KEYS) + b"\n" for r in records)


def export_records(storage: Storage, layout: RunLayout) -> tuple[list[AnswerRecord], list[JudgmentRecord]]:
    """Every answer and judgment of the run, one per key, as the stages' readers count them."""
    from kubejury.stages.generate import read_answers
    from kubejury.stages.judge import read_judgments

    folders = stage_folders(storage, layout)
    if not folders:
        raise ConfigError(f"{storage.uri_for(layout.run)}: no answers or judgments stored there")
    answers: list[AnswerRecord] = []
    judgments: list[JudgmentRecord] = []
    for series, kinds in folders.items():
        for model in kinds["answers"]:
            answers.extend(read_answers(storage, layout, series, model))
        for judge in kinds["judgments"]:
            judgments.extend(read_judgments(storage, layout, series, judge))
    return answers, judgments


def run(args: argparse.Namespace) -> int:
    storage, layout = open_run(args.run)
    answers, judgments = export_records(storage, layout)
    out = LocalStorage(args.out)
    for name, records in (("answers.jsonl", answers), ("judgments.jsonl", judgments)):
        out.write_bytes(name, jsonl(records))
        print(f"wrote {out.uri_for(name)} ({len(records)} records)", file=sys.stdout)
    return 0
