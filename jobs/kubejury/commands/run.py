"""``kubejury run SPEC [--out DIR]``: a whole evaluation on this machine, no cluster.

Loads and checks the EvalRun and its benchmark (a bad file stops here, before anything is written),
starts a local llama.cpp server for every ``runtime: llamacpp`` model and judge (one per distinct
model; the embedded Gemma-3 270M by default), runs generation, then judging, then aggregation,
always stops the servers, and prints the ranking and where the HTML report is. Rerunning the same
spec resumes: stored answers and judgments are not asked again. With ``spec.reuse.from``, the
records of those earlier run folders (same storage root) that this spec would make again are
copied first (:mod:`kubejury.stages.reuse`), and only the servers with work left are started.
With ``spec.budget`` the questions are asked in looks (:mod:`kubejury.stages.waves`): a model
whose place is decided asks nothing more and its local server is stopped at once.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubejury import pipeline
from kubejury.config.spec import JudgeSpec, ModelSpec
from kubejury.errors import ConfigError
from kubejury.runtimes import runtime_of


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="run a whole EvalRun locally (no cluster): generate, judge, report",
        description=(
            "Run an EvalRun on this machine: serve runtime-llamacpp models locally, generate answers, judge them, "
            "aggregate, and write the report under <storage>/<run>/report/. Reruns resume."
        ),
    )
    parser.add_argument("evalrun", metavar="SPEC", help="EvalRun YAML file, e.g. examples/quickstart.yaml")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="output root (a directory or s3://bucket/prefix) instead of spec.storage.uri (default ./runs)",
    )
    parser.add_argument(
        "--new-version",
        action="store_true",
        help=(
            "when the run folder holds records of a different spec, write a new version of the run "
            "beside it (<run>.v2, .v3, …) instead of stopping; old records are never overwritten or mixed"
        ),
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress output (default: bars on a terminal, else a line per stage every 10 s)",
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _check_endpoints(inputs: pipeline.LoadedRun) -> None:
    """Fail before starting anything when an entry cannot be reached from this machine."""
    for entry in inputs.evalrun.spec.all_endpoints():
        serving = runtime_of(entry.runtime)
        if serving.starts_in_local_mode or serving.external:
            continue
        raise ConfigError(
            f"{entry.name!r} has runtime {entry.runtime}, which local mode cannot start; use runtime llamacpp "
            "(a local GGUF), or runtime openai with the running server's base URL as source"
        )


async def _stages(
    inputs: pipeline.LoadedRun,
    endpoints: Mapping[str, str],
    local_urls: Mapping[str, str],
    progress: bool,
    work: Work,
) -> None:
    from kubejury.inference.client import EndpointPool
    from kubejury.stages.progress_lines import progress_view

    spec = inputs.evalrun.spec
    view = progress_view() if progress else None
    pool = EndpointPool(pipeline.client_settings(spec.concurrency))
    try:
        if view is not None:
            view.__enter__()
        await pipeline.generate(inputs, pool, endpoints, models=work.models, series=spec.series, view=view)
        # Local llama.cpp servers answer one request at a time: judges sharing one take turns.
        await pipeline.judge(
            inputs,
            pool,
            endpoints,
            judges=work.judges,
            series=spec.series,
            view=view,
            serial_endpoints=set(local_urls.values()),
        )
    finally:
        if view is not None:
            view.__exit__(None, None, None)
        await pool.close()


async def _sequential_stages(
    inputs: pipeline.LoadedRun,
    endpoints: Mapping[str, str],
    served: Mapping[str, str],
    progress: bool,
    work: Work,
) -> None:
    """A budgeted run: look by look, generation of the continuing models and judging of the
    look's prefix, then the planner's decision, stored after every look; a stopped model asks
    nothing more and its local server is stopped at once (when no judge or other model shares it).
    A rerun continues after the stored document's last look (the stages skip what is stored)."""
    from kubejury.inference.client import EndpointPool
    from kubejury.stages.progress_lines import progress_view
    from kubejury.stages.waves import plan_waves, write_document

    spec = inputs.evalrun.spec
    budget = spec.sequential_budget()
    assert budget is not None
    names = [m.name for m in spec.models]
    plan = plan_waves(names, inputs.benchmark, budget, spec.scoring.level_weights)
    stored = pipeline.stored_sequential(inputs)
    start = stored.looks_done if stored is not None else 0
    if stored is not None and not _same_plan(stored, plan.document(plan.decide([], 0))):
        _say(
            "spec.budget changed since the stored looks: deciding again from look 1 (stored answers are kept)"
        )
        start = 0
    view = progress_view() if progress else None
    pool = EndpointPool(pipeline.client_settings(spec.concurrency))
    try:
        if view is not None:
            view.__enter__()
        outcome = plan.decide(_primary_judgments(inputs), start)
        for look in range(start, plan.n_looks):
            going = [m for m in work.models if outcome.outcome(m.name).status == "continue"]
            if outcome.finished:
                break
            questions = plan.prefix(look)
            await pipeline.generate(
                inputs, pool, endpoints, models=going, series=spec.series, view=view, questions=questions
            )
            await pipeline.judge(
                inputs,
                pool,
                endpoints,
                judges=work.judges,
                series=spec.series,
                view=view,
                serial_endpoints=set(served.values()),
                questions=questions,
            )
            before = {m.model for m in outcome.models if m.status == "stopped"}
            outcome = plan.decide(_primary_judgments(inputs), look + 1)
            write_document(inputs.storage, inputs.layout.run, plan.document(outcome))
            _say_look(outcome, plan.n_looks, len(questions), before)
            _release(served, outcome, work)
    finally:
        if view is not None:
            view.__exit__(None, None, None)
        await pool.close()


