"""A plain HTTP server on loopback for tests that play a hostile or recording peer.

Why this module exists: tests of what the operator sends to a storage endpoint, and of how it reads
a hostile one, each need a real listener on 127.0.0.1 in a thread; this is that listener once, so
a test writes only its handler."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackHTTP:
    """``handler`` served on a free 127.0.0.1 port until :meth:`close`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
