"""Sequential evaluation: the question order is stratified, the spending adds up to α, the prefix
variance is the bootstrap's, and each goal stops the models it should, for the reason it should."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from kubejury.errors import ConfigError
from kubejury.stats.cube import FloatArray, IntArray, ScoreCube
from kubejury.stats.scoring import ScoringConfig, cell_index, question_means, score_series
from kubejury.stats.sequential import (
    Budget,
    Comparison,
    evaluate,
    obrien_fleming,
    plan_order,
    prefix_estimates,
    spend,
    spending_levels,
)
from kubejury.stats.uncertainty import bootstrap_series
from kubejury.testing.calibration import draw_benchmark, equal_shape, standard_population, unequal_shape

WEIGHTS = np.array([0.6, 0.8, 1.0])


def cells_of(per_cell: IntArray) -> IntArray:
    """Question cells (domain·3 + level) of a (domains, 3) table of cell sizes."""
    return np.repeat(np.arange(per_cell.size, dtype=np.int64), per_cell.ravel())


def equal_cells(domains: int = 4, per_cell: int = 30) -> IntArray:
    return cells_of(np.full((domains, 3), per_cell, dtype=np.int64))


def prefix_cube(cube: ScoreCube, asked: np.typing.NDArray[np.bool_]) -> ScoreCube:
    return replace(
        cube,
        question_ids=tuple(np.array(cube.question_ids)[asked].tolist()),
        question_domain=cube.question_domain[asked],
        question_level=cube.question_level[asked],
        scores=cube.scores[:, asked],
        has_record=cube.has_record[:, asked],
    )


# --- the order and the waves -------------------------------------------------------------------


def test_every_prefix_takes_the_same_share_of_every_cell() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget(seed=5))
    assert sorted(order.order.tolist()) == list(range(cells.size))  # a permutation
    for k in range(order.n_looks):
        per_cell = np.bincount(cells[order.asked(k)], minlength=12)
        share = order.prefix_sizes[k] / cells.size * 30
        assert per_cell.min() >= math.floor(share) and per_cell.max() <= math.ceil(share)


def test_unequal_cells_prefixes_are_a_threshold_on_the_position_in_each_cell() -> None:
    sizes = unequal_shape().cells
    cells = cells_of(sizes)
    order = plan_order(cells, 16, 3, Budget(seed=1))
    n = sizes.ravel()
    for k in range(order.n_looks):
        asked = order.asked(k)
        unforced = asked & ~order.forced
        if not unforced.any():
            assert asked.tolist() == order.forced.tolist()
            continue
        tau = order.position[unforced].max()
        assert asked.tolist() == (order.forced | (order.position <= tau)).tolist()
        below = np.bincount(cells[order.position <= tau], minlength=n.size)
        assert np.all(below >= np.floor(tau * n)) and np.all(below <= np.floor(tau * n) + 1)


def test_first_wave_holds_min_per_cell_of_every_cell() -> None:
    sizes = np.array([[1, 5, 30], [2, 8, 3]], dtype=np.int64)
    order = plan_order(cells_of(sizes), 2, 3, Budget(min_per_cell=3, looks=(0.01, 0.5, 1.0)))
    first = np.bincount(cells_of(sizes)[order.asked(0)], minlength=6)
    assert first.tolist() == np.minimum(sizes.ravel(), 3).tolist()


def test_waves_partition_the_questions_in_asking_order() -> None:
    order = plan_order(equal_cells(), 4, 3, Budget(seed=2))
    waves = [order.wave(k) for k in range(order.n_looks)]
    assert np.concatenate(waves).tolist() == order.order.tolist()
    assert [w.size for w in waves] == np.diff(np.concatenate([[0], order.prefix_sizes])).tolist()


def test_the_order_is_seeded() -> None:
    cells = equal_cells()
    a, b = plan_order(cells, 4, 3, Budget(seed=1)), plan_order(cells, 4, 3, Budget(seed=1))
    c = plan_order(cells, 4, 3, Budget(seed=2))
    assert a.order.tolist() == b.order.tolist() and a.order.tolist() != c.order.tolist()


def test_max_questions_caps_the_last_look_and_looks_without_news_are_dropped() -> None:
    order = plan_order(equal_cells(), 4, 3, Budget(max_questions=100))
    assert order.prefix_sizes[-1] == 100
    tiny = plan_order(equal_cells(1, 2), 1, 3, Budget())  # 6 questions, all forced
    assert tiny.prefix_sizes.tolist() == [6]
    with pytest.raises(ConfigError, match="maxQuestions 20 is below the first wave's 24"):
        plan_order(equal_cells(), 4, 3, Budget(max_questions=20))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"looks": (0.5, 0.9)}, "looks must increase"),
        ({"looks": (0.5, 0.3, 1.0)}, "looks must increase"),
        ({"confidence": 1.0}, "confidence"),
        ({"goal": "comparisons"}, "needs at least one comparison"),
        ({"margin": 0.0}, "margin"),
        ({"min_per_cell": 0}, "minPerCell"),
    ],
)
def test_budget_rejects_what_it_cannot_run(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Budget(**fields)  # type: ignore[arg-type]


# --- spending -----------------------------------------------------------------------------------


def test_spending_sums_to_alpha_and_follows_obrien_fleming() -> None:
    t = np.array([0.1, 0.2, 0.3, 0.5, 0.75, 1.0])
    alpha = spend(t, 0.05)
    assert alpha.sum() == pytest.approx(0.05, rel=1e-12)
    assert np.all(alpha > 0)
    # α(t) = 2 − 2Φ(z/√t) = erfc(z/√(2t)), z = 1.959964 for α = 0.05
    for ti in (0.1, 0.5, 1.0):
        assert obrien_fleming(np.array([ti]), 0.05)[0] == pytest.approx(
            math.erfc(1.959964 / math.sqrt(2 * ti)), rel=1e-5
        )
    assert obrien_fleming(np.array([0.5]), 0.05)[0] < 0.006  # almost nothing spent half-way


def test_spending_levels_use_the_realised_fractions() -> None:
    order = plan_order(equal_cells(), 4, 3, Budget(looks=(0.25, 0.5, 1.0)))
    levels = spending_levels(order, 0.9)
    assert levels.alpha.sum() == pytest.approx(0.1)
    assert levels.alpha.tolist() == pytest.approx(
        spend(order.prefix_sizes / order.prefix_sizes[-1], 0.1).tolist()
    )


# --- estimates on a prefix -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [equal_shape(6), unequal_shape()], ids=["equal", "unequal"])
def test_prefix_estimates_are_the_reports_w_and_the_bootstraps_variance(shape: object) -> None:
    _, cube = draw_benchmark(standard_population(), shape, np.random.default_rng(4))  # type: ignore[arg-type]
    order = plan_order(cell_index(cube), len(cube.domains), 3, Budget(seed=3))
    scores, _ = question_means(cube)
    asked = order.asked(1)
    est = prefix_estimates(scores, asked, order, WEIGHTS)
    sub = prefix_cube(cube, asked)
    config = ScoringConfig(bootstrap_samples=6000)
    series = score_series(sub, config)
    unc = bootstrap_series(sub, config, series)
    assert est.weighted.tolist() == pytest.approx(series.weighted.tolist(), abs=1e-12)
    assert unc.df is not None and est.df == pytest.approx(unc.df.weighted)
    replicates = unc.weighted_replicates
    assert replicates is not None
    # the standard deviation of 6,000 replicates is known to about 1%: allow 5%
    assert est.se == pytest.approx(replicates.std(axis=0, ddof=1), rel=0.05)
    _, pair_se = est.difference()
    boot_pair = (replicates[:, :, None] - replicates[:, None, :]).std(axis=0, ddof=1)
    off = ~np.eye(cube.n_models, dtype=bool)
    assert pair_se[off] == pytest.approx(boot_pair[off], rel=0.06)


def test_prefix_variance_of_one_model_is_the_stratified_formula() -> None:
    rng = np.random.default_rng(0)
    cells = equal_cells(2, 4)
    order = plan_order(cells, 2, 3, Budget(looks=(1.0,)))
    x = rng.normal(7.0, 1.0, (1, cells.size))
    est = prefix_estimates(x, np.ones(cells.size, dtype=bool), order, WEIGHTS)
    # W = Σ_d w_d/Σw · mean over 2 domains; Var = Σ_c a_c² s_c²/n_c
    a = np.tile(WEIGHTS / WEIGHTS.sum() / 2, 2)
    s2 = np.array([x[0, cells == c].var(ddof=1) for c in range(6)])
    assert est.covariance[0, 0] == pytest.approx(float((a**2 * s2 / 4).sum()))


# --- decisions ----------------------------------------------------------------------------------


def shared_scores(offsets: list[float], n: int, seed: int = 0, noise: float = 0.0) -> FloatArray:
    """Models that share each question's score up to fixed offsets (and optional own noise)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(6.0, 1.0, n)
    return np.asarray(
        [base + off + (rng.normal(0.0, noise, n) if noise else 0.0) for off in offsets], dtype=np.float64
    )


