"""The study's Table 7: how a model's weighted score moves between generation settings (series).

The study ran its primary series at temperature 0 and compared a few others with it on a subset
of models. Here every model evaluated in at least two series gets its W in each series and the
difference from the primary series, computed from :class:`~kubejury.stats.scoring.SeriesScores`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kubejury.errors import ConfigError
from kubejury.stats.cube import FloatArray
from kubejury.stats.scoring import SeriesScores
from kubejury.stats.uncertainty import SeriesUncertainty, t_interval


@dataclass(frozen=True)
class SeriesComparison:
    """W per (model, series) and W(series) − W(primary).

    ``series`` starts with the primary. ``models`` are those present in at least two series:
    first the ones in the primary series in its ranking order, then the others by name. Cells for
    a model absent from a series (or with undefined W) are NaN; the primary column of
    ``difference`` is 0 where W is defined.
    """

    primary: str
    series: tuple[str, ...]
    models: tuple[str, ...]
    weighted: FloatArray  # (M, S)
    difference: FloatArray  # (M, S)
    # Paired bootstrap interval of each difference, (M, S, 2), when every series was bootstrapped on
    # the same replicates (see compare_series); otherwise None.
    difference_ci: FloatArray | None = None

    def mean_difference(self) -> dict[str, float]:
        """Mean difference from the primary per series, over models with both values (NaN if none)."""
        result: dict[str, float] = {}
        for k, name in enumerate(self.series):
            column = self.difference[:, k]
            defined = column[~np.isnan(column)]
            result[name] = float(defined.mean()) if defined.size else math.nan
        return result


def compare_series(
    scores_by_series: Mapping[str, SeriesScores],
    primary: str | None = None,
    uncertainty_by_series: Mapping[str, SeriesUncertainty] | None = None,
) -> SeriesComparison:
    """Table 7 from per-series scores; ``primary`` defaults to the first series given.

    With ``uncertainty_by_series`` for every series, all drawn on the same replicates (same
    benchmark, samples and seed — the default when they come from one run), the differences get
    paired bootstrap intervals: W(series) − W(primary) is computed replicate by replicate and the
    interval is the difference ± t·SE of those replicate differences.
    """
    if not scores_by_series:
        raise ConfigError("no series to compare")
    names = list(scores_by_series)
    primary = names[0] if primary is None else primary
    if primary not in scores_by_series:
        raise ConfigError(f"primary series {primary!r} is not among the series: {', '.join(names)}")
    order = [primary, *(n for n in names if n != primary)]

    appearances: dict[str, int] = {}
    for scores in scores_by_series.values():
        for model in scores.models:
            appearances[model] = appearances.get(model, 0) + 1
    shared = {m for m, n in appearances.items() if n >= 2}
    in_primary = [m for m in scores_by_series[primary].ranking if m in shared]
    models = (*in_primary, *sorted(shared - set(in_primary)))

    weighted = np.full((len(models), len(order)), np.nan)
    for k, name in enumerate(order):
        scores = scores_by_series[name]
        index = {m: i for i, m in enumerate(scores.models)}
        for row, model in enumerate(models):
            if model in index:
                weighted[row, k] = scores.weighted[index[model]]
    difference = weighted - weighted[:, :1] if len(models) else np.zeros((0, len(order)))
    return SeriesComparison(
        primary=primary,
        series=tuple(order),
        models=models,
        weighted=weighted,
        difference=difference,
        difference_ci=_paired_intervals(order, models, difference, uncertainty_by_series),
    )


def _paired_intervals(
    order: list[str],
    models: tuple[str, ...],
    difference: FloatArray,
    uncertainty: Mapping[str, SeriesUncertainty] | None,
) -> FloatArray | None:
    """difference ± t·SE of the replicate differences, t at the design degrees of freedom of W
    (the same construction as every other interval, see kubejury.stats.uncertainty)."""
    if uncertainty is None or any(name not in uncertainty for name in order):
        return None
    runs = [uncertainty[name] for name in order]
    keys = {run.replicate_key for run in runs}
    if len(keys) != 1 or None in keys or any(run.weighted_replicates is None for run in runs):
        return None
    samples = runs[0].samples
    replicates = np.full((samples, len(models), len(order)), np.nan)
    for k, run in enumerate(runs):
        assert run.weighted_replicates is not None
        index = {m: i for i, m in enumerate(run.models)}
        for row, model in enumerate(models):
            if model in index:
                replicates[:, row, k] = run.weighted_replicates[:, index[model]]
    df = runs[0].df.weighted if runs[0].df is not None else float("inf")
    intervals = t_interval(difference, replicates - replicates[:, :, :1], df, runs[0].confidence)
    intervals[np.isnan(replicates).all(axis=0)] = np.nan
    return intervals
