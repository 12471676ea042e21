"""Judgment, answer and expert files → records → cubes; every malformed file gives the documented error."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubejury.errors import InputError
from kubejury.files.benchmark import load_benchmark
from kubejury.files.tables import (
    ANSWER_SCHEMA,
    JUDGMENT_SCHEMA,
    JUDGMENT_TEXT_SCHEMA,
    build_cubes,
    judgments_from_frames,
    load_answers,
    load_experts,
    load_judgments,
    polars_schema,
    resolve_sources,
)
from kubejury.records.results import AnswerRecord, JudgmentRecord, TokenUsage
from kubejury.stats.scoring import ScoringConfig, score_series

DATA = Path(__file__).parent / "data" / "engine"
BENCH = DATA / "benchmark.jsonl"
JUDGMENTS = DATA / "judgments.jsonl"


def write_jsonl(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def judgment(
    qid: object = "law-1", model: object = "alpha", judge: object = "a", score: object = 8, **extra: object
) -> dict[str, object]:
    return {"question_id": qid, "model": model, "judge": judge, "score": score, **extra}


def test_load_judgments_fixture() -> None:
    j = load_judgments(JUDGMENTS)
    assert j.series == ("default", "hot")
    assert j.models == ("alpha", "beta") and j.judges == ("a", "b")
    assert len(j) == 9
    assert j.score[3] != j.score[3]  # null → NaN
    assert j.location(5) == (str(JUDGMENTS), "line 7")  # line 6 is blank
    frame = j.to_frame()
    assert frame.columns == ["series", "model", "question_id", "judge", "score"]
    assert frame.row(6) == ("default", "beta", "law-1", "a", 6.0)
    assert frame["score"].null_count() == 3
    assert load_judgments(JUDGMENTS, text=True).to_frame()["error"].to_list()[4] == "timeout"


def test_build_cubes_from_fixture() -> None:
    bench = load_benchmark(BENCH)
    cubes = build_cubes(bench, load_judgments(JUDGMENTS), load_answers(DATA / "answers.jsonl"))
    assert list(cubes) == ["default", "hot"]
    cube = cubes["default"]
    assert cube.question_ids == ("law-1", "law-2", "med-1", "law-3", "med-2", "med-3", "law-4", "law-5")
    assert cube.domains == ("law", "med") and cube.levels == (1, 2, 3)
    assert cube.question_domain.tolist() == [0, 0, 1, 0, 1, 1, 0, 0]
    assert cube.question_level.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    assert cube.models == ("alpha", "beta") and cube.judges == ("a", "b")
    np.testing.assert_array_equal(cube.scores[0, 0], [9.0, 8.5])
    np.testing.assert_array_equal(cube.scores[0, 1], [7.0, np.nan])
    assert cube.has_record[0, :3].tolist() == [True, True, True] and not cube.has_record[0, 3:].any()
    assert np.isnan(cube.scores[0, 2]).all()  # med-1: records, all null → unscored
    assert cube.has_record[1].tolist() == [True] + [False] * 7
    assert cube.answer_chars is not None and cube.completion_tokens is not None and cube.latency_s is not None
    assert cube.answer_chars[0, 0] == len("A legally binding agreement.")
    assert cube.answer_chars[0, 1] == 4  # characters, not UTF-8 bytes
    assert math.isnan(cube.answer_chars[0, 2]) and math.isnan(cube.completion_tokens[0, 2])
    assert cube.completion_tokens[0, 0] == 7 and cube.latency_s[0, 1] == 0.5
    assert np.isnan(cube.answer_chars[1]).all()
    hot = cubes["hot"]
    assert hot.models == ("beta",) and hot.judges == ("a", "b")
    assert hot.answer_chars is not None and hot.answer_chars[0, 0] == len("An agreement.")
    s = score_series(cube, ScoringConfig())
    assert s.n_scored.tolist() == [2, 1] and s.n_unscored.tolist() == [1, 0]


def test_cubes_do_not_depend_on_record_order(tmp_path: Path) -> None:
    lines = [line for line in JUDGMENTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(4).shuffle(lines)
    shuffled = tmp_path / "j.jsonl"
    shuffled.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bench = load_benchmark(BENCH)
    a, b = build_cubes(bench, load_judgments(JUDGMENTS)), build_cubes(bench, load_judgments(shuffled))
    assert set(a) == set(b)
    for name in a:
        assert a[name].models == b[name].models and a[name].judges == b[name].judges
        np.testing.assert_array_equal(a[name].scores, b[name].scores)
        np.testing.assert_array_equal(a[name].has_record, b[name].has_record)


def test_sources_directory_glob_and_list(tmp_path: Path) -> None:
    lines = JUDGMENTS.read_text(encoding="utf-8").splitlines()
    (tmp_path / "b.jsonl").write_text("\n".join(lines[6:]) + "\n", encoding="utf-8")
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:6]) + "\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("ignored", encoding="utf-8")
    by_dir = load_judgments(tmp_path)
    assert by_dir.sources == (str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))
    assert len(by_dir) == 9
    (tmp_path / "c.jsonl").mkdir()  # a directory that a glob matches is not a file to read
    assert load_judgments(str(tmp_path / "*.jsonl")).sources == by_dir.sources
    assert load_judgments(tmp_path).sources == by_dir.sources
    assert load_judgments([tmp_path / "b.jsonl", tmp_path / "a.jsonl"]).series == ("default", "hot")
    assert by_dir.location(5) == (str(tmp_path / "b.jsonl"), "line 1")
    with pytest.raises(InputError, match="no judgments files match"):
        resolve_sources(str(tmp_path / "*.parquet"), "judgments")
    with pytest.raises(InputError, match="not found"):
        load_judgments(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \*\.parquet or \*\.jsonl"):
        load_judgments(empty)


@pytest.mark.parametrize(
    ("records", "line", "field", "fragment"),
    [
        ([judgment(), judgment(judge="b", score=11)], 2, "score", "outside 0..10"),
        ([judgment(), judgment(judge="b", score=-0.5)], 2, "score", "outside 0..10"),
        ([judgment(), judgment(judge="b", score="7")], 2, "score", "must be a number"),
        ([judgment(), judgment(judge="b", score=True)], 2, "score", "must be a number"),
        ([judgment(), {"question_id": "law-1", "model": "alpha", "score": 5}], 2, "judge", "missing"),
        ([judgment(), judgment(model=None)], 2, "model", "missing"),
        ([judgment(), judgment(judge="")], 2, "judge", "empty"),
        ([judgment(), judgment(judge="b", series="")], 2, "series", "empty"),
        ([judgment(), judgment(judge={"name": "b"})], 2, "judge", "must be a string"),
        ([judgment(), judgment(model=["m"])], 2, "model", "must be a string"),
    ],
)
def test_judgment_errors(tmp_path: Path, records: list[object], line: int, field: str, fragment: str) -> None:
    path = write_jsonl(tmp_path / "j.jsonl", *records)
    for text in (False, True):
        with pytest.raises(InputError) as info:
            load_judgments(path, text=text)
        err = info.value
        assert (err.source, err.location, err.field) == (str(path), f"line {line}", field)
        assert fragment in str(err)


def test_invalid_json_line_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(judgment()) + "\n\n" + '{"question_id": "law-1",\n', encoding="utf-8")
    with pytest.raises(InputError, match="invalid JSON") as info:
        load_judgments(path)
    assert info.value.location == "line 3"
    path.write_bytes(json.dumps(judgment()).encode() + b'\n{"question_id": "l\xffaw"}\n')
    with pytest.raises(InputError, match="UTF-8") as info:
        load_judgments(path)
    assert info.value.location == "line 2"


def test_out_of_range_after_blank_lines_names_physical_line(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(
        "\n" + json.dumps(judgment()) + "\n   \n" + json.dumps(judgment(judge="b", score=10.5)) + "\n"
    )
    with pytest.raises(InputError) as info:
        load_judgments(path)
    assert info.value.location == "line 4"


def test_duplicate_judgment_names_both_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "j.jsonl", judgment(), judgment(judge="b"), judgment(score=3))
    with pytest.raises(InputError) as info:
        load_judgments(path)
    assert info.value.location == "line 3" and "also at line 1" in str(info.value)
    assert "'alpha'" in str(info.value) and "'law-1'" in str(info.value)
    # The first repeat in file order is reported, with its previous occurrence.
    path = write_jsonl(
        tmp_path / "j.jsonl",
        judgment(),
        judgment(judge="b"),
        judgment(judge="c"),
        judgment(judge="b"),
        judgment(),
    )
    with pytest.raises(InputError) as info:
        load_judgments(path)
    assert info.value.location == "line 4" and "also at line 2" in str(info.value)
    # Across files: both files are named.
    other = write_jsonl(tmp_path / "k.jsonl", judgment(judge="c"), judgment(judge="b", series="default"))
    first = write_jsonl(tmp_path / "j.jsonl", judgment(), judgment(judge="b"))
    with pytest.raises(InputError) as info:
        load_judgments([first, other])
    assert info.value.source == str(other) and info.value.location == "line 2"
    assert f"{first}, line 2" in str(info.value)
    # The same key in different series is not a duplicate.
    write_jsonl(tmp_path / "k.jsonl", judgment(series="hot"))
    assert len(load_judgments([first, other])) == 3


def test_question_not_in_benchmark(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "j.jsonl", judgment(), judgment(qid="nope"))
    with pytest.raises(InputError, match="'nope', which is not in the benchmark") as info:
        build_cubes(load_benchmark(BENCH), load_judgments(path))
    assert (
        info.value.source == str(path)
        and info.value.location == "line 2"
        and info.value.field == "question_id"
    )


def test_empty_judgments(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no judgment records"):
        load_judgments(path)


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"question_id": "law-1", "model": "alpha", "usage": {"completion_tokens": 1.5}}, "usage"),
        ({"question_id": "law-1", "model": "alpha", "latency_s": -1}, "latency_s"),
        ({"question_id": "law-1", "model": "alpha", "latency_s": "fast"}, "latency_s"),
        ({"question_id": "law-1", "answer": "x"}, "model"),
        ({"question_id": ["law-1"], "model": "alpha", "answer": "x"}, "question_id"),
    ],
)
def test_answer_errors(tmp_path: Path, record: dict[str, object], field: str) -> None:
    path = write_jsonl(
        tmp_path / "a.jsonl", {"question_id": "law-2", "model": "alpha", "answer": "ok"}, record
    )
    with pytest.raises(InputError) as info:
        load_answers(path)
    assert info.value.location == "line 2" and info.value.field == field


def test_duplicate_answers(tmp_path: Path) -> None:
    record = {"question_id": "law-2", "model": "alpha", "answer": "ok"}
    path = write_jsonl(tmp_path / "a.jsonl", record, {**record, "series": "default"})
    with pytest.raises(InputError, match="duplicate answer") as info:
        load_answers(path)
    assert info.value.location == "line 2"


def test_answers_frame() -> None:
    frame = load_answers(DATA / "answers.jsonl", text=True).to_frame()
    assert frame["series"].to_list() == ["default", "default", "default", "hot"]
    assert frame["prompt_tokens"].to_list() == [31, 30, None, 31]
    assert frame["answer"].to_list()[1] == "Дело"
    assert frame["error"].to_list()[2] == "HTTP 503 after 3 attempts"


def full_answer(qid: str = "law-1", series: str = "hot") -> AnswerRecord:
    """An answer with every field set, as a stage writes it (fingerprint and format included)."""
    return AnswerRecord(
        question_id=qid,
        model="alpha",
        series=series,
        answer="Договор",
        finish_reason="stop",
        usage=TokenUsage(prompt_tokens=12, completion_tokens=40),
        latency_s=1.25,
        attempts=2,
        error=None,
        error_kind=None,
        server_version="b4321",
        fingerprint="0123456789abcdef",
    )


def full_judgment(qid: str = "law-1") -> JudgmentRecord:
    return JudgmentRecord(
        question_id=qid,
        model="alpha",
        judge="a",
        series="hot",
        answer_id="m-1",
        score=7.5,
        rationale="close to the reference",
        error=None,
        error_kind=None,
        asks=1,
        latency_s=0.5,
        usage=TokenUsage(prompt_tokens=300, completion_tokens=20),
        fingerprint="feedfeedfeedfeed",
    )


@pytest.mark.parametrize("record", [full_answer(), full_judgment()], ids=["answer", "judgment"])
def test_the_polars_schema_has_one_column_per_record_field_and_reads_back_what_the_record_wrote(
    tmp_path: Path, record: AnswerRecord | JudgmentRecord
) -> None:
    schema = polars_schema(type(record))
    assert list(schema) == [f.name for f in dataclasses.fields(record)]
    path = write_jsonl(tmp_path / "r.jsonl", record.to_json())
    [row] = pl.read_ndjson(path, schema=schema).to_dicts()
    assert type(record).from_json(row) == record


def test_the_columns_the_loaders_read_are_record_fields_with_the_record_s_types() -> None:
    answers, judgments = polars_schema(AnswerRecord), polars_schema(JudgmentRecord)
    assert {name: answers[name] for name in ANSWER_SCHEMA} == ANSWER_SCHEMA
    assert {name: judgments[name] for name in (*JUDGMENT_SCHEMA, *JUDGMENT_TEXT_SCHEMA)} == {
        **JUDGMENT_SCHEMA,
        **JUDGMENT_TEXT_SCHEMA,
    }
    assert answers["usage"] == pl.Struct({"prompt_tokens": pl.Int64(), "completion_tokens": pl.Int64()})
    assert (judgments["score"], judgments["judge"]) == (pl.Float64(), pl.String())


def test_a_record_field_of_a_type_without_a_column_type_is_refused_by_name() -> None:
    @dataclasses.dataclass(frozen=True)
    class Stretched:
        question_id: str
        weights: complex | None = None

    with pytest.raises(TypeError, match=r"weights.*complex|complex"):
        polars_schema(Stretched)


def test_records_written_now_with_their_format_key_load_as_before(tmp_path: Path) -> None:
    answers = write_jsonl(
        tmp_path / "a.jsonl", full_answer("law-1").to_json(), full_answer("law-2").to_json()
    )
    judgments = write_jsonl(tmp_path / "j.jsonl", full_judgment("law-1").to_json())
    assert all("format" in json.loads(line) for line in answers.read_text(encoding="utf-8").splitlines())
    frame = load_answers(answers, text=True).to_frame()
    assert frame["completion_tokens"].to_list() == [40, 40] and frame["answer"].to_list() == ["Договор"] * 2
    loaded = load_judgments(judgments, text=True).to_frame()
    assert loaded["score"].to_list() == [7.5] and loaded["rationale"].to_list() == ["close to the reference"]


def test_load_experts_fixture() -> None:
    experts = load_experts(DATA / "experts.csv")
    assert experts.frame.columns == ["question_id", "model", "expert", "score", "series", "line"]
    assert experts.frame["score"].to_list() == [9.0, 6.5, 7.0]
    assert experts.frame["series"].to_list() == [None, "default", "hot"]
    assert experts.frame["line"].to_list() == [2, 3, 4]


@pytest.mark.parametrize(
    ("text", "location", "field", "fragment"),
    [
        ("question_id,model,expert,score\nq1,m,e,11\n", "line 2", "score", "outside 0..10"),
        ("question_id,model,expert,score\nq1,m,e,good\n", "line 2", "score", "must be a"),
        ("question_id,model,expert,score\nq1,m,e,1_0\n", "line 2", "score", "plain decimal"),
        ("question_id,model,expert,score\nq1,m,e,nan\n", "line 2", "score", "plain decimal"),
        ("question_id,model,expert,score\nq1,m,e,٧\n", "line 2", "score", "plain decimal"),
        ("question_id,model,expert,score\nq1,,e,5\n", "line 2", "model", "empty"),
        ("question_id,model,score\nq1,m,5\n", "line 1", "expert", "missing"),
        ("question_id,model,expert,score\nq1,m,e,5\nq1,m,e,6\n", "line 3", None, "also at line 2"),
        ("question_id,model,expert,score\nq1,m,e\n", "line 2", None, "columns"),
        ("", None, None, "empty"),
        ("question_id,model,expert,score\n", None, None, "no rows"),
    ],
)
def test_expert_errors(
    tmp_path: Path, text: str, location: str | None, field: str | None, fragment: str
) -> None:
    path = tmp_path / "experts.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_experts(path)
    assert info.value.location == location and info.value.field == field and fragment in str(info.value)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["law-1", "law-2", "law-3", "law-4", "med-1", "med-2", "med-3", "law-5"]),
            st.sampled_from(["alpha", "beta", "gamma"]),
            st.sampled_from(["default", "hot"]),
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.integers(0, 20).map(lambda v: v / 2)),
        ),
        min_size=1,
        max_size=40,
        unique_by=lambda r: r[:4],
    ),
    st.randoms(use_true_random=False),
)
def test_scores_invariant_under_record_order(
    records: list[tuple[str, str, str, str, float | None]], rnd: random.Random
) -> None:
    bench = load_benchmark(BENCH)
    shuffled = list(records)
    rnd.shuffle(shuffled)
    with tempfile.TemporaryDirectory() as folder:
        results = []
        for name, rows in (("a.jsonl", records), ("b.jsonl", shuffled)):
            path = write_jsonl(
                Path(folder) / name,
                *(
                    {"question_id": q, "model": m, "series": s, "judge": j, "score": v}
                    for q, m, s, j, v in rows
                ),
            )
            cubes = build_cubes(bench, load_judgments(path))
            results.append({k: score_series(c, ScoringConfig()) for k, c in cubes.items()})
    first, second = results
    assert set(first) == set(second)
    for series in first:
        a, b = first[series], second[series]
        assert a.models == b.models and a.ranking == b.ranking and a.tiers == b.tiers
        np.testing.assert_allclose(a.weighted, b.weighted, equal_nan=True)
        np.testing.assert_allclose(a.degradation, b.degradation, equal_nan=True)
        np.testing.assert_allclose(a.judge_sigma, b.judge_sigma, equal_nan=True)
        np.testing.assert_array_equal(a.n_unscored, b.n_unscored)


# ------------------------------------------------------------------- judgments already in a frame


def test_judgments_from_frames_are_what_the_loader_makes_of_the_same_records() -> None:
    frame = pl.read_ndjson(JUDGMENTS, schema=JUDGMENT_SCHEMA)
    loaded = load_judgments(JUDGMENTS)
    for parts in (
        [("run/default/", frame.head(4)), ("run/hot/", frame.tail(frame.height - 4))],
        [(f"run/{n}/", frame.slice(n, 1)) for n in range(frame.height)],  # series, judge: one value each
    ):
        from_frames = judgments_from_frames(parts)
        assert from_frames.to_frame().equals(loaded.to_frame())
        assert (from_frames.series, from_frames.judges) == (loaded.series, loaded.judges)
    assert judgments_from_frames(parts).location(5) == ("run/5/", "record 1")  # storage: counted


def test_judgments_from_frames_name_the_part_and_record_of_a_bad_value() -> None:
    frame = pl.DataFrame([judgment(), judgment(model="beta", score=11)], schema=JUDGMENT_SCHEMA)
    with pytest.raises(InputError, match=r"outside 0\.\.10") as info:
        judgments_from_frames([("s3://b/run/default/judgments/a/", frame)])
    assert (info.value.source, info.value.location, info.value.field) == (
        "s3://b/run/default/judgments/a/",
        "record 2",
        "score",
    )
    with pytest.raises(InputError, match="duplicate judgment") as info:
        judgments_from_frames([("one/", frame.head(1)), ("two/", frame.head(1))])
    assert (info.value.source, info.value.location) == ("two/", "record 1")
    empty = pl.DataFrame([judgment(judge="")], schema=JUDGMENT_SCHEMA)
    with pytest.raises(InputError, match="judgment field is empty") as info:
        judgments_from_frames([("one/", frame), ("two/", empty)])  # a constant judge, empty
    assert (info.value.source, info.value.field) == ("two/", "judge")
