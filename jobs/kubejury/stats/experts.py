"""Expert validation made quantitative: how well the judge panel agrees with human experts.

The study's expert stage was qualitative ("generally consistent", no correlation or kappa
computed) and it said so. Given expert scores on the same 0..10 scale for some (question, model)
answers, this module compares each expert score with the panel's S(q) for that answer (the mean
of the non-null judge scores, the study's formula 1) and reports, overall, per domain and per
expert: n, Pearson, Spearman, mean absolute error, quadratic-weighted kappa on scores rounded to
0..10, and the mean bias (expert − panel).

Every expert row is accounted for: rows of another series are counted as such, and rows that
cannot be compared (an answer the panel could not score, a null expert score) are counted by
reason with examples, never silently dropped. A row naming a question the benchmark lacks or a
model the panel did not judge is a mistake in the file (a typo, another run's file), not data: it
is an :class:`~kubejury.errors.InputError` naming the file and line. Scores written as text must
be plain decimal numbers (``7``, ``6.5``): Python's ``float`` would also read ``1_0``, ``1e1``,
``nan`` or other scripts' digits, which no expert writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from kubejury.errors import InputError
from kubejury.stats.agreement import json_value, pearson, quadratic_weighted_kappa, spearman
from kubejury.stats.cube import FloatArray, ScoreCube
from kubejury.stats.scoring import SeriesScores

REQUIRED_COLUMNS = ("question_id", "model", "expert", "score")
MAX_UNMATCHED_EXAMPLES = 20

UNMATCHED_REASONS = ("panel_unscored", "expert_score_null")

_PLAIN_DECIMAL = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?", re.ASCII)


def expert_score(text: str) -> float:
    """An expert score written as text: a plain decimal number (``7``, ``6.5``, ``-1``), else
    ``ValueError``. The 0..10 range is the caller's to check."""
    stripped = text.strip()
    if not _PLAIN_DECIMAL.fullmatch(stripped):
        raise ValueError(f"score must be a plain decimal number such as 7 or 6.5, got {text!r}")
    return float(stripped)


@dataclass(frozen=True)
class PanelScores:
    """The panel's S(q) per (model, question) of one series, with each question's domain name."""

    series: str
    models: tuple[str, ...]
    question_ids: tuple[str, ...]
    question_domains: tuple[str, ...]
    scores: FloatArray  # (M, Q), NaN where unscored or not asked

    @classmethod
    def from_cube(cls, cube: ScoreCube) -> PanelScores:
        """S(q) = mean of the non-null judge scores of each answer (NaN when there is none)."""
        present = ~np.isnan(cube.scores)
        counts = present.sum(axis=2)
        sums = np.where(present, cube.scores, 0.0).sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            scores = np.where(counts > 0, sums / counts, np.nan)
        return cls(cube.series, cube.models, cube.question_ids, _domain_names(cube), scores)

    @classmethod
    def from_series_scores(cls, scores: SeriesScores, cube: ScoreCube) -> PanelScores:
        """The ``question_scores`` of ``scores``; ``cube`` (the same series) names the questions."""
        return cls(
            scores.series, scores.models, cube.question_ids, _domain_names(cube), scores.question_scores
        )


def _domain_names(cube: ScoreCube) -> tuple[str, ...]:
    return tuple(cube.domains[int(i)] for i in cube.question_domain)


@dataclass(frozen=True)
class AgreementStats:
    """Agreement of expert scores with panel scores over ``n`` (expert rating, panel S(q)) pairs.

    ``mae`` is the mean |expert − panel|; ``mean_bias`` the mean (expert − panel), positive when
    experts score higher; ``kappa_quadratic`` uses both scores rounded half up to 0..10.
    Statistics undefined on the data (n < 2, constant scores) are NaN.
    """

    n: int
    pearson: float
    spearman: float
    mae: float
    kappa_quadratic: float
    mean_bias: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "pearson": json_value(self.pearson),
            "spearman": json_value(self.spearman),
            "mae": json_value(self.mae),
            "kappa_quadratic": json_value(self.kappa_quadratic),
            "mean_bias": json_value(self.mean_bias),
        }


