"""A benchmark fetched over http(s) is read within a total time and a size cap (issue 12 §6).

Before: a server sending one byte every 0.5 s kept a 2 s socket-timeout read going past 12 s (each
byte restarts the socket timeout), and there was no size cap. A real loopback server trickles here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kubejury.errors import InputError
from kubejury.files.storage import read_uri

pytestmark = pytest.mark.integration


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.end_headers()
        try:
            if self.path == "/trickle":
                for _ in range(60):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif self.path == "/big":
                for _ in range(64):
                    self.wfile.write(b"y" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_trickling_server_is_cut_off_at_the_total_timeout(base_url: str) -> None:
    started = time.monotonic()
    with pytest.raises(InputError, match=r"trickle.*within 1 s"):
        read_uri(f"{base_url}/trickle", timeout_s=1.0)
    assert time.monotonic() - started < 3


def test_a_download_over_the_size_cap_is_an_input_error(base_url: str) -> None:
    with pytest.raises(InputError, match=r"big.*larger than 1048576 bytes"):
        read_uri(f"{base_url}/big", max_bytes=1024 * 1024)
