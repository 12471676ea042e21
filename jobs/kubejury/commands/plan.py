"""``kubejury plan``: what the operator would deploy for each model and judge, before applying a run.

A dry run of GPU placement (``kubejury.placement.planner``) on a node list saved with
``kubectl get nodes -o json``. It reads the EvalRun spec and the node list only — storage only for
the estimate of a run that reuses earlier runs (below) — so it runs anywhere, offline, in a second. With ``--manifests`` it prints every object the operator
would create for the run, as one YAML stream, rendered by the operator's own planner (found through the
``kubejury.manifests`` entry point: the engine does not import the operator) — or, for a run the
cluster's admission would refuse (the allow-lists of ``--settings``, else of a default install of the
chart), no object and admission's own message on stderr, with a non-zero exit (issue 28). With ``--estimate`` it also prints what the run will
cost (``kubejury.placement.estimate``): tokens, hours and GPU-hours per model and stage, and the
totals; for that it reads a local benchmark file to count the questions (or takes ``--questions``).

For a run with ``spec.reuse.from`` (issue 24), ``--estimate`` runs the reuse step without writing
(:func:`kubejury.pipeline.reuse`, ``write=False``) against the spec's storage, or ``--out`` as
``kubejury run`` has it — the earlier runs are run folders of that root, as in local mode — and
estimates only what the copies leave (:mod:`kubejury.placement.remaining`): it prints, per model
and judge, what would be copied and from which run, the refusals' reasons, the estimate without
reuse and the GPU-hours saved. Storage it cannot read (a cluster-only prefix, no credentials) is
said, and the estimate is then the one without reuse: the plan never fails for it.

With ``--queue NAME`` (issue 25) the estimate is made under a Kueue queue's GPU quota: the
ClusterQueue behind LocalQueue NAME, read read-only through the kubeconfig as ``kubejury status``
reads, or from ``--quota FILE``. :mod:`kubejury.placement.quota` picks the ``maxConcurrentModels``
that fits the nominal quota of the flavours the placements use and says when the first server can
start given what others use now; the estimate is then made again at that concurrency.

With ``spec.budget`` (sequential mode, issue 27) it also gives the expected saving: the estimate
with every question asked against the one with the share of questions the budget's goal used in
the simulation (:data:`kubejury.placement.estimate.SEQUENTIAL_SHARES`), the assumption printed
with it (and in the JSON's ``budget.assumption``). Reuse is left out of that comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kubejury.config.spec import load_evalrun
from kubejury.errors import InputError, KubejuryError
from kubejury.runtimes import runtime_of

if TYPE_CHECKING:
    from kubejury.records.reuse import ReuseDocument

#: Refusals printed one by one under the reuse table; the rest are counted.
LISTED_REFUSALS = 20


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="dry run of GPU placement: what the operator would deploy, per model",
        description=(
            "Print, for every model and judge of an EvalRun, the runtime, quantization, tensor-parallel size and "
            "GPU node pool the operator would choose on the given nodes, or why nothing fits."
        ),
    )
    parser.add_argument("--evalrun", required=True, metavar="FILE", help="EvalRun YAML file")
    parser.add_argument(
        "--nodes",
        required=True,
        metavar="NODES.json",
        help="node list: output of `kubectl get nodes -o json`",
    )
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="also estimate tokens, wall time and GPU-hours per model and stage (roofline; docs/placement.md)",
    )
    parser.add_argument(
        "--questions",
        type=_positive_int,
        metavar="N",
        help="with --estimate: number of questions (default: count them in a local benchmark file)",
    )
    parser.add_argument(
        "--answer-tokens",
        type=_positive_int,
        metavar="N",
        help="with --estimate: expected answer length in tokens (default: 800, capped by each series' maxTokens)",
    )
    parser.add_argument(
        "--verdict-tokens",
        type=_positive_int,
        metavar="N",
        help="with --estimate: expected judge verdict length in tokens (default: 250)",
    )
    parser.add_argument(
        "--out",
        metavar="URI",
        help=(
            "with --estimate, for a run with spec.reuse.from: the output root the earlier runs are in "
            "(a directory or s3://bucket/prefix, as `kubejury run --out`; default spec.storage.uri); "
            "read only, never written"
        ),
    )
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="NAME=URI",
        help=(
            "with --estimate, for a run with spec.reuse.from: where an earlier run is stored when it is "
            "not a run folder of the root (a cluster run's own prefix, <root>/<namespace>/<name>-<uid>, "
            "status.summary.reportUri of that run without its /<name>/report/ tail); repeatable"
        ),
    )
    parser.add_argument(
        "--order",
        choices=("operator", "spec", "longest-first"),
        default="operator",
        help=(
            "with --estimate: bring-up order of models under maxConcurrentModels (default: operator, "
            "the operator's rule: longest first unless the run ends sooner in spec order)"
        ),
    )
    parser.add_argument(
        "--prefetch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            "with --estimate: the cluster downloads weights before GPUs (a model cache claim with "
            "modelCache.prefetch), or not; default: when the run names spec.modelCache"
        ),
    )
    parser.add_argument(
        "--queue",
        metavar="NAME",
        help=(
            "with --estimate: the Kueue LocalQueue the run is admitted by (default with --quota: the spec's "
            "queueName). Reads its ClusterQueue's GPU quota — from the cluster through the kubeconfig, or "
            "from --quota — and says when the run can start and how long it takes under it, with "
            "maxConcurrentModels chosen to fit"
        ),
    )
    parser.add_argument(
        "--quota",
        metavar="FILE",
        help=(
            "with --estimate: the ClusterQueue as YAML or JSON instead of the cluster's, with its status "
            "(flavorsUsage: what others use now) if you have it, and the ResourceFlavors it names (several "
            "YAML documents, or `kubectl get clusterqueue,resourceflavor -o yaml`)"
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="with --queue: kubeconfig file (default: KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument(
        "--context", default=None, help="with --queue: kubeconfig context (default: the current one)"
    )
    parser.add_argument(
        "--manifests",
        action="store_true",
        help=(
            "print, as one YAML stream, every object the operator would create for the run (ConfigMap, "
            "ServiceAccount, Deployments, Services, Jobs), built by the operator's own planner"
        ),
    )
    parser.add_argument(
        "--settings",
        metavar="FILE",
        help=(
            "the operator's settings (KUBEJURY_* variables) as YAML or JSON, e.g. the "
            "chart's settings ConfigMap (`kubectl get cm <release>-kubejury-settings -o yaml`) or its data: "
            "GPU nodes tainted for others are used only when KUBEJURY_GPU_TOLERATIONS tolerates it; with "
            "--manifests, a run its allow-lists (KUBEJURY_ALLOWED_*) refuse is refused here, with admission's message; "
            "default: the operator's defaults under the allow-lists of a default install of the chart"
        ),
    )
    parser.add_argument(
        "--namespace",
        default=None,
        help=(
            "with --manifests or --queue: namespace of the run when the EvalRun file names none (default: "
            "default; with --queue, the kubeconfig context's)"
        ),
    )
    parser.add_argument(
        "--fail-unschedulable",
        action="store_true",
        help="exit with status 1 when any model or judge cannot be placed",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _load_nodes(path: str) -> list[Any]:
    from kubejury.placement.planner import parse_node_list

    data = _read_nodes_document(path)
    try:
        return parse_node_list(data)
    except ValueError as exc:
        raise InputError(path, str(exc)) from exc


def _read_nodes_document(path: str) -> Any:
    """The node list file as parsed JSON (or YAML), before it is read as Nodes."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(path, "file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from exc
    from kubejury.placement.gpu_nodes import read_nodes_document

    return read_nodes_document(text, path)  # bounded: no aliases, runaway nesting or digits