@dataclass(frozen=True)
class UnmatchedRow:
    """An expert row that could not be compared, with its 1-based data row number."""

    row: int
    question_id: str | None
    model: str | None
    expert: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "question_id": self.question_id,
            "model": self.model,
            "expert": self.expert,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ExpertAgreement:
    """Expert vs panel agreement for one series.

    ``n_rows``: expert rows given; ``n_other_series``: rows whose ``series`` names another series
    (rows without a series apply to every series); ``n_matched``: rows compared; ``unmatched``:
    count per reason (``panel_unscored``, ``expert_score_null``) with up to 20
    ``unmatched_examples``. Each matched row is one pair, so
    an answer rated by two experts counts twice in ``overall`` and ``per_domain``.
    ``applicable`` is ``False`` when no row matched.
    """

    series: str
    applicable: bool
    n_rows: int
    n_other_series: int
    n_matched: int
    unmatched: dict[str, int]
    unmatched_examples: tuple[UnmatchedRow, ...]
    overall: AgreementStats
    per_domain: dict[str, AgreementStats]
    per_expert: dict[str, AgreementStats]

    @property
    def n_unmatched(self) -> int:
        return sum(self.unmatched.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "applicable": self.applicable,
            "n_rows": self.n_rows,
            "n_other_series": self.n_other_series,
            "n_matched": self.n_matched,
            "n_unmatched": self.n_unmatched,
            "unmatched": dict(self.unmatched),
            "unmatched_examples": [row.to_dict() for row in self.unmatched_examples],
            "overall": self.overall.to_dict(),
            "per_domain": {name: stats.to_dict() for name, stats in self.per_domain.items()},
            "per_expert": {name: stats.to_dict() for name, stats in self.per_expert.items()},
        }


