"""Preparing a namespace for an EvalRun and waiting for the run to end, on the e2e control plane.

Why this module exists: every e2e test module that drives a whole run (the control-plane tests and
the dashboards test) needs the same two steps, and a test module must not import another test
module for them; they live here, beside the other e2e helpers (e2e_kube, operator_up).
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from e2e_kube import (
    API_LOAD,
    REPO,
    RunWindow,
    describe_namespace,
    ensure_namespace,
    run_containers,
    status_of,
    wait_for,
)
from kubeapi import KubeApi
from operator_up import OperatorState, ensure_results_claim

RUN_TIMEOUT_S = 420.0
FINAL = ("Succeeded", "Failed")


async def prepare(
    api: KubeApi, state: OperatorState, namespace: str, run: str | None = None, *, hosted_key: bool = True
) -> None:
    """A namespace with the results claim, the benchmark on it and the hosted judge's key; no
    EvalRun ``run`` nor stored results of it left from an earlier session on a reused cluster."""
    await ensure_namespace(api, namespace)
    if run is not None:
        if await api.delete("evalruns", namespace, run):
            await wait_for(lambda: _absent(api, namespace, run), 120, f"the old EvalRun {run} to go")
        for directory in run_containers(state.results_dir, namespace, run):
            shutil.rmtree(directory, ignore_errors=True)
    await ensure_results_claim(api, namespace, state.results_dir)
    shutil.copy(
        REPO / "examples" / "benchmark-ru-sample.jsonl", state.results_dir / "benchmark-ru-sample.jsonl"
    )
    if hosted_key:
        secret = {
            "metadata": {"name": "hosted-key", "namespace": namespace},
            "stringData": {"token": "sk-test"},
        }
        await api.apply("secrets", namespace, secret)


async def _absent(api: KubeApi, namespace: str, run: str) -> bool:
    return await api.get("evalruns", namespace, run) is None


async def run_to_the_end(
    api: KubeApi, state: OperatorState, namespace: str, name: str, timeout: float = RUN_TIMEOUT_S
) -> dict[str, Any]:
    """The EvalRun's status once it is Succeeded or Failed with its summary written (or fails the
    test after ``timeout`` seconds, describing the namespace); the run's window is kept for the
    API-load accounting."""
    started = time.time()

    async def final() -> dict[str, Any] | None:
        status = await status_of(api, namespace, name)
        return status if status.get("phase") in FINAL and status.get("summary", True) is not None else None

    try:
        status: dict[str, Any] = await wait_for(
            final,
            timeout,
            f"EvalRun {namespace}/{name} to finish",
            lambda: describe_namespace(api, namespace, state.operator_log),
        )
    finally:
        API_LOAD.runs.append(RunWindow(namespace, name, started, time.time()))
    return status
