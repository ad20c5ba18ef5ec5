"""The exporter on a fresh registry: names, types and labels of the public
contract, what each record adds, the model cap, health read at scrape time,
the /metrics server, and counters that agree with the records written."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from array import array
from collections import defaultdict
from decimal import Decimal

import pytest
from mitmproxy.test import taddons
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import RestrictedRegistry

from recorder.metrics import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    HEALTH_METRICS,
    Metrics,
    ModelLabels,
    serve_metrics,
)
from recorder.metrics.exporter import (
    CHUNK_GAP_BUCKETS,
    FOLD_INTERVALS,
    FOLD_RECORDS,
    IntervalHistogram,
)
from recorder.metrics.health import Health
from recorder.store.sinks import MemorySink
from tests.kit.records import metric_record as record
from tests.kit.records import with_chain
from tests.kit.traffic import Clock, Traffic, WiredRecorder

STREAM = ("endpoint", "provider", "model")
# docs/metrics.md, "The metrics": exposed name -> (type, labels). A contract.
CONTRACT: dict[str, tuple[str, tuple[str, ...]]] = {
    "gen_ai_client_operation_duration_seconds": ("histogram", (*STREAM, "outcome")),
    "gen_ai_client_operation_time_to_first_chunk_seconds": ("histogram", STREAM),
    "gen_ai_client_operation_time_per_output_chunk_seconds": ("histogram", STREAM),
    "gen_ai_client_token_usage": ("histogram", (*STREAM, "token_type")),
    "llm_streams_total": ("counter", (*STREAM, "outcome")),
    "llm_streams_in_flight": ("gauge", ("endpoint", "provider")),
    "llm_tokens_total": ("counter", (*STREAM, "token_type", "source")),
    "llm_cost_usd_total": ("counter", (*STREAM, "source")),
    "llm_stream_keepalives_total": ("counter", STREAM),
    "llm_stream_keepalive_gap_seconds": ("histogram", STREAM),
    "llm_stream_stalls_total": ("counter", STREAM),
    "llm_stream_max_output_gap_seconds": ("histogram", STREAM),
    "llm_provider_timing_gap_seconds": ("histogram", (*STREAM, "measure")),
    "llm_streams_stalled": ("gauge", ("endpoint", "provider")),
    "llm_stream_oldest_silence_seconds": ("gauge", ("endpoint", "provider")),
    "llm_interruption_cost_usd_total": ("counter", (*STREAM, "outcome")),
    "llm_retries_total": ("counter", STREAM),
}


class FakeMeter:
    def __init__(self, outputs: list[float], keepalives: list[float]) -> None:
        self.output_intervals = outputs
        self.keepalive_intervals = keepalives


def exposed(registry: CollectorRegistry) -> dict[str, tuple[str, set[frozenset[str]]]]:
    """Exposed metric name -> (type, label-name sets of its samples), from the text format."""
    out: dict[str, tuple[str, set[frozenset[str]]]] = {}
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {frozenset(s.labels) - {"le"} for s in family.samples if s.name != family.name}
        labels |= {frozenset(s.labels) for s in family.samples if s.name == family.name}
        out[name] = (family.type, labels)
    return out


def test_importing_registers_and_starts_nothing() -> None:
    code = (
        "import threading, prometheus_client\n"
        "before = set(prometheus_client.REGISTRY._names_to_collectors)\n"
        "n = threading.active_count()\n"
        "import recorder.metrics, recorder.metrics.server, recorder.metrics.exporter\n"
        "assert set(prometheus_client.REGISTRY._names_to_collectors) == before\n"
        "assert threading.active_count() == n\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_names_types_and_labels_follow_the_contract() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.observe(
        record(
            input_tokens=10,
            output_tokens=20,
            input_source="reported",
            output_source="reported",
            usage_source="reported",
            cost_usd="0.001",
            keepalives=2,
            provider_latency_ms=2000.0,
        ),
        FakeMeter([0.01, 0.02], [5.0]),  # type: ignore[arg-type]
    )
    metrics.observe(record(outcome="upstream_disconnect", interrupted=True, cost_usd="0.1"))
    got = exposed(registry)
    for name, (kind, labels) in CONTRACT.items():
        assert name in got, name
        assert got[name][0] == kind, name
        assert got[name][1] == {frozenset(labels)}, name
    health = {n for n in got if n.startswith("llm_recorder_") and not n.endswith("_created")}
    # nothing watched yet; the unpriced counter has no series before an unpriced record
    assert health == {
        "llm_recorder_model_label_overflow_total",
        "llm_recorder_unpriced_streams_total",
    }


def test_a_record_adds_its_figures() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.observe(
        record(
            duration_ms=3000.0,
            ttft_ms=500.0,
            max_output_gap_ms=40000.0,
            stalls=1,
            keepalives=4,
            input_tokens=100,
            cache_read_tokens=60,
            cache_write_tokens=0,
            output_tokens=50,
            reasoning_tokens=20,
            input_source="reported",
            output_source="estimated",
            usage_source="mixed",
            cost_usd="0.000123450000",
        ),
        FakeMeter([0.05, 40.0], [10.0, 10.0, 10.0]),  # type: ignore[arg-type]
    )
    s = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}
    get = registry.get_sample_value
    assert get("llm_streams_total", {**s, "outcome": "completed"}) == 1
    assert get("gen_ai_client_operation_duration_seconds_sum", {**s, "outcome": "completed"}) == 3
    assert get("gen_ai_client_operation_time_to_first_chunk_seconds_sum", s) == 0.5
    assert get("llm_stream_max_output_gap_seconds_bucket", {**s, "le": "30.0"}) == 0
    assert get("llm_stream_max_output_gap_seconds_bucket", {**s, "le": "45.0"}) == 1
    assert get("llm_stream_stalls_total", s) == 1
    assert get("llm_stream_keepalives_total", s) == 4
    assert get("gen_ai_client_operation_time_per_output_chunk_seconds_count", s) == 2
    assert get("gen_ai_client_operation_time_per_output_chunk_seconds_sum", s) == 40.05
    assert get("llm_stream_keepalive_gap_seconds_count", s) == 3
    assert get("llm_stream_keepalive_gap_seconds_bucket", {**s, "le": "10.0"}) == 3
    tokens = {
        ("input", "reported"): 100,
        ("cache_read", "reported"): 60,
        ("cache_write", "reported"): 0,
        ("output", "estimated"): 50,
        ("reasoning", "estimated"): 20,
    }
    for (token_type, source), value in tokens.items():
        labels = {**s, "token_type": token_type, "source": source}
        assert get("llm_tokens_total", labels) == value
    assert get("llm_tokens_total", {**s, "token_type": "output", "source": "reported"}) is None
    assert get("gen_ai_client_token_usage_sum", {**s, "token_type": "input"}) == 100
    assert get("gen_ai_client_token_usage_sum", {**s, "token_type": "output"}) == 50
    # mixed usage prices partly estimated figures: the cost is an estimate
    assert get("llm_cost_usd_total", {**s, "source": "estimated"}) == pytest.approx(0.00012345)
    assert get("llm_cost_usd_total", {**s, "source": "reported"}) is None


def test_interruptions_cost_by_outcome_and_retries_count() -> None:
    """Issue 32: the cost of requests that did not complete, by how they ended
    (part of the cost counter, never beside it), and the requests that retried one."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    cut = {"outcome": "upstream_disconnect", "interrupted": True, "usage_source": "estimated"}
    metrics.observe(record(**cut, cost_usd="0.25"), None)
    metrics.observe(record(**cut, cost_usd="0.125"), None)
    metrics.observe(record(outcome="error", interrupted=True, cost_usd="0.5"), None)
    metrics.observe(record(outcome="client_disconnect", interrupted=True, cost_usd=None), None)
    metrics.observe(record(outcome="http_error", cost_usd=None, http_status=429), None)
    retry = with_chain(record(cost_usd="1", usage_source="reported"), retry_of="a", attempt=2)
    metrics.observe(retry, None)
    metrics.observe(with_chain(record(cost_usd="2"), retry_of=None, attempt=1), None)
    s = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}
    get = registry.get_sample_value
    name = "llm_interruption_cost_usd_total"
    assert get(name, {**s, "outcome": "upstream_disconnect"}) == 0.375
    assert get(name, {**s, "outcome": "error"}) == 0.5
    # an unpriced cut adds nothing; a completed stream and a refusal are not cuts
    for outcome in ("client_disconnect", "completed", "http_error"):
        assert get(name, {**s, "outcome": outcome}) is None, outcome
    assert get("llm_retries_total", s) == 1
    got = exposed(registry)
    assert got[name] == ("counter", {frozenset((*STREAM, "outcome"))})
    assert got["llm_retries_total"] == ("counter", {frozenset(STREAM)})


