"""The operator's brain: a pure, level-triggered planner for one EvalRun.

Why this module exists: an operator that remembers things in memory breaks on restart; one that
decides from *what it observes now* resumes anywhere. :func:`plan` takes the spec, the children
observed in the cluster (Deployments ready?, Jobs succeeded/failed?), the stages' progress records
from storage and the placement decisions, and returns the actions that move the cluster towards
the desired state plus the complete new ``status``. It performs no I/O and reads no clock (``now``
is an argument), so every phase transition is a table-driven unit test.

The orchestration it encodes:

* Placement first. A model that fits no node sets ``Unschedulable`` and nothing is deployed — no
  Pod is ever left Pending. Placement decisions are pinned in ``status.placement`` once the run
  has left ``Pending``, so a node change mid-run never changes a model's quantization.
* At most ``spec.maxConcurrentModels`` evaluated-model servers run at once, in spec order.
  Judges' servers are not counted (they must stay up for the whole judging) and a judge that is
  the same model as an evaluated one (``sameAs``, same source and runtime) shares its server.
* A model's generation Jobs (one per series, Indexed when sharded) start when its server is
  ready; its Deployment is scaled to zero as soon as all its series are generated, unless it also
  serves a judge.
* Pipelining: judging of (judge, series) runs in rounds. A round (a Job judging every answer
  stored when it starts; the engine skips what is already judged) starts as soon as more models
  have finished generating the series than the previous round saw, and no round is running. The
  round that starts after the last model finished is the final one; with no overlap there is
  exactly one judge Job per judge × series.
* Judges' servers are scaled to zero when all their judge Jobs succeeded; the aggregation Job
  runs when every judge Job succeeded; ``Succeeded`` carries the summary read from the report.
* A stage counts as done when its Job succeeded *or* its progress record says it is complete, so
  a Job deleted by someone (or by a TTL) is not re-run after it finished.
* Any Job that failed for good (backoffLimit / activeDeadlineSeconds) fails the run; a server
  whose Deployment exceeds its progress deadline fails the run too. On failure and on success
  every server is scaled to zero.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubejury_operator import manifests as mf
from kubejury_operator.manifests import Endpoint, Manifest, RunRef, WorkloadSettings

PHASES = ("Pending", "Provisioning", "Generating", "Judging", "Aggregating", "Succeeded", "Failed")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
CONDITION_TYPES = (
    "Ready",
    "ModelsProvisioned",
    "GenerationComplete",
    "JudgingComplete",
    "Succeeded",
    "Unschedulable",
    "Failed",
)
MAX_SUMMARY_MODELS = 100  # etcd objects stay small: the summary never grows with the benchmark


# ------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PlacementDecision:
    """A placement as the planner uses and the status records it (satisfies ``PlacementView``)."""

    runtime: str
    quantization: str
    tensor_parallel_size: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    vllm_args: Sequence[str] = ()
    schedulable: bool = True
    reason: str = ""
    gpu_product: str | None = None

    @classmethod
    def from_placement(cls, placement: Any) -> PlacementDecision:
        """From ``placement.Placement`` (duck-typed, so this module does not import the planner)."""
        return cls(
            runtime=str(placement.runtime),
            quantization=str(placement.quantization),
            tensor_parallel_size=int(placement.tensor_parallel_size),
            node_selector=dict(placement.node_selector or {}),
            tolerations=tuple(dict(t) for t in (placement.tolerations or ())),
            vllm_args=tuple(str(a) for a in (placement.vllm_args or ())),
            schedulable=bool(placement.schedulable),
            reason=str(placement.reason or ""),
            gpu_product=getattr(placement, "gpu_product", None),
        )

    @classmethod
    def from_status(cls, data: Mapping[str, Any]) -> PlacementDecision:
        return cls(
            runtime=str(data.get("runtime", "")),
            quantization=str(data.get("quantization", "")),
            tensor_parallel_size=int(data.get("tensorParallelSize", 0) or 0),
            node_selector=dict(data.get("nodeSelector") or {}),
            tolerations=tuple(dict(t) for t in data.get("tolerations") or ()),
            vllm_args=tuple(str(a) for a in data.get("vllmArgs") or ()),
            schedulable=bool(data.get("schedulable", True)),
            reason=str(data.get("reason", "")),
            gpu_product=data.get("gpuProduct"),
        )

    def to_status(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "schedulable": self.schedulable,
            "runtime": self.runtime,
            "quantization": self.quantization,
            "tensorParallelSize": self.tensor_parallel_size,
            "gpuProduct": self.gpu_product,
            "nodeSelector": dict(self.node_selector),
            "reason": self.reason,
        }
        if self.tolerations:
            result["tolerations"] = [dict(t) for t in self.tolerations]
        if self.vllm_args:
            result["vllmArgs"] = list(self.vllm_args)
        return result


@dataclass(frozen=True)
class DeploymentState:
    """What the operator sees of one of its Deployments."""

    replicas: int  # spec.replicas
    ready_replicas: int = 0
    stalled: bool = False  # Progressing=False, reason ProgressDeadlineExceeded
    message: str = ""

    @property
    def ready(self) -> bool:
        return self.replicas > 0 and self.ready_replicas > 0


@dataclass(frozen=True)
class JobState:
    """What the operator sees of one of its Jobs."""

    succeeded: bool = False
    failed: bool = False  # terminal: condition Failed=True
    message: str = ""
    models_complete: int = 0  # judge rounds: models whose generation was complete at creation

    @property
    def finished(self) -> bool:
        return self.succeeded or self.failed


@dataclass(frozen=True)
class ProgressRecord:
    """One stage's progress record (``<run>/<series>/progress/<stage>-<name>.json``)."""

    done: int = 0
    total: int = 0
    errors: int = 0
    parse_failures: int = 0
    complete: bool = False
    request_errors: Mapping[str, int] = field(default_factory=dict)  # error kind -> count
    rate_per_s: float = 0.0
    running: bool = False

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> ProgressRecord:
        """Tolerant reading: counts default to 0; ``complete`` also when ``state`` says so."""

        def count(*keys: str) -> int:
            for key in keys:
                value = data.get(key)
                if isinstance(value, bool):
                    continue
                if isinstance(value, int | float):
                    return int(value)
                if isinstance(value, Mapping):
                    return sum(int(v) for v in value.values() if isinstance(v, int | float))
            return 0

        kinds: dict[str, int] = {}
        errors = data.get("errors")
        if isinstance(errors, Mapping):
            kinds = {str(k): int(v) for k, v in errors.items() if isinstance(v, int | float)}
        elif isinstance(errors, int) and not isinstance(errors, bool) and errors > 0:
            kinds = {"other": errors}  # the stages count errors without a kind
        rate = data.get("rate_per_s")
        state = str(data.get("state") or data.get("status") or "").lower()
        done = count("done")
        total = count("total")
        complete = bool(data.get("complete") or data.get("finished")) or state in (
            "succeeded",  # what kubejury's stages write (kubejury.stages.progress)
            "complete",
            "completed",
            "done",
        )
        return cls(
            done=done,
            total=total,
            errors=count("errors", "error_count"),
            parse_failures=count("parse_failures", "parseFailures"),
            complete=complete,
            request_errors=kinds,
            rate_per_s=float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) else 0.0,
            running=state == "running",
        )


