"""Local storage: atomic writes, sorted listings, shards, key safety, input URIs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubejury.errors import InputError
from kubejury.files.storage import (
    LocalStorage,
    RunLayout,
    StorageError,
    open_storage,
    parse_jsonl,
    read_uri,
    shard_seq,
)


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

    def broken_replace(src: str, dst: str, **_dir_fds: int) -> None:
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


def test_shards_are_immutable_ordered_and_named_by_sequence_and_format(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    prefix = "run/s1/answers/m1"
    k0 = store.write_jsonl_shard(prefix, [{"id": "q1", "text": "а"}, {"id": "q2", "text": "б"}])
    k1 = store.put_shard(prefix, b"PAR1...", suffix="parquet")
    assert store.write_jsonl_shard(prefix, []) is None
    assert k0 is not None
    assert k0.rsplit("/", 1)[1].startswith("part-000000-") and k0.endswith(".jsonl")
    assert k1.rsplit("/", 1)[1].startswith("part-000001-") and k1.endswith(".parquet")
    assert store.shard_keys(prefix) == [k0, k1]
    assert [shard_seq(k) for k in (k0, k1)] == [0, 1]
    assert [r["id"] for r in parse_jsonl(store.read_bytes(k0), k0)] == ["q1", "q2"]
    # Same explicit sequence number from two writers: both shards survive.
    store.put_shard(prefix, b"x", suffix="parquet", seq=5)
    store.put_shard(prefix, b"y", suffix="parquet", seq=5)
    assert len(store.shard_keys(prefix)) == 4
    assert store.next_shard_seq(prefix) == 6
    # Shards of a sibling folder with a common name prefix are not mixed in; other files are no shards.
    store.put_shard("run/s1/answers/m10", b"z", suffix="parquet")
    store.write_bytes(f"{prefix}/notes.parquet", b"n")
    assert len(store.shard_keys(prefix)) == 4
    with pytest.raises(StorageError, match="suffix 'csv'"):
        store.put_shard(prefix, b"a,b", suffix="csv")


def test_corrupt_jsonl_is_reported_with_line(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("p/part-000000-ab.jsonl", b'{"ok": 1}\n{"broken"\n')
    with pytest.raises(InputError, match="line 2"):
        list(parse_jsonl(store.read_bytes("p/part-000000-ab.jsonl"), "p/part-000000-ab.jsonl"))


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


# -- issue 29, finding 6: percent-encoding in file:// roots -------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "file:///results/%2e%2e/elsewhere",
        "file:///results/%2E%2E/x",
        "file:///results/a%2fb",
        "file:///my%20runs",
    ],
)
def test_a_file_uri_with_percent_encoding_is_refused_not_decoded(uri: str) -> None:
    with pytest.raises(StorageError, match=r"'%'.*not accepted"):
        open_storage(uri)


def test_a_percent_encoded_climb_in_a_file_root_never_reaches_the_directory_above(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_bytes(b"x")
    (tmp_path / "results").mkdir()
    with pytest.raises(StorageError):
        open_storage(f"{(tmp_path / 'results').as_uri()}/%2e%2e/elsewhere").delete_prefix("")
    assert (outside / "keep.txt").read_bytes() == b"x"


def test_a_benchmark_file_uri_with_percent_encoding_is_an_input_error() -> None:
    with pytest.raises(InputError, match="'%'"):
        read_uri("file:///data/%2e%2e/secret.jsonl")


def test_a_plain_path_with_a_percent_sign_is_taken_literally(tmp_path: Path) -> None:
    store = open_storage(str(tmp_path / "100%2e"))
    store.write_bytes("k", b"v")
    assert (tmp_path / "100%2e" / "k").read_bytes() == b"v"


# -- issue 29, finding 8: symbolic links on the results volume ----------------------------------


@pytest.fixture
def run_with_link_out(tmp_path: Path) -> tuple[LocalStorage, Path]:
    """A run's storage whose folder ``linked`` is a symbolic link to another run's folder."""
    other = tmp_path / "other-run"
    other.mkdir()
    (other / "answers.jsonl").write_bytes(b"other run's data")
    root = tmp_path / "this-run"
    root.mkdir()
    (root / "linked").symlink_to(other, target_is_directory=True)
    (root / "file-link.json").symlink_to(other / "answers.jsonl")
    return LocalStorage(root), other


def test_a_write_through_a_symlinked_folder_is_refused_and_leaves_the_target_alone(
    run_with_link_out: tuple[LocalStorage, Path],
) -> None:
    store, other = run_with_link_out
    with pytest.raises(StorageError, match="symbolic link"):
        store.write_bytes("linked/answers.jsonl", b"overwritten")
    with pytest.raises(StorageError, match="symbolic link"):
        store.write_bytes("linked/new.json", b"planted")
    with pytest.raises(StorageError, match="symbolic link"):
        store.write_bytes("file-link.json", b"overwritten")
    assert sorted(os.listdir(other)) == ["answers.jsonl"]
    assert (other / "answers.jsonl").read_bytes() == b"other run's data"


def test_a_read_through_a_symlink_is_refused(run_with_link_out: tuple[LocalStorage, Path]) -> None:
    store, _other = run_with_link_out
    with pytest.raises(StorageError, match="symbolic link"):
        store.read_bytes("linked/answers.jsonl")
    with pytest.raises(StorageError, match="symbolic link"):
        store.read_bytes("file-link.json")
    with pytest.raises(StorageError, match="symbolic link"):
        store.exists("linked/answers.jsonl")


def test_a_listing_never_walks_into_a_symlinked_folder(run_with_link_out: tuple[LocalStorage, Path]) -> None:
    store, _other = run_with_link_out
    store.write_bytes("own/a.json", b"{}")
    assert store.list() == ["own/a.json"]
    with pytest.raises(StorageError, match="symbolic link"):
        store.list("linked/")


def test_delete_prefix_removes_the_links_themselves_never_what_they_point_to(
    run_with_link_out: tuple[LocalStorage, Path],
) -> None:
    store, other = run_with_link_out
    store.write_bytes("own/a.json", b"{}")
    assert store.delete_prefix("") == 1
    assert (other / "answers.jsonl").read_bytes() == b"other run's data"
    assert not store.root.exists()


def test_delete_keys_deletes_exactly_those_keys_and_never_through_a_link(
    run_with_link_out: tuple[LocalStorage, Path],
) -> None:
    store, other = run_with_link_out
    for key in ("own/a", "own/b", "own/ab"):
        store.write_bytes(key, b"x")
    assert store.delete_keys(["own/a", "own/b", "own/absent", "none/x", "file-link.json"]) == 5
    assert store.list() == ["own/ab"]
    with pytest.raises(StorageError, match="symbolic link"):
        store.delete_keys(["linked/answers.jsonl"])
    assert (other / "answers.jsonl").read_bytes() == b"other run's data"


def test_a_symlink_between_the_trusted_root_and_the_runs_folder_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "results" / "team-b"
    victim.mkdir(parents=True)
    (tmp_path / "results" / "team-a").symlink_to(victim, target_is_directory=True)
    store = open_storage(
        (tmp_path / "results" / "team-a" / "run-1").as_uri(), no_links_below=(tmp_path / "results").as_uri()
    )
    with pytest.raises(StorageError, match="symbolic link"):
        store.write_bytes("x.json", b"{}")
    assert os.listdir(victim) == []


def test_the_trusted_root_must_contain_the_storage_root(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not below"):
        open_storage((tmp_path / "a").as_uri(), no_links_below=(tmp_path / "b").as_uri())


def test_a_fifo_planted_in_the_run_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "progress.json")
    with pytest.raises(StorageError, match="not a regular file"):
        LocalStorage(tmp_path).read_bytes("progress.json")


# -- issue 29, low: cleanupPolicy Delete leaves temporaries and empty folders -------------------


def test_delete_prefix_removes_temporaries_and_the_emptied_folders(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path / "run")
    store.write_bytes("s/answers/m/part-000000-ab.jsonl", b"{}\n")
    store.write_bytes("s/progress/generate-m.json", b"{}")
    (tmp_path / "run" / "s" / "answers" / "m" / ".tmp-dead-part.jsonl").write_bytes(b"half")
    (tmp_path / "run" / "s" / "empty" / "deeper").mkdir(parents=True)
    assert store.delete_prefix("") == 2
    assert not (tmp_path / "run").exists()


def test_delete_prefix_of_a_folder_keeps_everything_outside_it(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("a/1/x.json", b"{}")
    store.write_bytes("a/10/x.json", b"{}")
    store.write_bytes("a/2/x.json", b"{}")
    (tmp_path / "a" / "1" / ".tmp-1-x.json").write_bytes(b"")
    assert store.delete_prefix("a/1/") == 1
    assert sorted(os.listdir(tmp_path / "a")) == ["10", "2"]
    assert store.delete_prefix("a/1") == 1  # a plain string prefix: a/10 too
    assert store.list() == ["a/2/x.json"]


# -- issue 29, finding 2: bounded reads and listings ---------------------------------------------


def test_a_local_read_over_the_cap_is_refused_naming_the_key_and_the_cap(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    store.write_bytes("p/big.json", b"x" * 2048)
    store.write_bytes("p/small.json", b"{}")
    with pytest.raises(StorageError, match=r"p/big\.json.*1024 bytes"):
        store.read_bytes("p/big.json", max_bytes=1024)
    assert store.read_json("p/small.json", max_bytes=1024) == {}


def test_a_local_listing_past_the_key_cap_is_refused(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    for i in range(5):
        store.write_bytes(f"d/{i}.json", b"{}")
    assert len(store.list("d/", max_keys=5)) == 5
    with pytest.raises(StorageError, match=r"more than 4 keys"):
        store.list("d/", max_keys=4)