def test_the_retries_series_is_there_before_the_first_retry() -> None:
    registry = CollectorRegistry()
    Metrics(registry).observe(record(), None)
    s = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}
    assert registry.get_sample_value("llm_retries_total", s) == 0


def test_unknown_figures_add_nothing() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.observe(
        record(
            outcome="http_error",
            streamed=False,
            ttft_ms=None,
            max_output_gap_ms=None,
            stalls=None,
            keepalives=None,
            cost_usd=None,
        ),
        None,
    )
    s = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}
    get = registry.get_sample_value
    assert get("llm_streams_total", {**s, "outcome": "http_error"}) == 1
    assert get("gen_ai_client_operation_time_to_first_chunk_seconds_count", s) is None
    assert get("llm_stream_max_output_gap_seconds_count", s) is None
    assert get("llm_stream_stalls_total", s) == 0  # present, so rates divide cleanly
    text = generate_latest(registry).decode()
    assert "llm_tokens_total{" not in text and "llm_cost_usd_total{" not in text


def test_ttft_of_a_non_streamed_body_is_not_a_first_chunk() -> None:
    registry = CollectorRegistry()
    Metrics(registry).observe(record(streamed=False, ttft_ms=9000.0), None)
    s = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}
    assert (
        registry.get_sample_value("gen_ai_client_operation_time_to_first_chunk_seconds_count", s)
        is None
    )


