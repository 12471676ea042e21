"""``make bench-operator``: ``python -m benchmarks.operator_scale [--runs 10,30,100] [--baseline FILE]``.

Starts its own dev cluster (state in ``--state``, by default ``~/.cache/kubejury/bench/operator-scale``,
never under /tmp), runs every scale (see :mod:`.bench`), and writes
``benchmarks/results/operator_scale.md`` and ``.json`` (see :mod:`.report`), carrying the list-per-tick
design's recorded rounds over from ``--baseline`` (by default the results file being replaced) as
the historical baseline. A smoke run: ``--runs 3 --nodes 50 --idle 30``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import report
from .bench import DESIGN_FORMATS, Options, run

CACHE = Path(os.environ.get("KUBEJURY_CACHE", Path.home() / ".cache" / "kubejury"))


def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(",") if v.strip())
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, not {text!r}")
    return values


def _designs(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [v for v in values if v not in DESIGN_FORMATS]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"designs are {', '.join(DESIGN_FORMATS)}, not {text!r}")
    return values


def parse(argv: list[str] | None = None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.operator_scale", description=__doc__)
    parser.add_argument(
        "--runs", type=_ints, default=(10, 30, 100), help="scales: EvalRuns per round (10,30,100)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=report.RESULTS / "operator_scale.json",
        help="results file whose list-per-tick rounds are shown as the recorded baseline",
    )
    parser.add_argument(
        "--designs",
        type=_designs,
        default=("lean", "full"),
        help="designs per scale, in order: lean (the operator) and full (KUBEJURY_STATUS_FORMAT=full, "
        "the status before issue 26); default lean,full",
    )
    parser.add_argument("--nodes", type=int, default=500, help="KWOK nodes in the mix (500)")
    parser.add_argument("--namespaces", type=int, default=10, help="namespaces the runs are spread over (10)")
    parser.add_argument("--idle", type=float, default=180.0, help="seconds of the idle window (180)")
    parser.add_argument(
        "--hold",
        default="2-20",
        help="seconds a simulated Job pod runs: S, or MIN-MAX drawn uniformly (2-20)",
    )
    parser.add_argument("--shards", type=int, default=1, help="spec.jobs.generationShards (1)")
    parser.add_argument(
        "--round-timeout", type=float, default=2400.0, help="seconds until a round gives up (2400)"
    )
    parser.add_argument("--teardown-timeout", type=float, default=600.0)
    parser.add_argument(
        "--state", type=Path, default=CACHE / "bench" / "operator-scale", help="cluster state dir"
    )
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster running afterwards")
    parser.add_argument(
        "--out", type=Path, default=report.RESULTS / "operator_scale", help="results path without suffix"
    )
    args = parser.parse_args(argv)
    if args.state.resolve().is_relative_to("/tmp"):
        parser.error("--state must not be under /tmp (Job pods of the operator mount over /tmp)")
    options = Options(
        scales=args.runs,
        nodes=args.nodes,
        namespaces=args.namespaces,
        idle_s=args.idle,
        hold=args.hold,
        shards=args.shards,
        round_timeout_s=args.round_timeout,
        teardown_timeout_s=args.teardown_timeout,
        state=args.state,
        keep_cluster=args.keep_cluster,
        designs=args.designs,
    )
    return options, args


async def _cancellable(options: Options) -> dict[str, Any]:
    """``run``, cancelled by SIGTERM or SIGINT (also when started in the background, where SIGINT is
    ignored), so that the operator, the fast kubelet and the cluster are stopped on the way out."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    return await run(options)


def main(argv: list[str] | None = None) -> int:
    options, args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    command = os.environ.get("KUBEJURY_BENCH_COMMAND") or shlex.join(
        ["python", "-m", "benchmarks.operator_scale", *(sys.argv[1:] if argv is None else argv)]
    )
    started = time.time()
    recorded = report.baseline(args.baseline)  # read before the run replaces the file
    earlier = report.earlier(args.baseline)
    document = asyncio.run(_cancellable(options))
    if recorded is not None:
        document["baseline"] = recorded
    if earlier is not None:
        document["earlier"] = earlier
    document["meta"] = report.machine(command, started, time.time(), options)
    md, js = report.write(document, args.out)
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
