"""The results files: ``benchmarks/results/operator_scale.json`` (everything) and ``.md`` (read me).

Why this module exists: the Markdown shows both designs side by side per scale with ratios, the
issue's targets as met / not met, how cost grows from scale to scale, and the machine, date and
exact command — rendered from the JSON document alone (:func:`render`, pure), so the two files
never disagree. Issue 26 measures two status formats of the watch-fed operator side by side:
``full`` (the status before issue 26, ``KUBEJURY_STATUS_FORMAT=full``) and ``lean`` (the operator);
the watch-fed rounds of the file it replaces are kept for reference (:func:`earlier`), and the
list-per-tick design's recorded rounds (issue 22 removed it) are carried as the historical
baseline (:func:`baseline`). A document without full/lean rounds renders as before: list against
watch.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .measure import ratio

RESULTS = Path(__file__).resolve().parents[1] / "results"
NAMES = {
    "list": "list (today)",
    "watch": "watch (new)",
    "full": "full status (before)",
    "lean": "lean status (after)",
}
ORDER = ("list", "watch", "full", "lean")
DESIGN = "watch"  # the design a round measures
BASELINE_DESIGN = "list"  # the design before issue 13, kept as recorded figures only
#: Issue 13's targets, checked at the largest scale that ran.
TARGET_IDLE_PER_RUN = 1.0  # API requests per minute per idle or finished EvalRun
TARGET_CORES = 0.5
TARGET_RSS_MIB = 500.0
TARGET_P99_S = 5.0


def machine(command: str, started: float, finished: float, options: Any) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        memory_kib = 0
    return {
        "command": command,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(timespec="seconds"),
        "finished": datetime.datetime.fromtimestamp(finished, datetime.UTC).isoformat(timespec="seconds"),
        "wall_min": round((finished - started) / 60, 1),
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "options": {
            "scales": list(options.scales),
            "designs": list(getattr(options, "designs", (DESIGN,))),
            "nodes": options.nodes,
            "namespaces": options.namespaces,
            "idle_s": options.idle_s,
            "hold_s": options.hold,
            "generation_shards": options.shards,
        },
    }


def baseline(path: Path) -> dict[str, Any] | None:
    """The list-per-tick rounds recorded in the results file at ``path`` — measured in it, or
    carried in it from an older one — with when, how and from which source they were measured;
    ``None`` when the file or its list rounds are missing."""
    return _recorded_rounds(path, "baseline", BASELINE_DESIGN)


def earlier(path: Path) -> dict[str, Any] | None:
    """The watch-design rounds of the results file at ``path`` — measured in it, or carried in it
    — kept for reference beside a run that measures other designs (issue 26: lean against full)."""
    return _recorded_rounds(path, "earlier", DESIGN)


def _recorded_rounds(path: Path, key: str, design: str) -> dict[str, Any] | None:
    """The rounds of ``design`` in the results file at ``path``: carried under ``key`` from an
    older file, else measured in it, with its run's start, command and sources."""
    if not path.is_file():
        return None
    recorded = json.loads(path.read_text(encoding="utf-8"))
    carried = recorded.get(key)
    if isinstance(carried, Mapping):
        return dict(carried)
    rounds = [r for r in recorded.get("rounds") or [] if r.get("design") == design]
    if not rounds:
        return None
    meta = recorded.get("meta") or {}
    return {
        "rounds": rounds,
        "started": meta.get("started"),
        "command": meta.get("command"),
        "git_head": sorted({str(_get(r, "source", "git_head")) for r in rounds}),
    }


