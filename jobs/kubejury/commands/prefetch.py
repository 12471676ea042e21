"""``kubejury prefetch``: download a model's weights into the model cache before a GPU server starts.

Why this module exists: a model server Pod that downloads its own weights holds its GPUs for the
whole download (tens of GB: many minutes). The operator runs this command first, in a CPU-only Job
that mounts the model cache claim (docs/operator.md, "Weight prefetch"), and creates the server only
once it succeeded; the server then loads from the cache folder
(:func:`kubejury.files.weight_cache.model_dir`).

What it reads and writes, and nothing else:

* it reads only ``--source`` (``hf://org/repo[:TAG]`` from the Hugging Face hub at ``$HF_ENDPOINT``
  with ``$HF_TOKEN``; ``s3://bucket/prefix`` at the chart's S3 endpoint with the run's ``AWS_*``
  credentials) — the operator passes the model's own source;
* it writes only below ``<cache>/kubejury-weights/<key>``, the key a digest of the source and the
  GGUF selection; a file name from a listing that would leave that folder is refused.

Atomic and resumable: each file is downloaded below ``.partial/`` and renamed into place once its
size is the listed size (and its SHA-256 the listed one, where the hub lists one: LFS files); an interrupted download resumes from the bytes already there (an HTTP
``Range`` request); the marker :data:`~kubejury.files.weight_cache.COMPLETE_MARKER` is written last,
by rename, and only a folder with the marker counts as complete. A lock file keeps two Jobs from
writing one folder at once.

Exit code 0 when the folder is complete, 2 on bad input (no such repository, no GGUF file matching).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from kubejury.errors import KubejuryError
from kubejury.files.storage import endpoint_from_env
from kubejury.files.weight_cache import (
    COMPLETE_MARKER,
    GGUF_ENTRY,
    PARTIAL_FOLDER,
    gguf_selection,
    model_dir,
    prefetchable,
    repository,
)


class PrefetchError(KubejuryError):
    """Weights that cannot be downloaded as asked (reported in one line, exit code 2)."""


HF_DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK_BYTES = 1 << 20
ATTEMPTS = 6  # per file: a broken connection resumes from the bytes already written
PROGRESS_EVERY_S = 5.0
LOCK_FILE = ".lock"
_RESERVED = frozenset({COMPLETE_MARKER, PARTIAL_FOLDER, LOCK_FILE, GGUF_ENTRY})
# Formats vLLM does not load when the repository has safetensors (duplicates of the same weights).
_ALTERNATE_WEIGHTS = (".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx", ".gguf")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    text = "download a model's weights (hf://, s3://) into the model cache, resumably"
    parser = subparsers.add_parser(name, help=text, description=text)
    parser.add_argument("--source", required=True, help="hf://org/repo[:TAG] or s3://bucket/prefix")
    parser.add_argument("--runtime", required=True, choices=("vllm", "llamacpp"), help="the model's server")
    parser.add_argument("--quantization", default="", help="GGUF file to pick (llama.cpp), e.g. Q4_K_M")
    parser.add_argument("--cache", required=True, metavar="DIR", help="where the model cache is mounted")
    parser.add_argument("--revision", default="main", help="hub revision (hf:// only)")


def run(args: argparse.Namespace) -> int:
    if not prefetchable(args.source, args.runtime):
        raise PrefetchError(f"{args.source} ({args.runtime}) is not downloaded ahead: hf:// or s3:// only")
    remote = open_source(args.source, args.revision)
    folder = prefetch(remote, args.source, args.runtime, args.quantization, Path(args.cache))
    print(f"prefetch {args.source}: complete in {folder}", flush=True)
    return 0


# ------------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class RemoteFile:
    """One file of a model's weights: its path relative to the model's root, its size and, when the
    source lists one (the hub's LFS files), its SHA-256."""

    path: str
    size: int
    sha256: str | None = None


class RemoteSource:
    """Where the weights come from: the files there, and a byte stream of one from an offset."""

    def files(self) -> list[RemoteFile]:
        raise NotImplementedError

    def open(self, path: str, offset: int) -> IO[bytes]:
        raise NotImplementedError


class HubSource(RemoteSource):
    """A Hugging Face model repository at a revision, through the hub's HTTP API."""

    def __init__(self, endpoint: str, repo: str, revision: str, token: str | None) -> None:
        self.endpoint, self.repo, self.revision, self.token = endpoint.rstrip("/"), repo, revision, token

    def _request(self, url: str, headers: dict[str, str] | None = None) -> Any:
        request = urllib.request.Request(url, headers=dict(headers or {}))
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        return urllib.request.urlopen(request, timeout=60)

    def files(self) -> list[RemoteFile]:
        quoted = urllib.parse.quote(self.revision, safe="")
        url: str | None = f"{self.endpoint}/api/models/{self.repo}/tree/{quoted}?recursive=true"
        found: list[RemoteFile] = []
        while url:
            try:
                with self._request(url) as response:
                    entries = json.loads(response.read())
                    url = _next_link(response.headers.get("Link"))
            except urllib.error.HTTPError as error:
                raise PrefetchError(
                    f"hf://{self.repo}: the hub answered {error.code} listing its files"
                ) from None
            found += [
                RemoteFile(str(e["path"]), int(e.get("size") or 0), _lfs_digest(e))
                for e in entries
                if isinstance(e, dict) and e.get("type") == "file"
            ]
        return found

    def open(self, path: str, offset: int) -> IO[bytes]:
        quoted = urllib.parse.quote(path)
        url = f"{self.endpoint}/{self.repo}/resolve/{urllib.parse.quote(self.revision, safe='')}/{quoted}"
        response = self._request(url, {"Range": f"bytes={offset}-"} if offset else None)
        if offset and response.status != 206:
            response.close()
            raise OSError(f"{url}: the hub ignored the Range request (status {response.status})")
        return response  # type: ignore[no-any-return]


def _lfs_digest(entry: dict[str, Any]) -> str | None:
    """The SHA-256 the hub lists for an LFS file (``lfs.oid``), if any."""
    lfs = entry.get("lfs")
    oid = lfs.get("oid") if isinstance(lfs, dict) else None
    return str(oid).lower() if isinstance(oid, str) and re.fullmatch(r"[0-9a-fA-F]{64}", oid) else None


def _next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of an HTTP ``Link`` header (the hub pages long listings)."""
    for part in (header or "").split(","):
        if 'rel="next"' in part and "<" in part:
            return part[part.index("<") + 1 : part.index(">")]
    return None


class S3Source(RemoteSource):
    """The objects under an S3 prefix (or one object), with the environment's endpoint and keys."""

    def __init__(self, uri: str, client: Any) -> None:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        self.bucket, self.key, self.client = bucket, key, client

    def files(self) -> list[RemoteFile]:
        prefix = self.key if not self.key or self.key.endswith("/") else self.key + "/"
        found: list[RemoteFile] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if not str(item["Key"]).endswith("/"):
                    found.append(RemoteFile(str(item["Key"])[len(prefix) :], int(item["Size"])))
        if not found and self.key and not self.key.endswith("/"):
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
            found.append(RemoteFile(PurePosixPath(self.key).name, int(head["ContentLength"])))
            self._single = True
        return found

    def open(self, path: str, offset: int) -> IO[bytes]:
        key = self.key if getattr(self, "_single", False) else f"{self.key.rstrip('/')}/{path}".lstrip("/")
        extra = {"Range": f"bytes={offset}-"} if offset else {}
        return self.client.get_object(Bucket=self.bucket, Key=key, **extra)["Body"]  # type: ignore[no-any-return]


def s3_client() -> Any:
    """An S3 client for the environment: the chart's endpoint (path-style, as MinIO and Ceph want)."""
    import boto3
    from botocore.config import Config

    endpoint = endpoint_from_env()
    config = Config(retries={"mode": "standard", "max_attempts": 5}, s3={"addressing_style": "path"})
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=os.environ.get("AWS_REGION") or "us-east-1",
        config=config,
    )


