"""Interleaved rounds of timed contenders, shared by the small benches."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def rounds(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Each contender once per round, in a rotating order, after one warm-up call
    each: wall seconds per call, by name."""
    for fn in contenders.values():
        fn()  # warm-up
    names = list(contenders)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            t0 = time.perf_counter()
            contenders[name]()
            samples[name].append(time.perf_counter() - t0)
    return samples


def fmt(s: list[float], unit: float) -> str:
    """``median (min-max)`` of ``s`` in ``unit``."""
    return f"{statistics.median(s) / unit:9.2f} ({min(s) / unit:.2f}-{max(s) / unit:.2f})"