def _check_budget(inputs: pipeline.LoadedRun) -> None:
    """A budget that cannot be planned on this benchmark (maxQuestions below the first wave) fails
    before anything is written."""
    from kubejury.stages.waves import plan_waves

    spec = inputs.evalrun.spec
    budget = spec.sequential_budget()
    if budget is not None:
        plan_waves([m.name for m in spec.models], inputs.benchmark, budget, spec.scoring.level_weights)


def _same_plan(stored: Any, planned: Any) -> bool:
    """Whether a stored sequential document was made under the same looks and rule as the plan."""
    keys = ("goal", "confidence", "margin", "seed", "total_questions", "prefix_sizes")
    return all(getattr(stored, k) == getattr(planned, k) for k in keys)


def _primary_judgments(inputs: pipeline.LoadedRun) -> list[Any]:
    """Every stored judgment of the primary series (what a look decides on)."""
    from kubejury.stages.waves import primary_judgments

    spec = inputs.evalrun.spec
    judges = [j.name for j in spec.judges]
    return primary_judgments(inputs.storage, inputs.layout, spec.primary_series.name, judges)


def _say_look(outcome: Any, n_looks: int, asked: int, before: set[str]) -> None:
    stopped = [m for m in outcome.models if m.status == "stopped" and m.model not in before]
    going = [m.model for m in outcome.models if m.status == "continue"]
    said = "; ".join(f"{m.model} stopped after {m.questions} questions ({m.reason})" for m in stopped)
    _say(
        f"look {outcome.looks_done}/{n_looks} ({asked} questions): "
        + (said or "no model stopped")
        + (f"; continuing: {', '.join(going)}" if going else "")
    )


def _release(served: Mapping[str, str], outcome: Any, work: Work) -> None:
    """Stop the local servers that no continuing model and no judge needs any more."""
    release = getattr(served, "release", None)
    if release is None:
        return
    needed = {m.model for m in outcome.models if m.status == "continue"} | {j.name for j in work.judges}
    for plan in release(needed):
        _say(f"stopped llama.cpp server for {plan.model_path.name}: its models are decided")