ProgressKey = tuple[str, str, str]  # (stage "generate"|"judge", series, model or judge name)


@dataclass(frozen=True)
class Observed:
    """Everything observed this round: children by name, progress by (stage, series, name)."""

    deployments: Mapping[str, DeploymentState] = field(default_factory=dict)
    jobs: Mapping[str, JobState] = field(default_factory=dict)
    present: frozenset[tuple[str, str]] = frozenset()  # (kind, name) of other children
    progress: Mapping[ProgressKey, ProgressRecord] = field(default_factory=dict)
    summary: Mapping[str, Any] | None = None  # from report.json (see summary_from_report)
    missing_secrets: tuple[str, ...] = ()
    # Server Pods the scheduler cannot place right now: endpoint key -> scheduler message.
    unschedulable_pods: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunInputs:
    """The run as the planner needs it (built by the handlers from the EvalRun object)."""

    ref: RunRef
    generation: int
    body: Mapping[str, Any]  # the EvalRun object (for the spec ConfigMap)
    models: tuple[Endpoint, ...]
    judges: tuple[Endpoint, ...]
    series: tuple[str, ...]
    max_concurrent_models: int
    settings: WorkloadSettings
    storage: mf.JobStorage
    generation_shards: int = 1
    report_uri: str | None = None


# ------------------------------------------------------------------------------------ outputs


@dataclass(frozen=True)
class Action:
    """One change to make: create an object, scale a Deployment, or delete an object."""

    verb: Literal["create", "scale", "delete"]
    kind: str
    name: str
    manifest: Manifest | None = None
    replicas: int | None = None

    def describe(self) -> str:
        extra = f" to {self.replicas}" if self.verb == "scale" else ""
        return f"{self.verb} {self.kind}/{self.name}{extra}"


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    status: dict[str, Any]
    events: tuple[Event, ...]

    @property
    def phase(self) -> str:
        return str(self.status["phase"])


