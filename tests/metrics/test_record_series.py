"""The record series expose what prometheus_client's own Counter and Histogram
would for the same updates: the same text, sample for sample, in the same order,
``_created`` included (and not, when the library's switch turns it off)."""

from __future__ import annotations

import random
import re
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import metrics as library

from recorder.metrics.collectors import DURATION_BUCKETS, TOKEN_BUCKETS
from recorder.metrics.record_series import CounterFamily, HistogramFamily

LABELS = ("endpoint", "model")
VALUES = [
    ("chat", "gpt-4o"),
    ("messages", "claude"),
    ("chat", 'a "quoted"\nname'),
    ("chat", "other"),
]


def _text(registry: CollectorRegistry) -> str:
    """The exposition with the creation times blanked (made at different instants)."""
    text = generate_latest(registry).decode()
    return re.sub(r"^(\S+_created(?:\{.*\})?) \S+$", r"\1 T", text, flags=re.M)


def _fed(seed: int) -> tuple[CollectorRegistry, CollectorRegistry]:
    """The same random updates to our families and to the library's metrics."""
    rnd = random.Random(seed)
    ours, lib = CollectorRegistry(), CollectorRegistry()
    lock = threading.Lock()
    c_ours = CounterFamily("things", "Things counted.", LABELS, lock, ours)
    h_ours = HistogramFamily("took_seconds", "Time taken.", LABELS, DURATION_BUCKETS, lock, ours)
    t_ours = HistogramFamily("tokens", "Tokens.", LABELS, TOKEN_BUCKETS, lock, ours)
    c_lib = Counter("things", "Things counted.", LABELS, registry=lib)
    h_lib = Histogram("took_seconds", "Time taken.", LABELS, registry=lib, buckets=DURATION_BUCKETS)
    t_lib = Histogram("tokens", "Tokens.", LABELS, registry=lib, buckets=TOKEN_BUCKETS)
    for _ in range(300):
        labels = rnd.choice(VALUES)
        # on the bounds, between them, 0, past the last one, and integers
        value = rnd.choice(
            [rnd.choice(DURATION_BUCKETS), rnd.random() * 2000, 0.0, 1e9, float(rnd.randint(0, 99))]
        )
        which = rnd.randrange(3)
        with lock:
            if which == 0:
                c_ours.child(*labels).inc(value)
            elif which == 1:
                h_ours.child(*labels).observe(value)
            else:
                t_ours.child(*labels).observe(int(value))
        if which == 0:
            c_lib.labels(*labels).inc(value)
        elif which == 1:
            h_lib.labels(*labels).observe(value)
        else:
            t_lib.labels(*labels).observe(int(value))
    return ours, lib


@pytest.mark.parametrize("seed", range(5))
def test_the_exposition_is_the_librarys(seed: int) -> None:
    ours, lib = _fed(seed)
    assert _text(ours) == _text(lib)
    assert "_created" in _text(ours)


def test_created_series_follow_the_librarys_switch() -> None:
    library.disable_created_metrics()
    try:
        ours, lib = _fed(1)
        assert _text(ours) == _text(lib)
        assert "_created" not in _text(ours)
    finally:
        library.enable_created_metrics()


def test_a_family_without_series_exposes_its_help_and_type() -> None:
    ours, lib = CollectorRegistry(), CollectorRegistry()
    lock = threading.Lock()
    CounterFamily("things", "Things counted.", LABELS, lock, ours)
    HistogramFamily("took_seconds", "Time taken.", LABELS, DURATION_BUCKETS, lock, ours)
    Counter("things", "Things counted.", LABELS, registry=lib)
    Histogram("took_seconds", "Time taken.", LABELS, registry=lib, buckets=DURATION_BUCKETS)
    assert _text(ours) == _text(lib)


def test_a_counter_never_goes_down() -> None:
    registry = CollectorRegistry()
    family = CounterFamily("things", "Things counted.", LABELS, threading.Lock(), registry)
    series = family.child("chat", "m")
    for amount in (2.0, -1.0, float("nan"), 3):
        series.inc(amount)
    assert registry.get_sample_value("things_total", {"endpoint": "chat", "model": "m"}) == 5.0


def test_names_clash_as_the_librarys_do() -> None:
    registry = CollectorRegistry()
    CounterFamily("things", "Things counted.", LABELS, threading.Lock(), registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("things", "Again.", LABELS, registry=registry)
    with pytest.raises(ValueError, match="label values"):
        HistogramFamily("h", "h.", LABELS, (1.0,), threading.Lock(), None).child("one")
    with pytest.raises(ValueError, match="ascending"):
        HistogramFamily("h", "h.", LABELS, (2.0, 1.0), threading.Lock(), None)
