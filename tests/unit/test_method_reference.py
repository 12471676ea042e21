"""An independent reference implementation of the study's method, compared with ``kubejury report``.

Issue 2 says "an independent implementation will be compared with yours". This module is that
implementation, written from the issue's wording (steps 1-9 of "The study's method") without
reading ``kubejury.stats.scoring``, ``kubejury.stats.uncertainty`` or ``kubejury.report.aggregate``. It works on
raw judgment records (dicts) and a benchmark (id, domain, level) in plain Python with exact
rational arithmetic (``fractions.Fraction``), so exact ties are exact, and compares its results
with the public entry point, ``kubejury report --format json``, on hand-made awkward fixtures and
on hypothesis-generated record sets.

Readings of the issue where it is ambiguous (each is checked against the product below):

- *Levels of a series*: the levels with at least one judgment record in that series (any model,
  null scores included), not every level of the benchmark. Weights are required for exactly these.
- *Score(m, d) at a level where m has no scored question*: undefined (``null``).
- *W(m) when some Score(m, d) is undefined*: the weighted mean over the levels where it is
  defined, normalised by the sum of *their* weights (as step 3 averages over the domains that
  have a score). Per-domain W likewise over the levels where S_i(m, d) is defined.
- *D(m)*: "lowest level" and "highest level" are those of the series, not of the model: if m has
  no Score at either, D(m) is undefined (comparing level 1 with level 2 for one model and with
  level 3 for the others would not be the same quantity).
- *σ(m)*: over every question of m in the series (all domains, levels) with ≥ 2 non-null scores;
  undefined when there is none.
- *Ranking*: W descending, ties by name ascending (docs/report-schema.md); a model whose W is
  undefined (every answer unscored) goes last.
- *Domain leaders*: only among models with a defined per-domain W; ties by higher W, then name
  ascending. Only domains where some model has a score have a leader.
- *Series comparison*: the primary series is the first to appear in the judgment records;
  delta = W(series) − W(primary), undefined when either is.

docs/method.md (read only after this module was written) settles each of these cases the same
way, and the product agrees with the reference on all of them. The one disagreement this file found
(ties decided on values rounded to 9 decimals, so exactly equal values whose doubles straddle a
rounding edge were not a tie) is fixed; the two tests at the end keep it fixed.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubejury.cli import main

Record = dict[str, Any]
Question = tuple[str, str, int]  # id, domain, level
Number = Fraction | float

DEFAULT_WEIGHTS: dict[int, Fraction] = {1: Fraction(3, 5), 2: Fraction(4, 5), 3: Fraction(1)}
TOLERANCE = 1e-3  # report.json rounds to 4 decimals


# --------------------------------------------------------------------------------------------------
# The reference implementation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefModel:
    levels: dict[int, Fraction | None]  # Score(m, d) for every level of the series
    weighted: Fraction | None  # W(m)
    degradation: Fraction | None  # D(m)
    judge_sigma: float | None  # σ(m)
    n_scored: int
    n_unscored: int
    domain_levels: dict[str, dict[int, Fraction]]  # S_i(m, d), only where defined
    domain_weighted: dict[str, Fraction]  # per-domain W, only where defined


@dataclass(frozen=True)
class RefSeries:
    levels: list[int]
    models: dict[str, RefModel]
    ranking: list[str]
    domain_leaders: dict[str, str]


@dataclass(frozen=True)
class RefReport:
    primary: str
    series: dict[str, RefSeries]  # in order of first appearance
    # model -> series -> (W, W - W(primary)), for models present in at least two series
    comparison: dict[str, dict[str, tuple[Fraction | None, Fraction | None]]]


def _mean(values: Sequence[Fraction]) -> Fraction:
    return sum(values, Fraction(0)) / len(values)


def _weighted(per_level: Mapping[int, Fraction | None], weights: Mapping[int, Fraction]) -> Fraction | None:
    defined = {level: score for level, score in per_level.items() if score is not None}
    total = sum((weights[level] for level in defined), Fraction(0))
    if not defined or total == 0:
        return None
    return sum((weights[level] * score for level, score in defined.items()), Fraction(0)) / total


def _population_std(values: Sequence[Fraction]) -> float:
    mean = _mean(values)
    variance = sum(((v - mean) ** 2 for v in values), Fraction(0)) / len(values)
    return math.sqrt(variance)


def _score_model(
    answers: Mapping[str, list[Fraction | None]],
    bench: Mapping[str, tuple[str, int]],
    levels: Sequence[int],
    weights: Mapping[int, Fraction],
) -> RefModel:
    # Step 1: S(q) over the non-null scores; all-null questions are unscored.
    s_of_q: dict[str, Fraction] = {}
    n_unscored = 0
    spreads: list[float] = []
    for qid, scores in answers.items():
        present = [s for s in scores if s is not None]
        if not present:
            n_unscored += 1
            continue
        s_of_q[qid] = _mean(present)
        if len(present) >= 2:  # step 5
            spreads.append(_population_std(present))
    # Step 2: S_i(m, d) per (domain, level) cell.
    cells: dict[tuple[str, int], list[Fraction]] = {}
    for qid, s in s_of_q.items():
        cells.setdefault(bench[qid], []).append(s)
    domain_levels: dict[str, dict[int, Fraction]] = {}
    for (domain, level), values in cells.items():
        domain_levels.setdefault(domain, {})[level] = _mean(values)
    # Step 3: Score(m, d) = mean over the domains that have a score at d.
    level_scores: dict[int, Fraction | None] = {}
    for level in levels:
        at_level = [per[level] for per in domain_levels.values() if level in per]
        level_scores[level] = _mean(at_level) if at_level else None
    # Step 4: D between the series' lowest and highest level.
    low, high = level_scores[min(levels)], level_scores[max(levels)]
    degradation = low - high if low is not None and high is not None else None
    # Steps 6, 7.
    domain_weighted: dict[str, Fraction] = {}
    for domain, per_level in domain_levels.items():
        w = _weighted(dict(per_level), weights)
        if w is not None:
            domain_weighted[domain] = w
    return RefModel(
        levels=level_scores,
        weighted=_weighted(level_scores, weights),
        degradation=degradation,
        judge_sigma=sum(spreads) / len(spreads) if spreads else None,
        n_scored=len(s_of_q),
        n_unscored=n_unscored,
        domain_levels=domain_levels,
        domain_weighted=domain_weighted,
    )


def _rank_key(name: str, w: Fraction | None) -> tuple[bool, Fraction, str]:
    return (w is None, -(w if w is not None else Fraction(0)), name)


def reference(
    records: Iterable[Record],
    benchmark: Sequence[Question],
    weights: Mapping[int, Fraction] = DEFAULT_WEIGHTS,
    primary: str | None = None,
) -> RefReport:
    """Steps 1-9 of issue 2 on raw judgment records."""
    bench = {qid: (domain, level) for qid, domain, level in benchmark}
    domain_order = list(dict.fromkeys(domain for _, domain, _ in benchmark))
    # series -> model -> question -> scores (None = null)
    grouped: dict[str, dict[str, dict[str, list[Fraction | None]]]] = {}
    for record in records:
        series = record.get("series") or "default"
        score = record.get("score")  # absent = null
        # The decimal the JSON file says (json.dumps writes repr: 7.3 → "7.3"), not the binary double:
        # scores that tie in decimal tie exactly here.
        value = None if score is None else Fraction(repr(score))
        grouped.setdefault(series, {}).setdefault(record["model"], {}).setdefault(
            record["question_id"], []
        ).append(value)
    result: dict[str, RefSeries] = {}
    for series, by_model in grouped.items():
        levels = sorted({bench[qid][1] for answers in by_model.values() for qid in answers})
        missing = [level for level in levels if level not in weights]
        if missing:
            raise ValueError(f"no weight for levels {missing}")
        models = {name: _score_model(answers, bench, levels, weights) for name, answers in by_model.items()}
        # Step 8: ranking by W descending (ties: name).
        ranking = sorted(models, key=lambda name: _rank_key(name, models[name].weighted))
        # Step 7: leader = highest per-domain W, ties: higher W, then name.
        leaders: dict[str, str] = {}
        for domain in domain_order:
            candidates = [name for name in models if domain in models[name].domain_weighted]
            if candidates:
                leaders[domain] = min(
                    candidates,
                    key=lambda name: (
                        -models[name].domain_weighted[domain],
                        _rank_key(name, models[name].weighted),
                    ),
                )
        result[series] = RefSeries(levels, models, ranking, leaders)
    primary_series = primary if primary is not None else next(iter(result))
    # Step 9: W per series and the difference from the primary series.
    comparison: dict[str, dict[str, tuple[Fraction | None, Fraction | None]]] = {}
    all_models = dict.fromkeys(name for s in result.values() for name in s.models)
    for name in all_models:
        present = [s for s in result if name in result[s].models]
        if len(present) < 2:
            continue
        base = result[primary_series].models.get(name)
        base_w = base.weighted if base is not None else None
        row: dict[str, tuple[Fraction | None, Fraction | None]] = {}
        for series, scored in result.items():
            model = scored.models.get(name)
            w = model.weighted if model is not None else None
            row[series] = (w, w - base_w if w is not None and base_w is not None else None)
        comparison[name] = row
    return RefReport(primary_series, result, comparison)


# --------------------------------------------------------------------------------------------------
# Running the product and comparing
# --------------------------------------------------------------------------------------------------


def product_report(
    records: Sequence[Record],
    benchmark: Sequence[Question],
    weights: Mapping[int, Fraction] | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """``kubejury report --format json --bootstrap 0`` on these records, through the CLI entry point."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bench_file, judgments_file = root / "bench.jsonl", root / "judgments.jsonl"
        bench_file.write_text(
            "".join(
                json.dumps({"id": q, "domain": d, "level": lv, "question": f"Q {q}?", "reference": "R."})
                + "\n"
                for q, d, lv in benchmark
            ),
            encoding="utf-8",
        )
        judgments_file.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        argv = ["report", "--benchmark", str(bench_file), "--judgments", str(judgments_file)]
        argv += ["--format", "json", "--bootstrap", "0", *extra]
        if weights is not None:
            argv += ["--weights", ",".join(f"{lv}={float(w)!r}" for lv, w in sorted(weights.items()))]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        assert code == 0, err.getvalue()
        document: dict[str, Any] = json.loads(out.getvalue())
        return document


