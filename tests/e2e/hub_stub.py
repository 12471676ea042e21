"""A Hugging Face hub on this machine: one model repository, served over plain HTTP.

Why this module exists: the real-pods prefetch e2e (:mod:`test_prefetch_real_pods_e2e`) needs a
model server that downloads its own weights with ``hf://`` — llama.cpp's ``llama-server
--hf-repo`` — and a ``kubejury prefetch`` Job that downloads the same bytes, with nothing leaving the
machine. Both read the hub endpoint from the environment (llama.cpp: ``MODEL_ENDPOINT``, else
``HF_ENDPOINT``; kubejury: ``HF_ENDPOINT``), so this server speaks just the part of the hub's HTTP
API that the two downloaders call, and nothing else:

* ``GET /api/models/<repo>/refs`` — the branch ``main`` and its commit (llama.cpp resolves the
  commit first);
* ``GET /api/models/<repo>/tree/<main|commit>?recursive=true`` — the files with their size and, as
  LFS files, their SHA-256 (both downloaders check it);
* ``HEAD`` and ``GET /<repo>/resolve/<main|commit>/<path>`` — the bytes, with ``Content-Length``,
  an ``ETag``, and ``Range: bytes=N-[M]`` (206) for resumed downloads.

Anything else is a 404 with the hub's ``{"error": …}`` body. Files are read from disk per request
(a GGUF of ~100 MiB is never held in memory). The answers are decided by :func:`answer` (pure: the
request line in, status, headers and body or byte range out), so the unit test reads as the
protocol; :class:`HubStub` only puts it on a socket, in threads beside the test's own event loop.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from pathlib import Path

CHUNK = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass(frozen=True)
class HubFile:
    """One file of the repository: its path in the repository, where its bytes are, their digest."""

    path: str
    local: Path
    size: int
    sha256: str

    @classmethod
    def of(cls, path: str, local: Path) -> HubFile:
        digest = hashlib.sha256()
        with open(local, "rb") as handle:
            while block := handle.read(8 * CHUNK):
                digest.update(block)
        return cls(path, local, local.stat().st_size, digest.hexdigest())


@dataclass(frozen=True)
class HubRepo:
    """A model repository at one commit (branch ``main``), derived from its name and its files."""

    name: str
    files: tuple[HubFile, ...]

    @property
    def commit(self) -> str:
        """40 hex digits, as the hub's commits (llama.cpp refuses anything else)."""
        text = self.name + "".join(f"{f.path}:{f.sha256}" for f in self.files)
        return hashlib.sha1(text.encode()).hexdigest()

    def revision(self, name: str) -> bool:
        return name in ("main", self.commit)

    def file(self, path: str) -> HubFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass(frozen=True)
class Answer:
    """What to send: status, headers, and a JSON body or a byte range of a file."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: HubFile | None = None
    start: int = 0
    end: int = 0  # exclusive

    @property
    def length(self) -> int:
        return self.end - self.start if self.file is not None else len(self.body)


def _json(status: int, document: object) -> Answer:
    return Answer(status, {"Content-Type": "application/json"}, json.dumps(document).encode())


def _missing(what: str) -> Answer:
    return _json(404, {"error": f"{what} not found"})


def _refs(repo: HubRepo) -> Answer:
    branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.commit}
    return _json(200, {"branches": [branch], "converts": [], "tags": []})


def _tree(repo: HubRepo) -> Answer:
    entries = [
        {
            "type": "file",
            "path": f.path,
            "size": f.size,
            "oid": hashlib.sha1(f.sha256.encode()).hexdigest(),
            "lfs": {"oid": f.sha256, "size": f.size, "pointerSize": 134},
        }
        for f in repo.files
    ]
    return _json(200, entries)


def _resolve(repo: HubRepo, item: HubFile, range_header: str | None) -> Answer:
    headers = {
        "Content-Type": "application/octet-stream",
        "Accept-Ranges": "bytes",
        "ETag": f'"{item.sha256}"',
        "X-Repo-Commit": repo.commit,
    }
    if not range_header:
        return Answer(200, headers, file=item, start=0, end=item.size)
    match = _RANGE.match(range_header.strip())
    start = int(match.group(1)) if match else -1
    end = int(match.group(2)) + 1 if match and match.group(2) else item.size
    if not match or start >= item.size or end <= start:
        return Answer(416, {"Content-Range": f"bytes */{item.size}"})
    end = min(end, item.size)
    ranged = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{item.size}"}
    return Answer(206, ranged, file=item, start=start, end=end)


def answer(repo: HubRepo, method: str, target: str, range_header: str | None = None) -> Answer:
    """The hub's answer to ``method target`` (``target``: the request's path and query)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(target).path)
    api = f"/api/models/{repo.name}/"
    if method == "GET" and path == api + "refs":
        return _refs(repo)
    if method == "GET" and path.startswith(api + "tree/"):
        revision = path.removeprefix(api + "tree/").split("/", 1)[0]
        return _tree(repo) if repo.revision(revision) else _missing(f"revision {revision}")
    resolve = f"/{repo.name}/resolve/"
    if method in ("GET", "HEAD") and path.startswith(resolve):
        revision, _, file_path = path.removeprefix(resolve).partition("/")
        item = repo.file(file_path)
        if not repo.revision(revision) or item is None:
            return _missing(f"{file_path} at {revision}")
        return _resolve(repo, item, range_header)
    return _missing(f"{method} {path}")


class HubStub:
    """:func:`answer` on ``host``:<free port>, one thread per connection, until :meth:`close`."""

    def __init__(self, repo: HubRepo, host: str = "127.0.0.1") -> None:
        self.repo = repo
        self.requests: list[str] = []  # "METHOD target", as received (the tests read who asked what)
        handler = _handler(self)
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        return "http://{}:{}".format(*self.address)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(stub: HubStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet: the tests read stub.requests
            return

        def do_GET(self) -> None:
            self._send(answer(stub.repo, "GET", self.path, self.headers.get("Range")))

        def do_HEAD(self) -> None:
            self._send(answer(stub.repo, "HEAD", self.path, self.headers.get("Range")), body=False)

        def _send(self, reply: Answer, body: bool = True) -> None:
            stub.requests.append(f"{self.command} {self.path}")
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(reply.length))
            self.end_headers()
            if not body:
                return
            if reply.file is None:
                self.wfile.write(reply.body)
                return
            _copy_range(reply.file.local, reply.start, reply.end, self.wfile)

    return Handler


def _copy_range(local: Path, start: int, end: int, out: BufferedIOBase) -> None:
    write = out.write
    with open(local, "rb") as handle:
        handle.seek(start)
        left = end - start
        while left > 0:
            block = handle.read(min(CHUNK, left))
            if not block:
                return
            write(block)
            left -= len(block)


def repo_of(name: str, files: Sequence[Path]) -> HubRepo:
    """A repository ``name`` holding ``files`` at its root, under their own file names."""
    return HubRepo(name, tuple(HubFile.of(f.name, f) for f in files))
