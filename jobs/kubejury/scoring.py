"""The study's scoring method, exactly, on a :class:`~kubejury.cube.ScoreCube`.

(API contract; implementation owned by the engine-core work. See docs/method.md.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubejury.cube import FloatArray, IntArray, ScoreCube

DEFAULT_LEVEL_WEIGHTS: dict[int, float] = {1: 0.6, 2: 0.8, 3: 1.0}


@dataclass(frozen=True)
class TierRule:
    """A model earns ``tier`` when every given bound holds (``None`` = no bound)."""

    tier: str
    min_weighted: float | None = None
    max_degradation: float | None = None
    max_sigma: float | None = None


DEFAULT_TIERS: tuple[TierRule, ...] = (
    TierRule("S", min_weighted=9.0, max_degradation=0.4, max_sigma=0.5),
    TierRule("A", min_weighted=8.5, max_degradation=0.7, max_sigma=0.7),
    TierRule("B", min_weighted=7.5, max_degradation=1.2),
    TierRule("C"),
)


@dataclass(frozen=True)
class ScoringConfig:
    level_weights: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_LEVEL_WEIGHTS))
    tiers: tuple[TierRule, ...] = DEFAULT_TIERS
    bootstrap_samples: int = 2000
    confidence: float = 0.95
    seed: int = 0
    primary_series: str | None = None  # None: the first series seen (spec order)


@dataclass(frozen=True)
class SeriesScores:
    """Everything formulas (1)–(5) and the study's tables give for one series.

    Arrays are indexed like the cube: models (M), ``cube.domains`` (Dn), ``cube.levels`` (L).
    NaN marks "no scored question there".
    """

    series: str
    models: tuple[str, ...]
    domains: tuple[str, ...]
    levels: tuple[int, ...]
    question_scores: FloatArray  # (M, Q) S(q), NaN if unscored or absent
    domain_level_scores: FloatArray  # (M, Dn, L) S_i(m, d)
    level_scores: FloatArray  # (M, L) Score(m, d)
    weighted: FloatArray  # (M,) W(m)
    domain_weighted: FloatArray  # (M, Dn)
    degradation: FloatArray  # (M,) D(m) = Score(lowest) - Score(highest)
    judge_sigma: FloatArray  # (M,) σ(m)
    n_scored: IntArray  # (M,)
    n_unscored: IntArray  # (M,)
    ranking: tuple[str, ...]  # by W descending (ties: name)
    domain_leaders: dict[str, str]
    tiers: dict[str, str]


def score_series(cube: ScoreCube, config: ScoringConfig) -> SeriesScores:  # pragma: no cover - contract
    raise NotImplementedError
