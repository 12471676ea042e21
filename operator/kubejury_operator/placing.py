"""Where a run's model servers go: placed on the Nodes while the run is Pending, read back after.

Why this module exists: a placement is decided once, on the Nodes as they are while the run is
Pending, and then pinned in the run's status (``status.placement``); every later reconcile reads
it back, so a run is never re-planned mid-way (a Node's change cannot move a server that holds a
model's warm cache). The reconcile, the per-run memory and the ``manifests`` preview all need the
same two readings, so they live here, away from the kopf wiring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubejury.config import spec as specmod
from kubejury.records.placement import Placement


def compute_placements(
    evalrun: specmod.EvalRun, nodes: list[dict[str, Any]], chart_tolerations: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Placement]:
    """Placement decision per model and judge name (``runtime: openai`` entries get none).
    ``chart_tolerations``: the chart's GPU tolerations (``WorkloadSettings.extra_tolerations``); a
    GPU node tainted by anything else than the GPU taint and these is never chosen."""
    from kubejury.placement import planner

    return planner.plan_placements(evalrun.spec, planner.parse_node_list(nodes), chart_tolerations)


def pinned_placements(status: Mapping[str, Any], evalrun: specmod.EvalRun) -> dict[str, Placement] | None:
    """Placement recorded in status once the run left Pending (never re-planned mid-run); ``None``
    while Pending or while the status lacks a deployed entry's placement."""
    if str(status.get("phase") or "Pending") == "Pending":
        return None
    recorded = status.get("placement")
    if not isinstance(recorded, Mapping):
        return None
    names = [e.name for e in evalrun.spec.all_endpoints() if e.deployed]
    if not all(isinstance(recorded.get(n), Mapping) for n in names):
        return None
    return {n: Placement.from_json(recorded[n], name=n) for n in names}
