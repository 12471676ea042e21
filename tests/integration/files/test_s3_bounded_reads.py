"""S3 reads are held to a size and a time, on a real S3 endpoint and on a hostile one (issue 29 §2).

Before: the operator read a 600 MB object with no limit and was OOM-killed; a listing page is
read whole by botocore before parsing; a server trickling a body kept a read going forever.
moto's threaded server is the real S3 endpoint here; a small loopback server plays the hostile
one (a body without Content-Length that never ends, a listing page of hundreds of MiB, a trickle).
"""

from __future__ import annotations

import socket
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from kubejury.files.storage import S3Credentials, S3Storage, S3Timeouts, StorageError, open_storage
from loopback_http import LoopbackHTTP

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
CREDENTIALS = S3Credentials("testing", "testing")


@pytest.fixture
def bucket_store(moto_endpoint: str) -> S3Storage:
    name = f"kj-{uuid.uuid4().hex[:12]}"
    store = open_storage(f"s3://{name}/runs", endpoint_url=moto_endpoint, credentials=CREDENTIALS)
    assert isinstance(store, S3Storage)
    store.client.create_bucket(Bucket=name)
    return store


class HostileS3(LoopbackHTTP):
    """A loopback "S3 endpoint" that answers every request with one misbehaviour; counts the bytes
    it managed to send."""

    def __init__(self, behaviour: str) -> None:
        self.sent = 0
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # no Content-Length: the body ends when the socket closes

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.end_headers()
                try:
                    if behaviour == "endless":
                        self._send_for(b"x" * 65536, 4096)  # 256 MiB
                    elif behaviour == "huge-listing":
                        head = b'<?xml version="1.0"?><ListBucketResult><Name>b</Name><Contents><Key>'
                        self._send_for(head, 1)
                        self._send_for(b"k" * 65536, 4096)
                    elif behaviour == "trickle":
                        for _ in range(200):
                            self._send_for(b"x", 1)
                            time.sleep(0.1)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send_for(self, chunk: bytes, times: int) -> None:
                for _ in range(times):
                    self.wfile.write(chunk)
                    hostile.sent += len(chunk)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[HostileS3]:
    server = HostileS3(str(request.param))
    try:
        yield server
    finally:
        server.close()


def _hostile_store(url: str, **timeouts: float) -> S3Storage:
    store = open_storage(
        "s3://b/runs",
        endpoint_url=url,
        credentials=CREDENTIALS,
        max_attempts=1,
        timeouts=S3Timeouts(**timeouts),
    )
    assert isinstance(store, S3Storage)
    return store


def test_an_object_over_the_cap_is_refused_naming_the_key_and_the_cap(bucket_store: S3Storage) -> None:
    """moto declares the length, so the refusal comes before any byte of the body is read (the
    endless-body test below shows the cut-off when no length is declared)."""
    bucket_store.write_bytes("r/report/report.json", b"x" * (8 * MiB))
    with pytest.raises(StorageError, match=r"r/report/report\.json is larger than 1048576 bytes"):
        bucket_store.read_bytes("r/report/report.json", max_bytes=1 * MiB)


def test_an_object_within_the_cap_reads_whole(bucket_store: S3Storage) -> None:
    bucket_store.write_bytes("r/progress/generate-m.json", b'{"done": 3}')
    assert bucket_store.read_json("r/progress/generate-m.json", max_bytes=1 * MiB) == {"done": 3}
    assert bucket_store.read_bytes("r/progress/generate-m.json") == b'{"done": 3}'


def test_a_listing_past_the_key_cap_is_refused_on_a_real_endpoint(bucket_store: S3Storage) -> None:
    for i in range(12):
        bucket_store.write_bytes(f"r/s/progress/k{i:02d}.json", b"{}")
    assert len(bucket_store.list("r/s/progress/", max_keys=12)) == 12
    with pytest.raises(StorageError, match=r"more than 10 keys"):
        bucket_store.list("r/s/progress/", max_keys=10)


def test_delete_prefix_deletes_everything_under_the_prefix_only(bucket_store: S3Storage) -> None:
    for key in ("r/a.json", "r/b/c.json", "other/d.json"):
        bucket_store.write_bytes(key, b"{}")
    assert bucket_store.delete_prefix("r/") == 2
    assert bucket_store.list() == ["other/d.json"]


@pytest.mark.parametrize("hostile", ["endless"], indirect=True)
def test_an_endless_body_without_a_length_is_cut_off_at_the_cap(hostile: HostileS3) -> None:
    store = _hostile_store(hostile.url)
    tracemalloc.start()
    try:
        with pytest.raises(StorageError, match=r"r/progress/generate-m\.json is larger than 1048576 bytes"):
            store.read_bytes("r/progress/generate-m.json", max_bytes=1 * MiB)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB
    time.sleep(0.2)
    assert hostile.sent < 64 * MiB


@pytest.mark.parametrize("hostile", ["huge-listing"], indirect=True)
def test_a_listing_page_of_hundreds_of_mib_is_cut_off_not_parsed(hostile: HostileS3) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(StorageError, match=r"listing s3://b/runs/r/.*larger than 16777216 bytes"):
            _hostile_store(hostile.url).list("r/")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * MiB
    time.sleep(0.2)
    assert hostile.sent < 128 * MiB


@pytest.mark.parametrize("hostile", ["trickle"], indirect=True)
def test_a_trickling_body_is_cut_off_at_the_body_deadline(hostile: HostileS3) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match=r"within 1 s"):
        _hostile_store(hostile.url, body_s=1.0, read_s=2.0).read_bytes("r/x.json", max_bytes=1 * MiB)
    assert time.monotonic() - started < 5


def test_a_server_that_never_answers_is_given_up_at_the_read_timeout() -> None:
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        started = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)read timeout"):
            _hostile_store(f"http://127.0.0.1:{silent.getsockname()[1]}", read_s=0.5).read_bytes("r/x.json")
        assert time.monotonic() - started < 5
    finally:
        silent.close()