def all_rounds(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The document's own rounds and its baseline's (list-per-tick) rounds."""
    carried = document.get("baseline") or {}
    return [*(document.get("rounds") or []), *(carried.get("rounds") or [])]


def compared(rounds: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The two designs the tables set side by side (before, after): full against lean when the
    document measured them (issue 26), else list against watch (issue 13)."""
    designs = {str(r.get("design")) for r in rounds}
    return ("full", "lean") if designs & {"full", "lean"} else ("list", "watch")


def _design_lines(document: Mapping[str, Any]) -> list[str]:
    """What the two columns are: both measured here, or the list one carried as a baseline."""
    carried = document.get("baseline")
    if not carried:
        return [
            "simulated: [docs/benchmarks.md](../../docs/benchmarks.md)). Both designs of the operator ran in one",
            "invocation, on one cluster, one after the other with the same workload: `list` is",
            "`KUBEJURY_OBSERVATION=list` (each run lists its children every tick, finished runs included), `watch`",
            "the default (watch-fed caches, reconcile on a child's change, finished runs left alone).",
        ]
    return [
        "simulated: [docs/benchmarks.md](../../docs/benchmarks.md)). `watch` is the operator (watch-fed caches,",
        "reconcile on a child's change, finished runs left alone), measured in this invocation. `list` (each run",
        "lists its children every tick, finished runs included) was removed in issue 22: its figures are the",
        f"recorded baseline, measured {carried.get('started', '?')} UTC by `{carried.get('command', '?')}`"
        f" (git HEAD {', '.join(carried.get('git_head') or ['?'])}), not measured again.",
    ]


def _lean_lines() -> list[str]:
    return [
        "simulated: [docs/benchmarks.md](../../docs/benchmarks.md)). Both status formats of the operator ran in",
        "one invocation, on one cluster, one after the other with the same workload: `full` is",
        "`KUBEJURY_STATUS_FORMAT=full` with the per-leaf CRD status schema (the placement's prose in status, whole",
        "top-level keys re-sent, kopf's diff-base annotation, the default field managers: the operator before",
        "issue 26), `lean` the operator (reason codes, prose in Events, changed leaves only, no diff base, one",
        "field manager, atomic status parts). Sizes are of every EvalRun version the benchmark's watch saw.",
    ]


def _earlier_lines(document: Mapping[str, Any]) -> list[str]:
    """The rounds of earlier invocations, for reference: the watch design before issue 26 and the
    list design's recorded baseline, as their own growth table."""
    earlier = document.get("earlier") or {}
    carried = document.get("baseline") or {}
    rounds = [*(earlier.get("rounds") or []), *(carried.get("rounds") or [])]
    if not rounds:
        return []
    table = growth(rounds)
    return [
        "## Earlier figures, for reference",
        "",
        f"`watch`: the operator before issue 26, measured {earlier.get('started', '?')} UTC by"
        f" `{earlier.get('command', '?')}` (git HEAD {', '.join(earlier.get('git_head') or ['?'])});"
        f" `list`: the design before issue 13, measured {carried.get('started', '?')} UTC. Not measured again;"
        " other rounds, other load.",
        "",
        *table[2:],
    ]


def write(document: Mapping[str, Any], out: Path) -> tuple[Path, Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    js, md = out.with_suffix(".json"), out.with_suffix(".md")
    js.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    md.write_text(render(document), encoding="utf-8")
    return md, js


# ------------------------------------------------------------------------------------ format


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return str(value)
    return f"{float(value):.{digits}f}"


def _ratio(new: Any, old: Any) -> str:
    found = ratio(new, old)
    return "—" if found is None else f"×{found:.2f}"


def _get(round_: Mapping[str, Any] | None, *path: str) -> Any:
    value: Any = round_
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _histogram_rows() -> list[tuple[str, tuple[str, ...], int]]:
    """Rows of the operator's own histograms (bucket bounds: a p99 is the bucket it falls in)."""
    rows: list[tuple[str, tuple[str, ...], int]] = []
    for label, name, part in (
        ("reconcile on a child's change", "kubejury_reconcile_duration_seconds", "child-event"),
        ("reconcile on the timer", "kubejury_reconcile_duration_seconds", "timer"),
        ("API request's wait for a place, decision lane", "kubejury_api_queue_seconds", "decision"),
        ("API request's wait for a place, work lane", "kubejury_api_queue_seconds", "work"),
        ("API PATCH once sent", "kubejury_api_request_seconds", "PATCH"),
        ("API POST once sent", "kubejury_api_request_seconds", "POST"),
    ):
        path = ("operator_histograms", name, part)
        rows += [
            (f"{label}: mean (s)", (*path, "mean"), 3),
            (f"{label}: p99 (s, bucket bound)", (*path, "p99"), 3),
        ]
    return rows


def _rows() -> list[tuple[str, tuple[str, ...], int]]:
    """(label, path into a round, digits) of the side-by-side table."""
    return [
        ("runs Succeeded", ("outcome", "succeeded"), 0),
        ("runs unfinished at the round's timeout", ("outcome", "unfinished"), 0),
        ("active window: creation until every run finished (s)", ("wall_s", "active"), 0),
        ("operator CPU-seconds, active window", ("operator", "cpu_s_active"), 1),
        ("operator cores, active window (mean)", ("operator", "cores_active"), 3),
        ("operator cores, busiest 30 s of the active window", ("operator", "peak_cores_active_30s"), 3),
        ("operator CPU-seconds per run, active window", ("operator", "cpu_s_per_run_active"), 2),
        ("operator CPU-seconds, idle window", ("operator", "cpu_s_idle"), 1),
        ("operator cores, idle window (mean)", ("operator", "cores_idle"), 3),
        ("operator peak RSS (MiB, VmHWM)", ("operator", "peak_rss_mib"), 0),
        ("operator API requests/min, active", ("api", "active", "operator_per_min"), 1),
        ("… per run, active", ("api", "operator_per_run_per_min_active"), 2),
        (
            "operator API requests per run, whole active window",
            ("api", "operator_requests_per_run_active"),
            0,
        ),
        ("operator API requests/min, idle", ("api", "idle", "operator_per_min"), 1),
        ("… per finished run, idle", ("api", "operator_per_finished_run_per_min_idle"), 3),
        ("all users' API requests/min, active", ("api", "active", "all_per_min"), 0),
        ("all users' API requests/min, idle", ("api", "idle", "all_per_min"), 0),
        ("status delay p50 (s)", ("status_delay_s", "all", "p50"), 2),
        ("status delay p99 (s)", ("status_delay_s", "all", "p99"), 2),
        ("status delay max (s)", ("status_delay_s", "all", "max"), 2),
        ("… Jobs measured", ("status_delay_s", "all", "count"), 0),
        (
            "status delay on the API server's clock p50 (s, ±1)",
            ("status_delay_server_clock_s", "all", "p50"),
            2,
        ),
        (
            "status delay on the API server's clock p99 (s, ±1)",
            ("status_delay_server_clock_s", "all", "p99"),
            2,
        ),
        (
            "status delay on the API server's clock max (s, ±1)",
            ("status_delay_server_clock_s", "all", "max"),
            2,
        ),
        ("first wave of servers created p50 (s)", ("deployments_s", "first_wave", "p50"), 2),
        ("first wave of servers created p99 (s)", ("deployments_s", "first_wave", "p99"), 2),
        ("first wave of servers created max (s)", ("deployments_s", "first_wave", "max"), 2),
        ("every server created p50 (s)", ("deployments_s", "all_servers", "p50"), 1),
        ("every server created p99 (s)", ("deployments_s", "all_servers", "p99"), 1),
        ("kube-apiserver cores, active", ("processes", "active", "kube-apiserver", "cores"), 3),
        ("kube-apiserver cores, busiest 30 s", ("processes", "peak_cores_active_30s", "kube-apiserver"), 3),
        ("kube-apiserver cores, idle", ("processes", "idle", "kube-apiserver", "cores"), 3),
        ("etcd cores, active", ("processes", "active", "etcd", "cores"), 3),
        ("etcd cores, idle", ("processes", "idle", "etcd", "cores"), 3),
        ("etcd cores, busiest 30 s", ("processes", "peak_cores_active_30s", "etcd"), 3),
        (
            "kube-controller-manager cores, active",
            ("processes", "active", "kube-controller-manager", "cores"),
            3,
        ),
        ("operator 403 responses", ("api", "operator_403"), 0),
        (
            "operator scale patches per Deployment, mean",
            ("api", "operator_deployment_patches_active", "mean_per_object"),
            2,
        ),
        (
            "operator scale patches of one Deployment, most",
            ("api", "operator_deployment_patches_active", "max_per_object"),
            0,
        ),
        (
            "operator status patches per run, active",
            ("api", "operator_status_patches_active", "mean_per_object"),
            1,
        ),
        ("status changes per run, seen by the benchmark's watch", ("status_writes", "writes_per_run"), 1),
        ("… of them counters only", ("status_writes", "counters_only_per_run"), 1),
        *_histogram_rows(),
        ("load average (1 min), mean during the round", ("load_average_1m", "mean"), 2),
        ("EvalRun bytes, mean of the versions watched", ("evalrun_bytes", "mean", "total"), 0),
        ("… without managedFields", ("evalrun_bytes", "mean", "without_managed_fields"), 0),
        ("… managedFields", ("evalrun_bytes", "mean", "managed_fields"), 0),
        ("… kopf's diff-base annotation", ("evalrun_bytes", "mean", "diffbase_annotation"), 0),
        ("… status", ("evalrun_bytes", "mean", "status"), 0),
        ("… status.placement", ("evalrun_bytes", "mean", "placement"), 0),
        ("EvalRun bytes, largest version watched", ("evalrun_bytes", "largest", "total"), 0),
        ("… its managedFields", ("evalrun_bytes", "largest", "managed_fields"), 0),
        ("operator status patches, active", ("api", "operator_status_patches_active", "requests"), 0),
        (
            "kube-apiserver CPU-seconds per status patch, active",
            ("api", "apiserver_cpu_s_per_status_patch"),
            4,
        ),
        (
            "kube-apiserver CPU-seconds per operator request, active",
            ("api", "apiserver_cpu_s_per_operator_request"),
            4,
        ),
    ]


def _by_scale(rounds: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Mapping[str, Any]]]:
    found: dict[int, dict[str, Mapping[str, Any]]] = {}
    for r in rounds:
        found.setdefault(int(r["runs"]), {})[str(r["design"])] = r
    return dict(sorted(found.items()))


def _verbs(rounds: Mapping[str, Mapping[str, Any]], window: str) -> list[str]:
    verbs: set[str] = set()
    for r in rounds.values():
        verbs |= set(_get(r, "api", window, "operator_by_verb_per_min") or {})
    return sorted(verbs)


UNFINISHED = "n/a†"
FOOTNOTE = (
    "† The round ended at its timeout with runs still active, so its idle window was not idle: "
    "no idle figure is given for it."
)


def _idle(path: Sequence[str]) -> bool:
    """Whether ``path`` names a figure of the idle window."""
    return any(part == "idle" or part.endswith("_idle") for part in path)


def _cell(round_: Mapping[str, Any] | None, path: Sequence[str], digits: int) -> str:
    if round_ is not None and _idle(path) and not round_.get("all_finished", True):
        return UNFINISHED
    return _num(_get(round_, *path), digits)


def _rate_cell(round_: Mapping[str, Any] | None, path: Sequence[str]) -> str:
    """A per-verb rate: 0 when the round made no such request."""
    if round_ is None:
        return "—"
    if _idle(path) and not round_.get("all_finished", True):
        return UNFINISHED
    return _num(_get(round_, *path) or 0.0, 1)


def side_by_side(
    scale: int, rounds: Mapping[str, Mapping[str, Any]], pair: tuple[str, str] = ("list", "watch")
) -> list[str]:
    old, new = rounds.get(pair[0]), rounds.get(pair[1])
    lines = [
        f"### {scale} runs",
        "",
        f"| figure | {NAMES[pair[0]]} | {NAMES[pair[1]]} | {pair[1]} / {pair[0]} |",
        "|---|---:|---:|---:|",
    ]
    for label, path, digits in _rows():
        a, b = _get(old, *path), _get(new, *path)
        cells = (_cell(old, path, digits), _cell(new, path, digits))
        ratio_text = "—" if UNFINISHED in cells else _ratio(b, a)
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio_text} |")
    for window in ("active", "idle"):
        for verb in _verbs(rounds, window):
            path = ("api", window, "operator_by_verb_per_min", verb)
            a = _get(old, *path) or 0.0
            b = _get(new, *path) or 0.0
            cells = (_rate_cell(old, path), _rate_cell(new, path))
            ratio_text = "—" if UNFINISHED in cells else _ratio(b, a)
            lines.append(
                f"| operator `{verb}` requests/min, {window} | {cells[0]} | {cells[1]} | {ratio_text} |"
            )
    for window in ("active", "idle"):
        refusals = sorted(
            set(_get(old, "api", window, "operator_refused") or {})
            | set(_get(new, "api", window, "operator_refused") or {})
        )
        for what in refusals:
            a = _get(old, "api", window, "operator_refused", what) or 0
            b = _get(new, "api", window, "operator_refused", what) or 0
            lines.append(f"| operator requests refused `{what}`, {window} | {a} | {b} | {_ratio(b, a)} |")
    for design, r in ((pair[0], old), (pair[1], new)):
        managers = _get(r, "evalrun_bytes", "managers")
        if managers:
            lines.append(
                f"| managedFields entries of the largest EvalRun, {design} | {', '.join(managers)} | | |"
            )
    lines.append("")
    return lines


