"""``kubejury-operator``: run the kopf operator with its probes, metrics and webhook.

Why this module exists: one entry point the container image and ``python -m kubejury_operator``
share, configured by flags or, for the Helm chart, by environment variables:

===============================  ==========================================  ==================
flag                             environment                                 default
===============================  ==========================================  ==================
``--namespace NS`` (repeatable)  ``KUBEJURY_WATCH_NAMESPACES`` (comma list)   all namespaces
``--liveness URL``               ``KUBEJURY_LIVENESS``                       ``http://0.0.0.0:8080/healthz``
``--metrics-port N`` (0 = off)   ``KUBEJURY_METRICS_PORT``                   ``9090``
``--webhook-port N``             ``KUBEJURY_WEBHOOK_PORT``                   off
===============================  ==========================================  ==================

The webhook's certificate, host and managed configuration come from ``KUBEJURY_WEBHOOK_*`` (see
:func:`kubejury_operator.kopf_setup.configure_admission`); workload defaults (images, cache PVC,
probe budgets) from the variables read by :meth:`kubejury_operator.settings.WorkloadSettings.from_env`.
One replica runs at a time (the chart uses ``Recreate``), so kopf's peering is off (standalone).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from kubejury import __version__


def build_parser() -> argparse.ArgumentParser:
    env = os.environ
    parser = argparse.ArgumentParser(prog="kubejury-operator", description="kubejury EvalRun operator (kopf)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[n for n in env.get("KUBEJURY_WATCH_NAMESPACES", "").split(",") if n.strip()],
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--liveness",
        default=env.get("KUBEJURY_LIVENESS", "http://0.0.0.0:8080/healthz"),
        help="kopf liveness endpoint URL; empty to disable",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(env.get("KUBEJURY_METRICS_PORT", "9090")),
        help="port of the Prometheus /metrics endpoint (0 disables it)",
    )
    parser.add_argument(
        "--webhook-port",
        type=int,
        default=int(env["KUBEJURY_WEBHOOK_PORT"]) if env.get("KUBEJURY_WEBHOOK_PORT") else None,
        help="serve the validating admission webhook on this port (TLS)",
    )
    parser.add_argument("--log-level", default=env.get("KUBEJURY_LOG_LEVEL", "INFO"))
    parser.add_argument("--version", action="version", version=f"kubejury-operator {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    import kopf

    from kubejury_operator import handlers, metrics

    registry = handlers.register(kopf.OperatorRegistry(), env=os.environ, webhook_port=args.webhook_port)
    if args.metrics_port:
        metrics.start_metrics_server(args.metrics_port)
    metrics.set_build_info(__version__)
    namespaces = [n.strip() for n in args.namespace if n.strip()]
    kopf.run(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness or None,
        memo=kopf.Memo(),
        registry=registry,
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