def _fmt(value: float, digits: int = 2) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def print_ranking(analysis: Any) -> None:
    """The primary series' ranking: W with its interval, level scores, D, σ, tier."""
    from rich.console import Console
    from rich.table import Table

    result = analysis.series[analysis.primary_series]
    scores = result.scores
    unc = result.uncertainty
    table = Table(title=f"Ranking — series {analysis.primary_series} (weighted score W, 0–10)")
    table.add_column("#", justify="right")
    table.add_column("model")
    table.add_column("W", justify="right")
    if unc is not None:
        table.add_column(f"{unc.confidence:.0%} CI", justify="right")
    for level in scores.levels:
        table.add_column(f"L{level}", justify="right")
    table.add_column("D", justify="right")
    table.add_column("σ judges", justify="right")
    table.add_column("tier")
    for rank, model in enumerate(scores.ranking, start=1):
        i = scores.models.index(model)
        row = [str(rank), model, _fmt(float(scores.weighted[i]))]
        if unc is not None:
            u = unc.model_index(model)
            low, high = unc.weighted_ci[u]
            row.append(f"{_fmt(float(low))}–{_fmt(float(high))}")
        row += [_fmt(float(scores.level_scores[i, k])) for k in range(len(scores.levels))]
        row += [
            _fmt(float(scores.degradation[i])),
            _fmt(float(scores.judge_sigma[i])),
            scores.tiers.get(model, ""),
        ]
        table.add_row(*row)
    console = Console(stderr=False)
    if not console.is_terminal:
        console = Console(stderr=False, width=max(console.width, 120))  # logs: do not wrap the table
    console.print(table)
    if unc is not None and len(scores.ranking) > 1:
        console.print(significance_table(scores.ranking, unc))
        console.print(
            f"leading group at {unc.confidence:.0%} (not distinguishable from the top): "
            + ", ".join(unc.leading_group)
        )
    for c in result.comparisons:  # spec.comparisons and one checkpoint's precisions (issue 27)
        w = c.weighted
        said = c.verdict or f"no verdict ({c.reason})"
        if w is not None:
            low, high = w.ci90
            said = f"ΔW {w.estimate:+.3f} (90% {_fmt(low)}–{_fmt(high)}) within ±{c.request.margin:g}: {said}"
        console.print(f"equivalence {c.request.a} − {c.request.b}: {said}")
    failures = {j: n for j, n in result.parse_failures.items() if n}
    if failures:
        console.print(
            "unparsed judge replies (stored as score null): "
            + ", ".join(f"{j}: {n}" for j, n in failures.items())
        )


def print_budget(document: Any) -> None:
    """A budgeted run: questions each model answered, of how many, and why it stopped."""
    if document is None:
        return
    budgeted = document.prefix_sizes[-1]
    print(f"sequential ({document.goal}, {document.looks_done}/{document.n_looks} looks):")
    for m in document.models:
        why = m.reason if m.status == "stopped" else "still continuing (rerun to go on)"
        print(f"  {m.model}: {m.questions}/{budgeted} questions; {why}")


def _heartbeat(label: str, *, enabled: bool) -> contextlib.AbstractContextManager[object]:
    """A line every ~10 s while ``label`` runs, when stdout is not a terminal (bars are not drawn there)."""
    from kubejury.stages.progress_lines import Heartbeat

    if not enabled or sys.stdout.isatty():
        return contextlib.nullcontext()
    return Heartbeat(label)


def significance_table(ranking: Sequence[str], unc: Any) -> Any:
    """P(row model has a higher W than column model), paired bootstrap, models in ranking order."""
    from rich.table import Table

    table = Table(title="Significance — P(row better than column), paired bootstrap over questions")
    table.add_column("")
    for model in ranking:
        table.add_column(model, justify="right")
    for row in ranking:
        i = unc.model_index(row)
        cells = [
            "·" if row == col else _fmt(float(unc.prob_better[i, unc.model_index(col)])) for col in ranking
        ]
        table.add_row(row, *cells)
    return table


