"""The one home of storage side effects: run data on a local disk (``file://``) or S3 (``s3://``).

Every stage reads and writes through :func:`open_storage`. Keys are relative, ``/``-separated
paths under the storage root (the ``spec.storage.uri``); the layout of a run under that root is
fixed by :class:`RunLayout` and documented in ``docs/storage.md``.

Guarantees the rest of kubejury relies on:

- **Atomic writes.** A reader never sees a half-written object. Locally the bytes go to a temp
  file in the same directory, are fsync'ed and then ``os.replace``'d over the final name; on S3 an
  object only becomes visible once uploaded whole (``PutObject``, or a multipart upload, which S3
  publishes only on ``CompleteMultipartUpload``).
- **Append by new immutable shards.** Stages never rewrite a results file: each batch of records is
  a new ``part-<seq>-<uuid>.parquet`` shard (:mod:`kubejury.files.shards` encodes it; runs made
  before issue 26 hold ``part-<seq>-<uuid>.jsonl`` shards, which still read), so a crash loses at
  most the batch in flight and a retry never clobbers another writer's shard. Readers take the
  union of shards (and de-duplicate by record key; see the stages).
- **Sorted listings** so every reader sees records in the same order.
- **Bounded reads.** A reader that does not trust the store (the operator reading a tenant's
  run) passes ``max_bytes`` to :meth:`Storage.read_bytes`: the body is read in chunks and
  refused one chunk past the cap, never allocated whole. A listing returns at most ``max_keys``
  keys (:data:`MAX_LIST_KEYS` by default). Every S3 response that is not an object body (a
  listing page, an error) is held to :data:`MAX_RESPONSE_BYTES`, and every S3 body to a total
  time (:class:`S3Timeouts`), so a hostile endpoint can neither exhaust memory nor hold a
  thread by trickling.
- **No way out of the root.** Keys are checked (no ``..``, no absolute paths); ``file://`` URIs
  with ``%`` are refused rather than decoded (``%2e%2e`` would be ``..``); on disk no symbolic
  link below the root is ever followed (:class:`LocalStorage`).

Also here: :func:`read_uri`, which fetches a benchmark (or any input file) from ``file://``,
a plain path, ``s3://`` or ``http(s)://``.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import errno
import io
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kubejury.errors import ConfigError, InputError
from kubejury.records.progress import progress_file_name

# Objects at or above this size go to S3 as a multipart upload (boto3 TransferConfig).
MULTIPART_THRESHOLD = 16 * 1024 * 1024
MULTIPART_CHUNKSIZE = 8 * 1024 * 1024
DEFAULT_MAX_ATTEMPTS = 8
SHARD_SEQ_DIGITS = 6
_TMP_PREFIX = ".tmp-"
#: The suffixes of record shards: Parquet, written since issue 26, and JSONL, of older runs.
SHARD_SUFFIXES = ("parquet", "jsonl")
_SHARD_RE = re.compile(r"^part-(?P<seq>\d+)-(?P<uid>[0-9a-f]+)\.(?P<suffix>parquet|jsonl)$")
_CHUNK = 64 * 1024

MAX_LIST_KEYS = 100_000
"""Most keys one listing returns. A whole run (every shard of every model, judge and series, the
progress records and the report) is a few thousand objects; a listing beyond this is refused,
not collected (100k keys of ~100 bytes is already ~10 MiB of names)."""

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Largest S3 response that is not an object body read by the caller: a listing page (1000 keys
is ~300 KiB of XML), an error document, a HEAD. Anything bigger comes from a broken or hostile
endpoint and is cut off without being read whole."""


class StorageError(ConfigError):
    """Storage that cannot be used: unknown scheme, missing bucket, no credentials, bad key."""


