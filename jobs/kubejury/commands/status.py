"""``kubejury status NAME [-n NAMESPACE] [--watch]``: one EvalRun's story, read through the kubeconfig.

Why this module exists: ``kubectl get evalrun`` shows a phase and a counter; a user waiting for
a run wants to know what it is doing, what it waits for and, at the end, who won. This command
reads the EvalRun from the API server and renders its ``status``
(:class:`kubejury.records.run_status.RunStatus`): phase, conditions, progress per stage and
per model or judge, placement and, once the run succeeded, the ranking. ``--watch`` re-renders on every
change until the run finishes.

The status keeps a placement's reason code and facts; why the planner chose it (the prose) is in the
run's ``Placement`` Events (:func:`kubejury.records.placement.placement_notes` reads them). This
command lists those Events too, and shows the code's meaning where none is left (Events expire
after an hour by default) — or the prose itself in a status written before the Events carried it.

The API is reached with the official ``kubernetes`` client, so every kubeconfig ``kubectl``
accepts works here too — including users that are exec plugins (EKS, GKE, OIDC helpers). The
rendering (:func:`render`) is pure and unit-tested from status dicts; the API calls are in
:func:`_read` and :func:`_watch` only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubejury.config.spec import API_GROUP, API_VERSION
from kubejury.errors import KubejuryError
from kubejury.records.placement import PLACEMENT_EVENT_REASON, Placement, placement_notes
from kubejury.records.run_status import BudgetStatus, QueueStatus, ReuseStatus, RunStatus
from kubejury.records.timestamps import now_time, seconds_between
from kubejury.runtimes import recorded_runtime

PLURAL = "evalruns"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = subparsers.add_parser(
        name,
        help="show an EvalRun's phase, conditions, progress, placement and ranking from the cluster",
        description=(
            "Read an EvalRun through the kubeconfig (KUBECONFIG, ~/.kube/config or --kubeconfig; exec-plugin "
            "users work) and show what it is doing: phase, conditions, progress per stage, where each model "
            "runs and, once done, the ranking."
        ),
    )
    parser.add_argument("name", metavar="NAME", help="the EvalRun's name")
    parser.add_argument(
        "-n", "--namespace", default=None, help="namespace (default: the kubeconfig context's)"
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)"
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "-w", "--watch", action="store_true", help="re-render on every change until the run finishes"
    )


# ------------------------------------------------------------------------------------ rendering


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _queue_lines(queue: QueueStatus, now: str) -> list[str]:
    """``status.queue``: the Kueue queues the run waits in, and how long it waited (closed and open)."""
    behind = f" → ClusterQueue {queue.cluster_queue}" if queue.cluster_queue else ""
    waited = queue.waited_seconds
    open_since = ""
    if queue.waiting_since:
        waited += seconds_between(queue.waiting_since, now)
        open_since = f", waiting since {queue.waiting_since}"
    return [
        f"Kueue: LocalQueue {queue.local_queue}{behind}",
        f"  waited for quota {waited:.0f} s{open_since}",
    ]


def _reuse_lines(reuse: ReuseStatus) -> list[str]:
    """``status.reuse``: per model and judge, records copied and from which run; what was refused."""
    lines = [f"Reused from {', '.join(reuse.sources) or '—'}"]
    if not reuse.copied:
        lines.append(f"  {reuse.note or 'not copied yet: the reuse Job runs first'}")
        return lines
    rows = [
        (
            name,
            role,
            str(r.reused),
            ", ".join(f"{n} from {run}" for run, n in sorted(r.from_runs.items())) or "—",
        )
        for role, records in (("model", reuse.models), ("judge", reuse.judges))
        for name, r in records.items()
    ]
    lines += _table(("name", "role", "copied", "from"), rows)
    lines += [f"  refused: {line}" for line in reuse.refused]
    return lines


def _budget_lines(budget: BudgetStatus) -> list[str]:
    """``status.budget``: per model the questions used, its look and why it stopped."""
    looks = f"{budget.looks_done}/{budget.looks}" if budget.looks is not None else "none yet"
    lines = [f"Sequential budget ({budget.goal}), looks done {looks}"]
    rows = [
        (name, m.status, str(m.questions), str(m.look), m.reason or "—") for name, m in budget.models.items()
    ]
    return lines + (_table(("model", "status", "questions", "look", "why"), rows) if rows else [])


def _where(p: Placement) -> str:
    """Where a placed server runs, as the table shows it: its GPUs, the CPU or an external endpoint.

    A runtime the registry does not know (a hand-edited or older status) is shown as a server the
    operator runs, as every name but ``openai`` always was."""
    if p.gpu_product:
        return f"{p.tensor_parallel_size}× {p.gpu_product}"
    runtime = recorded_runtime(p.runtime)
    return "CPU" if runtime is None or runtime.in_cluster else "external"


def _percent(done: int, total: int) -> str:
    return f"{100.0 * done / total:5.1f}%" if total else "     —"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return lines


def _why(p: Placement, notes: Mapping[str, str]) -> str:
    """The placement's reason: the planner's prose from its Event, the prose of an older status, or
    what its code says."""
    return notes.get(p.name) or p.reason or p.summary()


def render(evalrun: Mapping[str, Any], notes: Mapping[str, str] | None = None) -> str:
    """The text ``kubejury status`` prints for one EvalRun object (as the API returns it);
    ``notes``: the placement prose per name from its Events (:func:`_placement_notes`)."""
    meta = evalrun.get("metadata") or {}
    name, namespace = str(meta.get("name", "?")), str(meta.get("namespace", "?"))
    generation = int(meta.get("generation") or 0)
    status = RunStatus.from_json(evalrun.get("status"))
    spec = evalrun.get("spec") or {}
    lines = [f"EvalRun {namespace}/{name}   phase: {status.phase}   progress: {status.progress or '—'}"]
    when = []
    if status.started_at:
        when.append(f"started {status.started_at}")
    if status.completed_at:
        when.append(f"completed {status.completed_at}")
    if not status.written:
        when.append("not reconciled yet: is the operator running and watching this namespace?")
    elif generation and status.observed_generation and status.observed_generation < generation:
        when.append(f"status is of generation {status.observed_generation}, spec is at {generation}")
    if when:
        lines.append("  " + "; ".join(when))

    lines += ["", "Stages"]
    if status.stages:
        rows: list[tuple[str, ...]] = []
        for s in status.stages:
            jobs = f"{s.jobs_done}/{s.jobs}" if s.jobs else "—"
            rows.append((s.stage, f"{s.done}/{s.total}", _percent(s.done, s.total), jobs))
        lines += _table(("stage", "items", "done", "jobs"), rows)
    else:
        lines.append("  none reported yet")

    per_name = [s for s in status.stages if s.by_name]
    if per_name:
        lines += ["", "Per model and judge"]
        names = list(dict.fromkeys(n for s in per_name for n in s.by_name))
        rows = []
        for who in names:
            cells = []
            for s in per_name:
                done, total = s.by_name.get(who, (0, 0))
                cells.append(f"{done}/{total}" if who in s.by_name else "—")
            rows.append((who, *cells))
        lines += _table(("name", *(s.stage for s in per_name)), rows)

    if status.queue is not None:
        lines += ["", *_queue_lines(status.queue, status.completed_at or now_time())]
    if status.reuse is not None:
        lines += ["", *_reuse_lines(status.reuse)]
    if status.budget is not None:
        lines += ["", *_budget_lines(status.budget)]

    lines += ["", "Models and judges (placement)"]
    judges = {str(j.get("name")) for j in spec.get("judges") or [] if isinstance(j, Mapping)}
    models = {str(m.get("name")) for m in spec.get("models") or [] if isinstance(m, Mapping)}
    if status.placement:
        rows = []
        for p in status.placement:
            role = (
                "+".join(r for r, names in (("model", models), ("judge", judges)) if p.name in names) or "—"
            )
            where = _where(p)
            fits = "yes" if p.schedulable else "NO"
            rows.append((p.name, role, p.runtime, p.quantization or "—", where, fits, _why(p, notes or {})))
        lines += _table(("name", "role", "runtime", "quant", "where", "fits", "why"), rows)
    else:
        lines.append("  not placed yet")

    if status.gpu.servers:
        now = status.completed_at or now_time()
        lines += ["", "GPU time (held = Ready × GPUs; used = its Jobs running × GPUs)"]
        rows = [
            (
                g.name,
                g.role,
                str(g.gpus),
                f"{g.held_at(now) / 3600:.3f}",
                f"{g.used_at(now) / 3600:.3f}",
                "up" if g.ready_since else "down",
            )
            for g in status.gpu.servers
        ]
        lines += _table(("server", "role", "GPUs", "held GPU-h", "used GPU-h", "server"), rows)
        idle = status.gpu.idle_share_at(now)
        if idle is not None:
            lines.append(f"  held idle so far: {idle:.1%}")

    lines += ["", "Conditions"]
    if status.conditions:
        rows = [
            (
                c.type,
                c.status,
                c.reason,
                c.message
                + (
                    f" (since {c.last_transition_time})"
                    if c.status == "True" and c.last_transition_time
                    else ""
                ),
            )
            for c in status.conditions
        ]
        lines += _table(("type", "status", "reason", "message"), rows)
    else:
        lines.append("  none yet")

    summary = status.summary
    if summary is not None and summary.ranking:
        lines += ["", f"Ranking (series {summary.primary_series or '—'})"]
        ranking_rows: list[tuple[str, ...]] = [
            (
                str(r.rank),
                r.model,
                _number(r.weighted),
                f"[{_number(r.weighted_ci[0])}, {_number(r.weighted_ci[1])}]",
                _number(r.degradation),
                _number(r.sigma),
                r.tier or "—",
            )
            for r in summary.ranking
        ]
        lines += _table(("rank", "model", "W", "95% CI", "D", "σ", "tier"), ranking_rows)
        if summary.domain_leaders:
            lines.append(
                "  domain leaders: "
                + ", ".join(f"{d}: {m}" for d, m in sorted(summary.domain_leaders.items()))
            )
        if summary.comparisons:
            lines.append("  equivalence (ΔW = W(a) − W(b) with its 90% interval; TOST at α = 5%):")
            lines += [
                f"    {c.a} − {c.b}: {'—' if c.difference is None else f'{c.difference:+.3f}'} "
                f"[{_number(c.ci90[0])}, {_number(c.ci90[1])}] within ±{_number(c.margin, 2)}: "
                f"{c.verdict or 'no verdict'}"
                for c in summary.comparisons
            ]
        if summary.report_uri:
            lines.append(f"  report: {summary.report_uri}")
    elif status.phase == "Succeeded":
        lines += ["", "Ranking: not in status (the operator could not read the report summary)"]
    elif status.phase == "Failed":
        failed = next((c for c in status.conditions if c.type == "Failed" and c.status == "True"), None)
        lines += ["", f"Failed: {failed.message if failed else 'see the conditions above'}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- the API side


def _api(args: argparse.Namespace) -> tuple[Any, str]:
    """A CustomObjectsApi and the namespace (flag, else the context's, else ``default``)."""
    try:
        from kubernetes import client, config
    except ImportError as exc:  # pragma: no cover - a dependency of the distribution
        raise KubejuryError("the 'kubernetes' package is needed for kubejury status") from exc
    try:
        config.load_kube_config(config_file=args.kubeconfig, context=args.context)
        contexts, active = config.list_kube_config_contexts(config_file=args.kubeconfig)
    except (config.ConfigException, OSError) as exc:
        raise KubejuryError(f"cannot load kubeconfig {args.kubeconfig or '(default)'}: {exc}") from exc
    if args.context:
        active = next((c for c in contexts if c.get("name") == args.context), active)
    namespace = args.namespace or (active or {}).get("context", {}).get("namespace") or "default"
    return client.CustomObjectsApi(), str(namespace)


def _api_error(exc: Exception, name: str, namespace: str) -> KubejuryError:
    status = getattr(exc, "status", None)
    if status == 404:
        return KubejuryError(f"EvalRun {namespace}/{name} not found (or the EvalRun CRD is not installed)")
    if status in (401, 403):
        reason = getattr(exc, "reason", "")
        return KubejuryError(f"the API server refused to show EvalRun {namespace}/{name}: {status} {reason}")
    return KubejuryError(f"reading EvalRun {namespace}/{name} failed: {exc}")


def _read(api: Any, name: str, namespace: str) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException

    try:
        obj: dict[str, Any] = api.get_namespaced_custom_object(
            API_GROUP, API_VERSION, namespace, PLURAL, name
        )
    except ApiException as exc:
        raise _api_error(exc, name, namespace) from exc
    return obj


def _placement_notes(name: str, namespace: str) -> dict[str, str]:
    """The placement prose per model and judge from the run's ``Placement`` Events, oldest first;
    empty when none is left or Events may not be read (the table then shows the codes)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        found = client.CoreV1Api().list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind=EvalRun,reason={PLACEMENT_EVENT_REASON}",
        )
    except (ApiException, OSError, ValueError):
        return {}
    events = sorted(found.items or [], key=lambda e: str(e.last_timestamp or e.event_time or ""))
    return placement_notes(str(e.message or "") for e in events)


def _watch(api: Any, name: str, namespace: str, resource_version: str) -> Iterator[dict[str, Any]]:
    """Every new version of the EvalRun, until it is deleted (a watch that times out is renewed)."""
    from kubernetes import watch
    from kubernetes.client.exceptions import ApiException

    while True:
        stream = watch.Watch().stream(
            api.list_namespaced_custom_object,
            API_GROUP,
            API_VERSION,
            namespace,
            PLURAL,
            field_selector=f"metadata.name={name}",
            resource_version=resource_version,
            timeout_seconds=300,
        )
        try:
            for event in stream:
                obj = event["object"]
                if event["type"] == "DELETED":
                    return
                if event["type"] in ("ADDED", "MODIFIED") and isinstance(obj, dict):
                    resource_version = str(obj.get("metadata", {}).get("resourceVersion", resource_version))
                    yield obj
        except ApiException as exc:
            if exc.status == 410:  # the version is too old: start over from the current object
                obj = _read(api, name, namespace)
                resource_version = str(obj["metadata"]["resourceVersion"])
                yield obj
                continue
            raise _api_error(exc, name, namespace) from exc


def run(args: argparse.Namespace) -> int:
    api, namespace = _api(args)
    obj = _read(api, args.name, namespace)
    notes = _placement_notes(args.name, namespace)
    sys.stdout.write(render(obj, notes))
    sys.stdout.flush()
    if not args.watch or RunStatus.from_json(obj.get("status")).finished:
        return 0
    shown = render(obj, notes)
    placed = (obj.get("status") or {}).get("placement")
    for new in _watch(api, args.name, namespace, str(obj["metadata"]["resourceVersion"])):
        if (new.get("status") or {}).get("placement") != placed:  # a new placement: its Events
            placed = (new.get("status") or {}).get("placement")
            notes = _placement_notes(args.name, namespace)
        text = render(new, notes)
        if text != shown:
            sys.stdout.write("\n" + text)
            sys.stdout.flush()
            shown = text
        if RunStatus.from_json(new.get("status")).finished:
            return 0
    print(f"EvalRun {namespace}/{args.name} was deleted.")
    return 0