def test_cost_source_and_bad_cost() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.observe(record(usage_source="reported", cost_usd="0.5"), None)
    metrics.observe(record(usage_source="estimated", cost_usd="0.25"), None)
    metrics.observe(record(usage_source="reported", cost_usd="not money"), None)
    metrics.observe(record(usage_source="reported", cost_usd="NaN"), None)
    s = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}
    assert registry.get_sample_value("llm_cost_usd_total", {**s, "source": "reported"}) == 0.5
    assert registry.get_sample_value("llm_cost_usd_total", {**s, "source": "estimated"}) == 0.25


def test_model_label_is_capped() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=2)
    for model in ["a", "b", "c", "a", "d" * 500, "b"]:
        metrics.observe(record(model=model), None)
    metrics.observe(record(model=None, response_model="gpt-4o-2024-08-06"), None)
    metrics.observe(record(model=None, response_model=None), None)
    get = registry.get_sample_value
    count = {
        m: get(
            "llm_streams_total",
            {
                "endpoint": "chat.completions",
                "provider": "openai",
                "model": m,
                "outcome": "completed",
            },
        )
        for m in ["a", "b", "other", "unknown"]
    }
    assert count == {"a": 2, "b": 2, "other": 3, "unknown": 1}
    assert get("llm_recorder_model_label_overflow_total") == 3


def test_model_labels_are_trimmed_and_limit_is_checked() -> None:
    labels = ModelLabels(3)
    assert labels("  gpt-4o ") == ("gpt-4o", False)
    assert labels("x" * 300) == ("x" * 100, False)
    assert labels("") == ("unknown", False)
    assert labels.in_use == 2
    with pytest.raises(ValueError):
        ModelLabels(0)


def test_in_flight_gauge() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    get = registry.get_sample_value
    msgs = {"endpoint": "messages", "provider": "anthropic"}
    assert get("llm_streams_in_flight", msgs) == 0  # every endpoint exported from the start
    metrics.stream_started("messages", "anthropic")
    metrics.stream_started("messages", "anthropic")
    metrics.stream_ended("messages", "anthropic")
    assert get("llm_streams_in_flight", msgs) == 1
    assert get("llm_streams_in_flight", {"endpoint": "responses", "provider": "openai"}) == 0