# ------------------------------------------------------------------------------------ helpers


def _condition(
    previous: Sequence[Mapping[str, Any]],
    ctype: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> dict[str, Any]:
    """A condition per Kubernetes API conventions; lastTransitionTime moves only on a status flip."""
    text = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == ctype), None)
    changed = before is None or before.get("status") != text
    return {
        "type": ctype,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now if changed or not before else before.get("lastTransitionTime", now),
        "observedGeneration": generation,
    }


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    return text if text.endswith(".") else text + "."


def summary_from_report(report: Mapping[str, Any], report_uri: str | None) -> dict[str, Any]:
    """The aggregated summary that goes into ``status.summary``: ranking with W, D, σ and CI per
    model, domain leaders and tiers of the primary series, and the report URI. Never per-answer
    data; at most :data:`MAX_SUMMARY_MODELS` ranking rows."""
    from kubejury.report.view import read_report

    view = read_report(report)
    primary = view.series[0] if view.series else None  # read_report puts the primary series first
    summary: dict[str, Any] = {"primarySeries": view.primary, "reportUri": report_uri}
    if primary is None:
        summary["ranking"] = []
        return summary

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(float(value), 3)

    ranking = []
    for row in primary.rows[:MAX_SUMMARY_MODELS]:
        ci = row.weighted_ci or (None, None)
        ranking.append(
            {
                "rank": row.rank,
                "model": row.model,
                "weighted": rounded(row.weighted),
                "weightedCI": [rounded(ci[0]), rounded(ci[1])],
                "degradation": rounded(row.degradation),
                "sigma": rounded(row.sigma),
                "tier": row.tier,
            }
        )
    summary["ranking"] = ranking
    summary["domainLeaders"] = dict(list(primary.domain_leaders.items())[:64])
    summary["tiers"] = {row.model: row.tier for row in primary.rows[:MAX_SUMMARY_MODELS] if row.tier}
    if ranking:
        summary["leader"] = ranking[0]["model"]
        summary["leaderWeighted"] = ranking[0]["weighted"]
    return summary


# --------------------------------------------------------------------------------------- plan


