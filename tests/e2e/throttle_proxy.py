"""A loopback TCP proxy that delivers its upstream's bytes at a fixed rate: a slow link on purpose.

Why this module exists: the weight-prefetch e2e needs a download that takes a known time (a real
S3 server, moto, answers at memory speed). Every byte sent back to the clients passes one shared
budget of ``bytes_per_second`` (all connections together, like one link), so a file of N bytes takes
N / rate seconds however the client splits its requests. Requests towards the upstream are not
slowed. Threads, no asyncio: it runs beside the test's own event loop.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

CHUNK = 16 * 1024


class ThrottledProxy:
    """``host``:<free port> → ``upstream`` (host, port), answers at ``bytes_per_second``. ``host`` is
    loopback unless a caller names another local address (a real node's pods reach the host's end
    of its veth, never its loopback)."""

    def __init__(self, upstream: tuple[str, int], bytes_per_second: float, host: str = "127.0.0.1") -> None:
        self.upstream, self.rate = upstream, float(bytes_per_second)
        self._lock = threading.Lock()
        self._next = time.monotonic()
        self._listener = socket.create_server((host, 0))
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return "http://{}:{}".format(*self._listener.getsockname()[:2])

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _wait_for(self, count: int) -> None:
        """Block until ``count`` more bytes fit the shared budget."""
        with self._lock:
            start = max(time.monotonic(), self._next)
            self._next = start + count / self.rate
            until = self._next
        time.sleep(max(0.0, until - time.monotonic()))

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, throttled: bool) -> None:
        try:
            while chunk := source.recv(CHUNK):
                if throttled:
                    self._wait_for(len(chunk))
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
