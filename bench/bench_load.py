"""Load and long streams through one recorder: nothing lost, nothing doubled, flat memory.

Run (each mode is one command; ``--quick`` shrinks it to a smoke run of seconds):

    .venv/bin/python bench/bench_load.py            # 500 concurrent streams, 3 rounds (~1 min)
    .venv/bin/python bench/bench_load.py --long     # a million events; an hour of keepalives
    .venv/bin/python bench/bench_load.py --websocket   # 200 WebSocket connections x 10 responses

**Load.** ``--streams`` concurrent streams through one ``recorder proxy`` (SQLite,
metrics on, pinned to CPU 0; the simulator and this client on CPU 1), mixed
endpoints (Chat Completions, Responses, Messages in turn), each paced (an event
every ``--interval`` s, a keepalive comment every 0.3 s on a third of them), their
starts spread over a second. One stream in ten is cut by the upstream (a reset), one
in ten by the upstream mid-event (FIN), one in ten by the client (it resets its
connection), one in ten ends with the provider's error event. After ``--warmups``
rounds, ``--rounds`` rounds; after each, once the recorder says every record is written:

- every request is in the database exactly once (by its ``x-request-id``) with the
  outcome its fault calls for; ``llm_streams_total`` and
  ``llm_recorder_records_written_total`` equal the rows; no stream is in flight;
- every event's delay through the proxy (arrival at the client less the simulator's
  write time, one clock) is under ``--bound`` ms (p50, p99 and max are printed);
- the proxy's resident memory after each round is printed; from the first measured
  round to the last it must not grow by more than 4 MiB + 2 % (a per-flow leak of a
  few kB shows as ``streams`` x that per round; the heap's high-water marks settle in
  the warm-up rounds).

``--proxy mitmproxy`` runs the same load through ``mitmdump`` with the passthrough
addon, for context (delays and memory of mitmproxy alone; no records to check).

**Long streams** (``--long``), each through its own recorder:

- one Chat Completions stream of ``--events`` (a million) events with no pause,
  through ``recorder proxy``; the proxy's memory is sampled every 0.25 s and must
  stay within 8 MiB of its level at a tenth of the stream; the record must have every
  event, the simulator's output characters and the reported usage;
- one stream that sends a keepalive comment every simulated second for a simulated
  hour before its first token. The proxy runs the recorder addon with a clock that
  runs ``--speedup`` times faster than the wall clock (the simulator's pauses are
  scaled down by as much), so an hour passes in seconds; the record must show the
  hour: as many keepalives as the simulator sent (3,600), a first token after the
  hour and within 1 % of the hour of the simulator's own pause (its sleeps overshoot
  a little, scaled up like everything else), the longest keepalive gap about 1 s
  (within the clock's scaled jitter), at most one stall.

**WebSocket** (``--websocket``): ``--connections`` (200) concurrent WebSocket
connections through one ``recorder proxy``, each carrying ``--responses`` (10)
responses one after the other (OpenAI's Responses API in WebSocket mode on half of
them, the Realtime API on the other half), each response ``--deltas`` (20) text
deltas an ``--interval`` (0.2 s) apart: at most some 1,300 messages a second
through the proxy (the simulator and this client, sharing one core, carry about 800
on a 2-CPU machine), which bare mitmproxy carries on half of its one core (each
message costs it about 0.5 ms: its addon chain runs for every one). After each round: every response
is one row (rows, ``llm_recorder_records_written_total`` and distinct ids equal the
responses sent), every row has ``transport`` ``websocket`` and is ``completed``,
nothing is in flight; and the proxy's memory must not grow in every measured round
by more than a MiB (a leak of some 500 bytes a response; one step is the high-water
mark of mitmproxy's own lists of a connection's messages, which bare mitmdump shows
as much). The proxy's CPU per message (the client's count of
messages sent and received) is printed; ``--proxy mitmproxy`` runs the same load
through bare mitmdump for that anchor.

Exit status: non-zero when a record is missing, doubled or wrong, a counter
disagrees, memory grows, or a bound is exceeded. Timings are printed, and only the
stated bounds are checked.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxybench import (
    ENDPOINTS,
    MODELS,
    Proxy,
    SimChild,
    Stream,
    child_sim,
    exit_status,
    fetch,
    pct,
    pin,
    set_affinity,
    wait_listening,
)

PROXY_CPU, CLIENT_CPU = 0, 1


# -- load ---------------------------------------------------------------------------


def plan(i: int, deltas: int, interval: float) -> tuple[str, str, int | None, str]:
    """Stream ``i``'s endpoint, model (with faults), client cut, and expected outcome."""
    endpoint = ENDPOINTS[i % len(ENDPOINTS)]
    faults = [f"deltas={deltas}", f"delay={interval}"]
    if i % 3 == 1:
        faults.append("keepalive=0.3")
    leave_after = None
    kind = i % 10
    cut = deltas // 2
    if kind == 0:
        faults.append(f"rst={cut}")
        outcome = "upstream_disconnect"
    elif kind == 1:
        faults += [f"fin={cut}", "midevent"]
        outcome = "upstream_disconnect"
    elif kind == 2:
        leave_after = cut
        outcome = "client_disconnect"
    elif kind == 3:
        faults.append(f"error={cut}")
        outcome = "error"
    else:
        outcome = "completed"
    return endpoint, "+".join([MODELS[endpoint], *faults]), leave_after, outcome


