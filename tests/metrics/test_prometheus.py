"""The dashboard and the alert rules against a real Prometheus.

Debian's ``prometheus`` package is installed if it is missing (as root, with
apt-get; the tests are skipped, saying why, only where there is no root or no
apt-get, and fail if the installation itself fails).
Prometheus then runs on loopback, scraping every second a ``/metrics``
endpoint that serves the exporter while simulated traffic goes through the
addon in-process (``metrics_traffic``: completed streams of all three
protocols, stalls with keepalives, cuts by either side, error events, a
malformed event, an HTTP error, more models than the label cap). Once it has
scraped a few times, every PromQL expression of the dashboard (Grafana's
variables replaced by ``TEMPLATE_VALUES``), every variable query, and every
alert expression without its threshold comparisons must parse and return data
through the HTTP API; the alert rules loaded into that Prometheus must
evaluate without error. ``promtool check rules`` / ``test rules`` /
``check config`` run on the shipped files.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy.test import taddons
from prometheus_client import CollectorRegistry

from recorder.billing.budgets import load_budgets
from recorder.metrics import Metrics, serve_metrics
from recorder.metrics.budget_rules import rules
from recorder.store.sinks import MemorySink
from tests.kit.prometheus import ensure_prometheus
from tests.kit.traffic import Clock, Traffic, WiredRecorder

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "recorder-overview.json"
PROM_DIR = ROOT / "dashboards" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
JOB = "recorder"  # the job name the dashboard and the alerts expect

# What Grafana's variables become when the dashboard's expressions are evaluated
# here (docs/metrics.md lists them too).
TEMPLATE_VALUES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
    "endpoint": ".*",
    "model": ".*",
    "tag": "team",
}
# A budget of all spend: its rules (`recorder budgets rules`) feed the dashboard's
# "Budgets" row, so the Prometheus here loads them beside the alerts.
BUDGETS = "budgets:\n  - name: everything\n    all: true\n    monthly_usd: 100\n"
# A threshold comparison: an operator and a number (label matchers compare strings).
THRESHOLD = re.compile(r"\s*(?:>=|<=|==|!=|>|<)\s*(?:bool\s+)?-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tools() -> tuple[str, str]:
    return ensure_prometheus()


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=PROM_DIR, capture_output=True, text=True, timeout=60
    )


def test_promtool_check_rules(tools: tuple[str, str]) -> None:
    result = run_promtool(tools[1], "check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules(tools: tuple[str, str]) -> None:
    result = run_promtool(tools[1], "test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_config_of_the_scrape_example(tools: tuple[str, str]) -> None:
    result = run_promtool(tools[1], "check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"job_name: {JOB}" in (PROM_DIR / "prometheus.yml").read_text()


# -- expressions ------------------------------------------------------------------


def substitute(text: str) -> str:
    """Grafana's variables replaced by ``TEMPLATE_VALUES``."""

    def value(m: re.Match[str]) -> str:
        return TEMPLATE_VALUES[m.group(1) or m.group(2)]

    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)
    assert "$" not in out, out
    return out


def dashboard_panels() -> Iterator[dict[str, Any]]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_expressions() -> list[tuple[str, str]]:
    """``(where, expr)`` of every target of every panel."""
    return [
        (f"panel {p['id']} {p['title']!r} target {t['refId']}", substitute(t["expr"]))
        for p in dashboard_panels()
        for t in p.get("targets", [])
    ]


def variable_queries() -> list[tuple[str, str, str | None]]:
    """``(name, label, series selector or None)`` of every ``label_values`` variable."""
    out = []
    for var in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query.strip())
        assert m, query
        out.append((var["name"], m.group(2), substitute(m.group(1)) if m.group(1) else None))
    return out


def budget_rules() -> str:
    text, skipped = rules(load_budgets(BUDGETS))
    assert not skipped
    return text


def alert_names() -> list[str]:
    """The alerts of the rule file, by name."""
    return re.findall(r"^\s*- alert:\s*(\S+)", ALERTS.read_text(), re.MULTILINE)


def strip_thresholds(expr: str) -> str:
    return THRESHOLD.sub("", expr)


def test_threshold_stripping() -> None:
    expr = 'sum(rate(x{a!="1"}[5m])) / sum(rate(y[5m])) > 0.05 and sum(increase(y[5m])) >= 10'
    assert (
        strip_thresholds(expr)
        == 'sum(rate(x{a!="1"}[5m])) / sum(rate(y[5m])) and sum(increase(y[5m]))'
    )
    assert strip_thresholds('up{job="recorder"} == 0') == 'up{job="recorder"}'


