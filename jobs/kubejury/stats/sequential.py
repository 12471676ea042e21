"""Budgeted, sequential evaluation: ask questions in waves and stop each model once its place is decided.

An evaluation costs GPU-hours in proportion to the questions each model answers, yet a ranking is
often settled long before the last question. Stopping "when it looks significant" breaks the
intervals; this module stops with guarantees that survive the stopping (docs/method.md,
"Sequential evaluation"). It is pure: given the benchmark's design and the question scores seen
so far it says, per model, "continue" or "stopped: <reason>", with the final intervals.

* :func:`plan_order` puts the questions in a stratified random order: each (domain, level) cell is
  shuffled with a seed and a question's position is (rank + U)/n_c, so every prefix is (nearly) a
  stratified sample; look k asks the first round(t_k·N) questions of that order (those below a
  position threshold), and the first wave holds at least ``min_per_cell`` questions of every
  cell so that every cell has a variance.
* :func:`spend` gives each look its share of α from the O'Brien–Fleming-type spending function of
  Lan and DeMets (1983), α(t) = 2 − 2Φ(z_{1−α/2}/√t) at the information fraction t = n_k/N. The
  looks' intervals at level 1 − α_k hold simultaneously with probability ≥ 1 − α whatever the
  stopping rule (union bound: Bonferroni repeated confidence intervals, Jennison and Turnbull
  2000, ch. 9).
* :func:`prefix_estimates` computes W of every model on a prefix with the covariance of the
  estimates in closed form: the linearised stratified variance that the rescaled bootstrap of
  :mod:`kubejury.stats.uncertainty` converges to (tests check they agree), so a look costs one
  matrix product instead of 2,000 replicates.
* :func:`evaluate` replays the looks on the scores seen so far and decides per goal
  (leading-group, full-ranking, comparisons) with Bonferroni over the pairs the goal involves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import special

from kubejury.errors import ConfigError
from kubejury.stats.cube import BoolArray, FloatArray, IntArray
from kubejury.stats.scoring import level_scores_from_cells, weighted_mean_over_levels
from kubejury.stats.strata import degrees_of_freedom, design_of
from kubejury.stats.uncertainty import SCORE_RANGE, t_quantile

Goal = Literal["leading-group", "full-ranking", "comparisons"]
GOALS: tuple[Goal, ...] = ("leading-group", "full-ranking", "comparisons")
Status = Literal["continue", "stopped"]
Verdict = Literal["undecided", "a-better", "b-better", "equivalent"]

# Information fractions of the looks (of the questions a model may answer). Few looks early, where
# the O'Brien–Fleming function spends almost nothing, and none just before the end, where a look
# would take α from the final one (benchmarks/sequential_calibration.py measures the choice).
DEFAULT_LOOKS = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
# The indifference margin δ in W points: models whose W is shown to be within δ of each other are
# "equivalent" (for the leading group: of the leader), and need no more questions.
DEFAULT_MARGIN = 0.1


@dataclass(frozen=True)
class Comparison:
    """A named pair whose difference W_a − W_b is to be decided within ±``margin`` (W points)."""

    a: str
    b: str
    margin: float = DEFAULT_MARGIN


@dataclass(frozen=True)
class Budget:
    """What a sequential run is after and what it may spend.

    ``confidence``: the simultaneous level 1 − α of every interval and verdict; ``goal``: when a
    model's place is decided; ``margin``: the indifference margin δ; ``max_questions``: questions
    per model at most (None: the whole benchmark); ``min_per_cell``: questions of every cell in
    the first wave; ``looks``: information fractions of the looks, increasing, the last 1;
    ``seed``: the question order's shuffle.
    """

    confidence: float = 0.95
    goal: Goal = "leading-group"
    margin: float = DEFAULT_MARGIN
    max_questions: int | None = None
    min_per_cell: int = 2
    looks: tuple[float, ...] = DEFAULT_LOOKS
    seed: int = 0
    comparisons: tuple[Comparison, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"budget.confidence must be between 0 and 1, got {self.confidence}")
        if self.goal not in GOALS:
            raise ConfigError(f"budget.goal must be one of {', '.join(GOALS)}, got {self.goal!r}")
        if not self.margin > 0.0:
            raise ConfigError(f"budget.margin must be positive, got {self.margin}")
        if self.min_per_cell < 1:
            raise ConfigError(f"budget.minPerCell must be at least 1, got {self.min_per_cell}")
        looks = np.asarray(self.looks, dtype=np.float64)
        if looks.size == 0 or np.any(np.diff(looks) <= 0) or looks[0] <= 0 or looks[-1] != 1.0:
            raise ConfigError(f"budget.looks must increase from above 0 to exactly 1, got {list(self.looks)}")
        if self.goal == "comparisons" and not self.comparisons:
            raise ConfigError("budget.goal 'comparisons' needs at least one comparison")
        for c in self.comparisons:
            if not c.margin > 0.0 or c.a == c.b:
                raise ConfigError(f"comparison {c.a} vs {c.b}: two different models and a positive margin")


@dataclass(frozen=True)
class QuestionOrder:
    """The stratified random order of a benchmark's questions and the looks' prefixes.

    ``cells[q]`` = domain·n_levels + level; ``position[q]`` = (rank + U)/n_c in its shuffled
    cell; ``forced[q]``: among the first ``min_per_cell`` of its cell (asked first);
    ``order``: question indices in asking order (forced ones first, then by position), so that
    every prefix is the set of questions below a position threshold: the same share of every
    cell, give or take one question; ``prefix_sizes[k]``: questions asked by the end of look k.
    """

    cells: IntArray
    n_domains: int
    n_levels: int
    position: FloatArray
    forced: BoolArray
    order: IntArray
    prefix_sizes: IntArray

    @property
    def n_looks(self) -> int:
        return int(self.prefix_sizes.shape[0])

    @property
    def fractions(self) -> FloatArray:
        """Information fraction t_k = n_k / n_K of every look."""
        return np.asarray(self.prefix_sizes / self.prefix_sizes[-1], dtype=np.float64)

    def asked(self, look: int) -> BoolArray:
        """The questions asked by the end of look ``look`` (0-based), a (Q,) mask."""
        mask = np.zeros(self.cells.shape[0], dtype=np.bool_)
        mask[self.order[: self.prefix_sizes[look]]] = True
        return mask

    def wave(self, look: int) -> IntArray:
        """Question indices of wave ``look`` (0-based) in asking order: new at this look."""
        start = int(self.prefix_sizes[look - 1]) if look > 0 else 0
        return self.order[start : int(self.prefix_sizes[look])]


def plan_order(cells: IntArray, n_domains: int, n_levels: int, budget: Budget) -> QuestionOrder:
    """The question order and the looks of ``budget`` for questions in ``cells``.

    Look k asks the first round(t_k·N) questions of the order, N = min(maxQuestions, Q), and the
    first look at least the forced ones (``min_per_cell`` of every cell, all of a smaller cell).
    """
    cells = np.ascontiguousarray(cells, dtype=np.int64)
    n_q = int(cells.shape[0])
    if n_q == 0:
        raise ConfigError("a sequential run needs at least one question")
    rng = np.random.default_rng(int(budget.seed))
    sizes = np.bincount(cells, minlength=n_domains * n_levels)
    # Rank of each question in its shuffled cell: sort by (cell, random key).
    by_cell = np.lexsort((rng.random(n_q), cells))
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty(n_q, dtype=np.int64)
    rank[by_cell] = np.arange(n_q) - start[cells[by_cell]]
    position = (rank + rng.random(n_q)) / sizes[cells]
    forced = rank < budget.min_per_cell
    total = n_q if budget.max_questions is None else min(int(budget.max_questions), n_q)
    n_forced = int(forced.sum())
    if n_forced > total:
        raise ConfigError(
            f"budget.maxQuestions {budget.max_questions} is below the first wave's {n_forced} "
            f"questions (minPerCell {budget.min_per_cell} in each of {int((sizes > 0).sum())} cells)"
        )
    wanted = np.rint(np.asarray(budget.looks, dtype=np.float64) * total).astype(np.int64)
    prefix = np.maximum(wanted, n_forced)
    # Drop looks that ask nothing new (small benchmarks): they would spend α for no data.
    prefix = prefix[np.concatenate([[True], np.diff(prefix) > 0])]
    key = np.where(forced, position - 1.0, position)
    return QuestionOrder(
        cells=cells,
        n_domains=int(n_domains),
        n_levels=int(n_levels),
        position=position,
        forced=forced,
        order=np.argsort(key, kind="stable").astype(np.int64),
        prefix_sizes=prefix.astype(np.int64),
    )


def obrien_fleming(t: FloatArray, alpha: float) -> FloatArray:
    """Lan–DeMets O'Brien–Fleming-type spending: α(t) = 2 − 2Φ(z_{1−α/2}/√t), α(1) = α."""
    z = special.ndtri(1.0 - alpha / 2.0)
    with np.errstate(divide="ignore"):
        return np.asarray(2.0 - 2.0 * special.ndtr(z / np.sqrt(np.asarray(t, dtype=np.float64))))