_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def check_source(source: str) -> None:
    """Refuse a source that could make the download read anything but the model: an ``hf://`` name
    that is not ``org/repo`` (no ``..``, no further path), an ``s3://`` bucket that is not a bucket
    name or a key with an empty, ``.`` or ``..`` segment."""
    if source.startswith("hf://"):
        repo = repository(source)
        if not _HF_REPO.match(repo) or ".." in repo:
            raise PrefetchError(f"{source}: not a Hugging Face repository (hf://org/repo[:TAG])")
        return
    bucket, _, key = source.removeprefix("s3://").partition("/")
    segments = key.rstrip("/").split("/") if key else []
    if not _BUCKET.match(bucket) or any(part in ("", ".", "..") for part in segments):
        raise PrefetchError(f"{source}: not an S3 bucket and prefix (s3://bucket/prefix)")


def open_source(source: str, revision: str = "main") -> RemoteSource:
    """The :class:`RemoteSource` of an ``hf://`` or ``s3://`` source (checked by :func:`check_source`)."""
    check_source(source)
    if source.startswith("hf://"):
        endpoint = os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT
        return HubSource(endpoint, repository(source), revision, os.environ.get("HF_TOKEN") or None)
    if source.startswith("s3://"):
        return S3Source(source, s3_client())
    raise PrefetchError(f"{source}: only hf:// and s3:// sources are downloaded ahead")