def agreement_stats(expert: FloatArray, panel: FloatArray) -> AgreementStats:
    """:class:`AgreementStats` of paired expert and panel scores (no NaN)."""
    expert = np.asarray(expert, dtype=np.float64)
    panel = np.asarray(panel, dtype=np.float64)
    n = int(expert.size)
    if n == 0:
        return AgreementStats(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    difference = expert - panel
    return AgreementStats(
        n=n,
        pearson=pearson(expert, panel),
        spearman=spearman(expert, panel),
        mae=float(np.abs(difference).mean()),
        kappa_quadratic=quadratic_weighted_kappa(expert, panel),
        mean_bias=float(difference.mean()),
    )


ExpertRows = pl.DataFrame | Mapping[str, Sequence[Any]]


def _as_frame(experts: ExpertRows, source: str) -> pl.DataFrame:
    frame = experts if isinstance(experts, pl.DataFrame) else pl.DataFrame(dict(experts), strict=False)
    for column in REQUIRED_COLUMNS:
        if column not in frame.columns:
            raise InputError(
                source, "expert scores need the columns " + ", ".join(REQUIRED_COLUMNS), field=column
            )
    columns = [
        pl.col("question_id").cast(pl.Utf8),
        pl.col("model").cast(pl.Utf8),
        pl.col("expert").cast(pl.Utf8),
    ]
    if "series" in frame.columns:
        columns.append(pl.col("series").cast(pl.Utf8))
    frame = frame.with_row_index("row", offset=1)
    if frame["score"].dtype == pl.Utf8:
        frame = frame.with_columns(score=pl.Series("score", _text_scores(frame, source), dtype=pl.Float64))
    try:
        return frame.with_columns(*columns, pl.col("score").cast(pl.Float64))
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as error:
        raise InputError(source, f"expert scores must be numbers: {error}", field="score") from error


def _where(frame: pl.DataFrame, index: int) -> str:
    """``line N`` of the file when the rows carry their lines (load_experts), else ``row N``."""
    if "line" in frame.columns:
        return f"line {frame['line'][index]}"
    return f"row {frame['row'][index]}"


def _text_scores(frame: pl.DataFrame, source: str) -> list[float | None]:
    scores: list[float | None] = []
    for index, text in enumerate(frame["score"].to_list()):
        try:
            scores.append(None if text is None else expert_score(text))
        except ValueError as error:
            raise InputError(source, str(error), location=_where(frame, index), field="score") from None
    return scores


def _check_names(frame: pl.DataFrame, scores: PanelScores, source: str) -> None:
    """An error naming file and line for the first row whose question or model this panel lacks."""
    known = {"question_id": set(scores.question_ids), "model": set(scores.models)}
    for column, what in (("question_id", "question"), ("model", "model")):
        values = frame[column].to_list()
        unknown = next((i for i, value in enumerate(values) if value not in known[column]), None)
        if unknown is None:
            continue
        if column == "question_id":
            detail = "the benchmark has no question with this id"
        else:
            detail = (
                f"series {scores.series!r} judged only {', '.join(scores.models)}; fix the name, or give "
                "the row the series it belongs to"
            )
        raise InputError(
            source,
            f"unknown {what} {values[unknown]!r}: {detail}",
            location=_where(frame, unknown),
            field=column,
        )


def expert_agreement(
    panel: PanelScores | ScoreCube,
    experts: ExpertRows,
    *,
    source: str = "experts",
) -> ExpertAgreement:
    """Compare expert scores with the panel's S(q); see :class:`ExpertAgreement`.

    ``experts`` is a polars DataFrame (as ``kubejury.files.tables.load_experts`` returns) or a mapping
    of column name → sequence, with columns ``question_id, model, expert, score`` and optional
    ``series``. ``source`` names the input in errors.
    """
    scores = panel if isinstance(panel, PanelScores) else PanelScores.from_cube(panel)
    frame = _as_frame(experts, source)
    n_rows = frame.height
    if "series" in frame.columns:
        other = frame.filter(pl.col("series").is_not_null() & (pl.col("series") != scores.series))
        frame = frame.filter(pl.col("series").is_null() | (pl.col("series") == scores.series))
        n_other_series = other.height
    else:
        n_other_series = 0
    _check_names(frame, scores, source)

    question_index = {qid: i for i, qid in enumerate(scores.question_ids)}
    model_index = {model: i for i, model in enumerate(scores.models)}
    frame = frame.with_columns(
        pl.col("question_id").replace_strict(question_index, default=None, return_dtype=pl.Int64).alias("_q"),
        pl.col("model").replace_strict(model_index, default=None, return_dtype=pl.Int64).alias("_m"),
    )
    q_idx = frame["_q"].fill_null(-1).to_numpy()
    m_idx = frame["_m"].fill_null(-1).to_numpy()
    expert_scores = frame["score"].fill_null(np.nan).to_numpy().astype(np.float64)
    known = (q_idx >= 0) & (m_idx >= 0)
    panel_values = np.full(frame.height, np.nan)
    panel_values[known] = scores.scores[m_idx[known], q_idx[known]]

    reason = np.full(frame.height, "", dtype=object)
    reason[np.isnan(expert_scores)] = "expert_score_null"
    reason[known & np.isnan(panel_values)] = "panel_unscored"
    matched = reason == ""
    unmatched = {name: int((reason == name).sum()) for name in UNMATCHED_REASONS}
    examples = tuple(
        UnmatchedRow(int(row), qid, model, expert, str(why))
        for row, qid, model, expert, why in zip(
            frame["row"].to_list(),
            frame["question_id"].to_list(),
            frame["model"].to_list(),
            frame["expert"].to_list(),
            reason,
            strict=True,
        )
        if why
    )[:MAX_UNMATCHED_EXAMPLES]

    expert_matched = expert_scores[matched]
    panel_matched = panel_values[matched]
    domains = np.array(scores.question_domains, dtype=object)[q_idx[matched]]
    expert_names = np.array(frame["expert"].fill_null("(unnamed)").to_list(), dtype=object)[matched]
    per_domain = {
        str(domain): agreement_stats(expert_matched[domains == domain], panel_matched[domains == domain])
        for domain in sorted(set(domains.tolist()))
    }
    per_expert = {
        str(name): agreement_stats(expert_matched[expert_names == name], panel_matched[expert_names == name])
        for name in sorted({str(n) for n in expert_names.tolist()})
    }
    n_matched = int(matched.sum())
    return ExpertAgreement(
        series=scores.series,
        applicable=n_matched > 0,
        n_rows=n_rows,
        n_other_series=n_other_series,
        n_matched=n_matched,
        unmatched=unmatched,
        unmatched_examples=examples,
        overall=agreement_stats(expert_matched, panel_matched),
        per_domain=per_domain,
        per_expert=per_expert,
    )