def plan(run: RunInputs, observed: Observed, previous: Mapping[str, Any], now: str) -> Plan:
    """Actions and new status for one reconcile of ``run`` (see the module docstring)."""
    prev_phase = str(previous.get("phase") or "Pending")
    prev_conditions: Sequence[Mapping[str, Any]] = list(previous.get("conditions") or [])
    gen = run.generation
    actions: list[Action] = []
    name = run.ref.name
    series = run.series
    settings = run.settings

    def cond(ctype: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return _condition(prev_conditions, ctype, status, reason, _sentence(message), gen, now)

    # Every in-cluster server, by deployment key (a judge sharing a model's server is one entry).
    servers: dict[str, Endpoint] = {}
    for endpoint in (*run.models, *run.judges):
        if endpoint.in_cluster:
            servers.setdefault(endpoint.key, endpoint)
    judge_keys = {j.key for j in run.judges if j.in_cluster}

    # --- facts ----------------------------------------------------------------------------
    def job(name_: str) -> JobState | None:
        return observed.jobs.get(name_)

    def progress(stage: str, s: str, who: str) -> ProgressRecord | None:
        return observed.progress.get((stage, s, who))

    def gen_done(model: Endpoint, s: str) -> bool:
        state = job(mf.generation_job_name(name, model.name, s))
        record = progress("generate", s, model.name)
        return bool(state and state.succeeded) or bool(record and record.complete)

    def rounds(judge: Endpoint, s: str) -> list[JobState]:
        """The judging rounds of (judge, series) that exist, in order."""
        found: list[JobState] = []
        for n in range(1, len(run.models) + 2):
            state = job(mf.judge_job_name(name, judge.name, s, n))
            if state is None:
                break
            found.append(state)
        return found

    def judge_done(judge: Endpoint, s: str) -> bool:
        # Done when a round created after every model's answers existed has succeeded.
        return any(r.succeeded and r.models_complete >= len(run.models) for r in rounds(judge, s))

    all_gen = [(m, s) for m in run.models for s in series]
    all_judge = [(j, s) for j in run.judges for s in series]
    generated = {(m.name, s) for m, s in all_gen if gen_done(m, s)}
    judged = {(j.name, s) for j, s in all_judge if judge_done(j, s)}
    generation_complete = len(generated) == len(all_gen)
    judging_complete = generation_complete and len(judged) == len(all_judge)
    agg = job(mf.aggregation_job_name(name))
    aggregated = bool(agg and agg.succeeded) and judging_complete

    failures: list[str] = []
    for job_name, state in sorted(observed.jobs.items()):
        if state.failed:
            failures.append(f"Job {job_name} failed: {state.message or 'backoff limit or deadline reached'}")
    for dep_name, dep in sorted(observed.deployments.items()):
        if dep.stalled and dep.replicas > 0:
            failures.append(
                f"Model server {dep_name} did not become ready: {dep.message or 'progress deadline exceeded'}"
            )

    placements = {key: ep.placement for key, ep in servers.items()}
    unschedulable = [
        ep
        for key, ep in servers.items()
        if placements[key] is None or not getattr(placements[key], "schedulable", True)
    ]

    # --- progress and placement status ------------------------------------------------------
    def totals(
        stage: str, pairs: Sequence[tuple[Endpoint, str]], done_set: set[tuple[str, str]]
    ) -> dict[str, int]:
        done = total = 0
        for who, s in pairs:
            record = progress(stage, s, who.name)
            if record is not None:
                done += record.done
                total += record.total
        return {"done": done, "total": total, "jobsDone": len(done_set), "jobs": len(pairs)}

    gen_progress = totals("generate", all_gen, generated)
    judge_progress = totals("judge", all_judge, judged)
    items_done = gen_progress["done"] + judge_progress["done"]
    items_total = gen_progress["total"] + judge_progress["total"]
    stages_status = {
        "generation": gen_progress,
        "judging": judge_progress,
        "aggregation": {"done": 1 if aggregated else 0, "total": 1},
    }
    placement_status: dict[str, Any] = {}
    for endpoint in (*run.models, *run.judges):
        if endpoint.placement is None:
            placement_status[endpoint.name] = {
                "schedulable": True,
                "runtime": endpoint.runtime,
                "quantization": "",
                "tensorParallelSize": 0,
                "gpuProduct": None,
                "nodeSelector": {},
                "reason": "existing OpenAI-compatible endpoint: nothing to deploy",
            }
        elif isinstance(endpoint.placement, PlacementDecision):
            placement_status[endpoint.name] = endpoint.placement.to_status()
        else:
            placement_status[endpoint.name] = PlacementDecision.from_placement(endpoint.placement).to_status()

    # --- desired servers ----------------------------------------------------------------------
    desired: dict[str, int] = {}
    terminal = bool(failures) or aggregated
    unsched_now = bool(unschedulable) and prev_phase == "Pending" and not observed.deployments
    if not terminal and not unsched_now and not observed.missing_secrets:
        budget = max(1, run.max_concurrent_models)
        for model in run.models:
            if not model.in_cluster:
                continue
            if all((model.name, s) in generated for s in series):
                continue
            if model.key in judge_keys:
                continue  # kept up by its judge role, not counted against the budget
            if budget > 0:
                desired[model.key] = 1
                budget -= 1
        for judge in run.judges:
            if not judge.in_cluster:
                continue
            # The judge's server is needed until every judge Job using it succeeded.
            users = [j for j in run.judges if j.key == judge.key]
            if all((j.name, s) in judged for j in users for s in series):
                continue
            desired[judge.key] = 1

    def ready(endpoint: Endpoint) -> bool:
        if not endpoint.in_cluster:
            return True
        dep = observed.deployments.get(mf.workload_name(name, endpoint.key))
        return bool(dep and dep.ready) and desired.get(endpoint.key, 0) > 0

    # --- actions ------------------------------------------------------------------------------
    present = observed.present
    started = bool(observed.deployments or observed.jobs)
    if not unsched_now and not observed.missing_secrets:
        if ("ConfigMap", mf.spec_configmap_name(name)) not in present:
            cm = mf.spec_configmap(run.ref, run.body)
            actions.append(Action("create", "ConfigMap", cm["metadata"]["name"], cm))
        if (
            settings.job_service_account is None
            and ("ServiceAccount", mf.job_service_account_name(name)) not in present
        ):
            sa = mf.job_service_account(run.ref)
            actions.append(Action("create", "ServiceAccount", sa["metadata"]["name"], sa))

    for key, endpoint in servers.items():
        dep_name = mf.workload_name(name, key)
        want = desired.get(key, 0)
        current = observed.deployments.get(dep_name)
        if current is None:
            if want > 0:
                actions.append(
                    Action(
                        "create",
                        "Deployment",
                        dep_name,
                        mf.model_deployment(run.ref, endpoint, want, settings),
                    )
                )
                if ("Service", dep_name) not in present:
                    actions.append(Action("create", "Service", dep_name, mf.model_service(run.ref, endpoint)))
        else:
            if ("Service", dep_name) not in present and want > 0:
                actions.append(Action("create", "Service", dep_name, mf.model_service(run.ref, endpoint)))
            if current.replicas != want:
                actions.append(Action("scale", "Deployment", dep_name, replicas=want))

    if not terminal and not unsched_now and not observed.missing_secrets:
        for model in run.models:
            if not ready(model):
                continue
            for s in series:
                job_name = mf.generation_job_name(name, model.name, s)
                if (model.name, s) in generated or job(job_name) is not None:
                    continue
                manifest = mf.generation_job(
                    run.ref, model, s, settings, run.storage, shards=run.generation_shards
                )
                actions.append(Action("create", "Job", job_name, manifest))
        for judge in run.judges:
            if not ready(judge):
                continue
            for s in series:
                # Pipelined judging in rounds: a round starts as soon as more models have finished
                # generating this series than the previous round saw; the round that starts after
                # the last model finished is the final one.
                complete = sum(1 for m in run.models if (m.name, s) in generated)
                previous_rounds = rounds(judge, s)
                covered = max((r.models_complete for r in previous_rounds), default=0)
                if complete == 0 or complete <= covered or any(not r.finished for r in previous_rounds):
                    continue
                n = len(previous_rounds) + 1
                manifest = mf.judge_job(
                    run.ref, judge, s, settings, run.storage, round_=n, models_complete=complete
                )
                actions.append(Action("create", "Job", manifest["metadata"]["name"], manifest))
        if judging_complete and agg is None:
            agg_name = mf.aggregation_job_name(name)
            actions.append(
                Action("create", "Job", agg_name, mf.aggregation_job(run.ref, settings, run.storage))
            )

    # --- phase ----------------------------------------------------------------------------
    if failures:
        phase = "Failed"
    elif aggregated:
        phase = "Succeeded"
    elif judging_complete:
        phase = "Aggregating"
    elif generation_complete:
        phase = "Judging"
    elif unsched_now or observed.missing_secrets:
        phase = "Pending"
    elif any(
        observed.jobs.get(mf.generation_job_name(name, m.name, s)) is not None or (m.name, s) in generated
        for m, s in all_gen
    ):
        phase = "Generating"
    elif started or actions:
        phase = "Provisioning"
    else:
        phase = "Pending"
    # A finished run stays finished (its Jobs may be cleaned up by a TTL later): its status is
    # kept as it was and the only thing ever done again is scaling leftover servers to zero.
    if prev_phase in TERMINAL_PHASES and previous.get("observedGeneration") == gen and phase != prev_phase:
        scale_down = tuple(
            Action("scale", "Deployment", dep_name, replicas=0)
            for dep_name, dep in sorted(observed.deployments.items())
            if dep.replicas > 0
        )
        kept = dict(previous)
        if prev_phase == "Succeeded" and kept.get("summary") is None and observed.summary is not None:
            kept["summary"] = dict(observed.summary)  # the report became readable only now
        return Plan(actions=scale_down, status=kept, events=())

    # --- conditions ---------------------------------------------------------------------------
    waiting = sorted(
        servers[k].name
        for k, want in desired.items()
        if want > 0 and not (observed.deployments.get(mf.workload_name(name, k)) or DeploymentState(0)).ready
    )
    if unschedulable:
        names = "No node can run " + "; ".join(
            f"model {e.name}: {getattr(e.placement, 'reason', '') or 'no placement'}" for e in unschedulable
        )
        unsched_cond = cond(
            "Unschedulable",
            unsched_now,
            "ModelDoesNotFit" if unsched_now else "Placed",
            names if unsched_now else "Every model has a node that can run it",
        )
    else:
        unsched_cond = cond("Unschedulable", False, "Placed", "Every model has a node that can run it")
    pending = {k: m for k, m in observed.unschedulable_pods.items() if desired.get(k, 0) > 0}
    if pending and not unsched_now and phase not in TERMINAL_PHASES:
        # Placement found a node type, but no such node has room now (GPUs taken by others). The
        # Deployment's progress deadline bounds the wait: then the run fails and scales down.
        unsched_cond = cond(
            "Unschedulable",
            True,
            "NoNodeAvailable",
            "Model server Pods wait for a node: "
            + "; ".join(f"{servers[k].name if k in servers else k}: {m}" for k, m in sorted(pending.items())),
        )
    if observed.missing_secrets:
        provisioned = cond(
            "ModelsProvisioned",
            False,
            "SecretMissing",
            "Missing secrets: " + ", ".join(observed.missing_secrets),
        )
    elif unsched_now:
        provisioned = cond(
            "ModelsProvisioned", False, "Unschedulable", "Waiting for a node that can run every model"
        )
    elif waiting:
        provisioned = cond(
            "ModelsProvisioned", False, "ServersStarting", "Waiting for model servers: " + ", ".join(waiting)
        )
    elif desired:
        provisioned = cond("ModelsProvisioned", True, "ServersReady", f"Model servers ready: {len(desired)}")
    else:
        provisioned = cond(
            "ModelsProvisioned", True, "NoServersNeeded", "No model server is needed at this point"
        )
    conditions = [
        cond("Ready", phase == "Succeeded", phase, f"The run is {phase.lower()}"),
        provisioned,
        cond(
            "GenerationComplete",
            generation_complete,
            "AllAnswersGenerated" if generation_complete else "Generating",
            f"Generation jobs done {len(generated)}/{len(all_gen)}, answers {gen_progress['done']}/{gen_progress['total']}",
        ),
        cond(
            "JudgingComplete",
            judging_complete,
            "AllAnswersJudged" if judging_complete else "Judging",
            f"Judge jobs done {len(judged)}/{len(all_judge)}, judgments {judge_progress['done']}/{judge_progress['total']}",
        ),
        cond(
            "Succeeded",
            phase == "Succeeded",
            "ReportReady" if phase == "Succeeded" else "NotFinished",
            "The aggregated report is ready" if phase == "Succeeded" else f"The run is {phase.lower()}",
        ),
        unsched_cond,
        cond(
            "Failed",
            phase == "Failed",
            "StageFailed" if phase == "Failed" else "NoFailure",
            "; ".join(failures) if failures else "Nothing has failed",
        ),
    ]

    status: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": gen,
        "conditions": conditions,
        "progress": f"{items_done}/{items_total}",  # the printer column: items done / total
        "stages": stages_status,
        "placement": placement_status,
        "startedAt": previous.get("startedAt") or (now if phase != "Pending" else None),
        "completedAt": previous.get("completedAt") or (now if phase in TERMINAL_PHASES else None),
    }
    if phase == "Succeeded":
        status["summary"] = (
            dict(observed.summary) if observed.summary is not None else previous.get("summary")
        )
    elif previous.get("summary") is not None:
        status["summary"] = previous.get("summary")

    # --- events -------------------------------------------------------------------------------
    events: list[Event] = []
    if phase != prev_phase or not previous:
        kind: Literal["Normal", "Warning"] = "Warning" if phase == "Failed" or unsched_now else "Normal"
        message = {
            "Pending": unsched_cond["message"] if unsched_now else provisioned["message"],
            "Provisioning": "Starting model servers",
            "Generating": "Generating answers",
            "Judging": "All answers generated; judging",
            "Aggregating": "All answers judged; aggregating",
            "Succeeded": "Report ready"
            + (f"; leader {leader}" if (leader := (status.get("summary") or {}).get("leader")) else ""),
            "Failed": "; ".join(failures) or "Failed",
        }[phase]
        events.append(Event(kind, phase, _sentence(message)))
    before = {c.get("type"): c.get("status") for c in prev_conditions}
    if unsched_cond["status"] == "True" and before.get("Unschedulable") != "True" and phase == prev_phase:
        events.append(Event("Warning", "Unschedulable", unsched_cond["message"]))
    return Plan(actions=tuple(actions), status=status, events=tuple(events))


