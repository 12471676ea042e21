"""``kubejury report`` end to end on small fixture files, through the real CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from report_fixture import SERIES, Fixture, write_fixture

from kubejury.cli import main
from kubejury.commands.report import parse_weights
from kubejury.errors import InputError
from kubejury.report.json_report import load_schema


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return write_fixture(tmp_path_factory.mktemp("cli"))


def test_writes_all_three_reports(
    fixture: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "report",
            "--benchmark",
            str(fixture.benchmark),
            "--judgments",
            str(fixture.judgments_dir),
            "--answers",
            str(fixture.answers_dir),
            "--models",
            str(fixture.models),
            "--experts",
            str(fixture.experts),
            "--weights",
            "1=0.6,2=0.8,3=1.0",
            "--bootstrap",
            "60",
            "--seed",
            "5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    jsonschema.validate(document, load_schema(), cls=jsonschema.Draft202012Validator)
    assert set(document["series"]) == set(SERIES)
    assert document["config"]["bootstrap_samples"] == 60 and document["config"]["seed"] == 5
    assert document["inputs"]["models"] == str(fixture.models)
    assert document["series"]["t0"]["experts"]["n_matched"] > 0
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'data-plot="size-t0"' in html  # sizes came from the models file
    printed = capsys.readouterr().out
    assert "report.html" in printed and document["series"]["t0"]["ranking"][0] in printed


def test_format_json_prints_only_the_report(fixture: Fixture) -> None:
    # A real subprocess: nothing but report.json may reach stdout (no progress, no warnings).
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubejury.cli",
            "report",
            "--benchmark",
            str(fixture.benchmark),
            "--judgments",
            str(fixture.judgments_dir / "t0-*.jsonl"),
            "--bootstrap",
            "30",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, load_schema(), cls=jsonschema.Draft202012Validator)
    assert list(document["series"]) == ["t0"]  # the glob selected one series' files
    assert document["series"]["t0"]["models"]["alpha-27b"]["levels"]["3"] is not None


def test_weights_change_w(fixture: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    def weighted(weights: str) -> float:
        argv = ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(fixture.judgments_dir)]
        argv += ["--weights", weights, "--bootstrap", "0", "--format", "json"]
        assert main(argv) == 0
        value: float = json.loads(capsys.readouterr().out)["series"]["t0"]["models"]["gamma-9b"]["weighted"]
        return value

    only_level_1 = weighted("1=1,2=0,3=0")
    argv = ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(fixture.judgments_dir)]
    assert main([*argv, "--bootstrap", "0", "--format", "json"]) == 0
    document_levels = json.loads(capsys.readouterr().out)["series"]["t0"]["models"]["gamma-9b"]["levels"]
    assert only_level_1 == pytest.approx(document_levels["1"], abs=1e-4)
    assert weighted("1=0.6,2=0.8,3=1.0") != only_level_1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--weights", "1=0.6,2=0.8"], "level"),  # level 3 present in the data without a weight
        (["--weights", "one=0.6"], "--weights"),
        (["--bootstrap", "-1"], "--bootstrap"),
        (["--models", "missing.yaml"], "models file not found"),
        (["--experts", "missing.csv"], "experts file not found"),
        (["--primary-series", "nope"], "primary series 'nope'"),
    ],
)
def test_bad_options_exit_non_zero_with_a_message(
    fixture: Fixture, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(fixture.judgments_dir)]
    code = main([*argv, "--format", "json", "--bootstrap", "0", *extra])
    captured = capsys.readouterr()
    assert code != 0
    assert captured.out == ""
    assert "kubejury report: error:" in captured.err and message in captured.err


def test_bad_input_files_name_the_file_and_line(
    fixture: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    good = (fixture.judgments_dir / "t0-judge-a.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(good[1])
    record["score"] = 11
    bad.write_text("\n".join([good[0], json.dumps(record), *good[2:]]) + "\n", encoding="utf-8")
    code = main(
        ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(bad), "--format", "json"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert str(bad) in err and "line 2" in err and "score" in err

    code = main(
        ["report", "--benchmark", str(tmp_path / "nope.jsonl"), "--judgments", str(bad), "--format", "json"]
    )
    assert code == 2 and "nope.jsonl" in capsys.readouterr().err

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    code = main(
        ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(empty_dir), "--format", "json"]
    )
    assert code == 2 and "empty" in capsys.readouterr().err


def test_unwritable_out_is_a_clear_error(
    fixture: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    argv = ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(fixture.judgments_dir)]
    code = main([*argv, "--bootstrap", "0", "--out", str(blocker / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot write the reports there" in err and str(blocker) in err


def test_needs_out_or_format_json(fixture: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", "--benchmark", str(fixture.benchmark), "--judgments", str(fixture.judgments_dir)])
    assert code == 2 and "--out" in capsys.readouterr().err


def test_inputs_are_checked_before_output_options_and_every_problem_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "does" / "not" / "exist"
    code = main(
        [
            "report",
            "--benchmark",
            str(tmp_path / "bench.jsonl"),
            "--judgments",
            f"{missing}/",
            str(tmp_path / "j-*.jsonl"),
            "--models",
            str(tmp_path / "models.yaml"),
            "--bootstrap",
            "-1",
        ]
    )
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.splitlines()
    assert lines == [
        f"kubejury report: error: {tmp_path / 'bench.jsonl'}: benchmark file not found",
        f"kubejury report: error: {missing}/: judgments file not found",
        f"kubejury report: error: {tmp_path / 'j-*.jsonl'}: no judgments files match this pattern",
        f"kubejury report: error: {tmp_path / 'models.yaml'}: models file not found",
        "kubejury report: error: --bootstrap: must be 0 (no intervals) or a number of resamples up to 1000000 "
        "(spec.scoring.bootstrapSamples has the same bound)",
        "kubejury report: error: --out: give a directory to write report.json, report.md and report.html "
        "into, or --format json to print report.json",
    ]


def test_parse_weights() -> None:
    assert parse_weights("1=0.6, 2=0.8,3=1") == {1: 0.6, 2: 0.8, 3: 1.0}
    for bad in ("", "1", "1=x", "0=1", "1=-1", "1=1,1=2", "1=0"):
        with pytest.raises(InputError):
            parse_weights(bad)


def test_a_bootstrap_count_above_the_specs_bound_is_a_command_line_error_not_a_memory_error(
    fixture: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    # --out is left out too, so that before the bound existed the command stopped without resampling.
    argv = ["report", "--benchmark", str(fixture.benchmark), "--judgments", str(fixture.judgments_dir)]
    assert main([*argv, "--bootstrap", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert "kubejury report: error: --bootstrap" in err and "1000000" in err


def test_the_largest_bootstrap_count_the_spec_allows_is_accepted_by_the_command_line() -> None:
    from kubejury.cli import build_parser
    from kubejury.commands.report import problems
    from kubejury.config.spec_rules import MAX_BOOTSTRAP_SAMPLES

    args = build_parser("report").parse_args(
        ["report", "--benchmark", "b", "--judgments", "j", "--bootstrap", str(MAX_BOOTSTRAP_SAMPLES)]
    )
    assert not [p for p in problems(args) if p.source == "--bootstrap"]
