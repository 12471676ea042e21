"""Bootstrap intervals: reproducible, stratified, paired, and consistent with the point estimates."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from factories import score_cube
from kubejury.errors import ConfigError
from kubejury.stats.cube import ScoreCube
from kubejury.stats.scoring import ScoringConfig, cell_index, score_series
from kubejury.stats.uncertainty import (
    bootstrap_series,
    detection_probability,
    resample_questions,
    series_power,
    t_quantile,
)


def synthetic_cube(
    n_models: int = 4, per_cell: int = 12, seed: int = 3, offsets: list[float] | None = None
) -> ScoreCube:
    """Models with known quality gaps: model k's scores are a base draw plus offsets[k]."""
    rng = np.random.default_rng(seed)
    domains, levels = ("law", "med", "tax"), (1, 2, 3)
    questions = [
        (f"{domain}-{level}-{k:03d}", domain, level)
        for level in levels
        for domain in domains
        for k in range(per_cell)
    ]
    n_q = len(questions)
    offsets = offsets if offsets is not None else [0.0, -0.01, -1.5, -3.0][:n_models]
    base = rng.normal(7.0, 1.0, size=(1, n_q, 1))
    noise = rng.normal(0.0, 0.6, size=(n_models, n_q, 3))
    scores = np.clip(base + noise + np.array(offsets)[:, None, None], 0, 10)
    scores[0, 5, :] = np.nan  # an unscored question
    scores[n_models - 1, 7, 1] = np.nan  # a missing judge
    return score_cube(
        scores, models=[f"m{k}" for k in range(n_models)], judges=("a", "b", "c"), questions=questions
    )


CONFIG = ScoringConfig(bootstrap_samples=400, seed=11)


def test_counts_are_stratified_by_cell() -> None:
    cells = np.array([0, 2, 0, 1, 1, 2, 0, 2, 2], dtype=np.int64)
    resample = resample_questions(cells, 50, seed=0)
    assert [m.tolist() for m in resample.members] == [[0, 2, 6], [3, 4], [1, 5, 7, 8]]
    for members, counts in zip(resample.members, resample.counts, strict=True):
        assert counts.shape == (50, members.shape[0])
        assert np.all(counts.sum(axis=1) == members.shape[0])
        assert counts.min() >= 0
    # Draws are uniform within a cell: over many replicates every question is drawn about once.
    big = resample_questions(cells, 4000, seed=1)
    np.testing.assert_allclose(big.counts[2].mean(axis=0), 1.0, atol=0.06)


def test_shared_resample_gives_same_result_and_checks_design() -> None:
    cube = synthetic_cube()
    resample = resample_questions(cell_index(cube), 400, seed=11)
    np.testing.assert_array_equal(
        bootstrap_series(cube, CONFIG, resample=resample).weighted_ci,
        bootstrap_series(cube, CONFIG).weighted_ci,
    )
    other = resample_questions(np.zeros(cube.n_questions, dtype=np.int64), 10, seed=0)
    with pytest.raises(ValueError):
        bootstrap_series(cube, CONFIG, resample=other)


def test_reproducible_with_seed_and_sensitive_to_it() -> None:
    cube = synthetic_cube()
    a, b = bootstrap_series(cube, CONFIG), bootstrap_series(cube, CONFIG)
    np.testing.assert_array_equal(a.weighted_ci, b.weighted_ci)
    np.testing.assert_array_equal(a.prob_better, b.prob_better)
    c = bootstrap_series(cube, ScoringConfig(bootstrap_samples=400, seed=12))
    assert not np.array_equal(a.weighted_ci, c.weighted_ci)


def test_intervals_contain_point_estimates() -> None:
    cube = synthetic_cube()
    scores = score_series(cube, CONFIG)
    u = bootstrap_series(cube, CONFIG, scores)
    assert (
        u.weighted_ci.shape == (4, 2) and u.level_ci.shape == (4, 3, 2) and u.degradation_ci.shape == (4, 2)
    )
    assert u.domain_weighted_ci.shape == (4, 3, 2)
    assert np.all(u.weighted_ci[:, 0] <= scores.weighted) and np.all(scores.weighted <= u.weighted_ci[:, 1])
    assert np.all(u.level_ci[..., 0] <= scores.level_scores) and np.all(
        scores.level_scores <= u.level_ci[..., 1]
    )
    assert np.all(u.degradation_ci[:, 0] <= scores.degradation)
    assert np.all(scores.degradation <= u.degradation_ci[:, 1])
    assert np.all(u.weighted_ci[:, 1] - u.weighted_ci[:, 0] > 0)