def with_settings(run: RunInputs, **changes: Any) -> RunInputs:
    """A copy of ``run`` with different workload settings (tests, overrides)."""
    return dataclasses.replace(run, settings=dataclasses.replace(run.settings, **changes))


# ----------------------------------------------------------------------------- from the spec


def run_settings(base: WorkloadSettings, spec: Any) -> WorkloadSettings:
    """The cluster-wide settings with the run's own overrides (``spec.jobs``, cache, secrets)."""
    changes: dict[str, Any] = {"startup_budget_seconds": int(spec.startup_timeout_seconds)}
    if spec.model_cache is not None:
        changes["model_cache_pvc"] = spec.model_cache.claim_name
        changes["model_cache_mount"] = spec.model_cache.mount_path
    if spec.hf_token_secret_ref is not None:
        changes["hf_token_secret"] = spec.hf_token_secret_ref.name
        changes["hf_token_key"] = spec.hf_token_secret_ref.key
    changes["job_backoff_limit"] = int(spec.jobs.backoff_limit)
    if spec.jobs.active_deadline_seconds:
        deadline = int(spec.jobs.active_deadline_seconds)
        changes.update(
            generation_deadline_seconds=deadline,
            judging_deadline_seconds=deadline,
            aggregation_deadline_seconds=deadline,
        )
    if spec.jobs.image:
        changes["job_image"] = spec.jobs.image
    if spec.storage.persistent_volume_claim:
        changes["results_pvc"] = spec.storage.persistent_volume_claim
    if spec.storage.credentials_secret_ref is not None:
        changes["storage_secret"] = spec.storage.credentials_secret_ref.name
    return dataclasses.replace(base, **changes)


