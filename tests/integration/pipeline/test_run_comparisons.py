"""``kubejury run`` with ``spec.comparisons``: the report has the equivalence section (issue 27).

A real run in a separate process against the loopback OpenAI-compatible stub, two models compared.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def test_a_local_run_reports_the_compared_pair_in_all_three_files(tmp_path: Path, stub_server: Any) -> None:
    spec = tmp_path / "pair.yaml"
    spec.write_text(
        f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: pair
spec:
  benchmark:
    uri: {(REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()}
    filters:
      domains: [law, finance]
  models:
    - name: alpha
      runtime: openai
      source: {stub_server.base_url}
    - name: beta
      runtime: openai
      source: {stub_server.base_url}
  judges:
    - name: judge-one
      runtime: openai
      source: {stub_server.base_url}
  comparisons:
    - {{a: alpha, b: beta, margin: 0.3}}
  scoring:
    bootstrapSamples: 200
  storage:
    uri: {(tmp_path / "out").as_uri()}
""",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "kubejury.cli", "run", str(spec), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(
        r"equivalence alpha − beta: ΔW [+-]\d\.\d{3} \(90% .*\) within ±0\.3: (equivalent|different|undecided)",
        done.stdout,
    )
    report = next((tmp_path / "out").rglob("report.json"))
    document = json.loads(report.read_text(encoding="utf-8"))
    (comparison,) = document["series"][document["primary_series"]]["comparisons"]
    assert (comparison["a"], comparison["b"], comparison["margin"], comparison["origin"]) == (
        "alpha",
        "beta",
        0.3,
        "spec",
    )
    assert comparison["verdict"] in ("equivalent", "different", "undecided")
    assert comparison["n_questions"] == document["series"][document["primary_series"]]["n_questions"]
    assert "### Equivalence of paired models" in report.with_name("report.md").read_text(encoding="utf-8")
    assert 'data-plot-kind="equivalence"' in report.with_name("report.html").read_text(encoding="utf-8")
