"""``kubejury plan``: what the operator would deploy for each model and judge, before applying a run.

A dry run of GPU placement (``kubejury.placement.planner``) on a node list saved with
``kubectl get nodes -o json``. It reads the EvalRun spec and the node list only — never the
benchmark or storage — so it runs anywhere, offline, in a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from kubejury.config.spec import load_evalrun
from kubejury.errors import InputError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="dry run of GPU placement: what the operator would deploy, per model",
        description=(
            "Print, for every model and judge of an EvalRun, the runtime, quantization, tensor-parallel size and "
            "GPU node pool the operator would choose on the given nodes, or why nothing fits."
        ),
    )
    parser.add_argument("--evalrun", required=True, metavar="FILE", help="EvalRun YAML file")
    parser.add_argument(
        "--nodes",
        required=True,
        metavar="NODES.json",
        help="node list: output of `kubectl get nodes -o json`",
    )
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    parser.add_argument(
        "--fail-unschedulable",
        action="store_true",
        help="exit with status 1 when any model or judge cannot be placed",
    )


def _load_nodes(path: str) -> list[Any]:
    from kubejury.placement.planner import parse_node_list

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(path, "file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as json_error:
        try:
            data = yaml.safe_load(text)  # kubectl get nodes -o yaml works too
        except yaml.YAMLError:
            raise InputError(
                path,
                f"not valid JSON: {json_error.msg} (save it with `kubectl get nodes -o json`)",
                location=f"line {json_error.lineno}, column {json_error.colno}",
            ) from json_error
    try:
        return parse_node_list(data)
    except ValueError as exc:
        raise InputError(path, str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    from kubejury.placement.planner import plan_placements

    evalrun = load_evalrun(args.evalrun)
    nodes = _load_nodes(args.nodes)
    plans = plan_placements(evalrun.spec, nodes)
    if args.format == "json":
        document = {"models": {name: placement.plan_entry() for name, placement in plans.items()}}
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        _print_table(evalrun.name, plans, len(nodes))
    unschedulable = [name for name, placement in plans.items() if not placement.schedulable]
    return 1 if unschedulable and args.fail_unschedulable else 0


def _print_table(run_name: str, plans: dict[str, Any], node_count: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Placement plan for EvalRun {run_name!r} on {node_count} node(s)", show_lines=True)
    for column in ("model", "ok", "runtime", "quant", "TP", "GPU", "node selector"):
        table.add_column(column, no_wrap=column in ("model", "ok", "quant", "TP"))
    table.add_column("reason", ratio=1)
    for name, placement in plans.items():
        selector = ", ".join(f"{k}={v}" for k, v in placement.node_selector.items()) or "-"
        table.add_row(
            name,
            "[green]yes[/green]" if placement.schedulable else "[red]NO[/red]",
            placement.runtime,
            placement.quantization,
            str(placement.tensor_parallel_size),
            placement.gpu_product
            or ("CPU" if placement.schedulable and placement.runtime != "openai" else "-"),
            selector,
            placement.reason,
        )
    Console(width=max(200, Console().width)).print(table)
