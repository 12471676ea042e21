"""Pytest fixtures for the dev cluster (registered for the whole suite in tests/conftest.py).

``kube_cluster`` (session): the cluster the tests talk to. With ``KUBEJURY_CLUSTER_STATE=DIR`` set it
attaches to a cluster already running there (e.g. ``.cluster`` after ``make cluster-up``); otherwise
it starts one from the default nodes file in a fresh directory under pytest's tmp dir and stops it at
the end of the session.

``kueue_cluster`` (session, started only when a test asks for it): a second cluster of the same nodes
with Kueue installed (:mod:`devcluster.kueue`). It is a cluster of its own because Kueue's Job and Pod
webhooks fail closed: every other test would otherwise depend on the Kueue manager.
``KUBEJURY_KUEUE_CLUSTER_STATE=DIR`` attaches to one already running (``python -m devcluster up
--kueue``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.cluster import DEFAULT_NODES_FILE, Cluster, ClusterError, attach, start_cluster


def _session_cluster(
    tmp_path_factory: pytest.TempPathFactory, env: str, name: str, *, kueue: bool
) -> Iterator[Cluster]:
    existing = os.environ.get(env)
    if existing:
        cluster = attach(Path(existing).resolve())
        if kueue and cluster.kueue is None:
            raise ClusterError(f"{existing}: Kueue is not installed there (python -m devcluster up --kueue)")
        yield cluster
        return
    cluster = start_cluster(DEFAULT_NODES_FILE, tmp_path_factory.mktemp(name), kueue=kueue)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _session_cluster(tmp_path_factory, "KUBEJURY_CLUSTER_STATE", "kube-cluster", kueue=False)


@pytest.fixture(scope="session")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _session_cluster(tmp_path_factory, "KUBEJURY_KUEUE_CLUSTER_STATE", "kueue-cluster", kueue=True)
