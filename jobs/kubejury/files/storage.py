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
  a new ``part-<seq>-<uuid>.jsonl`` shard, so a crash loses at most the batch in flight and a
  retry never clobbers another writer's shard. Readers take the union of shards (and de-duplicate
  by record key; see the stages).
- **Sorted listings** so every reader sees records in the same order.

Also here: :func:`read_uri`, which fetches a benchmark (or any input file) from ``file://``,
a plain path, ``s3://`` or ``http(s)://``.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
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
_SHARD_RE = re.compile(r"^part-(?P<seq>\d+)-(?P<uid>[0-9a-f]+)\.jsonl$")


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


class Storage(ABC):
    """Key/value storage of run data with atomic whole-object writes.

    Subclasses implement five primitives; the JSON and JSONL-shard helpers are shared.
    """

    uri: str

    # -- primitives -------------------------------------------------------------------------
    @abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """The whole object; raises ``FileNotFoundError`` when it does not exist."""

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None:
        """Write the whole object atomically (readers see the old object, the new one, or nothing)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is stored under exactly this key."""

    @abstractmethod
    def list(self, prefix: str = "") -> builtins.list[str]:
        """Keys that start with ``prefix`` (a plain string prefix), sorted; no in-flight temporaries."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every object whose key starts with ``prefix``; returns how many were deleted."""

    # -- shared helpers ---------------------------------------------------------------------
    def uri_for(self, key: str) -> str:
        """The full URI of a key, for messages and reports."""
        return self.uri.rstrip("/") + "/" + key

    def read_json(self, key: str) -> Any:
        """A JSON document; ``FileNotFoundError`` when absent, :class:`InputError` when not JSON."""
        data = self.read_bytes(key)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InputError(self.uri_for(key), f"not valid JSON: {exc}") from exc

    def read_json_or_none(self, key: str) -> Any:
        try:
            return self.read_json(key)
        except FileNotFoundError:
            return None

    def write_json(self, key: str, obj: Any) -> None:
        """Write (atomically replace) a small JSON document, e.g. a progress record."""
        self.write_bytes(key, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")

    def shard_keys(self, prefix: str) -> builtins.list[str]:
        """The ``part-*.jsonl`` shards directly under the folder ``prefix``, in sequence order."""
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
        match = _SHARD_RE.match(keys[-1].rsplit("/", 1)[-1])
        assert match is not None
        return int(match["seq"]) + 1

    def write_shard(
        self, prefix: str, records: Iterable[Mapping[str, Any]], *, seq: int | None = None
    ) -> str | None:
        """Write ``records`` as one new immutable JSONL shard under the folder ``prefix``.

        The shard is named ``part-<seq>-<uuid>.jsonl``; ``seq`` defaults to one more than the
        highest shard already there (so shards read back in write order), and the random suffix
        keeps two writers that pick the same ``seq`` from overwriting each other. Returns the
        key written, or ``None`` when there were no records (no empty shards).
        """
        lines = [orjson.dumps(dict(r), option=orjson.OPT_SORT_KEYS) for r in records]
        if not lines:
            return None
        if seq is None:
            seq = self.next_shard_seq(prefix)
        if seq < 0 or seq >= 10**SHARD_SEQ_DIGITS:
            raise StorageError(f"shard sequence {seq} out of range")
        key = f"{prefix.rstrip('/')}/part-{seq:0{SHARD_SEQ_DIGITS}d}-{uuid.uuid4().hex}.jsonl"
        self.write_bytes(_check_key(key), b"\n".join(lines) + b"\n")
        return key

    def read_jsonl(self, prefix: str) -> Iterator[dict[str, Any]]:
        """Every record of every shard under the folder ``prefix``, shard by shard, line by line.

        A line that is not a JSON object raises :class:`InputError` naming the shard and line.
        """
        for key in self.shard_keys(prefix):
            yield from parse_jsonl(self.read_bytes(key), self.uri_for(key))


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
    """A directory on local disk; created on first write."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().absolute()
        self.uri = self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*_check_key(key).split("/"))

    def read_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except IsADirectoryError as exc:
            raise FileNotFoundError(str(path)) from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not mkstemp: its files are 0600; this one gets the usual permissions (0666 minus umask).
        tmp = str(path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}-{path.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(path.parent)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> builtins.list[str]:
        _check_prefix(prefix)
        # Walk only the deepest directory the prefix names fully, then filter by string prefix.
        base_rel = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = self.root.joinpath(*base_rel.split("/")) if base_rel else self.root
        if not base.is_dir():
            return []
        keys: builtins.list[str] = []
        for dirpath, _dirnames, filenames in os.walk(base):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        keys.sort()
        return keys

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix)
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self._path(key).unlink()
        return len(keys)


def _fsync_dir(path: Path) -> None:
    """Persist the rename itself (the directory entry) where the OS allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# S3 (AWS, MinIO, Ceph RGW, ...)
# --------------------------------------------------------------------------------------------


def _s3_client(
    *,
    endpoint_url: str | None,
    region: str | None,
    path_style: bool,
    credentials: S3Credentials | None,
    max_attempts: int,
) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        s3={"addressing_style": "path" if path_style else "auto"},
        connect_timeout=10,
        read_timeout=60,
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
    return boto3.session.Session().client("s3", **kwargs)


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
        multipart_threshold: int = MULTIPART_THRESHOLD,
        multipart_chunksize: int = MULTIPART_CHUNKSIZE,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise StorageError("s3:// URI without a bucket name")
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
        )

    def _key(self, key: str) -> str:
        return self.prefix + _check_key(key)

    def read_bytes(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            if _is_not_found(exc):
                raise FileNotFoundError(self.uri_for(key)) from exc
            raise
        body: bytes = response["Body"].read()
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

    def list(self, prefix: str = "") -> builtins.list[str]:
        _check_prefix(prefix)
        paginator = self.client.get_paginator("list_objects_v2")
        keys: builtins.list[str] = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            for obj in page.get("Contents", []):
                keys.append(str(obj["Key"])[len(self.prefix) :])
        keys.sort()
        return keys

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix)
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self.prefix + k} for k in batch], "Quiet": True},
            )
        return len(keys)


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
    """``file:///abs`` → ``/abs``; ``file://rel/dir`` and ``rel/dir`` stay relative."""
    raw = urllib.parse.unquote(uri[len("file://") :]) if uri.startswith("file://") else uri
    return Path(raw).expanduser()


def open_storage(
    uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = True,
    credentials: S3Credentials | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Storage:
    """Storage rooted at ``uri``: ``file:///abs/dir``, a plain path, or ``s3://bucket[/prefix]``.

    For S3, ``endpoint_url`` (MinIO, Ceph) defaults to ``$KUBEJURY_S3_ENDPOINT`` or
    ``$AWS_ENDPOINT_URL``; credentials default to boto3's chain (``AWS_ACCESS_KEY_ID`` …).
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
        )
    if "://" in uri and not uri.startswith("file://"):
        raise StorageError(f"unsupported storage URI {uri!r}: use file:///path or s3://bucket/prefix")
    return LocalStorage(_file_path(uri))


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
        path = _file_path(uri)
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
            return store.read_bytes(name)
        except FileNotFoundError as exc:
            raise InputError(uri, "object not found") from exc
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

    ``<run>/<series>/answers/<model>/part-*.jsonl``, ``<run>/<series>/judgments/<judge>/part-*.jsonl``,
    ``<run>/<series>/anonymization/mapping.json``, ``<run>/<series>/progress/<stage>-<name>.json``,
    ``<run>/progress/aggregate-<name>.json``, ``<run>/report/…`` and ``<run>/spec.json``.
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