MANIFESTS_ENTRY_POINT_GROUP = "kubejury.manifests"
POLICY_PREFIX = "KUBEJURY_ALLOWED_"  # the operator settings that hold the chart's allow-lists


def operator_hook(group: str, option: str) -> Any:
    """The operator's function registered under the entry point ``group``: the engine never imports
    the operator, the operator package plugs its planner and its admission check in here. ``option``
    names what needs it in the error a user sees when the operator is not installed."""
    from importlib.metadata import entry_points

    found = list(entry_points(group=group))
    if not found:
        raise InputError(
            option,
            "needs the kubejury operator package (kubejury_operator), which registers the "
            f"{group!r} entry point; install kubejury with its operator",
        )
    return found[0].load()


def load_settings(path: str | None) -> dict[str, str] | None:
    """KUBEJURY_* settings from a ConfigMap (its ``data``) or a plain mapping; ``None`` without a file."""
    if path is None:
        return None
    from kubejury.safe_input import load_yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(path, "file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from exc
    document, _ = load_yaml(text, path)  # bounded: no aliases, runaway nesting or digits
    if isinstance(document, dict) and document.get("kind") == "ConfigMap":
        document = document.get("data") or {}
    if not isinstance(document, dict) or not all(isinstance(k, str) for k in document):
        raise InputError(path, "expected a mapping of KUBEJURY_* variables or a ConfigMap")
    if not any(key.startswith(POLICY_PREFIX) for key in document):
        sys.stderr.write(
            f"kubejury: note: {path} sets no {POLICY_PREFIX}* variable, so no allow-list applies, as for an "
            "operator installed without the chart (the chart's settings ConfigMap sets them all)\n"
        )
    return {key: "" if value is None else str(value) for key, value in document.items()}


def _print_manifests(args: argparse.Namespace) -> int:
    render = operator_hook(MANIFESTS_ENTRY_POINT_GROUP, "--manifests")
    settings = load_settings(args.settings)
    objects = render(
        args.evalrun,
        _read_nodes_document(args.nodes),
        settings,
        args.namespace or "default",
        settings_source=args.settings or "--settings",
    )
    if not objects:
        sys.stderr.write(
            "kubejury plan: the operator would create nothing: a model or judge is unschedulable "
            "(run without --manifests to see why)\n"
        )
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, allow_unicode=True, explicit_start=True))
    return 1 if not objects and args.fail_unschedulable else 0