# -- a running Prometheus ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    """A Prometheus process on loopback, and its HTTP API."""

    def __init__(self, binary: str, workdir: Path, target: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        shutil.copy(ALERTS, workdir / "alerts.yml")
        (workdir / "budgets-rules.yml").write_text(budget_rules())
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  evaluation_interval: 1s\n"
            "rule_files: [alerts.yml, budgets-rules.yml]\n"
            "scrape_configs:\n"
            f"  - job_name: {JOB}\n"
            "    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def get(self, path: str, **params: str | list[str]) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:  # a bad query: the API says why, in JSON
            return json.loads(e.read() or b"{}")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Prometheus did not start:\n{self.log.read_text()[-3000:]}")

    def query(self, expr: str) -> dict[str, Any]:
        result: dict[str, Any] = self.get("/api/v1/query", query=expr)
        return result

    def scrapes(self) -> int:
        data = self.query(f'count_over_time(up{{job="{JOB}"}}[5m])')
        results = data.get("data", {}).get("result", [])
        return int(float(results[0]["value"][1])) if results else 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class FakeStore:
    """Stands in for the SQL writer's counters, which move with the traffic."""

    def __init__(self) -> None:
        self.written = 0
        self.spooled = 0
        self.failed = 0
        self.dropped = 0
        self.queue = 0
        self.spool = 0

    def round(self, records: int) -> None:
        self.failed += 2
        self.spooled += 2
        self.written += records - 2
        self.dropped += 1
        self.queue = records % 7 + 1
        self.spool = self.spooled - 1


def finite_values(data: dict[str, Any]) -> list[float]:
    result = data["data"]["result"]
    if data["data"]["resultType"] == "scalar":
        result = [{"value": result}]
    return [float(r["value"][1]) for r in result if math.isfinite(float(r["value"][1]))]


async def test_every_dashboard_and_alert_expression_returns_data(
    tools: tuple[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=5)
    store = FakeStore()
    metrics.watch(
        records_written=lambda: store.written,
        records_spooled=lambda: store.spooled,
        records_failed=lambda: store.failed,
        records_dropped=lambda: store.dropped,
        write_queue_depth=lambda: store.queue,
        spool_depth=lambda: store.spool,
    )
    sink = MemorySink()
    clock = Clock()
    addon = WiredRecorder(metrics, sink, clock)
    traffic = Traffic(addon, clock)

    server = serve_metrics(registry, port=0)
    prometheus = Prometheus(tools[0], tmp_path, f"127.0.0.1:{server.port}")
    try:
        prometheus.wait_ready()
        with taddons.context(addon):
            # traffic between scrapes, so every rate has something to show
            rounds = 0
            while rounds < 4 or prometheus.scrapes() < 5:
                assert time.monotonic() - started < 45, "Prometheus is not scraping"
                before = len(sink.records)
                await traffic.mix()
                store.round(len(sink.records) - before)
                rounds += 1
                await asyncio.sleep(1.0)
            # one stream left open, so the in-flight gauge shows something other than 0
            await traffic.open("responses", "gpt-5")
            await asyncio.sleep(2.5)

        problems: list[str] = []
        checked = 0
        for where, expr in dashboard_expressions():
            checked += 1
            data = prometheus.query(expr)
            if data.get("status") != "success":
                problems.append(f"{where}: {data.get('error')}\n    {expr}")
            elif not finite_values(data):
                problems.append(f"{where}: no data\n    {expr}")
        for name, label, selector in variable_queries():
            checked += 1
            params: dict[str, str | list[str]] = {"match[]": [selector]} if selector else {}
            data = prometheus.get(f"/api/v1/label/{label}/values", **params)
            if data.get("status") != "success" or not data.get("data"):
                problems.append(f"variable {name}: no values for {label} ({selector})")
        # the rules as this Prometheus loaded them: every one evaluated, none failing
        groups = prometheus.get("/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        budget_names = re.findall(r"^\s*- (?:alert|record): (\S+)", budget_rules(), re.MULTILINE)
        assert len(budget_names) == 4
        assert sorted(r["name"] for r in rules) == sorted(alert_names() + budget_names)
        bad = [f"{r['name']}: {r.get('health')} {r.get('lastError')}" for r in rules]
        assert all(r["health"] == "ok" for r in rules), bad
        for alert, expr in [(r["name"], r["query"]) for r in rules]:
            checked += 1
            stripped = strip_thresholds(expr)
            data = prometheus.query(stripped)
            if data.get("status") != "success":
                problems.append(f"alert {alert}: {data.get('error')}\n    {stripped}")
            elif not finite_values(data):
                problems.append(f"alert {alert}: no data\n    {stripped}")
        assert not problems, "\n".join(problems)
        assert checked >= 40

        in_flight = prometheus.query('sum(llm_streams_in_flight{endpoint="responses"})')
        assert finite_values(in_flight) == [1.0]
        total = prometheus.query(f'sum(llm_streams_total{{job="{JOB}"}})')
        assert finite_values(total) == [float(len(sink.records))]
    finally:
        prometheus.stop()
        server.close()
    assert time.monotonic() - started < 60
