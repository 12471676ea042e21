"""The sampling design: cell sizes, rescaling, where single-question cells borrow, degrees of freedom."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kubejury.stats.strata import degrees_of_freedom, design_of, satterthwaite

WEIGHTS = np.array([0.6, 0.8, 1.0])
ALL_LEVELS = np.array([0, 1, 2], dtype=np.int64)


def equal_cells(domains: int, levels: int, per_cell: int) -> np.ndarray:
    """Cell index (domain * levels + level) of every question, per_cell questions per cell."""
    return np.repeat(np.arange(domains * levels, dtype=np.int64), per_cell)


def test_scale_undoes_the_n_minus_one_over_n_shrinkage() -> None:
    design = design_of(np.array([0, 0, 1, 1, 1, 1, 1, 1, 2], dtype=np.int64), n_levels=3)
    assert design.sizes.tolist() == [2, 6, 1]
    np.testing.assert_allclose(design.scale, [math.sqrt(2.0), math.sqrt(6 / 5), 1.0])


def test_single_question_cells_borrow_from_their_level_first() -> None:
    # 2 domains × 3 levels: cell = domain * 3 + level. Level 0: cell 0 has 3, cell 3 has 1.
    # Level 1: both cells single (1, 4) → borrow from every multi-question cell. Level 2: 2 and 2.
    cells = np.array([0, 0, 0, 3, 1, 4, 2, 2, 5, 5], dtype=np.int64)
    design = design_of(cells, n_levels=3)
    pools = {pool.cells: pool for pool in design.pools}
    same_level = pools[(3,)]
    assert sorted(cells[same_level.donors].tolist()) == [0, 0, 0]
    assert same_level.df == 2.0
    anywhere = pools[(1, 4)]
    assert sorted(set(cells[anywhere.donors].tolist())) == [0, 2, 5]
    assert anywhere.df == 2.0 + 1.0 + 1.0
    assert same_level.key != anywhere.key


def test_without_any_multi_question_cell_the_levels_collapse() -> None:
    cells = equal_cells(4, 3, 1)  # one question per cell everywhere
    design = design_of(cells, n_levels=3)
    assert len(design.pools) == 3
    for pool in design.pools:
        assert pool.donors.size == 12  # every question, centred on its own level's mean
        assert set(pool.centre.tolist()) == {12, 13, 14}
        assert pool.df == 3 * (4 - 1)
    single = design_of(np.array([0], dtype=np.int64), n_levels=1)
    assert single.pools[0].donors.size == 0  # one question in all: nothing to borrow


def test_satterthwaite_matches_the_hand_formula() -> None:
    # Two cells: sizes 2 and 5, coefficients 1 and 2: v = (1/2, 4/5), df = (1.3)² / (0.25/1 + 0.64/4).
    design = design_of(np.array([0, 0, 1, 1, 1, 1, 1], dtype=np.int64), n_levels=1)
    assert satterthwaite(np.array([1.0, 2.0]), design) == pytest.approx(1.3**2 / (0.25 + 0.16))
    assert math.isnan(satterthwaite(np.zeros(2), design))


def test_design_degrees_of_freedom_at_the_quickstart_shape() -> None:
    # 16 domains × 3 levels × 2 questions: every cell has 1 degree of freedom.
    dof = degrees_of_freedom(design_of(equal_cells(16, 3, 2), 3), 16, WEIGHTS, ALL_LEVELS)
    np.testing.assert_allclose(dof.levels, 16.0)  # 16 equal cells
    assert dof.degradation == pytest.approx(32.0)
    squares = 16 * (WEIGHTS**2).sum()
    fourths = 16 * (WEIGHTS**4).sum()
    assert dof.weighted == pytest.approx(squares**2 / fourths)  # ≈ 41.6
    per_domain = (WEIGHTS**2).sum() ** 2 / (WEIGHTS**4).sum()  # ≈ 2.6: three cells of 2 questions
    np.testing.assert_allclose(dof.domain_weighted, per_domain)
    # More questions per cell: n − 1 times the degrees of freedom.
    six = degrees_of_freedom(design_of(equal_cells(16, 3, 6), 3), 16, WEIGHTS, ALL_LEVELS)
    assert six.weighted == pytest.approx(5 * dof.weighted)


def test_a_singleton_pool_counts_once_in_the_degrees_of_freedom() -> None:
    # Level 0 of 3 domains: one cell of 4 (df 3), two single cells sharing that pool (df 3).
    cells = np.array([0, 0, 0, 0, 1, 2], dtype=np.int64)
    design = design_of(cells, n_levels=1)
    v = np.array([1 / 4, 1.0, 1.0]) / 9  # Score = mean of the three cell means
    expected = v.sum() ** 2 / (v[0] ** 2 / 3 + (v[1] + v[2]) ** 2 / 3)
    assert satterthwaite(np.full(3, 1 / 3), design) == pytest.approx(expected)