def test_live_gauges_follow_each_walk_and_fall_back_to_zero() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    get = registry.get_sample_value
    chat = {"endpoint": "chat.completions", "provider": "openai"}
    msgs = {"endpoint": "messages", "provider": "anthropic"}
    assert get("llm_streams_stalled", chat) == 0 == get("llm_stream_oldest_silence_seconds", msgs)
    metrics.live_streams(
        {("chat.completions", "openai"): 2},
        {("chat.completions", "openai"): 45.5, ("messages", "anthropic"): 3.0},
    )
    assert get("llm_streams_stalled", chat) == 2 and get("llm_streams_stalled", msgs) == 0
    assert get("llm_stream_oldest_silence_seconds", chat) == 45.5
    assert get("llm_stream_oldest_silence_seconds", msgs) == 3.0
    metrics.live_streams({}, {})  # the stalled streams ended, nothing open
    assert get("llm_streams_stalled", chat) == 0
    assert get("llm_stream_oldest_silence_seconds", chat) == 0
    assert get("llm_stream_oldest_silence_seconds", msgs) == 0


def test_interval_histogram_matches_the_library_histogram() -> None:
    values = [0.0, 0.001, 0.0011, 0.02, 0.5, 1.0, 29.9, 30.0, 31.0, 150.0, 301.0, 1e6]
    ours_registry, lib_registry = CollectorRegistry(), CollectorRegistry()
    ours = IntervalHistogram(
        "h_seconds", "h", ["a"], CHUNK_GAP_BUCKETS, threading.Lock(), ours_registry
    )
    lib = Histogram("h_seconds", "h", ["a"], registry=lib_registry, buckets=CHUNK_GAP_BUCKETS)
    # a short stream's few intervals (bucketed one by one), and a long stream's
    # (more than the bounds: sorted, then bisected per bound); values on the bounds
    long = [*values, *CHUNK_GAP_BUCKETS, *(b * 1.01 for b in CHUNK_GAP_BUCKETS)]
    # as the meter hands them (an array of doubles), as a list, and one by one
    ours.observe_many(("x",), array("d", values[:5]))
    ours.observe_many(("x",), values[5:])
    ours.observe_many(("x",), (v for v in long))
    values = [*values, *long]
    for v in values:
        lib.labels("x").observe(v)

    def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("le", "")): s.value
            for f in registry.collect()
            for s in f.samples
            if not s.name.endswith("_created")
        }

    assert samples(ours_registry) == pytest.approx(samples(lib_registry))  # (sums: order)
    assert ours.value(("x",)) == (len(values), pytest.approx(sum(values)))


@pytest.mark.parametrize("many", [False, True], ids=["few", "many"])
def test_interval_histogram_puts_a_nan_in_no_bucket_as_the_library_does(many: bool) -> None:
    """A few intervals are bucketed one by one, many in numpy: a NaN (which no
    meter makes) counts in neither, and makes the sum NaN, as the library's."""
    registry = CollectorRegistry()
    ours = IntervalHistogram("h_seconds", "h", ["a"], CHUNK_GAP_BUCKETS, threading.Lock(), registry)
    ours.observe_many(("x",), array("d", [0.5, math.nan, 2000.0] * (20 if many else 1)))
    ours.observe_many(("x",), [])  # nothing: no change, no error
    get = registry.get_sample_value
    n = 20 if many else 1
    assert get("h_seconds_count", {"a": "x"}) == 2 * n
    assert get("h_seconds_bucket", {"a": "x", "le": "0.5"}) == n
    assert get("h_seconds_bucket", {"a": "x", "le": "+Inf"}) == 2 * n
    assert math.isnan(get("h_seconds_sum", {"a": "x"}))  # type: ignore[arg-type]


def test_health_is_read_at_scrape_time() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    depth = [0]
    metrics.watch(write_queue_depth=lambda: depth[0], records_written=lambda: 7)
    health = Health()
    metrics.watch_health(health)
    get = registry.get_sample_value
    assert get("llm_recorder_write_queue_depth") == 0
    depth[0] = 42
    health.internal_errors = 3
    health.records = 9
    assert get("llm_recorder_write_queue_depth") == 42
    assert get("llm_recorder_records_written_total") == 7
    assert get("llm_recorder_internal_errors_total") == 3
    assert get("llm_recorder_records_submitted_total") == 9
    assert get("llm_recorder_records_spooled_total") is None  # no source, not exported