def spend(fractions: FloatArray, alpha: float) -> FloatArray:
    """α_k = α(t_k) − α(t_{k−1}) for the looks at information fractions ``fractions`` (Σ α_k = α
    when the last fraction is 1)."""
    cumulative = obrien_fleming(np.asarray(fractions, dtype=np.float64), alpha)
    return np.asarray(np.diff(np.concatenate([[0.0], cumulative])), dtype=np.float64)


@dataclass(frozen=True)
class LookLevels:
    """The α each look's intervals use; ``per_pair``: divide it by the goal's number of pairs."""

    alpha: FloatArray  # (K,)
    per_pair: bool = True


def spending_levels(order: QuestionOrder, confidence: float) -> LookLevels:
    """The O'Brien–Fleming-type spending of α = 1 − ``confidence`` over ``order``'s looks."""
    return LookLevels(alpha=spend(order.fractions, 1.0 - confidence), per_pair=True)


@dataclass(frozen=True)
class Estimates:
    """W of models on one prefix and the estimated covariance of those estimates.

    ``covariance`` (M, M) is the linearised stratified covariance Σ_c a_c(a)·a_c(b)·Cov(cell means)
    with each cell's covariance estimated from its questions (n_c/(n_c − 1) correction; a cell
    with one question borrows its level's pooled within-cell covariance); ``df``: W's design
    degrees of freedom on the prefix.
    """

    weighted: FloatArray  # (M,)
    covariance: FloatArray  # (M, M)
    df: float

    @property
    def se(self) -> FloatArray:
        return np.asarray(np.sqrt(np.maximum(np.diag(self.covariance), 0.0)), dtype=np.float64)

    def difference(self) -> tuple[FloatArray, FloatArray]:
        """(W_a − W_b, SE(W_a − W_b)) for every ordered pair, each (M, M)."""
        var = np.diag(self.covariance)
        pair_var = var[:, None] + var[None, :] - 2.0 * self.covariance
        diff = self.weighted[:, None] - self.weighted[None, :]
        return np.asarray(diff), np.asarray(np.sqrt(np.maximum(pair_var, 0.0)))