async def load_round(port: int, prefix: str, n: int, deltas: int, interval: float) -> list[Stream]:
    async def one(i: int) -> Stream:
        await asyncio.sleep(i / n)  # starts spread over a second
        endpoint, model, leave_after, _ = plan(i, deltas, interval)
        return await fetch(port, endpoint, model, f"{prefix}-{i}", leave_after=leave_after)

    return await asyncio.gather(*(one(i) for i in range(n)))


def wait_written(proxy: Proxy, want: int, timeout: float = 60.0) -> float:
    return proxy.wait_metric("llm_recorder_records_written_total", want, timeout)


def check_round(
    proxy: Proxy,
    prefix: str,
    name: str,
    total: int,
    streams: list[Stream],
    args: argparse.Namespace,
) -> tuple[int, int]:
    """The recorder's side of a round: rows, outcomes, counters. (rows, wrong outcomes)"""
    failures = args.failures
    written = wait_written(proxy, total)
    in_flight = proxy.metric_sum("llm_streams_in_flight")
    streams_total = proxy.metric_sum("llm_streams_total")
    if written != total or streams_total != total or in_flight != 0:
        failures.append(
            f"round {name}: {total} requests in all, written {written:.0f},"
            f" llm_streams_total {streams_total:.0f}, in flight {in_flight:.0f}"
        )
    with sqlite3.connect(proxy.workdir / "recorder.db") as conn:
        rows = dict(
            conn.execute(
                "SELECT request_id, outcome FROM streams WHERE request_id LIKE ?",
                (f"{prefix}-%",),
            ).fetchall()
        )
        counts = conn.execute("SELECT count(*), count(DISTINCT request_id) FROM streams").fetchone()
    if counts != (total, total):
        failures.append(f"round {name}: {total} requests, rows {counts}")
    wrong = 0
    for i, s in enumerate(streams):
        _, _, _, outcome = plan(i, args.deltas, args.interval)
        if rows.get(s.sim_id) != outcome:
            wrong += 1
            if wrong <= 5:
                failures.append(
                    f"round {name} {s.sim_id}: outcome {rows.get(s.sim_id)},"
                    f" planned {outcome} (client: {s.error})"
                )
    return len(rows), wrong