def _report_location(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


@dataclass(frozen=True)
class Work:
    """The models that still have answers to make and the judges that still have judging to do."""

    models: list[ModelSpec]
    judges: list[JudgeSpec]

    @property
    def endpoints(self) -> list[ModelSpec]:
        """What must be served: only these servers are started."""
        return [*self.models, *self.judges]


def _reuse_first(inputs: pipeline.LoadedRun) -> Work:
    """Copy what ``spec.reuse.from`` holds (issue 24), say so, and return what is left to run."""
    spec = inputs.evalrun.spec
    if not spec.reuse.from_runs:
        return Work(list(spec.models), list(spec.judges))
    from kubejury.commands.reuse import summary_lines

    document = pipeline.reuse(inputs, pipeline.local_sources(inputs))
    for line in summary_lines(document):
        _say(line)
    series = [s.name for s in spec.series]
    models = [m for m in spec.models if not all(document.complete("generate", s, m.name) for s in series)]
    judges = [j for j in spec.judges if not all(document.complete("judge", s, j.name) for s in series)]
    skipped = [e.name for e in spec.all_endpoints() if e not in models and e not in judges]
    if skipped:
        _say(f"nothing left to make for {', '.join(skipped)}: their servers are not started")
    return Work(models, judges)


def run(args: argparse.Namespace) -> int:
    from kubejury.local.server import local_servers
    from kubejury.stages import run_async

    started = time.monotonic()
    inputs = pipeline.load_inputs(args.evalrun, out=args.out)  # raises before anything is written
    _check_endpoints(inputs)
    changes = pipeline.spec_changes(inputs)
    if changes:
        if not args.new_version:
            raise pipeline.spec_changed_error(inputs, changes)
        old = inputs.name
        inputs = pipeline.new_version(inputs)
        _say(
            f"the spec changed since run {old!r} was stored: writing version {inputs.layout.run!r} beside it"
        )
    spec = inputs.evalrun.spec
    _check_budget(inputs)
    n_q = len(inputs.benchmark.questions)
    _say(
        f"EvalRun {inputs.name!r}: {n_q} questions × {len(spec.models)} model(s) × {len(spec.series)} series, "
        f"{len(spec.judges)} judge(s); results in {inputs.storage.uri_for(inputs.layout.run)}"
    )
    if not pipeline.record_spec(inputs):
        _say(
            "note: this run folder holds results of an earlier, different spec; stored records are reused by key"
        )

    work = _reuse_first(inputs)

    def started_server(plan: Any, url: str) -> None:
        _say(f"started llama.cpp server for {plan.model_path.name} at {url}")

    try:
        with local_servers(work.endpoints, on_start=started_server) as local_urls:
            endpoints = {e.name: pipeline.endpoint_of(e, local_urls) for e in work.endpoints}
            stages = _sequential_stages if spec.budget is not None else _stages
            run_async(stages(inputs, endpoints, local_urls, progress=not args.no_progress, work=work))
    except KeyboardInterrupt:
        _say("interrupted: what was stored is kept; run the same command again to resume")
        return 130
    _say("aggregating …")
    with _heartbeat("aggregate", enabled=not args.no_progress):
        analysis, written = pipeline.aggregate_run(inputs)
    print_ranking(analysis)
    if spec.budget is not None:
        print_budget(pipeline.stored_sequential(inputs))
    html = written.get("report.html")
    print(f"report: {_report_location(html) if html else '(not written)'}")
    for name in ("report.md", "report.json"):
        if name in written:
            print(f"        {_report_location(written[name])}")
    _say(f"done in {time.monotonic() - started:.0f}s")
    if html and html.startswith("file://") and not Path(_report_location(html)).exists():
        return 1
    return 0