def _cell_coefficients(defined: BoolArray, n_domains: int, n_levels: int, weights: FloatArray) -> FloatArray:
    """a_c of W = Σ_c a_c·S_c per model: w_d/Σw over levels with a cell, / domains at d; (M, C)."""
    has = defined.reshape(defined.shape[0], n_domains, n_levels)
    domains_at = has.sum(axis=1).astype(np.float64)  # (M, L)
    w = np.where(domains_at > 0, weights[None, :], 0.0)
    total = w.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_level = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0) / np.maximum(
            domains_at, 1.0
        )
    return np.asarray(np.where(has, per_level[:, None, :], 0.0).reshape(defined.shape[0], -1))


def prefix_estimates(
    scores: FloatArray, asked: BoolArray, order: QuestionOrder, level_weights: FloatArray
) -> Estimates:
    """W of each row of ``scores`` (models × questions S(m, q), NaN unscored) on the ``asked``
    questions, with the covariance of the estimates (:class:`Estimates`)."""
    n_cells = order.n_domains * order.n_levels
    cells = order.cells[asked]
    x = scores[:, asked]
    scored = ~np.isnan(x)
    values = np.where(scored, x, 0.0)
    onehot = np.zeros((cells.shape[0], n_cells))
    onehot[np.arange(cells.shape[0]), cells] = 1.0
    sums, counts = values @ onehot, scored.astype(np.float64) @ onehot  # (M, C)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)
    n_models = scores.shape[0]
    level = level_scores_from_cells(means.reshape(n_models, order.n_domains, order.n_levels))
    weighted = weighted_mean_over_levels(level, level_weights)
    a = _cell_coefficients(counts > 0, order.n_domains, order.n_levels, level_weights)

    n_c = np.bincount(cells, minlength=n_cells).astype(np.float64)  # asked per cell
    residual = np.where(scored, x - np.nan_to_num(means)[:, cells], 0.0)  # (M, q)
    # z = [scored]·(x − mean)/n_scored: the cell mean's linearisation; its spread over the cell's
    # questions, times n_c/(n_c − 1), estimates the cell mean's (co)variance.
    z = residual / np.maximum(counts, 1.0)[:, cells]
    multi = n_c >= 2
    scale = np.where(multi, np.sqrt(n_c / np.maximum(n_c - 1.0, 1.0)), 0.0)[cells]
    y = a[:, cells] * z * scale[None, :]
    covariance = y @ y.T
    singles = np.flatnonzero(n_c == 1)
    if singles.size:
        covariance += _borrowed_covariance(residual, cells, n_c, a, singles, order.n_levels, counts)
    design = design_of(cells, order.n_levels)
    present = np.flatnonzero(np.bincount(cells % order.n_levels, minlength=order.n_levels) > 0)
    df = degrees_of_freedom(design, order.n_domains, level_weights, present.astype(np.int64)).weighted
    return Estimates(weighted=np.asarray(weighted), covariance=np.asarray(covariance), df=float(df))