def targets(rounds: Sequence[Mapping[str, Any]]) -> list[str]:
    pair = compared(rounds)
    by_scale = _by_scale(rounds)
    if not by_scale:
        return []
    scale = max(by_scale)
    checks = [
        (
            f"an idle or finished EvalRun costs ≤ {TARGET_IDLE_PER_RUN:g} API request/min",
            ("api", "operator_per_finished_run_per_min_idle"),
            TARGET_IDLE_PER_RUN,
            "req/min per run",
        ),
        (
            f"the operator uses ≤ {TARGET_CORES:g} core (mean over the active window)",
            ("operator", "cores_active"),
            TARGET_CORES,
            "cores",
        ),
        (
            f"the operator uses ≤ {TARGET_CORES:g} core (its busiest 30 s)",
            ("operator", "peak_cores_active_30s"),
            TARGET_CORES,
            "cores",
        ),
        (
            f"the operator uses ≤ {TARGET_RSS_MIB:g} MiB (peak RSS)",
            ("operator", "peak_rss_mib"),
            TARGET_RSS_MIB,
            "MiB",
        ),
        (f"p99 status delay ≤ {TARGET_P99_S:g} s", ("status_delay_s", "all", "p99"), TARGET_P99_S, "s"),
        (
            f"p99 status delay ≤ {TARGET_P99_S:g} s (API server's clock, ±1 s)",
            ("status_delay_server_clock_s", "all", "p99"),
            TARGET_P99_S,
            "s",
        ),
    ]
    lines = [
        f"## Targets (issue 13), at {scale} runs",
        "",
        "An idle figure needs a round whose runs all finished: where the largest one did not, the",
        "largest scale at which they did is used, and named.",
        "",
        f"| target | {NAMES[pair[0]]} | {NAMES[pair[1]]} |",
        "|---|---|---|",
    ]
    for label, path, limit, unit in checks:
        cells = []
        for design in pair:
            chosen = by_scale[scale].get(design)
            at = scale
            if _idle(path):
                finished = [
                    s for s, r in by_scale.items() if design in r and r[design].get("all_finished", True)
                ]
                at = max(finished, default=scale)
                chosen = by_scale[at].get(design) if finished else None
            value = _get(chosen, *path)
            if value is None:
                cells.append("not measured")
                continue
            verdict = "**met**" if float(value) <= limit else "**not met**"
            note = f" (at {at} runs)" if at != scale else ""
            if chosen is not None and not chosen.get("all_finished", True):
                note += f" (until the timeout; {_get(chosen, 'outcome', 'unfinished')} runs unfinished)"
            cells.append(f"{_num(value, 3)} {unit}: {verdict}{note}")
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    lines.append("")
    return lines


