"""Every panel query of both Grafana dashboards, evaluated by a real Prometheus after a run.

Real here: Debian's ``prometheus`` binary (``make prometheus`` installs it), scraping the
operator's metrics module over HTTP on loopback every second with its own TSDB in a temp dir; the
queries go through Prometheus's HTTP API (``/api/v1/query_range``, ``/api/v1/series``) exactly as
Grafana sends them, with Grafana's macros filled in as Grafana would for this time range and
scrape interval, and the variables set to "All". Simulated: the cluster and the Jobs — the
operator's metrics module runs on its own (``metrics_replay.py``) and is fed the statuses and
progress records of one two-model, two-judge run (see that module). The promql-parser test
(``tests/unit/test_dashboards.py``) stays the fast check of names and labels.

Panels that may be empty here, and why:

* every panel of ``inference.json``: they read ``vllm:*`` series, which only vLLM model servers
  export; this machine has no GPU, so no vLLM server runs and Prometheus scrapes only the operator.
  They are still evaluated, so a query Prometheus rejects fails the test.

Every panel of ``runs.json`` must have data for the run — including request errors, parse
failures and reconcile errors, because the replayed run has a judge with timed-out requests and an
unparsable reply and one reconcile that raised (a clean run would leave those three empty, which
is what they should show then).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
DASHBOARDS = ROOT / "charts" / "kubejury" / "dashboards"
REPLAY = Path(__file__).with_name("metrics_replay.py")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_SECONDS = 1
TICK_SECONDS = 1.0
MAY_BE_EMPTY = {"inference": "no vLLM server runs on this machine (no GPU); only vLLM exports vllm:* series"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(what: str, ready: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Scraped:
    api: str  # http://127.0.0.1:<port>/api/v1
    run_started: float
    run_finished: float


@pytest.fixture(scope="module")
def prometheus_after_a_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is missing: run `make prometheus` (Debian's prometheus package)")
    tmp = tmp_path_factory.mktemp("prometheus")
    metrics_port, prom_port = free_port(), free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {
                    "scrape_interval": f"{SCRAPE_SECONDS}s",
                    "evaluation_interval": f"{SCRAPE_SECONDS}s",
                },
                "scrape_configs": [
                    {
                        "job_name": "kubejury-operator",
                        "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
                    }
                ],
            }
        )
    )
    log = (tmp / "prometheus.log").open("w")
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    replay = subprocess.Popen(
        [sys.executable, str(REPLAY), str(metrics_port), str(TICK_SECONDS)], stdout=subprocess.PIPE, text=True
    )
    api = f"http://127.0.0.1:{prom_port}/api/v1"
    try:
        assert replay.stdout is not None
        assert replay.stdout.readline().strip() == "serving"
        wait_for("Prometheus ready", lambda: get_json(f"{api}/status/buildinfo")["status"] == "success")
        started = time.time()
        assert replay.stdout.readline().strip() == "finished"
        # a few more scrapes of the finished run, as the operator keeps reconciling it
        succeeded = urllib.parse.quote('kubejury_runs{phase="Succeeded"} == 1')
        wait_for(
            "a scrape showing the run Succeeded",
            lambda: get_json(f"{api}/query?query={succeeded}")["data"]["result"],
        )
        time.sleep(5 * SCRAPE_SECONDS)
        yield Scraped(api=api, run_started=started, run_finished=time.time())
    finally:
        for process in (replay, prometheus):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


def grafana_expression(expr: str, scraped: Scraped) -> str:
    """``expr`` as Grafana sends it for this dashboard's time range: ``$__rate_interval`` is
    max(4 × scrape interval, step + scrape interval), ``$__range`` the range, variables "All"."""
    range_seconds = math.ceil(time.time() - scraped.run_started) + 60
    expr = expr.replace("$__rate_interval", f"{4 * SCRAPE_SECONDS}s").replace("$__range", f"{range_seconds}s")
    return re.sub(r"\$(namespace|run|model)\b", ".*", expr)


def panel_queries(name: str) -> Iterator[tuple[str, str]]:
    dashboard = json.loads((DASHBOARDS / f"{name}.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def variable_selectors(name: str) -> Iterator[tuple[str, str, str]]:
    dashboard = json.loads((DASHBOARDS / f"{name}.json").read_text())
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else str(variable["query"])
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, flags=re.S)
        assert match, f"{name}: variable {variable['name']}: not a label_values() query: {query}"
        yield variable["name"], match[1], match[2]


def query_range(scraped: Scraped, expr: str) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode(
        {"query": expr, "start": scraped.run_started - 5, "end": scraped.run_finished, "step": SCRAPE_SECONDS}
    )
    try:
        answer = get_json(f"{scraped.api}/query_range?{params}")
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"Prometheus rejected {expr!r}: {exc.read().decode()}") from exc
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def has_data(series: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(v)) for s in series for _, v in s["values"])


@pytest.mark.parametrize("dashboard", ["runs", "inference"])
def test_every_panel_query_is_evaluated_and_has_data_where_a_run_must_leave_some(
    prometheus_after_a_run: Scraped, dashboard: str
) -> None:
    empty: list[str] = []
    evaluated = 0
    for title, expr in panel_queries(dashboard):
        series = query_range(prometheus_after_a_run, grafana_expression(expr, prometheus_after_a_run))
        evaluated += 1
        if not has_data(series):
            empty.append(f"{title}: {expr}")
    assert evaluated > 0
    if dashboard in MAY_BE_EMPTY:
        return  # evaluated (Prometheus accepted every query); empty for the reason in MAY_BE_EMPTY
    assert not empty, "panels without data after a run:\n" + "\n".join(empty)


def test_the_run_dashboard_variables_list_the_run(prometheus_after_a_run: Scraped) -> None:
    scraped = prometheus_after_a_run
    for variable, selector, label in variable_selectors("runs"):
        params = urllib.parse.urlencode({"match[]": re.sub(r'=~"\$\w+"', '=~".*"', selector),
                                         "start": scraped.run_started - 5, "end": scraped.run_finished})  # fmt: skip
        series = get_json(f"{scraped.api}/series?{params}")["data"]
        values = {s.get(label) for s in series}
        assert values == {"law-run" if label == "name" else "team-law"}, (variable, values)


def test_the_run_panels_show_what_happened(prometheus_after_a_run: Scraped) -> None:
    """Not only some data: the figures the run produced (answers, judgments, errors, durations)."""
    scraped = prometheus_after_a_run
    last = {
        'kubejury_items_generated_total{namespace="team-law"}': 48,
        'kubejury_items_judged_total{namespace="team-law"}': 96,
        'kubejury_request_errors_total{endpoint="mistral"}': 2,
        "kubejury_judge_parse_failures_total": 1,
        'kubejury_stage_duration_seconds_count{stage=~"generation|judging|aggregation"}': 3,
        'kubejury_runs{phase="Succeeded"}': 1,
    }
    for selector, expected in last.items():
        series = query_range(scraped, f"sum({selector})")
        assert series and float(series[0]["values"][-1][1]) == expected, (selector, series)
    eta = query_range(scraped, 'kubejury_run_eta_seconds{name="law-run"}')
    assert (
        has_data(eta)
        and not get_json(f"{scraped.api}/query?query={urllib.parse.quote('kubejury_run_eta_seconds')}")[
            "data"
        ]["result"]
    ), "the ETA exists while the run runs and is gone once it finished"