def _endpoint(entry: Any, key: str, placement: PlacementDecision | None) -> Endpoint:
    secret = entry.api_key_secret_ref
    source = entry.source or ""
    if (
        entry.runtime != "openai"
        and (source.startswith("embedded://") or entry.gguf_path)
        and placement is not None
    ):
        # The embedded model and local .gguf paths exist only on the machine running local mode.
        placement = dataclasses.replace(
            placement,
            schedulable=False,
            reason=(
                f"source {source or entry.gguf_path} exists only in local mode (kubejury run); in a cluster "
                "give the weights as hf://org/repo, pvc://claim/path or s3://…"
            ),
        )
    return Endpoint(
        key=key,
        name=entry.name,
        source=entry.source or "",
        served_model=entry.request_model,
        runtime=entry.runtime,
        checkpoint=entry.checkpoint,
        placement=placement if entry.runtime != "openai" else None,
        api_key_secret=secret.name if secret is not None else None,
        api_key_key=secret.key if secret is not None else "api-key",
        api_key_env=entry.api_key_env or mf.API_KEY_ENV,
        max_model_len=entry.max_model_len,
        gpu_memory_utilization=entry.gpu_memory_utilization,
        cpu=entry.resources.cpu,
        memory=entry.resources.memory,
        extra_args=tuple(entry.extra_args),
    )