def run_load(args: argparse.Namespace, failures: list[str]) -> None:
    proxy_cpu = None if args.no_pin else PROXY_CPU
    client_cpu = None if args.no_pin else CLIENT_CPU
    args.failures = failures
    set_affinity(client_cpu)
    sim = SimChild.start(__file__, client_cpu)
    extra = args.recorder_arg if args.proxy == "recorder" else ()
    proxy = Proxy.start(args.proxy, f"http://127.0.0.1:{sim.port}", proxy_cpu, extra=extra)
    recorder = args.proxy == "recorder"
    total = 0
    rss: list[float] = []  # after each measured round
    print(
        f"# load through {args.proxy}: {args.streams} concurrent streams x {args.deltas} deltas,"
        f" an event every {args.interval * 1e3:.0f} ms; {args.warmups} warm-up rounds and"
        f" {args.rounds} rounds; bound on an event's delay {args.bound:.0f} ms"
    )
    print()
    print(
        "| round | streams | rows | outcomes as planned | delay p50 / p99 / max ms"
        " | proxy RSS MiB | proxy CPU s |"
    )
    print("|---|---|---|---|---|---|---|")
    try:
        for r in range(args.warmups + args.rounds):
            name = f"warm-up {r + 1}" if r < args.warmups else str(r - args.warmups + 1)
            prefix = f"load{r}"
            c0 = proxy.cpu_seconds()
            streams = asyncio.run(
                load_round(proxy.port, prefix, args.streams, args.deltas, args.interval)
            )
            total += len(streams)
            rows, wrong = (
                check_round(proxy, prefix, name, total, streams, args) if recorder else (0, 0)
            )
            cpu = proxy.cpu_seconds() - c0
            lat: list[float] = []
            for s in streams:
                times = sim.write_times(s.sim_id)
                # a stream cut by either side: the blocks the client got are the first sent
                lat.extend(a - w for a, w in zip(s.arrivals, times, strict=False))
            if r >= args.warmups:
                rss.append(proxy.rss_mib())
            worst = 1e3 * max(lat) if lat else float("nan")
            if worst > args.bound:
                failures.append(
                    f"round {name}: an event waited {worst:.1f} ms (bound {args.bound:.0f})"
                )
            print(
                f"| {name} | {len(streams)} | {rows if recorder else '-'}"
                f" | {f'{len(streams) - wrong}/{len(streams)}' if recorder else '-'}"
                f" | {1e3 * pct(lat, 0.5):.2f} / {1e3 * pct(lat, 0.99):.2f} / {worst:.2f}"
                f" | {proxy.rss_mib():.1f} | {cpu:.2f} |"
            )
    finally:
        code = proxy.stop()
        sim.stop()
    if code != 0 and recorder:
        failures.append(f"recorder proxy exited {code}")
    if len(rss) >= 2:
        # A per-flow leak of b bytes grows every round by streams x b; the heap's own
        # high-water marks settle during the warm-up rounds.
        allowed = 4.0 + 0.02 * rss[0]
        grown = rss[-1] - rss[0]
        if grown > allowed:
            failures.append(
                f"memory grew by {grown:.1f} MiB over {len(rss)} rounds (allowed {allowed:.1f})"
            )
        print()
        print(
            "Memory after each round: "
            + ", ".join(f"{v:.1f}" for v in rss)
            + f" MiB; last less first: {grown:+.1f} MiB"
            f" ({grown * 2**20 / (args.streams * max(1, len(rss) - 1)):+,.0f} bytes per stream)"
        )
    proxy.cleanup()


# -- WebSocket connections ----------------------------------------------------------


async def ws_connection(
    port: int, i: int, responses: int, deltas: int, interval: float
) -> tuple[int, int]:
    """One client connection of the WebSocket load: ``responses`` responses one after
    the other, Responses API in WebSocket mode on even ``i``, Realtime on odd; the
    responses it saw end, and the messages it sent and received."""
    import json

    import websockets

    faults = f"deltas={deltas}+delay={interval}"
    realtime = i % 2 == 1
    path = (
        f"/v1/realtime?model=gpt-realtime%2B{faults.replace('+', '%2B')}"
        if realtime
        else ("/v1/responses")
    )
    ended = messages = 0
    async with websockets.connect(
        f"ws://127.0.0.1:{port}{path}",
        additional_headers={"authorization": f"Bearer sk-bench-ws-{i % 7}"},
        max_size=None,
        open_timeout=60,
    ) as ws:
        for n in range(responses):
            if realtime:
                create = {"type": "response.create", "event_id": f"c{n}"}
                last = ("response.done",)
            else:
                create = {"type": "response.create", "model": f"gpt-5+{faults}", "input": f"r{n}"}
                last = ("response.completed", "response.failed", "response.incomplete")
            await ws.send(json.dumps(create))
            messages += 1
            async for raw in ws:
                messages += 1
                if json.loads(raw).get("type") in last:
                    ended += 1
                    break
    return ended, messages


