"""Aggregation performance: judgments JSONL → cubes → the study's formulas → bootstrap, at two scales.

Run ``python benchmarks/aggregation.py`` (from the repository, with the project's virtualenv).
It generates synthetic benchmark and judgment files once (cached under
``~/.cache/kubejury/bench/``, never in the repository), then measures, each in a fresh
subprocess so that peak memory is that run's own:

* kubejury end to end: read the benchmark and every judgments JSONL file, build one ScoreCube per
  series, ``score_series`` and ``bootstrap_series`` for every series;
* a plain pandas implementation of the same formulas (steps 1–6 of docs/method.md, no
  bootstrap), reading the same files with ``pandas.read_json(lines=True, engine="pyarrow")`` and
  aggregating with ``groupby``; its weighted scores are compared with kubejury's as a check.

Scales: the study's (16 models × 1,440 questions × 3 judges = 69,120 judgments, one series) and
10 million (50 models × 22,222 questions × 3 judges × 3 series = 9,999,900 judgments).
Figures are written to ``benchmarks/results/aggregation.md`` and printed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(os.environ.get("KUBEJURY_CACHE", Path.home() / ".cache" / "kubejury")) / "bench"
RESULTS = Path(__file__).resolve().parent / "results" / "aggregation.md"
FORMAT_VERSION = 2  # bump to regenerate cached files when the generator changes
RATIONALE = "Matches the reference on the key points; minor omissions."
LEVEL_WEIGHTS = {1: 0.6, 2: 0.8, 3: 1.0}
# OpenBLAS threads for the measured processes (unless OPENBLAS_NUM_THREADS is set): its worker
# threads spin while waiting, and on 2 shared cores a second one made the bootstrap's matrix
# products ~2-3x slower in wall time; polars keeps its own pool for reading.
BLAS_THREADS = 1


@dataclass(frozen=True)
class Scale:
    name: str
    models: int
    questions: int
    judges: int
    series: tuple[str, ...]
    samples: int  # bootstrap replicates

    @property
    def judgments(self) -> int:
        return self.models * self.questions * self.judges * len(self.series)

    @property
    def folder(self) -> Path:
        return (
            CACHE
            / f"v{FORMAT_VERSION}-{self.name}-{self.models}m-{self.questions}q-{self.judges}j-{len(self.series)}s"
        )


SCALES = {
    "study": Scale("study", 16, 1440, 3, ("t0-rp1.2",), 2000),
    "10m": Scale("10m", 50, 22222, 3, ("t0-rp1.2", "t0.8-rp1.2", "t0-rp1.05"), 1000),
}


# ---------------------------------------------------------------------------------------------
# Synthetic data


def generate(scale: Scale) -> Path:
    """Write benchmark.jsonl and one judgments file per series (once; cached)."""
    import polars as pl

    folder = scale.folder
    done = folder / ".complete"
    if done.exists():
        return folder
    (folder / "judgments").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20260707)
    n_q, n_m, n_j = scale.questions, scale.models, scale.judges
    domains = [f"domain-{d:02d}" for d in range(16)]
    q_domain = np.arange(n_q) % 16
    q_level = 1 + (np.arange(n_q) // 16) % 3
    ids = [f"q{i:05d}" for i in range(n_q)]
    pl.DataFrame(
        {
            "id": ids,
            "domain": [domains[d] for d in q_domain],
            "level": q_level,
            "question": [f"Synthetic question {i}?" for i in range(n_q)],
            "reference": [f"Reference answer {i}." for i in range(n_q)],
        }
    ).write_ndjson(folder / "benchmark.jsonl")

    quality = rng.normal(8.3, 0.45, n_m)
    robustness = rng.uniform(0.1, 0.6, n_m)  # points lost per level step
    difficulty = rng.normal(0.0, 0.8, n_q)
    judge_bias = rng.normal(0.0, 0.25, n_j)
    models = pl.Series([f"model-{m:02d}" for m in range(n_m)])
    questions = pl.Series(ids)
    judges = pl.Series([f"judge-{j}" for j in range(n_j)])
    m_idx = np.repeat(np.arange(n_m), n_q * n_j)
    q_idx = np.tile(np.repeat(np.arange(n_q), n_j), n_m)
    j_idx = np.tile(np.arange(n_j), n_m * n_q)
    for k, series in enumerate(scale.series):
        shift = -0.25 * k
        true = quality[m_idx] + shift - robustness[m_idx] * (q_level[q_idx] - 1) - difficulty[q_idx]
        raw = true + judge_bias[j_idx] + rng.normal(0.0, 0.6, m_idx.shape[0])
        score = np.clip(np.round(raw * 2) / 2, 0, 10)
        null = rng.random(m_idx.shape[0]) < 0.01
        frame = pl.DataFrame(
            {
                "question_id": questions.gather(q_idx),
                "model": models.gather(m_idx),
                "judge": judges.gather(j_idx),
                "score": pl.Series(np.where(null, np.nan, score)).fill_nan(None),
                "null": null,
            }
        )
        frame = frame.select(
            "question_id",
            "model",
            pl.lit(series).alias("series"),
            "judge",
            "score",
            pl.when(pl.col("null")).then(None).otherwise(pl.lit(RATIONALE)).alias("rationale"),
            pl.when(pl.col("null")).then(pl.lit("judge output not parseable")).otherwise(None).alias("error"),
        )
        frame.write_ndjson(folder / "judgments" / f"{series}.jsonl")
        del frame
    done.write_text("ok\n")
    return folder


# ---------------------------------------------------------------------------------------------
# Runs (each in its own subprocess)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_kubejury(folder: Path, samples: int) -> dict[str, Any]:
    from kubejury.files.benchmark import load_benchmark
    from kubejury.files.tables import build_cubes, load_judgments
    from kubejury.stats.scoring import ScoringConfig, cell_index, score_series
    from kubejury.stats.uncertainty import bootstrap_series, resample_questions

    stages: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def lap(name: str, wall: float, cpu_start: float) -> None:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - wall
        cpu[name] = cpu.get(name, 0.0) + time.process_time() - cpu_start

    cpu0, t0 = time.process_time(), time.perf_counter()
    bench = load_benchmark(folder / "benchmark.jsonl")
    judgments = load_judgments(folder / "judgments")
    lap("read", t0, cpu0)
    t, c = time.perf_counter(), time.process_time()
    cubes = build_cubes(bench, judgments)
    del judgments
    lap("cubes", t, c)
    config = ScoringConfig(bootstrap_samples=samples, seed=1)
    weighted: dict[str, dict[str, float]] = {}
    leading: dict[str, int] = {}
    resample = None
    for name, cube in cubes.items():
        t, c = time.perf_counter(), time.process_time()
        scores = score_series(cube, config)
        lap("score", t, c)
        t, c = time.perf_counter(), time.process_time()
        if resample is None or not np.array_equal(resample.cells, cell_index(cube)):
            resample = resample_questions(cell_index(cube), samples, config.seed, len(cube.levels))
        uncertainty = bootstrap_series(cube, config, scores, resample)
        lap("bootstrap", t, c)
        weighted[name] = {m: float(scores.weighted[i]) for i, m in enumerate(scores.models)}
        leading[name] = len(uncertainty.leading_group)
    return {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - cpu0,
        "stages": stages,
        "peak_rss_mib": _peak_rss_mib(),
        "weighted": weighted,
        "leading_group_sizes": leading,
        "stage_cpu_s": cpu,
    }


def pandas_formulas(frame: Any, bench: Any) -> dict[str, dict[str, float]]:
    """Steps 1–6 of docs/method.md with pandas groupby (no bootstrap)."""
    df = frame.merge(bench, left_on="question_id", right_on="id", how="inner")
    keys = ["series", "model", "question_id", "domain", "level"]
    grouped = df.groupby(keys, sort=False)["score"]
    per_q = grouped.agg(["mean", "count"])
    per_q["std0"] = grouped.std(ddof=0)
    per_q = per_q.reset_index()
    scored = per_q[per_q["count"] > 0]
    cell = scored.groupby(["series", "model", "domain", "level"], sort=False)["mean"].mean().reset_index()
    level = cell.groupby(["series", "model", "level"], sort=False)["mean"].mean().reset_index()
    level["w"] = level["level"].map(LEVEL_WEIGHTS)
    level["wx"] = level["w"] * level["mean"]
    sums = level.groupby(["series", "model"], sort=False)[["wx", "w"]].sum()
    weighted = sums["wx"] / sums["w"]
    # D and σ as the method defines them (computed for parity of work, not compared here).
    pivot = level.pivot_table(index=["series", "model"], columns="level", values="mean")
    _degradation = pivot[pivot.columns.min()] - pivot[pivot.columns.max()]
    _sigma = per_q[per_q["count"] >= 2].groupby(["series", "model"], sort=False)["std0"].mean()
    result: dict[str, dict[str, float]] = {}
    for (series, model), value in weighted.items():
        result.setdefault(str(series), {})[str(model)] = float(value)
    return result


def run_pandas(folder: Path) -> dict[str, Any]:
    pd: Any = importlib.import_module("pandas")  # the baseline; no type stubs installed

    cpu0, t0 = time.process_time(), time.perf_counter()
    bench = pd.read_json(folder / "benchmark.jsonl", lines=True, engine="pyarrow")[["id", "domain", "level"]]
    frames = [
        pd.read_json(path, lines=True, engine="pyarrow")[["question_id", "model", "series", "judge", "score"]]
        for path in sorted((folder / "judgments").glob("*.jsonl"))
    ]
    frame = pd.concat(frames, ignore_index=True)
    del frames
    read = time.perf_counter() - t0
    t = time.perf_counter()
    weighted = pandas_formulas(frame, bench)
    formulas = time.perf_counter() - t
    return {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - cpu0,
        "stages": {"read": read, "formulas": formulas},
        "peak_rss_mib": _peak_rss_mib(),
        "weighted": weighted,
    }


def child(kind: str, scale_name: str) -> None:
    scale = SCALES[scale_name]
    folder = scale.folder
    result = run_kubejury(folder, scale.samples) if kind == "kubejury" else run_pandas(folder)
    print(json.dumps(result))


def measure(kind: str, scale: Scale, timeout: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, "--scale", scale.name]
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", str(BLAS_THREADS))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s"}
    if done.returncode != 0:
        return {
            "error": done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"exit {done.returncode}"
        }
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------------------------------
# Report


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


def _fmt_stages(stages: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in stages.items())


HISTORY_HEADING = "## All runs (kubejury end to end; newest last)"


def _history(path: Path) -> list[str]:
    """The run lines of an earlier results file, so every measurement stays on record."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    if HISTORY_HEADING not in lines:
        return []
    return [line for line in lines[lines.index(HISTORY_HEADING) + 1 :] if line.startswith("- ")]