def _differs(expected: Number | None, actual: Any) -> bool:
    if expected is None or actual is None:
        return expected is not actual
    return abs(float(expected) - float(actual)) > TOLERANCE


def discrepancies(ref: RefReport, doc: Mapping[str, Any]) -> list[str]:
    """Every place where report.json disagrees with the reference (empty = agreement)."""
    found: list[str] = []

    def check(path: str, expected: Number | None, actual: Any) -> None:
        if _differs(expected, actual):
            shown = None if expected is None else float(expected)
            found.append(f"{path}: reference {shown}, product {actual}")

    if set(doc["series"]) != set(ref.series):
        found.append(f"series: reference {sorted(ref.series)}, product {sorted(doc['series'])}")
    for series, expected in ref.series.items():
        got = doc["series"].get(series)
        if got is None:
            continue
        if set(got["models"]) != set(expected.models):
            found.append(
                f"{series}.models: reference {sorted(expected.models)}, product {sorted(got['models'])}"
            )
        for name, model in expected.models.items():
            if name not in got["models"]:
                continue
            actual = got["models"][name]
            at = f"series.{series}.models.{name}"
            for level, score in model.levels.items():
                check(f"{at}.levels.{level}", score, actual["levels"].get(str(level)))
            for level_key, value in actual["levels"].items():
                if int(level_key) not in model.levels and value is not None:
                    found.append(f"{at}.levels.{level_key}: not a level of the series, product {value}")
            check(f"{at}.weighted", model.weighted, actual["weighted"])
            check(f"{at}.degradation", model.degradation, actual["degradation"])
            check(f"{at}.judge_sigma", model.judge_sigma, actual["judge_sigma"])
            for key in ("n_scored", "n_unscored"):
                if getattr(model, key) != actual[key]:
                    found.append(f"{at}.{key}: reference {getattr(model, key)}, product {actual[key]}")
            domains = actual.get("domains") or {}
            for domain in set(domains) | set(model.domain_weighted):
                got_domain = domains.get(domain) or {}
                check(
                    f"{at}.domains.{domain}.weighted",
                    model.domain_weighted.get(domain),
                    got_domain.get("weighted"),
                )
                got_levels = got_domain.get("levels") or {}
                per_level = model.domain_levels.get(domain, {})
                for level in set(per_level) | {int(k) for k in got_levels}:
                    check(
                        f"{at}.domains.{domain}.levels.{level}",
                        per_level.get(level),
                        got_levels.get(str(level)),
                    )
        if got["ranking"] != expected.ranking:
            found.append(f"series.{series}.ranking: reference {expected.ranking}, product {got['ranking']}")
        leaders = {d: m for d, m in (got.get("domain_leaders") or {}).items() if m is not None}
        if leaders != expected.domain_leaders:
            found.append(
                f"series.{series}.domain_leaders: reference {expected.domain_leaders}, product {leaders}"
            )
    comparison = doc.get("series_comparison") or {}
    if comparison.get("primary") != ref.primary:
        found.append(
            f"series_comparison.primary: reference {ref.primary}, product {comparison.get('primary')}"
        )
    if doc.get("primary_series") != ref.primary:
        found.append(f"primary_series: reference {ref.primary}, product {doc.get('primary_series')}")
    got_models = comparison.get("models") or {}
    if set(got_models) != set(ref.comparison):
        found.append(
            f"series_comparison.models: reference {sorted(ref.comparison)}, product {sorted(got_models)}"
        )
    for name, row in ref.comparison.items():
        for series, (w, delta) in row.items():
            cell = (got_models.get(name) or {}).get(series) or {}
            check(f"series_comparison.models.{name}.{series}.weighted", w, cell.get("weighted"))
            check(f"series_comparison.models.{name}.{series}.delta", delta, cell.get("delta"))
    # Not in the minimum keys but documented (report-schema.md): the mean difference per series.
    for series in ref.series:
        if series == ref.primary:
            continue
        deltas = [delta for row in ref.comparison.values() if (delta := row[series][1]) is not None]
        expected_mean = _mean(deltas) if deltas else None
        check(
            f"series_comparison.mean_delta.{series}",
            expected_mean,
            (comparison.get("mean_delta") or {}).get(series),
        )
    return found


