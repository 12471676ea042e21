"""Command line of the dev cluster: ``python -m devcluster up|down|status`` (what the Makefile runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcluster.cluster import DEFAULT_NODES_FILE, ClusterError, attach, start_cluster, stop_cluster
from devcluster.kueue import VERSION as KUEUE_VERSION
from devcluster.nodes import NodesFileError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__)
    parser.add_argument(
        "--state", type=Path, default=Path(".cluster"), help="state directory (default .cluster)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the cluster (no-op when it is already running)")
    up.add_argument("--nodes", type=Path, default=DEFAULT_NODES_FILE, help="NodeList file (YAML or JSON)")
    up.add_argument(
        "--real-node",
        action="store_true",
        help="add a real node (kubelet, containerd, runc) in place of the file's CPU-only nodes",
    )
    up.add_argument(
        "--image",
        type=Path,
        action="append",
        default=[],
        help="OCI archive to import into the real node's containerd (repeatable)",
    )
    up.add_argument(
        "--kueue",
        action="store_true",
        help="install Kueue (built by scripts/build_kueue.sh) and run its manager; see docs/testing.md",
    )
    commands.add_parser("down", help="stop what `up` started")
    commands.add_parser("status", help="exit 0 if the cluster is running")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            cluster = start_cluster(
                args.nodes, args.state, real_node=args.real_node, images=args.image, kueue=args.kueue
            )
            print(
                f"cluster up: {cluster.api_url}; KUBECONFIG={cluster.kubeconfig}; audit log {cluster.audit_log}"
            )
            if cluster.kueue is not None:
                print(
                    f"kueue {KUEUE_VERSION}: webhooks at https://127.0.0.1:{cluster.kueue.webhook_port}; "
                    f"log {cluster.state_dir / 'logs' / 'kueue.log'}"
                )
        elif args.command == "down":
            stopped = stop_cluster(args.state.resolve())
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        else:
            cluster = attach(args.state.resolve())
            print(f"running: {cluster.api_url}; KUBECONFIG={cluster.kubeconfig}")
    except (ClusterError, NodesFileError) as error:
        print(f"devcluster {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
