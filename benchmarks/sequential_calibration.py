"""Sequential evaluation by simulation: coverage, wrong leading groups, questions saved, and the naive rule.

Run ``python benchmarks/sequential_calibration.py`` (from the repository, with the project's
virtualenv). For each population of ``kubejury.testing.sequential`` (the study's 15 W spacings,
an easy population with one clear leader, a near-tie with two equal top models; 16 domains × 3
levels × 30 questions, three judges with biases and noise) it draws ``--replications`` fresh
benchmarks, replays the looks of ``kubejury.stats.sequential.evaluate`` under the O'Brien–Fleming
spending rule and under the naive rule (stop at the first look where a fixed 95% interval
separates), and reports:

* coverage of every model's final W interval (at its stopping look; target ≥ 94%);
* the probability of a wrong leading group (a true best model out; target ≤ 5%) — and, for the
  full-ranking goal, of a wrong pair verdict;
* the questions answered against asking all of them (models × questions), as a distribution, and
  the saving of generation and judging GPU-hours taken proportional to it (target ≥ 50% on the
  easy population).

For the goal ``comparisons`` it names one pair among the study's 15 models (margin 0.25, the
default comparison margin): a pair exactly one margin apart (a wrong verdict is "equivalent") and
twins (a wrong verdict is "different"), and reports the wrong-verdict rate (target ≤ 5%), the
undecided rate, coverage of the pair's difference interval and the questions used. Those rows alone
can be rerun into existing results with ``--only comparisons`` (the other figures are kept).

Seeds are fixed (replication r uses seed ``--seed + r`` for the benchmark and the question order);
each figure has its Monte Carlo standard error. Results: ``benchmarks/results/sequential.md`` and
``sequential.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from kubejury.stats.sequential import DEFAULT_LOOKS, Budget, Goal
from kubejury.testing.sequential import (
    COMPARISONS,
    POPULATIONS,
    ComparisonResult,
    RuleResult,
    rate_text,
    simulate,
    simulate_comparison,
)

RESULTS = Path(__file__).resolve().parent / "results"
# (population, goal, naive): the rows of the table.
ROWS: tuple[tuple[str, Goal, bool], ...] = (
    ("study", "leading-group", False),
    ("study", "leading-group", True),
    ("easy", "leading-group", False),
    ("easy", "leading-group", True),
    ("near-tie", "leading-group", False),
    ("near-tie", "leading-group", True),
    ("study", "full-ranking", False),
    ("study", "full-ranking", True),
)

# Ablation of the budget's defaults (spending rule, leading-group): other look schedules and a
# wider margin, with fewer runs each. (label, population, budget)
ABLATION: tuple[tuple[str, str, Budget], ...] = tuple(
    (label, name, budget)
    for label, budget in (
        ("default looks 0.1, 0.2, 0.3, 0.5, 0.75, 1", Budget()),
        ("ten equal looks 0.1, 0.2, …, 1", Budget(looks=tuple(round(0.1 * k, 1) for k in range(1, 11)))),
        ("four looks 0.25, 0.5, 0.75, 1", Budget(looks=(0.25, 0.5, 0.75, 1.0))),
        ("three looks 0.1, 0.3, 1", Budget(looks=(0.1, 0.3, 1.0))),
        ("default looks, margin δ = 0.2", Budget(margin=0.2)),
    )
    for name in ("study", "easy")
)

# Goal comparisons: (case, naive, confidence). The naive rule is the fixed run's TOST (the 90%
# interval inside ±margin) at every look, no spending.
COMPARISON_ROWS: tuple[tuple[str, bool, float], ...] = (
    ("at-margin", False, 0.95),
    ("at-margin", True, 0.90),
    ("twins", False, 0.95),
    ("twins", True, 0.90),
    ("half-margin", False, 0.95),
)
WRONG = {
    "at-margin": "equivalent",
    "twins": "a-better or b-better",
    "half-margin": "b-better (equivalent and a-better are both right; the slowest pair to decide)",
}
COMPARISONS_HEADING = "## Goal comparisons: one named pair"


def comparison_row(r: ComparisonResult) -> str:
    n = r.replications
    used = " / ".join(f"{100 * r.used_quantiles[k]:.0f}" for k in ("0.05", "0.5", "0.95"))
    pair = " / ".join(f"{r.pair_questions_quantiles[k]:.0f}" for k in ("0.05", "0.5", "0.95"))
    verdicts = ", ".join(f"{v} {100 * share:.2f}" for v, share in r.verdicts.items() if share > 0)
    return (
        f"| {r.case} | {r.true_difference:.3f} | {r.rule} | {n} | {rate_text(r.wrong, n)} | {rate_text(r.undecided, n)} "
        f"| {verdicts} | {rate_text(r.coverage, n)} | {used} | {pair} |"
    )


def comparison_section(results: list[ComparisonResult], args: argparse.Namespace, timing: str) -> list[str]:
    """The comparisons goal's table, with how it was measured."""
    header = (
        "| pair | true W difference | rule (interval level) | runs | wrong verdict | undecided at the end "
        "| verdicts, % of runs | pair's interval covers the difference (decided runs) "
        "| questions used, % of all: 5 / 50 / 95th percentile | questions the pair answered: 5 / 50 / 95th |"
    )
    return [
        COMPARISONS_HEADING,
        "",
        f"Measured by `python benchmarks/sequential_calibration.py --only comparisons --replications "
        f"{args.replications}` (seeds {args.seed} + r, as above). Goal `comparisons` with one named pair among "
        "the 15 models, margin 0.25 W (the default comparison margin):",
        "",
        *[
            f"- {c.name}: m{c.a:02d} vs m{c.b:02d}, W {c.targets[c.a]:.2f} vs {c.targets[c.b]:.2f}; the other W "
            f"as {'study' if c.targets == POPULATIONS['study'] else 'study (but m04)'}. "
            f"A wrong verdict is {WRONG[c.name]}."
            for c in COMPARISONS.values()
        ],
        "",
        "\"spending\": the O'Brien–Fleming-type spending at confidence 0.95 (the pair's interval at the look's "
        'spent level; equivalent when it lies inside ±margin); "naive": the fixed run\'s rule (the 90% interval, '
        "TOST at 5%) at every look, no spending. A pair exactly at the margin is not equivalent (TOST's null "
        "hypothesis is |difference| ≥ margin). The 13 models outside the pair stop at the first look (144 "
        "questions). ± is one Monte Carlo standard error. At the margin the pair's interval lies above 0 "
        "before it lies inside ±margin, and a separation is the verdict when both hold, so even the naive rule "
        "rarely says equivalent there; its error shows at zero difference, where peeking at six looks calls "
        "twins different about twice its 5%.",
        f"- {timing}",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
        *[comparison_row(r) for r in results],
        "",
    ]