def assert_agrees(
    records: Sequence[Record],
    benchmark: Sequence[Question],
    weights: Mapping[int, Fraction] | None = None,
) -> dict[str, Any]:
    ref = reference(records, benchmark, weights if weights is not None else DEFAULT_WEIGHTS)
    doc = product_report(records, benchmark, weights)
    problems = discrepancies(ref, doc)
    assert not problems, "\n".join(problems)
    return doc


def judgment(qid: str, model: str, judge: str, score: float | None, series: str | None = None) -> Record:
    """A judgment record; ``series=None`` leaves the key out (it then means "default")."""
    record: Record = {"question_id": qid, "model": model, "judge": judge, "score": score}
    if series is not None:
        record["series"] = series
    return record


# --------------------------------------------------------------------------------------------------
# The reference itself, against numbers computed by hand
# --------------------------------------------------------------------------------------------------

HAND_BENCH: list[Question] = [
    ("a1", "A", 1),
    ("a1b", "A", 1),
    ("a3", "A", 3),
    ("b1", "B", 1),
    ("b3", "B", 3),
]


def test_reference_matches_hand_computation() -> None:
    records = [
        judgment("a1", "m", "j1", 8),
        judgment("a1", "m", "j2", 6),  # S = 7, σ = 1
        judgment("a1b", "m", "j1", 9),  # one judge only: S = 9, no σ
        judgment("a1b", "m", "j2", None),
        judgment("a3", "m", "j1", 4),
        judgment("a3", "m", "j2", 4),  # S = 4, σ = 0
        judgment("b1", "m", "j1", 10),
        judgment("b3", "m", "j1", None),  # unscored
        judgment("b3", "m", "j2", None),
    ]
    ref = reference(records, HAND_BENCH)
    m = ref.series["default"].models["m"]
    # S_A(1) = (7 + 9)/2 = 8, S_B(1) = 10, Score(1) = 9; S_A(3) = 4, B has none at 3: Score(3) = 4.
    assert m.domain_levels == {"A": {1: 8, 3: 4}, "B": {1: 10}}
    assert m.levels == {1: 9, 3: 4}
    assert m.degradation == 5
    assert m.weighted == (Fraction(3, 5) * 9 + 4) / (Fraction(3, 5) + 1) == Fraction(47, 8)
    assert m.judge_sigma == pytest.approx(0.5)
    assert (m.n_scored, m.n_unscored) == (4, 1)
    assert m.domain_weighted == {"A": Fraction(11, 2), "B": 10}  # (0.6·8 + 4)/1.6; B: level 1 only
    assert ref.series["default"].ranking == ["m"] and ref.series["default"].domain_leaders == {
        "A": "m",
        "B": "m",
    }