def test_leading_group_puts_out_a_separated_model_and_stops_on_a_tie_within_margin() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget())
    scores = shared_scores([0.0, 0.0, -3.0], cells.size)
    result = evaluate(("a", "b", "c"), scores, order, Budget(), WEIGHTS)
    assert result.finished and result.leading_group in {("a", "b"), ("b", "a")}
    c = result.outcome("c")
    assert c.reason == "out: below a" and c.look == 1 and c.questions == order.prefix_sizes[0]
    assert {result.outcome(m).reason.split(":")[0] for m in "ab"} <= {"leader", "within 0.1 of the leader a"}
    assert result.outcome("a").questions == order.prefix_sizes[0]  # nothing more to learn


def test_leading_group_runs_to_the_budget_when_the_top_two_cannot_be_told_apart() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget())
    scores = shared_scores([0.0, 0.0], cells.size, noise=1.5)
    result = evaluate(("a", "b"), scores, order, Budget(), WEIGHTS)
    for m in result.models:
        assert m.reason.startswith("budget") and m.questions == cells.size and m.look == order.n_looks
        assert m.interval[0] <= m.estimate <= m.interval[1]
        assert m.confidence == pytest.approx(1 - spending_levels(order, 0.95).alpha[-1])


def test_an_unfinished_replay_says_continue() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget())
    scores = shared_scores([0.0, 0.0, -5.0], cells.size, noise=1.0)
    result = evaluate(("a", "b", "c"), scores, order, Budget(), WEIGHTS, looks_done=1)
    assert [m.status for m in result.models] == ["continue", "continue", "stopped"]
    assert result.outcome("a").reason == "" and not result.finished
    wave = result.next_wave(order)
    assert sorted(wave) == ["a", "b"] and wave["a"].tolist() == order.wave(1).tolist()
    assert evaluate(("a", "b", "c"), scores, order, Budget(), WEIGHTS).next_wave(order) == {}


