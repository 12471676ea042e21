"""The runs dashboard after a real run: the real operator, scraped by a real Prometheus.

Real: everything ``test_control_plane_e2e.py`` names (the dev cluster, the helm-installed chart,
the operator process as its ServiceAccount) plus Debian's ``prometheus`` scraping the operator's
own metrics port every second (``tests/prometheus_harness.py``). Simulated, as there: the Job pods'
kubelet, the model servers (stubs) and cluster DNS. The CPU example runs to Succeeded in its own
namespace while Prometheus scrapes; then every panel query of both dashboards goes through
Prometheus's HTTP API as Grafana would send it.

Panels that may be empty after this run, and why:

* ``Request errors by endpoint``: the stub model servers answer every request, and the series
  only exists once an endpoint has failed;
* ``Reconciles and errors`` (its errors query only) — no handler raised; the panel's other query
  must have data, so the panel as a whole is required to;
* ``ETA per run``: the stubs answer a stage's questions in well under the 2 s reconcile interval,
  so no reconcile may see a stage running with a rate; the ETA only exists then;
* ``Share of held GPU time idle``: the CPU example's model servers request no GPU, so nothing is
  held and the share is undefined (its GPU-seconds series exist, at 0, for the panel beside it);
* every panel of ``inference.json``: only vLLM exports ``vllm:*`` series, and no vLLM server runs
  here (no GPU). Still evaluated: a query Prometheus rejects fails the test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import yaml
from e2e_kube import REPO
from e2e_runs import prepare, run_to_the_end
from kubeapi import KubeApi
from operator_up import OperatorState

from prometheus_harness import Prometheus, empty_panels, prometheus_scraping

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

NAMESPACE, NAME = "e2e-prometheus", "scraped"
# Queries that may be empty after this run, by the series they read (see the docstring).
MAY_BE_EMPTY_RUN_QUERIES = {
    "kubejury_request_errors_total": "the stubs answer every request",
    "kubejury_reconcile_errors_total": "no handler raised",
    "kubejury_run_eta_seconds": "a stub stage finishes within one reconcile interval",
    "1 - sum by (namespace, name, model) (kubejury_gpu_used": "the CPU example's servers hold no GPU",
}


@pytest.fixture(scope="module")
def prometheus(
    kube_operator: OperatorState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    target = f"127.0.0.1:{kube_operator.metrics_port}"
    with prometheus_scraping(target, tmp_path_factory.mktemp("prometheus-e2e")) as prom:
        yield prom


async def test_after_a_real_run_every_runs_panel_has_data_and_every_query_evaluates(
    api: KubeApi, kube_operator: OperatorState, prometheus: Prometheus
) -> None:
    body = yaml.safe_load((REPO / "examples" / "evalrun-kind-cpu.yaml").read_text())
    body["metadata"].update(namespace=NAMESPACE, name=NAME)
    await prepare(api, kube_operator, NAMESPACE, NAME, hosted_key=False)
    await api.create("evalruns", NAMESPACE, body)
    status = await run_to_the_end(api, kube_operator, NAMESPACE, NAME)
    assert status["phase"] == "Succeeded", status
    await asyncio.sleep(5)  # scrapes of the finished run (the operator keeps reconciling it)
    end = time.time()

    evaluated, empty = empty_panels(prometheus, "runs", end)
    assert evaluated > 0
    required = [query for query in empty if not any(series in query for series in MAY_BE_EMPTY_RUN_QUERIES)]
    assert not required, "panels without data after a real run:\n" + "\n".join(required)
    evaluated, _ = empty_panels(prometheus, "inference", end)  # may be empty; must evaluate
    assert evaluated > 0

    answers = status["stages"]["generation"]["done"]
    judgments = status["stages"]["judging"]["done"]
    for metric, expected in (
        ("kubejury_items_generated_total", answers),
        ("kubejury_items_judged_total", judgments),
    ):
        series = prometheus.query_range(f'sum({metric}{{namespace="{NAMESPACE}", name="{NAME}"}})', end)
        assert series and float(series[0]["values"][-1][1]) == expected, (metric, expected, series)
    durations = prometheus.query_range('sum(kubejury_stage_duration_seconds_count{stage="generation"})', end)
    assert durations and float(durations[0]["values"][-1][1]) >= 1