def test_product_on_the_hand_fixture() -> None:
    records = [
        judgment("a1", "m", "j1", 8),
        judgment("a1", "m", "j2", 6),
        judgment("a1b", "m", "j1", 9),
        judgment("a1b", "m", "j2", None),
        judgment("a3", "m", "j1", 4),
        judgment("a3", "m", "j2", 4),
        judgment("b1", "m", "j1", 10),
        judgment("b3", "m", "j1", None),
        judgment("b3", "m", "j2", None),
    ]
    assert_agrees(records, HAND_BENCH)


# --------------------------------------------------------------------------------------------------
# (a) Hand-made awkward fixtures, compared with the product
# --------------------------------------------------------------------------------------------------

# Unequal domain sizes, and "ops" has no level-2 question at all in the benchmark.
NASTY_BENCH: list[Question] = [
    *[(f"law-1-{k}", "law", 1) for k in range(3)],
    *[(f"law-2-{k}", "law", 2) for k in range(2)],
    ("law-3-0", "law", 3),
    ("med-1-0", "med", 1),
    ("med-2-0", "med", 2),
    *[(f"med-3-{k}", "med", 3) for k in range(2)],
    *[(f"ops-1-{k}", "ops", 1) for k in range(2)],
    ("ops-3-0", "ops", 3),
]
JUDGES = ("j-one", "j-two", "j-three")


