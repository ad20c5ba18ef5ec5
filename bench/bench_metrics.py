"""What a finished record costs the Prometheus metrics, against prometheus_client's
own types doing the same updates.

A record's metrics are updated on the event loop when it is completed. Two parts:

- **intervals**: every gap between output chunks (and between keepalives) goes into
  a histogram. The recorder's ``IntervalHistogram.observe_many`` takes a stream's
  intervals at once (a numpy view of the meter's array); the anchor is the
  library's ``Histogram`` observing them one by one, as a plain exporter would.
  Streams of 5, 200, 3,000 and 100,000 intervals (the meter keeps at most 100,000).
- **a record's series**: the dozen counters and histograms a record moves
  (``recorder.metrics.record_series``, under one lock) against the library's
  ``Counter`` and ``Histogram`` children making the same updates.

    .venv/bin/python bench/bench_metrics.py          # about 30 s
    .venv/bin/python bench/bench_metrics.py --quick  # a smoke run

Contenders run interleaved, in a rotating order, warm (in a loop: the in-situ cost
on the proxy's loop is higher, see bench_in_situ.py); medians of the rounds with
their spread (min-max), and the ratio anchor / recorder taken per round. It exits
non-zero if the recorder's exposition differs from the library's for the same values.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import fmt as _fmt
from timing import rounds

from recorder.metrics.collectors import CHUNK_GAP_BUCKETS, DURATION_BUCKETS
from recorder.metrics.record_series import CounterFamily, HistogramFamily, IntervalHistogram

LABELS = ("chat.completions", "openai", "gpt-4o")


def _ratio(anchor: list[float], ours: list[float]) -> str:
    r = sorted(a / o for a, o in zip(anchor, ours, strict=True))
    return f"{statistics.median(r):.1f}x ({r[0]:.1f}-{r[-1]:.1f})"


def _row(name: str, s: dict[str, list[float]], per: float) -> str:
    lib, ours = s["library"], s["recorder"]
    return f"| {name} | {_fmt(lib, per)} | {_fmt(ours, per)} | {_ratio(lib, ours)} |"


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("le", "")): s.value
        for f in registry.collect()
        for s in f.samples
        if not s.name.endswith("_created")
    }


def intervals(n: int, reps: int, repeats: int) -> tuple[str, bool]:
    rng = random.Random(n)
    # output gaps as streams have them: mostly tens of ms, some ticks, a few stalls
    values = array(
        "d", (rng.expovariate(40) if rng.random() < 0.97 else rng.uniform(1, 60) for _ in range(n))
    )
    lib_reg, our_reg = CollectorRegistry(), CollectorRegistry()
    lib = Histogram(
        "gap_seconds", "g", ["e", "p", "m"], registry=lib_reg, buckets=CHUNK_GAP_BUCKETS
    )
    ours = IntervalHistogram(
        "gap_seconds", "g", ["e", "p", "m"], CHUNK_GAP_BUCKETS, threading.Lock(), our_reg
    )
    child = lib.labels(*LABELS)

    def library() -> None:
        observe = child.observe
        for _ in range(reps):
            for v in values:
                observe(v)

    def recorder() -> None:
        for _ in range(reps):
            ours.observe_many(LABELS, values)

    s = rounds({"library": library, "recorder": recorder}, repeats)
    lib_s, our_s = _samples(lib_reg), _samples(our_reg)
    same = lib_s.keys() == our_s.keys() and all(
        abs(lib_s[k] - our_s[k]) <= 1e-9 * max(1.0, abs(lib_s[k])) for k in lib_s
    )
    per = reps * 1e-6
    return _row(f"{n:,}", s, per), same


COUNTERS = (
    ("streams", ("outcome",)),
    ("stalls", ()),
    ("keepalives", ()),
    ("tokens", ("t", "s")),
    ("cost", ("s",)),
)
HISTOGRAMS = (("duration", ("outcome",)), ("ttft", ()), ("max_gap", ()), ("usage", ("t",)))
# a record's series: (key, family, label values past endpoint, provider and model)
UPDATED = (
    ("streams", "streams", ("completed",)),
    ("stalls", "stalls", ()),
    ("keepalives", "keepalives", ()),
    ("tok_in", "tokens", ("input", "reported")),
    ("tok_out", "tokens", ("output", "reported")),
    ("tok_reason", "tokens", ("reasoning", "reported")),
    ("tok_cache", "tokens", ("cache_read", "reported")),
    ("cost", "cost", ("reported",)),
    ("duration", "duration", ("completed",)),
    ("ttft", "ttft", ()),
    ("max_gap", "max_gap", ()),
    ("use_in", "usage", ("input",)),
    ("use_out", "usage", ("output",)),
)


def series(reps: int, repeats: int) -> tuple[str, bool]:
    """The updates of one completed chat record: streams, duration, TTFT, max gap,
    stalls, keepalives, four token counters and three token histograms, cost."""
    lib_reg, our_reg = CollectorRegistry(), CollectorRegistry()
    lock = threading.Lock()
    base = ("e", "p", "m")
    lib: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    for name, extra in COUNTERS:
        lib[name] = Counter(name, name, [*base, *extra], registry=lib_reg)
        ours[name] = CounterFamily(name, name, [*base, *extra], lock, our_reg)
    for name, extra in HISTOGRAMS:
        labels = [*base, *extra]
        lib[name] = Histogram(name, name, labels, registry=lib_reg, buckets=DURATION_BUCKETS)
        ours[name] = HistogramFamily(name, name, labels, DURATION_BUCKETS, lock, our_reg)
    # children looked up once, as both the recorder and a careful exporter do
    lib_kids = {key: lib[name].labels(*LABELS, *values) for key, name, values in UPDATED}
    with lock:
        our_kids = {key: ours[name].child(*LABELS, *values) for key, name, values in UPDATED}

    def record(k: dict[str, object]) -> None:  # a record's updates, the same for both
        k["streams"].inc(1)  # type: ignore[attr-defined]
        k["stalls"].inc(0)  # type: ignore[attr-defined]
        k["keepalives"].inc(3)  # type: ignore[attr-defined]
        k["tok_in"].inc(1200)  # type: ignore[attr-defined]
        k["tok_out"].inc(240)  # type: ignore[attr-defined]
        k["tok_reason"].inc(0)  # type: ignore[attr-defined]
        k["tok_cache"].inc(1024)  # type: ignore[attr-defined]
        k["cost"].inc(0.00123)  # type: ignore[attr-defined]
        k["duration"].observe(4.2)  # type: ignore[attr-defined]
        k["ttft"].observe(0.41)  # type: ignore[attr-defined]
        k["max_gap"].observe(0.09)  # type: ignore[attr-defined]
        k["use_in"].observe(1200)  # type: ignore[attr-defined]
        k["use_out"].observe(240)  # type: ignore[attr-defined]

    def library() -> None:
        for _ in range(reps):
            record(lib_kids)

    def recorder() -> None:
        for _ in range(reps):
            with lock:  # one lock for all of a record's updates, as Metrics.observe
                record(our_kids)

    s = rounds({"library": library, "recorder": recorder}, repeats)
    lib_s, our_s = _samples(lib_reg), _samples(our_reg)
    same = lib_s.keys() == our_s.keys() and all(
        abs(lib_s[k] - our_s[k]) <= 1e-9 * max(1.0, abs(lib_s[k])) for k in lib_s
    )
    per = reps * 1e-6
    return _row("a record's 13 series", s, per), same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 3 rounds")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 9
    scale = 0.02 if args.quick else 1.0
    failed = False
    head = "| library, µs (anchor) | recorder, µs | library / recorder |"
    print(f"| intervals of a stream {head}")
    print("|---|---|---|---|")
    for n, reps in ((5, 20_000), (200, 1_000), (3_000, 60), (100_000, 3)):
        row, same = intervals(n, max(1, int(reps * scale)), repeats)
        print(row)
        if not same:
            print(f"FAILED: the recorder's histogram of {n} intervals differs from the library's")
            failed = True
    print()
    print(f"| a record's counters and histograms {head}")
    print("|---|---|---|---|")
    row, same = series(max(1, int(20_000 * scale)), repeats)
    print(row)
    if not same:
        print("FAILED: the recorder's series differ from the library's")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
