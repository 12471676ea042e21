"""``kubejury prefetch``: weights into the model cache, complete or not at all, and nowhere else.

A fake Hugging Face hub on loopback (the two endpoints the downloader uses: the tree listing and
``resolve`` with ``Range``) and moto's real S3 server stand in for the sources.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest

from kubejury.cli import main
from kubejury.commands.prefetch import (
    PrefetchError,
    RemoteFile,
    S3Source,
    check_source,
    prefetch,
    safe_relative,
    select_files,
)
from kubejury.files.weight_cache import COMPLETE_MARKER, GGUF_ENTRY, model_dir, server_model_path
from loopback_http import LoopbackHTTP


class FakeHub(BaseHTTPRequestHandler):
    """``/api/models/<repo>/tree/main`` and ``/<repo>/resolve/main/<file>`` over :attr:`files`;
    a request for a file listed in :attr:`cut_after` is cut after that many bytes, once."""

    files: ClassVar[dict[str, bytes]] = {}
    cut_after: ClassVar[dict[str, int]] = {}
    ranges: ClassVar[list[str]] = []
    token: ClassVar[list[str]] = []
    lfs_oid: ClassVar[dict[str, str]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.token.append(self.headers.get("Authorization", ""))
        if self.path.startswith("/api/models/org/repo/tree/main"):
            body = json.dumps([self._entry(p, b) for p, b in self.files.items()])
            self._send(200, body.encode())
            return
        prefix = "/org/repo/resolve/main/"
        name = self.path.removeprefix(prefix)
        if not self.path.startswith(prefix) or name not in self.files:
            self._send(404, b"{}")
            return
        data = self.files[name]
        start = (
            int(self.headers["Range"].removeprefix("bytes=").rstrip("-")) if "Range" in self.headers else 0
        )
        self.ranges.append(f"{name}@{start}")
        cut = self.cut_after.pop(name, None)
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start : start + cut] if cut is not None else data[start:])

    def _entry(self, path: str, data: bytes) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "path": path, "size": len(data)}
        if path.endswith(".safetensors"):  # the hub lists an LFS file's SHA-256
            entry["lfs"] = {
                "oid": self.lfs_oid.get(path, hashlib.sha256(data).hexdigest()),
                "size": len(data),
            }
        return entry

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeHub]]:
    FakeHub.files, FakeHub.cut_after, FakeHub.ranges, FakeHub.token, FakeHub.lfs_oid = {}, {}, [], [], {}
    server = LoopbackHTTP(FakeHub)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setattr("kubejury.commands.prefetch.time.sleep", lambda s: None)
    try:
        yield FakeHub
    finally:
        server.close()


def _prefetch(cache: Path, source: str, runtime: str = "vllm", quant: str = "") -> int:
    argv = ["prefetch", "--source", source, "--runtime", runtime, "--cache", str(cache)]
    return main([*argv, "--quantization", quant] if quant else argv)


def test_a_hub_repository_lands_in_its_cache_folder_with_the_marker_last(
    hub: type[FakeHub], tmp_path: Path
) -> None:
    hub.files = {"config.json": b"{}", "model.safetensors": os.urandom(3000), "pytorch_model.bin": b"dup"}
    assert _prefetch(tmp_path, "hf://org/repo") == 0
    folder = Path(model_dir(str(tmp_path), "hf://org/repo", ""))
    assert (folder / "model.safetensors").read_bytes() == hub.files["model.safetensors"]
    assert not (folder / "pytorch_model.bin").exists()  # a duplicate format vLLM does not load
    marker = json.loads((folder / COMPLETE_MARKER).read_text())
    assert [f["path"] for f in marker["files"]] == ["config.json", "model.safetensors"]
    assert set(hub.token) == {"Bearer hf_secret"}
    assert server_model_path(str(tmp_path), "hf://org/repo", "vllm", None) == str(folder)


def test_a_cut_connection_resumes_from_the_bytes_already_there(hub: type[FakeHub], tmp_path: Path) -> None:
    hub.files = {"model.safetensors": os.urandom(5000)}
    hub.cut_after = {"model.safetensors": 1200}
    assert _prefetch(tmp_path, "hf://org/repo") == 0
    folder = Path(model_dir(str(tmp_path), "hf://org/repo", ""))
    assert (folder / "model.safetensors").read_bytes() == hub.files["model.safetensors"]
    assert hub.ranges == ["model.safetensors@0", "model.safetensors@1200"]


def test_a_partial_file_is_never_taken_for_complete(hub: type[FakeHub], tmp_path: Path) -> None:
    hub.files = {"model.safetensors": os.urandom(4000)}
    hub.cut_after = {"model.safetensors": 100}
    folder = Path(model_dir(str(tmp_path), "hf://org/repo", ""))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("kubejury.commands.prefetch.ATTEMPTS", 1)
        with pytest.raises(OSError):
            _prefetch(tmp_path, "hf://org/repo")
    assert not (folder / COMPLETE_MARKER).exists()
    assert not (folder / "model.safetensors").exists()  # only below .partial/
    assert _prefetch(tmp_path, "hf://org/repo") == 0  # the next Job resumes it
    assert hub.ranges[-1] == "model.safetensors@100"
    assert (folder / "model.safetensors").read_bytes() == hub.files["model.safetensors"]


def test_a_complete_folder_is_not_downloaded_again(hub: type[FakeHub], tmp_path: Path) -> None:
    hub.files = {"model.safetensors": b"x" * 10}
    assert _prefetch(tmp_path, "hf://org/repo") == 0
    requests = len(hub.token)
    assert _prefetch(tmp_path, "hf://org/repo") == 0
    assert len(hub.token) == requests


def test_llama_cpp_gets_the_gguf_of_its_quantization_behind_a_fixed_entry_name(
    hub: type[FakeHub], tmp_path: Path
) -> None:
    hub.files = {"m-Q4_K_M.gguf": b"q4" * 50, "m-Q8_0.gguf": b"q8" * 80, "README.md": b"hi"}
    assert _prefetch(tmp_path, "hf://org/repo", "llamacpp", "q4_k_m") == 0
    entry = Path(server_model_path(str(tmp_path), "hf://org/repo", "llamacpp", "Q4_K_M"))
    assert entry.name == GGUF_ENTRY and entry.read_bytes() == hub.files["m-Q4_K_M.gguf"]
    assert not (entry.parent / "m-Q8_0.gguf").exists()


def test_a_split_gguf_keeps_every_part_and_enters_at_the_first() -> None:
    files = [RemoteFile(f"m-Q4_K_M-0000{i}-of-00002.gguf", 1) for i in (2, 1)] + [
        RemoteFile("m-Q8_0.gguf", 1)
    ]
    chosen, entry = select_files(files, "llamacpp", "Q4_K_M")
    assert [f.path for f in chosen] == ["m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf"]
    assert entry == "m-Q4_K_M-00001-of-00002.gguf"


def test_an_ambiguous_gguf_selection_is_refused_naming_the_files() -> None:
    with pytest.raises(PrefetchError, match=r"m-Q4_0\.gguf"):
        select_files([RemoteFile("m-Q4_0.gguf", 1), RemoteFile("m-Q8_0.gguf", 1)], "llamacpp", "")


@pytest.mark.parametrize(
    "name", ["../escape", "/etc/passwd", "a/../../b", "a\\b", ".kubejury-complete.json", "."]
)
def test_a_listed_name_that_would_leave_the_folder_is_refused(name: str) -> None:
    with pytest.raises(PrefetchError):
        safe_relative(name)


def test_a_hostile_listing_writes_nothing_outside_the_cache(hub: type[FakeHub], tmp_path: Path) -> None:
    hub.files = {"../../outside.bin": b"evil"}
    assert _prefetch(tmp_path / "cache", "hf://org/repo") == 2
    assert not (tmp_path / "outside.bin").exists()
    assert [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()] == [".lock"]


def test_an_s3_prefix_from_moto_lands_in_its_folder(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "KUBEJURY_S3_ENDPOINT": moto_endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="weights")
    blob = os.urandom(70_000)
    client.put_object(Bucket="weights", Key="llm/model.safetensors", Body=blob)
    client.put_object(Bucket="weights", Key="llm/sub/tokenizer.json", Body=b"{}")
    client.put_object(Bucket="weights", Key="llmother/x.bin", Body=b"not this model")
    assert _prefetch(tmp_path, "s3://weights/llm") == 0
    folder = Path(model_dir(str(tmp_path), "s3://weights/llm", ""))
    assert (folder / "model.safetensors").read_bytes() == blob
    assert (folder / "sub" / "tokenizer.json").read_bytes() == b"{}"
    assert not list(tmp_path.rglob("x.bin"))


def test_an_s3_read_resumes_at_an_offset(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    client.create_bucket(Bucket="resume")
    client.put_object(Bucket="resume", Key="m/w.safetensors", Body=b"0123456789")
    source = S3Source("s3://resume/m", client)
    assert source.files() == [RemoteFile("w.safetensors", 10)]
    part = tmp_path / "cache"
    folder = Path(model_dir(str(part), "s3://resume/m", ""))
    (folder / ".partial").mkdir(parents=True)
    (folder / ".partial" / "w.safetensors").write_bytes(b"0123")
    prefetch(source, "s3://resume/m", "vllm", "", part)
    assert (folder / "w.safetensors").read_bytes() == b"0123456789"


@pytest.mark.parametrize(
    "source",
    [
        "hf://org/repo/../../api/whoami",
        "hf://../x",
        "hf://org",
        "s3://Bad_Bucket/x",
        "s3://b-ok/a/../b",
        "s3://b-ok//x",
    ],
)
def test_a_source_that_is_not_just_a_model_is_refused(source: str) -> None:
    with pytest.raises(PrefetchError):
        check_source(source)


@pytest.mark.parametrize(
    "source", ["hf://Qwen/Qwen3.5-27B", "hf://org/repo:Q4_K_M", "s3://weights/llm/", "s3://weights"]
)
def test_a_plain_model_source_passes(source: str) -> None:
    check_source(source)


def test_a_file_whose_content_is_not_the_listed_sha256_is_never_complete(
    hub: type[FakeHub], tmp_path: Path
) -> None:
    hub.files = {"model.safetensors": b"tampered weights"}
    hub.lfs_oid = {"model.safetensors": hashlib.sha256(b"the real weights").hexdigest()}
    with pytest.raises(OSError):
        _prefetch(tmp_path, "hf://org/repo")
    folder = Path(model_dir(str(tmp_path), "hf://org/repo", ""))
    assert not (folder / "model.safetensors").exists()
    assert not (folder / COMPLETE_MARKER).exists()
