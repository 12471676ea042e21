"""Pytest fixtures for the dev cluster (registered for the whole suite in tests/conftest.py).

``kube_cluster`` (session): the cluster the tests talk to. With ``KUBEJURY_CLUSTER_STATE=DIR`` set it
attaches to a cluster already running there (e.g. ``.cluster`` after ``make cluster-up``); otherwise
it starts one from the default nodes file in a fresh directory under pytest's tmp dir and stops it at
the end of the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.cluster import DEFAULT_NODES_FILE, Cluster, attach, start_cluster


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    existing = os.environ.get("KUBEJURY_CLUSTER_STATE")
    if existing:
        yield attach(Path(existing).resolve())
        return
    cluster = start_cluster(DEFAULT_NODES_FILE, tmp_path_factory.mktemp("kube-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()
