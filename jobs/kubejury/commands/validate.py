"""``kubejury validate F…``: check EvalRun files before running or applying them.

Prints every problem of every file as ``<file>, line N: <field path>: <what is allowed>`` so a
user fixes everything in one pass, and a one-line summary for files that are fine.

A file that passes the spec's rules is then checked as the cluster's admission webhook checks it:
under the cluster's allow-lists (``--settings``: its settings ConfigMap; default: those of a
default install of the chart), with admission's own message naming each field and the chart value
that would allow it (issue 28). The check is the operator's, found through the
``kubejury.admission`` entry point, because the engine never imports the operator. ``--local``
checks a file meant for ``kubejury run`` on this machine, where no cluster policy applies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kubejury.commands.plan import load_settings, operator_hook
from kubejury.config.spec import load_evalrun
from kubejury.errors import InputError

ADMISSION_ENTRY_POINT_GROUP = "kubejury.admission"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="check an EvalRun file and print what is wrong, by field",
        description=(
            "Validate EvalRun YAML files: schema and cross-field rules, every problem with its field path, "
            "then what the cluster's admission would refuse under its allow-lists."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="EvalRun YAML or JSON file(s)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--settings",
        metavar="FILE",
        help=(
            "the cluster's operator settings as YAML or JSON: its settings ConfigMap "
            "(`kubectl get cm <release>-kubejury-settings -o yaml`) or its data; its allow-lists "
            "(KUBEJURY_ALLOWED_*) apply. Default: those of a default install of the chart"
        ),
    )
    where.add_argument(
        "--local",
        action="store_true",
        help="the files are for `kubejury run` on this machine: check the spec only, no cluster allow-lists",
    )
    parser.add_argument(
        "--namespace",
        default=None,
        help="namespace of a run whose file names none (default: default); storage roots depend on it",
    )


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    failed = 0
    for path in args.files:
        try:
            evalrun = load_evalrun(path)
            if not args.local:
                _check_admission(path, settings, args)
        except InputError as exc:
            failed += 1
            print(f"kubejury validate: error: {exc}", file=sys.stderr)
            continue
        spec = evalrun.spec
        print(
            f"{path}: ok — EvalRun {evalrun.name!r}: {len(spec.models)} model(s), {len(spec.judges)} judge(s), "
            f"{len(spec.series)} series (primary {spec.primary_series.name!r})"
        )
        for pair in spec.comparisons_to_run():
            why = (
                "one checkpoint in two precisions, added"
                if pair.origin == "automatic"
                else "spec.comparisons"
            )
            print(f"  compares {pair.a} − {pair.b} for equivalence within ±{pair.margin:g} W points ({why})")
    return 2 if failed else 0


def _check_admission(path: str, settings: dict[str, str] | None, args: argparse.Namespace) -> None:
    """Raise :class:`InputError` with admission's message when the cluster would refuse the file."""
    refusal = operator_hook(ADMISSION_ENTRY_POINT_GROUP, "kubejury validate")
    message = refusal(_body(path, args.namespace), settings, args.settings or "--settings")
    if message is not None:
        raise InputError(path, message)


def _body(path: str, namespace: str | None) -> dict[str, Any]:
    """The file as the API server would hand it to admission: in its namespace, else ``namespace``."""
    from kubejury.safe_input import load_yaml

    document, _ = load_yaml(Path(path).read_text(encoding="utf-8"), path)  # it parsed a moment ago
    body = dict(document)
    metadata = dict(body.get("metadata") or {})
    metadata.setdefault("namespace", namespace or "default")
    body["metadata"] = metadata
    return body