def _chart_tolerations(path: str | None) -> tuple[dict[str, Any], ...]:
    """The chart's GPU tolerations from ``--settings`` (none without it): GPU nodes with any other
    taint than the GPU taint and these are not used, as the operator would not use them."""
    from kubejury.placement.gpu_nodes import chart_tolerations_from_env

    try:
        return tuple(dict(t) for t in chart_tolerations_from_env(load_settings(path) or {}))
    except ValueError as exc:
        raise InputError(path or "--settings", str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from kubejury.placement.planner import plan_placements

    evalrun = load_evalrun(args.evalrun)
    nodes = _load_nodes(args.nodes)
    if args.manifests:
        return _print_manifests(args)
    if (args.queue or args.quota) and not args.estimate:
        raise InputError("--queue" if args.queue else "--quota", "goes with --estimate")
    plans = plan_placements(evalrun.spec, nodes, _chart_tolerations(args.settings))
    estimate, reuse, quota = _estimate(args, evalrun, plans) if args.estimate else (None, None, None)
    sequential = _sequential_estimate(args, evalrun.spec, plans, estimate.workload) if estimate else None
    if args.format == "json":
        document: dict[str, Any] = {
            "models": {name: placement.plan_entry() for name, placement in plans.items()}
        }
        if estimate is not None:
            document["estimate"] = estimate.to_json()
        if reuse is not None:
            document["reuse"] = reuse.to_json(estimate)
        if quota is not None:
            document["quota"] = quota.to_json()
        if sequential is not None:
            document["budget"] = sequential.to_json()
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        _print_table(evalrun.name, plans, len(nodes))
        if estimate is not None:
            _print_estimate(estimate)
        if reuse is not None:
            _print_reuse(reuse, estimate)
        if quota is not None:
            _print_quota(quota, estimate)
        if sequential is not None:
            _print_sequential(sequential)
    unschedulable = [name for name, placement in plans.items() if not placement.schedulable]
    if quota is not None:
        unschedulable += [name for name, _ in quota.fit.uncoverable]
    return 1 if unschedulable and args.fail_unschedulable else 0


def _print_table(run_name: str, plans: dict[str, Any], node_count: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Placement plan for EvalRun {run_name!r} on {node_count} node(s)", show_lines=True)
    for column in ("model", "ok", "runtime", "quant", "TP", "GPU", "node selector"):
        table.add_column(column, no_wrap=column in ("model", "ok", "quant", "TP"))
    table.add_column("reason", ratio=1)
    for name, placement in plans.items():
        selector = ", ".join(f"{k}={v}" for k, v in placement.node_selector.items()) or "-"
        table.add_row(
            name,
            "[green]yes[/green]" if placement.schedulable else "[red]NO[/red]",
            placement.runtime,
            placement.quantization,
            str(placement.tensor_parallel_size),
            placement.gpu_product
            or ("CPU" if placement.schedulable and runtime_of(placement.runtime).in_cluster else "-"),
            selector,
            placement.reason,
        )
    Console(width=max(200, Console().width)).print(table)


def _workload(args: argparse.Namespace, evalrun: Any) -> Any:
    """The questions' count and lengths: ``--questions`` (lengths assumed), else a local benchmark file."""
    from kubejury.pipeline import load_questions
    from kubejury.placement import workload as est

    lengths = {
        "answer_tokens": args.answer_tokens or est.DEFAULT_ANSWER_TOKENS,
        "verdict_tokens": args.verdict_tokens or est.DEFAULT_VERDICT_TOKENS,
    }
    if args.questions:
        return est.Workload(
            questions=args.questions,
            question_tokens=est.DEFAULT_QUESTION_TOKENS,
            reference_tokens=est.DEFAULT_REFERENCE_TOKENS,
            source=f"--questions {args.questions} (question and reference lengths assumed)",
            **lengths,
        )
    uri = evalrun.spec.benchmark.uri
    if "://" in uri and not uri.startswith("file://"):
        raise InputError(
            args.evalrun,
            f"the benchmark is at {uri}; plan stays offline: pass --questions N to estimate",
            field="spec.benchmark.uri",
        )
    benchmark = load_questions(
        evalrun, base_dir=Path(args.evalrun).resolve().parent, spec_source=args.evalrun
    )
    pairs = [(q.question, q.reference) for q in benchmark.questions]
    language = evalrun.spec.judging.language or evalrun.spec.benchmark.language
    return est.Workload.from_texts(pairs, language, source=f"benchmark {uri} (filters applied)", **lengths)


@dataclass(frozen=True)
class _EstimateInputs:
    """What every estimate of the run is made of, read once: the workload and, for a run with
    ``spec.reuse.from``, what reuse copies and what it leaves."""

    workload: Any
    copies: ReuseEstimate | None = None
    remaining: Any = None  # RemainingWork, when the copies could be read


def _estimate_inputs(args: argparse.Namespace, evalrun: Any) -> _EstimateInputs:
    from kubejury.placement.remaining import remaining_from_reuse

    workload = _workload(args, evalrun)
    if not evalrun.spec.reuse.from_runs:
        return _EstimateInputs(workload)
    copies = _what_reuse_copies(args, evalrun)
    if copies.document is None:
        return _EstimateInputs(workload, copies)
    remaining = remaining_from_reuse(
        copies.document, [m.name for m in evalrun.spec.models], [j.name for j in evalrun.spec.judges]
    )
    return _EstimateInputs(workload, copies, remaining)


def _estimate_of(
    args: argparse.Namespace, spec: Any, plans: dict[str, Any], inputs: _EstimateInputs
) -> tuple[Any, ReuseEstimate | None]:
    """The estimate of ``spec`` — of what reuse leaves, for a run with ``spec.reuse.from`` — and,
    for such a run, what reuse copies and the estimate without it."""
    from kubejury.placement.estimate import estimate_run

    order, prefetch = _order_and_prefetch(args, spec, plans)
    without = estimate_run(spec, plans, inputs.workload, order=order, prefetch=prefetch)
    if inputs.copies is None or inputs.remaining is None:
        return without, inputs.copies
    estimate = estimate_run(
        spec, plans, inputs.workload, order=order, remaining=inputs.remaining, prefetch=prefetch
    )
    return estimate, dataclasses.replace(inputs.copies, without=without, per_model=inputs.remaining.per_model)


def _order_and_prefetch(args: argparse.Namespace, spec: Any, plans: dict[str, Any]) -> tuple[Any, bool]:
    """The bring-up order (``--order``) and whether weights are prefetched (``--prefetch``)."""
    from kubejury.placement.estimate import bringup_plan

    order = bringup_plan(spec, plans)[0] if args.order == "operator" else args.order
    chosen = getattr(args, "prefetch", None)
    return order, spec.model_cache is not None if chosen is None else bool(chosen)


@dataclass(frozen=True)
class SequentialEstimate:
    """A budgeted run's estimate under a stated share of questions used, against asking them all."""

    assumption: Any  # SequentialAssumption
    full: Any  # RunEstimate, every question asked
    budgeted: Any  # RunEstimate, the assumed share asked

    def to_json(self) -> dict[str, Any]:
        full, budgeted = self.full, self.budgeted
        return {
            "assumed_share_of_questions": round(self.assumption.used, 4),
            "assumption": self.assumption.why,
            "all_questions": full.to_json()["totals"],
            "budgeted": budgeted.to_json()["totals"],
            "saved": {
                "gpu_hours_busy": round(full.gpu_hours_busy - budgeted.gpu_hours_busy, 3),
                "gpu_hours_held": round(full.gpu_hours_held - budgeted.gpu_hours_held, 3),
                "wall_hours": round((full.makespan_seconds - budgeted.makespan_seconds) / 3600, 3),
            },
        }


def _sequential_estimate(
    args: argparse.Namespace, spec: Any, plans: dict[str, Any], workload: Any
) -> SequentialEstimate | None:
    """``spec.budget``: the run with every question asked and with the assumed share asked
    (:func:`kubejury.placement.estimate.sequential_assumption`); reuse is left out of both."""
    from kubejury.placement.estimate import estimate_run, sequential_assumption, sequential_remaining

    assumption = sequential_assumption(spec, workload.questions)
    if assumption is None:
        return None
    order, prefetch = _order_and_prefetch(args, spec, plans)
    full = estimate_run(spec, plans, workload, order=order, prefetch=prefetch)
    remaining = sequential_remaining(
        assumption,
        workload.questions * len(spec.series),
        [m.name for m in spec.models],
        [j.name for j in spec.judges],
    )
    budgeted = estimate_run(spec, plans, workload, order=order, remaining=remaining, prefetch=prefetch)
    return SequentialEstimate(assumption, full, budgeted)


def _print_sequential(sequential: SequentialEstimate) -> None:
    saved = sequential.to_json()["saved"]
    full, budgeted = sequential.full, sequential.budgeted
    busy = full.gpu_hours_busy
    share = saved["gpu_hours_busy"] / busy if busy else 0.0
    print(
        f"spec.budget: expected saving {saved['gpu_hours_busy']:.2f} GPU-hours busy ({share:.0%}; "
        f"{full.gpu_hours_busy:.2f} → {budgeted.gpu_hours_busy:.2f}), {saved['gpu_hours_held']:.2f} held, "
        f"{saved['wall_hours']:.2f} wall hours, assuming the models answer "
        f"{sequential.assumption.used:.0%} of the questions asking all would make"
    )
    print(f"  assumption: {sequential.assumption.why}")


def _estimate(
    args: argparse.Namespace, evalrun: Any, plans: dict[str, Any]
) -> tuple[Any, ReuseEstimate | None, QuotaEstimate | None]:
    """The run's estimate and what reuse copies (see :func:`_estimate_of`); with ``--queue`` or
    ``--quota``, both at the ``maxConcurrentModels`` the queue's quota fits, and what the quota allows."""
    inputs = _estimate_inputs(args, evalrun)
    estimate, reuse = _estimate_of(args, evalrun.spec, plans, inputs)
    if not (args.queue or args.quota):
        return estimate, reuse, None
    from kubejury.placement.quota import fit_quota

    quota = _load_quota(args, evalrun)
    work = {(s.name, s.stage): s.requests > 0 for s in estimate.stages}
    fit = fit_quota(evalrun.spec, plans, quota, work, estimate.order)

    def at(concurrency: int) -> tuple[Any, ReuseEstimate | None]:
        if concurrency == evalrun.spec.max_concurrent_models:
            return estimate, reuse
        spec = evalrun.spec.model_copy(update={"max_concurrent_models": concurrency})
        return _estimate_of(args, spec, plans, inputs)

    chosen, chosen_reuse = at(fit.max_concurrent_models)
    if chosen is not estimate:  # the bring-up order, and so the first server, may differ
        fit = fit_quota(evalrun.spec, plans, quota, work, chosen.order)
    short = fit.can_run and fit.wait is None and fit.now < fit.max_concurrent_models
    now = at(max(1, fit.now))[0] if short else None
    return chosen, chosen_reuse, QuotaEstimate(fit, estimate, now)


@dataclass(frozen=True)
class ReuseEstimate:
    """What the reuse step would copy for the planned run (``document``; ``None`` with the reason
    in ``unreadable`` when the storage could not be read) and the estimate without reuse."""

    sources: tuple[str, ...]
    storage: str
    document: ReuseDocument | None = None
    unreadable: str | None = None
    without: Any = None  # the RunEstimate of the whole run, nothing copied
    per_model: int = 0  # answers one model makes over every series (and judgments per judge)

    def saved(self, estimate: Any) -> dict[str, float]:
        """GPU-hours (busy and held) and wall hours the copies save, against ``estimate``."""
        if self.without is None or self.document is None:
            return {"gpu_hours_busy": 0.0, "gpu_hours_held": 0.0, "wall_hours": 0.0}
        return {
            "gpu_hours_busy": round(self.without.gpu_hours_busy - estimate.gpu_hours_busy, 3),
            "gpu_hours_held": round(self.without.gpu_hours_held - estimate.gpu_hours_held, 3),
            "wall_hours": round((self.without.makespan_seconds - estimate.makespan_seconds) / 3600, 3),
        }

    def to_json(self, estimate: Any) -> dict[str, Any]:
        from kubejury.records.reuse import report_section

        section = (
            report_section(self.document)
            if self.document is not None
            else {
                "sources": list(self.sources),
                "models": {},
                "judges": {},
                "refused": [],
                "missing_sources": [],
            }
        )
        return {
            **section,
            "storage": self.storage,
            "unreadable": self.unreadable,
            "without_reuse": None if self.without is None else self.without.to_json()["totals"],
            "saved": self.saved(estimate),
        }


def _what_reuse_copies(args: argparse.Namespace, evalrun: Any) -> ReuseEstimate:
    """The reuse step run without writing on the spec's storage (or ``--out``): never raises, a
    storage or benchmark that cannot be read comes back as ``unreadable``."""
    from kubejury import pipeline

    sources = tuple(evalrun.spec.reuse.from_runs)
    uri = args.out or evalrun.spec.storage.uri
    try:
        inputs = pipeline.load_inputs(args.evalrun, out=args.out)
        document = pipeline.reuse(inputs, _plan_sources(inputs, args.source), write=False)
    except Exception as exc:  # storage raises OSError, KubejuryError or botocore's: all are "cannot read"
        return ReuseEstimate(sources, uri, unreadable=f"{type(exc).__name__}: {exc}")
    return ReuseEstimate(sources, inputs.storage.uri_for("").rstrip("/") or uri, document=document)


def _plan_sources(inputs: Any, given: list[str]) -> list[Any]:
    """``spec.reuse.from`` as run folders of the root, except those ``--source NAME=URI`` places."""
    from kubejury import pipeline

    placed = dict(item.partition("=")[::2] for item in given)
    return [
        pipeline.source_at(inputs, name, placed.get(name) or None)
        for name in inputs.evalrun.spec.reuse.from_runs
    ]


@dataclass(frozen=True)
class QuotaEstimate:
    """What a Kueue queue's quota allows the run (:class:`kubejury.placement.quota.QuotaFit`), the
    estimate at the spec's own ``maxConcurrentModels`` and, when the GPUs free now hold fewer
    models than the quota does, the estimate if no other workload frees any."""

    fit: Any  # QuotaFit
    spec_estimate: Any  # RunEstimate at spec.maxConcurrentModels
    now_estimate: Any = None  # RunEstimate at what the free GPUs hold, or None

    def to_json(self) -> dict[str, Any]:
        totals = self.spec_estimate.to_json()["totals"]
        return {
            **self.fit.to_json(),
            "spec_wall_hours": totals["wall_hours"],
            "if_nothing_is_freed": None
            if self.now_estimate is None
            else {
                "max_concurrent_models": self.now_estimate.max_concurrent_models,
                "wall_hours": self.now_estimate.to_json()["totals"]["wall_hours"],
            },
        }


KUEUE_VERSIONS = (
    "v1beta2",
    "v1beta1",
)  # v0.17.0 stores v1beta2 and still serves v1beta1; releases before v1beta2 serve only it


def _load_quota(args: argparse.Namespace, evalrun: Any) -> Any:
    """The GPU quota behind ``--queue`` (or the spec's queueName): from ``--quota FILE``, else from
    the cluster through the kubeconfig."""
    from kubejury.placement.quota import parse_quota

    name = args.queue or getattr(evalrun.spec, "queue_name", None)
    if args.quota:
        documents, source = _read_quota_file(args.quota), args.quota
    elif name:
        documents, source = _read_quota_from_cluster(args, evalrun, name), f"LocalQueue {name}"
    else:
        raise InputError(
            "--quota", "give the LocalQueue with --queue NAME, or a ClusterQueue file with --quota"
        )
    try:
        return parse_quota(documents, name)
    except ValueError as exc:
        raise InputError(source, str(exc)) from None


def _read_quota_file(path: str) -> list[Any]:
    """The documents of a ``--quota`` file: JSON (one object or a List) or YAML, several documents allowed."""
    import re

    from kubejury.safe_input import load_yaml, loads_json

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(path, "file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from exc
    try:
        return [loads_json(text, path)]
    except json.JSONDecodeError:
        pass
    parts = re.split(r"^---[ \t]*(?:#.*)?$", text, flags=re.MULTILINE)
    return [load_yaml(part, path)[0] for part in parts if part.strip()]  # bounded, as every input


def _read_quota_from_cluster(args: argparse.Namespace, evalrun: Any, name: str) -> list[Any]:
    """LocalQueue ``name`` of the run's namespace, its ClusterQueue and the ResourceFlavors, read
    with the kubeconfig as ``kubejury status`` reads (read-only: get and list)."""
    from kubejury.commands.status import _api

    namespace = args.namespace or evalrun.metadata.namespace
    api, namespace = _api(
        argparse.Namespace(kubeconfig=args.kubeconfig, context=args.context, namespace=namespace)
    )
    for version in KUEUE_VERSIONS:
        local = _kueue_get(api, version, "localqueues", name, namespace)
        if local is not None:
            break
    else:
        raise KubejuryError(
            f"LocalQueue {namespace}/{name} not found (is Kueue installed? `kubectl get localqueues -n {namespace}`)"
        )
    target = str((local.get("spec") or {}).get("clusterQueue", ""))
    queue = _kueue_get(api, version, "clusterqueues", target, None)
    if queue is None:
        raise KubejuryError(
            f"LocalQueue {namespace}/{name} points at ClusterQueue {target!r}, which does not exist"
        )
    flavors = _kueue_call(
        api.list_cluster_custom_object, "resourceflavors", "kueue.x-k8s.io", version, "resourceflavors"
    )
    return [local, queue, *((flavors or {}).get("items") or [])]


def _kueue_get(
    api: Any, version: str, plural: str, name: str, namespace: str | None
) -> dict[str, Any] | None:
    """One Kueue object, ``None`` when it (or this API version) does not exist."""
    if namespace is None:
        return _kueue_call(api.get_cluster_custom_object, plural, "kueue.x-k8s.io", version, plural, name)
    return _kueue_call(
        api.get_namespaced_custom_object, plural, "kueue.x-k8s.io", version, namespace, plural, name
    )


def _kueue_call(method: Any, plural: str, *call: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] = method(*call)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise KubejuryError(
            f"reading Kueue {plural} failed: {exc.status} {exc.reason} (plan needs get on localqueues and "
            "clusterqueues and list on resourceflavors, all read-only)"
        ) from exc
    return found


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _print_estimate(estimate: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    workload = estimate.workload
    table = Table(
        title=(
            f"Estimate: {workload.questions} question(s) — {workload.source}; "
            f"answers ~{workload.answer_tokens} tokens, verdicts ~{workload.verdict_tokens}"
        ),
        show_lines=False,
    )
    for column in (
        "model",
        "stage",
        "GPUs",
        "prompt tokens",
        "output tokens",
        "batch",
        "bound",
        "hours",
        "GPU-h",
    ):
        table.add_column(
            column,
            no_wrap=True,
            justify="right" if "tokens" in column or column in ("batch", "hours", "GPU-h") else "left",
        )
    table.add_column("note", ratio=1)
    for stage in estimate.stages:
        gpus = (
            "-"
            if stage.device is None
            else (f"{stage.gpus} × {stage.device}" if stage.gpus else stage.device)
        )
        table.add_row(
            stage.name,
            stage.stage,
            gpus,
            f"{stage.prompt_tokens:,}",
            f"{stage.output_tokens:,}",
            "-" if stage.batch is None else str(stage.batch),
            stage.bound or "-",
            _hours(None if stage.seconds is None else stage.seconds / 3600),
            _hours(stage.gpu_hours),
            stage.note,
        )
    console = Console(width=max(200, Console().width))
    console.print(table)
    if estimate.servers:
        servers = Table(title="Model servers in the schedule (hours from the start of the run)")
        for column in ("server", "GPUs", "up", "ready", "down", "held GPU-h"):
            servers.add_column(column, justify="left" if column == "server" else "right")
        for window in estimate.servers:
            servers.add_row(
                window.name,
                str(window.gpus),
                f"{window.start / 3600:.2f}",
                f"{window.ready / 3600:.2f}",
                f"{window.end / 3600:.2f}",
                f"{window.held_gpu_hours:.2f}",
            )
        console.print(servers)
    data = estimate.to_json()["totals"]
    console.print(
        f"Total: {data['prompt_tokens']:,} prompt + {data['output_tokens']:,} output tokens; "
        f"{data['gpu_hours_busy']:.2f} GPU-hours busy, {data['gpu_hours_held']:.2f} GPU-hours held "
        f"(servers up, bring-up and waits included); all answers in {data['answers_done_hours']:.2f} h, "
        f"wall time {data['wall_hours']:.2f} h with "
        f"maxConcurrentModels={estimate.max_concurrent_models}, bring-up order: {estimate.assumptions['bringup_order']}."
    )
    console.print(f"Weights: {estimate.assumptions.get('prefetch', '')}.")
    if estimate.not_estimated:
        console.print("Not estimated: " + ", ".join(estimate.not_estimated) + ".")
    console.print(
        "A roofline estimate: see docs/placement.md for the model and its measured error against published vLLM runs."
    )


def _print_reuse(reuse: ReuseEstimate, estimate: Any) -> None:
    """What reuse would copy, per model and judge, the refusals, and what it saves."""
    from rich.console import Console

    console = Console(width=max(200, Console().width))
    froms = ", ".join(reuse.sources)
    if reuse.document is None:
        console.print(
            f"Reuse from {froms}: cannot read the benchmark or the storage {reuse.storage} ({reuse.unreadable}); "
            "the estimate above is without reuse (every answer generated, every judgment made)."
        )
        return
    if len(reuse.document.missing_sources) == len(reuse.sources):
        console.print(
            f"No run named {froms} is stored in {reuse.storage}: plan reads earlier runs as run folders of "
            "that root (<root>/<name>/, as `kubejury run` writes them); give --out the root they are in."
        )
    console.print(_reuse_table(reuse, reuse.document))
    for line in _refusal_lines(reuse.document):
        console.print(line, markup=False)
    before = reuse.without.to_json()["totals"]
    saved = reuse.saved(estimate)
    console.print(
        f"Without reuse: {before['gpu_hours_busy']:.2f} GPU-hours busy, {before['gpu_hours_held']:.2f} GPU-hours "
        f"held, wall time {before['wall_hours']:.2f} h. Reuse saves {saved['gpu_hours_busy']:.2f} GPU-hours busy, "
        f"{saved['gpu_hours_held']:.2f} GPU-hours held and {saved['wall_hours']:.2f} h of wall time."
    )


def _reuse_table(reuse: ReuseEstimate, document: ReuseDocument) -> Any:
    """Per model and judge, over every series: records copied, of how many, and from which run."""
    from rich.table import Table

    from kubejury.records.reuse import report_section

    section = report_section(document)
    table = Table(title=f"Reuse from {', '.join(reuse.sources)} in {reuse.storage} (nothing written)")
    for column in ("model / judge", "stage", "copied", "of", "from"):
        table.add_column(column, justify="right" if column in ("copied", "of") else "left")
    rows = [("generation", name, entry, reuse.per_model) for name, entry in section["models"].items()]
    judged = reuse.per_model * len(section["models"])
    rows += [("judging", name, entry, judged) for name, entry in section["judges"].items()]
    for stage, name, entry, full in rows:
        runs = ", ".join(f"{run}: {count:,}" for run, count in sorted(entry["from_runs"].items())) or "-"
        table.add_row(name, stage, f"{entry['reused']:,}", f"{full:,}", runs)
    return table


def _refusal_lines(document: ReuseDocument) -> list[str]:
    """Why records were not copied, one line each up to :data:`LISTED_REFUSALS`, then a count."""
    from kubejury.records.reuse import report_section

    section = report_section(document)
    reasons = [f"  not copied from {r['source']}: {r['reason']}" for r in section["missing_sources"]]
    reasons += [f"  refused from {r['source']}: {r['reason']}" for r in section["refused"]]
    shown = reasons[:LISTED_REFUSALS]
    if len(reasons) > LISTED_REFUSALS:
        shown.append(f"  … and {len(reasons) - LISTED_REFUSALS} more (--format json lists them all)")
    return shown


def _print_quota(quota: QuotaEstimate, estimate: Any) -> None:
    from rich.console import Console

    console = Console(width=max(200, Console().width))
    for line in quota_lines(quota, estimate):
        console.print(line, markup=False, highlight=False)


def _gpus(need: Mapping[str, int], flavors: Any) -> str:
    nominal = {f.name: f.nominal for f in flavors}
    return ", ".join(f"{n} of {name} (quota {nominal.get(name, 0)})" for name, n in need.items()) or "none"


def quota_lines(quota: QuotaEstimate, estimate: Any) -> list[str]:
    """What ``plan --estimate --queue`` prints after the estimate: the queue's flavours and this
    run's servers on them, the maxConcurrentModels that fits, when the run starts and how long it takes."""
    fit, q = quota.fit, quota.fit.quota
    lines = [
        f"Quota: {'LocalQueue ' + q.local_queue + ' → ' if q.local_queue else ''}ClusterQueue {q.cluster_queue}, nvidia.com/gpu"
    ]
    rows = [
        (
            "flavour",
            "nominal",
            "in use",
            "free",
            "GPUs of (nodeLabels)",
            "servers of this run that may use it",
        )
    ]
    for f in q.flavors:
        users = [
            f"{s.name} ({s.gpus}{'' if s.role == 'model' else ', ' + s.role})"
            for s in fit.servers
            if f in q.matching(s.placement)
        ]
        rows.append(
            (f.name, str(f.nominal), str(f.used), str(f.free), f.labels_text(), ", ".join(users) or "-")
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += [f"  not coverable by this queue: {name}: {why}" for name, why in fit.uncoverable]
    wall = estimate.to_json()["totals"]
    chosen = fit.max_concurrent_models
    spec_value = fit.spec_max_concurrent_models
    said = "as the spec says" if chosen == spec_value else f"the spec says {spec_value}"
    if not fit.servers:
        lines.append("The run's servers request no nvidia.com/gpu: the GPU quota does not limit it.")
    elif len(fit.uncoverable) == len(fit.servers):
        pass  # no server this queue admits: nothing to fit
    elif fit.fits:
        more = (
            ""
            if fit.need_one_more is None
            else f"; {chosen + 1} would need {_gpus(fit.need_one_more, q.flavors)}"
        )
        lines.append(
            f"maxConcurrentModels={chosen} fits the quota ({said}): {chosen} evaluated model(s) and every judge's "
            f"server at once need at most {_gpus(fit.need, q.flavors)}{more}."
        )
    else:
        lines.append(
            f"maxConcurrentModels={chosen} ({said}): even one evaluated model with every judge's server needs "
            f"{_gpus(fit.need, q.flavors)}; the servers take turns (Kueue keeps the next one gated until GPUs are "
            "freed), so the run takes longer than estimated."
        )
    lines += _start_lines(quota, wall)
    spec_hours = quota.spec_estimate.to_json()["totals"]["wall_hours"]
    if chosen < spec_value:
        lines.append(
            f"With the spec's maxConcurrentModels={spec_value} the servers would ask for more than the quota at once: "
            f"Kueue would keep some gated (estimated {spec_hours:.2f} h without the quota); set "
            "maxConcurrentModels to the value above."
        )
    elif chosen > spec_value:
        lines.append(f"With the spec's maxConcurrentModels={spec_value} the run takes {spec_hours:.2f} h.")
    lines += [f"Note: {note}." for note in fit.notes]
    return lines


def _start_lines(quota: QuotaEstimate, wall: Mapping[str, Any]) -> list[str]:
    """When the run can start, and how long it takes from then."""
    fit = quota.fit
    takes = f"the run takes {wall['wall_hours']:.2f} h (all answers in {wall['answers_done_hours']:.2f} h)"
    if fit.uncoverable:
        names = ", ".join(name for name, _ in fit.uncoverable)
        return [
            f"Start: the run cannot complete under this queue: Kueue never admits the servers of {names} "
            f"(above); the other servers run, and the estimate ({wall['wall_hours']:.2f} h) assumes all do."
        ]
    if fit.first is None:
        return [f"Start: now; {takes}."]
    if fit.wait is not None:
        flavor, gpus = fit.wait
        used = next(f for f in fit.quota.flavors if f.name == flavor)
        return [
            f"Start: waits for {gpus} GPU(s) of flavour {flavor} to be freed ({used.used} of {used.nominal} in use by "
            f"other workloads; the first server, {fit.first.name}, needs {fit.first.gpus}). When they are freed "
            f"cannot be known from the queue: other workloads hold them. From that moment {takes}."
        ]
    lines = [
        f"Start: now (the first server, {fit.first.name}, needs {fit.first.gpus} GPU(s) and they are free); {takes}."
    ]
    if quota.now_estimate is not None:
        now = quota.now_estimate
        hours = now.to_json()["totals"]["wall_hours"]
        held = (
            f"maxConcurrentModels={fit.now} only"
            if fit.now
            else "the first server but not one model with every judge's server (they take turns)"
        )
        lines.append(
            f"The GPUs free now hold {held}: until other workloads free more, fewer servers run at once — "
            f"{hours:.2f} h if none are freed{'' if fit.now else ' (at maxConcurrentModels=1, optimistic)'}."
        )
    return lines