def _same_server(a: Any, b: Any) -> bool:
    return bool(
        a.runtime == b.runtime
        and a.source == b.source
        and a.quantization == b.quantization
        and a.runtime != "openai"
    )


def run_inputs(
    body: Mapping[str, Any],
    evalrun: Any,
    placements: Mapping[str, PlacementDecision],
    base: WorkloadSettings,
) -> RunInputs:
    """Planner inputs from the EvalRun object, its parsed spec (``kubejury.config.spec.EvalRun``) and the
    placement decision of every model and judge (by name; openai entries need none)."""
    meta = body.get("metadata") or {}
    spec = evalrun.spec
    ref = RunRef(
        name=str(meta["name"]),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid") or ""),
    )
    models = tuple(
        _endpoint(m, mf.endpoint_key("model", m.name), placements.get(m.name)) for m in spec.models
    )
    by_name = {m.name: m for m in spec.models}
    judges = []
    for j in spec.judges:
        twin = by_name.get(j.same_as) if j.same_as else None
        if twin is not None and _same_server(twin, j):
            key = mf.endpoint_key("model", twin.name)
            placement = placements.get(twin.name)
        else:
            key = mf.endpoint_key("judge", j.name)
            placement = placements.get(f"{j.name} (judge)") or placements.get(j.name)
        judges.append(_endpoint(j, key, placement))
    storage_uri = spec.storage.uri
    secret = spec.storage.credentials_secret_ref
    return RunInputs(
        ref=ref,
        generation=int(meta.get("generation") or 1),
        body=body,
        models=models,
        judges=tuple(judges),
        series=tuple(s.name for s in spec.series),
        max_concurrent_models=int(spec.max_concurrent_models),
        settings=run_settings(base, spec),
        storage=mf.JobStorage(
            uri=storage_uri, credentials_secret=secret.name if secret is not None else None
        ),
        generation_shards=int(spec.jobs.generation_shards),
        report_uri=storage_uri.rstrip("/") + f"/{ref.name}/report/",
    )


# ------------------------------------------------------------------- reading observed objects