# ---------------------------------------------------------------------------------- selection


def safe_relative(path: str) -> PurePosixPath:
    """``path`` as a relative path that stays below the model's folder; :class:`PrefetchError` else."""
    parts = tuple(path.split("/"))
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise PrefetchError(f"weights file {path!r}: not a plain relative path; refused")
    if parts[0] in _RESERVED:
        raise PrefetchError(f"weights file {path!r}: its name is the cache's own; refused")
    return PurePosixPath(*parts)


def select_files(
    files: Sequence[RemoteFile], runtime: str, selection: str
) -> tuple[list[RemoteFile], str | None]:
    """The files a server of ``runtime`` needs, and the GGUF entry file (llama.cpp). vLLM: every file
    but duplicate weight formats when safetensors are there. llama.cpp: the ``.gguf`` files whose name
    contains ``selection`` (all splits of a split model); exactly one model must match."""
    if runtime != "llamacpp":
        if any(f.path.endswith(".safetensors") for f in files):
            files = [
                f
                for f in files
                if not f.path.endswith(_ALTERNATE_WEIGHTS) and not f.path.startswith("original/")
            ]
        return list(files), None
    ggufs = [f for f in files if f.path.lower().endswith(".gguf")]
    if selection:
        ggufs = [f for f in ggufs if selection.lower() in PurePosixPath(f.path).name.lower()]
    models = {_SPLIT.sub("", f.path) for f in ggufs}
    if len(models) != 1:
        named = ", ".join(sorted(f.path for f in ggufs)[:6]) or "none"
        raise PrefetchError(
            f"GGUF selection {selection or '(any)'!r} matches {len(models)} models, not one ({named})"
        )
    chosen = sorted(ggufs, key=lambda f: f.path)
    return chosen, chosen[0].path


# ---------------------------------------------------------------------------------- download


def prefetch(remote: RemoteSource, source: str, runtime: str, quantization: str, cache: Path) -> Path:
    """Make ``<cache>/kubejury-weights/<key>`` complete (module docstring); its path."""
    selection = gguf_selection(source, runtime, quantization)
    folder = Path(model_dir(str(cache), source, selection))
    if (folder / COMPLETE_MARKER).exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / LOCK_FILE):
        if (folder / COMPLETE_MARKER).exists():  # another Job finished while this one waited
            return folder
        files, entry = select_files(remote.files(), runtime, selection)
        if not files:
            raise PrefetchError(f"{source}: no files to download")
        reporter = _Progress(source, sum(f.size for f in files))
        for item in files:
            _fetch_file(remote, item, folder, reporter)
        if entry is not None:
            _link_entry(folder, entry)
        _write_marker(folder, source, selection, files)
    return folder


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _inside(folder: Path, relative: PurePosixPath) -> Path:
    target = folder.joinpath(*relative.parts)
    if not target.resolve().is_relative_to(folder.resolve()):
        raise PrefetchError(f"weights file {relative}: resolves outside the model's folder; refused")
    return target