def run_websocket(args: argparse.Namespace, failures: list[str]) -> None:
    """``--websocket``: ``--connections`` concurrent WebSocket connections, each with
    ``--responses`` responses, per round: every response one record (rows, counters),
    each with transport websocket; memory flat over rounds. With ``--proxy
    mitmproxy`` the same load through bare mitmdump (no records to check): its CPU
    per message and memory are the anchor."""
    proxy_cpu = None if args.no_pin else PROXY_CPU
    client_cpu = None if args.no_pin else CLIENT_CPU
    set_affinity(client_cpu)
    sim = SimChild.start(__file__, client_cpu)
    recording = args.proxy == "recorder"
    proxy = Proxy.start(
        args.proxy,
        f"http://127.0.0.1:{sim.port}",
        proxy_cpu,
        extra=args.recorder_arg if recording else (),
    )
    total = 0
    rss: list[float] = []
    n, per = args.connections, args.responses
    print(
        f"# WebSocket load through {'recorder' if recording else 'bare mitmdump'}: {n}"
        f" concurrent connections x {per} responses (Responses in WebSocket mode and"
        f" Realtime in turn), {args.deltas} deltas each {args.interval} s apart"
        f" (each connection a message every {args.interval} s or so),"
        f" {args.warmups} warm-up rounds and {args.rounds} rounds"
    )
    print()
    print(
        "| round | connections | responses ended | rows | websocket rows"
        " | messages | proxy RSS MiB | proxy CPU s | CPU µs per message | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")

    async def round_() -> list[tuple[int, int] | BaseException]:
        async def one(i: int) -> tuple[int, int]:
            await asyncio.sleep(i / n)  # connections opened over a second
            return await ws_connection(proxy.port, i, per, args.deltas, args.interval)

        return await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)

    try:
        for r in range(args.warmups + args.rounds):
            name = f"warm-up {r + 1}" if r < args.warmups else str(r - args.warmups + 1)
            c0, t0 = proxy.cpu_seconds(), time.monotonic()
            results = asyncio.run(round_())
            wall = time.monotonic() - t0
            done = [x for x in results if isinstance(x, tuple)]
            ended = sum(e for e, _ in done)
            messages = max(1, sum(m for _, m in done))
            errors = [x for x in results if isinstance(x, BaseException)]
            if errors:
                failures.append(f"round {name}: {len(errors)} connections failed: {errors[0]!r}")
            if ended != n * per:
                failures.append(f"round {name}: {ended} of {n * per} responses ended at the client")
            total += n * per
            rows = ws_rows = "-"
            if recording:
                rows, ws_rows = check_websocket_rows(proxy, total, name, failures)
            cpu = proxy.cpu_seconds() - c0
            if r >= args.warmups:
                rss.append(proxy.rss_mib())
            print(
                f"| {name} | {n} | {ended} | {rows} | {ws_rows} | {messages}"
                f" | {proxy.rss_mib():.1f} | {cpu:.2f} | {cpu / messages * 1e6:.0f} | {wall:.1f} |"
            )
    finally:
        code = proxy.stop()
        sim.stop()
    if code != 0:
        failures.append(f"{args.proxy} exited {code}")
    if len(rss) >= 2:
        # mitmproxy holds every message of a connection until it closes (some 70,000
        # at the end of a round of the defaults): its heap's high-water mark moves by
        # tens of MiB from round to round, bare mitmdump's as much, so one step is no
        # leak. A leak of b bytes a response grows every round by responses x b: it
        # is one when every round grew by more than a MiB (about 500 bytes a response).
        steps = [b - a for a, b in itertools.pairwise(rss)]
        if all(step > 1.0 for step in steps):
            failures.append(
                "memory grew every round: " + ", ".join(f"{step:+.1f}" for step in steps) + " MiB"
            )
        grown = rss[-1] - rss[0]
        print()
        print(
            "Memory after each round: "
            + ", ".join(f"{v:.1f}" for v in rss)
            + f" MiB; last less first: {grown:+.1f} MiB"
            f" ({grown * 2**20 / (n * per * max(1, len(rss) - 1)):+,.0f} bytes per response)"
        )
    proxy.cleanup()


