"""A real Prometheus (Debian's ``prometheus`` package) scraping one target on loopback, and the
Grafana dashboards' panel queries evaluated through its HTTP API as Grafana sends them.

Why this module exists: the dashboards are checked after a run in two places — against the
operator's metrics module replaying a run (``tests/integration/operator``) and against the real
operator after a real run on the dev cluster (``tests/e2e``). Both start Prometheus and fill in
Grafana's macros the same way, here.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "charts" / "kubejury" / "dashboards"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_SECONDS = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(what: str, ready: Callable[[], Any], timeout: float = 60.0) -> None:
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
class Prometheus:
    api: str  # http://127.0.0.1:<port>/api/v1
    started: float  # when the first scrape could happen (start of the queried window)

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = get_json(f"{self.api}/query?query={urllib.parse.quote(expr)}")["data"][
            "result"
        ]
        return result

    def query_range(self, expr: str, end: float | None = None) -> list[dict[str, Any]]:
        params = urllib.parse.urlencode(
            {"query": expr, "start": self.started - 5, "end": end or time.time(), "step": SCRAPE_SECONDS}
        )
        try:
            answer = get_json(f"{self.api}/query_range?{params}")
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"Prometheus rejected {expr!r}: {exc.read().decode()}") from exc
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def series(self, selector: str) -> list[dict[str, str]]:
        params = urllib.parse.urlencode({"match[]": selector, "start": self.started - 5, "end": time.time()})
        found: list[dict[str, str]] = get_json(f"{self.api}/series?{params}")["data"]
        return found

    def grafana_expression(self, expr: str) -> str:
        """``expr`` as Grafana sends it for a range covering the whole test: ``$__rate_interval``
        is max(4 × scrape interval, step + scrape interval), ``$__range`` the range, every
        variable "All" (``.*``)."""
        range_seconds = math.ceil(time.time() - self.started) + 60
        expr = expr.replace("$__rate_interval", f"{4 * SCRAPE_SECONDS}s").replace(
            "$__range", f"{range_seconds}s"
        )
        return re.sub(r"\$(namespace|run|model)\b", ".*", expr)


@contextmanager
def prometheus_scraping(target: str, directory: Path) -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` (host:port) every second, its TSDB and log in ``directory``."""
    if not Path(PROMETHEUS).exists():
        raise AssertionError(f"{PROMETHEUS} is missing: run `make prometheus` (Debian's prometheus package)")
    port = free_port()
    config = directory / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {
                    "scrape_interval": f"{SCRAPE_SECONDS}s",
                    "evaluation_interval": f"{SCRAPE_SECONDS}s",
                },
                "scrape_configs": [
                    {"job_name": "kubejury-operator", "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    with (directory / "prometheus.log").open("w") as log:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            api = f"http://127.0.0.1:{port}/api/v1"
            wait_for("Prometheus ready", lambda: get_json(f"{api}/status/buildinfo")["status"] == "success")
            yield Prometheus(api=api, started=time.time())
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def panel_queries(name: str) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every target of dashboard ``name``."""
    dashboard = json.loads((DASHBOARDS / f"{name}.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def variable_selectors(name: str) -> Iterator[tuple[str, str, str]]:
    """(variable, selector with variables set to "All", label) of each ``label_values`` variable."""
    dashboard = json.loads((DASHBOARDS / f"{name}.json").read_text())
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else str(variable["query"])
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, flags=re.S)
        assert match, f"{name}: variable {variable['name']}: not a label_values() query: {query}"
        yield variable["name"], re.sub(r'=~"\$\w+"', '=~".*"', match[1]), match[2]


def has_data(series: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(v)) for s in series for _, v in s["values"])


def empty_panels(prometheus: Prometheus, dashboard: str, end: float | None = None) -> tuple[int, list[str]]:
    """How many panel queries were evaluated, and the ones without any data in the window."""
    empty, evaluated = [], 0
    for title, expr in panel_queries(dashboard):
        evaluated += 1
        if not has_data(prometheus.query_range(prometheus.grafana_expression(expr), end)):
            empty.append(f"{title}: {expr}")
    return evaluated, empty
