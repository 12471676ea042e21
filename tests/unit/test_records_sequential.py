"""The sequential document: the planner's outcome stored as JSON (NaN as null), read back the same,
a bad field named, and report.json's section counting the questions used and budgeted."""

from __future__ import annotations

import numpy as np
import pytest

from kubejury.records.sequential import (
    SequentialDocument,
    SequentialDocumentError,
    document_key,
    from_outcome,
    report_section,
)
from kubejury.stats.sequential import Budget, evaluate, plan_order

CELLS = np.repeat(np.arange(6, dtype=np.int64), 10)  # 2 domains × 3 levels, 10 questions each
WEIGHTS = np.array([0.6, 0.8, 1.0])


def decided(looks_done: int) -> SequentialDocument:
    """Two close models and a far worse one under a leading-group budget."""
    rng = np.random.default_rng(1)
    budget = Budget(min_per_cell=2, seed=4)
    order = plan_order(CELLS, 2, 3, budget)
    base = np.array([[8.0], [7.9], [1.0]])
    scores = np.clip(base + rng.normal(0, 0.5, (3, CELLS.size)), 0, 10)
    outcome = evaluate(("a", "b", "weak"), scores, order, budget, WEIGHTS, looks_done)
    return from_outcome(outcome, budget, order, updated_at="2026-12-03T16:00:00Z")


def test_the_document_reads_back_as_written() -> None:
    document = decided(3)
    assert SequentialDocument.from_json(document.to_json()) == document
    assert document.looks_done == 3 and document.total_questions == CELLS.size


def test_a_model_with_no_look_yet_has_null_numbers() -> None:
    document = decided(0)
    state = document.state("a")
    assert state.status == "continue" and state.questions == 0
    assert state.estimate is None and state.interval == (None, None)
    assert document.to_json()["models"][0]["estimate"] is None


def test_a_bad_field_is_named() -> None:
    data = decided(2).to_json()
    data["models"][1]["status"] = "paused"
    with pytest.raises(SequentialDocumentError, match=r"run/sequential\.json: models\.1\.status"):
        SequentialDocument.from_json(data, "run/sequential.json")


def test_the_key_is_beside_the_spec() -> None:
    assert document_key("r1") == "r1/sequential.json"


def test_the_report_section_counts_questions_used_against_all() -> None:
    document = decided(6)
    section = report_section(document)
    used = {m.model: m.questions for m in document.models}
    assert section["questions_used"] == sum(used.values())
    assert section["questions_budgeted"] == document.prefix_sizes[-1] * 3
    assert {name: entry["questions"] for name, entry in section["models"].items()} == used
    assert section["models"]["weak"]["reason"] == document.state("weak").reason
