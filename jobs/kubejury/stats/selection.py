"""The study's model-selection recommendations, made explicit and computed from the data.

The study closes with advice: the best model overall, the leader of each domain, a model robust
to harder questions, and a "quality-to-size" pick for constrained deployments (its Qwen3.5-9B).
Here each of those is a documented rule over one series' scores so the recommendation can be
reproduced and argued with:

- **best overall**: the first model of the ranking (highest W) with a finite W.
- **domain leaders**: the scoring's domain leaders, with their per-domain W and lead over the
  runner-up.
- **most robust**: the lowest degradation D among the *robust candidates* — the leading group
  when one is given (e.g. the bootstrap's "not distinguishable from the top at 95%"), otherwise
  every model with W ≥ top W − ``robust_margin``. Ties: higher W, then name. The lowest D over all
  models is reported too, since a weak model that is uniformly weak also degrades little.
- **Pareto frontiers** of W against total parameters and against GPU memory (when known): a model
  is on a frontier when no other model is both smaller-or-equal and better-or-equal with at least
  one strictly so.
- **quality-to-size**: among models with a known size and W ≥ top W − ``quality_margin``, the
  highest W per billion total parameters (ties: higher W, then name).

Per model it also reports mean completion tokens and latency per answer when the cube carries
them (the cost side of the choice).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kubejury.modelinfo import ModelInfo
from kubejury.stats.agreement import json_value
from kubejury.stats.cube import BoolArray, FloatArray, ScoreCube
from kubejury.stats.scoring import SeriesScores

DEFAULT_ROBUST_MARGIN = 0.5
DEFAULT_QUALITY_MARGIN = 0.5


@dataclass(frozen=True)
class ModelFacts:
    """One model's scores, size and per-answer cost, as the selection saw them.

    ``rank`` is 1-based in the series ranking. ``mean_completion_tokens`` / ``mean_latency_s``
    average the answers (with a judgment record) whose value is known; ``n_*`` count them.
    ``weighted_per_billion`` is W divided by total parameters in billions.
    """

    model: str
    rank: int
    weighted: float
    degradation: float
    judge_sigma: float
    tier: str | None
    parameters: float | None
    parameters_label: str | None
    quantization: str | None
    gpu_memory_gib: float | None
    weighted_per_billion: float
    mean_completion_tokens: float
    n_completion_tokens: int
    mean_latency_s: float
    n_latency: int
    on_size_frontier: bool
    on_memory_frontier: bool
    domains_led: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "rank": self.rank,
            "weighted": json_value(self.weighted),
            "degradation": json_value(self.degradation),
            "judge_sigma": json_value(self.judge_sigma),
            "tier": self.tier,
            "parameters": json_value(self.parameters),
            "parameters_label": self.parameters_label,
            "quantization": self.quantization,
            "gpu_memory_gib": json_value(self.gpu_memory_gib),
            "weighted_per_billion": json_value(self.weighted_per_billion),
            "mean_completion_tokens": json_value(self.mean_completion_tokens),
            "n_completion_tokens": self.n_completion_tokens,
            "mean_latency_s": json_value(self.mean_latency_s),
            "n_latency": self.n_latency,
            "on_size_frontier": self.on_size_frontier,
            "on_memory_frontier": self.on_memory_frontier,
            "domains_led": list(self.domains_led),
        }


@dataclass(frozen=True)
class DomainLeader:
    """The leader of one domain, its per-domain W and its lead over the runner-up (NaN if alone)."""

    domain: str
    model: str
    weighted: float
    runner_up: str | None
    lead: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "model": self.model,
            "weighted": json_value(self.weighted),
            "runner_up": self.runner_up,
            "lead": json_value(self.lead),
        }


@dataclass(frozen=True)
class ModelSelection:
    """The explicit recommendation framework for one series (see the module docstring).

    Names are ``None`` when no model qualifies (e.g. no finite W, no known sizes). Frontiers list
    models by increasing size (then decreasing W); ``memory_frontier`` is empty when no model's
    GPU memory is known. ``robust_rule`` and ``quality_rule`` state the rule applied in words.
    """

    series: str
    best_overall: str | None
    best_weighted: float
    domain_leaders: tuple[DomainLeader, ...]
    robust_candidates: tuple[str, ...]
    robust_rule: str
    most_robust: str | None
    lowest_degradation: str | None
    size_frontier: tuple[str, ...]
    memory_frontier: tuple[str, ...]
    quality_margin: float
    quality_rule: str
    quality_to_size: str | None
    models: tuple[ModelFacts, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "best_overall": self.best_overall,
            "best_weighted": json_value(self.best_weighted),
            "domain_leaders": {leader.domain: leader.to_dict() for leader in self.domain_leaders},
            "robust_candidates": list(self.robust_candidates),
            "robust_rule": self.robust_rule,
            "most_robust": self.most_robust,
            "lowest_degradation": self.lowest_degradation,
            "size_frontier": list(self.size_frontier),
            "memory_frontier": list(self.memory_frontier),
            "quality_margin": self.quality_margin,
            "quality_rule": self.quality_rule,
            "quality_to_size": self.quality_to_size,
            "models": [facts.to_dict() for facts in self.models],
        }


def pareto_frontier(size: FloatArray, quality: FloatArray) -> BoolArray:
    """Which points are not dominated: no other point has size ≤ and quality ≥ with one strict.

    Points with a NaN coordinate are never on the frontier and never dominate.
    """
    size = np.asarray(size, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    valid = np.isfinite(size) & np.isfinite(quality)
    # dominated_by[i, k]: point k dominates point i.
    smaller_or_equal = size[None, :] <= size[:, None]
    better_or_equal = quality[None, :] >= quality[:, None]
    strict = (size[None, :] < size[:, None]) | (quality[None, :] > quality[:, None])
    dominated_by = smaller_or_equal & better_or_equal & strict & valid[None, :]
    result: BoolArray = valid & ~dominated_by.any(axis=1)
    return result


def _best(
    candidates: Sequence[int], key_values: FloatArray, weighted: FloatArray, models: Sequence[str]
) -> int | None:
    """Index with the lowest ``key_values`` (ties: higher W, then name) among finite candidates."""
    finite = [i for i in candidates if math.isfinite(float(key_values[i]))]
    if not finite:
        return None
    return min(finite, key=lambda i: (float(key_values[i]), -float(weighted[i]), models[i]))


def _per_answer_mean(values: FloatArray | None, has_record: BoolArray) -> tuple[FloatArray, FloatArray]:
    n_models = has_record.shape[0]
    if values is None:
        return np.full(n_models, np.nan), np.zeros(n_models)
    known = has_record & np.isfinite(values)
    counts = known.sum(axis=1).astype(np.float64)
    sums = np.where(known, values, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)
    return means, counts


def _frontier_order(
    mask: BoolArray, size: FloatArray, weighted: FloatArray, models: Sequence[str]
) -> tuple[str, ...]:
    chosen = [i for i in range(len(models)) if mask[i]]
    chosen.sort(key=lambda i: (float(size[i]), -float(weighted[i]), models[i]))
    return tuple(models[i] for i in chosen)


def select_models(
    scores: SeriesScores,
    model_info: Mapping[str, ModelInfo] | None = None,
    cube: ScoreCube | None = None,
    *,
    leading_group: Sequence[str] | None = None,
    robust_margin: float = DEFAULT_ROBUST_MARGIN,
    quality_margin: float = DEFAULT_QUALITY_MARGIN,
) -> ModelSelection:
    """Apply the selection rules of the module docstring to one series.

    ``model_info`` gives sizes and GPU memory by model name; ``cube`` (the same series) gives the
    per-answer tokens and latency when it carries them; ``leading_group`` (from the bootstrap)
    defines the robust candidates when given and non-empty.
    """
    models = scores.models
    info = dict(model_info or {})
    weighted = np.asarray(scores.weighted, dtype=np.float64)
    degradation = np.asarray(scores.degradation, dtype=np.float64)
    n_models = len(models)
    finite_w = np.isfinite(weighted)

    ranked = [m for m in scores.ranking if m in models]
    index = {model: i for i, model in enumerate(models)}
    best = next((m for m in ranked if finite_w[index[m]]), None)
    top = float(weighted[index[best]]) if best is not None else math.nan

    # Robust candidates.
    group = [m for m in (leading_group or ()) if m in index]
    if group:
        candidates = [index[m] for m in group]
        robust_rule = "lowest degradation D among the leading group (models not distinguishable from the top)"
    else:
        candidates = [i for i in range(n_models) if finite_w[i] and weighted[i] >= top - robust_margin]
        robust_rule = f"lowest degradation D among models with W >= top W - {robust_margin:g}"
    candidates.sort(key=lambda i: (-float(weighted[i]) if finite_w[i] else math.inf, models[i]))
    most_robust = _best(candidates, degradation, weighted, models)
    lowest_d = _best([i for i in range(n_models) if finite_w[i]], degradation, weighted, models)

    # Sizes, frontiers, quality-to-size.
    parameters = np.array(
        [info[m].parameters if m in info and info[m].parameters is not None else np.nan for m in models],
        dtype=np.float64,
    )
    memory = np.array(
        [
            info[m].gpu_memory_gib if m in info and info[m].gpu_memory_gib is not None else np.nan
            for m in models
        ],
        dtype=np.float64,
    )
    size_mask = pareto_frontier(parameters, weighted)
    memory_mask = pareto_frontier(memory, weighted)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_billion = weighted / (parameters / 1e9)
    near_top = [
        i
        for i in range(n_models)
        if finite_w[i] and np.isfinite(parameters[i]) and weighted[i] >= top - quality_margin
    ]
    quality_pick = _best(near_top, -per_billion, weighted, models)
    quality_rule = (
        f"highest W per billion parameters among models with a known size and W >= top W - {quality_margin:g}"
    )

    # Domain leaders with their lead.
    domain_weighted = np.asarray(scores.domain_weighted, dtype=np.float64)
    leaders: list[DomainLeader] = []
    led: dict[str, list[str]] = {}
    for d, domain in enumerate(scores.domains):
        leader = scores.domain_leaders.get(domain)
        if leader is None or leader not in index:
            continue
        column = domain_weighted[:, d]
        others = [i for i in range(n_models) if i != index[leader] and np.isfinite(column[i])]
        runner = (
            max(others, key=lambda i: (float(column[i]), float(weighted[i]) if finite_w[i] else -math.inf))
            if others
            else None
        )
        lead = float(column[index[leader]] - column[runner]) if runner is not None else math.nan
        leaders.append(
            DomainLeader(
                domain,
                leader,
                float(column[index[leader]]),
                models[runner] if runner is not None else None,
                lead,
            )
        )
        led.setdefault(leader, []).append(domain)

    # Per-answer cost.
    if cube is not None:
        cube_index = {model: i for i, model in enumerate(cube.models)}
        rows = [cube_index.get(m, -1) for m in models]
        tokens_mean, tokens_n = _per_answer_mean(cube.completion_tokens, cube.has_record)
        latency_mean, latency_n = _per_answer_mean(cube.latency_s, cube.has_record)

        def pick(values: FloatArray, fill: float) -> FloatArray:
            return np.array([values[r] if r >= 0 else fill for r in rows], dtype=np.float64)

        tokens_mean, tokens_n = pick(tokens_mean, np.nan), pick(tokens_n, 0.0)
        latency_mean, latency_n = pick(latency_mean, np.nan), pick(latency_n, 0.0)
    else:
        tokens_mean, tokens_n = np.full(n_models, np.nan), np.zeros(n_models)
        latency_mean, latency_n = np.full(n_models, np.nan), np.zeros(n_models)

    rank_of = {model: r + 1 for r, model in enumerate(ranked)}
    facts = []
    for model in sorted(models, key=lambda m: (rank_of.get(m, n_models + 1), m)):
        i = index[model]
        model_info_i = info.get(model)
        facts.append(
            ModelFacts(
                model=model,
                rank=rank_of.get(model, n_models),
                weighted=float(weighted[i]),
                degradation=float(degradation[i]),
                judge_sigma=float(scores.judge_sigma[i]),
                tier=scores.tiers.get(model),
                parameters=model_info_i.parameters if model_info_i else None,
                parameters_label=model_info_i.parameters_label if model_info_i else None,
                quantization=model_info_i.quantization if model_info_i else None,
                gpu_memory_gib=model_info_i.gpu_memory_gib if model_info_i else None,
                weighted_per_billion=float(per_billion[i]),
                mean_completion_tokens=float(tokens_mean[i]),
                n_completion_tokens=int(tokens_n[i]),
                mean_latency_s=float(latency_mean[i]),
                n_latency=int(latency_n[i]),
                on_size_frontier=bool(size_mask[i]),
                on_memory_frontier=bool(memory_mask[i]),
                domains_led=tuple(led.get(model, ())),
            )
        )

    return ModelSelection(
        series=scores.series,
        best_overall=best,
        best_weighted=top,
        domain_leaders=tuple(leaders),
        robust_candidates=tuple(models[i] for i in candidates),
        robust_rule=robust_rule,
        most_robust=models[most_robust] if most_robust is not None else None,
        lowest_degradation=models[lowest_d] if lowest_d is not None else None,
        size_frontier=_frontier_order(size_mask, parameters, weighted, models),
        memory_frontier=_frontier_order(memory_mask, memory, weighted, models),
        quality_margin=quality_margin,
        quality_rule=quality_rule,
        quality_to_size=models[quality_pick] if quality_pick is not None else None,
        models=tuple(facts),
    )
