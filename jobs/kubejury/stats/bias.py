"""Judge biases the study named but did not measure: self-preference, judge influence, verbosity.

In the study two judges were also evaluated models, and it says that whether "judges
systematically assign higher scores to closely related models" was left for future work. This
module measures it:

- :func:`self_preference` — for every judge declared to *be* an evaluated model (``same_as``) or
  to share its family, the mean over that model's answers of (the judge's score − the mean of the
  other judges' scores on the same answer), with a seeded bootstrap CI over questions; the same
  quantity over the *neutral* models (related to no judge of the panel) is the baseline (the
  judge's general leniency),
  and their difference (difference-in-differences) is the self-preference estimate. When no model
  is neutral (every model is also a judge, as in the two-model quickstart), the baseline falls back
  to the models the judge is not related to, and a note says what the difference then measures:
  with two judges each being one model, the sum of both judges' self-preferences (a cross design
  cannot separate them).
- :func:`leave_one_judge_out` — the study's ranking recomputed with each judge removed, Kendall's
  tau to the full ranking and the largest rank change: does any single judge decide the result?
- :func:`verbosity_bias` — the within-question correlation between answer length and each judge's
  score (LLM judges are known to favour longer answers).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from kubejury.stats import scoring
from kubejury.stats.agreement import json_value, pearson, spearman
from kubejury.stats.cube import BoolArray, FloatArray, IntArray, ScoreCube
from kubejury.stats.scoring import ScoringConfig, SeriesScores

Relation = Literal["same_as", "family"]

# Bootstrap replicates are drawn in chunks so that chunk × questions stays near this many indices.
_BOOTSTRAP_CHUNK_CELLS = 2_000_000


# --------------------------------------------------------------------------------------------
# Self-preference
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A mean with its bootstrap interval and the number of answers behind it."""

    mean: float
    ci_low: float
    ci_high: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"mean": json_value(self.mean), "ci95": json_value((self.ci_low, self.ci_high)), "n": self.n}


@dataclass(frozen=True)
class SelfPreferencePair:
    """One (judge, related model) pair.

    ``related``: mean over the model's answers of (judge score − mean of the other judges on the
    same answer). ``baseline``: the same over the answers of every *neutral* model — related to no
    judge of the panel, so no other judge's own self-preference leaks into the reference (when
    there is none: the models this judge is not related to, with a note in the result).
    ``difference``: ``related − baseline``, the
    self-preference estimate net of the judge's general leniency; its CI comes from the same
    bootstrap replicates (paired over questions). A positive difference whose interval excludes 0
    means the judge favours the related model beyond its usual leniency.
    """

    judge: str
    model: str
    relation: Relation
    related: Estimate
    baseline: Estimate
    difference: Estimate

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "model": self.model,
            "relation": self.relation,
            "related": self.related.to_dict(),
            "baseline": self.baseline.to_dict(),
            "difference": self.difference.to_dict(),
        }


@dataclass(frozen=True)
class SelfPreference:
    """Self-preference of one series' judges.

    ``applicable`` is ``False`` (with ``reason``) when the series has fewer than two judges (there
    is nobody to compare with) or no declared judge–model relation matches the cube. ``notes``
    lists declarations that could not be used (a judge or model absent from the series).
    Bootstrap: ``n_bootstrap`` resamples of questions with replacement (cluster = question, so a
    question's answers from every model move together), percentile interval at ``confidence``,
    ``numpy.random.default_rng(seed)``.
    """

    series: str
    applicable: bool
    reason: str | None
    pairs: tuple[SelfPreferencePair, ...]
    notes: tuple[str, ...]
    n_bootstrap: int
    confidence: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "applicable": self.applicable,
            "reason": self.reason,
            "pairs": [pair.to_dict() for pair in self.pairs],
            "notes": list(self.notes),
            "n_bootstrap": self.n_bootstrap,
            "confidence": self.confidence,
            "seed": self.seed,
        }


