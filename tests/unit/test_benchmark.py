"""Benchmark files: the three formats load alike, and every documented mistake names file, line, field."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kubejury.errors import InputError
from kubejury.files.benchmark import Benchmark, load_benchmark, parse_benchmark

DATA = Path(__file__).parent / "data" / "engine"

GOOD = {"id": "q1", "domain": "law", "level": 1, "question": "Q?", "reference": "R."}


def jsonl(*records: object) -> bytes:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in records).encode() + b"\n"


def test_jsonl_fixture_loads_in_file_order() -> None:
    bench = load_benchmark(DATA / "benchmark.jsonl")
    assert bench.ids == ("law-1", "law-2", "law-3", "law-4", "med-1", "med-2", "med-3", "law-5")
    assert bench.domains == ("law", "med")
    assert bench.levels == (1, 2, 3)
    assert bench.questions[0].metadata == {"author": "jd"}
    assert bench.questions[6].metadata == {}
    assert bench.questions[4].reference == "60–100 beats per minute."
    assert bench.warnings == ()
    assert bench.source == str(DATA / "benchmark.jsonl")


def test_csv_fixture_with_quoted_multiline_and_metadata_text() -> None:
    bench = load_benchmark(DATA / "benchmark.csv")
    assert bench.ids == ("law-1", "law-2", "med-1", "med-2")
    assert bench.questions[0].metadata == {"author": "jd"}
    assert bench.questions[2].question == "Normal resting heart rate, at rest?"
    assert bench.questions[2].reference == "60–100 beats\nper minute."
    assert bench.questions[3].level == 2


def test_parquet_loads_like_jsonl(tmp_path: Path) -> None:
    source = load_benchmark(DATA / "benchmark.jsonl")
    table = pa.Table.from_pylist(
        [
            {
                "id": q.id,
                "domain": q.domain,
                "level": q.level,
                "question": q.question,
                "reference": q.reference,
            }
            for q in source
        ]
    )
    path = tmp_path / "bench.parquet"
    pq.write_table(table, path)
    bench = load_benchmark(path)
    assert [(q.id, q.domain, q.level, q.question, q.reference) for q in bench] == [
        (q.id, q.domain, q.level, q.question, q.reference) for q in source
    ]
    # Bytes without a telling name are recognised by content.
    assert parse_benchmark(path.read_bytes(), "s3://bucket/bench", None).ids == source.ids


def test_format_detection_from_bytes() -> None:
    assert parse_benchmark(jsonl(GOOD), "https://example/bench").ids == ("q1",)
    csv_bytes = b"id,domain,level,question,reference\nq1,law,1,Q?,R.\n"
    assert parse_benchmark(csv_bytes, "https://example/bench").questions[0].level == 1


def test_filter_is_deterministic() -> None:
    bench = load_benchmark(DATA / "benchmark.jsonl")
    assert bench.filter(domains=["law"]).ids == ("law-1", "law-2", "law-3", "law-4", "law-5")
    assert bench.filter(levels=[3]).ids == ("law-4", "law-5")
    assert bench.filter(limit_per_cell=1).ids == ("law-1", "law-3", "law-4", "med-1", "med-2")
    assert bench.filter(domains=["med"], levels=[2], limit_per_cell=1).ids == ("med-2",)
    assert isinstance(bench.filter(), Benchmark) and bench.filter().ids == bench.ids
    assert bench.filter(limit_per_cell=0).ids == ()


def test_unknown_columns_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        bench = parse_benchmark(jsonl({**GOOD, "difficulty": "hard"}), "b.jsonl")
    assert len(bench.warnings) == 1 and "difficulty" in bench.warnings[0] and "line 1" in bench.warnings[0]
    assert "difficulty" in caplog.text


@pytest.mark.parametrize(
    ("data", "location", "field", "fragment"),
    [
        (jsonl(GOOD, {**GOOD, "domain": "tax"}), "line 2", "id", "first at line 1"),
        (
            jsonl(GOOD, {k: v for k, v in GOOD.items() if k != "reference"} | {"id": "q2"}),
            "line 2",
            "reference",
            "missing",
        ),
        (jsonl({**GOOD, "question": "   "}), "line 1", "question", "empty"),
        (jsonl({**GOOD, "level": 1.5}), "line 1", "level", "positive integer"),
        (jsonl({**GOOD, "level": "x"}), "line 1", "level", "positive integer"),
        (jsonl({**GOOD, "level": 0}), "line 1", "level", "positive integer"),
        (jsonl({**GOOD, "level": True}), "line 1", "level", "positive integer"),
        (jsonl({**GOOD, "metadata": [1, 2]}), "line 1", "metadata", "object"),
        (jsonl({**GOOD, "domain": 7}), "line 1", "domain", "string"),
        (jsonl(GOOD) + b'{"id": "q2", "domain": \n', "line 2", None, "invalid JSON"),
        (jsonl(GOOD) + b"[1, 2]\n", "line 2", None, "JSON object"),
        (jsonl(GOOD) + '{"id": "q2"}'.encode("utf-16"), "line 2", None, "UTF-8"),
    ],
)
def test_jsonl_errors_name_line_and_field(
    data: bytes, location: str, field: str | None, fragment: str
) -> None:
    with pytest.raises(InputError) as info:
        parse_benchmark(data, "bench.jsonl")
    err = info.value
    assert err.source == "bench.jsonl" and err.location == location and err.field == field
    assert fragment in str(err)


def test_bad_utf8_names_byte_offset() -> None:
    data = jsonl(GOOD) + b'{"id": "q\xff"}\n'
    with pytest.raises(InputError, match=r"byte offset \d+") as info:
        parse_benchmark(data, "bench.jsonl")
    assert info.value.location == "line 2"


@pytest.mark.parametrize("data", [b"", b"  \n\n", b"id,domain,level,question,reference\n"])
def test_empty_files(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / ("bench.csv" if data.startswith(b"id") else "bench.jsonl")
    path.write_bytes(data)
    with pytest.raises(InputError, match="empty"):
        load_benchmark(path)


@pytest.mark.parametrize(
    ("text", "location", "field"),
    [
        ("id,domain,level,question,reference\nq1,law,1.5,Q,R\n", "line 2", "level"),
        ("id,domain,level,question,reference\nq1,law,one,Q,R\n", "line 2", "level"),
        ("id,domain,level,question,reference\nq1,law,1,Q,R\nq1,law,2,Q,R\n", "line 3", "id"),
        ("id,domain,level,question,reference\nq1,law,1,Q\n", "line 2", None),
        ("id,domain,level,question\nq1,law,1,Q\n", "line 2", "reference"),
        ('id,domain,level,question,reference,metadata\nq1,law,1,Q,R,"[1]"\n', "line 2", "metadata"),
        ('id,domain,level,question,reference,metadata\nq1,law,1,Q,R,"{bad"\n', "line 2", "metadata"),
        ('id,domain,level,question,reference\nq1,law,1,"multi\nline",R\nq2,law,x,Q,R\n', "line 4", "level"),
    ],
)
def test_csv_errors(text: str, location: str, field: str | None) -> None:
    with pytest.raises(InputError) as info:
        parse_benchmark(text.encode(), "bench.csv")
    assert info.value.location == location and info.value.field == field


def test_parquet_errors(tmp_path: Path) -> None:
    path = tmp_path / "bench.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD, {**GOOD, "id": "q2", "level": None}]), path)
    with pytest.raises(InputError) as info:
        load_benchmark(path)
    assert info.value.location == "row 2" and info.value.field == "level"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="Parquet"):
        load_benchmark(path)


def test_missing_file() -> None:
    with pytest.raises(InputError, match="not found"):
        load_benchmark("/nonexistent/bench.jsonl")


def test_numeric_ids_become_strings() -> None:
    assert parse_benchmark(jsonl({**GOOD, "id": 17}), "b.jsonl").ids == ("17",)