def _borrowed_covariance(
    residual: FloatArray,
    cells: IntArray,
    n_c: FloatArray,
    a: FloatArray,
    singles: IntArray,
    n_levels: int,
    counts: FloatArray,
) -> FloatArray:
    """Covariance terms of single-question cells: each borrows the pooled within-cell covariance
    of the cells of its level with two or more questions (of every level if its own has none),
    like the bootstrap's donors (:mod:`kubejury.stats.strata`)."""
    level_of_q = cells % n_levels
    multi_q = n_c[cells] >= 2
    out = np.zeros((a.shape[0], a.shape[0]))
    for level in np.unique(singles % n_levels).tolist():
        donors = multi_q & (level_of_q == level)
        if not donors.any():
            donors = multi_q
        if not donors.any():
            continue  # nothing to borrow from: the cell contributes no variance
        pool_df = float((n_c[np.unique(cells[donors])] - 1.0).sum())
        e = residual[:, donors]
        pooled = e @ e.T / pool_df
        own = singles[singles % n_levels == level]
        present = (counts[:, own] > 0).astype(np.float64)
        coef = a[:, own] * present
        out += (coef @ coef.T) * pooled
    return out


@dataclass(frozen=True)
class ModelOutcome:
    """Where one model stands: ``status`` "continue" or "stopped" with its ``reason``.

    ``look`` (1-based) is its stopping look, or the last look done while it continues;
    ``questions``: questions it answered (its prefix). ``interval`` is W's interval at that look,
    at level ``confidence`` = 1 − α_k; ``running_interval`` intersects its intervals over all its
    looks (valid on the same event, and never wider).
    """

    model: str
    status: Status
    reason: str
    look: int
    questions: int
    estimate: float
    interval: tuple[float, float]
    confidence: float
    running_interval: tuple[float, float]


@dataclass(frozen=True)
class PairOutcome:
    """A decided or open pair: ``verdict`` on W_a − W_b with its interval at the deciding look."""

    a: str
    b: str
    margin: float
    verdict: Verdict
    look: int
    difference: float
    interval: tuple[float, float]


@dataclass(frozen=True)
class SequentialOutcome:
    """The state after ``looks_done`` looks: per model, per pair, and the leading group."""

    looks_done: int
    n_looks: int
    models: tuple[ModelOutcome, ...]
    pairs: tuple[PairOutcome, ...]
    leading_group: tuple[str, ...]

    @property
    def finished(self) -> bool:
        return all(m.status == "stopped" for m in self.models)

    def outcome(self, model: str) -> ModelOutcome:
        return next(m for m in self.models if m.model == model)

    def next_wave(self, order: QuestionOrder) -> dict[str, IntArray]:
        """The questions each continuing model answers next (the wave after ``looks_done``), in
        asking order; empty when every model has stopped. What a runner generates and judges."""
        if self.looks_done >= order.n_looks:
            return {}
        wave = order.wave(self.looks_done)
        return {m.model: wave for m in self.models if m.status == "continue"}


@dataclass
class _State:
    """Mutable bookkeeping of one replay (never leaves :func:`evaluate`)."""

    active: BoolArray
    reason: list[str]
    look: IntArray
    questions: IntArray
    estimate: FloatArray
    interval: FloatArray  # (M, 2)
    level: FloatArray
    running: FloatArray  # (M, 2)
    out: BoolArray
    verdict: dict[tuple[int, int], tuple[Verdict, int, float, float, float]] = field(default_factory=dict)


