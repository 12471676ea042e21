"""A budgeted run's waves: the benchmark becomes the planner's cells, a look's prefix is a
stratified share of the questions in benchmark order, stored judgments become S(m, q), and the
decision and its document round-trip through storage."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kubejury.files.benchmark import Benchmark, Question
from kubejury.files.storage import LocalStorage
from kubejury.records.results import JudgmentRecord
from kubejury.stages.waves import plan_waves, question_cells, read_document, score_matrix, write_document
from kubejury.stats.sequential import Budget

WEIGHTS = {1: 0.6, 2: 0.8, 3: 1.0}


def benchmark(per_cell: int = 10) -> Benchmark:
    questions = tuple(
        Question(f"{d}-{lvl}-{i}", d, lvl, f"q {d} {lvl} {i}", "ref")
        for d in ("law", "med")
        for lvl in (1, 2, 3)
        for i in range(per_cell)
    )
    return Benchmark(questions, "bench.jsonl")


def judged(model: str, question: str, judge: str, score: float | None) -> JudgmentRecord:
    return JudgmentRecord(question_id=question, model=model, judge=judge, score=score)


def test_cells_are_domain_times_levels_plus_level() -> None:
    cells = question_cells(benchmark(2))
    assert cells.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_a_prefix_takes_every_cell_in_benchmark_order() -> None:
    bench = benchmark()
    plan = plan_waves(["a", "b"], bench, Budget(min_per_cell=2, seed=3), WEIGHTS)
    first = plan.prefix(0)
    assert len(first) == plan.order.prefix_sizes[0]
    assert Counter((q.domain, q.level) for q in first) == {
        (d, lvl): 2 for d in ("law", "med") for lvl in (1, 2, 3)
    }
    index = {q.id: i for i, q in enumerate(bench.questions)}
    assert [index[q.id] for q in first] == sorted(index[q.id] for q in first)
    assert {q.id for q in first} <= {q.id for q in plan.prefix(1)}
    assert len(plan.prefix(plan.n_looks - 1)) == len(bench.questions)


def test_the_score_is_the_mean_of_the_judges_non_null_scores() -> None:
    records = [
        judged("a", "q1", "j1", 8.0),
        judged("a", "q1", "j2", 6.0),
        judged("a", "q2", "j1", None),
        judged("b", "q2", "j1", 3.0),
        judged("other", "q1", "j1", 1.0),  # not a model of the run: ignored
    ]
    s = score_matrix(["a", "b"], ["q1", "q2"], records)
    assert s[0, 0] == 7.0 and np.isnan(s[0, 1]) and np.isnan(s[1, 0]) and s[1, 1] == 3.0


def test_a_far_worse_model_is_stopped_and_the_document_is_stored(tmp_path: Path) -> None:
    bench = benchmark(20)
    plan = plan_waves(["good", "bad"], bench, Budget(min_per_cell=2, seed=1), WEIGHTS)
    rng = np.random.default_rng(0)
    records = [
        judged(m, q.id, "j", float(np.clip(base + rng.normal(0, 0.7), 0, 10)))
        for m, base in (("good", 8.5), ("bad", 1.5))
        for q in bench.questions
    ]
    outcome = plan.decide(records, plan.n_looks)
    bad = outcome.outcome("bad")
    assert bad.status == "stopped" and bad.reason == "out: below good" and bad.look < plan.n_looks
    storage = LocalStorage(tmp_path)
    assert read_document(storage, "r") is None
    write_document(storage, "r", plan.document(outcome))
    stored = read_document(storage, "r")
    assert stored is not None and stored.state("bad").questions == bad.questions
    assert stored.leading_group == ["good"]


def test_a_budget_below_the_first_wave_fails_before_the_run_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from factories import build_evalrun_yaml, model_entry
    from kubejury.cli import main

    bench = tmp_path / "bench.jsonl"
    bench.write_text(
        "".join(
            f'{{"id": "{q.id}", "domain": "{q.domain}", "level": {q.level}, "question": "q", "reference": "r"}}\n'
            for q in benchmark(4).questions
        ),
        encoding="utf-8",
    )
    spec = tmp_path / "run.yaml"
    spec.write_text(
        build_evalrun_yaml(
            "tight",
            benchmark=bench.as_uri(),
            models=[model_entry("a", "http://127.0.0.1:9/v1", runtime="openai")],
            judges=[model_entry("j", "http://127.0.0.1:9/v1", runtime="openai")],
            budget={"maxQuestions": 6, "minPerCell": 2},
            storage={"uri": (tmp_path / "out").as_uri()},
        ),
        encoding="utf-8",
    )
    assert main(["run", str(spec), "--no-progress"]) == 2
    assert "budget.maxQuestions 6 is below the first wave's 12 questions" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
