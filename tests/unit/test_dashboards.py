"""The Grafana dashboards query only series that exist: every kubejury_* series is exported by
kubejury_operator.metrics (introspected from its registry) and is grouped and filtered only by
labels it has; every vllm:* series is in the documented list in docs/metrics.md. Every query is
parsed by a real PromQL parser (promql-parser, the Rust parser's Python bindings)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest

from kubejury_operator import metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "charts" / "kubejury" / "dashboards"
METRICS_DOC = ROOT / "docs" / "metrics.md"

KUBEJURY_SERIES = re.compile(r"\bkubejury_[a-z0-9_]+")
VLLM_SERIES = re.compile(r"\bvllm:[a-zA-Z0-9_:]+")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DASHBOARDS / f"{name}.json").read_text())
    return data


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every PromQL expression: panel targets and query variables."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query":
            yield query["query"] if isinstance(query, dict) else str(query)


GRAFANA_MACROS = {"$__rate_interval": "5m", "$__range": "6h", "$__interval": "1m"}


def parse(expr: str) -> Any:
    """The PromQL AST of a dashboard expression (Grafana's range macros replaced by durations;
    ``label_values(<selector>, <label>)`` variable queries yield their selector)."""
    for macro, duration in GRAFANA_MACROS.items():
        expr = expr.replace(macro, duration)
    match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", expr, flags=re.S)
    if match:
        expr = match[1]
    return promql_parser.parse(expr)


def selectors(node: Any, grouping: tuple[str, ...] = ()) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """Every vector selector under ``node``, with the ``by (...)`` labels that group it."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node, grouping
        return
    if kind == "AggregateExpr" and node.modifier is not None and str(node.modifier).startswith("by"):
        grouping = (*grouping, *node.modifier.labels)
    for attribute in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, str | int | float):
            yield from selectors(child, grouping)
    for child in getattr(node, "args", None) or []:
        yield from selectors(child, grouping)


def selector_names(expr: str) -> set[str]:
    return {vs.name for vs, _ in selectors(parse(expr)) if vs.name}


def documented_vllm_series() -> set[str]:
    text = METRICS_DOC.read_text()
    start, end = "<!-- vllm-series:start -->", "<!-- vllm-series:end -->"
    assert start in text and end in text, f"{METRICS_DOC} lacks the vllm series list markers"
    block = text.split(start, 1)[1].split(end, 1)[0]
    return set(re.findall(r"^- `(vllm:[^`]+)`", block, flags=re.M))


@pytest.mark.parametrize("name,title", [("runs", "kubejury / runs"), ("inference", "kubejury / inference")])
def test_dashboard_parses_and_is_well_formed(name: str, title: str) -> None:
    board = load(name)
    assert board["title"] == title
    assert board["uid"] == f"kubejury-{name}"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']!r} has no query"
            assert panel.get("description"), f"panel {panel['title']!r} has no description"
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"


def test_runs_dashboard_covers_the_required_views() -> None:
    titles = {panel["title"] for panel in load("runs")["panels"]}
    for required in (
        "Runs by phase",
        "Progress per run",
        "ETA per run",
        "Answers per second",
        "Judgments per second",
        "Request errors by endpoint",
        "Judge parse failures",
    ):
        assert required in titles
    assert any(title.startswith("Stage durations") for title in titles)


@pytest.mark.parametrize("name", ["runs", "inference"])
def test_every_query_is_valid_promql(name: str) -> None:
    for expr in expressions(load(name)):
        try:
            parse(expr)
        except Exception as error:  # the parser raises plain ValueError/RuntimeError subclasses
            pytest.fail(f"{name}.json: invalid PromQL {expr!r}: {error}")


def test_parser_based_extraction_agrees_with_the_text_scan() -> None:
    for name in ("runs", "inference"):
        for expr in expressions(load(name)):
            scanned = set(KUBEJURY_SERIES.findall(expr)) | set(VLLM_SERIES.findall(expr))
            assert selector_names(expr) == scanned, expr


def test_kubejury_queries_use_only_labels_the_metrics_have() -> None:
    labels = metrics.metric_labels()
    for expr in expressions(load("runs")):
        found = list(selectors(parse(expr)))
        for vs, _ in found:
            assert vs.name in labels, f"{vs.name} is not exported ({expr})"
            for matcher in vs.matchers.matchers:
                assert matcher.name in labels[vs.name], f"{vs.name} has no label {matcher.name!r} ({expr})"
        for grouping in {g for _, g in found}:
            inner = {v.name for v, g in found if g == grouping}
            available = set.union(*(set(labels[n]) for n in inner))
            missing = set(grouping) - available
            assert not missing, f"grouping by {sorted(missing)} that {sorted(inner)} lack ({expr})"


def test_variable_queries_use_existing_labels() -> None:
    labels = metrics.metric_labels()
    for variable in load("runs")["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"]
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
        assert match, query
        (vs, _), *_ = list(selectors(parse(query)))
        assert match[2] in labels[vs.name], query


def test_every_kubejury_series_is_exported_by_the_operator() -> None:
    exported = metrics.metric_names()
    queried = {m for expr in expressions(load("runs")) for m in KUBEJURY_SERIES.findall(expr)}
    assert queried, "the runs dashboard queries no kubejury_* series"
    missing = sorted(queried - exported)
    assert not missing, f"dashboard queries series the operator does not export: {missing}"
    # the inference dashboard may only use vllm:* series
    assert not {m for expr in expressions(load("inference")) for m in KUBEJURY_SERIES.findall(expr)}


def test_every_vllm_series_is_documented() -> None:
    documented = documented_vllm_series()
    queried = {
        m
        for name in ("runs", "inference")
        for expr in expressions(load(name))
        for m in VLLM_SERIES.findall(expr)
    }
    assert queried, "the inference dashboard queries no vllm: series"
    undocumented = sorted(queried - documented)
    assert not undocumented, f"vllm series not in docs/metrics.md's list: {undocumented}"


def test_kv_cache_query_tolerates_the_rename() -> None:
    exprs = [e for e in expressions(load("inference")) if "cache_usage_perc" in e]
    assert exprs, "no KV cache panel"
    for expr in exprs:
        assert "vllm:kv_cache_usage_perc" in expr and "vllm:gpu_cache_usage_perc" in expr
        assert " or " in expr


def test_every_exported_kubejury_metric_is_documented() -> None:
    doc = METRICS_DOC.read_text()
    families = {m.name for m in metrics.REGISTRY.collect() if m.name.startswith("kubejury_")}
    assert families
    for family in families:
        kind = next(m.type for m in metrics.REGISTRY.collect() if m.name == family)
        shown = f"{family}_total" if kind == "counter" else family
        assert f"`{shown}`" in doc, f"{shown} is exported but not documented in docs/metrics.md"


def test_series_name_extraction_finds_names_and_ignores_grafana_variables() -> None:
    expr = (
        'sum(rate(kubejury_items_judged_total{name=~"$run"}[$__rate_interval])) or vllm:kv_cache_usage_perc'
    )
    assert KUBEJURY_SERIES.findall(expr) == ["kubejury_items_judged_total"]
    assert VLLM_SERIES.findall(expr) == ["vllm:kv_cache_usage_perc"]