def run_comparisons(args: argparse.Namespace) -> list[ComparisonResult]:
    results = []
    for case, naive, confidence in COMPARISON_ROWS:
        results.append(
            simulate_comparison(
                COMPARISONS[case], args.replications, args.seed, naive=naive, confidence=confidence
            )
        )
        print(f"[comparisons {case} {results[-1].rule}] done", flush=True)
    return results


def timing_text(load: float, started: float, cpu: float) -> str:
    return (
        f"Machine: {os.cpu_count()} CPUs shared with other jobs (load average {load:.1f} at the start), Python "
        f"{platform.python_version()}; {time.perf_counter() - started:.0f} s wall, "
        f"{time.process_time() - cpu:.0f} s CPU."
    )


def only_comparisons(args: argparse.Namespace) -> int:
    """Rerun the comparisons rows into existing results, keeping every other figure."""
    started, cpu, load = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    results = run_comparisons(args)
    md = args.out.read_text(encoding="utf-8").split(COMPARISONS_HEADING, 1)[0].rstrip("\n")
    section = comparison_section(results, args, timing_text(load, started, cpu))
    args.out.write_text(md + "\n\n" + "\n".join(section), encoding="utf-8")
    json_path = args.out.with_suffix(".json")
    document = json.loads(json_path.read_text(encoding="utf-8"))
    document["comparisons"] = {
        "command": f"python benchmarks/sequential_calibration.py --only comparisons --replications {args.replications}",
        "seed": args.seed,
        "results": [r.to_dict() for r in results],
        "load_average": load,
    }
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print("\n".join(section))
    return 0


def ablation_row(label: str, r: RuleResult, budget: Budget) -> str:
    n = r.replications
    return (
        f"| {label} | {r.population} | {n} | {rate_text(r.coverage, n)} | {rate_text(r.wrong_group, n)} "
        f"| {rate_text(r.saving)} | {r.group_size:.2f} | {r.questions_per_model[0]:.0f} | {r.best_width:.3f} |"
    )


