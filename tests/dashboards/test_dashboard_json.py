"""The Grafana dashboard, its provisioning files and the alert rules, checked
without Grafana (which is not available here: import is not tested).

Structure: schema version, the datasource variable and the endpoint/model
variables, unique panel ids, a layout without overlaps, a question for every
panel (in its description and in docs/metrics.md). Content: every metric an
expression names is one the exporter exposes, and every stream panel honours
the endpoint and model variables. The real-Prometheus evaluation of the same
expressions is tests/metrics/test_prometheus.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from ruamel.yaml import YAML

from recorder.core.record import StreamRecord
from recorder.metrics import HEALTH_METRICS, Metrics
from recorder.metrics.budget_rules import BUDGET_AMOUNT, BUDGET_PACE

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
DASHBOARD = DASHBOARDS / "recorder-overview.json"
DOC = ROOT / "docs" / "metrics.md"
DS_REF = {"type": "prometheus", "uid": "${datasource}"}

# PromQL words that look like metric names in an expression.
PROMQL_WORDS = {
    "sum", "by", "without", "rate", "increase", "histogram_quantile", "and", "or", "unless",
    "on", "ignoring", "group_left", "group_right", "bool", "count_over_time", "avg", "max",
    "min", "count", "topk", "le", "offset", "label_values",
}  # fmt: skip


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def graph_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard) if p["type"] != "row"]


def exported_names() -> set[str]:
    """Every series name the exporter can expose (with every health source watched)."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.watch(**dict.fromkeys(HEALTH_METRICS, lambda: 1))
    metrics.observe(
        StreamRecord(
            endpoint="messages",
            provider="anthropic",
            model="m",
            outcome="completed",
            duration_ms=1.0,
            ttft_ms=1.0,
            max_output_gap_ms=1.0,
            input_tokens=1,
            output_tokens=1,
            input_source="reported",
            output_source="reported",
            usage_source="reported",
            cost_usd="1",
        ),
        None,
    )
    unpriced = StreamRecord(model="n", input_tokens=1, unpriced_reason="no price for model 'n'")
    metrics.observe(unpriced, None)
    cut = StreamRecord(model="m", outcome="upstream_disconnect", interrupted=True, cost_usd="1")
    metrics.observe(cut, None)
    metrics.chunk_gap.observe_many(("messages", "anthropic", "m"), [0.1])
    metrics.keepalive_gap.observe_many(("messages", "anthropic", "m"), [0.1])
    return {s.name for family in registry.collect() for s in family.samples}


def metric_names(expr: str) -> set[str]:
    """Identifiers of an expression that name series (not functions, labels or keywords)."""
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names if n not in PROMQL_WORDS and not re.fullmatch(r"e\d*", n)}


def test_is_a_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] == "recorder-overview"
    assert dashboard["title"] and dashboard.get("id") is None  # importable anywhere
    assert dashboard["time"]["from"].startswith("now-")


def test_datasource_and_filter_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name, label in (("endpoint", "endpoint"), ("model", "model")):
        var = variables[name]
        assert var["type"] == "query" and var["datasource"] == DS_REF
        assert var["includeAll"] and var["multi"] and var["allValue"] == ".*"
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert re.fullmatch(rf"label_values\((.+, )?{label}\)", query), query
    model_query = variables["model"]["query"]
    assert "$endpoint" in model_query["query"]  # models of the chosen endpoints
    # the tag the 'Spend by tag' row groups by: a label name the user types
    tag = variables["tag"]
    assert tag["type"] == "textbox" and tag["query"] == "team"


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in all_panels(dashboard)]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids))


def test_layout_has_no_overlaps(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], int] = {}
    for panel in all_panels(dashboard):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (panel["title"], cells[(x, y)])
                cells[(x, y)] = panel["id"]


def test_every_panel_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in graph_panels(dashboard):
        assert panel["datasource"] == DS_REF, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DS_REF
            assert target["expr"].strip()


def test_every_panel_says_the_question_it_answers(dashboard: dict[str, Any]) -> None:
    doc = DOC.read_text()
    for panel in graph_panels(dashboard):
        assert panel["description"].rstrip().endswith("?"), panel["title"]
        assert f"**{panel['title']}**" in doc, f"docs/metrics.md misses panel {panel['title']!r}"


