"""Prometheus metrics of the recorded streams, and of the recorder itself.

Theory of operation
-------------------
Everything is built on a registry handed in by the caller (docs/ARCHITECTURE.md, "House rules"):
importing this module registers nothing, starts nothing.

- Whole-stream observations are made once per finished record: the addon's
  metrics observer hands the record (metered and costed) to
  :meth:`Metrics.observe_later` on the event loop, and the next scrape counts
  every record that waits (:meth:`Metrics.fold`, then :meth:`Metrics.observe`
  for each) before it reads a series; with no scrape, the loop counts them once
  ``FOLD_RECORDS`` wait. The counters then agree with the rows the writer
  receives: one ``llm_streams_total`` per record, and token and cost counters that
  add up the records' own figures.
- The in-flight gauge moves with :meth:`Metrics.stream_started` and
  :meth:`Metrics.stream_ended`, called by the addon when a tapped request
  arrives and when its record is finished.
- The recorder's health is read, not pushed: callables registered with
  :meth:`Metrics.watch` (the write queue's depth, the writer's counters, the
  addon's :class:`~recorder.metrics.health.Health`) are called at scrape time, by a
  custom collector, so a scrape always sees live values and the writer thread
  needs no reference to this module.
- The per-record counters and histograms (streams, durations, tokens, cost...)
  are :mod:`recorder.metrics.record_series` families: plain numbers that
  :meth:`Metrics.observe` updates under one lock per record, exposed as
  prometheus_client's own ``Counter`` and ``Histogram`` would be.
- The two per-interval histograms (gaps between output chunks, gaps between
  keepalives) may receive up to 100,000 values from one stream; they are
  bucketed in one pass under one lock
  (:class:`~recorder.metrics.record_series.IntervalHistogram`) instead of
  one library ``observe`` call per value, which keeps a long stream's end cheap
  on the event loop.

The ``model`` label is the requested model (the response's model when the
request named none), capped: the first ``max_model_labels`` distinct values
keep their names, every later one is reported as ``other``, so junk model
names cannot multiply the series. Label values are cut to 100 characters.
With ``metrics_tag`` (``--metrics-tag NAME``) the stream metrics also carry the
request's tag NAME as a label of that name, after ``model``, capped the same way
(``other`` past the cap; empty for a request without the tag).
A record of several priced parts (``usage_parts``: an advisor iteration on
another model, say) counts each part's tokens and cost under the part's own
model; its stream, duration and per-request token observations stay the
record's.

Bucket boundaries are chosen for LLM streams; docs/metrics.md explains them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from recorder.core.pricing import unpriced_kind
from recorder.core.protocols import PROVIDERS
from recorder.metrics import record_figures
from recorder.metrics.collectors import (
    CHUNK_GAP,
    CHUNK_GAP_BUCKETS,
    COST,
    DEFAULT_MAX_MODEL_LABELS,
    DURATION,
    IN_FLIGHT,
    INTERRUPTION_COST,
    KEEPALIVE_GAP,
    KEEPALIVES,
    MAX_OUTPUT_GAP,
    MODEL_OVERFLOW,
    OLDEST_SILENCE,
    PROVIDER_TIMING_GAP,
    RETRIES,
    STALLS,
    STREAM_LABELS,
    STREAMS,
    STREAMS_STALLED,
    TOKEN_USAGE,
    TOKENS,
    TTFT,
    UNPRICED,
    HealthCollector,
    ModelLabels,
    Spec,
    label,
)
from recorder.metrics.record_series import CounterFamily, HistogramFamily, IntervalHistogram

if TYPE_CHECKING:
    from recorder.core.meter import StreamMeter
    from recorder.core.record import StreamRecord
    from recorder.metrics.health import Health

log = logging.getLogger("recorder.metrics")

# Finished records that wait for a scrape before the event loop counts them itself:
# a bound on what is held, and on the loop's one block (docs/performance.md) ...
FOLD_RECORDS = 32
# ... and on their intervals; a stream with more is counted at once, in its own callback.
FOLD_INTERVALS = 20_000


__all__ = ["CHUNK_GAP_BUCKETS", "IntervalHistogram", "Metrics", "ModelLabels"]


class Metrics:
    """The recorder's Prometheus metrics, on an injected registry."""

    def __init__(
        self,
        registry: CollectorRegistry,
        max_model_labels: int = DEFAULT_MAX_MODEL_LABELS,
        metrics_tag: str | None = None,
    ) -> None:
        self.registry = registry
        self.models = ModelLabels(max_model_labels)
        # the tag exported as a label (--metrics-tag), its values capped as models'
        self.metrics_tag = metrics_tag
        self._tag_values = ModelLabels(max_model_labels)
        # Finished records not counted yet (``observe_later``), and the lock that
        # lets one thread at a time count them (``fold``). Every family a record
        # moves counts them first when it is collected, so no scrape misses one.
        self._pending: deque[
            tuple[StreamRecord, Sequence[float] | None, Sequence[float] | None]
        ] = deque()
        self._pending_intervals = 0  # (a bound, not a count: a race only folds sooner)
        self._fold_lock = threading.Lock()
        # the series a finished record moves, all under this one lock (record_series)
        self._lock = threading.Lock()
        self.duration = self._histogram(DURATION)
        self.ttft = self._histogram(TTFT)
        self.chunk_gap = self._intervals(CHUNK_GAP)
        self.token_usage = self._histogram(TOKEN_USAGE)
        self.streams = self._counter(STREAMS)
        self.in_flight = self._gauge(IN_FLIGHT)
        self.tokens = self._counter(TOKENS)
        self.cost = self._counter(COST)
        self.keepalives = self._counter(KEEPALIVES)
        self.keepalive_gap = self._intervals(KEEPALIVE_GAP)
        self.stalls = self._counter(STALLS)
        self.max_output_gap = self._histogram(MAX_OUTPUT_GAP)
        self.provider_timing_gap = self._histogram(PROVIDER_TIMING_GAP)
        self.unpriced = self._counter(UNPRICED)
        self.streams_stalled = self._gauge(STREAMS_STALLED)
        self.oldest_silence = self._gauge(OLDEST_SILENCE)
        self.model_overflow = self._counter(MODEL_OVERFLOW)
        self.interruption_cost = self._counter(INTERRUPTION_COST)
        self.retries = self._counter(RETRIES)
        with self._lock:
            self._overflow = self.model_overflow.child()  # exposed from the start, as 0
        self.health = HealthCollector(registry)
        # labelled children by metric and label values: `labels()` takes a lock and
        # checks its arguments on every call, a dozen times per record otherwise.
        # Bounded: models fold into 'other' past max_model_labels.
        self._children: dict[object, dict[tuple[str, ...], Any]] = {}
        # a record's series for `observe`, by (endpoint, provider, model), then a
        # short key: one dict lookup per update, under the families' lock
        self._base_kids: dict[tuple[str, ...], dict[object, Any]] = {}
        # called (inside the except) for a record that could not be counted; the
        # composition root wires the recorder's internal-error count to it
        self.on_error: Callable[[], None] | None = None
        # (endpoint, provider) pairs the live gauges have a series for
        self._live_pairs: set[tuple[str, str]] = set(PROVIDERS.items())
        for endpoint, provider in PROVIDERS.items():
            self.in_flight.labels(endpoint, provider).set(0)
            self.streams_stalled.labels(endpoint, provider).set(0)
            self.oldest_silence.labels(endpoint, provider).set(0)

    def _counter(self, spec: Spec) -> CounterFamily:
        """A family a record moves: counted first (``fold``) when it is collected."""
        family = CounterFamily(
            spec.name, spec.documentation, self._labels(spec), self._lock, self.registry
        )
        family.before_collect = self.fold
        return family

    def _histogram(self, spec: Spec) -> HistogramFamily:
        """As :meth:`_counter`, a histogram."""
        family = HistogramFamily(
            spec.name,
            spec.documentation,
            self._labels(spec),
            spec.buckets,
            self._lock,
            self.registry,
        )
        family.before_collect = self.fold
        return family

    def _intervals(self, spec: Spec) -> IntervalHistogram:
        """As :meth:`_counter`, a histogram of a stream's many intervals (its own lock)."""
        lock = threading.Lock()
        family = IntervalHistogram(
            spec.name, spec.documentation, self._labels(spec), spec.buckets, lock, self.registry
        )
        family.before_collect = self.fold
        return family

    def _labels(self, spec: Spec) -> tuple[str, ...]:
        """A stream metric's labels: with ``metrics_tag``, the tag's after ``model``."""
        labels = tuple(spec.labels)
        n = len(STREAM_LABELS)
        if self.metrics_tag is None or labels[:n] != STREAM_LABELS:
            return labels
        return (*STREAM_LABELS, self.metrics_tag, *labels[n:])

    def _tag_label(self, record: StreamRecord) -> str:
        """The record's value of the exported tag: empty without it, ``other`` past the cap."""
        tags = record.tags
        value = tags.get(self.metrics_tag or "") if tags else None
        if not value:
            return ""
        return self._tag_values(value)[0]

    def _gauge(self, spec: Spec) -> Gauge:
        """A gauge the addon or the live view sets (the library's own)."""
        return Gauge(spec.name, spec.documentation, spec.labels, registry=self.registry)

    def _child(self, metric: Counter | Gauge, *values: str) -> Any:
        """``metric.labels(*values)``, remembered."""
        kids = self._children.get(metric)
        if kids is None:
            kids = self._children[metric] = {}
        child = kids.get(values)
        if child is None:
            child = kids[values] = metric.labels(*values)
        return child

    # -- the addon's hooks -------------------------------------------------------

    def stream_started(self, endpoint: str | None, provider: str | None) -> None:
        """A tapped request arrived."""
        self._child(self.in_flight, label(endpoint), label(provider)).inc()

    def stream_ended(self, endpoint: str | None, provider: str | None) -> None:
        """A tapped request's record was finished."""
        self._child(self.in_flight, label(endpoint), label(provider)).dec()

    def observe_later(self, record: StreamRecord, meter: StreamMeter | None = None) -> None:
        """Count one finished record before the next scrape (the recorder's metrics
        observer, on the event loop).

        The record only joins a queue: the scrape counts what waits (``fold``), off
        the loop and in one pass, where its code stays in the CPU's caches (a record
        counted alone, between two of mitmproxy's callbacks, finds them cold:
        docs/performance.md has the figures). With no scrape, the loop counts them
        itself once ``FOLD_RECORDS`` records or ``FOLD_INTERVALS`` intervals wait,
        which bounds both what is held (the records and their interval arrays, not
        their meters) and the loop's block.
        """
        if meter is None:
            out = keep = None
        else:
            out, keep = meter.output_intervals, meter.keepalive_intervals
            self._pending_intervals += len(out) + len(keep)
        pending = self._pending
        pending.append((record, out, keep))  # (a deque: appended and drained thread-safely)
        if len(pending) >= FOLD_RECORDS or self._pending_intervals >= FOLD_INTERVALS:
            self.fold(wait=False)  # a scrape counting them already: it takes these too

    @property
    def waiting(self) -> int:
        """Finished records left by ``observe_later`` that are not counted yet."""
        return len(self._pending)

    def fold(self, *, wait: bool = True) -> None:
        """Count the records that ``observe_later`` left waiting, in their order.
        Every collect of a family they move calls it first."""
        if not self._fold_lock.acquire(blocking=wait):
            return
        try:
            self._pending_intervals = 0
            pending, count = self._pending, self._count
            while pending:
                record, out, keep = pending.popleft()
                try:
                    count(record, out, keep)
                except Exception:  # a bug: that record's series only
                    self._failed(record)
        finally:
            self._fold_lock.release()

    def _failed(self, record: StreamRecord) -> None:
        """A record that could not be counted: the recorder's internal error (its
        count and its rate-limited log line) when one is wired, else a log line."""
        try:
            if self.on_error is not None:
                self.on_error()
                return
        except Exception:
            pass
        log.exception("recorder: cannot count record %s in the metrics", record.id)

    def observe(self, record: StreamRecord, meter: StreamMeter | None = None) -> None:
        """Count one finished record now."""
        if meter is None:
            self._count(record, None, None)
        else:
            self._count(record, meter.output_intervals, meter.keepalive_intervals)

    def _count(
        self,
        record: StreamRecord,
        output_intervals: Sequence[float] | None,
        keepalive_intervals: Sequence[float] | None,
    ) -> None:
        model, folded = self.models(record.model or record.response_model)
        base: tuple[str, ...] = (label(record.endpoint), label(record.provider), model)
        if self.metrics_tag is not None:
            base = (*base, self._tag_label(record))
        outcome = label(record.outcome)
        cost = record_figures.cost_float(record.cost_usd)  # (may log: not under the lock)
        parts = self._parts(record, base, cost is not None) if record.usage_parts else None
        kind = unpriced_kind(record.unpriced_reason)
        with self._lock:
            if folded:
                self._overflow.inc(1)
            if kind is not None:
                self.unpriced.child(model, kind).inc(1)
            kids = self._base_kids.setdefault(base, {})
            get, kid = kids.get, self._kid
            (
                get(("streams", outcome))
                or kid(kids, ("streams", outcome), self.streams, *base, outcome)
            ).inc(1)
            if record.duration_ms is not None:
                (
                    get(("duration", outcome))
                    or kid(kids, ("duration", outcome), self.duration, *base, outcome)
                ).observe(record.duration_ms / 1000.0)
            if record.streamed and record.ttft_ms is not None:
                ttft = get("ttft") or kid(kids, "ttft", self.ttft, *base)
                ttft.observe(record.ttft_ms / 1000.0)
            if record.max_output_gap_ms is not None:
                gap = get("max_gap") or kid(kids, "max_gap", self.max_output_gap, *base)
                gap.observe(record.max_output_gap_ms / 1000.0)
            for measure, seconds in record_figures.provider_gaps(record):
                key = ("provider_gap", measure)
                timing = get(key) or kid(kids, key, self.provider_timing_gap, *base, measure)
                timing.observe(seconds)
            # the series exists from the first record on, even while its count is 0
            stalls = get("stalls") or kid(kids, "stalls", self.stalls, *base)
            if record.stalls:
                stalls.inc(record.stalls)
            keepalives = get("keepalives") or kid(kids, "keepalives", self.keepalives, *base)
            if record.keepalives:
                keepalives.inc(record.keepalives)
            self._tokens(record, base, kids, counted=parts is None)
            if parts is not None:
                for part_base, figures, part_cost in parts:
                    self._part(record, part_base, figures, part_cost, outcome)
            elif cost is not None:
                self._costs(record, base, kids, cost, outcome)
            # (the series exists from the first record on, as the stalls')
            retries = get("retries") or kid(kids, "retries", self.retries, *base)
            if record.retry_of:  # the retry chain's field (issue 32)
                retries.inc(1)
        # (their own lock: one pass each)
        if output_intervals:
            self.chunk_gap.observe_many(base, output_intervals)
        if keepalive_intervals:
            self.keepalive_gap.observe_many(base, keepalive_intervals)

    @staticmethod
    def _kid(
        kids: dict[object, Any], key: object, family: CounterFamily | HistogramFamily, *values: str
    ) -> Any:
        """``family.child(*values)``, kept in ``kids`` under ``key``."""
        child = kids[key] = family.child(*values)
        return child

    def _costs(
        self,
        record: StreamRecord,
        base: tuple[str, ...],
        kids: dict[object, Any],
        cost: float,
        outcome: str,
    ) -> None:
        """The cost counters of ``cost`` under ``base`` (the caller holds the lock)."""
        get, kid = kids.get, self._kid
        source = "reported" if record.usage_source == "reported" else "estimated"
        key = ("cost", source)
        (get(key) or kid(kids, key, self.cost, *base, source)).inc(cost)
        if record.interrupted:
            key = ("interruption", outcome)
            (get(key) or kid(kids, key, self.interruption_cost, *base, outcome)).inc(cost)

    def _parts(
        self, record: StreamRecord, base: tuple[str, ...], priced: bool
    ) -> list[tuple[tuple[str, ...], record_figures.Figures, float | None]]:
        """Each usage part's labels (its own model's, the record's when it names
        none), figures and cost (None unless the record is priced: the counters
        agree with the rows, whose cost is null when a part is unpriced). Made
        before the lock is taken (labels may fold, a cost may log)."""
        out = []
        for part in record.usage_parts or ():
            named = part.get("model")
            part_base = base
            if named:
                part_base = (base[0], base[1], self.models(str(named))[0], *base[3:])
            figures = record_figures.part_tokens(record, part)
            part_cost = record_figures.cost_float(part.get("cost_usd")) if priced else None
            out.append((part_base, figures, part_cost))
        return out

    def _part(
        self,
        record: StreamRecord,
        base: tuple[str, ...],
        figures: record_figures.Figures,
        cost: float | None,
        outcome: str,
    ) -> None:
        """One usage part's token and cost counters under its own model (the
        caller holds the lock)."""
        kids = self._base_kids.setdefault(base, {})
        self._count_tokens(base, kids, figures)
        if cost is not None:
            self._costs(record, base, kids, cost, outcome)

    def _tokens(
        self,
        record: StreamRecord,
        base: tuple[str, ...],
        kids: dict[object, Any],
        *,
        counted: bool = True,
    ) -> None:
        """The record's token counters (unless its parts count them) and
        per-request token histograms (the caller holds the lock)."""
        if counted:
            self._count_tokens(base, kids, record_figures.record_tokens(record))
        get, kid = kids.get, self._kid
        if record.input_tokens is not None:
            key = ("usage", "input")
            (get(key) or kid(kids, key, self.token_usage, *base, "input")).observe(
                record.input_tokens
            )
        if record.output_tokens is not None:
            key = ("usage", "output")
            (get(key) or kid(kids, key, self.token_usage, *base, "output")).observe(
                record.output_tokens
            )

    def _count_tokens(
        self, base: tuple[str, ...], kids: dict[object, Any], figures: record_figures.Figures
    ) -> None:
        """The token counters of ``figures`` under ``base`` (the caller holds the lock)."""
        get, kid = kids.get, self._kid
        for token_type, value, source in figures:
            if value is None or source not in ("reported", "estimated"):
                continue
            key: tuple[str, ...] = ("tokens", token_type, source)
            (get(key) or kid(kids, key, self.tokens, *base, token_type, source)).inc(value)

    def live_streams(
        self, stalled: dict[tuple[str, str], int], oldest: dict[tuple[str, str], float]
    ) -> None:
        """The open streams as the live view's walk saw them (its ``on_tick``):
        stalled ones and the longest output silence, by (endpoint, provider)."""
        for pair in set(self._live_pairs) | stalled.keys() | oldest.keys():
            endpoint, provider = label(pair[0]), label(pair[1])
            self._child(self.streams_stalled, endpoint, provider).set(stalled.get(pair, 0))
            self._child(self.oldest_silence, endpoint, provider).set(oldest.get(pair, 0.0))
            self._live_pairs.add(pair)

    # -- the recorder's health ---------------------------------------------------

    def watch(self, **sources: Callable[[], float]) -> None:
        """Read health metrics from callables at scrape time.

        Names are the keys of ``HEALTH_METRICS``: ``write_queue_depth``,
        ``spool_depth``, ``records_submitted``, ``records_written``,
        ``records_spooled``, ``records_replayed``, ``records_dropped``, ``records_failed``,
        ``parse_issues``, ``internal_errors``, ``decode_errors``.
        A metric without a source is not exported.
        """
        for name, source in sources.items():
            self.health.watch(name, source)

    def watch_health(self, health: Health) -> None:
        """Export the addon's own counters (:class:`recorder.metrics.health.Health`)."""
        self.watch(
            records_submitted=lambda: health.records,
            parse_issues=lambda: health.parse_issues,
            internal_errors=lambda: health.internal_errors,
            decode_errors=lambda: health.decode_errors,
            websocket_connections=lambda: health.websocket_connections,
            websocket_connections_without_response=lambda: (
                health.websocket_connections_without_response
            ),
        )
