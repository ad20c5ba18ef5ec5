"""Where the recorder's time goes inside a running proxy, and what batching saves.

Run: ``.venv/bin/python bench/bench_in_situ.py`` (about three minutes; ``--quick`` for a
smoke run).

A step costs 2-5x more inside mitmproxy's process than in a microbenchmark: between
two of the recorder's calls mitmproxy runs enough code to evict ours from the CPU's
caches. This bench measures the recorder's steps where they run. It starts
``recorder proxy`` (SQLite, metrics on, pinned to CPU 0) through this script, which
wraps the addon's hooks, the tap, the batch metering and the record completion in
``perf_counter_ns`` timers before handing over to the CLI, and sends the paced load
of ``bench_overhead.py`` (100 streams, an event every 20 ms) from the simulator.

Three variants in one run, in a rotating order over ``--rounds`` rounds, each in a
fresh proxy: ``BATCH_PIECES = 1`` with records completed at once (the recorder as it
was: every piece metered as it arrives, the record finished inside the ``response``
hook), the shipped ``BATCH_PIECES`` with records completed at once, and the shipped
recorder (records completed ``FINISH_DELAY_S`` later, in batches). Reported per
variant: µs per call of each step (medians of rounds) and the proxy's CPU seconds per
10,000 events; and each variant's CPU against the first, per round.
The timers themselves add about 0.3 µs per call (the CPU figures include them, in
both variants alike).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_overhead import paced
from proxybench import Proxy, SimChild, child_sim, exit_status, set_affinity

PROXY_CPU, CLIENT_CPU = 0, 1
STEPS = (
    "requestheaders",
    "request",
    "responseheaders",
    "response",
    "tap (per piece)",
    "metering (per piece)",
    "completing a record",
)


def child_timed_proxy() -> int:
    """``recorder proxy`` with timers around the addon's steps; writes them at exit."""
    import atexit
    import functools

    from recorder.proxy import addon

    out = os.environ["BENCH_TIMINGS"]
    batch = int(os.environ.get("BENCH_BATCH_PIECES", "0"))
    if batch:
        addon.BATCH_PIECES = batch
    if os.environ.get("BENCH_FINISH_AT_ONCE"):
        import recorder.cli.proxy

        recorder.cli.proxy.FINISH_DELAY_S = 0.0
    totals: dict[str, list[int]] = {}
    clock = time.perf_counter_ns

    def timed(name: str, fn: Any, count: Any = None) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            n = 1 if count is None else count(*args)
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = totals.setdefault(name, [0, 0])
                entry[0] += n
                entry[1] += clock() - t

        return wrapper

    rec = addon.Recorder
    for hook in ("requestheaders", "request", "responseheaders", "response"):
        setattr(rec, hook, timed(hook, getattr(rec, hook)))
    make_tap = rec._tap
    rec._tap = lambda self, state: timed("tap (per piece)", make_tap(self, state))  # type: ignore[method-assign]
    rec._meter_pieces = staticmethod(  # type: ignore[method-assign]
        timed("metering (per piece)", rec._meter_pieces, lambda state: len(state.pieces))
    )
    rec._complete = timed("completing a record", rec._complete)  # type: ignore[method-assign]

    def dump() -> None:
        Path(out).write_text(json.dumps(totals))

    atexit.register(dump)
    from recorder.cli.main import main

    return int(main(sys.argv[2:]) or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args, _ = parser.parse_known_args()
    if len(sys.argv) > 1 and sys.argv[1] == "--child-timed-proxy":
        return child_timed_proxy()
    if args.child_sim:
        child_sim()
        return 0
    streams, deltas = (12, 20) if args.quick else (100, 200)
    rounds = 1 if args.quick else args.rounds
    from recorder.cli.proxy import FINISH_DELAY_S
    from recorder.proxy.addon import BATCH_PIECES

    # name: (BATCH_PIECES, records completed at once instead of FINISH_DELAY_S later)
    variants = {
        "pieces one at a time, records at once": (1, True),
        f"batches of {BATCH_PIECES}, records at once": (BATCH_PIECES, True),
        f"batches of {BATCH_PIECES}, records after {FINISH_DELAY_S} s (shipped)": (
            BATCH_PIECES,
            False,
        ),
    }
    set_affinity(CLIENT_CPU)
    sim = SimChild.start(__file__, CLIENT_CPU)
    failures: list[str] = []
    steps: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for r in range(rounds):
            order = list(variants.items())
            for name, (batch, at_once) in order[r % 3 :] + order[: r % 3]:
                timings = Path(f"/tmp/bench-in-situ-{os.getpid()}.json")
                os.environ["BENCH_TIMINGS"] = str(timings)
                os.environ["BENCH_BATCH_PIECES"] = str(batch)
                os.environ["BENCH_FINISH_AT_ONCE"] = "1" if at_once else ""
                proxy = Proxy.start(
                    "recorder",
                    f"http://127.0.0.1:{sim.port}",
                    PROXY_CPU,
                    command=[sys.executable, __file__, "--child-timed-proxy"],
                )
                try:
                    asyncio.run(paced(proxy.port, f"warm{r}{batch}", 10, 20, 0.02))
                    c0 = proxy.cpu_seconds()
                    got = asyncio.run(paced(proxy.port, f"r{r}{batch}", streams, deltas, 0.02))
                    events = sum(len(s.arrivals) for s in got)
                    cpu[name].append(1e4 * (proxy.cpu_seconds() - c0) / events)
                    failures += [f"{name}: {s.sim_id}: {s.error}" for s in got if s.error]
                finally:
                    code = proxy.stop()
                    proxy.cleanup()
                if code != 0 or not timings.exists():
                    failures.append(f"{name}: the proxy exited {code} without its timings")
                    continue
                for step, (n, ns) in json.loads(timings.read_text()).items():
                    steps[name].setdefault(step, []).append(ns / 1e3 / max(n, 1))
                timings.unlink()
    finally:
        sim.stop()
    print(f"# bench_in_situ: paced, {streams} streams x {deltas} deltas, {rounds} rounds")
    print()
    names = list(variants)
    print("| step, µs per call (median of rounds) | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for step in STEPS:
        cells = [
            f"{statistics.median(steps[n][step]):.1f}" if steps[n].get(step) else "-" for n in names
        ]
        print(f"| {step} | " + " | ".join(cells) + " |")
    cells = [f"{statistics.median(cpu[n]):.3f}" if cpu[n] else "-" for n in names]
    print("| proxy CPU s per 10k events | " + " | ".join(cells) + " |")
    print()
    for other in names[1:]:
        if cpu[names[0]] and cpu[other]:
            ratios = [b / a for a, b in zip(cpu[names[0]], cpu[other], strict=True)]
            print(
                f"- CPU, {other} / {names[0]}: {statistics.median(ratios):.2f}"
                f" [{min(ratios):.2f}-{max(ratios):.2f}] (per round, same load)"
            )
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
