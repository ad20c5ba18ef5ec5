"""Who hears of a stream's start and of its completed record: the Recorder's one
observer list.

The composition root (``recorder.app``) builds the list: the metrics, mitmweb's
view, the live view, the span exporter, in that order (the order in which they
are called). An observer overrides either method or both; the Recorder calls
only the ``stream_started`` methods that are overridden, so an observer that only
wants finished records costs nothing per start.

Both are called on mitmproxy's event loop: ``stream_started`` inside the
``requestheaders`` hook, ``stream_finished`` in the finishing pipeline, before
the record goes to the sink. Keep them cheap (a few counters, an append), never
blocking; an exception is caught, counted in ``health.internal_errors`` and does
not stop the other observers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recorder.core.captured import CapturedBody
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord

if TYPE_CHECKING:
    from mitmproxy import http

    from recorder.metrics import Metrics
    from recorder.otel import SpanExport


@dataclass(slots=True)
class Done:
    """A completed stream, as observers see it (one per record, on the loop)."""

    record: StreamRecord  # usage and cost completed; the sink has not taken it yet
    meter: StreamMeter
    # the mitmproxy flow, only under mitmweb (``RecorderConfig.keep_for_ui``)
    flow: http.HTTPFlow | None
    # the tapped body with its arrival times (``capture_bodies`` or the UI); the
    # sink's writer packs it later, so read it here, do not keep it
    body: CapturedBody | None
    # the request's W3C trace context, forwarded untouched, read for spans only
    traceparent: str | None
    tracestate: str | None


class Observer:
    """Base of the observers: both methods do nothing."""

    def stream_started(self, rec: StreamRecord) -> None:
        """A metered request began (``rec`` has its endpoint and provider)."""

    def stream_finished(self, done: Done) -> None:
        """A stream's record is complete; it goes to the sink after (with the others
        completed in its batch, once every observer has seen them all)."""


def starts(observer: Observer) -> bool:
    """Whether ``observer`` wants ``stream_started``: it overrides it, and does not
    say otherwise (``wants_starts``)."""
    overridden = type(observer).stream_started is not Observer.stream_started
    return overridden and bool(getattr(observer, "wants_starts", True))


class Observers:
    """The observer list, in the order observers were added; each call guarded (an
    exception is reported to ``on_error`` and the others still run)."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self._all: list[Observer] = []
        self._starts: list[Callable[[StreamRecord], None]] = []
        self._finishes: list[Callable[[Done], None]] = []

    def __iter__(self) -> Iterator[Observer]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def add(self, observer: Observer) -> None:
        """Call ``observer`` for every stream from now on, after those added before."""
        self._all.append(observer)
        self._finishes.append(observer.stream_finished)
        if starts(observer):
            self._starts.append(observer.stream_started)

    @property
    def wants_finishes(self) -> bool:
        return bool(self._finishes)

    def started(self, rec: StreamRecord) -> None:
        """A stream began: each observer that wants starts hears of it."""
        for observe in self._starts:
            try:
                observe(rec)
            except Exception:
                self._on_error("observer")

    def finished(self, dones: list[Done]) -> None:
        """Completed records, in order: each observer sees them all before the next
        observer does (its code runs warm, once per batch)."""
        for observe in self._finishes:
            for done in dones:
                try:
                    observe(done)
                except Exception:
                    self._on_error("observer")


class MetricsObserver(Observer):
    """The Prometheus metrics: in-flight gauge up and down, the record observed."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def stream_started(self, rec: StreamRecord) -> None:
        self.metrics.stream_started(rec.endpoint, rec.provider)

    def stream_finished(self, done: Done) -> None:
        rec = done.record
        self.metrics.stream_ended(rec.endpoint, rec.provider)
        self.metrics.observe_later(rec, done.meter)  # counted before the next scrape


class SpanObserver(Observer):
    """One OpenTelemetry span per record, child of the request's trace context."""

    def __init__(self, spans: SpanExport) -> None:
        self.spans = spans

    def stream_finished(self, done: Done) -> None:
        self.spans.export(done.record, done.traceparent, done.tracestate)


class RecordCallback(Observer):
    """An observer from plain callables (tests, small tools)."""

    def __init__(
        self,
        finished: Callable[[StreamRecord, StreamMeter], None] | None = None,
        started: Callable[[StreamRecord], None] | None = None,
    ) -> None:
        self._finished = finished
        self._started = started
        self.wants_starts = started is not None

    def stream_started(self, rec: StreamRecord) -> None:
        if self._started is not None:
            self._started(rec)

    def stream_finished(self, done: Done) -> None:
        if self._finished is not None:
            self._finished(done.record, done.meter)