def check_websocket_rows(
    proxy: Proxy, total: int, name: str, failures: list[str]
) -> tuple[int, int]:
    """After a round: ``total`` responses so far, each one completed websocket row,
    counted by the recorder, none in flight; the rows and websocket rows."""
    written = proxy.wait_metric("llm_recorder_records_written_total", total, 120.0)
    with sqlite3.connect(proxy.workdir / "recorder.db") as conn:
        rows, ws_rows, ids = conn.execute(
            "SELECT count(*), sum(transport = 'websocket'), count(DISTINCT id) FROM streams"
        ).fetchone()
        outcomes = dict(conn.execute("SELECT outcome, count(*) FROM streams GROUP BY outcome"))
    if not written == rows == ws_rows == ids == total:
        failures.append(
            f"round {name}: {total} responses sent, written {written:.0f}, rows {rows},"
            f" websocket rows {ws_rows}, distinct ids {ids}"
        )
    if outcomes.get("completed") != total:
        failures.append(f"round {name}: outcomes {outcomes}")
    if proxy.metric_sum("llm_streams_in_flight") != 0:
        failures.append(f"round {name}: streams still in flight")
    return int(rows), int(ws_rows or 0)


# -- long streams --------------------------------------------------------------------


def child_scaled_proxy(upstream: str, speedup: float, workdir: str) -> None:
    """The recorder addon with a clock ``speedup`` times faster than the wall clock."""
    from recorder.cli.proxy import open_store
    from recorder.core.price_files import shipped_prices
    from recorder.proxy.addon import Recorder
    from recorder.proxy.config import RecorderConfig
    from recorder.proxy.runner import ProxySettings, run_in_thread

    base = time.monotonic()

    def clock() -> float:
        return base + (time.monotonic() - base) * speedup

    opened = open_store(f"sqlite:///{workdir}/recorder.db", Path(workdir) / "spool", "bench")
    assert opened is not None
    secret, store = opened
    recorder = Recorder(
        store, RecorderConfig(key_secret=secret, prices=shipped_prices()), clock=clock
    )
    settings = ProxySettings(
        modes=[f"reverse:{upstream}"], listen_host="127.0.0.1", listen_port=0, confdir=workdir
    )
    with run_in_thread(recorder, settings) as listeners:
        print(f"PORT {listeners[0].port}", flush=True)
        sys.stdin.read()


def record_of(db: Path, request_id: str) -> dict[str, Any] | None:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM streams WHERE request_id = ?", (request_id,)).fetchone()
    return None if row is None else dict(row)


def sample_rss(proxy_pid: int, out: list[tuple[float, float]], stop: threading.Event) -> None:
    status = Path(f"/proc/{proxy_pid}/status")
    while not stop.is_set():
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out.append((time.monotonic(), int(line.split()[1]) / 1024))
        except OSError:
            return
        stop.wait(0.25)


