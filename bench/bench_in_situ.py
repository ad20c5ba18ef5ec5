"""Where the recorder's time goes inside a running proxy, per flow and per piece.

Run: ``.venv/bin/python bench/bench_in_situ.py`` (about a minute; ``--quick`` for a
smoke run; ``--hooks-only`` to time the hooks and batches without the steps inside
them; ``--profile FILE`` also writes a cProfile of one round's proxy).

A step costs 2-5x more inside mitmproxy's process than in a microbenchmark: between
two of the recorder's calls mitmproxy runs enough code to evict ours from the CPU's
caches. This bench measures the recorder's steps where they run. It starts
``recorder proxy`` as a user runs it today (SQLite with the kill -9 journal, metrics
served, the live view with its once-a-second stall walk, the shipped prices, a
tokenizer if one is installed; OTLP export off), pinned to CPU 0, through this
script, which wraps the addon's hooks, the tap, the batch metering, the making,
closing and completing of records (in their batches, under ``recorder proxy``) in
timers of the calling thread's CPU time (``thread_time_ns``: time spent waiting for
the GIL or for a CPU the machine's other work holds is not counted, so the figures
hold on a loaded machine, where wall-clock timers charge a step with every GIL
switch that falls inside it), and, unless ``--hooks-only``, the steps inside them
too: the header pick (both header hooks); in making a record the key, the record
id, the record, the key fingerprint, the key mask, the meter, the in-flight gauges,
the body's facts and its token count; the sweep of waiting pieces; in the completion
the usage and cost, the unpriced check, the metrics, the live view's line and the
sink's submit. Then it sends the paced load of ``bench_overhead.py`` (100 streams,
an event every 20 ms; ``--short``: its short-stream load, 1,000 streams of 5 deltas)
from the simulator; ``--rounds`` rounds, a fresh proxy each. ``--websocket`` sends
``bench_overhead.py --websocket``'s paced load instead (20 connections, Responses in
WebSocket mode and Realtime in turn, 10 responses a connection, the deltas shared
among them) and times the WebSocket steps: holding a message (the hook), metering
the held ones (per message), a response's beginning (its record made) and its end
(closed, completed); ``--bedrock`` sends ``bench_overhead.py --bedrock``'s (Amazon
Bedrock's two streamed APIs, AWS's event stream).

Reported: µs per call of each step (medians of rounds) and the proxy's CPU seconds
per 10,000 events. A sub-step's figure includes its own timer (a system call: about
0.4 µs warm, but several µs with the caches cold), and so does the step around it:
the hooks' own figures are ``--hooks-only``'s.
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

import bench_overhead
from bench_overhead import SHORT, STREAMS_WS, WS_RESPONSES, paced
from proxybench import BEDROCK, WS_PATHS, Proxy, SimChild, child_sim, exit_status, set_affinity

PROXY_CPU, CLIENT_CPU = 0, 1
STEPS = (
    "requestheaders",
    "  headers picked",
    "making a record (per flow)",
    "  authenticating key",
    "  record id (+ start stamp)",
    "  record constructed",
    "  key fingerprint",
    "  request_keys + KeyMask.of",
    "  StreamMeter constructed",
    "  on_start (in-flight gauge)",
    "  request facts and counts",
    "  prompt counted (exact tokens)",
    "request",
    "responseheaders",
    "response",
    "tap (per piece)",
    "metering (per piece)",
    "websocket_message (per message)",
    "metering held messages (per message)",
    "a WebSocket response begins",
    "a WebSocket response ends",
    "sweep (per callback)",
    "closing a record",
    "completing a record",
    "  usage and cost",
    "  unpriced check",
    "  on_record (metrics)",
    "  live view line",
    "  sink submit",
)


def child_timed_proxy() -> int:
    """``recorder proxy`` with timers around the addon's steps; writes them at exit."""
    import functools

    from recorder.proxy import addon

    batch = int(os.environ.get("BENCH_BATCH_PIECES", "0"))
    if batch:
        addon.BATCH_PIECES = batch
    totals: dict[str, list[int]] = {}
    # CPU time of the calling thread, not wall time: see the module's docstring
    clock = time.thread_time_ns

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
    # The steps inside: the names of the code measured (the exchange's life as one
    # state machine, recorder.proxy.lifecycle), or of the code before it, so that
    # both sides of a before-and-after run are timed alike.
    try:
        from recorder.proxy import finishing, making, tap, walk
    except ImportError:  # before the lifecycle: the steps were the Recorder's own
        _time_old_steps(rec, timed)
    else:
        make_tap = tap.Tap.callable
        tap.Tap.callable = lambda self, clock: timed("tap (per piece)", make_tap(self, clock))  # type: ignore[method-assign]
        tap.Tap.meter_waiting = timed(  # type: ignore[method-assign]
            "metering (per piece)", tap.Tap.meter_waiting, lambda self: len(self.pieces)
        )
        finishing.Finishing._complete = timed(  # type: ignore[method-assign]
            "completing a record", finishing.Finishing._complete, lambda self, states: len(states)
        )
        finishing.Finishing._close = timed("closing a record", finishing.Finishing._close)  # type: ignore[method-assign]
        walk.Walk._go_on = timed("sweep (per callback)", walk.Walk._go_on)  # type: ignore[method-assign]
        making.RecordMaker.make = timed("making a record (per flow)", making.RecordMaker.make)  # type: ignore[method-assign]
        try:
            from recorder.proxy import websocket
        except ImportError:  # before WebSockets were metered
            pass
        else:
            ws, conn = websocket.WebSockets, websocket.Connection
            ws.websocket_message = timed("websocket_message (per message)", ws.websocket_message)  # type: ignore[method-assign]
            conn.meter_waiting = timed(  # type: ignore[method-assign]
                "metering held messages (per message)",
                conn.meter_waiting,
                lambda self: self.waiting,
            )
            ws.begin = timed("a WebSocket response begins", ws.begin)  # type: ignore[method-assign]
            ws.end = timed("a WebSocket response ends", ws.end)  # type: ignore[method-assign]
    if os.environ.get("BENCH_HOOKS_ONLY"):
        return _run_timed(totals)
    if hasattr(addon, "count_request"):
        # the prompt's facts and counts, read in the hook for a body under the
        # inline limit (larger ones: `_read_request`, on a worker thread)
        addon.read_request = timed("  request facts and counts", addon.read_request)  # type: ignore[attr-defined]
        addon.count_request = timed("  prompt counted (exact tokens)", addon.count_request)  # type: ignore[attr-defined]

    # the steps inside the hooks: the names the modules of the hooks and of the
    # finishing pipeline call them by
    from recorder.proxy import finishing, state

    modules: list[Any] = [addon, finishing, state]
    try:
        from recorder.proxy import making

        modules.append(making)
    except ImportError:
        pass
    for module in modules:
        for attr, name in (
            ("_pick_headers", "  headers picked"),
            ("pick_headers", "  headers picked"),
            ("authenticating_key", "  authenticating key"),
            ("new_record_id", "  record id (+ start stamp)"),
            ("new_record_start", "  record id (+ start stamp)"),
            ("StreamRecord", "  record constructed"),
            ("fingerprint", "  key fingerprint"),
            ("StreamMeter", "  StreamMeter constructed"),
            ("_read_request", "  request facts and counts"),
            ("read_request_facts", "  request facts and counts"),
            ("complete_usage", "  usage and cost"),
        ):
            if hasattr(module, attr):
                setattr(module, attr, timed(name, getattr(module, attr)))
    for module in modules:
        if hasattr(module, "request_keys"):
            # request_keys and KeyMask.of run together, as one expression
            keys = module.request_keys
            module.request_keys = timed("  request_keys + KeyMask.of", keys)
    unpriced = finishing.UNPRICED
    unpriced.check = timed("  unpriced check", unpriced.check)  # type: ignore[method-assign]

    from recorder.metrics.exporter import Metrics
    from recorder.proxy.live import Live
    from recorder.store.writer import SqlSink

    Metrics.stream_started = timed("  on_start (in-flight gauge)", Metrics.stream_started)  # type: ignore[method-assign]
    if hasattr(Metrics, "_count"):  # counted in a batch, before the scrape (fold)
        Metrics._count = timed("  on_record (metrics)", Metrics._count)  # type: ignore[method-assign]
    else:
        Metrics.observe = timed("  on_record (metrics)", Metrics.observe)  # type: ignore[method-assign]
    Live.finished_record = timed("  live view line", Live.finished_record)  # type: ignore[method-assign]
    SqlSink.submit = timed("  sink submit", SqlSink.submit)  # type: ignore[method-assign]
    return _run_timed(totals)