@dataclass(frozen=True)
class S3Credentials:
    """Explicit S3 credentials; when not given, boto3's default chain (env vars, profile, IRSA) is used."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


def _check_key(key: str) -> str:
    """Reject keys that could escape the storage root or mean different things on disk and on S3."""
    if not key or key.startswith("/") or "\\" in key:
        raise StorageError(f"invalid storage key {key!r}: use a relative path with '/' separators")
    if any(p in ("", ".", "..") for p in key.split("/")):
        raise StorageError(f"invalid storage key {key!r}: empty, '.' or '..' path segments are not allowed")
    return key


def _check_prefix(prefix: str) -> str:
    if prefix:
        _check_key(prefix.rstrip("/"))
    return prefix


def _too_large(source: str, max_bytes: int) -> StorageError:
    return StorageError(
        f"{source} is larger than {max_bytes} bytes (the cap for this read); not read further"
    )


def _too_many(source: str, max_keys: int) -> StorageError:
    return StorageError(
        f"listing {source} found more than {max_keys} keys (the cap for one listing); refused"
    )


class Storage(ABC):
    """Key/value storage of run data with atomic whole-object writes.

    Subclasses implement five primitives; the JSON and shard helpers are shared.
    """

    uri: str

    # -- primitives -------------------------------------------------------------------------
    @abstractmethod
    def read_bytes(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """The whole object; raises ``FileNotFoundError`` when it does not exist and
        :class:`StorageError` when it is larger than ``max_bytes`` (read no further than that)."""

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None:
        """Write the whole object atomically (readers see the old object, the new one, or nothing)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is stored under exactly this key."""

    @abstractmethod
    def list(self, prefix: str = "", *, max_keys: int = MAX_LIST_KEYS) -> builtins.list[str]:
        """Keys that start with ``prefix`` (a plain string prefix), sorted; no in-flight temporaries.
        More than ``max_keys`` keys raise :class:`StorageError` (they are not collected)."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every object whose key starts with ``prefix``; returns how many were deleted."""

    def delete_keys(self, keys: Sequence[str]) -> int:
        """Delete exactly these objects (absent ones are skipped); returns how many were asked for.
        Subclasses delete in bulk; this fallback deletes one prefix (the whole key) at a time."""
        for key in keys:
            self.delete_prefix(_check_key(key))
        return len(keys)

    # -- shared helpers ---------------------------------------------------------------------
    def uri_for(self, key: str) -> str:
        """The full URI of a key, for messages and reports."""
        return self.uri.rstrip("/") + "/" + key

    def read_json(self, key: str, *, max_bytes: int | None = None) -> Any:
        """A JSON document; ``FileNotFoundError`` when absent, :class:`InputError` when not JSON,
        :class:`StorageError` when larger than ``max_bytes``."""
        data = self.read_bytes(key, max_bytes=max_bytes)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InputError(self.uri_for(key), f"not valid JSON: {exc}") from exc

    def read_json_or_none(self, key: str, *, max_bytes: int | None = None) -> Any:
        try:
            return self.read_json(key, max_bytes=max_bytes)
        except FileNotFoundError:
            return None

    def write_json(self, key: str, obj: Any) -> None:
        """Write (atomically replace) a small JSON document, e.g. a progress record."""
        self.write_bytes(key, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")

    def shard_keys(self, prefix: str) -> builtins.list[str]:
        """The ``part-*.parquet`` and ``part-*.jsonl`` shards directly under the folder ``prefix``,
        in sequence order."""
        folder = prefix.rstrip("/") + "/"
        keys = []
        for key in self.list(folder):
            rest = key[len(folder) :]
            if "/" not in rest and _SHARD_RE.match(rest):
                keys.append(key)
        return keys  # zero-padded sequence numbers sort correctly as strings

    def next_shard_seq(self, prefix: str) -> int:
        """One more than the highest shard sequence number under ``prefix`` (0 when none)."""
        keys = self.shard_keys(prefix)
        if not keys:
            return 0
        return max(shard_seq(key) for key in keys) + 1

    def put_shard(self, prefix: str, data: bytes, *, suffix: str, seq: int | None = None) -> str:
        """Write ``data`` as one new immutable shard ``part-<seq>-<uuid>.<suffix>`` under the folder
        ``prefix`` (atomically, as every write) and return its key.

        ``seq`` defaults to one more than the highest shard already there (so shards read back in
        write order), and the random suffix keeps two writers that pick the same ``seq`` from
        overwriting each other.
        """
        if suffix not in SHARD_SUFFIXES:
            raise StorageError(f"shard suffix {suffix!r} is not one of {', '.join(SHARD_SUFFIXES)}")
        if seq is None:
            seq = self.next_shard_seq(prefix)
        if seq < 0 or seq >= 10**SHARD_SEQ_DIGITS:
            raise StorageError(f"shard sequence {seq} out of range")
        key = f"{prefix.rstrip('/')}/part-{seq:0{SHARD_SEQ_DIGITS}d}-{uuid.uuid4().hex}.{suffix}"
        self.write_bytes(_check_key(key), data)
        return key

    def write_jsonl_shard(
        self, prefix: str, records: Iterable[Mapping[str, Any]], *, seq: int | None = None
    ) -> str | None:
        """Write ``records`` as one JSONL shard, the form runs made before issue 26 hold (the stages
        write Parquet through :func:`kubejury.files.shards.write_records`). Returns the key
        written, or ``None`` when there were no records (no empty shards)."""
        lines = [orjson.dumps(dict(r), option=orjson.OPT_SORT_KEYS) for r in records]
        if not lines:
            return None
        return self.put_shard(prefix, b"\n".join(lines) + b"\n", suffix="jsonl", seq=seq)


def shard_seq(key: str) -> int:
    """The sequence number of a shard key (``…/part-000003-<uuid>.parquet`` → 3)."""
    match = _SHARD_RE.match(key.rsplit("/", 1)[-1])
    if match is None:
        raise StorageError(f"{key!r} is not a shard key (part-<seq>-<uuid>.parquet or .jsonl)")
    return int(match["seq"])


def shard_suffix(key: str) -> str:
    """``parquet`` or ``jsonl``: the format of a shard key."""
    return key.rsplit(".", 1)[-1]


def parse_jsonl(data: bytes, source: str) -> Iterator[dict[str, Any]]:
    """Records of one JSONL document; blank lines are skipped, anything else must be an object."""
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(source, f"not valid JSON: {exc}", location=f"line {lineno}") from exc
        if not isinstance(record, dict):
            raise InputError(source, "expected a JSON object", location=f"line {lineno}")
        yield record


# --------------------------------------------------------------------------------------------
# Local disk
# --------------------------------------------------------------------------------------------


class LocalStorage(Storage):
    """A directory on local disk; created on first write.

    Symbolic links are never followed below ``no_links_below`` (default: the root itself): every
    folder of a key is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so a link
    planted on a shared results volume cannot lead a write, read, listing or delete into another
    run's folder or out of the volume, not even by being swapped in between a check and the use.
    """

    def __init__(self, root: str | Path, *, no_links_below: str | Path | None = None) -> None:
        self.root = Path(root).expanduser().absolute()
        self.uri = self.root.as_uri()
        anchor = Path(no_links_below).expanduser().absolute() if no_links_below is not None else self.root
        if anchor != self.root and anchor not in self.root.parents:
            raise StorageError(
                f"storage root {self.root} is not below {anchor}, the folder links are checked from"
            )
        self._anchor = anchor
        self._root_parts = self.root.relative_to(anchor).parts

    # -- walking folders without following links --------------------------------------------
    def _open_dir(self, parts: Sequence[str], *, create: bool = False) -> int:
        """A descriptor of the folder ``parts`` below the root; raises ``FileNotFoundError``
        (also when a part is a file) and :class:`StorageError` for a link."""
        return self._open_from_anchor([*self._root_parts, *parts], create=create)

    def _open_from_anchor(self, parts: Sequence[str], *, create: bool = False) -> int:
        """A descriptor of the folder ``parts`` below the anchor, each one entered without
        following a link (and made first when ``create``)."""
        if create:
            self._anchor.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._anchor, _DIR_FLAGS | os.O_CLOEXEC)
        try:
            for depth, name in enumerate(parts, start=1):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                child = self._open_child(fd, name, "/".join(parts[:depth]), _DIR_FLAGS)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_child(self, dir_fd: int, name: str, shown: str, flags: int) -> int:
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_link(dir_fd, name):
                raise self._link_error(shown) from exc
            if exc.errno == errno.ENOTDIR:
                raise FileNotFoundError(f"{self._anchor}/{shown}") from exc
            raise

    def _link_error(self, shown: str) -> StorageError:
        return StorageError(
            f"{self._anchor}/{shown} is a symbolic link: storage never follows links "
            f"(below {self._anchor}), so nothing there is read, written, listed or deleted"
        )

    def _key_dir(self, key: str, *, create: bool = False) -> tuple[int, str]:
        """The descriptor of the folder holding ``key``, and the key's file name in it."""
        *folders, name = _check_key(key).split("/")
        return self._open_dir(folders, create=create), name

    def _shown(self, key: str) -> str:
        return "/".join((*self._root_parts, key))

    # -- primitives -------------------------------------------------------------------------
    def read_bytes(self, key: str, *, max_bytes: int | None = None) -> bytes:
        try:
            dir_fd, name = self._key_dir(key)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise FileNotFoundError(str(self.root / key)) from exc
        try:
            fd = self._open_child(dir_fd, name, self._shown(key), os.O_RDONLY | os.O_NONBLOCK)
        finally:
            os.close(dir_fd)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise FileNotFoundError(str(self.root / key))
            if not stat.S_ISREG(info.st_mode):
                raise StorageError(f"{self.uri_for(key)} is not a regular file; not read")
            if max_bytes is not None and info.st_size > max_bytes:
                raise _too_large(self.uri_for(key), max_bytes)
            return _read_fd(fd, self.uri_for(key), max_bytes)
        finally:
            os.close(fd)

    def write_bytes(self, key: str, data: bytes) -> None:
        dir_fd, name = self._key_dir(key, create=True)
        try:
            if _is_link(dir_fd, name):
                raise self._link_error(self._shown(key))
            # Not mkstemp: its files are 0600; this one gets the usual permissions (0666 minus umask).
            tmp = f"{_TMP_PREFIX}{uuid.uuid4().hex}-{name}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, 0o666, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                # A rename replaces a link swapped in since the check, never what it points to.
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)  # persist the rename itself (the directory entry)
        finally:
            os.close(dir_fd)

    def exists(self, key: str) -> bool:
        try:
            dir_fd, name = self._key_dir(key)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        finally:
            os.close(dir_fd)
        if stat.S_ISLNK(info.st_mode):
            raise self._link_error(self._shown(key))
        return stat.S_ISREG(info.st_mode)

    def delete_keys(self, keys: Sequence[str]) -> int:
        """Unlink each key's file through its folder's descriptor: a folder that is a link is refused,
        a key that is a link loses the link itself, never its target; absent keys are skipped."""
        for key in keys:
            try:
                dir_fd, name = self._key_dir(key)
            except (FileNotFoundError, NotADirectoryError):
                continue
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
        return len(keys)

    def _base(self, prefix: str) -> tuple[str, int | None]:
        """The deepest folder ``prefix`` names fully (relative to the root) and its descriptor,
        ``None`` when it does not exist."""
        _check_prefix(prefix)
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        try:
            return base, self._open_dir(base.split("/") if base else [])
        except (FileNotFoundError, NotADirectoryError):
            return base, None

    def list(self, prefix: str = "", *, max_keys: int = MAX_LIST_KEYS) -> builtins.list[str]:
        base, fd = self._base(prefix)
        if fd is None:
            return []
        keys: builtins.list[str] = []
        try:
            for key in self._walk_files(fd, base, prefix):
                keys.append(key)
                if len(keys) > max_keys:
                    raise _too_many(self.uri_for(prefix), max_keys)
        finally:
            os.close(fd)
        keys.sort()
        return keys

    def _walk_files(self, dir_fd: int, rel: str, prefix: str) -> Iterator[str]:
        """Keys of the regular files (no temporaries, no links) below ``dir_fd`` that start with
        ``prefix``; folders are entered only through ``O_NOFOLLOW`` descriptors."""
        with os.scandir(dir_fd) as entries:
            found = [
                (e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries
            ]
        for name, is_dir, is_file in found:
            key = f"{rel}/{name}" if rel else name
            if is_dir and _may_hold(key, prefix):
                child = self._open_child(dir_fd, name, self._shown(key), _DIR_FLAGS)
                try:
                    yield from self._walk_files(child, key, prefix)
                finally:
                    os.close(child)
            elif is_file and not name.startswith(_TMP_PREFIX) and key.startswith(prefix):
                yield key

    def delete_prefix(self, prefix: str) -> int:
        """Delete the objects under ``prefix``, with the temporaries of writers that died, links
        (the link itself, never its target) and the folders this leaves empty; with ``""`` the
        root folder too."""
        base, fd = self._base(prefix)
        if fd is None:
            return 0
        try:
            deleted = self._delete_below(fd, base, prefix)
        finally:
            os.close(fd)
        if not prefix or (base and (base + "/").startswith(prefix)):
            self._remove_empty_folder(base)
        return deleted

    def _delete_below(self, dir_fd: int, rel: str, prefix: str) -> int:
        deleted = 0
        with os.scandir(dir_fd) as entries:
            found = [
                (e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries
            ]
        for name, is_dir, is_file in found:
            key = f"{rel}/{name}" if rel else name
            if is_dir:
                if not _may_hold(key, prefix):
                    continue
                child = self._open_child(dir_fd, name, self._shown(key), _DIR_FLAGS)
                try:
                    deleted += self._delete_below(child, key, prefix)
                finally:
                    os.close(child)
                if (key + "/").startswith(prefix):
                    with contextlib.suppress(OSError):  # not empty: a writer added to it meanwhile
                        os.rmdir(name, dir_fd=dir_fd)
            elif key.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)  # a link: the link itself
                    deleted += int(is_file and not name.startswith(_TMP_PREFIX))
        return deleted

    def _remove_empty_folder(self, rel: str) -> None:
        """Remove the folder ``rel`` (``""``: the root) when empty, through its parent's descriptor."""
        parts = [*self._root_parts, *(rel.split("/") if rel else [])]
        if not parts:
            with contextlib.suppress(OSError):
                os.rmdir(self._anchor)
            return
        try:
            parent = self._open_from_anchor(parts[:-1])
        except (OSError, StorageError):
            return
        try:
            with contextlib.suppress(OSError):  # not empty: a writer added to it meanwhile
                os.rmdir(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _may_hold(folder: str, prefix: str) -> bool:
    """Whether keys below ``folder`` can start with ``prefix`` (a plain string prefix)."""
    return (folder + "/").startswith(prefix) or prefix.startswith(folder + "/")


def _read_fd(fd: int, source: str, max_bytes: int | None) -> bytes:
    """A file's bytes, read in chunks and stopped one byte past ``max_bytes`` (a file that grew
    after its size was checked)."""
    chunks: builtins.list[bytes] = []
    size = 0
    while chunk := os.read(fd, _CHUNK):
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise _too_large(source, max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------
# S3 (AWS, MinIO, Ceph RGW, ...)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Timeouts:
    """How long one S3 request may take: to connect, between two reads of the socket, and for a
    whole response body (a server sending a byte at a time restarts the read timeout on every
    byte; the body deadline does not restart)."""

    connect_s: float = 10.0
    read_s: float = 60.0
    body_s: float = 300.0


_BODY_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("kubejury_s3_body_cap", default=None)


class _BodyTooLarge(Exception):
    """An S3 response body past its cap (turned into a :class:`StorageError` naming the key)."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"larger than {cap} bytes")
        self.cap = cap


class _BufferedBody(io.BytesIO):
    """A response body already read (within its cap), in the shape botocore reads a raw body."""

    def stream(self, *_args: Any, **_kwargs: Any) -> Iterator[bytes]:
        yield self.getvalue()


def _read_response_body(raw: Any, cap: int, body_s: float, url: str) -> bytes:
    """A urllib3 response's body, refused past ``cap`` bytes (by its Content-Length before any
    byte is read, else one chunk past) or ``body_s`` seconds; ``read1`` returns what has arrived,
    so the deadline is checked at least once per read timeout."""
    from botocore.exceptions import ReadTimeoutError

    declared = str(raw.headers.get("Content-Length") or "")
    if declared.isdigit() and int(declared) > cap:
        raise _BodyTooLarge(cap)
    deadline = time.monotonic() + body_s
    chunks: builtins.list[bytes] = []
    size = 0
    while chunk := raw.read1(_CHUNK):
        size += len(chunk)
        if size > cap:
            raise _BodyTooLarge(cap)
        if time.monotonic() > deadline:
            raise ReadTimeoutError(endpoint_url=f"{url} (body not complete within {body_s:g} s)")
        chunks.append(chunk)
    return b"".join(chunks)


class _BoundedSession:
    """The client's own HTTP session (same TLS, proxies and pool), with every response held to a
    size and a total time, unless it is an object body read without a cap (a Job streaming its
    own shards).

    botocore reads a non-streaming response (a listing page) whole before parsing it, with no
    limit. Here the request is sent with the body left unread, the body is read within the cap
    and the deadline, and botocore gets the bytes. A botocore ``HTTPClientError`` (the read
    timeout) keeps botocore's retries; a body too large is not retried. In-process mocks that
    answer in botocore's ``before-send`` event never reach this session.
    """

    def __init__(self, inner: Any, timeouts: S3Timeouts) -> None:
        self._inner = inner
        self._timeouts = timeouts

    def send(self, request: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        cap = _BODY_CAP.get()
        if request.stream_output and cap is None:
            return self._inner.send(request)
        streaming = request.stream_output
        request.stream_output = True  # the session then leaves the body unread
        try:
            response = self._inner.send(request)
        finally:
            request.stream_output = streaming
        raw = response.raw
        limit = cap if cap is not None else MAX_RESPONSE_BYTES
        try:
            body = _read_response_body(raw, limit, self._timeouts.body_s, request.url)
        except BaseException:
            raw.close()  # the rest of the body is never read: the connection is dropped, not pooled
            raise
        raw.release_conn()
        return AWSResponse(response.url, response.status_code, response.headers, _BufferedBody(body))

    def close(self) -> None:
        self._inner.close()


def _bound_responses(client: Any, timeouts: S3Timeouts) -> None:
    """Put :class:`_BoundedSession` between ``client`` and its HTTP session (botocore offers no
    public hook after the request is sent and before the body is read)."""
    endpoint = client._endpoint
    endpoint.http_session = _BoundedSession(endpoint.http_session, timeouts)


def _s3_client(
    *,
    endpoint_url: str | None,
    region: str | None,
    path_style: bool,
    credentials: S3Credentials | None,
    max_attempts: int,
    timeouts: S3Timeouts,
) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        s3={"addressing_style": "path" if path_style else "auto"},
        connect_timeout=timeouts.connect_s,
        read_timeout=timeouts.read_s,
        max_pool_connections=32,
    )
    kwargs: dict[str, Any] = {"config": config}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    kwargs["region_name"] = (
        region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    )
    if credentials is not None:
        kwargs["aws_access_key_id"] = credentials.access_key_id
        kwargs["aws_secret_access_key"] = credentials.secret_access_key
        if credentials.session_token:
            kwargs["aws_session_token"] = credentials.session_token
    client = boto3.session.Session().client("s3", **kwargs)
    _bound_responses(client, timeouts)
    return client


def _is_not_found(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


class S3Storage(Storage):
    """A bucket (and optional key prefix) on any S3-compatible endpoint."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        path_style: bool = True,
        credentials: S3Credentials | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeouts: S3Timeouts = S3Timeouts(),
        multipart_threshold: int = MULTIPART_THRESHOLD,
        multipart_chunksize: int = MULTIPART_CHUNKSIZE,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise StorageError("s3:// URI without a bucket name")
        if ".." in prefix.split("/"):
            raise StorageError(f"s3://{bucket}/{prefix.lstrip('/')}: '..' path segments are not allowed")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.endpoint_url = endpoint_url
        self.multipart_threshold = multipart_threshold
        self.multipart_chunksize = multipart_chunksize
        self.client = client or _s3_client(
            endpoint_url=endpoint_url,
            region=region,
            path_style=path_style,
            credentials=credentials,
            max_attempts=max_attempts,
            timeouts=timeouts,
        )

    def _key(self, key: str) -> str:
        return self.prefix + _check_key(key)

    def read_bytes(self, key: str, *, max_bytes: int | None = None) -> bytes:
        token = _BODY_CAP.set(max_bytes)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            body: bytes = response["Body"].read()
        except _BodyTooLarge as exc:
            raise _too_large(self.uri_for(key), exc.cap) from None
        except Exception as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(self.uri_for(key)) from exc
            raise
        finally:
            _BODY_CAP.reset(token)
        return body

    def write_bytes(self, key: str, data: bytes) -> None:
        full = self._key(key)
        if len(data) < self.multipart_threshold:
            self.client.put_object(Bucket=self.bucket, Key=full, Body=data)
            return
        from boto3.s3.transfer import TransferConfig

        transfer = TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_chunksize,
            use_threads=True,
            max_concurrency=4,
        )
        # A multipart upload becomes visible only when completed, so this stays atomic.
        self.client.upload_fileobj(io.BytesIO(data), self.bucket, full, Config=transfer)

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            if _is_not_found(exc):
                return False
            raise
        return True

    def _pages(self, prefix: str) -> Iterator[builtins.list[str]]:
        """The keys under ``prefix``, a listing page (up to 1000 keys) at a time."""
        _check_prefix(prefix)
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
                yield [str(obj["Key"])[len(self.prefix) :] for obj in page.get("Contents", [])]
        except _BodyTooLarge as exc:
            raise StorageError(
                f"listing {self.uri_for(prefix)}: a response larger than {exc.cap} bytes; refused"
            ) from None

    def list(self, prefix: str = "", *, max_keys: int = MAX_LIST_KEYS) -> builtins.list[str]:
        keys: builtins.list[str] = []
        for page in self._pages(prefix):
            keys.extend(page)
            if len(keys) > max_keys:
                raise _too_many(self.uri_for(prefix), max_keys)
        keys.sort()
        return keys

    def delete_keys(self, keys: Sequence[str]) -> int:
        """``DeleteObjects`` in batches of 1000 (S3's limit); absent keys are no error on S3."""
        full = [self._key(key) for key in keys]
        for start in range(0, len(full), 1000):
            batch = full[start : start + 1000]
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
            )
        return len(full)

    def delete_prefix(self, prefix: str) -> int:
        """Delete page by page as the listing goes (nothing collected); at most
        :data:`MAX_LIST_KEYS` objects per call, then :class:`StorageError` (call again for the rest)."""
        deleted = 0
        for page in self._pages(prefix):
            if page:
                self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.prefix + k} for k in page], "Quiet": True},
                )
            deleted += len(page)
            if deleted >= MAX_LIST_KEYS:
                raise StorageError(
                    f"deleted {deleted} objects under {self.uri_for(prefix)}, the most one call deletes; "
                    "the rest is deleted on the next call"
                )
        return deleted


