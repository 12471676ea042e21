"""What ``kubejury run`` prints at the end: the ranking with intervals, the significance matrix and
the leading group — the first thing a newcomer reads after ``make demo``.

A real run in a separate process against the loopback OpenAI-compatible stub, two models.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def test_two_models_are_ranked_with_intervals_and_a_significance_matrix(
    tmp_path: Path, stub_server: Any
) -> None:
    spec = tmp_path / "two.yaml"
    spec.write_text(
        f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: two
spec:
  benchmark:
    uri: {(REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()}
    filters:
      limitPerCell: 1
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
  scoring:
    bootstrapSamples: 100
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
    out = done.stdout
    ranking = out[out.index("Ranking") : out.index("Significance")]
    assert "95% CI" in ranking
    ranked = re.findall(r"│\s*([12])\s*│\s*(alpha|beta)\s*│\s*([\d.]+)\s*│\s*([\d.]+)–([\d.]+)", ranking)
    assert sorted(model for _, model, *_ in ranked) == ["alpha", "beta"]
    for _, _, w, low, high in ranked:
        assert float(low) <= float(w) <= float(high)
    matrix = out[out.index("Significance") : out.index("leading group")]
    rows = re.findall(r"│\s*(alpha|beta)\s*│\s*(·|[\d.]+)\s*│\s*(·|[\d.]+)\s*│", matrix)
    assert len(rows) == 2
    first, second = rows
    # P(i better than j) + P(j better than i) = 1 off the diagonal.
    assert abs(float(first[2]) + float(second[1]) - 1.0) < 0.011
    assert re.search(r"leading group at 95% \(not distinguishable from the top\): (alpha|beta)", out)
