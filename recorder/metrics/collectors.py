"""The exporter's building blocks: the metrics' names, help, labels and buckets
(:class:`Spec`), the health metrics' table, the capped model labels and the
collector of the health read at scrape time. ``recorder.metrics.exporter``
assembles them, with the families of ``recorder.metrics.record_series``, into
:class:`~recorder.metrics.exporter.Metrics`; its docstring tells the theory of
operation, docs/metrics.md the buckets."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("recorder.metrics")

DEFAULT_MAX_MODEL_LABELS = 50
OTHER_MODEL = "other"
UNKNOWN = "unknown"
MAX_LABEL_CHARS = 100

STREAM_LABELS = ("endpoint", "provider", "model")

# Time to first output chunk: a cached or local answer takes milliseconds, a
# chat model 0.2-3 s, a reasoning model seconds to minutes; queued requests and
# gateways that cut a silent stream at 90-150 s make the tail.
TTFT_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
    15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 150.0, 180.0, 300.0,
)  # fmt: skip
# Whole-request duration: from a refused request (well under a second) to long
# agentic or reasoning streams (tens of minutes); dense around the 90-150 s cuts.
DURATION_BUCKETS = (
    0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0,
    150.0, 180.0, 240.0, 300.0, 600.0, 1200.0, 1800.0,
)  # fmt: skip
# Between consecutive output chunks: usually 5-50 ms (several chunks of one
# read share a time, hence the 1 ms bucket); a stall runs to minutes.
CHUNK_GAP_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 90.0, 120.0, 150.0, 180.0, 300.0,
)  # fmt: skip
# Between keepalive comments: senders tick every 1-30 s; a gap past the
# idle timeout of something in the path (60-150 s) is what gets a stream cut.
KEEPALIVE_GAP_BUCKETS = (
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0,
    120.0, 150.0, 180.0, 300.0,
)  # fmt: skip
# Longest output silence of one stream: fine below a second, then the stall
# threshold (30 s by default) and the gateway cut zone.
MAX_OUTPUT_GAP_BUCKETS = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    90.0, 120.0, 150.0, 180.0, 240.0, 300.0, 600.0,
)  # fmt: skip
# Tokens per request: the OpenTelemetry GenAI advice (powers of 4) up to 4M.
TOKEN_BUCKETS = (
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
    1048576.0, 4194304.0,
)  # fmt: skip


class Spec(NamedTuple):
    """One metric: its name (without ``_total``), HELP, labels and, for a
    histogram, its buckets."""

    name: str
    documentation: str
    labels: tuple[str, ...] = STREAM_LABELS
    buckets: tuple[float, ...] = ()


# The metrics of the recorded streams, in the order of the exposition. The model
# label is capped (ModelLabels); docs/metrics.md has each one.
DURATION = Spec(
    "gen_ai_client_operation_duration_seconds",
    "Request start to end of stream, per finished request.",
    (*STREAM_LABELS, "outcome"),
    DURATION_BUCKETS,
)
TTFT = Spec(
    "gen_ai_client_operation_time_to_first_chunk_seconds",
    "Request start to the first output chunk, per streamed request that had output.",
    buckets=TTFT_BUCKETS,
)
CHUNK_GAP = Spec(
    "gen_ai_client_operation_time_per_output_chunk_seconds",
    "Intervals between consecutive output chunks (observed when the stream ends).",
    buckets=CHUNK_GAP_BUCKETS,
)
TOKEN_USAGE = Spec(
    "gen_ai_client_token_usage",
    "Tokens per request (reported or estimated), by token type.",
    (*STREAM_LABELS, "token_type"),
    TOKEN_BUCKETS,
)
STREAMS = Spec(
    "llm_streams", "Finished requests, streamed or not, by outcome.", (*STREAM_LABELS, "outcome")
)
IN_FLIGHT = Spec(
    "llm_streams_in_flight", "Requests being metered right now.", ("endpoint", "provider")
)
TOKENS = Spec(
    "llm_tokens",
    "Tokens by type and by source (reported by the provider or estimated).",
    (*STREAM_LABELS, "token_type", "source"),
)
COST = Spec(
    "llm_cost_usd",
    "Cost in US dollars from the price table, by source of the usage it prices.",
    (*STREAM_LABELS, "source"),
)
KEEPALIVES = Spec("llm_stream_keepalives", "SSE keepalive comments received.")
KEEPALIVE_GAP = Spec(
    "llm_stream_keepalive_gap_seconds",
    "Intervals between consecutive keepalive comments of a stream.",
    buckets=KEEPALIVE_GAP_BUCKETS,
)
STALLS = Spec(
    "llm_stream_stalls", "Output silences of at least the stall threshold (--stall-after)."
)
MAX_OUTPUT_GAP = Spec(
    "llm_stream_max_output_gap_seconds",
    "Longest output silence of each stream.",
    buckets=MAX_OUTPUT_GAP_BUCKETS,
)
# What the recorder measured minus what the provider says it took (Amazon
# Bedrock's latencyMs / invocationLatency against duration, firstByteLatency
# against time to first output): the network and queueing between the two. A
# difference at or below 0 (the provider's clock says more) falls in the 0.0
# bucket: with negative buckets the exposition would carry no _sum or _count.
PROVIDER_TIMING_GAP_BUCKETS = (
    0.0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
PROVIDER_TIMING_GAP = Spec(
    "llm_provider_timing_gap_seconds",
    "Measured time minus the provider's own (duration: its latency; first_byte: its"
    " first-byte latency against the time to first output), per request that has both.",
    (*STREAM_LABELS, "measure"),
    PROVIDER_TIMING_GAP_BUCKETS,
)
# the model label only (under the same cap) and the kind of gap: "model" (no
# price for it) or "tier" (none for its service tier)
UNPRICED = Spec(
    "llm_recorder_unpriced_streams",
    "Records with known usage but no cost: no price for the model, or none for "
    "its service tier (the record's unpriced_reason says which).",
    ("model", "reason"),
)
# Set once a second by the live view's walk over the open streams
# (recorder.proxy.live): a stall is seen while it lasts, not at its end.
STREAMS_STALLED = Spec(
    "llm_streams_stalled",
    "Open streams whose output has been silent for at least --stall-after right now.",
    ("endpoint", "provider"),
)
OLDEST_SILENCE = Spec(
    "llm_stream_oldest_silence_seconds",
    "The longest current output silence among open streams (0: none open).",
    ("endpoint", "provider"),
)
# Issue 32, the price of interruptions: the cost of the attempts that did not
# complete, by how each ended, and the requests that retried one (a record whose
# retry_of names the attempt it retries)
INTERRUPTION_COST = Spec(
    "llm_interruption_cost_usd",
    "Billed cost in US dollars of the requests that did not complete (an error event, "
    "cut by either side, truncated), by outcome; part of llm_cost_usd_total.",
    (*STREAM_LABELS, "outcome"),
)
RETRIES = Spec(
    "llm_retries",
    "Requests that retried an earlier one that did not complete (the same request "
    "from the same key, within --retry-window).",
)
MODEL_OVERFLOW = Spec(
    "llm_recorder_model_label_overflow",
    "Records whose model was reported as 'other' (past --max-model-labels).",
    (),
)

# The recorder's own health, read at scrape time: source name -> (metric, type, help).
HEALTH_METRICS: dict[str, tuple[str, str, str]] = {
    "write_queue_depth": (
        "llm_recorder_write_queue_depth",
        "gauge",
        "Finished records waiting in the writer's queue.",
    ),
    "spool_depth": (
        "llm_recorder_spool_depth",
        "gauge",
        "Spool files waiting for the database to come back (each holds one or more records).",
    ),
    "records_submitted": (
        "llm_recorder_records_submitted",
        "counter",
        "Finished records handed to the writer.",
    ),
    "records_written": (
        "llm_recorder_records_written",
        "counter",
        "Records committed to the database.",
    ),
    "records_spooled": (
        "llm_recorder_records_spooled",
        "counter",
        "Records written to the local spool because the database was unreachable.",
    ),
    "records_replayed": (
        "llm_recorder_records_replayed",
        "counter",
        "Spooled records committed to the database once it answered again.",
    ),
    "records_dropped": (
        "llm_recorder_records_dropped",
        "counter",
        "Records lost: neither the database nor the spool could take them.",
    ),
    "records_failed": (
        "llm_recorder_records_failed",
        "counter",
        "Records the writer failed to commit (each then spooled or dropped).",
    ),
    "parse_issues": (
        "llm_recorder_parse_issues",
        "counter",
        "Malformed events seen in finished records.",
    ),
    "internal_errors": (
        "llm_recorder_internal_errors",
        "counter",
        "Exceptions caught inside the recorder (traffic was unaffected).",
    ),
    "decode_errors": (
        "llm_recorder_decode_errors",
        "counter",
        "Compressed bodies the recorder could not decode to meter them.",
    ),
    "websocket_connections": (
        "llm_recorder_websocket_connections",
        "counter",
        "WebSocket connections to a metered endpoint (Responses, Realtime) that ended.",
    ),
    "websocket_connections_without_response": (
        "llm_recorder_websocket_connections_without_response",
        "counter",
        "WebSocket connections that ended without a response: no record was made of them.",
    ),
}


def label(value: str | None) -> str:
    """A label value: ``unknown`` for none, cut to ``MAX_LABEL_CHARS``."""
    if not value:
        return UNKNOWN
    return value[:MAX_LABEL_CHARS]


class ModelLabels:
    """Maps model names to label values, at most ``limit`` distinct ones plus ``other``."""

    def __init__(self, limit: int = DEFAULT_MAX_MODEL_LABELS) -> None:
        if limit < 1:
            raise ValueError("max_model_labels must be at least 1")
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, model: str | None) -> tuple[str, bool]:
        """The label for ``model``, and whether it was folded into ``other``."""
        if not model:
            return UNKNOWN, False
        value = model.strip()[:MAX_LABEL_CHARS] or UNKNOWN
        if value in self._seen:
            return value, False
        with self._lock:
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value, False
        return OTHER_MODEL, True

    @property
    def in_use(self) -> int:
        """Distinct model names with their own label value."""
        return len(self._seen)


class HealthCollector(Collector):
    """The recorder's health metrics, read from callables at scrape time."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self._sources: dict[str, Callable[[], float]] = {}
        if registry is not None:
            registry.register(self)

    def watch(self, name: str, source: Callable[[], float]) -> None:
        """Read ``HEALTH_METRICS[name]`` from ``source`` at every scrape."""
        if name not in HEALTH_METRICS:
            known = ", ".join(sorted(HEALTH_METRICS))
            raise ValueError(f"unknown health metric {name!r}; known: {known}")
        self._sources[name] = source

    def _family(self, name: str) -> CounterMetricFamily | GaugeMetricFamily:
        metric, kind, doc = HEALTH_METRICS[name]
        if kind == "counter":
            return CounterMetricFamily(metric, doc)
        return GaugeMetricFamily(metric, doc)

    def describe(self) -> Iterable[Metric]:
        return [self._family(name) for name in HEALTH_METRICS]

    def collect(self) -> Iterator[Metric]:
        for name, source in list(self._sources.items()):
            try:
                value = float(source())
            except Exception:
                log.exception("recorder: cannot read health metric %s", name)
                continue
            family = self._family(name)
            family.add_metric([], value)
            yield family


def label_names() -> frozenset[str]:
    """Every label name a metric of this module has (a tag exported as a label
    must not take one of them: ``--metrics-tag``), Prometheus's ``le`` and ``type``."""
    specs = [v for v in globals().values() if isinstance(v, Spec)]
    return frozenset({"le", "type"}).union(*(spec.labels for spec in specs))
