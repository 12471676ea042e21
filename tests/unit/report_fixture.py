"""A tiny, deterministic evaluation on disk for the report tests: benchmark, judgments, answers,
expert scores and a models file, shaped like a real run (two series, a judge that is also an
evaluated model, parse failures, an unscored answer, unequal domain sizes).

Not a test module (no ``test_`` prefix); the report tests import it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DOMAINS = ("Law", "Medicine", "DevOps")
LEVELS = (1, 2, 3)
MODELS = {  # name -> (quality, degradation per level, size label, family, quantization, GPU GiB)
    "alpha-27b": (9.2, 0.10, "27B", "alpha", "FP8", 40),
    "beta-120b": (9.0, 0.20, "120B", "beta", "MXFP4", 80),
    "gamma-9b": (8.4, 0.45, "9B", "gamma", "Q4_K_M", 8),
    "delta-26b-a4b": (7.2, 0.80, "26B-A4B", "delta", "FP8", 32),
}
JUDGES = ("judge-a", "judge-b", "beta-judge")
SERIES = ("t0", "t0.8")
NULL_EVERY = 17  # judge-b fails to produce a parsable score on every 17th answer


@dataclass(frozen=True)
class Fixture:
    root: Path
    benchmark: Path
    judgments_dir: Path
    answers_dir: Path
    experts: Path
    models: Path
    n_questions: int
    n_judgments: dict[str, int]
    null_scores: dict[str, dict[str, int]]  # series -> judge -> null-score records


def _questions(per_cell: int) -> list[dict[str, object]]:
    rows = []
    for d, domain in enumerate(DOMAINS):
        for level in LEVELS:
            # Unequal domain sizes: DevOps has one question fewer at level 3.
            count = per_cell - (1 if domain == "DevOps" and level == 3 else 0)
            for k in range(count):
                qid = f"{domain[:3].lower()}-{level}-{k}"
                rows.append(
                    {
                        "id": qid,
                        "domain": domain,
                        "level": level,
                        "question": f"Question {k} of {domain} at level {level}?",
                        "reference": f"Reference answer {d}-{level}-{k}.",
                    }
                )
    return rows


def write_fixture(root: Path, per_cell: int = 4, seed: int = 7) -> Fixture:
    """Write the fixture files under ``root`` and return their paths and expected counts."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    questions = _questions(per_cell)
    benchmark = root / "benchmark.jsonl"
    benchmark.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")

    judgments_dir = root / "judgments"
    answers_dir = root / "answers"
    judgments_dir.mkdir(exist_ok=True)
    answers_dir.mkdir(exist_ok=True)
    n_judgments: dict[str, int] = {}
    nulls: dict[str, dict[str, int]] = {}
    for s, series in enumerate(SERIES):
        shift = -0.3 * s
        counter = 0
        per_judge: dict[str, list[str]] = {j: [] for j in JUDGES}
        answers: list[str] = []
        nulls[series] = dict.fromkeys(JUDGES, 0)
        for model, (quality, drop, *_rest) in MODELS.items():
            for q in questions:
                level = int(str(q["level"]))
                length = int(rng.integers(200, 2000))
                answers.append(
                    json.dumps(
                        {
                            "question_id": q["id"],
                            "model": model,
                            "series": series,
                            "answer": "x" * length,
                            "finish_reason": "stop",
                            "usage": {"prompt_tokens": 50, "completion_tokens": length // 4},
                            "latency_s": round(float(rng.uniform(0.5, 3.0)), 3),
                            "error": None,
                        }
                    )
                )
                unscored = model == "delta-26b-a4b" and q["id"] == "law-3-0"
                for judge in JUDGES:
                    counter += 1
                    lenient = 0.4 if judge == "beta-judge" and model == "beta-120b" else 0.0
                    value = (
                        quality
                        + shift
                        - drop * (level - 1)
                        + lenient
                        + rng.normal(0.0, 0.5)
                        + 0.0002 * length
                    )
                    score: float | None = float(np.clip(round(value * 2) / 2, 0.0, 10.0))
                    if unscored or (judge == "judge-b" and counter % NULL_EVERY == 0):
                        score = None
                        nulls[series][judge] += 1
                    per_judge[judge].append(
                        json.dumps(
                            {
                                "question_id": q["id"],
                                "model": model,
                                "series": series,
                                "judge": judge,
                                "score": score,
                                "rationale": "fixture",
                                "error": None if score is not None else "unparsable judge output",
                            }
                        )
                    )
        for judge, lines in per_judge.items():
            (judgments_dir / f"{series}-{judge}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (answers_dir / f"{series}.jsonl").write_text("\n".join(answers) + "\n", encoding="utf-8")
        n_judgments[series] = sum(len(lines) for lines in per_judge.values())

    experts = root / "experts.csv"
    rows = ["question_id,model,expert,score"]
    for q in questions[:: max(1, len(questions) // 12)]:
        for model, (quality, drop, *_rest) in MODELS.items():
            level = int(str(q["level"]))
            rows.append(
                f"{q['id']},{model},dr-{len(rows) % 2},{np.clip(round(quality - drop * (level - 1)), 0, 10)}"
            )
    experts.write_text("\n".join(rows) + "\n", encoding="utf-8")

    models = root / "models.yaml"
    lines = ["models:"]
    for model, (_q, _d, size, family, quant, memory) in MODELS.items():
        lines += [
            f"  {model}:",
            f"    parameters: {size}",
            f"    family: {family}",
            f"    quantization: {quant}",
            f"    gpuMemoryGiB: {memory}",
        ]
    lines += ["judges:", "  beta-judge:", "    sameAs: beta-120b", "    family: beta"]
    models.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Fixture(
        root, benchmark, judgments_dir, answers_dir, experts, models, len(questions), n_judgments, nulls
    )