def test_paired_probabilities_and_leading_group() -> None:
    u = bootstrap_series(synthetic_cube(), CONFIG)
    p = u.prob_better
    np.testing.assert_allclose(np.diag(p), 0.5)
    np.testing.assert_allclose(p + p.T, 1.0)
    # m0 and m1 differ by 0.01 on shared questions: not separable; m2, m3 are far behind.
    assert u.leading_group == ("m0", "m1")
    assert p[0, 2] == 1.0 and p[0, 3] == 1.0
    assert u.gap_to_top_ci[0].tolist() == [0.0, 0.0]
    assert u.gap_to_top_ci[2, 0] > 0


def test_constant_scores_give_degenerate_intervals() -> None:
    cube = synthetic_cube(n_models=1, offsets=[0.0])
    full = replace(cube, scores=np.full(cube.scores.shape, 10.0))
    u = bootstrap_series(full, ScoringConfig(bootstrap_samples=50))
    np.testing.assert_allclose(u.weighted_ci, [[10.0, 10.0]])
    np.testing.assert_allclose(u.degradation_ci, [[0.0, 0.0]])
    assert u.leading_group == ("m0",)


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        bootstrap_series(synthetic_cube(), ScoringConfig(bootstrap_samples=0))
    with pytest.raises(ConfigError):
        bootstrap_series(synthetic_cube(), ScoringConfig(confidence=1.5))


def test_percentile_interval_matches_numpy() -> None:
    from kubejury.stats.uncertainty import percentile_interval

    rng = np.random.default_rng(5)
    values = rng.normal(size=(301, 4, 3))
    values[rng.random(values.shape) < 0.1] = np.nan
    values[:, 0, 0] = np.nan  # undefined in every replicate
    values[:, 1, 1] = np.nan
    values[7, 1, 1] = 2.5  # defined in one replicate only
    got = percentile_interval(values, 0.95)
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        expected = np.stack(
            [np.nanquantile(values, 0.025, axis=0), np.nanquantile(values, 0.975, axis=0)], axis=-1
        )
    np.testing.assert_allclose(got, expected, equal_nan=True)
    assert got.shape == (4, 3, 2) and np.isnan(got[0, 0]).all() and got[1, 1].tolist() == [2.5, 2.5]


def test_pairing_separates_a_small_but_consistent_gap() -> None:
    # b is exactly a − 0.1 on every question. The marginal intervals overlap heavily, but the
    # paired bootstrap sees b lose in every replicate.
    cube = synthetic_cube(n_models=1, offsets=[0.0])
    scores = np.concatenate([cube.scores, cube.scores - 0.1], axis=0)
    paired = replace(cube, models=("a", "b"), scores=scores, has_record=np.ones((2, cube.n_questions), bool))
    u = bootstrap_series(paired, CONFIG)
    assert u.prob_better[0, 1] == 1.0
    assert u.leading_group == ("a",)
    assert u.weighted_ci[1, 1] > u.weighted_ci[0, 0]  # the marginal intervals overlap
    np.testing.assert_allclose(u.gap_to_top_ci[1], [0.1, 0.1], atol=1e-9)


def test_series_differences_get_paired_intervals() -> None:
    from kubejury.stats.series_compare import compare_series

    base = synthetic_cube(n_models=3)
    hot = replace(base, series="hot", scores=base.scores - 0.2)
    scores = {c.series: score_series(c, CONFIG) for c in (base, hot)}
    runs = {name: bootstrap_series(c, CONFIG, scores[name]) for name, c in (("default", base), ("hot", hot))}
    table = compare_series(scores, "default", runs)
    assert table.difference_ci is not None and table.difference_ci.shape == (3, 2, 2)
    np.testing.assert_allclose(table.difference[:, 1], -0.2, atol=1e-9)
    np.testing.assert_allclose(table.difference_ci[:, 1], -0.2, atol=1e-9)  # same questions every replicate
    np.testing.assert_allclose(table.difference_ci[:, 0], 0.0)
    other_seed = bootstrap_series(hot, ScoringConfig(bootstrap_samples=400, seed=99), scores["hot"])
    assert compare_series(scores, "default", {**runs, "hot": other_seed}).difference_ci is None
    assert compare_series(scores, "default").difference_ci is None