def _history_line(load: str, results: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, ours in results.items():
        if "error" in ours:
            parts.append(f"{name}: failed ({ours['error']})")
        else:
            parts.append(
                f"{name}: {ours['wall_s']:.2f} s wall, {ours['cpu_s']:.2f} s CPU, {ours['peak_rss_mib']:.0f} MiB"
            )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"- {stamp}, load {load}: " + "; ".join(parts)


def _row(scale: Scale, size: int, ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    if "error" in ours:
        return f"| {scale.name} | {scale.judgments:,} | kubejury failed: {ours['error']} |" + " |" * 8
    stages = " / ".join(f"{ours['stages'][k]:.2f}" for k in ("read", "cubes", "score", "bootstrap"))
    stage_cpu = " / ".join(f"{ours['stage_cpu_s'][k]:.2f}" for k in ("read", "cubes", "score", "bootstrap"))
    if "error" in theirs:
        pandas_cell, ratio, formula_ratio, agreement = theirs["error"], "n/a", "n/a", "n/a"
    else:
        pandas_cell = (
            f"{theirs['wall_s']:.2f} s ({theirs['cpu_s']:.2f} s CPU; read {theirs['stages']['read']:.2f}, "
            f"formulas {theirs['stages']['formulas']:.2f}), {theirs['peak_rss_mib']:.0f} MiB"
        )
        ratio = f"{theirs['wall_s'] / ours['wall_s']:.1f}×"
        formula_ratio = (
            f"{theirs['stages']['formulas'] / (ours['stages']['cubes'] + ours['stages']['score']):.1f}×"
        )
        diffs = [
            abs(ours["weighted"][s][m] - theirs["weighted"][s][m])
            for s in ours["weighted"]
            for m in ours["weighted"][s]
        ]
        agreement = f"{max(diffs):.1e}"
    return (
        f"| {scale.name} | {scale.judgments:,} ({len(scale.series)} series, {size / 2**20:.0f} MiB) "
        f"| **{ours['wall_s']:.2f} s** | {ours['cpu_s']:.2f} s | **{ours['peak_rss_mib']:.0f} MiB** "
        f"| {stages} (CPU {stage_cpu}) | {scale.samples} | {pandas_cell} | {ratio} | {formula_ratio} | {agreement} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", choices=["kubejury", "pandas"], help=argparse.SUPPRESS)
    parser.add_argument("--scale", choices=sorted(SCALES), action="append")
    parser.add_argument("--skip-pandas", action="store_true", help="only measure kubejury")
    parser.add_argument("--pandas-timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.scale[0])
        return 0

    scales = [SCALES[s] for s in (args.scale or ["study", "10m"])]
    rows: list[str] = []
    notes: list[str] = []
    scale_results: dict[str, dict[str, Any]] = {}
    load_before = _load()
    for scale in scales:
        t = time.perf_counter()
        folder = generate(scale)
        size = sum(p.stat().st_size for p in (folder / "judgments").glob("*.jsonl"))
        print(
            f"[{scale.name}] data ready in {time.perf_counter() - t:.1f} s: {folder} ({size / 2**20:.0f} MiB)"
        )
        ours = measure("kubejury", scale, timeout=900)
        print(f"[{scale.name}] kubejury: {json.dumps({k: v for k, v in ours.items() if k != 'weighted'})}")
        theirs: dict[str, Any] = (
            {"error": "skipped"} if args.skip_pandas else measure("pandas", scale, args.pandas_timeout)
        )
        print(f"[{scale.name}] pandas:   {json.dumps({k: v for k, v in theirs.items() if k != 'weighted'})}")
        rows.append(_row(scale, size, ours, theirs))
        scale_results[scale.name] = ours
        if "leading_group_sizes" in ours:
            cpu = ours["stage_cpu_s"]
            estimate = cpu["read"] / 2 + cpu["cubes"] + cpu["score"] + cpu["bootstrap"]
            notes.append(
                f"{scale.name}: leading-group size per series {ours['leading_group_sizes']}; from the CPU seconds,"
                f" 2 idle cores would need about {estimate:.1f} s (read CPU / 2 + the rest; an estimate, not a"
                " measurement)"
            )
    load_after = _load()

    busy = max(float(x) for x in (load_before.split(" / ")[0], load_after.split(" / ")[0]))
    blas = os.environ.get("OPENBLAS_NUM_THREADS", str(BLAS_THREADS))
    text = [
        "# Aggregation performance",
        "",
        "Measured by `python benchmarks/aggregation.py` (one command; synthetic data are generated once under",
        "`~/.cache/kubejury/bench/`, not in the repository). Each measurement runs in a fresh subprocess; peak",
        "RSS is that process's `ru_maxrss`. Wall time runs from the first byte read to the last interval computed.",
        "",
        f"- Machine: {os.cpu_count()} CPUs ({platform.machine()}), Python {platform.python_version()}; load average"
        f" (1/5/15 min) {load_before} before the run and {load_after} after it. OPENBLAS_NUM_THREADS={blas}.",
        "- kubejury: `load_benchmark` + `load_judgments` (polars columnar NDJSON reader, dictionary-encoded keys) →",
        "  `build_cubes` → for every series `score_series` + `bootstrap_series` (stratified cluster bootstrap; the",
        "  replicates are drawn once and shared by the series; see docs/method.md).",
        '- pandas baseline: `pandas.read_json(lines=True, engine="pyarrow")` and a `groupby` implementation of',
        '  steps 1–6 (S(q), S_i, Score, W, D, σ), **no bootstrap**. "formulas only" compares its groupby time',
        "  with kubejury's cube building + scoring, both from data already in memory. max |ΔW| is the largest",
        "  difference between the two implementations' weighted scores (a correctness cross-check).",
        "- Synthetic data: 16 domains × 3 levels, model quality, level robustness, question difficulty and judge",
        "  bias drawn at random, scores rounded to 0.5, 1% null scores. Records carry a ~60-character rationale;",
        "  real rationales are longer, which makes files and JSON parsing proportionally larger.",
        "- Targets (issue 2): 10 M judgments in ≤ 15 s wall and ≤ 3 GiB peak; the study's 69,120 well under 1 s.",
        "",
        "| scale | judgments (JSONL size) | kubejury wall | CPU | peak RSS | stages wall: read / cubes / score / bootstrap (s) | bootstrap samples | pandas, no bootstrap | pandas ÷ kubejury (wall) | formulas only | max \\|ΔW\\| |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *[f"- {n}" for n in notes],
    ]
    if busy > 1.5:
        text += [
            "",
            f"**Taken under contention**: the 2 cores were shared with other jobs (1-minute load average up to {busy:.1f}),",
            "so wall times are inflated compared with an idle machine. CPU seconds are the less disturbed figure:",
            "on 2 idle cores the read stage (polars parses on both) takes about half its CPU time, the rest about",
            "its CPU time.",
        ]
    text += ["", HISTORY_HEADING, "", *_history(args.out), _history_line(load_before, scale_results)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text) + "\n", encoding="utf-8")
    print("\n".join(text))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