def judge_deltas(cube: ScoreCube) -> FloatArray:
    """(M, Q, J): each judge's score minus the mean of the other judges' scores on the same answer.

    NaN where the judge did not score the answer or no other judge did.
    """
    scores = cube.scores
    present = ~np.isnan(scores)
    filled = np.where(present, scores, 0.0)
    total = filled.sum(axis=2, keepdims=True)
    others_count = present.sum(axis=2, keepdims=True) - present
    with np.errstate(invalid="ignore", divide="ignore"):
        others_mean = (total - filled) / others_count
    result: FloatArray = np.where(present & (others_count > 0), scores - others_mean, np.nan)
    return result


def _norm(name: str | None) -> str | None:
    return name.strip().casefold() if name else None


def related_models(
    cube: ScoreCube,
    judge: str,
    *,
    judge_same_as: Mapping[str, str],
    judge_family: Mapping[str, str],
    model_family: Mapping[str, str],
) -> dict[str, Relation]:
    """Models of ``cube`` related to ``judge``: the one it is (``same_as``), then its family members.

    Family names compare case-insensitively, ignoring surrounding blanks.
    """
    relations: dict[str, Relation] = {}
    same = judge_same_as.get(judge)
    family = _norm(judge_family.get(judge))
    if family is None and same is not None:
        family = _norm(model_family.get(same))
    for model in cube.models:
        if model == same:
            relations[model] = "same_as"
        elif family is not None and _norm(model_family.get(model)) == family:
            relations[model] = "family"
    return relations


