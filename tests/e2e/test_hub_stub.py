"""The harness's hub (hub_stub): the answers both downloaders rely on, and ``kubejury prefetch`` through it.

(llama.cpp's own downloader is exercised against it by test_prefetch_real_pods_e2e, in a real pod.)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hub_stub import HubRepo, HubStub, answer, repo_of

from kubejury.commands.prefetch import HubSource, prefetch
from kubejury.files.weight_cache import COMPLETE_MARKER, GGUF_ENTRY

REPO_NAME = "kubejury-e2e/tiny-GGUF"


@pytest.fixture
def repo(tmp_path: Path) -> HubRepo:
    weights = tmp_path / "tiny.Q4_1.gguf"
    weights.write_bytes(os.urandom(50_000))
    (tmp_path / "README.md").write_text("a tiny repository\n")
    return repo_of(REPO_NAME, [weights, tmp_path / "README.md"])


def test_refs_name_main_at_a_forty_digit_commit(repo: HubRepo) -> None:
    reply = answer(repo, "GET", f"/api/models/{REPO_NAME}/refs")
    [branch] = json.loads(reply.body)["branches"]
    assert reply.status == 200
    assert branch["name"] == "main" and branch["targetCommit"] == repo.commit
    assert len(repo.commit) == 40 and int(repo.commit, 16) >= 0


@pytest.mark.parametrize("revision", ["main", "commit"])
def test_the_tree_lists_every_file_with_its_size_and_lfs_digest(repo: HubRepo, revision: str) -> None:
    name = repo.commit if revision == "commit" else revision
    reply = answer(repo, "GET", f"/api/models/{REPO_NAME}/tree/{name}?recursive=true")
    listed = {e["path"]: e for e in json.loads(reply.body)}
    assert reply.status == 200 and set(listed) == {"tiny.Q4_1.gguf", "README.md"}
    for item in repo.files:
        assert listed[item.path]["size"] == item.local.stat().st_size
        assert listed[item.path]["lfs"]["oid"] == hashlib.sha256(item.local.read_bytes()).hexdigest()


def test_an_unknown_revision_repository_or_file_is_a_404_with_the_hubs_error_body(repo: HubRepo) -> None:
    for method, target in [
        ("GET", f"/api/models/{REPO_NAME}/tree/v2?recursive=true"),
        ("GET", "/api/models/someone/else/refs"),
        ("HEAD", f"/{REPO_NAME}/resolve/main/missing.gguf"),
        ("GET", f"/{REPO_NAME}/resolve/v2/tiny.Q4_1.gguf"),
    ]:
        reply = answer(repo, method, target)
        assert reply.status == 404 and "error" in json.loads(reply.body), target


def test_resolve_serves_the_whole_file_or_the_asked_range(repo: HubRepo) -> None:
    item = repo.files[0]
    whole = answer(repo, "HEAD", f"/{REPO_NAME}/resolve/main/{item.path}")
    assert (whole.status, whole.length, whole.headers["Accept-Ranges"]) == (200, item.size, "bytes")
    assert whole.headers["ETag"] == f'"{item.sha256}"'
    tail = answer(repo, "GET", f"/{REPO_NAME}/resolve/{repo.commit}/{item.path}", "bytes=1000-")
    assert (tail.status, tail.start, tail.end) == (206, 1000, item.size)
    assert tail.headers["Content-Range"] == f"bytes 1000-{item.size - 1}/{item.size}"
    middle = answer(repo, "GET", f"/{REPO_NAME}/resolve/main/{item.path}", "bytes=10-19")
    assert (middle.status, middle.length) == (206, 10)
    beyond = answer(repo, "GET", f"/{REPO_NAME}/resolve/main/{item.path}", f"bytes={item.size}-")
    assert beyond.status == 416


def test_kubejury_prefetch_downloads_the_gguf_through_it_and_checks_its_digest(
    repo: HubRepo, tmp_path: Path
) -> None:
    stub = HubStub(repo)
    try:
        source = f"hf://{REPO_NAME}"
        folder = prefetch(
            HubSource(stub.url, REPO_NAME, "main", None), source, "llamacpp", "Q4_1", tmp_path / "c"
        )
    finally:
        stub.close()
    gguf = repo.files[0]
    assert (folder / GGUF_ENTRY).read_bytes() == gguf.local.read_bytes()
    assert json.loads((folder / COMPLETE_MARKER).read_text())["source"] == source
    assert f"GET /{REPO_NAME}/resolve/main/{gguf.path}" in stub.requests