def panel(
    model: str,
    scores: Mapping[str, Sequence[float | None]],
    series: str | None = None,
    judges: Sequence[str] = JUDGES,
) -> list[Record]:
    """Records for ``model``: question -> one score per judge (``None`` = null; a shorter list =
    the remaining judges wrote no record at all)."""
    return [
        judgment(qid, model, judge, score, series)
        for qid, row in scores.items()
        for judge, score in zip(judges, row, strict=False)
    ]


def _full(model_shift: float, series: str | None = None, model: str = "alpha") -> list[Record]:
    """Every question of NASTY_BENCH scored by all three judges, a level-dependent pattern."""
    scores: dict[str, Sequence[float | None]] = {}
    for k, (qid, _, level) in enumerate(NASTY_BENCH):
        base = 10 - level - (k % 3) * 0.5 - model_shift
        scores[qid] = (base, max(base - 1, 0), min(base + 0.5, 10))
    return panel(model, scores, series)


def test_missing_judges_and_unequal_domain_sizes() -> None:
    records = [
        *_full(0.0),
        *panel(
            "beta",
            {
                "law-1-0": (9, 7),  # third judge never wrote a record
                "law-1-1": (8,),  # one judge only: counts in S, not in σ
                "law-1-2": (None, 6, 5),  # a null among the scores
                "law-2-0": (7, 7, 7),
                "law-2-1": (3, None, None),
                "law-3-0": (2, 4, 9),
                "med-1-0": (10, 9.5),
                "med-2-0": (6,),
                "med-3-0": (5, 5),
                "med-3-1": (1, 2, 3),
                "ops-1-0": (8, 8, 8),
                "ops-1-1": (7,),
                "ops-3-0": (4, None, 6),
            },
        ),
    ]
    del records[-1]["score"]  # an absent score is a null one
    assert_agrees(records, NASTY_BENCH)