def test_scores_beyond_a_stopped_models_prefix_are_never_read() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget(seed=9))
    scores = shared_scores([0.0, -0.1, -0.6, -3.0], cells.size, noise=1.0)
    full = evaluate(("a", "b", "c", "d"), scores, order, Budget(), WEIGHTS)
    blanked = scores.copy()
    for i, m in enumerate(full.models):
        blanked[i, ~order.asked(m.look - 1)] = np.nan
    assert evaluate(("a", "b", "c", "d"), blanked, order, Budget(), WEIGHTS) == full
    assert full.outcome("d").look < full.outcome("a").look  # the test has an early stop to protect


def test_full_ranking_stops_each_model_once_all_its_pairs_are_decided() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget())
    scores = shared_scores([0.0, -3.0, -6.0, -6.0], cells.size)
    result = evaluate(("a", "b", "c", "d"), scores, order, Budget(goal="full-ranking"), WEIGHTS)
    verdicts = {(p.a, p.b): p.verdict for p in result.pairs}
    assert verdicts[("a", "b")] == "a-better" and verdicts[("b", "c")] == "a-better"
    assert verdicts[("c", "d")] == "equivalent"
    assert all(m.reason == "ranked: every pair decided" and m.look == 1 for m in result.models)


def test_comparisons_decide_named_pairs_and_free_the_rest_at_once() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget())
    scores = shared_scores([0.0, 0.0, 0.0], cells.size, noise=0.0)
    scores[2] += np.random.default_rng(1).normal(0.0, 2.0, cells.size)
    budget = Budget(goal="comparisons", comparisons=(Comparison("a", "b", 0.2), Comparison("a", "c", 0.05)))
    result = evaluate(("a", "b", "c", "x"), np.vstack([scores, scores[:1] - 1.0]), order, budget, WEIGHTS)
    pairs = {(p.a, p.b): p for p in result.pairs}
    assert pairs[("a", "b")].verdict == "equivalent" and pairs[("a", "b")].look == 1
    assert pairs[("a", "c")].verdict == "undecided"
    assert result.outcome("b").reason == "no open comparison" and result.outcome("b").look == 1
    assert result.outcome("x").look == 1  # in no comparison: stops after the first wave
    assert result.outcome("c").reason.startswith("budget")
    with pytest.raises(ConfigError, match="'zz', which is not in the run"):
        evaluate(
            ("a", "b"),
            scores[:2],
            order,
            Budget(goal="comparisons", comparisons=(Comparison("a", "zz"),)),
            WEIGHTS,
        )


def test_running_interval_is_inside_the_stopping_looks_interval() -> None:
    cells = equal_cells()
    order = plan_order(cells, 4, 3, Budget())
    result = evaluate(("a", "b"), shared_scores([0.0, 0.0], cells.size, noise=1.5), order, Budget(), WEIGHTS)
    for m in result.models:
        assert m.interval[0] <= m.running_interval[0] <= m.running_interval[1] <= m.interval[1]
