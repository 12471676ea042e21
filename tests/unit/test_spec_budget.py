"""``spec.budget``: a sequential budget is read, checked with the field named, and turned into the
planner's :class:`~kubejury.stats.sequential.Budget`."""

from __future__ import annotations

from typing import Any

import pytest

from factories import build_evalrun, model_entry
from kubejury.config.spec import SpecError, parse_evalrun
from kubejury.stats.sequential import DEFAULT_LOOKS

TWO_MODELS = (model_entry("alpha"), model_entry("beta"))


def run_with(budget: dict[str, Any], **spec: Any) -> Any:
    return parse_evalrun(build_evalrun(models=TWO_MODELS, budget=budget, **spec))


def problems_of(budget: dict[str, Any], **spec: Any) -> str:
    with pytest.raises(SpecError) as caught:
        run_with(budget, **spec)
    return str(caught.value)


def test_a_run_without_a_budget_has_none() -> None:
    assert parse_evalrun(build_evalrun(models=TWO_MODELS)).spec.sequential_budget() is None


def test_the_budget_becomes_the_planners_with_the_scoring_seed() -> None:
    run = run_with(
        {"goal": "full-ranking", "confidence": 0.9, "maxQuestions": 40, "minPerCell": 1, "margin": 0.2},
        scoring={"seed": 7},
    )
    budget = run.spec.sequential_budget()
    assert (budget.goal, budget.confidence, budget.max_questions, budget.min_per_cell) == (
        "full-ranking",
        0.9,
        40,
        1,
    )
    assert (budget.margin, budget.seed, budget.looks) == (0.2, 7, DEFAULT_LOOKS)


def test_goal_comparisons_decides_the_spec_pairs() -> None:
    run = run_with({"goal": "comparisons"}, comparisons=[{"a": "alpha", "b": "beta", "margin": 0.3}])
    (pair,) = run.spec.sequential_budget().comparisons
    assert (pair.a, pair.b, pair.margin) == ("alpha", "beta", 0.3)


def test_goal_comparisons_without_comparisons_names_the_goal() -> None:
    assert "spec.budget.goal: goal 'comparisons' decides the pairs of spec.comparisons" in problems_of(
        {"goal": "comparisons"}
    )


@pytest.mark.parametrize("looks", [[0.5, 0.3, 1.0], [0.5, 0.9], [0.0, 1.0]])
def test_looks_must_increase_to_exactly_one(looks: list[float]) -> None:
    assert "spec.budget.looks: information fractions must increase" in problems_of({"looks": looks})


@pytest.mark.parametrize(
    ("field", "value"),
    [("confidence", 1.0), ("maxQuestions", 0), ("minPerCell", 0), ("margin", 0), ("mode", "greedy")],
)
def test_out_of_range_values_name_their_field(field: str, value: Any) -> None:
    assert f"spec.budget.{field}" in problems_of({field: value})


def test_the_given_looks_are_used() -> None:
    assert run_with({"looks": [0.25, 0.5, 1.0]}).spec.sequential_budget().looks == (0.25, 0.5, 1.0)
