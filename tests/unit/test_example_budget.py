"""examples/evalrun-budget.yaml: a local budgeted run that parses, whose looks ask the whole sample
benchmark in three waves, and that the operator admits (it runs the looks as Jobs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubejury.config.spec import load_evalrun
from kubejury.pipeline import load_inputs
from kubejury.stages.waves import plan_waves
from kubejury_operator.validation import validate_evalrun

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evalrun-budget.yaml"


def test_the_example_asks_one_question_per_cell_first_then_the_rest_in_two_looks(tmp_path: Path) -> None:
    run = load_evalrun(EXAMPLE)
    budget = run.spec.sequential_budget()
    assert budget is not None and budget.goal == "leading-group" and budget.min_per_cell == 1
    inputs = load_inputs(str(EXAMPLE), out=str(tmp_path))
    plan = plan_waves(
        [m.name for m in run.spec.models], inputs.benchmark, budget, run.spec.scoring.level_weights
    )
    cells = len(inputs.benchmark.domains) * len(inputs.benchmark.levels)
    assert plan.order.prefix_sizes.tolist() == [cells, 72, len(inputs.benchmark.questions)]


def test_the_operator_admits_the_example() -> None:
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert validate_evalrun(document) == []