def evaluate(
    models: Sequence[str],
    scores: FloatArray,
    order: QuestionOrder,
    budget: Budget,
    level_weights: FloatArray,
    looks_done: int | None = None,
    levels: LookLevels | None = None,
) -> SequentialOutcome:
    """Replay looks 1..``looks_done`` (default: all) on ``scores`` (models × questions S(m, q),
    NaN unscored; a model's scores beyond its stopping prefix are never read) and decide.

    Deterministic in its inputs, so the caller can call it after every wave with everything
    seen so far. ``levels`` defaults to the O'Brien–Fleming spending of ``budget.confidence``.
    """
    n_models = len(models)
    if scores.shape != (n_models, order.cells.shape[0]):
        raise ValueError(f"scores has shape {scores.shape}, expected {(n_models, order.cells.shape[0])}")
    levels = levels or spending_levels(order, budget.confidence)
    looks_done = order.n_looks if looks_done is None else min(int(looks_done), order.n_looks)
    pairs = _goal_pairs(models, budget)
    divisor = max(len(pairs), 1) if levels.per_pair else 1
    state = _State(
        active=np.ones(n_models, dtype=bool),
        reason=[""] * n_models,
        look=np.zeros(n_models, dtype=np.int64),
        questions=np.zeros(n_models, dtype=np.int64),
        estimate=np.full(n_models, np.nan),
        interval=np.full((n_models, 2), np.nan),
        level=np.full(n_models, np.nan),
        running=np.tile([-np.inf, np.inf], (n_models, 1)).astype(np.float64),
        out=np.zeros(n_models, dtype=bool),
    )
    for k in range(looks_done):
        if not state.active.any():
            break
        _look(k, models, scores, order, budget, level_weights, levels, divisor, pairs, state)
    return _outcome(models, budget, pairs, looks_done, order.n_looks, state)


def _goal_pairs(models: Sequence[str], budget: Budget) -> list[tuple[int, int, float]]:
    """The (a, b, margin) pairs the goal's multiplicity counts."""
    n = len(models)
    if budget.goal == "comparisons":
        index = {m: i for i, m in enumerate(models)}
        missing = [
            c.a if c.a not in index else c.b
            for c in budget.comparisons
            if c.a not in index or c.b not in index
        ]
        if missing:
            raise ConfigError(f"budget comparison names model {missing[0]!r}, which is not in the run")
        return [(index[c.a], index[c.b], c.margin) for c in budget.comparisons]
    if budget.goal == "full-ranking":
        return [(a, b, budget.margin) for a in range(n) for b in range(a + 1, n)]
    # leading-group: a model is compared with the others, M − 1 pairs involve the true best.
    return [(0, b, budget.margin) for b in range(1, n)]


def _look(
    k: int,
    models: Sequence[str],
    scores: FloatArray,
    order: QuestionOrder,
    budget: Budget,
    level_weights: FloatArray,
    levels: LookLevels,
    divisor: int,
    pairs: list[tuple[int, int, float]],
    state: _State,
) -> None:
    """Look k (0-based): estimates on the active models' common prefix, then the goal's decisions."""
    active = np.flatnonzero(state.active)
    asked = order.asked(k)
    est = prefix_estimates(scores[active], asked, order, level_weights)
    alpha_k = float(levels.alpha[k])
    q_model = float(t_quantile(est.df, 1.0 - alpha_k))
    q_pair = float(t_quantile(est.df, 1.0 - alpha_k / divisor))
    se = est.se
    low = np.clip(est.weighted - q_model * se, *SCORE_RANGE)
    high = np.clip(est.weighted + q_model * se, *SCORE_RANGE)
    state.estimate[active] = est.weighted
    state.interval[active] = np.stack([low, high], axis=1)
    state.level[active] = 1.0 - alpha_k
    state.running[active, 0] = np.fmax(state.running[active, 0], low)
    state.running[active, 1] = np.fmin(state.running[active, 1], high)
    state.look[active] = k + 1
    state.questions[active] = int(order.prefix_sizes[k])
    diff, pair_se = est.difference()
    last = k == order.n_looks - 1
    if budget.goal == "leading-group":
        _leading_group(active, diff, pair_se, q_pair, budget.margin, models, state)
    else:
        _pairwise(k, active, diff, pair_se, q_pair, pairs, budget.goal, state)
    if last:
        for i in np.flatnonzero(state.active):
            _stop(state, int(i), "budget: every question asked")