# --------------------------------------------------------------------------------------------
# Opening storage and reading input URIs
# --------------------------------------------------------------------------------------------


def endpoint_from_env() -> str | None:
    """An S3 endpoint set in the environment (``KUBEJURY_S3_ENDPOINT``, ``AWS_ENDPOINT_URL[_S3]``)."""
    return (
        os.environ.get("KUBEJURY_S3_ENDPOINT")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )


def _file_path(uri: str) -> Path:
    """``file:///abs`` → ``/abs``; ``file://rel/dir`` and ``rel/dir`` stay relative.

    A ``file://`` URI with ``%`` anywhere is refused, never decoded: ``%2e%2e`` would become
    ``..`` after every check that reads the URI as written (the admission's root check among
    them). A plain path is taken literally, ``%`` and all.
    """
    if not uri.startswith("file://"):
        return Path(uri).expanduser()
    if "%" in uri:
        raise StorageError(
            f"storage URI {uri!r}: '%' (percent-encoding) is not accepted in file:// URIs; "
            "write the path as it is on disk"
        )
    return Path(uri[len("file://") :]).expanduser()


def open_storage(
    uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = True,
    credentials: S3Credentials | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    timeouts: S3Timeouts = S3Timeouts(),
    no_links_below: str | None = None,
) -> Storage:
    """Storage rooted at ``uri``: ``file:///abs/dir``, a plain path, or ``s3://bucket[/prefix]``.

    For S3, ``endpoint_url`` (MinIO, Ceph) defaults to ``$KUBEJURY_S3_ENDPOINT`` or
    ``$AWS_ENDPOINT_URL``; credentials default to boto3's chain (``AWS_ACCESS_KEY_ID`` …).
    On disk, ``no_links_below`` (a ``file://`` URI or path of a folder holding ``uri``; default
    ``uri`` itself) is where link checking starts: no symbolic link below it is followed.
    """
    if uri.startswith("s3://"):
        parsed = urllib.parse.urlparse(uri)
        return S3Storage(
            parsed.netloc,
            parsed.path,
            endpoint_url=endpoint_url or endpoint_from_env(),
            region=region,
            path_style=path_style,
            credentials=credentials,
            max_attempts=max_attempts,
            timeouts=timeouts,
        )
    if "://" in uri and not uri.startswith("file://"):
        raise StorageError(f"unsupported storage URI {uri!r}: use file:///path or s3://bucket/prefix")
    anchor = _file_path(no_links_below) if no_links_below is not None else None
    return LocalStorage(_file_path(uri), no_links_below=anchor)


