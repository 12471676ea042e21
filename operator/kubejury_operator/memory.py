"""What the operator remembers of one run between reconciles: one :class:`RunMemory` per run.

Why this module exists: the operator keeps a few things per run only to save work — its work
queue, when its status was last written, the writes its caches do not show yet, a recent progress
reading, the spec as last parsed and the planner's view of the run. Kept as parallel tables, each
one had to be remembered when a run was deleted; kept as one record (as kopf keeps one memory per
object), forgetting a run is one ``pop``. Nothing here decides a plan: a restart loses none of a
run. :func:`run_key` is the one reading of a run's (namespace, name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubejury.config import spec as specmod
from kubejury_operator import settings as opsettings
from kubejury_operator.cluster_run import ClusterRun, cluster_run
from kubejury_operator.expectations import Expectations
from kubejury_operator.placing import pinned_placements
from kubejury_operator.progress_cache import ProgressCache
from kubejury_operator.vocabulary import namespace_of
from kubejury_operator.work_queue import RunQueue

RunKey = tuple[str, str]  # (namespace, name) of an EvalRun
ParsedSpec = tuple[specmod.EvalRun | None, list[specmod.FieldProblem]]


def run_key(body_or_meta: Mapping[str, Any]) -> RunKey:
    """(namespace, name) of a run, from its body or its ``metadata`` (namespace ``default`` when
    it names none, as the API server reads it)."""
    meta = body_or_meta.get("metadata")
    body = body_or_meta if isinstance(meta, Mapping) else {"metadata": body_or_meta}
    return namespace_of(body), str(body["metadata"].get("name"))


def spec_source(meta: Mapping[str, Any]) -> str:
    """What a run's parsed spec depends on besides the spec, whose changes bump the generation."""
    return json.dumps(
        [meta.get("uid"), meta.get("generation"), meta.get("labels"), meta.get("annotations")],
        sort_keys=True,
        default=str,
    )


@dataclass
class RunMemory:
    """Everything the operator keeps of one run; dropped whole when the run is deleted."""

    queue: RunQueue = field(default_factory=RunQueue)
    status_written_at: float | None = None  # monotonic seconds of this process's last status write
    # the last reconcile left the run unfinished: its counters share the operator's write budget
    # (:func:`kubejury_operator.status.minor_interval`)
    active: bool = False
    expectations: Expectations = field(default_factory=Expectations)  # writes the caches lack yet
    progress: ProgressCache = field(default_factory=ProgressCache)  # the last progress reading
    _parsed: tuple[str, ParsedSpec] | None = field(default=None, repr=False)
    _pinned: tuple[str, ClusterRun] | None = field(default=None, repr=False)

    def since_status_written(self, now: float) -> float | None:
        """Seconds since this process last wrote the run's status; None when it has not."""
        return None if self.status_written_at is None else now - self.status_written_at

    def parsed_spec(self, obj: Mapping[str, Any]) -> ParsedSpec:
        """:func:`kubejury.config.spec.evalrun_problems` of the run, parsed again only when its spec
        (``metadata.generation``), labels or annotations changed — not for each status write."""
        source = spec_source(obj.get("metadata") or {})
        if self._parsed is not None and self._parsed[0] == source:
            evalrun, problems = self._parsed[1]
            return evalrun, list(problems)
        evalrun, problems = specmod.evalrun_problems({k: v for k, v in obj.items() if k != "status"})
        self._parsed = (source, (evalrun, list(problems)))
        return evalrun, list(problems)

    def pinned_run(
        self,
        obj: Mapping[str, Any],
        evalrun: specmod.EvalRun,
        previous: Mapping[str, Any],
        settings: opsettings.WorkloadSettings,
    ) -> ClusterRun | None:
        """The planner's view of the run (:func:`cluster_run`) with the placement pinned in its
        status; ``None`` while none is pinned. Built again only when the spec or the pinned
        placement changed: building it (and the bring-up order) on every reconcile was a tenth of a
        busy operator's CPU."""
        source = spec_source(obj.get("metadata") or {}) + json.dumps(
            previous.get("placement"), sort_keys=True, default=str
        )
        known = self._pinned
        if known is not None and known[0] == source and previous.get("phase") not in (None, "Pending"):
            return known[1]
        placements = pinned_placements(previous, evalrun)
        if placements is None:
            return None
        run = cluster_run(obj, evalrun, placements, settings)
        self._pinned = (source, run)
        return run
