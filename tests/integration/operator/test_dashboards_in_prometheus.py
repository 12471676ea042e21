"""Every panel query of both Grafana dashboards, evaluated by a real Prometheus after a run.

Real here: Debian's ``prometheus`` binary (``make prometheus`` installs it), scraping the
operator's metrics module over HTTP on loopback every second with its own TSDB in a temp dir; the
queries go through Prometheus's HTTP API (``/api/v1/query_range``, ``/api/v1/series``) as Grafana
sends them, with Grafana's macros filled in for this time range and scrape interval and the
variables set to "All" (``tests/prometheus_harness.py``). Simulated: the cluster and the Jobs — the
operator's metrics module runs on its own (``metrics_replay.py``) and is fed the statuses and
progress records of one two-model, two-judge run (see that module). The real operator after a real
run: ``tests/e2e/test_dashboards_e2e.py``. The promql-parser test (``tests/unit/test_dashboards.py``)
stays the fast check of names and labels.

Panels that may be empty here, and why:

* every panel of ``inference.json``: they read ``vllm:*`` series, which only vLLM model servers
  export; this machine has no GPU, so no vLLM server runs and Prometheus scrapes only the operator.
  They are still evaluated, so a query Prometheus rejects fails the test.

Every panel of ``runs.json`` must have data for the run — including request errors, parse
failures and reconcile errors, because the replayed run has a judge with timed-out requests and an
unparsable reply and one reconcile that raised (a clean run leaves those three empty, which is
what they should show then).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prometheus_harness import (
    Prometheus,
    empty_panels,
    free_port,
    prometheus_scraping,
    variable_selectors,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPLAY = Path(__file__).with_name("metrics_replay.py")
TICK_SECONDS = 1.0
MAY_BE_EMPTY = {"inference": "no vLLM server runs on this machine (no GPU); only vLLM exports vllm:* series"}


@pytest.fixture(scope="module")
def prometheus_after_a_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    metrics_port = free_port()
    replay = subprocess.Popen(
        [sys.executable, str(REPLAY), str(metrics_port), str(TICK_SECONDS)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert replay.stdout is not None
        assert replay.stdout.readline().strip() == "serving"
        with prometheus_scraping(f"127.0.0.1:{metrics_port}", tmp_path_factory.mktemp("prometheus")) as prom:
            assert replay.stdout.readline().strip() == "finished"
            wait_for(
                "a scrape showing the run Succeeded",
                lambda: prom.query('kubejury_runs{phase="Succeeded"} == 1'),
            )
            time.sleep(5)  # a few more scrapes of the finished run, as the operator keeps reconciling it
            yield prom
    finally:
        replay.terminate()
        replay.wait(timeout=20)


@pytest.mark.parametrize("dashboard", ["runs", "inference"])
def test_every_panel_query_is_evaluated_and_has_data_where_a_run_must_leave_some(
    prometheus_after_a_run: Prometheus, dashboard: str
) -> None:
    evaluated, empty = empty_panels(prometheus_after_a_run, dashboard)
    assert evaluated > 0
    if dashboard in MAY_BE_EMPTY:
        return  # evaluated (Prometheus accepted every query); empty for the reason in MAY_BE_EMPTY
    assert not empty, "panels without data after a run:\n" + "\n".join(empty)


def test_the_run_dashboard_variables_list_the_run(prometheus_after_a_run: Prometheus) -> None:
    for variable, selector, label in variable_selectors("runs"):
        values = {s.get(label) for s in prometheus_after_a_run.series(selector)}
        assert values == {"law-run" if label == "name" else "team-law"}, (variable, values)


def test_the_run_panels_show_what_happened(prometheus_after_a_run: Prometheus) -> None:
    """Not only some data: the figures the run produced (answers, judgments, errors, durations)."""
    prom = prometheus_after_a_run
    last = {
        'kubejury_items_generated_total{namespace="team-law"}': 48,
        'kubejury_items_judged_total{namespace="team-law"}': 96,
        'kubejury_request_errors_total{endpoint="mistral"}': 2,
        "kubejury_judge_parse_failures_total": 1,
        'kubejury_stage_duration_seconds_count{stage=~"generation|judging|aggregation"}': 3,
        'kubejury_runs{phase="Succeeded"}': 1,
    }
    for selector, expected in last.items():
        series = prom.query_range(f"sum({selector})")
        assert series and float(series[0]["values"][-1][1]) == expected, (selector, series)
    eta = prom.query_range('kubejury_run_eta_seconds{name="law-run"}')
    assert eta and not prom.query("kubejury_run_eta_seconds"), "the ETA exists while the run runs, not after"
