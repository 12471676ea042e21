"""S3 storage against a real S3 HTTP endpoint (moto server on loopback), and input URIs over HTTPS."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest

from kubejury.errors import InputError
from kubejury.files import shards
from kubejury.files.shards import read_rows, write_records
from kubejury.files.storage import (
    LocalStorage,
    S3Credentials,
    S3Storage,
    open_storage,
    read_uri,
    shard_suffix,
)
from kubejury.records.results import AnswerRecord

pytestmark = pytest.mark.integration


def test_round_trip_listing_and_delete(bucket: str) -> None:
    store = open_storage(f"s3://{bucket}/runs")
    assert isinstance(store, S3Storage)
    assert store.list() == []
    for key in ["q/b/2", "q/a/1", "q/a/0", "top"]:
        store.write_bytes(key, key.encode())
    assert store.list() == ["q/a/0", "q/a/1", "q/b/2", "top"]
    assert store.list("q/a/") == ["q/a/0", "q/a/1"]
    assert store.read_bytes("q/b/2") == b"q/b/2"
    assert store.exists("top") and not store.exists("q/a")
    with pytest.raises(FileNotFoundError):
        store.read_bytes("nope")
    # Objects live under the prefix in the bucket.
    raw = boto3.client("s3", endpoint_url=store.endpoint_url).list_objects_v2(Bucket=bucket)
    assert sorted(o["Key"] for o in raw["Contents"]) == ["runs/q/a/0", "runs/q/a/1", "runs/q/b/2", "runs/top"]
    assert store.delete_prefix("q/") == 3
    assert store.list() == ["top"]


def test_listing_paginates_past_1000(bucket: str) -> None:
    store = open_storage(f"s3://{bucket}")
    for i in range(1001):
        store.write_bytes(f"many/{i:05d}", b"x")
    keys = store.list("many/")
    assert len(keys) == 1001 and keys == sorted(keys)
    assert store.delete_prefix("many/") == 1001
    assert store.list("many/") == []


def test_shards_and_json_round_trip(bucket: str) -> None:
    store = open_storage(f"s3://{bucket}/out")
    prefix = "run/t0/answers/m1"
    store.write_jsonl_shard(
        prefix, [{"question_id": "q1", "model": "m1", "answer": "Ответ"}]
    )  # an older run's
    write_records(store, prefix, [AnswerRecord(question_id="q2", model="m1", answer="Ещё")])
    assert [shard_suffix(k) for k in store.shard_keys(prefix)] == ["jsonl", "parquet"]
    assert [(r["question_id"], r["answer"]) for r in read_rows(store, prefix)] == [
        ("q1", "Ответ"),
        ("q2", "Ещё"),
    ]
    store.write_json("run/t0/progress/generate-m1.json", {"done": 2, "total": 2})
    assert store.read_json("run/t0/progress/generate-m1.json") == {"done": 2, "total": 2}
    assert store.read_json_or_none("run/t0/progress/none.json") is None


def test_delete_keys_deletes_exactly_those_keys_past_a_batch_of_1000(bucket: str) -> None:
    store = open_storage(f"s3://{bucket}/out")
    for i in range(1003):
        store.write_bytes(f"d/{i:05d}", b"x")
    store.write_bytes("d/00000-kept", b"x")
    assert store.delete_keys([f"d/{i:05d}" for i in range(1003)] + ["d/absent"]) == 1004
    assert store.list("d/") == ["d/00000-kept"]


def test_compaction_on_s3_keeps_every_record_for_a_reader_that_listed_before_it(bucket: str) -> None:
    store = open_storage(f"s3://{bucket}/out")
    prefix = "run/t0/answers/m1"
    records = [AnswerRecord(question_id=f"q{i}", model="m1", answer=f"Ответ {i}") for i in range(6)]
    for i in range(0, 6, 2):
        write_records(store, prefix, records[i : i + 2])
    reader = shards.rows(store, prefix)
    first = next(reader)  # listed the three parts and read the first
    done = shards.compact(open_storage(f"s3://{bucket}/out"), prefix)
    assert done.written is not None and store.shard_keys(prefix) == [done.written]
    seen = [first[2], *(row for _, _, row in reader)]
    assert {row["question_id"] for row in seen} == {r.question_id for r in records}
    assert [row["question_id"] for row in read_rows(store, prefix)] == [r.question_id for r in records]
    assert shards.compact(store, prefix) == shards.Compaction(None, ())


def test_explicit_credentials(bucket: str, s3_env: str) -> None:
    good = open_storage(f"s3://{bucket}", credentials=S3Credentials("testing", "testing"))
    good.write_bytes("k", b"v")
    assert good.read_bytes("k") == b"v"


def test_multipart_object_is_invisible_until_complete(bucket: str, s3_env: str) -> None:
    """A large object goes up in parts; while parts are uploading, readers see nothing."""
    store = S3Storage(
        bucket,
        "mp",
        endpoint_url=s3_env,
        multipart_threshold=5 * 1024 * 1024,
        multipart_chunksize=5 * 1024 * 1024,
    )
    observer = S3Storage(bucket, "mp", endpoint_url=s3_env)
    store.write_bytes("big.bin", b"old")
    calls: list[str] = []
    seen_during_upload: list[bytes] = []

    def on_part(**kwargs: Any) -> None:
        calls.append(kwargs["event_name"])
        if "UploadPart" in kwargs["event_name"]:
            seen_during_upload.append(observer.read_bytes("big.bin"))

    store.client.meta.events.register("after-call.s3.*", on_part)
    data = (hashlib.sha256(b"seed").digest() * (12 * 1024 * 1024 // 32 + 1))[: 12 * 1024 * 1024]
    store.write_bytes("big.bin", data)
    assert any("CreateMultipartUpload" in c for c in calls)
    assert any("CompleteMultipartUpload" in c for c in calls)
    assert sum("UploadPart" in c for c in calls) == 3  # 5 + 5 + 2 MiB
    # Every read during the upload saw the old object whole, never a prefix of the new one.
    assert seen_during_upload and all(s == b"old" for s in seen_during_upload)
    assert store.read_bytes("big.bin") == data


def test_concurrent_readers_never_see_partial_objects(bucket: str, tmp_path: Path) -> None:
    """Writers replace objects of distinct sizes; every read is one of the whole versions."""
    versions = [bytes([i]) * (200_000 + i * 7919) for i in range(6)]
    for store in (open_storage(f"s3://{bucket}/conc"), LocalStorage(tmp_path)):
        store.write_bytes("obj", versions[0])
        stop = threading.Event()
        bad: list[int] = []

        def reader(store: Any = store, stop: threading.Event = stop, bad: list[int] = bad) -> None:
            while not stop.is_set():
                got = store.read_bytes("obj")
                if got not in versions:
                    bad.append(len(got))

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for round_ in range(30):
            store.write_bytes("obj", versions[round_ % len(versions)])
        stop.set()
        for t in threads:
            t.join()
        assert bad == [], f"{type(store).__name__}: partial reads of sizes {bad[:5]}"


def test_read_uri_s3(bucket: str) -> None:
    open_storage(f"s3://{bucket}").write_bytes("bench/b.jsonl", b'{"id": "q1"}\n')
    assert read_uri(f"s3://{bucket}/bench/b.jsonl") == b'{"id": "q1"}\n'
    with pytest.raises(InputError, match="object not found"):
        read_uri(f"s3://{bucket}/bench/missing.jsonl")
    with pytest.raises(InputError, match="bucket and an object key"):
        read_uri(f"s3://{bucket}")


def test_read_uri_https_loopback(https_server: tuple[str, Path]) -> None:
    base, served = https_server
    (served / "bench.jsonl").write_text('{"id": "q1", "question": "Что такое НДС?"}\n', encoding="utf-8")
    assert "НДС".encode() in read_uri(f"{base}/bench.jsonl")
    with pytest.raises(InputError, match="HTTP 404"):
        read_uri(f"{base}/missing.jsonl")


def test_read_uri_https_untrusted_certificate_is_an_input_error(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, served = https_server
    (served / "b.jsonl").write_text("{}\n")
    monkeypatch.delenv("SSL_CERT_FILE")
    with pytest.raises(InputError, match="cannot download"):
        read_uri(f"{base}/b.jsonl")