#: Set by the operator in a Job whose results volume is mounted: the mount's path. The Job's storage
#: URI is the run's own folder below it, and no symbolic link below the mount is followed, not even
#: one planted at the run's folder or its namespace's (issue 29, finding 8).
STORAGE_MOUNT_ENV = "KUBEJURY_STORAGE_MOUNT"


MAX_DOWNLOAD_BYTES = 256 * 1024 * 1024
"""Largest input file fetched over http(s) (a benchmark of thousands of questions is a few MiB)."""


def _read_bounded(response: Any, uri: str, timeout_s: float, max_bytes: int) -> bytes:
    """The body of an HTTP response, within ``timeout_s`` in total and ``max_bytes``.

    The socket timeout only bounds each read (a server sending a byte at a time restarts it), so
    the whole download is also held to a deadline, checked between reads of at most 64 KiB.
    """
    deadline = time.monotonic() + timeout_s
    declared = response.headers.get("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise InputError(uri, f"download larger than {max_bytes} bytes ({declared} declared)")
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise InputError(uri, f"download not complete within {timeout_s:g} s ({size} bytes so far)")
        chunk = response.read1(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise InputError(uri, f"download larger than {max_bytes} bytes; not read further")
        chunks.append(chunk)


def read_uri(
    uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    credentials: S3Credentials | None = None,
    timeout_s: float = 60.0,
    base_dir: Path | None = None,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
) -> bytes:
    """The bytes of an input file at ``file://…``, a plain path, ``s3://bucket/key`` or ``http(s)://…``.

    Relative paths (``file://rel/x.jsonl``, ``rel/x.jsonl``) resolve against ``base_dir`` (e.g. the
    directory of the spec file) when given. Anything that cannot be read raises :class:`InputError`.
    """
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        try:
            path = _file_path(uri)
        except StorageError as exc:
            raise InputError(uri, str(exc)) from exc
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise InputError(uri, f"file not found ({path})") from exc
        except OSError as exc:
            raise InputError(uri, f"cannot read file: {exc.strerror or exc}") from exc
    if scheme == "s3":
        parsed = urllib.parse.urlparse(uri)
        key = parsed.path.lstrip("/")
        if not parsed.netloc or not key:
            raise InputError(uri, "an s3:// input must name a bucket and an object key")
        parent, _, name = key.rpartition("/")
        store = S3Storage(
            parsed.netloc,
            parent,
            endpoint_url=endpoint_url or endpoint_from_env(),
            region=region,
            credentials=credentials,
        )
        try:
            return store.read_bytes(name, max_bytes=max_bytes)
        except FileNotFoundError as exc:
            raise InputError(uri, "object not found") from exc
        except StorageError as exc:
            raise InputError(uri, str(exc)) from exc
    if scheme in ("http", "https"):
        request = urllib.request.Request(uri, headers={"User-Agent": "kubejury"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return _read_bounded(response, uri, timeout_s, max_bytes)
        except urllib.error.HTTPError as exc:
            raise InputError(uri, f"HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InputError(uri, f"cannot download: {reason}") from exc
    raise InputError(uri, f"unsupported URI scheme {scheme!r}: use file://, s3:// or https://")


# --------------------------------------------------------------------------------------------
# Layout of one run under the storage root (documented in docs/storage.md)
# --------------------------------------------------------------------------------------------

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def safe_name(name: str, what: str = "name") -> str:
    """Names become path segments; allow only characters safe on every filesystem and on S3."""
    if not _SAFE_NAME.match(name):
        raise StorageError(
            f"{what} {name!r} cannot be used in storage paths: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class RunLayout:
    """Where each piece of a run lives, relative to the storage root (see docs/storage.md).

    ``<run>/<series>/answers/<model>/part-*.parquet``, ``<run>/<series>/judgments/<judge>/part-*.parquet``
    (``part-*.jsonl`` in runs made before issue 26),
    ``<run>/<series>/anonymization/mapping.json``, ``<run>/<series>/progress/<stage>-<name>.json``,
    ``<run>/progress/aggregate-<name>.json``, ``<run>/report/…``, ``<run>/spec.json`` and
    ``<run>/reuse.json``.
    """

    run: str

    def __post_init__(self) -> None:
        safe_name(self.run, "run name")

    def series_prefix(self, series: str) -> str:
        return f"{self.run}/{safe_name(series, 'series name')}"

    def answers_prefix(self, series: str, model: str) -> str:
        return f"{self.series_prefix(series)}/answers/{safe_name(model, 'model name')}"

    def judgments_prefix(self, series: str, judge: str) -> str:
        return f"{self.series_prefix(series)}/judgments/{safe_name(judge, 'judge name')}"

    def anonymization_key(self, series: str) -> str:
        return f"{self.series_prefix(series)}/anonymization/mapping.json"

    def progress_key(self, series: str, stage: str, name: str, shard: tuple[int, int] | None = None) -> str:
        """``…/progress/<stage>-<name>.json``; one completion of a sharded stage writes its own
        ``<stage>-<name>.shard-<index>-of-<count>.json`` so that shards don't overwrite each other."""
        file = progress_file_name(safe_name(stage, "stage"), safe_name(name), shard)
        return f"{self.series_prefix(series)}/progress/{file}"

    def fingerprint_key(self, series: str, stage: str, name: str) -> str:
        """``…/fingerprints/<stage>-<name>.json``: what determined the stage's records."""
        return f"{self.series_prefix(series)}/fingerprints/{safe_name(stage, 'stage')}-{safe_name(name)}.json"

    def progress_prefix(self, series: str) -> str:
        return f"{self.series_prefix(series)}/progress/"

    def run_progress_key(self, stage: str, name: str) -> str:
        """Progress of a stage that spans all series (aggregation)."""
        return f"{self.run}/progress/{progress_file_name(safe_name(stage, 'stage'), safe_name(name))}"

    @property
    def report_prefix(self) -> str:
        return f"{self.run}/report"

    @property
    def spec_key(self) -> str:
        return f"{self.run}/spec.json"

    @property
    def reuse_key(self) -> str:
        """``<run>/reuse.json``: what the run copied from earlier runs (:mod:`kubejury.records.reuse`)."""
        return f"{self.run}/reuse.json"
