"""What the operator has just written and its watch-fed caches do not show yet.

Why this module exists: a reconcile reads its run's children from watch-fed caches
(:mod:`kubejury_operator.watched`), and a cache learns of the operator's own create or scale only
when the watch delivers it — milliseconds later on an idle operator, seconds later on a busy one.
A reconcile in between saw the world without that write and wrote it again: at a hundred runs the
scale benchmark counted up to 91 scale patches of one Deployment and hundreds of Job creates the
API server refused as already there, each one more event and one more reconcile. This is what
Kubernetes' own ReplicaSet controller calls *expectations*: each write is remembered until the
cache shows it, and until then the reconcile sees the object as written (:meth:`Expectations.view`).
A remembered write the cache never shows (someone deleted the object at once, a watch that lost
it) is forgotten after :data:`EXPECTATION_TTL_SECONDS`, and the level-triggered planner writes it
again. Pure: times are arguments; one instance per run lives in its
:class:`~kubejury_operator.memory.RunMemory`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubejury_operator.observed import DeploymentState, JobState, Observed, deployment_state, job_state

# seconds a write is assumed to be on its way to the cache; past that the cache is believed
EXPECTATION_TTL_SECONDS = 60.0
SEEN_AS_PRESENT = ("Service", "ConfigMap", "ServiceAccount")  # kinds Observed keeps as present


@dataclass
class Expectations:
    """One run's writes not yet seen in the caches: created objects and Deployment scales."""

    # (kind, name) -> (when written, the manifest sent)
    created: dict[tuple[str, str], tuple[float, Mapping[str, Any]]] = field(default_factory=dict)
    # Deployment name -> (when written, replicas sent)
    scaled: dict[str, tuple[float, int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.created or self.scaled)

    def expect_created(self, kind: str, name: str, manifest: Mapping[str, Any], now: float) -> None:
        self.created[(kind, name)] = (now, manifest)

    def expect_scaled(self, name: str, replicas: int, now: float) -> None:
        self.scaled[name] = (now, replicas)

    def settle(self, observed: Observed, now: float) -> None:
        """Forget every write the caches now show, and every one older than the TTL."""
        for key, (at, _manifest) in list(self.created.items()):
            if _shows(observed, *key) or now - at > EXPECTATION_TTL_SECONDS:
                del self.created[key]
        for name, (at, replicas) in list(self.scaled.items()):
            current = observed.deployments.get(name)
            if (current is not None and current.replicas == replicas) or now - at > EXPECTATION_TTL_SECONDS:
                del self.scaled[name]

    def view(self, observed: Observed) -> Observed:
        """``observed`` with the remembered writes in it: a created Job or Deployment as its
        manifest says (a Job not started, a Deployment with no Ready replica), a created Service,
        ConfigMap or ServiceAccount present, a scaled Deployment at the replicas sent."""
        if not self:
            return observed
        jobs: dict[str, JobState] = dict(observed.jobs)
        deployments: dict[str, DeploymentState] = dict(observed.deployments)
        present = set(observed.present)
        for (kind, name), (_at, manifest) in self.created.items():
            if kind == "Job":
                jobs.setdefault(name, job_state(manifest))
            elif kind == "Deployment":
                deployments.setdefault(name, deployment_state(manifest))
            elif kind in SEEN_AS_PRESENT:
                present.add((kind, name))
        for name, (_at, replicas) in self.scaled.items():
            if name in deployments:
                deployments[name] = dataclasses.replace(deployments[name], replicas=replicas)
        return dataclasses.replace(observed, jobs=jobs, deployments=deployments, present=frozenset(present))


def _shows(observed: Observed, kind: str, name: str) -> bool:
    if kind == "Job":
        return name in observed.jobs
    if kind == "Deployment":
        return name in observed.deployments
    return (kind, name) in observed.present