def _bootstrap_ratio_draws(
    sums: FloatArray, counts: FloatArray, n_bootstrap: int, rng: np.random.Generator
) -> FloatArray:
    """(B, K) bootstrap replicates of ``Σ sums[q, k] / Σ counts[q, k]`` resampling rows (questions)."""
    n_questions, n_stats = sums.shape
    draws = np.empty((n_bootstrap, n_stats))
    if n_questions == 0:
        draws.fill(np.nan)
        return draws
    chunk = max(1, _BOOTSTRAP_CHUNK_CELLS // n_questions)
    for start in range(0, n_bootstrap, chunk):
        stop = min(n_bootstrap, start + chunk)
        # Resampling with replacement == multiplying each question by how often it was drawn.
        rows = stop - start
        idx = rng.integers(0, n_questions, size=(rows, n_questions))
        idx += np.arange(rows)[:, None] * n_questions
        weights = (
            np.bincount(idx.ravel(), minlength=rows * n_questions)
            .reshape(rows, n_questions)
            .astype(np.float64)
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            draws[start:stop] = (weights @ sums) / (weights @ counts)
    return draws


def _estimate(total: float, count: float, draws: FloatArray, confidence: float) -> Estimate:
    mean = total / count if count else math.nan
    finite = draws[np.isfinite(draws)]
    if finite.size == 0 or not count:
        return Estimate(mean, math.nan, math.nan, int(count))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return Estimate(mean, float(low), float(high), int(count))


def _estimate_difference(
    related: Estimate, baseline: Estimate, draws: FloatArray, confidence: float
) -> Estimate:
    mean = related.mean - baseline.mean
    finite = draws[np.isfinite(draws)]
    if finite.size == 0 or not related.n or not baseline.n:
        return Estimate(mean, math.nan, math.nan, related.n)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return Estimate(mean, float(low), float(high), related.n)


def self_preference(
    cube: ScoreCube,
    *,
    judge_same_as: Mapping[str, str] | None = None,
    judge_family: Mapping[str, str] | None = None,
    model_family: Mapping[str, str] | None = None,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> SelfPreference:
    """Self-preference of every judge towards the models it is or shares a family with.

    ``judge_same_as``: judge → the evaluated model it is. ``judge_family``: judge → its family
    (when absent, the family of its ``same_as`` model is used). ``model_family``: model → family
    (e.g. from :class:`~kubejury.modelinfo.ModelInfo`). See :class:`SelfPreferencePair`.
    """
    same_as = dict(judge_same_as or {})
    judge_fam = dict(judge_family or {})
    model_fam = dict(model_family or {})
    notes = []
    for judge in sorted(set(same_as) | set(judge_fam)):
        if judge not in cube.judges:
            notes.append(f"judge {judge!r} is declared but did not judge series {cube.series!r}")
    for judge, model in sorted(same_as.items()):
        if model not in cube.models:
            notes.append(
                f"judge {judge!r} is declared to be model {model!r}, which is not in series {cube.series!r}"
            )

    def result(applicable: bool, reason: str | None, pairs: tuple[SelfPreferencePair, ...]) -> SelfPreference:
        return SelfPreference(
            cube.series, applicable, reason, pairs, tuple(notes), n_bootstrap, confidence, seed
        )

    if cube.n_judges < 2:
        return result(False, f"self-preference needs at least 2 judges, the series has {cube.n_judges}", ())

    deltas = judge_deltas(cube)
    present = ~np.isnan(deltas)
    filled = np.where(present, deltas, 0.0)
    rng = np.random.default_rng(seed)
    relations_of = {
        judge: related_models(
            cube, judge, judge_same_as=same_as, judge_family=judge_fam, model_family=model_fam
        )
        for judge in cube.judges
    }
    neutral = np.array([not any(model in rel for rel in relations_of.values()) for model in cube.models])
    pairs: list[SelfPreferencePair] = []
    for j, judge in enumerate(cube.judges):
        relations = relations_of[judge]
        if not relations:
            continue
        for model in relations:
            shared = [other for other in cube.judges if other != judge and model in relations_of[other]]
            if shared:
                notes.append(
                    f"model {model!r} is also related to judge(s) {', '.join(shared)}, whose scores are part of "
                    f"the reference for judge {judge!r}: its self-preference estimate is understated"
                )
        # Per question: baseline sums/counts over neutral models (shared by the judge's pairs).
        reference = neutral if neutral.any() else _cross_reference(cube, judge, relations_of, notes)
        base_sum = filled[reference, :, j].sum(axis=0)
        base_cnt = present[reference, :, j].sum(axis=0).astype(np.float64)
        # One bootstrap per judge: columns are its related models, then the unrelated baseline,
        # so every pair of this judge is resampled on the same questions.
        related_rows = [cube.model_index(model) for model in relations]
        sums = np.column_stack([filled[related_rows, :, j].T, base_sum])
        counts = np.column_stack([present[related_rows, :, j].T.astype(np.float64), base_cnt])
        draws = _bootstrap_ratio_draws(sums, counts, n_bootstrap, rng)
        baseline = _estimate(float(base_sum.sum()), float(base_cnt.sum()), draws[:, -1], confidence)
        for k, (model, relation) in enumerate(relations.items()):
            related = _estimate(float(sums[:, k].sum()), float(counts[:, k].sum()), draws[:, k], confidence)
            difference = _estimate_difference(related, baseline, draws[:, k] - draws[:, -1], confidence)
            pairs.append(SelfPreferencePair(judge, model, relation, related, baseline, difference))
    if not pairs:
        return result(False, "no judge is declared to be, or share a family with, a model of this series", ())
    return result(True, None, tuple(pairs))


def _cross_reference(
    cube: ScoreCube, judge: str, relations_of: Mapping[str, Mapping[str, Relation]], notes: list[str]
) -> BoolArray:
    """Baseline rows when no model is neutral: the models ``judge`` is not related to (noted)."""
    unrelated = np.array([model not in relations_of[judge] for model in cube.models])
    if unrelated.any():
        models = [m for m, keep in zip(cube.models, unrelated, strict=True) if keep]
        others = sorted(o for o in cube.judges if o != judge and any(m in relations_of[o] for m in models))
        notes.append(
            f"no evaluated model is related to no judge, so the baseline of judge {judge!r} is the models it is "
            f"not related to ({', '.join(models)}), which are related to judge(s) {', '.join(others)}: its difference "
            "includes their self-preference as well as its own (with two judges that are each one evaluated "
            "model, both differences estimate the sum of the two self-preferences)"
        )
    return unrelated


# --------------------------------------------------------------------------------------------
# Leave one judge out
# --------------------------------------------------------------------------------------------

Scorer = Callable[[ScoreCube, ScoringConfig], SeriesScores]


@dataclass(frozen=True)
class JudgeRemoval:
    """The ranking without one judge, against the full panel's ranking.

    ``kendall_tau``: tau-b between the models' rank positions in the full and reduced rankings
    (NaN with fewer than 2 models). ``max_rank_change``: the largest |position change| and the
    models that moved that much. ``weighted``: W(m) without the judge, in ``models`` order.
    """

    judge: str
    ranking: tuple[str, ...]
    weighted: tuple[float, ...]
    kendall_tau: float
    max_rank_change: int
    most_moved: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "ranking": list(self.ranking),
            "weighted": json_value(self.weighted),
            "kendall_tau": json_value(self.kendall_tau),
            "max_rank_change": self.max_rank_change,
            "most_moved": list(self.most_moved),
        }


@dataclass(frozen=True)
class LeaveOneJudgeOut:
    """Influence of each judge on the series ranking (``applicable`` needs at least 2 judges)."""

    series: str
    applicable: bool
    reason: str | None
    models: tuple[str, ...]
    full_ranking: tuple[str, ...]
    full_weighted: tuple[float, ...]
    removals: tuple[JudgeRemoval, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "applicable": self.applicable,
            "reason": self.reason,
            "models": list(self.models),
            "full_ranking": list(self.full_ranking),
            "full_weighted": json_value(self.full_weighted),
            "removals": [removal.to_dict() for removal in self.removals],
        }


def without_judge(cube: ScoreCube, judge: str) -> ScoreCube:
    """``cube`` with one judge's column dropped (records, answers and questions unchanged)."""
    j = cube.judge_index(judge)
    keep = [k for k in range(cube.n_judges) if k != j]
    return dataclasses.replace(
        cube,
        judges=tuple(cube.judges[k] for k in keep),
        scores=np.ascontiguousarray(cube.scores[:, :, keep]),
    )


def _positions(ranking: tuple[str, ...], models: tuple[str, ...]) -> IntArray:
    where = {model: i for i, model in enumerate(ranking)}
    return np.array([where[model] for model in models], dtype=np.int64)


def leave_one_judge_out(
    cube: ScoreCube,
    config: ScoringConfig | None = None,
    *,
    scorer: Scorer | None = None,
) -> LeaveOneJudgeOut:
    """Recompute the study's ranking with each judge removed in turn.

    ``scorer`` defaults to :func:`kubejury.stats.scoring.score_series`; every model of the cube appears
    in each ranking it returns.
    """
    config = config or ScoringConfig()
    score = scorer or scoring.score_series
    if cube.n_judges < 2:
        return LeaveOneJudgeOut(
            cube.series,
            False,
            f"leave-one-judge-out needs at least 2 judges, the series has {cube.n_judges}",
            cube.models,
            (),
            (),
            (),
        )
    full = score(cube, config)
    full_positions = _positions(full.ranking, cube.models)
    removals = []
    for judge in cube.judges:
        reduced = score(without_judge(cube, judge), config)
        positions = _positions(reduced.ranking, cube.models)
        change = np.abs(positions - full_positions)
        tau = math.nan
        if cube.n_models >= 2:
            tau = float(stats.kendalltau(full_positions, positions).statistic)
        max_change = int(change.max()) if change.size else 0
        moved = tuple(
            model for model, c in zip(cube.models, change, strict=True) if c == max_change and c > 0
        )
        removals.append(
            JudgeRemoval(
                judge=judge,
                ranking=tuple(reduced.ranking),
                weighted=tuple(float(v) for v in _weighted_in_order(reduced, cube.models)),
                kendall_tau=tau,
                max_rank_change=max_change,
                most_moved=moved,
            )
        )
    return LeaveOneJudgeOut(
        series=cube.series,
        applicable=True,
        reason=None,
        models=cube.models,
        full_ranking=tuple(full.ranking),
        full_weighted=tuple(float(v) for v in _weighted_in_order(full, cube.models)),
        removals=tuple(removals),
    )


def _weighted_in_order(scores: SeriesScores, models: tuple[str, ...]) -> FloatArray:
    where = {model: i for i, model in enumerate(scores.models)}
    return np.array([scores.weighted[where[m]] if m in where else math.nan for m in models], dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Verbosity
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthCorrelation:
    """Within-question correlation of answer length (characters) with one judge's score.

    Length and score are demeaned within each question across the models that have both; only
    questions with at least two such models contribute (``n`` residual pairs from
    ``n_questions`` questions). ``pearson`` and ``spearman`` are computed on the pooled residuals.
    ``judge`` is ``None`` for the panel mean score S(q).
    """

    judge: str | None
    pearson: float
    spearman: float
    n: int
    n_questions: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "pearson": json_value(self.pearson),
            "spearman": json_value(self.spearman),
            "n": self.n,
            "n_questions": self.n_questions,
        }


@dataclass(frozen=True)
class VerbosityBias:
    """Verbosity bias of one series (``applicable`` is ``False`` without answer lengths)."""

    series: str
    applicable: bool
    reason: str | None
    per_judge: tuple[LengthCorrelation, ...]
    panel: LengthCorrelation | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "applicable": self.applicable,
            "reason": self.reason,
            "per_judge": [item.to_dict() for item in self.per_judge],
            "panel": self.panel.to_dict() if self.panel else None,
        }


def within_question_correlation(
    lengths: FloatArray, scores: FloatArray, judge: str | None
) -> LengthCorrelation:
    """See :class:`LengthCorrelation`; ``lengths`` and ``scores`` are (M, Q) with NaN for missing."""
    valid: BoolArray = ~np.isnan(lengths) & ~np.isnan(scores)
    per_question = valid.sum(axis=0)
    usable = valid & (per_question >= 2)[None, :]
    count = np.maximum(per_question, 1)
    length_mean = np.where(valid, lengths, 0.0).sum(axis=0) / count
    score_mean = np.where(valid, scores, 0.0).sum(axis=0) / count
    length_resid = (lengths - length_mean[None, :])[usable]
    score_resid = (scores - score_mean[None, :])[usable]
    return LengthCorrelation(
        judge=judge,
        pearson=pearson(length_resid, score_resid),
        spearman=spearman(length_resid, score_resid),
        n=int(usable.sum()),
        n_questions=int((per_question >= 2).sum()),
    )


def verbosity_bias(cube: ScoreCube) -> VerbosityBias:
    """Per-judge (and panel) within-question correlation of answer length with score."""
    if cube.answer_chars is None or not np.isfinite(cube.answer_chars).any():
        return VerbosityBias(cube.series, False, "answer lengths are not available for this series", (), None)
    lengths = np.where(cube.has_record, cube.answer_chars, np.nan)
    per_judge = tuple(
        within_question_correlation(lengths, cube.scores[:, :, j], judge)
        for j, judge in enumerate(cube.judges)
    )
    with np.errstate(invalid="ignore"):
        counts = (~np.isnan(cube.scores)).sum(axis=2)
        panel_scores = np.where(counts > 0, np.nansum(cube.scores, axis=2) / np.maximum(counts, 1), np.nan)
    panel = within_question_correlation(lengths, panel_scores, None)
    return VerbosityBias(cube.series, True, None, per_judge, panel)
