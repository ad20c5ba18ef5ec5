"""The exporter's building blocks: label and bucket definitions, the health
metrics' table, and three collectors (the capped model labels, the one-pass
interval histogram, the health read at scrape time). ``recorder.metrics.exporter``
assembles them into :class:`~recorder.metrics.exporter.Metrics`; its docstring
tells the theory of operation, docs/metrics.md the buckets."""

from __future__ import annotations

import bisect
import logging
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _float_to_go_string

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("recorder.metrics")
# the library's own spelling of a bucket bound (untyped there)
_go_float: Callable[[float], str] = _float_to_go_string

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
}


def _label(value: str | None) -> str:
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


class IntervalHistogram(Collector):
    """A histogram that takes many values at once, bucketed in one pass.

    The exposition is the same as a ``prometheus_client.Histogram``'s
    (``_bucket``, ``_count``, ``_sum``).
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._bounds = np.array(self.bounds, dtype=np.float64)
        self._les = [_go_float(b) for b in self.bounds] + ["+Inf"]
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        self._lock = threading.Lock()
        # called first by collect and value (as record_series' families)
        self.before_collect: Callable[[], None] | None = None
        if registry is not None:
            registry.register(self)

    def observe_many(self, labels: tuple[str, ...], values: Iterable[float]) -> None:
        """Add every value in ``values`` (seconds) to the series of ``labels``."""
        if not isinstance(values, array | list | tuple):
            values = array("d", values)
        bounds = self.bounds
        if len(values) < len(bounds):
            # a short stream's few intervals one by one: a numpy call costs more
            if not values:
                return
            counts: list[int] = [0] * (len(bounds) + 1)
            find_le = bisect.bisect_left  # the first bound >= the value: its `le` bucket
            total = 0.0
            for value in values:
                total += value
                if value == value:  # a NaN goes to no bucket, only into the sum (as the library)
                    counts[find_le(bounds, value)] += 1
        else:
            # many: in numpy, a view of the meter's array of doubles, one search of
            # the bounds and one count per bucket in C (bench/bench_metrics.py: 200
            # intervals 2.2x, 100,000 intervals 7x cheaper than sorted and bisected)
            batch = np.asarray(values, dtype=np.float64)
            total = float(np.add.reduce(batch))
            if total != total:
                batch = batch[~np.isnan(batch)]
            # the first bound >= the value is its `le` bucket; past the last, +Inf's
            counts = np.bincount(
                self._bounds.searchsorted(batch), minlength=len(bounds) + 1
            ).tolist()
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = ([0] * (len(self.bounds) + 1), [0.0])
                self._series[labels] = series
            into, acc = series
            for i, n in enumerate(counts):
                if n:
                    into[i] += n
            acc[0] += total

    def value(self, labels: tuple[str, ...]) -> tuple[int, float]:
        """``(count, sum)`` of one series (for tests)."""
        if self.before_collect is not None:
            self.before_collect()
        with self._lock:
            series = self._series.get(labels)
            return (0, 0.0) if series is None else (sum(series[0]), series[1][0])

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        if self.before_collect is not None:
            self.before_collect()
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            snapshot = [(k, list(c), s[0]) for k, (c, s) in self._series.items()]
        for labels, counts, total in snapshot:
            family.add_metric(list(labels), cumulative_buckets(self._les, counts), total)
        return [family]


def cumulative_buckets(les: Sequence[str], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Per-bucket counts (the last one +Inf's) as the exposition's ``(le, count of
    values <= le)`` pairs."""
    cumulative = 0.0
    buckets: list[tuple[str, float]] = []
    for le, n in zip(les, counts, strict=True):
        cumulative += n
        buckets.append((le, cumulative))
    return buckets


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