def test_a_failing_health_source_does_not_break_the_scrape() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)

    def broken() -> float:
        raise RuntimeError("store gone")

    metrics.watch(records_spooled=broken, records_dropped=lambda: 1)
    text = generate_latest(registry).decode()
    assert "llm_recorder_records_dropped_total 1.0" in text
    assert "llm_recorder_records_spooled" not in text


def test_unknown_health_name_is_refused() -> None:
    metrics = Metrics(CollectorRegistry())
    with pytest.raises(ValueError, match="known: "):
        metrics.watch(queue=lambda: 1)
    assert "write_queue_depth" in HEALTH_METRICS


def test_two_exporters_live_side_by_side() -> None:
    Metrics(CollectorRegistry())
    Metrics(CollectorRegistry())  # no global state: no duplicate registration


def test_server_serves_metrics_on_loopback_and_closes() -> None:
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 9464)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.observe(record(), None)
    with serve_metrics(registry, port=0) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=5) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            assert b"llm_streams_total{" in resp.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(server.url.replace("/metrics", "/nope"), timeout=5)
        assert e.value.code == 404
        url = server.url
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_server_serves_streams_only_when_given_a_live_view() -> None:
    registry = CollectorRegistry()
    with serve_metrics(registry, port=0) as server:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(server.url.replace("/metrics", "/streams"), timeout=5)
        assert e.value.code == 404
    with serve_metrics(registry, port=0, streams=lambda: b'{"open": []}') as server:
        url = server.url.replace("/metrics", "/streams")
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.headers["Content-Type"] == "application/json"
            assert r.read() == b'{"open": []}'

    def busy() -> bytes:
        raise TimeoutError

    with serve_metrics(registry, port=0, streams=busy) as server:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(server.url.replace("/metrics", "/streams"), timeout=5)
        assert e.value.code == 503


def test_server_on_ipv6_loopback() -> None:
    registry = CollectorRegistry()
    try:
        server = serve_metrics(registry, host="::1", port=0)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with server, urllib.request.urlopen(server.url, timeout=5) as resp:
        assert resp.status == 200


def test_server_refuses_a_taken_port() -> None:
    registry = CollectorRegistry()
    with serve_metrics(registry, port=0) as server, pytest.raises(OSError):
        serve_metrics(registry, port=server.port)


