"""Suite-wide fixtures: the dev cluster's ``kube_cluster`` (devcluster.pytest_fixtures, docs/testing.md)
and ``moto_endpoint``, a real HTTP S3 endpoint (moto's threaded server) on a free 127.0.0.1 port: a
real server speaking the S3 protocol over HTTP, not an in-process mock of boto3."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubejury.testing.fault_server import free_port

pytest_plugins = ("devcluster.pytest_fixtures",)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
