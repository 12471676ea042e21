"""Model selection rules on a hand-built series modelled on the study's findings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from factories import score_cube
from kubejury.modelinfo import ModelInfo, parse_parameters
from kubejury.stats.cube import ScoreCube
from kubejury.stats.scoring import ScoringConfig, SeriesScores, score_series
from kubejury.stats.selection import pareto_frontier, select_models

NAN = math.nan

#            name      W     D     size   GPU GiB
TABLE = [
    ("big120", 9.30, 0.50, "120B", 80.0),
    ("m31", 9.28, 0.21, "31B", 24.0),
    ("m27", 9.25, 0.22, "27B", 24.0),
    ("moe26", 9.10, 0.26, "26B-A4B", 20.0),
    ("m9", 9.09, 0.23, "9B", 8.0),
    ("old78", 8.50, 1.17, "78B", 48.0),
    ("nemo12", 8.30, 1.14, "12B", None),
    ("tiny", 5.00, 0.10, "1B", None),
]
MODELS = tuple(row[0] for row in TABLE)
INFO = {
    name: ModelInfo(name, parameters=parse_parameters(size), parameters_label=size, gpu_memory_gib=mem)
    for name, _, _, size, mem in TABLE
}


def make_scores(
    weighted: list[float] | None = None,
    degradation: list[float] | None = None,
    domain_weighted: np.ndarray | None = None,
    domain_leaders: dict[str, str] | None = None,
) -> SeriesScores:
    w = np.array(weighted if weighted is not None else [row[1] for row in TABLE], dtype=np.float64)
    d = np.array(degradation if degradation is not None else [row[2] for row in TABLE], dtype=np.float64)
    n = len(w)
    models = MODELS[:n]
    order = sorted(range(n), key=lambda i: (-w[i] if math.isfinite(w[i]) else math.inf, models[i]))
    dw = domain_weighted if domain_weighted is not None else np.stack([w, w], axis=1)
    return SeriesScores(
        series="default",
        models=models,
        domains=("law", "med"),
        levels=(1,),
        question_scores=np.zeros((n, 1)),
        domain_level_scores=np.zeros((n, 2, 1)),
        level_scores=w[:, None],
        weighted=w,
        domain_weighted=dw,
        degradation=d,
        judge_sigma=np.full(n, 0.4),
        n_scored=np.ones(n, dtype=np.int64),
        n_unscored=np.zeros(n, dtype=np.int64),
        ranking=tuple(models[i] for i in order),
        domain_leaders=domain_leaders if domain_leaders is not None else {"law": models[0], "med": models[0]},
        tiers={m: "A" for m in models},
    )


def test_best_overall_and_robust_by_margin() -> None:
    result = select_models(make_scores(), INFO)
    assert result.best_overall == "big120"
    assert result.best_weighted == pytest.approx(9.30)
    # W >= 9.30 - 0.5: big120, m31, m27, moe26, m9 → lowest D is m31 (0.21).
    assert set(result.robust_candidates) == {"big120", "m31", "m27", "moe26", "m9"}
    assert result.robust_candidates[0] == "big120"
    assert result.most_robust == "m31"
    assert "0.5" in result.robust_rule
    # Over all models the uniformly weak "tiny" degrades least: reported, not recommended.
    assert result.lowest_degradation == "tiny"


def test_robust_within_the_leading_group() -> None:
    result = select_models(make_scores(), INFO, leading_group=["big120", "m27", "moe26", "unknown"])
    assert result.robust_candidates == ("big120", "m27", "moe26")
    assert result.most_robust == "m27"
    assert "leading group" in result.robust_rule


def test_robust_ties_prefer_higher_weighted() -> None:
    d = [row[2] for row in TABLE]
    d[0] = 0.21  # big120 ties m31 on D and has the higher W
    assert select_models(make_scores(degradation=d), INFO).most_robust == "big120"


def test_size_and_memory_frontiers() -> None:
    result = select_models(make_scores(), INFO)
    # nemo12 (12B, 8.3) is beaten by m9 (9B, 9.09); old78 by m31. tiny is the smallest.
    assert result.size_frontier == ("tiny", "m9", "moe26", "m27", "m31", "big120")
    # Memory known for six; m27 ties m31 on 24 GiB with a lower W → dominated.
    assert result.memory_frontier == ("m9", "moe26", "m31", "big120")
    facts = {f.model: f for f in result.models}
    assert facts["m9"].on_size_frontier and not facts["nemo12"].on_size_frontier
    assert not facts["tiny"].on_memory_frontier  # unknown memory
    assert facts["moe26"].parameters == pytest.approx(26e9)


def test_quality_to_size_pick() -> None:
    result = select_models(make_scores(), INFO)
    assert result.quality_to_size == "m9"  # 9.09 / 9 per billion, within 0.5 of the top
    assert {f.model: f for f in result.models}["m9"].weighted_per_billion == pytest.approx(9.09 / 9)
    tight = select_models(make_scores(), INFO, quality_margin=0.1)
    assert tight.quality_to_size == "m27"  # among big120, m31, m27: 9.25 / 27 is the best ratio
    assert select_models(make_scores()).quality_to_size is None  # no sizes known


def test_domain_leaders_with_lead() -> None:
    dw = np.stack([[row[1] for row in TABLE], [row[1] for row in TABLE]], axis=1)
    dw[4, 1] = 9.9  # m9 leads med by 9.9 - 9.30
    result = select_models(
        make_scores(domain_weighted=dw, domain_leaders={"law": "big120", "med": "m9"}), INFO
    )
    leaders = {leader.domain: leader for leader in result.domain_leaders}
    assert leaders["law"].model == "big120"
    assert leaders["law"].runner_up == "m31"
    assert leaders["law"].lead == pytest.approx(0.02)
    assert leaders["med"].model == "m9"
    assert leaders["med"].lead == pytest.approx(0.6)
    facts = {f.model: f for f in result.models}
    assert facts["m9"].domains_led == ("med",)


def test_models_in_ranking_order_with_ranks() -> None:
    result = select_models(make_scores(), INFO)
    assert [f.model for f in result.models] == list(make_scores().ranking)
    assert [f.rank for f in result.models] == list(range(1, len(MODELS) + 1))


def test_nan_weighted_models_never_selected() -> None:
    w = [NAN, 9.0, 8.0]
    result = select_models(make_scores(weighted=w, degradation=[0.0, 0.5, 0.3]), INFO)
    assert result.best_overall == "m31"
    assert "big120" not in result.robust_candidates
    assert "big120" not in result.size_frontier
    assert result.robust_candidates == ("m31",)  # m27's 8.0 is below 9.0 - 0.5
    assert result.most_robust == "m31"
    payload = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert payload["models"][-1]["weighted"] is None


def test_all_nan_series() -> None:
    result = select_models(make_scores(weighted=[NAN, NAN], degradation=[NAN, NAN]), INFO)
    assert result.best_overall is None and result.most_robust is None and result.quality_to_size is None
    json.dumps(result.to_dict(), allow_nan=False)


def test_pareto_frontier_equal_points_and_nan() -> None:
    mask = pareto_frontier(np.array([1.0, 1.0, 2.0, NAN, 0.5]), np.array([5.0, 5.0, 5.0, 9.0, NAN]))
    assert mask.tolist() == [True, True, False, False, False]


def test_pareto_frontier_against_brute_force() -> None:
    rng = np.random.default_rng(8)
    size = rng.integers(1, 8, size=40).astype(np.float64)
    quality = rng.integers(0, 6, size=40).astype(np.float64)
    expected = []
    for i in range(40):
        dominated = False
        for k in range(40):
            if (
                size[k] <= size[i]
                and quality[k] >= quality[i]
                and (size[k] < size[i] or quality[k] > quality[i])
            ):
                dominated = True
        expected.append(not dominated)
    assert pareto_frontier(size, quality).tolist() == expected


def make_cube() -> ScoreCube:
    # m31 was not asked q2 (no record, no scores) but the answers file still has its tokens.
    scores = np.array([[[9, 9], [8, 8]], [[7, 7], [NAN, NAN]]], dtype=np.float64)
    return score_cube(
        scores,
        models=("big120", "m31"),
        judges=("j1", "j2"),
        questions=(("q1", "law", 1), ("q2", "law", 1)),
        has_record=np.array([[True, True], [True, False]]),
        completion_tokens=np.array([[100.0, 300.0], [50.0, 999.0]]),
        latency_s=np.array([[1.0, NAN], [2.0, 4.0]]),
    )


def test_tokens_and_latency_per_answer() -> None:
    result = select_models(make_scores(weighted=[9.0, 8.0], degradation=[0.1, 0.2]), INFO, make_cube())
    facts = {f.model: f for f in result.models}
    assert facts["big120"].mean_completion_tokens == pytest.approx(200.0)
    assert facts["big120"].n_completion_tokens == 2
    assert facts["big120"].mean_latency_s == pytest.approx(1.0)
    assert facts["big120"].n_latency == 1
    # m31's second answer has no judgment record: its tokens are not counted.
    assert facts["m31"].mean_completion_tokens == pytest.approx(50.0)
    assert facts["m31"].mean_latency_s == pytest.approx(2.0)
    without = select_models(make_scores(weighted=[9.0, 8.0], degradation=[0.1, 0.2]), INFO)
    assert math.isnan(without.models[0].mean_completion_tokens)


def test_with_the_real_scorer() -> None:
    cube = make_cube()
    scores = score_series(cube, ScoringConfig(level_weights={1: 1.0}))
    result = select_models(scores, INFO, cube)
    assert result.best_overall == "big120"
    assert result.domain_leaders[0].model == "big120"
    assert result.domain_leaders[0].lead == pytest.approx(8.5 - 7.0)
    json.dumps(result.to_dict(), allow_nan=False)
