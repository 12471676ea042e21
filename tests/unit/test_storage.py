"""Local storage: atomic writes, sorted listings, JSONL shards, key safety, input URIs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubejury.errors import InputError
from kubejury.files.storage import LocalStorage, RunLayout, StorageError, open_storage, read_uri


def test_round_trip_and_listing_is_sorted(tmp_path: Path) -> None:
    store = open_storage(tmp_path.as_uri())
    assert isinstance(store, LocalStorage)
    for key in ["b/2.txt", "a/1.txt", "a/0.txt", "c.txt"]:
        store.write_bytes(key, key.encode())
    assert store.list() == ["a/0.txt", "a/1.txt", "b/2.txt", "c.txt"]
    assert store.list("a/") == ["a/0.txt", "a/1.txt"]
    assert store.list("a/1") == ["a/1.txt"]
    assert store.list("nothing/") == []
    assert store.read_bytes("b/2.txt") == b"b/2.txt"
    assert store.exists("c.txt") and not store.exists("a")
    with pytest.raises(FileNotFoundError):
        store.read_bytes("missing.txt")
    assert store.delete_prefix("a/") == 2
    assert store.list() == ["b/2.txt", "c.txt"]


def test_overwrite_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("x/obj", b"old")
    store.write_bytes("x/obj", b"new" * 1000)
    assert store.read_bytes("x/obj") == b"new" * 1000
    assert os.listdir(tmp_path / "x") == ["obj"]


def test_written_files_get_umask_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        LocalStorage(tmp_path).write_bytes("r/report.html", b"<html/>")
    finally:
        os.umask(old)
    assert (tmp_path / "r" / "report.html").stat().st_mode & 0o777 == 0o644


def test_failed_write_keeps_old_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("obj", b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        store.write_bytes("obj", b"new")
    monkeypatch.undo()
    assert store.read_bytes("obj") == b"old"
    assert os.listdir(tmp_path) == ["obj"]


def test_temp_files_of_writers_in_flight_are_not_listed(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("d/real.jsonl", b"{}\n")
    (tmp_path / "d" / ".tmp-abc-part.jsonl").write_bytes(b'{"half": ')
    assert store.list("d/") == ["d/real.jsonl"]


def test_shards_are_immutable_ordered_and_read_back(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    prefix = "run/s1/answers/m1"
    k0 = store.write_shard(prefix, [{"id": "q1", "text": "а"}, {"id": "q2", "text": "б"}])
    k1 = store.write_shard(prefix, [{"id": "q3", "text": "в"}])
    assert store.write_shard(prefix, []) is None
    assert k0 is not None and k1 is not None
    assert k0.rsplit("/", 1)[1].startswith("part-000000-")
    assert k1.rsplit("/", 1)[1].startswith("part-000001-")
    assert store.shard_keys(prefix) == [k0, k1]
    assert [r["id"] for r in store.read_jsonl(prefix)] == ["q1", "q2", "q3"]
    # Same explicit sequence number from two writers: both shards survive.
    store.write_shard(prefix, [{"id": "q4"}], seq=5)
    store.write_shard(prefix, [{"id": "q5"}], seq=5)
    assert len(store.shard_keys(prefix)) == 4
    assert store.next_shard_seq(prefix) == 6
    # Shards of a sibling folder with a common name prefix are not mixed in.
    store.write_shard("run/s1/answers/m10", [{"id": "other"}])
    assert "other" not in {r["id"] for r in store.read_jsonl(prefix)}


def test_corrupt_shard_is_reported_with_line(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("p/part-000000-ab.jsonl", b'{"ok": 1}\n{"broken"\n')
    with pytest.raises(InputError, match="line 2"):
        list(store.read_jsonl("p"))


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "..", "a\\b", "./a"])
def test_unsafe_keys_are_rejected(tmp_path: Path, key: str) -> None:
    with pytest.raises(StorageError):
        LocalStorage(tmp_path).write_bytes(key, b"x")


def test_layout_paths() -> None:
    layout = RunLayout("quickstart")
    assert layout.answers_prefix("t0", "gemma") == "quickstart/t0/answers/gemma"
    assert layout.judgments_prefix("t0", "j1") == "quickstart/t0/judgments/j1"
    assert layout.progress_key("t0", "generate", "gemma") == "quickstart/t0/progress/generate-gemma.json"
    assert layout.anonymization_key("t0") == "quickstart/t0/anonymization/mapping.json"
    assert layout.report_prefix == "quickstart/report"
    with pytest.raises(StorageError):
        layout.answers_prefix("t0", "../etc")
    with pytest.raises(StorageError):
        RunLayout("bad name")


def test_read_uri_file_forms(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl").write_bytes(b"data")
    assert read_uri((tmp_path / "b.jsonl").as_uri()) == b"data"
    assert read_uri(str(tmp_path / "b.jsonl")) == b"data"
    assert read_uri("file://b.jsonl", base_dir=tmp_path) == b"data"
    assert read_uri("b.jsonl", base_dir=tmp_path) == b"data"
    with pytest.raises(InputError, match="file not found"):
        read_uri((tmp_path / "nope.jsonl").as_uri())
    with pytest.raises(InputError, match="unsupported URI scheme"):
        read_uri("ftp://x/y")


def test_unsupported_storage_scheme() -> None:
    with pytest.raises(StorageError, match="unsupported storage URI"):
        open_storage("gs://bucket/x")
