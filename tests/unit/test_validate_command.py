"""``kubejury validate``: exit codes and messages a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubejury.cli import main

GOOD = """\
apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata: {name: quick}
spec:
  benchmark: {uri: bench.jsonl}
  models: [{name: tiny, runtime: llamacpp}]
  judges: [{name: judge, runtime: llamacpp, seed: 1}]
"""


def test_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "ok.yaml"
    file.write_text(GOOD, encoding="utf-8")
    assert main(["validate", str(file)]) == 0
    assert "ok" in capsys.readouterr().out


def test_invalid_file_lists_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(GOOD.replace("seed: 1", "seed: 1, quantization: fp8"), encoding="utf-8")
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert "line 7: spec.judges[0].quantization" in err
    assert "vLLM only" in err


def test_an_unknown_quantization_is_named_in_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "typo.yaml"
    file.write_text(
        GOOD.replace("runtime: llamacpp}]\n  judges", "runtime: llamacpp, quantization: Q4_K_MM}]\n  judges"),
        encoding="utf-8",
    )
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert "line 6: spec.models[0].quantization: unknown quantization 'Q4_K_MM'; allowed:" in err
    assert "{" not in err
