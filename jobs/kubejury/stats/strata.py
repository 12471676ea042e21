"""The sampling design behind kubejury's intervals: (domain, level) cells, their sizes, and what a
cell with a single question borrows.

A benchmark is a stratified sample: each (domain, level) cell holds n questions drawn from the
questions that could have been asked there. The variance of a cell mean is σ²/n, and every
statistic kubejury reports (Score per level, W, D, per-domain W, differences of W) is a weighted
sum of cell means. Two facts about that design decide whether an interval holds its level, and
both live here (see docs/method.md, "Uncertainty"):

* resampling n questions out of n gives a cell mean whose variance is (n − 1)/n · s²/n, too small
  by half at n = 2; :attr:`Design.scale` is the factor √(n/(n − 1)) that undoes it;
* a cell of n questions tells its own variance with n − 1 degrees of freedom, so a statistic built
  from few small cells is uncertain about its own uncertainty; :func:`degrees_of_freedom` gives
  the Welch–Satterthwaite degrees of freedom of each reported statistic from the design, and the
  intervals use Student's t with them.

A cell with one question has no within-cell variance at all. It borrows one: its replicate
deviations are residuals of questions drawn from the cells of the same level that have two or
more questions (if the level has none, from every such cell; if the benchmark has none at all,
residuals about each level's mean, i.e. the cells of a level collapsed into one stratum, which
is conservative because differences between domains count as noise). :func:`singleton_pools`
decides which, and a benchmark of one question per level has no interval for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kubejury.stats.cube import FloatArray, IntArray


@dataclass(frozen=True)
class SingletonPool:
    """Where the single-question cells of one level borrow their variance.

    ``donors``: question indices whose residuals stand in for the missing within-cell deviation;
    ``centre``: for each donor, the group whose mean its residual is taken about (its own cell,
    or its level when cells are collapsed); ``df``: the degrees of freedom of that pooled
    variance (Σ over the donor groups of their size − 1); ``key``: pools with equal keys are the
    same pool (their variance estimates are one estimate).
    """

    cells: tuple[int, ...]
    donors: IntArray
    centre: IntArray
    df: float
    key: int


@dataclass(frozen=True)
class Design:
    """Cell of every question (``domain * n_levels + level``), cell sizes and singleton pools."""

    cells: IntArray  # (Q,)
    n_levels: int
    sizes: IntArray  # (n_cells,), questions per cell (n_cells = max cell + 1)
    pools: tuple[SingletonPool, ...]

    @property
    def n_cells(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def scale(self) -> FloatArray:
        """√(n/(n − 1)) per cell: the rescaling that gives resampled cell means the unbiased
        variance s²/n (1 for cells with fewer than two questions)."""
        n = self.sizes.astype(np.float64)
        return np.where(n >= 2, np.sqrt(n / np.maximum(n - 1.0, 1.0)), 1.0)


def singleton_pools(cells: IntArray, n_levels: int) -> tuple[SingletonPool, ...]:
    """Donor questions for the single-question cells, level by level (module docstring)."""
    n_levels = max(int(n_levels), 1)
    sizes = np.bincount(cells, minlength=int(cells.max()) + 1 if cells.size else 0)
    level_of_cell = np.arange(sizes.shape[0]) % n_levels
    level_of_question = cells % n_levels
    multi_cells = np.flatnonzero(sizes >= 2)
    pools: list[SingletonPool] = []
    for level in range(n_levels):
        singles = np.flatnonzero((sizes == 1) & (level_of_cell == level))
        if singles.size == 0:
            continue
        same_level = multi_cells[level_of_cell[multi_cells] == level]
        if same_level.size:
            groups, key = same_level, level
        elif multi_cells.size:
            groups, key = multi_cells, n_levels  # every level shares the all-cells pool
        else:
            groups = np.empty(0, dtype=np.int64)
            key = -1
        if groups.size:
            donors = np.flatnonzero(np.isin(cells, groups)).astype(np.int64)
            centre = cells[donors].astype(np.int64)
            df = float((sizes[groups] - 1).sum())
        else:
            # No cell anywhere has two questions: collapse each level into one stratum.
            levels_with_two = [lv for lv in range(n_levels) if (level_of_question == lv).sum() >= 2]
            donors = np.flatnonzero(np.isin(level_of_question, levels_with_two)).astype(np.int64)
            centre = (sizes.shape[0] + level_of_question[donors]).astype(np.int64)
            df = float(sum((level_of_question == lv).sum() - 1 for lv in levels_with_two))
            key = n_levels + 1
        pools.append(
            SingletonPool(cells=tuple(int(c) for c in singles), donors=donors, centre=centre, df=df, key=key)
        )
    return tuple(pools)


def design_of(cells: IntArray, n_levels: int) -> Design:
    """The :class:`Design` of a benchmark whose questions lie in ``cells``."""
    cells = np.ascontiguousarray(cells, dtype=np.int64)
    sizes = np.bincount(cells, minlength=int(cells.max()) + 1 if cells.size else 0).astype(np.int64)
    return Design(
        cells=cells, n_levels=max(int(n_levels), 1), sizes=sizes, pools=singleton_pools(cells, n_levels)
    )


def satterthwaite(coefficients: FloatArray, design: Design) -> float:
    """Welch–Satterthwaite degrees of freedom of Σ_c a_c·(cell mean c), assuming a common
    within-cell variance: (Σ v_c)² / Σ_g (Σ_{c∈g} v_c)²/ν_g with v_c = a_c²/n_c, one group per
    cell with two or more questions (ν = n − 1) and one per singleton pool (ν = the pool's).
    ``inf`` when every variance term is exactly known, NaN when the statistic has no variance."""
    a = np.zeros(design.n_cells)
    a[: coefficients.shape[0]] = coefficients[: design.n_cells]
    n = design.sizes.astype(np.float64)
    v = np.where(n > 0, a * a / np.maximum(n, 1.0), 0.0)
    total = float(v.sum())
    if total <= 0.0:
        return float("nan")
    multi = n >= 2
    denominator = float((v[multi] ** 2 / (n[multi] - 1.0)).sum())
    seen: dict[int, tuple[float, float]] = {}
    for pool in design.pools:
        share = float(v[list(pool.cells)].sum())
        before, _ = seen.get(pool.key, (0.0, pool.df))
        seen[pool.key] = (before + share, pool.df)
    for share, df in seen.values():
        if share > 0 and df > 0:
            denominator += share * share / df
    return total * total / denominator if denominator > 0 else float("inf")


@dataclass(frozen=True)
class DesignDegrees:
    """Degrees of freedom of each reported statistic (t quantiles of the intervals use these)."""

    weighted: float
    levels: FloatArray  # (L,)
    degradation: float
    domain_weighted: FloatArray  # (Dn,)


def degrees_of_freedom(
    design: Design, n_domains: int, level_weights: FloatArray, present: IntArray
) -> DesignDegrees:
    """Design degrees of freedom of W, Score(d), D and per-domain W.

    The coefficients are those of formulas (2)–(7) applied to the cells that hold questions:
    Score(d) averages its domains' cell means equally, W weights the level scores, D is
    Score(lowest) − Score(highest) and per-domain W weights the domain's own cells.
    """
    n_levels = design.n_levels
    sizes = np.zeros(n_domains * n_levels)
    sizes[: design.n_cells] = design.sizes[: n_domains * n_levels]
    has = sizes.reshape(n_domains, n_levels) > 0
    domains_at = has.sum(axis=0).astype(np.float64)  # (L,)
    per_level = np.where(has, 1.0 / np.maximum(domains_at, 1.0)[None, :], 0.0)  # Score(d) coefficients

    def level_only(d: int) -> FloatArray:
        a = np.zeros((n_domains, n_levels))
        a[:, d] = per_level[:, d]
        return a.ravel()

    levels = np.array([satterthwaite(level_only(d), design) for d in range(n_levels)])
    w = np.where(domains_at > 0, level_weights, 0.0)
    weighted = satterthwaite((per_level * (w / w.sum() if w.sum() > 0 else w)[None, :]).ravel(), design)
    degradation = float("nan")
    if present.size >= 2:
        degradation = satterthwaite(level_only(int(present[0])) - level_only(int(present[-1])), design)
    domain = np.full(n_domains, np.nan)
    for i in range(n_domains):
        wi = np.where(has[i], level_weights, 0.0)
        if wi.sum() > 0:
            a = np.zeros((n_domains, n_levels))
            a[i] = wi / wi.sum()
            domain[i] = satterthwaite(a.ravel(), design)
    return DesignDegrees(weighted=weighted, levels=levels, degradation=degradation, domain_weighted=domain)