def test_domain_missing_a_level_for_one_model() -> None:
    # beta answered nothing of med at level 2: Score(beta, 2) is then law's level-2 mean alone.
    beta = [r for r in _full(1.5, model="beta") if r["question_id"] != "med-2-0"]
    records = _full(0.0) + beta
    doc = assert_agrees(records, NASTY_BENCH)
    assert doc["series"]["default"]["models"]["beta"]["domains"]["med"]["levels"].get("2") is None


def test_all_null_question_is_unscored_and_left_out_of_every_mean() -> None:
    beta = _full(1.0, model="beta")
    for record in beta:
        if record["question_id"] in ("law-1-0", "med-2-0"):  # med-2-0 is med's only level-2 question
            record["score"] = None
    doc = assert_agrees(_full(0.0) + beta, NASTY_BENCH)
    assert doc["series"]["default"]["models"]["beta"]["n_unscored"] == 2


def test_model_without_any_level_3_answer() -> None:
    gamma = [r for r in _full(0.5, model="gamma") if not r["question_id"].endswith("-3-0")]
    gamma = [r for r in gamma if r["question_id"] != "med-3-1"]
    assert_agrees(_full(0.0) + gamma, NASTY_BENCH)


def test_model_whose_every_answer_is_unscored() -> None:
    nulls = [{**r, "score": None} for r in _full(0.0, model="zero")]
    assert_agrees(_full(0.0) + nulls, NASTY_BENCH)


def test_no_level_3_in_the_series_at_all() -> None:
    # Nobody answered level 3 in this series: the series' levels are 1 and 2, and D spans them.
    records = [r for r in _full(0.0) + _full(2.0, model="beta") if "-3-" not in r["question_id"]]
    assert_agrees(records, NASTY_BENCH)


def test_several_series_and_records_without_series() -> None:
    records = [
        *_full(0.0),  # no "series" key: the default series, and the first to appear (primary)
        *_full(1.0, model="beta"),
        *_full(0.5, series="hot"),
        *_full(0.25, series="hot", model="beta"),
        *_full(2.0, series="hot", model="only-hot"),  # one series only: not in the comparison
        *_full(3.0, series="cold", model="beta"),  # in two series, but not in every one
        *_full(1.0, series="cold", model="gamma"),
        *_full(1.5, series="hot", model="gamma"),  # in two series, neither the primary
    ]
    doc = assert_agrees(records, NASTY_BENCH)
    assert doc["primary_series"] == "default"


def test_explicit_default_series_is_the_same_as_an_absent_one() -> None:
    records = _full(0.0) + _full(1.0, series="default", model="beta")
    doc = assert_agrees(records, NASTY_BENCH)
    assert set(doc["series"]) == {"default"}


def test_explicit_primary_series() -> None:
    records = [
        *_full(0.0),
        *_full(1.0, model="beta"),
        *_full(0.5, series="hot"),
        *_full(2.0, series="hot", model="beta"),
    ]
    ref = reference(records, NASTY_BENCH, primary="hot")
    doc = product_report(records, NASTY_BENCH, extra=["--primary-series", "hot"])
    problems = discrepancies(ref, doc)
    assert not problems, "\n".join(problems)


def test_null_series_means_default() -> None:
    records = _full(0.0) + [{**r, "series": None} for r in _full(1.0, model="beta")]
    doc = assert_agrees(records, NASTY_BENCH)
    assert set(doc["series"]) == {"default"}