def _time_old_steps(rec: Any, timed: Any) -> None:
    """The steps of the Recorder before its exchanges had one state machine."""
    make_tap = rec._tap
    rec._tap = lambda self, state: timed("tap (per piece)", make_tap(self, state))
    rec._meter_pieces = staticmethod(
        timed("metering (per piece)", rec._meter_pieces, lambda state: len(state.pieces))
    )
    if hasattr(rec, "_complete_many"):  # records completed a batch at a time, stage by stage
        rec._complete_many = timed(
            "completing a record", rec._complete_many, lambda self, entries: len(entries)
        )
    else:
        rec._complete = timed("completing a record", rec._complete)
    if hasattr(rec, "_sweep"):
        rec._sweep = timed("sweep (per callback)", rec._sweep)
    if hasattr(rec, "_begin"):
        rec._begin = timed("making a record (per flow)", rec._begin)
    if hasattr(rec, "_close"):
        rec._close = timed("closing a record", rec._close)


def _run_timed(totals: dict[str, list[int]]) -> int:
    """Run `recorder proxy` in this process; write the timings at exit."""
    import atexit

    out = os.environ["BENCH_TIMINGS"]
    profile_to = os.environ.get("BENCH_PROFILE")
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()

    def dump() -> None:
        Path(out).write_text(json.dumps(totals))
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile_to)

    atexit.register(dump)
    from recorder.cli.main import main

    return int(main(sys.argv[2:]) or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--short",
        action="store_true",
        help=f"bench_overhead's short-stream load: {SHORT[0]} streams x {SHORT[1]} deltas,"
        f" starts spread over {SHORT[2]:.0f} s (where the per-flow work weighs most)",
    )
    traffic = parser.add_mutually_exclusive_group()
    traffic.add_argument(
        "--websocket",
        action="store_true",
        help="bench_overhead --websocket's paced load (OpenAI over WebSocket) instead",
    )
    traffic.add_argument(
        "--bedrock",
        action="store_true",
        help="bench_overhead --bedrock's paced load (Amazon Bedrock's event stream) instead",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the first round's proxy")
    parser.add_argument(
        "--hooks-only",
        action="store_true",
        help="time the hooks, the tap and the completion, not the steps inside them"
        " (a timer is a system call, dear on cold caches: the steps' timers add to the hooks')",
    )
    args, _ = parser.parse_known_args()
    if len(sys.argv) > 1 and sys.argv[1] == "--child-timed-proxy":
        return child_timed_proxy()
    if args.child_sim:
        child_sim()
        return 0
    if args.hooks_only:
        os.environ["BENCH_HOOKS_ONLY"] = "1"
    streams, deltas, spread = (12, 20, None) if args.quick else (100, 200, None)
    what = "paced"
    if args.websocket:
        bench_overhead.TRAFFIC, bench_overhead.OVER_WEBSOCKET = WS_PATHS, True
        bench_overhead.WS_RESPONSES = 3 if args.quick else WS_RESPONSES
        streams = 6 if args.quick else STREAMS_WS
        what = f"WebSocket, {bench_overhead.WS_RESPONSES} responses a connection"
    elif args.bedrock:
        bench_overhead.TRAFFIC = BEDROCK
        what = "Amazon Bedrock"
    if args.short:
        streams, deltas, spread = (50, SHORT[1], 1.0) if args.quick else SHORT
    rounds = 1 if args.quick else args.rounds
    set_affinity(CLIENT_CPU)
    sim = SimChild.start(__file__, CLIENT_CPU)
    failures: list[str] = []
    steps: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}
    cpu: list[float] = []
    try:
        for r in range(rounds):
            timings = Path(f"/tmp/bench-in-situ-{os.getpid()}.json")
            os.environ["BENCH_TIMINGS"] = str(timings)
            os.environ["BENCH_PROFILE"] = (
                str(Path(args.profile).resolve()) if (args.profile and r == 0) else ""
            )
            proxy = Proxy.start(
                "recorder",
                f"http://127.0.0.1:{sim.port}",
                PROXY_CPU,
                command=[sys.executable, __file__, "--child-timed-proxy"],
            )
            try:
                asyncio.run(paced(proxy.port, f"warm{r}", 10, 20, 0.02))
                c0 = proxy.cpu_seconds()
                got = asyncio.run(paced(proxy.port, f"r{r}", streams, deltas, 0.02, spread))
                events = sum(len(s.arrivals) for s in got)
                if events:
                    cpu.append(1e4 * (proxy.cpu_seconds() - c0) / events)
                failures += [f"{s.sim_id}: {s.error}" for s in got if s.error]
            finally:
                code = proxy.stop()
                proxy.cleanup()
            if code != 0 or not timings.exists():
                failures.append(f"round {r}: the proxy exited {code} without its timings")
                continue
            for step, (n, ns) in json.loads(timings.read_text()).items():
                steps.setdefault(step, []).append(ns / 1e3 / max(n, 1))
                calls.setdefault(step, []).append(n)
            timings.unlink()
    finally:
        sim.stop()
    # a renamed step would leave its row empty: say so rather than print dashes
    wanted = ["a WebSocket response begins"] if args.websocket else ["tap (per piece)"]
    failures += [f"{step}: not timed (renamed?)" for step in wanted if not steps.get(step)]
    print(
        f"# bench_in_situ: {what}, {streams} streams x {deltas} deltas"
        + (f", starts spread over {spread:.0f} s" if spread else "")
        + f", {rounds} rounds;"
        f" load average {os.getloadavg()[0]:.1f} at the end"
    )
    print()
    print("| step | µs per call, median [min-max] of rounds | calls per round |")
    print("|---|---|---|")
    for step in STEPS:
        v = steps.get(step)
        if not v:
            print(f"| {step} | - | - |")
            continue
        print(
            f"| {step} | {statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"
            f" | {statistics.median(calls[step]):.0f} |"
        )
    if cpu:
        print(
            f"| proxy CPU s per 10k events | {statistics.median(cpu):.3f}"
            f" [{min(cpu):.3f}-{max(cpu):.3f}] | |"
        )
    if args.profile:
        import pstats

        print()
        print(f"cProfile of round 1's proxy (whole process): {args.profile}")
        stats = pstats.Stats(args.profile)
        stats.sort_stats("cumulative").print_stats(r"recorder/", 45)
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