def test_expressions_name_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    # and what `recorder budgets rules` records
    known = exported_names() | {"up", BUDGET_AMOUNT, BUDGET_PACE}
    for panel in graph_panels(dashboard):
        for target in panel["targets"]:
            unknown = metric_names(target["expr"]) - known
            assert not unknown, (panel["title"], unknown)


LIVE_GAUGES = ("llm_streams_stalled", "llm_stream_oldest_silence_seconds")


def test_stream_panels_honour_the_variables(dashboard: dict[str, Any]) -> None:
    for panel in graph_panels(dashboard):
        for target in panel["targets"]:
            expr = target["expr"]
            for selector in re.findall(r"(\w+)\{([^}]*)\}", expr):
                name, matchers = selector
                if name.startswith("llm_recorder_") or name == "up":
                    continue
                assert 'endpoint=~"$endpoint"' in matchers, (panel["title"], expr)
                # the gauges of open streams have no model label
                if name not in ("llm_streams_in_flight", *LIVE_GAUGES):
                    assert 'model=~"$model"' in matchers, (panel["title"], expr)
            bare = re.findall(r"\b((?:llm|gen_ai)_(?!recorder_)\w+)\b(?!\{)", expr)
            assert not bare, (panel["title"], bare)


def test_issue_panels_are_present(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in graph_panels(dashboard) for t in p["targets"])
    for needed in (
        "sum by (endpoint, outcome) (rate(llm_streams_total",
        "histogram_quantile(0.5, sum by (le, model) (rate(gen_ai_client_operation_time_to_first",
        "histogram_quantile(0.95, sum by (le, model) (rate(gen_ai_client_operation_time_to_first",
        "histogram_quantile(0.99, sum by (le, model) (rate(gen_ai_client_operation_time_to_first",
        "gen_ai_client_operation_duration_seconds_bucket",
        'llm_tokens_total{token_type="output"',
        "sum by (token_type, source) (rate(llm_tokens_total",
        "sum by (source) (rate(llm_cost_usd_total",
        "llm_stream_keepalive_gap_seconds_bucket",
        "llm_stream_stalls_total",
        "llm_streams_in_flight",
        "llm_recorder_write_queue_depth",
        # issue 32: what interruptions cost, spend by the chosen tag, budgets
        "sum by (outcome) (rate(llm_interruption_cost_usd_total",
        "sum(increase(llm_interruption_cost_usd_total",
        "llm_retries_total",
        "sum by ($tag) (rate(llm_cost_usd_total",
        "sum by ($tag, outcome) (rate(llm_streams_total",
        BUDGET_PACE,
        BUDGET_AMOUNT,
    ):
        assert needed in exprs, needed
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert {"What interruptions cost", "Spend by tag", "Budgets"} <= set(rows)
    kinds = {p["type"] for p in graph_panels(dashboard)}
    assert {"timeseries", "stat", "heatmap"} <= kinds


def test_alert_rules_name_only_exported_metrics() -> None:
    known = exported_names() | {"up"}
    rules = YAML(typ="safe").load((DASHBOARDS / "prometheus" / "alerts.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    names = {r["alert"] for r in alerts}
    assert {
        "LLMStreamStallRateHigh",
        "LLMStreamInterruptionRateHigh",
        "LLMTimeToFirstTokenHigh",
        "RecorderRecordsSpooling",
        "RecorderRecordsFailing",
        "RecorderTargetDown",
    } <= names
    for rule in alerts:
        assert not metric_names(rule["expr"]) - known, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    doc = DOC.read_text()
    for name in names:
        assert f"`{name}`" in doc, f"docs/metrics.md misses alert {name}"


def test_provisioning_files() -> None:
    yaml = YAML(typ="safe")
    ds = yaml.load((DASHBOARDS / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
    prov = yaml.load((DASHBOARDS / "provisioning" / "dashboards" / "recorder.yml").read_text())
    assert prov["apiVersion"] == 1
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    scrape = yaml.load((DASHBOARDS / "prometheus" / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["job_name"] == "recorder"
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:9464"]
    assert scrape["rule_files"] == ["alerts.yml", "budgets-rules*.yml"]


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, model) (rate(a_bucket{model=~"$model"}'
        "[$__rate_interval]))) / sum(increase(b_total[5m])) > 1e3 and up"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "up"}
