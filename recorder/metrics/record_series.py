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

A stream's many intervals (gaps between output chunks, between keepalives: up to
100,000 a stream) go to an :class:`IntervalHistogram`, which buckets them all in
one pass under a lock of its own instead of one ``observe`` per value, so that a
long stream's end stays cheap.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client import metrics as _library
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString as _float_to_go_string

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

# the library's own spelling of a bucket bound (untyped there)
_go_float: Callable[[float], str] = _float_to_go_string


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


class _Family[S: (CounterSeries, HistogramSeries)](Collector):
    """A labelled family of series made on first use, registered as its own
    collector (the registry keeps the order of the families), under ``lock``."""

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
        self.series: dict[tuple[str, ...], S] = {}
        # called first by every collect (not under the lock): the owner's updates
        # still waiting are made then (``Metrics.fold``), so a scrape sees them
        self.before_collect: Callable[[], None] | None = None
        if registry is not None:
            registry.register(self)

    def child(self, *values: str) -> S:
        """The series of ``values``, made on first use (the caller holds the lock)."""
        series = self.series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected")
            series = self.series[values] = self._new_series()
        return series

    def _new_series(self) -> S:
        raise NotImplementedError

    def _metric(self) -> CounterMetricFamily | HistogramMetricFamily:
        """The library's family of this name, help and labels, without samples."""
        raise NotImplementedError

    def _snapshot(self, series: S) -> Any:
        """What the exposition needs of a series, copied under the lock."""
        raise NotImplementedError

    def _expose(self, family: Any, labels: tuple[str, ...], snapshot: Any, made: bool) -> None:
        """Add a series' samples to ``family`` (``made``: with its ``_created``)."""
        raise NotImplementedError

    def describe(self) -> Iterable[Metric]:
        return [self._metric()]

    def collect(self) -> Iterable[Metric]:
        if self.before_collect is not None:
            self.before_collect()
        family = self._metric()
        with self.lock:
            snapshot = [(labels, self._snapshot(s)) for labels, s in self.series.items()]
        made = _created_on()
        for labels, values in snapshot:
            self._expose(family, labels, values, made)
        return [family]


class CounterFamily(_Family[CounterSeries]):
    """A labelled counter whose series are :class:`CounterSeries`."""

    def _new_series(self) -> CounterSeries:
        return CounterSeries()

    def _metric(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _snapshot(self, series: CounterSeries) -> tuple[float, float]:
        return series.value, series.created

    def _expose(
        self,
        family: CounterMetricFamily,
        labels: tuple[str, ...],
        snapshot: tuple[float, float],
        made: bool,
    ) -> None:
        value, created = snapshot
        family.add_metric(labels, value, created=created if made else None)


class HistogramFamily(_Family[HistogramSeries]):
    """A labelled histogram whose series are :class:`HistogramSeries`."""

    with_created = True  # whether its series expose ``_created`` (when the library's do)

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
        super().__init__(name, documentation, labelnames, lock, registry)

    def _new_series(self) -> HistogramSeries:
        return HistogramSeries(self.bounds)

    def _metric(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _snapshot(self, series: HistogramSeries) -> tuple[list[int], float, float]:
        return list(series.counts), series.total, series.created

    def _expose(
        self,
        family: HistogramMetricFamily,
        labels: tuple[str, ...],
        snapshot: tuple[list[int], float, float],
        made: bool,
    ) -> None:
        counts, total, created = snapshot
        family.add_metric(labels, cumulative_buckets(self._les, counts), total)
        if made and self.with_created:
            named = dict(zip(self.labelnames, labels, strict=True))
            family.samples.append(Sample(f"{self.name}_created", named, created))


class IntervalHistogram(HistogramFamily):
    """A histogram that takes many values at once, bucketed in one pass (give it a
    lock of its own: a stream's many values are bucketed outside the lock, but
    added under it).

    The exposition is a ``prometheus_client.Histogram``'s (``_bucket``,
    ``_count``, ``_sum``), without ``_created``.
    """

    with_created = False

    @cached_property
    def _array(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The bounds, for numpy to search."""
        return np.array(self.bounds, dtype=np.float64)

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
            # the bounds and one count per bucket in C
            batch = np.asarray(values, dtype=np.float64)
            total = float(np.add.reduce(batch))
            if total != total:
                batch = batch[~np.isnan(batch)]
            # the first bound >= the value is its `le` bucket; past the last, +Inf's
            counts = np.bincount(
                self._array.searchsorted(batch), minlength=len(bounds) + 1
            ).tolist()
        with self.lock:
            series = self.child(*labels)
            into = series.counts
            for i, n in enumerate(counts):
                if n:
                    into[i] += n
            series.total += total

    def value(self, labels: tuple[str, ...]) -> tuple[int, float]:
        """``(count, sum)`` of one series (for tests)."""
        if self.before_collect is not None:
            self.before_collect()
        with self.lock:
            series = self.series.get(labels)
            return (0, 0.0) if series is None else (sum(series.counts), series.total)


def cumulative_buckets(les: Sequence[str], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Per-bucket counts (the last one +Inf's) as the exposition's ``(le, count of
    values <= le)`` pairs."""
    cumulative = 0.0
    buckets: list[tuple[str, float]] = []
    for le, n in zip(les, counts, strict=True):
        cumulative += n
        buckets.append((le, cumulative))
    return buckets
