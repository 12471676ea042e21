"""Bad spec and bad benchmark files: a clear error naming file, line and field, and nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kubejury.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = (REPO / "examples" / "quickstart.yaml").read_text(encoding="utf-8")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copy(REPO / "examples" / "benchmark-ru-sample.jsonl", tmp_path / "benchmark-ru-sample.jsonl")
    return tmp_path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "generate", "judge", "aggregate"])
def test_unknown_field_in_spec(workdir: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    spec = workdir / "bad.yaml"
    bad_text = QUICKSTART.replace("      quantization: Q4_K_M\n", "      quantisation: Q4_K_M\n", 1)
    assert bad_text != QUICKSTART, "the quickstart no longer has the line this test misspells"
    spec.write_text(bad_text, encoding="utf-8")
    # The line of the misspelt key, counted here so that editing the quickstart keeps the test honest.
    bad_line = bad_text.splitlines().index("      quantisation: Q4_K_M") + 1
    out = workdir / "out"
    args = (
        [command, str(spec), "--out", str(out)]
        if command == "run"
        else [command, "--evalrun", str(spec), "--out", str(out)]
    )
    code, err = _run(args, capsys)
    assert code == 2
    assert str(spec) in err and "spec.models[0].quantisation" in err and f"line {bad_line}" in err
    assert "unknown field" in err
    assert not out.exists()


def test_bad_level_in_benchmark(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = workdir / "benchmark-ru-sample.jsonl"
    lines = bench.read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4].replace('"level": 3', '"level": "три"')
    bench.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = workdir / "quickstart.yaml"
    spec.write_text(QUICKSTART, encoding="utf-8")
    out = workdir / "out"
    code, err = _run(["run", str(spec), "--out", str(out)], capsys)
    assert code == 2
    assert "benchmark-ru-sample.jsonl" in err and "line 5" in err and "level" in err
    assert not out.exists()


def test_missing_benchmark_file(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = workdir / "quickstart.yaml"
    spec.write_text(
        QUICKSTART.replace("uri: benchmark-ru-sample.jsonl", "uri: nowhere.jsonl"), encoding="utf-8"
    )
    out = workdir / "out"
    code, err = _run(["run", str(spec), "--out", str(out)], capsys)
    assert code == 2 and "nowhere.jsonl" in err and "not found" in err
    assert not out.exists()


def test_filter_naming_unknown_domain(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = workdir / "quickstart.yaml"
    bad = QUICKSTART.replace("      domains: [law]", "      domains: [law, astrology]")
    # Without this a changed quickstart would silently run the whole demo here.
    assert bad != QUICKSTART, "the quickstart no longer has the domains line this test changes"
    spec.write_text(bad, encoding="utf-8")
    out = workdir / "out"
    code, err = _run(["run", str(spec), "--out", str(out)], capsys)
    assert code == 2 and "spec.benchmark.filters.domains" in err and "astrology" in err
    assert not out.exists()


def test_empty_benchmark(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "benchmark-ru-sample.jsonl").write_text("", encoding="utf-8")
    spec = workdir / "quickstart.yaml"
    spec.write_text(QUICKSTART, encoding="utf-8")
    out = workdir / "out"
    code, err = _run(["run", str(spec), "--out", str(out)], capsys)
    assert code == 2 and "benchmark-ru-sample.jsonl" in err
    assert not out.exists()