def deployment_state(obj: Mapping[str, Any]) -> DeploymentState:
    """A Deployment as the planner sees it (``stalled``: ProgressDeadlineExceeded)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    stalled = False
    message = ""
    for c in status.get("conditions") or []:
        if (
            c.get("type") == "Progressing"
            and c.get("status") == "False"
            and c.get("reason") == "ProgressDeadlineExceeded"
        ):
            stalled = True
            message = str(c.get("message") or "")
    replicas = spec.get("replicas")
    return DeploymentState(
        replicas=1 if replicas is None else int(replicas),
        ready_replicas=int(status.get("readyReplicas") or 0),
        stalled=stalled,
        message=message,
    )


def job_state(obj: Mapping[str, Any]) -> JobState:
    """A Job as the planner sees it: succeeded (Complete) or failed for good (Failed)."""
    status = obj.get("status") or {}
    succeeded = failed = False
    message = ""
    for c in status.get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") in ("Complete", "SuccessCriteriaMet"):
            succeeded = True
        elif c.get("type") in ("Failed", "FailureTarget"):
            failed = True
            message = str(c.get("message") or c.get("reason") or "")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    try:
        models_complete = int(annotations.get(mf.ANNOTATION_MODELS_COMPLETE, 0))
    except (TypeError, ValueError):
        models_complete = 0
    return JobState(
        succeeded=succeeded and not failed, failed=failed, message=message, models_complete=models_complete
    )


PROGRESS_STAGES = {"generate": "generate", "generation": "generate", "judge": "judge", "judging": "judge"}


def progress_key(series: str, key: str) -> ProgressKey | None:
    """``(stage, series, name)`` from a progress record's storage key ``…/progress/<stage>-<name>.json``."""
    file = key.rsplit("/", 1)[-1]
    if not file.endswith(".json") or "-" not in file:
        return None
    stage, _, who = file[: -len(".json")].partition("-")
    normalized = PROGRESS_STAGES.get(stage)
    if normalized is None or not who:
        return None
    return (normalized, series, who)


_SHARD_SUFFIX = re.compile(r"^(?P<who>.+)\.shard-(?P<index>\d+)-of-(?P<count>\d+)$")


def collect_progress(
    entries: Iterable[tuple[str, str, Mapping[str, Any]]],
) -> dict[ProgressKey, ProgressRecord]:
    """Progress by (stage, series, name) from ``(series, storage key, record)`` triples.

    The completions of a sharded generation Job each write ``<stage>-<name>.shard-<i>-of-<n>.json``;
    they are merged into one record: counts add up, and it is complete only when all ``n`` shards
    have reported complete (one finished shard must not mark the model's generation done).
    """
    progress: dict[ProgressKey, ProgressRecord] = {}
    shards: dict[ProgressKey, dict[int, ProgressRecord]] = {}
    expected: dict[ProgressKey, int] = {}
    for series, key, record in entries:
        pk = progress_key(series, key)
        if pk is None:
            continue
        match = _SHARD_SUFFIX.match(pk[2])
        if match is None:
            progress[pk] = ProgressRecord.from_record(record)
            continue
        base = (pk[0], pk[1], match["who"])
        shards.setdefault(base, {})[int(match["index"])] = ProgressRecord.from_record(record)
        expected[base] = max(expected.get(base, 0), int(match["count"]))
    for base, parts in shards.items():
        progress[base] = merge_shard_progress(list(parts.values()), expected[base])
    return progress


def merge_shard_progress(parts: Sequence[ProgressRecord], shard_count: int) -> ProgressRecord:
    """One record for a sharded stage; totals only cover the shards that have reported so far."""
    request_errors: dict[str, int] = {}
    for part in parts:
        for kind, count in part.request_errors.items():
            request_errors[kind] = request_errors.get(kind, 0) + count
    return ProgressRecord(
        done=sum(p.done for p in parts),
        total=sum(p.total for p in parts),
        errors=sum(p.errors for p in parts),
        parse_failures=sum(p.parse_failures for p in parts),
        complete=len(parts) >= shard_count and all(p.complete for p in parts),
        request_errors=request_errors,
        rate_per_s=sum(p.rate_per_s for p in parts),
        running=any(p.running for p in parts),
    )


def pod_scheduling_problems(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Endpoint key → scheduler message, for model server Pods that are Pending and unschedulable."""
    problems: dict[str, str] = {}
    for pod in pods:
        key = ((pod.get("metadata") or {}).get("labels") or {}).get(mf.LABEL_ENDPOINT)
        status = pod.get("status") or {}
        if not key or status.get("phase") != "Pending":
            continue
        for c in status.get("conditions") or []:
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"
            ):
                problems[str(key)] = str(c.get("message") or "no node fits")[:300]
    return problems