def test_levels_other_than_1_to_3() -> None:
    # Any positive integer level works when it has a weight; D spans the series' lowest (2) and highest (5).
    bench: list[Question] = [
        ("a-2", "a", 2),
        ("a-5", "a", 5),
        ("b-2", "b", 2),
        ("b-5", "b", 5),
        ("b-7", "b", 7),
    ]
    scores = {"a-2": (9, 8), "a-5": (4, 5), "b-2": (7,), "b-5": (None, 3)}
    records = panel("alpha", scores) + panel("beta", {**scores, "a-5": (9, 9)})
    assert_agrees(records, bench, {2: Fraction(1), 5: Fraction(3), 7: Fraction(1)})


TIE_BENCH: list[Question] = [("x-1", "x", 1), ("x-3", "x", 3), ("y-1", "y", 1), ("y-3", "y", 3)]


def test_tie_in_w_is_ranked_by_name() -> None:
    same = {"x-1": (9, 8), "x-3": (7, 6), "y-1": (8, 8), "y-3": (5, 6)}
    records = [*panel("zulu", same), *panel("alpha", same), *panel("mike", {**same, "y-3": (1, 1)})]
    doc = assert_agrees(records, TIE_BENCH)
    assert doc["series"]["default"]["ranking"] == ["alpha", "zulu", "mike"]


def test_domain_tie_goes_to_the_higher_w_then_to_the_name() -> None:
    # In domain x all three models have the same per-domain W; "zulu" has the highest overall W,
    # "alpha" and "bravo" tie on W too. In domain y "alpha" and "bravo" tie and are ahead.
    x = {"x-1": (9, 9), "x-3": (6, 6)}
    records = [
        *panel("zulu", {**x, "y-1": (10, 10), "y-3": (10, 10)}),
        *panel("bravo", {**x, "y-1": (9, 9), "y-3": (9, 9)}),
        *panel("alpha", {**x, "y-1": (9, 9), "y-3": (9, 9)}),
        *panel("echo", {"x-1": (9,), "x-3": (6, None), "y-1": (1, 2)}),
    ]
    doc = assert_agrees(records, TIE_BENCH)
    assert doc["series"]["default"]["domain_leaders"]["x"] == "zulu"
    records = [r for r in records if not (r["model"] == "zulu" and r["question_id"].startswith("y"))]
    doc = assert_agrees(records, TIE_BENCH)
    assert doc["series"]["default"]["domain_leaders"] == {"x": "alpha", "y": "alpha"}


# Two ways to reach exactly 7.0000000055: one judge pair agreeing on it, and a pair 6.0000000055 /
# 8.0000000055 whose mean it is. In doubles the second mean comes out one ulp above the first
# (7.000000005500001), and rounding to 9 places sends the two to 7.000000005 and 7.000000006.
EXACT = (7.0000000055, 7.0000000055)
SPLIT = (6.0000000055, 8.0000000055)


def test_exact_tie_in_w_at_a_rounding_boundary_is_still_ranked_by_name() -> None:
    records = [*panel("alpha", {"x-1": EXACT}), *panel("beta", {"x-1": SPLIT})]
    doc = assert_agrees(records, TIE_BENCH)
    assert doc["series"]["default"]["ranking"] == ["alpha", "beta"]


def test_exact_tie_in_domain_w_at_a_rounding_boundary_goes_to_the_higher_w() -> None:
    # Domain x: alpha and beta tie exactly; alpha has the higher overall W (domain y), so leads x.
    records = [
        *panel("alpha", {"x-1": EXACT, "y-1": (10, 10)}),
        *panel("beta", {"x-1": SPLIT, "y-1": (5, 5)}),
    ]
    doc = assert_agrees(records, TIE_BENCH)
    assert doc["series"]["default"]["domain_leaders"]["x"] == "alpha"


def test_custom_weights() -> None:
    weights = {1: Fraction(1), 2: Fraction(1, 4), 3: Fraction(5, 2)}
    assert_agrees(_full(0.0) + _full(1.0, model="beta"), NASTY_BENCH, weights)