def row(r: RuleResult) -> str:
    q = r.used_quantiles
    quantiles = " / ".join(f"{100 * q[k]:.0f}" for k in ("0.05", "0.25", "0.5", "0.75", "0.95"))
    n = r.replications
    leading = r.rule.endswith("(leading-group)")
    wrong = r.wrong_group if leading else r.wrong_claim
    group = f"{r.group_size:.2f}" if leading else "–"
    return (
        f"| {r.population} | {r.rule} | {r.replications} | {rate_text(r.coverage, n)} | {rate_text(r.all_covered, n)} "
        f"| {rate_text(wrong, n)} | {rate_text(r.saving)} | {quantiles} | {group} | {r.mean_width:.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replications", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=340_000)
    parser.add_argument("--ablation-replications", type=int, default=500)
    parser.add_argument("--out", type=Path, default=RESULTS / "sequential.md")
    parser.add_argument(
        "--only", choices=("comparisons",), help="rerun only these rows into existing results"
    )
    args = parser.parse_args()
    if args.only == "comparisons":
        return only_comparisons(args)

    results: list[RuleResult] = []
    started, cpu = time.perf_counter(), time.process_time()
    load = os.getloadavg()[0]
    for name, goal, naive in ROWS:
        t = time.perf_counter()
        result = simulate(name, args.replications, args.seed, Budget(goal=goal), naive=naive)
        results.append(result)
        print(f"[{name} {result.rule}] {time.perf_counter() - t:.0f} s", flush=True)
    ablation: list[tuple[str, RuleResult, Budget]] = []
    for label, name, budget in ABLATION:
        result = simulate(name, args.ablation_replications, args.seed, budget)
        ablation.append((label, result, budget))
        print(f"[ablation {label}, {name}] done", flush=True)
    comparison_results = run_comparisons(args)
    elapsed, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    budget = Budget()
    header = (
        "| population | rule (goal) | runs | final W interval covers | all 15 cover | wrong leading group "
        "(full-ranking: wrong verdict) | GPU-hours saved | questions used, % of all: 5 / 25 / 50 / 75 / 95th "
        "percentile | leading-group size | mean interval width |"
    )
    text = [
        "# Sequential evaluation by simulation",
        "",
        f"Measured by `python benchmarks/sequential_calibration.py --replications {args.replications}` (seeds "
        f"{args.seed} + r for replication r, the benchmark and the question order; every row uses the same seeds).",
        "Populations (`kubejury.testing.sequential`): 16 domains × 3 levels × 30 questions, 15 models, the",
        "calibration's generator (domain and level effects, shared question difficulty, model × question",
        "interaction SD 0.5, three judges with biases +0.3/−0.2/0 and noise SD 0.6, scores rounded to 0.5 and",
        "clipped, 1% nulls). W of the models, exactly:",
        "",
        *[f"- {name}: {', '.join(f'{w:.2f}' for w in ws)}" for name, ws in POPULATIONS.items()],
        "",
        f"Budget: confidence {budget.confidence}, margin δ = {budget.margin} W points, looks at information fractions "
        f"{', '.join(f'{t:g}' for t in DEFAULT_LOOKS)}, min {budget.min_per_cell} questions per cell in the first wave.",
        "\"spending\": O'Brien–Fleming-type α spending with Bonferroni over the goal's pairs (docs/method.md,",
        '"Sequential evaluation"); "naive": every look uses the fixed 95% interval, no spending, no multiplicity.',
        "",
        "- Final W interval covers: share of the 15 models whose interval at their stopping look contains the",
        "  true W (per run, averaged); all 15 cover: share of runs in which every model's does.",
        "- Wrong leading group: a model of the best true W is out. Full-ranking rows: some decided pair's verdict",
        "  is wrong (a separation in the wrong direction or an equivalence beyond δ).",
        "- GPU-hours saved: 1 − questions answered ÷ (15 × 1,440); generation and judging are taken proportional",
        "  to the questions answered per model.",
        "- ± is one Monte Carlo standard error over runs.",
        f"- Machine: {os.cpu_count()} CPUs shared with other jobs (load average {load:.1f} at the start), "
        f"Python {platform.python_version()}; {elapsed:.0f} s wall, {cpu_s:.0f} s CPU in all.",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
        *[row(r) for r in results],
        "",
        "Ablation of the defaults (spending rule, goal leading-group, the first "
        f"{args.ablation_replications} seeds): look schedules and the margin.",
        "",
        "| budget | population | runs | final W interval covers | wrong leading group | GPU-hours saved "
        "| leading-group size | median questions of the best model | its final interval's width (median) |",
        "|---|---|---|---|---|---|---|---|---|",
        *[ablation_row(label, r, b) for label, r, b in ablation],
        "",
        "Median questions answered per model (population order, best first):",
        "",
        *[
            f"- {r.population}, {r.rule}: {', '.join(f'{v:.0f}' for v in r.questions_per_model)}"
            for r in results
        ],
        "",
        *comparison_section(comparison_results, args, "Timing: included in the run's figures above."),
    ]
    document: dict[str, Any] = {
        "command": (
            f"python benchmarks/sequential_calibration.py --replications {args.replications} "
            f"--ablation-replications {args.ablation_replications}"
        ),
        "seed": args.seed,
        "budget": {
            "confidence": budget.confidence,
            "margin": budget.margin,
            "looks": list(DEFAULT_LOOKS),
            "min_per_cell": budget.min_per_cell,
        },
        "populations": {name: list(ws) for name, ws in POPULATIONS.items()},
        "results": [r.to_dict() for r in results],
        "ablation": [
            {"budget": label, "looks": list(b.looks), "margin": b.margin, **r.to_dict()}
            for label, r, b in ablation
        ],
        "comparisons": {"seed": args.seed, "results": [r.to_dict() for r in comparison_results]},
        "elapsed_s": elapsed,
        "cpu_s": cpu_s,
        "load_average": load,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print("\n".join(text))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
