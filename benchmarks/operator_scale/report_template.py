"""One real report.json for the simulated aggregation Jobs, made once by the engine itself.

Why this module exists: a run becomes ``Succeeded`` — and settled, the state whose API cost the
benchmark measures — only when the operator reads a summary from ``<run>/report/report.json``
(:func:`kubejury_operator.status.summary_from_report`). The simulated aggregation Job must
therefore store a document the operator really parses. It is made here once per benchmark by the
engine's own aggregation (:func:`kubejury.report.aggregate.aggregate` and
:func:`kubejury.report.json_report.build_report`) from synthetic judgments of the run's models
and judges over the repository's sample benchmark, and copied into every run by the fast kubelet.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SAMPLE_BENCHMARK = REPO / "examples" / "benchmark-ru-sample.jsonl"
BOOTSTRAP_SAMPLES = 100  # enough for intervals in the summary; the content is not what is measured


def synthetic_judgments(
    questions: Sequence[dict[str, Any]], models: Sequence[str], judges: Sequence[str], series: str, seed: int
) -> list[dict[str, Any]]:
    """A score 0-10 per (question, model, judge): each model has its own quality, lower at level 3."""
    rng = random.Random(seed)
    quality = {m: 5.0 + 4.0 * (len(models) - i) / len(models) for i, m in enumerate(models)}
    rows = []
    for q in questions:
        level = int(q["level"])
        for model in models:
            for judge in judges:
                value = quality[model] - 0.4 * (level - 1) + rng.gauss(0.0, 0.8)
                rows.append(
                    {
                        "question_id": q["id"],
                        "model": model,
                        "series": series,
                        "judge": judge,
                        "score": max(0.0, min(10.0, round(value * 2) / 2)),
                        "rationale": "synthetic (benchmark)",
                        "error": None,
                    }
                )
    return rows


def build(
    models: Sequence[str], judges: Sequence[str], series: str = "primary", seed: int = 0
) -> dict[str, Any]:
    """The report.json document of a synthetic run of ``models`` judged by ``judges``."""
    from kubejury.report.aggregate import aggregate
    from kubejury.report.json_report import build_report
    from kubejury.stats.scoring import ScoringConfig

    questions = [
        json.loads(line) for line in SAMPLE_BENCHMARK.read_text(encoding="utf-8").splitlines() if line
    ]
    with tempfile.TemporaryDirectory(prefix="kubejury-bench-report-") as scratch:
        judgments = Path(scratch) / "judgments.jsonl"
        rows = synthetic_judgments(questions, models, judges, series, seed)
        judgments.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        analysis = aggregate(
            str(SAMPLE_BENCHMARK),
            str(judgments),
            config=ScoringConfig(bootstrap_samples=BOOTSTRAP_SAMPLES, seed=seed),
            inputs={"run": "operator-scale-benchmark", "note": "synthetic judgments (benchmark)"},
        )
    return build_report(analysis)


def write(path: Path, models: Sequence[str], judges: Sequence[str]) -> Path:
    """Build the document once and store it at ``path`` (kept when it is already there)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(build(models, judges), indent=1, allow_nan=False), encoding="utf-8")
    return path