def one_cell_cube(values: list[float], extra: list[tuple[int, int, float]] | None = None) -> ScoreCube:
    """One model, one judge; ``values`` in domain 0 level 0, plus (domain, level, score) questions.

    Domain index i is named ``d<i>`` and level index i is level i + 1; the cube holds the ones used."""
    rows = [(0, 0, v) for v in values] + list(extra or [])
    rows.sort(key=lambda r: (r[1], r[0]))
    questions = [(f"q{k}", f"d{domain}", level + 1) for k, (domain, level, _) in enumerate(rows)]
    scores = np.array([r[2] for r in rows], dtype=np.float64)[None, :, None]
    return score_cube(scores, models=("m",), judges=("j",), questions=questions)


def test_replicates_carry_the_unbiased_variance_of_a_cell_mean() -> None:
    # Two questions, 6 and 8: s² = 2, the cell mean's variance s²/n = 1. Resampling 2 out of 2
    # alone gives (n − 1)/n of that (0.5); the rescaled replicates give 1.
    cube = one_cell_cube([6.0, 8.0])
    u = bootstrap_series(cube, ScoringConfig(bootstrap_samples=20000, level_weights={1: 1.0}))
    assert u.weighted_replicates is not None
    assert np.var(u.weighted_replicates[:, 0], ddof=1) == pytest.approx(1.0, rel=0.03)


def test_a_single_question_cell_borrows_its_levels_variance() -> None:
    # Domain 1 has one level-1 question; domain 0's level-1 cell has four. Without borrowing the
    # single question would have no variance and its domain a zero-width interval.
    cube = one_cell_cube([5.0, 6.0, 7.0, 8.0], extra=[(1, 0, 4.0)])
    config = ScoringConfig(bootstrap_samples=4000, level_weights={1: 1.0})
    u = bootstrap_series(cube, config)
    low, high = u.domain_weighted_ci[0, 1]
    assert low < 4.0 < high
    assert u.df is not None and u.df.domain_weighted[1] == pytest.approx(3.0)  # the pool's df
    # The borrowed SE is the pooled within-cell SD: s² = 5/3 over domain 0's four questions.
    se = (high - low) / 2 / float(t_quantile(3.0, 0.95))
    assert se == pytest.approx(np.sqrt(5 / 3), rel=0.05)


def test_prob_better_and_the_gap_interval_tell_the_same_story() -> None:
    u = bootstrap_series(synthetic_cube(offsets=[0.0, -0.15, -0.3, -1.0]), CONFIG)
    top = u.models.index(u.leading_group[0])
    for m in range(len(u.models)):
        if m == top:
            continue
        excluded = not (u.gap_to_top_ci[m, 0] <= 0.0 <= u.gap_to_top_ci[m, 1])
        assert excluded == (u.prob_better[top, m] > 0.975), u.models[m]


def test_intervals_stay_on_the_score_scale() -> None:
    cube = synthetic_cube(n_models=1, offsets=[2.9])  # near 10: a symmetric interval would pass it
    u = bootstrap_series(cube, CONFIG)
    assert np.nanmax(u.weighted_ci) <= 10.0 and np.nanmax(u.domain_weighted_ci) <= 10.0


def test_power_is_the_t_probability_of_clearing_the_interval() -> None:
    power = series_power(0.1, 40.0, 0.95)
    assert power is not None
    assert detection_probability(0.0, 0.1, 40.0, 0.95) == pytest.approx(0.025)
    assert detection_probability(power.detectable, 0.1, 40.0, 0.95) == pytest.approx(0.8)
    assert power.detection[0.2] < power.detection[0.5]
    assert series_power(0.0, 40.0, 0.95) is None
    u = bootstrap_series(synthetic_cube(), CONFIG)
    assert u.power is not None and u.power.paired_se > 0 and set(u.power.detection) == {0.2, 0.5}