async def test_counters_agree_with_the_records_written() -> None:
    """Issue 6, consistency: what the exporter counted is what the sink received."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=5)
    sink = MemorySink()
    clock = Clock()
    addon = WiredRecorder(metrics, sink, clock)
    traffic = Traffic(addon, clock)
    with taddons.context(addon):
        for _ in range(2):
            await traffic.mix()
    records = sink.records
    assert {r.outcome for r in records} == {
        "completed",
        "error",
        "upstream_disconnect",
        "client_disconnect",
        "truncated",
        "http_error",
    }
    families = {f.name: f for f in registry.collect()}

    def total(name: str, **match: str) -> float:
        family = families[name]
        return sum(
            s.value
            for s in family.samples
            if s.name == name + "_total" and all(s.labels.get(k) == v for k, v in match.items())
        )

    assert total("llm_streams") == len(records)
    by_outcome: dict[str, int] = defaultdict(int)
    for r in records:
        by_outcome[r.outcome] += 1
    for outcome, n in by_outcome.items():
        assert total("llm_streams", outcome=outcome) == n

    columns = {
        "input": ("input_tokens", "input_source"),
        "cache_read": ("cache_read_tokens", "input_source"),
        "cache_write": ("cache_write_tokens", "input_source"),
        "output": ("output_tokens", "output_source"),
        "reasoning": ("reasoning_tokens", "output_source"),
    }
    for token_type, (column, source_column) in columns.items():
        for source in ("reported", "estimated"):
            expected = sum(
                getattr(r, column) or 0 for r in records if getattr(r, source_column) == source
            )
            got = total("llm_tokens", token_type=token_type, source=source)
            assert got == expected, (token_type, source)
    assert total("llm_tokens", token_type="output", source="estimated") > 0

    for source, usage in (("reported", {"reported"}), ("estimated", {"estimated", "mixed"})):
        expected_cost = sum(
            (Decimal(r.cost_usd) for r in records if r.cost_usd and r.usage_source in usage),
            Decimal(0),
        )
        got_cost = total("llm_cost_usd", source=source)
        assert got_cost == pytest.approx(float(expected_cost), rel=1e-9, abs=1e-12), source
    assert total("llm_cost_usd", source="estimated") > 0
    for outcome in ("error", "upstream_disconnect", "client_disconnect", "truncated"):
        cut_cost = sum(
            (Decimal(r.cost_usd) for r in records if r.cost_usd and r.outcome == outcome),
            Decimal(0),
        )
        got_cost = total("llm_interruption_cost_usd", outcome=outcome)
        assert got_cost == pytest.approx(float(cut_cost), rel=1e-9, abs=1e-12), outcome
    assert total("llm_interruption_cost_usd") > 0

    assert total("llm_stream_stalls") == sum(r.stalls or 0 for r in records)
    assert total("llm_stream_keepalives") == sum(r.keepalives or 0 for r in records)
    get = registry.get_sample_value
    assert get("llm_recorder_records_submitted_total") == len(records)
    assert sum(s.value for s in families["llm_streams_in_flight"].samples) == 0
    models = {s.labels["model"] for s in families["llm_streams"].samples}
    assert "other" in models and len(models - {"other", "unknown"}) == 5


def test_unpriced_streams_are_counted_by_model_under_the_cap() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=2)
    priced = {"input_tokens": 10, "usage_source": "reported", "cost_usd": "0.001"}
    metrics.observe(record(model="a", **priced), None)
    for model in ("mystery", "mystery", "junk-1", "junk-2"):
        reason = f"no price for model {model!r}"
        metrics.observe(record(model=model, input_tokens=10, unpriced_reason=reason), None)
    tier = "no 'ultrafast' service-tier rate for a"
    metrics.observe(record(model="a", input_tokens=10, unpriced_reason=tier), None)
    get = registry.get_sample_value
    name = "llm_recorder_unpriced_streams_total"
    assert get(name, {"model": "mystery", "reason": "model"}) == 2
    assert get(name, {"model": "other", "reason": "model"}) == 2  # past the cap, as elsewhere
    assert get(name, {"model": "a", "reason": "tier"}) == 1
    assert get(name, {"model": "a", "reason": "model"}) is None


# -- records counted at the scrape (observe_later) --------------------------------

PER_RECORD = (
    "llm_streams_total",
    "gen_ai_client_operation_duration_seconds_count",
    "gen_ai_client_operation_time_per_output_chunk_seconds_count",
    "llm_stream_keepalive_gap_seconds_count",
    "llm_tokens_total",
    "llm_recorder_unpriced_streams_total",
    "llm_recorder_model_label_overflow_total",
)


def _later(metrics: Metrics, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        metrics.observe_later(
            record(
                id=f"r{i}",
                model=f"m{i % 3}",  # past a cap of 2: 'other', counted as overflow
                input_tokens=10,
                input_source="reported",
                unpriced_reason="no price for model m",
            ),
            FakeMeter([0.01, 0.02], [5.0]),  # type: ignore[arg-type]
        )


def _totals(registry: CollectorRegistry | RestrictedRegistry) -> dict[str, float]:
    out = dict.fromkeys(PER_RECORD, 0.0)
    for family in registry.collect():
        for s in family.samples:
            if s.name in out:
                out[s.name] += s.value
    return out


EXPECTED_OF_5 = {
    "llm_streams_total": 5,
    "gen_ai_client_operation_duration_seconds_count": 5,
    "gen_ai_client_operation_time_per_output_chunk_seconds_count": 10,
    "llm_stream_keepalive_gap_seconds_count": 5,
    "llm_tokens_total": 50,
    "llm_recorder_unpriced_streams_total": 5,
    "llm_recorder_model_label_overflow_total": 1,  # m2, the third model past a cap of 2
}


@pytest.mark.parametrize("name", PER_RECORD)
def test_a_record_left_for_later_is_in_the_next_scrape_even_of_one_family(name: str) -> None:
    """Records not counted yet are in the next scrape, also when it asks for one
    family only (Prometheus' ``name[]``): that family counts them first."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=2)
    _later(metrics, 5)
    restricted = registry.restricted_registry([name])
    assert _totals(restricted)[name] == EXPECTED_OF_5[name]  # type: ignore[arg-type]
    assert _totals(registry) == EXPECTED_OF_5  # and once only
    _later(metrics, 5, start=5)
    assert _totals(registry)["llm_streams_total"] == 10


def test_with_no_scrape_the_records_held_are_bounded() -> None:
    metrics = Metrics(CollectorRegistry())
    _later(metrics, 3 * FOLD_RECORDS + 1)
    assert metrics.waiting < FOLD_RECORDS
    assert metrics.streams.series  # counted by the loop itself


def test_records_counted_while_a_scrape_runs_are_counted_once() -> None:
    """A scraping thread and the loop counting at the same time: every scrape's
    counts only grow, and the last one holds every record once."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=2)
    seen: list[dict[str, float]] = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            seen.append(_totals(registry))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for k in range(40):
            _later(metrics, 25, start=25 * k)
    finally:
        stop.set()
        scraper.join(10)
    assert len(seen) > 1
    for earlier, later in itertools.pairwise(seen):
        assert all(later[name] >= earlier[name] for name in PER_RECORD)
    final = _totals(registry)
    assert final["llm_streams_total"] == 1000
    assert final["llm_tokens_total"] == 10_000
    assert final["gen_ai_client_operation_time_per_output_chunk_seconds_count"] == 2000


def test_a_stream_with_many_intervals_is_counted_at_once() -> None:
    """What waits is bounded by intervals too: a long stream's are not held."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    _later(metrics, 2)
    metrics.observe_later(record(id="long"), FakeMeter([0.01] * FOLD_INTERVALS, []))  # type: ignore[arg-type]
    assert metrics.waiting == 0  # counted, with the two before it
    assert metrics.chunk_gap.value(("chat.completions", "openai", "gpt-4o")) == (
        FOLD_INTERVALS,
        pytest.approx(0.01 * FOLD_INTERVALS),
    )


@pytest.mark.parametrize("wired", [False, True], ids=["logged", "internal-error"])
def test_a_record_that_cannot_be_counted_costs_only_itself(
    wired: bool, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    errors: list[int] = []
    if wired:
        metrics.on_error = lambda: errors.append(1)
    # r1's model is no string (as no record of ours has): no label is made of it
    for rec in (record(id="r0"), record(id="r1", model=7), record(id="r2")):  # type: ignore[arg-type]
        metrics.observe_later(rec, FakeMeter([0.01, 0.02], [5.0]))  # type: ignore[arg-type]
    assert metrics.waiting == 3
    assert _totals(registry)["llm_streams_total"] == 2
    assert errors == ([1] if wired else [])
    assert ("cannot count record r1" in caplog.text) is not wired


def test_the_provider_timing_gap_is_measured_minus_reported() -> None:
    """Bedrock's own timing against ours: one observation per measure a record has
    both sides of, of their difference; a record without the provider's has none."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    rec = record(endpoint="converse", provider="aws.bedrock", model="m")
    rec.duration_ms, rec.provider_latency_ms = 900.0, 650.0
    rec.ttft_ms, rec.provider_first_byte_ms = 300.0, None
    metrics.observe(rec)
    metrics.observe(record(endpoint="converse", provider="aws.bedrock", model="m"))
    labels = {"endpoint": "converse", "provider": "aws.bedrock", "model": "m"}
    get = registry.get_sample_value
    assert get("llm_provider_timing_gap_seconds_count", {**labels, "measure": "duration"}) == 1
    assert get("llm_provider_timing_gap_seconds_sum", {**labels, "measure": "duration"}) == 0.25
    assert get("llm_provider_timing_gap_seconds_count", {**labels, "measure": "first_byte"}) is None