def growth(rounds: Sequence[Mapping[str, Any]]) -> list[str]:
    columns = [
        ("operator cores, active", ("operator", "cores_active"), 3),
        ("operator cores, busiest 30 s", ("operator", "peak_cores_active_30s"), 3),
        ("operator CPU-s per run", ("operator", "cpu_s_per_run_active"), 2),
        ("peak RSS MiB", ("operator", "peak_rss_mib"), 0),
        ("operator req/min, active", ("api", "active", "operator_per_min"), 0),
        ("operator requests per run", ("api", "operator_requests_per_run_active"), 0),
        ("req/min per finished run, idle", ("api", "operator_per_finished_run_per_min_idle"), 3),
        ("status delay p99 s", ("status_delay_s", "all", "p99"), 2),
        ("… API server's clock", ("status_delay_server_clock_s", "all", "p99"), 2),
        ("first wave p99 s", ("deployments_s", "first_wave", "p99"), 2),
        ("apiserver cores, active", ("processes", "active", "kube-apiserver", "cores"), 3),
        ("etcd cores, active", ("processes", "active", "etcd", "cores"), 3),
    ]
    lines = [
        "## How cost grows",
        "",
        "| design | runs | " + " | ".join(c[0] for c in columns) + " |",
        "|---|---:|" + "---:|" * len(columns),
    ]
    by_scale = _by_scale(rounds)
    for design in ORDER:
        for scale, by_design in by_scale.items():
            r = by_design.get(design)
            if r is None:
                continue
            cells = [_cell(r, path, digits) for _, path, digits in columns]
            lines.append(f"| {NAMES[design]} | {scale} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def apiserver_time(rounds: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the API server's time went in each round's active window: its own
    ``apiserver_request_duration_seconds`` per verb and resource (watches left out)."""
    measured = [r for r in rounds if r.get("apiserver_request_seconds")]
    if not measured:
        return []
    lines = [
        "## Where the API server's time went (its own request durations, active window)",
        "",
        "Mean seconds per request as the API server timed them, for the verbs and resources it spent",
        "the most request-seconds on; every client's requests (the operator's are EvalRuns, Deployments,",
        "Services, Jobs, Events; Pods and Job statuses are the controllers', KWOK's and the fast kubelet's).",
        "",
    ]
    for round_ in measured:
        lines += [
            f"### {NAMES.get(str(round_.get('design')), round_.get('design'))}, {round_.get('runs')} runs",
            "",
            "| verb | resource | requests | mean s | request-seconds |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [
            f"| {row['verb']} | {row['resource']} | {row['requests']} | {row['mean_s']:.3f} | {row['seconds']:.0f} |"
            for row in round_["apiserver_request_seconds"]
        ]
        lines.append("")
    return lines


def render(document: Mapping[str, Any]) -> str:
    meta = document.get("meta") or {}
    options = meta.get("options") or {}
    measured: list[Mapping[str, Any]] = list(document.get("rounds") or [])
    rounds = all_rounds(document)
    pair = compared(measured)
    if pair == ("full", "lean"):
        rounds = measured  # the list baseline and the earlier watch rounds: their own section
    title = (
        "# Operator scale: the EvalRun's status before and after issue 26"
        if pair == ("full", "lean")
        else "# Operator scale: the list-per-tick design against the watch-fed one"
    )
    lines = [
        title,
        "",
        ("Issue 26, part 2" if pair == ("full", "lean") else "Issue 13, part 2")
        + " — `make bench-operator` (`benchmarks/operator_scale/`; method and what is",
        *(_lean_lines() if pair == ("full", "lean") else _design_lines(document)),
        "",
        f"- **Date:** {meta.get('started', '?')} to {meta.get('finished', '?')} UTC ({meta.get('wall_min', '?')} min)",
        f"- **Machine:** {meta.get('cores', '?')} cores ({meta.get('cpu', '?')}), {meta.get('memory_gib', '?')} GiB,"
        f" Linux {meta.get('kernel', '?')}, Python {meta.get('python', '?')}; the load average during each round is"
        " in its table (other work may have shared the machine).",
        f"- **Command:** `{meta.get('command', '?')}`",
        f"- **Cluster:** {options.get('nodes', '?')} KWOK nodes ({_counts(document.get('nodes') or {})}); GPUs"
        f" {_counts(document.get('gpus') or {})}.",
        f"- **Workload per round:** N EvalRuns of `examples/evalrun-study.yaml` (16 models, 3 judges — two share"
        f" a model's server, one hosted — `maxConcurrentModels: 4`, 2 series in even-numbered runs and 1 in odd,"
        f" generationShards {options.get('generation_shards', '?')}) across {options.get('namespaces', '?')}"
        f" namespaces; each simulated Job pod runs a uniform {options.get('hold_s', '?')} s; idle window"
        f" {options.get('idle_s', '?')} s; reconcile interval: the chart's default, 15 s.",
        "- **Rounds:** separate per scale and design (every run of a round is created at once, the round ends",
        "  after its idle window; runs and children are deleted before the next round).",
        "",
    ]
    sources = {str(_get(r, "source", "digest")) for r in measured}
    heads = sorted({str(_get(r, "source", "git_head")) for r in measured})
    lines.pop()  # the source is one more item of the list above
    lines += [
        f"- **Source:** git HEAD {', '.join(heads)}; "
        + (
            f"every round ran the same operator and engine source (digest {sources.pop()})."
            if len(sources) == 1
            else "the operator or engine source changed between rounds (digests "
            + ", ".join(f"{r['design']} {r['runs']}: {_get(r, 'source', 'digest')}" for r in measured)
            + ")."
        ),
        "",
    ]
    unfinished = [r for r in rounds if not r.get("all_finished")]
    if unfinished:
        lines += [
            "**Not every run finished** in: "
            + ", ".join(
                f"{r['design']} at {r['runs']} runs ({_get(r, 'outcome', 'unfinished')} unfinished)"
                for r in unfinished
            )
            + " — their active window ended at the round's timeout.",
            "",
        ]
    notes = list(document.get("notes") or [])
    if notes:
        lines += ["## Notes", "", "Added after the run by whoever ran it (`report.py --note`):", ""]
        lines += [f"- {note}" for note in notes] + [""]
    lines += targets(rounds)
    lines += ["## Side by side, per scale", ""]
    for scale, by_design in _by_scale(rounds).items():
        lines += side_by_side(scale, by_design, pair)
    lines += growth(rounds)
    lines += apiserver_time(rounds)
    if pair == ("full", "lean"):
        lines += _earlier_lines(document)
    if unfinished:
        lines += [FOOTNOTE, ""]
    lines += [
        "## How the figures are taken",
        "",
        "- CPU: `utime + stime` from `/proc/<pid>/stat` of the operator (its session), etcd and kube-apiserver",
        "  (the dev cluster's pid files), at the start of a round, when every run has finished, and at the end",
        "  of the idle window; cores = CPU-seconds / wall seconds of the window. Peak RSS: `VmHWM` of",
        "  `/proc/<pid>/status` at the end of the round (a fresh operator process per round).",
        "- API requests: the API server's audit log, filtered on `system:serviceaccount:kubejury:kubejury`",
        "  (the operator runs with a token of the chart's ServiceAccount) and in total; a watch counts when it",
        "  starts. Active window: from the first create to the last run finished; idle: the window after.",
        "- Status delay: for every generation Job, final judging round and aggregation Job, from the moment",
        "  the benchmark's watch on Jobs saw it `Complete` to the first EvalRun status its watch on EvalRuns",
        "  saw reflect it (`jobsDone` of the stage reached it, or `Succeeded` with a summary); a status that",
        "  already showed it (from the progress record) counts 0 s.",
        "- Servers: from just before a run's create request to the operator's successful `create` of each",
        "  Deployment in the audit log; the *first wave* is what the operator's planner creates on a run's first",
        "  reconcile (the judges' servers and `maxConcurrentModels` models), *every server* includes models",
        "  brought up later as earlier ones finish.",
        "",
    ]
    return "\n".join(lines)


def _counts(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.operator_scale.report RESULTS.json [--note TEXT]``: write the Markdown
    again from the JSON (e.g. after a change of this module), next to it; ``--note`` first adds an
    observation the figures cannot show (e.g. other work on the machine during a round) to both."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--note", action="append", default=[], help="add a note to the results (repeatable)")
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text(encoding="utf-8"))
    if args.note:
        document["notes"] = [*(document.get("notes") or []), *args.note]
        args.results.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    md = args.results.with_suffix(".md")
    md.write_text(render(document), encoding="utf-8")
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