def _stop(state: _State, i: int, reason: str) -> None:
    state.active[i] = False
    state.reason[i] = reason


def _leading_group(
    active: IntArray,
    diff: FloatArray,
    pair_se: FloatArray,
    q: float,
    margin: float,
    models: Sequence[str],
    state: _State,
) -> None:
    """Out: some active b's interval of W_b − W_m lies above 0. Done: every remaining model's
    interval of W_leader − W_m lies inside ±margin (or only the leader remains)."""
    with np.errstate(invalid="ignore"):
        lower = diff - q * pair_se  # lower[b, m]: lower bound of W_b − W_m
        upper = diff + q * pair_se
    lower = np.where(np.isnan(lower), -np.inf, lower)
    np.fill_diagonal(lower, -np.inf)
    beaten = lower.max(axis=0) > 0.0
    for j in np.flatnonzero(beaten):
        by = int(np.argmax(lower[:, j]))
        state.out[active[j]] = True
        _stop(state, int(active[j]), f"out: below {models[active[by]]}")
    remaining = np.flatnonzero(~beaten)
    if remaining.size == 0:
        return
    leader = int(remaining[np.argmax(diff[remaining, remaining[0]])])
    others = remaining[remaining != leader]
    inside = (lower[leader, others] >= -margin) & (upper[leader, others] <= margin)
    if others.size == 0:
        _stop(state, int(active[leader]), "leader: every other model is out")
    elif inside.all():
        for j in others:
            _stop(state, int(active[j]), f"within {margin:g} of the leader {models[active[leader]]}")
        _stop(state, int(active[leader]), f"leader: the rest are within {margin:g}")


def _pairwise(
    k: int,
    active: IntArray,
    diff: FloatArray,
    pair_se: FloatArray,
    q: float,
    pairs: list[tuple[int, int, float]],
    goal: Goal,
    state: _State,
) -> None:
    """Decide the open pairs between active models (separated, or equivalent within the pair's
    margin); a model with no open pair left stops."""
    where = {int(m): j for j, m in enumerate(active)}
    for a, b, margin in pairs:
        if (a, b) in state.verdict or a not in where or b not in where:
            continue
        d, s = float(diff[where[a], where[b]]), float(pair_se[where[a], where[b]])
        if not math.isfinite(d) or not math.isfinite(s):
            continue
        low, high = d - q * s, d + q * s
        verdict: Verdict = "undecided"
        if low > 0.0:
            verdict = "a-better"
        elif high < 0.0:
            verdict = "b-better"
        elif low >= -margin and high <= margin:
            verdict = "equivalent"
        if verdict != "undecided":
            state.verdict[(a, b)] = (verdict, k + 1, d, low, high)
    open_models = {i for a, b, _ in pairs if (a, b) not in state.verdict for i in (a, b)}
    reason = "ranked: every pair decided" if goal == "full-ranking" else "no open comparison"
    for i in active.tolist():
        if i not in open_models:
            _stop(state, int(i), reason)


def _outcome(
    models: Sequence[str],
    budget: Budget,
    pairs: list[tuple[int, int, float]],
    looks_done: int,
    n_looks: int,
    state: _State,
) -> SequentialOutcome:
    outcomes = tuple(
        ModelOutcome(
            model=m,
            status="continue" if state.active[i] else "stopped",
            reason=state.reason[i],
            look=int(state.look[i]),
            questions=int(state.questions[i]),
            estimate=float(state.estimate[i]),
            interval=(float(state.interval[i, 0]), float(state.interval[i, 1])),
            confidence=float(state.level[i]),
            running_interval=(float(state.running[i, 0]), float(state.running[i, 1])),
        )
        for i, m in enumerate(models)
    )
    pair_outcomes: list[PairOutcome] = []
    if budget.goal != "leading-group":
        for a, b, margin in pairs:
            verdict, look, d, low, high = state.verdict.get(
                (a, b), ("undecided", 0, math.nan, math.nan, math.nan)
            )
            pair_outcomes.append(PairOutcome(models[a], models[b], margin, verdict, look, d, (low, high)))
    group = tuple(
        sorted(
            (m for i, m in enumerate(models) if not state.out[i]),
            key=lambda m: -state.estimate[models.index(m)],
        )
    )
    return SequentialOutcome(
        looks_done=looks_done,
        n_looks=n_looks,
        models=outcomes,
        pairs=tuple(pair_outcomes),
        leading_group=group if budget.goal == "leading-group" else (),
    )