def test_a_zero_weight_level() -> None:
    # Level 3 weighs nothing: a model scored only at level 3 has no W (0/0), and a domain scored only
    # at level 3 has no per-domain W; D still compares levels 1 and 3.
    weights = {1: Fraction(1), 2: Fraction(1), 3: Fraction(0)}
    only_3 = [r for r in _full(1.0, model="beta") if "-3-" in r["question_id"]]
    assert_agrees(_full(0.0) + only_3, NASTY_BENCH, weights)


def test_a_level_in_the_data_without_a_weight_is_an_error(tmp_path: Path) -> None:
    bench = tmp_path / "bench.jsonl"
    bench.write_text(
        "".join(
            json.dumps({"id": q, "domain": d, "level": lv, "question": "Q?", "reference": "R."}) + "\n"
            for q, d, lv in NASTY_BENCH
        ),
        encoding="utf-8",
    )
    judgments = tmp_path / "judgments.jsonl"
    judgments.write_text("".join(json.dumps(r) + "\n" for r in _full(0.0)), encoding="utf-8")
    argv = ["report", "--benchmark", str(bench), "--judgments", str(judgments), "--format", "json"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([*argv, "--bootstrap", "0", "--weights", "1=0.6,2=0.8"])
    assert code != 0
    print(err.getvalue())
    assert "weight" in err.getvalue() and "3" in err.getvalue()


# --------------------------------------------------------------------------------------------------
# (b) Random record sets
# --------------------------------------------------------------------------------------------------

ABSENT = "<no series key>"
SCORES = st.one_of(
    st.integers(min_value=0, max_value=10).map(float),
    st.sampled_from([0.5, 2.25, 6.5, 7.3, 9.75]),
    st.none(),
)


@st.composite
def record_sets(
    draw: st.DrawFn,
) -> tuple[list[Record], list[Question], dict[int, Fraction] | None]:
    domains = draw(st.lists(st.sampled_from(["law", "med", "ops"]), min_size=1, max_size=3, unique=True))
    benchmark: list[Question] = []
    for domain in domains:
        for level in (1, 2, 3):
            for k in range(draw(st.integers(min_value=0, max_value=3))):
                benchmark.append((f"{domain}-{level}-{k}", domain, level))
    if not benchmark:
        benchmark.append((f"{domains[0]}-1-0", domains[0], 1))
    models = draw(
        st.lists(st.sampled_from(["m-a", "m-b", "m-c", "m-d"]), min_size=1, max_size=3, unique=True)
    )
    judges = draw(st.lists(st.sampled_from(["j1", "j2", "j3"]), min_size=1, max_size=3, unique=True))
    series_names = draw(
        st.lists(st.sampled_from([ABSENT, "hot", "cold"]), min_size=1, max_size=2, unique=True)
    )
    present = st.sampled_from([True, True, True, False])  # a quarter of the judgments are never written
    records: list[Record] = []
    for series in series_names:
        for model in draw(st.lists(st.sampled_from(models), min_size=1, unique=True)):
            for qid, _, _ in benchmark:
                for judge in judges:
                    if draw(present):
                        series_key = None if series == ABSENT else series
                        records.append(judgment(qid, model, judge, draw(SCORES), series_key))
    if not records:
        records.append(judgment(benchmark[0][0], models[0], judges[0], 5.0))
    if draw(st.booleans()):  # a twin of some model: exact ties in W and in every per-domain W
        original = draw(st.sampled_from(sorted({r["model"] for r in records})))
        twin = draw(st.sampled_from(["a-twin", "z-twin"]))
        records += [{**r, "model": twin} for r in records if r["model"] == original]
    records = draw(st.permutations(records))
    weights = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    level: st.sampled_from([Fraction(1, 4), Fraction(1), Fraction(3, 2), Fraction(6, 10)])
                    for level in (1, 2, 3)
                }
            ),
        )
    )
    return records, benchmark, weights


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(record_sets())
def test_random_record_sets_agree_with_the_reference(
    case: tuple[list[Record], list[Question], dict[int, Fraction] | None],
) -> None:
    records, benchmark, weights = case
    assert_agrees(records, benchmark, weights)
