"""A real Kubernetes control plane for development and tests, with nodes simulated by KWOK.

``make cluster-up`` / ``make cluster-down`` and the pytest fixture ``kube_cluster`` use it; see
docs/testing.md. :mod:`devcluster.cluster` says what is real and what is simulated.
"""

from __future__ import annotations

from devcluster.cluster import (
    DEFAULT_NODES_FILE,
    Cluster,
    ClusterError,
    attach,
    build_bins,
    start_cluster,
    stop_cluster,
)
from devcluster.kueue import KueueInstall, install_kueue
from devcluster.nodes import NodesFileError, load_nodes

__all__ = [
    "DEFAULT_NODES_FILE",
    "Cluster",
    "ClusterError",
    "KueueInstall",
    "NodesFileError",
    "attach",
    "build_bins",
    "install_kueue",
    "load_nodes",
    "start_cluster",
    "stop_cluster",
]