def run_long(args: argparse.Namespace, failures: list[str]) -> None:
    import subprocess

    proxy_cpu = None if args.no_pin else PROXY_CPU
    client_cpu = None if args.no_pin else CLIENT_CPU
    set_affinity(client_cpu)
    sim = SimChild.start(__file__, client_cpu)
    upstream = f"http://127.0.0.1:{sim.port}"
    try:
        # -- a million events
        proxy = Proxy.start("recorder", upstream, proxy_cpu)
        samples: list[tuple[float, float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=sample_rss, args=(proxy.proc.pid, samples, stop))
        sampler.start()
        sid = "long-events"
        t0 = time.monotonic()
        s = asyncio.run(
            fetch(proxy.port, "/v1/chat/completions", f"gpt-4o+deltas={args.events}", sid)
        )
        wall = time.monotonic() - t0
        stop.set()
        sampler.join()
        wait_written(proxy, 1)
        sent = sim.sent(sid) or {}
        code = proxy.stop()
        rec = record_of(proxy.workdir / "recorder.db", sid) or {}
        proxy.cleanup()
        want_events = args.events + 4  # role chunk, deltas, finish chunk, usage chunk, [DONE]
        during = [v for t, v in samples if t >= t0 + 0.1 * wall]
        first = during[0] if during else float("nan")
        peak = max(during) if during else float("nan")
        print(
            f"# a million events: {len(s.arrivals):,} blocks in {wall:.1f} s"
            f" ({len(s.arrivals) / wall:,.0f}/s); proxy RSS at a tenth {first:.1f} MiB,"
            f" peak after {peak:.1f} MiB,"
            f" at the end {samples[-1][1] if samples else float('nan'):.1f} MiB"
        )
        print(
            f"#   record: outcome {rec.get('outcome')}, events {rec.get('events')},"
            f" output_chars {rec.get('output_chars')} (sent {sent.get('output_chars')}),"
            f" output_tokens {rec.get('output_tokens')} ({rec.get('output_source')}),"
            f" duration {rec.get('duration_ms')} ms"
        )
        if code != 0 or not s.complete or len(s.arrivals) != want_events:
            failures.append(f"million: exit {code}, {len(s.arrivals)} blocks (want {want_events})")
        if (
            rec.get("outcome") != "completed"
            or rec.get("events") != want_events
            or rec.get("output_chars") != sent.get("output_chars")
            or rec.get("output_source") != "reported"
        ):
            failures.append(
                "million: record "
                + str(
                    {k: rec.get(k) for k in ("outcome", "events", "output_chars", "output_source")}
                )
            )
        if not peak - first <= 8.0:
            failures.append(f"million: proxy memory grew {peak - first:.1f} MiB during the stream")

        # -- an hour of keepalives, on a fast clock
        speedup = args.speedup
        workdir = tempfile.mkdtemp(prefix="bench-scaled-")
        proc = subprocess.Popen(
            [
                *pin(proxy_cpu),
                sys.executable,
                __file__,
                "--child-scaled-proxy",
                upstream,
                str(speedup),
                workdir,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "HOME": workdir},
        )
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        port = int(line.split()[1])
        wait_listening(port, proc)
        hour, tick = args.hour, 1.0
        model = f"claude-sonnet-4-5+deltas=5+ttft={hour / speedup}+keepalive={tick / speedup}"
        sid = "long-keepalives"
        samples = []
        stop = threading.Event()
        sampler = threading.Thread(target=sample_rss, args=(proc.pid, samples, stop))
        sampler.start()
        t0 = time.monotonic()
        s = asyncio.run(fetch(port, "/v1/messages", model, sid))
        wall = time.monotonic() - t0
        stop.set()
        sampler.join()
        time.sleep(0.5)  # the writer's flush interval
        proc.stdin.close()
        proc.wait(60)
        sent = sim.sent(sid) or {}
        rec = record_of(Path(workdir) / "recorder.db", sid) or {}
        during = [v for t, v in samples if t >= t0 + 0.1 * wall]
        first = during[0] if during else float("nan")
        peak = max(during) if during else float("nan")
        ttft_s = (rec.get("ttft_ms") or 0) / 1e3
        # the simulator's own pause before the first token, on the same scale: its
        # sleeps overshoot a little each time, and that is what the proxy saw
        sent_s = (sent.get("first_output_ms") or 0) / 1e3 * speedup
        gap_s = (rec.get("max_keepalive_gap_ms") or 0) / 1e3
        print(
            f"# an hour of keepalives ({hour:.0f} s simulated, clock x{speedup:.0f},"
            f" {wall:.1f} s real): {len(s.arrivals):,} blocks;"
            f" proxy RSS at a tenth {first:.1f} MiB, peak after {peak:.1f} MiB"
        )
        print(
            f"#   record: outcome {rec.get('outcome')}, keepalives {rec.get('keepalives')}"
            f" (sent {sent.get('keepalives')}), ttft {ttft_s:,.1f} s (the simulator's pause:"
            f" {sent_s:,.1f} s), max keepalive gap {gap_s:.2f} s,"
            f" stalls {rec.get('stalls')},"
            f" longest output gap {(rec.get('max_output_gap_ms') or 0) / 1e3:,.1f} s"
        )
        # the scaled clock multiplies scheduling jitter by `speedup` (1 ms: 0.2 s), so
        # the simulator's own pause overshoots the hour on a busy machine: the record
        # is checked against that pause, not against the hour
        if (
            rec.get("outcome") != "completed"
            or rec.get("keepalives") != sent.get("keepalives")
            or not hour <= ttft_s
            or abs(ttft_s - sent_s) > 0.01 * hour
            or not 0.5 < gap_s < 1.0 + 0.01 * hour
            or (rec.get("stalls") or 0) > 1
        ):
            failures.append(f"hour: record {rec}")
        if not peak - first <= 8.0:
            failures.append(f"hour: proxy memory grew {peak - first:.1f} MiB during the stream")
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    finally:
        sim.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-scaled-proxy", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--long", action="store_true", help="the long-stream runs instead")
    parser.add_argument(
        "--websocket", action="store_true", help="WebSocket connections of many responses instead"
    )
    parser.add_argument("--connections", type=int, default=200, help="--websocket: connections")
    parser.add_argument("--responses", type=int, default=10, help="--websocket: per connection")
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=2, help="rounds before measuring")
    parser.add_argument(
        "--proxy",
        choices=("recorder", "mitmproxy"),
        default="recorder",
        help="mitmproxy: the same load through mitmdump with a passthrough addon (context)",
    )
    parser.add_argument(
        "--deltas", type=int, help="text deltas per stream (60; --websocket: 20 per response)"
    )
    parser.add_argument(
        "--interval", type=float, help="seconds between events (0.05; --websocket: 0.2)"
    )
    parser.add_argument("--bound", type=float, default=250.0, help="ms an event may wait")
    parser.add_argument("--events", type=int, default=1_000_000, help="--long: events")
    parser.add_argument("--hour", type=float, default=3600.0, help="--long: simulated seconds")
    parser.add_argument("--speedup", type=float, default=200.0, help="--long: clock speed-up")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument(
        "--recorder-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument added to `recorder proxy` (repeatable), e.g. --recorder-arg=--no-live",
    )
    args = parser.parse_args()
    if args.child_sim:
        child_sim()
        return 0
    if args.child_scaled_proxy:
        upstream, speedup, workdir = args.child_scaled_proxy
        child_scaled_proxy(upstream, float(speedup), workdir)
        return 0
    # a WebSocket message costs bare mitmproxy some 0.5 ms of CPU (its addon chain is
    # called for each): 200 connections at 0.05 s would be more than its one core
    # can carry; the default pace keeps it under half a core (docs/performance.md)
    if args.deltas is None:
        args.deltas = 20 if args.websocket else 60
    if args.interval is None:
        args.interval = 0.2 if args.websocket else 0.05
    if args.quick:
        args.streams, args.rounds, args.deltas, args.interval = 30, 2, 12, 0.01
        args.warmups = 1
        args.events, args.hour, args.speedup = 20_000, 600.0, 200.0
        args.connections, args.responses = 20, 3

    import mitmproxy.version

    print(
        f"# bench_load: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, mitmproxy {mitmproxy.version.VERSION}, "
        f"{platform.system()} {platform.release()}"
    )
    t0 = time.monotonic()
    failures: list[str] = []
    if args.long:
        run_long(args, failures)
    elif args.websocket:
        run_websocket(args, failures)
    else:
        run_load(args, failures)
    print(f"# {time.monotonic() - t0:.0f} s in all")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
