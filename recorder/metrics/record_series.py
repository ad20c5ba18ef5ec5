"""The counters and histograms every finished record moves, as plain numbers.

A finished record updates a dozen labelled series. Through prometheus_client's
``Counter`` and ``Histogram`` that is a dozen calls on the event loop, each taking
its own lock and checking its arguments, and a histogram's ``observe`` walks its
buckets in Python. Here a family keeps its series as a few numbers
(:class:`CounterSeries`, :class:`HistogramSeries`); ``Metrics.observe`` updates all
of a record's under the one lock the families share, and the scrape reads them
under it. The exposition is the library's: the same names, HELP and TYPE, the same
samples in the same order, with ``_created`` unless the library's created series
are turned off (``PROMETHEUS_DISABLE_CREATED_SERIES``). A series exists from its
first update on, as a library child exists from its first ``labels()``.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as _library
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from recorder.metrics.collectors import _go_float, cumulative_buckets

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


def _created_on() -> bool:
    """Whether the library exposes ``_created`` series (its switch, read at scrape)."""
    return bool(getattr(_library, "_use_created", True))


class CounterSeries:
    """One counter series: its value and when it was made."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float) -> None:
        """Add ``amount``; a negative or NaN one is not counted (a counter never
        goes down, and the library would raise in the middle of a record)."""
        if amount >= 0:  # False for NaN
            self.value += amount


class HistogramSeries:
    """One histogram series: per-bucket counts (not cumulative), sum, creation time."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf's
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is >= it (``le``), as the
        library does; a NaN goes to no bucket and into the sum, as there too."""
        if value != value:  # NaN
            self.total += value
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


class _Family(Collector):
    """A labelled family registered as its own collector (the registry keeps the
    order of the families), sharing ``lock`` with the others."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        lock: threading.Lock,
        registry: CollectorRegistry | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.lock = lock
        # called first by every collect (not under the lock): the owner's updates
        # still waiting are made then (``Metrics.fold``), so a scrape sees them
        self.before_collect: Callable[[], None] | None = None
        if registry is not None:
            registry.register(self)

    def _ready(self) -> None:
        if self.before_collect is not None:
            self.before_collect()

    def _check(self, values: tuple[str, ...]) -> None:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected")


class CounterFamily(_Family):
    """A labelled counter whose series are :class:`CounterSeries`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        lock: threading.Lock,
        registry: CollectorRegistry | None,
    ) -> None:
        self.series: dict[tuple[str, ...], CounterSeries] = {}
        super().__init__(name, documentation, labelnames, lock, registry)

    def child(self, *values: str) -> CounterSeries:
        """The series of ``values``, made on first use (the caller holds the lock)."""
        series = self.series.get(values)
        if series is None:
            self._check(values)
            series = self.series[values] = CounterSeries()
        return series

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        self._ready()
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self.lock:
            snapshot = [(k, s.value, s.created) for k, s in self.series.items()]
        created = _created_on()
        for labels, value, made in snapshot:
            family.add_metric(labels, value, created=made if created else None)
        return [family]


class HistogramFamily(_Family):
    """A labelled histogram whose series are :class:`HistogramSeries`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        lock: threading.Lock,
        registry: CollectorRegistry | None,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(bounds) or not bounds or math.isinf(bounds[-1]):
            raise ValueError(f"{name}: finite bucket bounds in ascending order expected")
        self.bounds = bounds
        self._les = [_go_float(b) for b in bounds] + ["+Inf"]
        self.series: dict[tuple[str, ...], HistogramSeries] = {}
        super().__init__(name, documentation, labelnames, lock, registry)

    def child(self, *values: str) -> HistogramSeries:
        """The series of ``values``, made on first use (the caller holds the lock)."""
        series = self.series.get(values)
        if series is None:
            self._check(values)
            series = self.series[values] = HistogramSeries(self.bounds)
        return series

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        self._ready()
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self.lock:
            snapshot = [(k, list(s.counts), s.total, s.created) for k, s in self.series.items()]
        created = _created_on()
        for labels, counts, total, made in snapshot:
            family.add_metric(labels, cumulative_buckets(self._les, counts), total)
            if created:
                named = dict(zip(self.labelnames, labels, strict=True))
                family.samples.append(Sample(f"{self.name}_created", named, made))
        return [family]
