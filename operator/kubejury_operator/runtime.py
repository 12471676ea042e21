"""The operator's process-wide state, shared by every handler through kopf's memo.

Why this module exists: the handlers need one place for what outlives a single call — the
workload settings and the chart's allow-lists read at start-up, the API credentials kopf logged in
with, the Kubernetes API client made from them, which child events change anything, and one
:class:`~kubejury_operator.memory.RunMemory` per run. It holds them and decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import kopf

from kubejury_operator import settings as opsettings
from kubejury_operator.gateway import ApiCredentials, KubeGateway
from kubejury_operator.kube_api import KubeApi
from kubejury_operator.memory import RunKey, RunMemory
from kubejury_operator.tenancy import TenantPolicy
from kubejury_operator.work_queue import (
    DEFAULT_RECONCILE_INTERVAL,
    ChildChanges,
    Clock,
    MonotonicClock,
    QueueTiming,
    RunQueue,
)


@dataclass
class OperatorRuntime:
    """Settings, credentials, the API client and each run's memory. What it keeps per run only
    saves work and never decides a plan: a restart loses none of a run."""

    settings: opsettings.WorkloadSettings
    credentials: ApiCredentials | None = None
    policy: TenantPolicy = field(default_factory=TenantPolicy)  # the chart's allow-lists
    closed: bool = False
    interval: float = DEFAULT_RECONCILE_INTERVAL  # seconds between a run's timer reconciles
    timing: QueueTiming | None = None  # None: the interval given and the default child-event delays
    clock: Clock = field(default_factory=MonotonicClock, repr=False)
    children: ChildChanges = field(default_factory=ChildChanges, repr=False)
    runs: dict[RunKey, RunMemory] = field(default_factory=dict, repr=False)
    # the API client; set directly only by tests, which hand it a fake
    _gateway: KubeApi | None = field(default=None, repr=False)
    _gateway_for: ApiCredentials | None = field(default=None, repr=False)  # what it was made with

    def memory(self, key: RunKey) -> RunMemory:
        """The run's memory, made on first use."""
        known = self.runs.get(key)
        if known is None:
            timing = self.timing or QueueTiming(interval=self.interval)
            known = self.runs[key] = RunMemory(queue=RunQueue(timing, self.clock))
        return known

    def active_runs(self) -> int:
        """How many runs this process last saw unfinished (:attr:`RunMemory.active`)."""
        return sum(1 for memory in self.runs.values() if memory.active)

    def forget(self, key: RunKey) -> None:
        """A deleted run's memory (its children's entries go with their DELETED events)."""
        self.runs.pop(key, None)

    def gateway(self) -> KubeApi:
        """The API client for the current credentials (made again when kopf logs in anew)."""
        if self.closed:  # a handler kopf left running past shutdown must not open a new session
            raise kopf.TemporaryError("the operator is shutting down", delay=60)
        if self.credentials is None:
            raise kopf.TemporaryError("no Kubernetes API credentials yet", delay=5)
        stale = self._gateway_for is not None and self._gateway_for != self.credentials
        if self._gateway is None or stale:
            self._gateway, self._gateway_for = KubeGateway(self.credentials), self.credentials
        return self._gateway

    async def close(self) -> None:
        self.closed = True
        if self._gateway is not None:
            await self._gateway.close()
            self._gateway = None