def _fetch_file(remote: RemoteSource, item: RemoteFile, folder: Path, progress: _Progress) -> None:
    """One file, below ``.partial/`` then renamed into place once it has its listed size."""
    relative = safe_relative(item.path)
    final = _inside(folder, relative)
    if final.is_file() and final.stat().st_size == item.size:
        progress.add(item.size)  # renamed into place by an earlier attempt: complete
        return
    part = _inside(folder, PurePosixPath(PARTIAL_FOLDER, *relative.parts))
    part.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, ATTEMPTS + 1):
        have = part.stat().st_size if part.exists() else 0
        if have > item.size:
            part.unlink()
            have = 0
        progress.add(have)
        try:
            if have < item.size:
                _append(remote, item.path, part, have, progress)
        except (OSError, urllib.error.URLError) as error:
            progress.add(-(part.stat().st_size if part.exists() else 0))
            if attempt == ATTEMPTS:
                raise
            print(
                f"prefetch {item.path}: {error}; resuming (attempt {attempt + 1})",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(min(30.0, 2.0**attempt))
            continue
        if part.stat().st_size == item.size and _digest_matches(part, item):
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, final)
            return
        progress.add(-part.stat().st_size)
        if part.stat().st_size == item.size:  # whole, but not the listed content: start again
            print(f"prefetch {item.path}: SHA-256 is not the listed one; downloading again", file=sys.stderr)
            part.unlink()
    raise OSError(f"{item.path}: {part.stat().st_size} bytes after {ATTEMPTS} attempts, listed {item.size}")


def _digest_matches(part: Path, item: RemoteFile) -> bool:
    """The file's SHA-256 is the listed one (true when none is listed)."""
    if item.sha256 is None:
        return True
    digest = hashlib.sha256()
    with open(part, "rb") as handle:
        while block := handle.read(CHUNK_BYTES * 8):
            digest.update(block)
    return digest.hexdigest() == item.sha256


def _append(remote: RemoteSource, path: str, part: Path, offset: int, progress: _Progress) -> None:
    stream = remote.open(path, offset)
    try:
        with open(part, "ab") as out:
            while chunk := stream.read(CHUNK_BYTES):
                out.write(chunk)
                progress.add(len(chunk))
            out.flush()
            os.fsync(out.fileno())
    finally:
        stream.close()


def _link_entry(folder: Path, entry: str) -> None:
    """``model.gguf`` → the chosen GGUF file (its first split), as a relative link, made atomically."""
    link = folder / GGUF_ENTRY
    temporary = folder / f".{GGUF_ENTRY}.tmp"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(entry)
    os.replace(temporary, link)


def _write_marker(folder: Path, source: str, selection: str, files: Sequence[RemoteFile]) -> None:
    document = {
        "source": source,
        "selection": selection,
        "files": [{"path": f.path, "size": f.size} for f in files],
        "completedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    temporary = folder / f"{COMPLETE_MARKER}.tmp"
    temporary.write_text(json.dumps(document, indent=1))
    os.replace(temporary, folder / COMPLETE_MARKER)


class _Progress:
    """A progress line on stdout every few seconds: bytes there, of the total, and the rate."""

    def __init__(self, source: str, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.total, self.clock = source, total, clock
        self.done = 0
        self.started = self.last = clock()

    def add(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            rate = self.done / max(1e-9, now - self.started)
            print(
                f"prefetch {self.source}: {self.done}/{self.total} bytes, {rate / 1e6:.1f} MB/s", flush=True
            )
