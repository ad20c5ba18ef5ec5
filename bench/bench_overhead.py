"""What the recorder costs on top of mitmproxy itself, per event, in one run.

Run: ``.venv/bin/python bench/bench_overhead.py`` (about 2 minutes; 4 with
``--rounds 9``, as docs/performance.md; ``--quick`` for a smoke run of a few seconds).

Two proxies carry the same traffic from the simulator to this process's client:

- (a) ``mitmdump -s bench/passthrough_addon.py``: mitmproxy with one addon whose
  stream callable returns its input (the anchor: what carrying a stream costs);
  with ``--anchor master``, the same on mitmproxy's master as ``recorder proxy``
  builds it, without mitmdump's Dumper addon (``bench/anchor_proxy.py``), which
  ``recorder proxy`` does not run and the default anchor runs on every flow;
- (b) ``recorder proxy``: the full recorder, as a user runs it (SQLite store, metrics
  served), fed the same requests.

Both proxies are pinned to CPU 0, the simulator and the client to CPU 1 (``--no-pin``
to let the scheduler choose), so a proxy's CPU time is its own and its latency is not
the client's. Two kinds of traffic:

- **paced** (the headline): ``--streams`` streams, mixed endpoints (Chat
  Completions, Responses, Messages in turn; ``--gemini``: Google's
  ``streamGenerateContent?alt=sse`` only), each sending an event every
  ``--interval`` seconds as a model does; as in real traffic they neither start nor
  end together (lengths from half to 1.5 times ``--deltas``, starts spread over
  half a mean stream's duration: ``paced_plan``, or over ``--spread`` seconds).
  ``--short`` is the short-stream case: 1,000 streams of 5 deltas (tool calls,
  small answers), starts spread over 8 s so that mitmproxy is not saturated by new
  connections; there the per-flow work is most of the recorder's cost.
  The direct path (client to simulator, no proxy) runs too, so each proxy's added
  latency is its figure less direct's.
- **flood**: ``--flood-streams`` streams of ``--flood-deltas`` deltas with no pause,
  for the CPU cost per event when mitmproxy is saturated.

Instead of the mix, one traffic of issue 31 (target: within 1.05x of (a)'s CPU per
event):

- ``--bedrock``: Amazon Bedrock, a Claude model's ConverseStream and
  InvokeModelWithResponseStream in turn, SigV4-signed, answered in AWS's binary
  event stream (``application/vnd.amazon.eventstream``); an event is one
  event-stream message, counted by the client as its last byte arrives (its
  4-byte length says where it ends) and by the simulator as it writes it.
- ``--websocket``: OpenAI over WebSocket, Responses in WebSocket mode
  (``/v1/responses``) and the Realtime API (``/v1/realtime``) in turn; a stream is
  one connection carrying ``--responses`` (10) responses one after the other (the
  next ``response.create`` sent when a response has ended), its deltas shared among
  them; an event is one text message (Realtime: its audio and transcript deltas
  both). The client is raw (no library's work in the figures, the kernel's receive
  stamps as for SSE). mitmproxy spends several times an SSE event's CPU on a
  message (a hook for each), so that 100 paced connections saturate it: the paced
  load is 20 connections, the flood 1,000 deltas a connection.

With ``--paired`` the paced load also runs through (a) and (b) at the same time, as
many rounds again: both proxies on CPU 0, the same traffic into each (the paced
load split between them, so that CPU 0 is as busy as in a sequential round), so that a
change in the machine's speed during a round (this project's VMs drift by 10-20 %
within minutes) falls on both alike; the ratio of their CPU per event, per round, is
reported beside the sequential one.

With ``--compare DIR`` a third proxy runs: (c) ``recorder proxy`` from the checkout
``DIR`` (its ``recorder`` package on this venv, C extensions built there: e.g. a
``git worktree`` of the commit before a change), through every round as (b) is,
and in ``--paired`` rounds beside (a) and (b): a change's before (c) and after
(b) measured in the same run, on the same traffic.

With ``--otlp`` a third proxy runs: (c) ``recorder proxy --otlp-endpoint`` exporting
one span per stream to a local OTLP receiver (this process answers ``POST
/v1/traces`` with 200 and counts the bytes; ``--otlp-endpoint URL`` sends to a
receiver of your own instead, e.g. Arize Phoenix). Its rows and the ratios c/b say
what the export costs; bytes per span are the request bytes the receiver got over
the spans exported. The run fails if a span is dropped.

Every round runs the paths in a rotating order, so noise falls on all of them; a
figure is the median of ``--rounds`` rounds, with its spread (min-max). Per round:
the proxy's CPU seconds (every thread, ``/proc/<pid>/task/*/schedstat``) per 10,000
events delivered, and per event its latency: the kernel's receive stamp of the
packet that completed the event at the client (``SO_TIMESTAMPNS``) less the time
the simulator's process wrote it (``time.time()``, one clock for every process),
p50 and p99.

At the end the recorder is stopped with SIGTERM and its database must hold one row
per request sent through it (per response, over WebSocket), each ``completed`` and
as many of each endpoint and transport as were sent (``sse``, ``eventstream``,
``websocket``), and ``llm_streams_total`` must have counted as many:
the exit status is non-zero if a row is missing or doubled, a stream comes back
short, or something crashes. Missing a speed target is reported, never an exit
status.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxybench import (
    BEDROCK,
    ENDPOINTS,
    GEMINI,
    MODELS,
    WS_PATHS,
    Proxy,
    SimChild,
    Stream,
    child_sim,
    exit_status,
    fetch,
    median_spread,
    pct,
    set_affinity,
    ws_fetch,
)

PROXY_CPU, CLIENT_CPU = 0, 1
# the endpoints the traffic goes to, in turn (--gemini: Google's generateContent only;
# --bedrock: Converse and InvokeModel streams; --websocket: the WebSocket paths)
TRAFFIC: tuple[str, ...] = ENDPOINTS
# --websocket: TRAFFIC's paths are WebSocket connections (/v1/responses is both), each
# carrying WS_RESPONSES responses one after the other
OVER_WEBSOCKET = False
WS_RESPONSES = 10
# Paced streams, and a flood stream's deltas. mitmproxy spends several times an SSE
# event's CPU on a WebSocket message (a hook for each): 100 paced connections (up to
# 5,000 messages a second) saturate it, as the paced load must not, and a shorter
# flood gives as many CPU seconds per round.
STREAMS, STREAMS_WS = 100, 20
FLOOD_DELTAS, FLOOD_DELTAS_WS = 3000, 1000
TARGET_CPU_RATIO = 1.10
# issue 31: Bedrock and WebSocket traffic within 1.05x bare mitmproxy's CPU per event
TARGET_CPU_RATIO_31 = 1.05
TARGET_ADDED_P99_MS = 0.2
# The short-stream case (--short): tool calls and small answers are a few events
# long, so the per-flow work (hooks, record, completion) is most of the recorder's
# cost. Starts spread over 8 s (125 new connections a second, about a dozen streams
# open at once) keep mitmproxy's own connection setup from saturating it, which
# would hide the recorder's per-flow cost behind mitmproxy's.
SHORT = (1000, 5, 8.0)


@dataclass
class Round:
    """One path's figures in one round."""

    events: int = 0
    cpu: float = 0.0  # proxy CPU seconds
    wall: float = 0.0
    lat: list[float] = field(default_factory=list)

    @property
    def cpu_per_10k(self) -> float:
        return 1e4 * self.cpu / self.events

    def p(self, q: float) -> float:
        return 1e3 * pct(self.lat, q)


def paced_plan(
    i: int, streams: int, deltas: int, interval: float, spread: float | None = None
) -> tuple[float, int]:
    """Stream ``i``'s start (seconds into the round) and its number of deltas.

    As in real traffic, streams neither start nor end together: lengths run from
    half to one and a half times ``deltas`` (a fixed permutation, the same every
    round and path), and starts are spread over ``spread`` seconds, by default half
    a mean stream's duration, so the per-request work at each end of a stream is
    spread too.
    """
    share = (i * 37 % streams) / streams  # 37 is prime to any --streams under 37^2
    length = max(1, round(deltas * (0.5 + share)))
    if spread is None:
        spread = deltas * interval / 2
    return i / streams * spread, length


async def one(port: int, i: int, deltas: int, interval: float | None, sim_id: str) -> Stream:
    """Stream ``i`` of a round: ``deltas`` text deltas, an event every ``interval``
    seconds (None: no pause). With ``--websocket`` a stream is a connection of
    ``WS_RESPONSES`` responses one after the other, the deltas shared among them."""
    endpoint = TRAFFIC[i % len(TRAFFIC)]
    if OVER_WEBSOCKET:
        faults = f"deltas={max(1, deltas // WS_RESPONSES)}"
        faults += f",delay={interval}" if interval else ""
        return await ws_fetch(port, endpoint, sim_id, WS_RESPONSES, faults)
    model = f"{MODELS[endpoint]}+deltas={deltas}" + (f"+delay={interval}" if interval else "")
    return await fetch(port, endpoint, model, sim_id)


async def paced(
    port: int,
    prefix: str,
    streams: int,
    deltas: int,
    interval: float,
    spread: float | None = None,
) -> list[Stream]:
    async def later(i: int) -> Stream:
        start, length = paced_plan(i, streams, deltas, interval, spread)
        await asyncio.sleep(start)
        return await one(port, i, length, interval, f"{prefix}-{i}")

    return await asyncio.gather(*(later(i) for i in range(streams)))


async def flood(port: int, prefix: str, streams: int, deltas: int) -> list[Stream]:
    return await asyncio.gather(
        *(one(port, i, deltas, None, f"{prefix}-{i}") for i in range(streams))
    )


def main() -> int:
    global TRAFFIC, OVER_WEBSOCKET, WS_RESPONSES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--streams",
        type=int,
        help=f"paced streams per round (default {STREAMS}; --websocket: {STREAMS_WS} connections)",
    )
    parser.add_argument("--deltas", type=int, default=200, help="text deltas per paced stream")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between events")
    parser.add_argument(
        "--spread",
        type=float,
        help="seconds over which paced starts are spread (default: half a mean stream)",
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help=f"the short-stream case: {SHORT[0]} streams x {SHORT[1]} deltas, starts"
        f" spread over {SHORT[2]:.0f} s",
    )
    parser.add_argument("--flood-streams", type=int, default=8)
    parser.add_argument(
        "--flood-deltas",
        type=int,
        help=f"deltas per flood stream (default {FLOOD_DELTAS}; --websocket: {FLOOD_DELTAS_WS})",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="also run the paced load through (a) and (b) at the same time, --rounds"
        " rounds: both proxies share CPU 0 and whatever the machine does meanwhile",
    )
    parser.add_argument(
        "--anchor",
        choices=("mitmdump", "master"),
        default="mitmdump",
        help="(a): mitmdump (default), or mitmproxy's master as `recorder proxy` builds it,"
        " without mitmdump's Dumper (bench/anchor_proxy.py)",
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument(
        "--gemini",
        action="store_true",
        help="Gemini traffic only (generateContent with alt=sse) instead of the mix",
    )
    parser.add_argument(
        "--bedrock",
        action="store_true",
        help="Amazon Bedrock traffic only (ConverseStream and InvokeModelWithResponseStream"
        " for a Claude model, AWS's event stream) instead of the mix",
    )
    parser.add_argument(
        "--websocket",
        action="store_true",
        help="OpenAI over WebSocket only (Responses in WebSocket mode and Realtime in turn):"
        " a stream is a connection of --responses responses",
    )
    parser.add_argument(
        "--responses",
        type=int,
        default=WS_RESPONSES,
        help="--websocket: responses per connection, the stream's deltas shared among them",
    )
    parser.add_argument(
        "--recorder-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument added to `recorder proxy` (repeatable), e.g. --recorder-arg=--no-live",
    )
    parser.add_argument(
        "--compare",
        metavar="DIR",
        type=Path,
        help="also run `recorder proxy` from the checkout DIR (the code before a change)",
    )
    parser.add_argument(
        "--otlp", action="store_true", help="also run the recorder with OTLP export on"
    )
    parser.add_argument(
        "--otlp-endpoint", metavar="URL", help="with --otlp: export there (default: a local sink)"
    )
    args = parser.parse_args()
    if args.gemini + args.bedrock + args.websocket > 1:
        parser.error("--gemini, --bedrock and --websocket are one traffic each: pick one")
    if args.gemini:
        TRAFFIC = (GEMINI,)
    elif args.bedrock:
        TRAFFIC = BEDROCK
    elif args.websocket:
        TRAFFIC, OVER_WEBSOCKET = WS_PATHS, True
    if args.child_sim:
        child_sim()
        return 0
    if args.short:
        args.streams, args.deltas, args.spread = SHORT
    if args.streams is None:
        args.streams = STREAMS_WS if args.websocket else STREAMS
    if args.flood_deltas is None:
        args.flood_deltas = FLOOD_DELTAS_WS if args.websocket else FLOOD_DELTAS
    if args.quick:
        args.rounds, args.streams, args.deltas, args.flood_deltas = 1, 12, 20, 200
        args.responses = min(args.responses, 3)
    WS_RESPONSES = args.responses
    proxy_cpu = None if args.no_pin else PROXY_CPU
    client_cpu = None if args.no_pin else CLIENT_CPU

    import mitmproxy.version

    print(
        f"# bench_overhead: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, mitmproxy {mitmproxy.version.VERSION}, "
        f"{platform.system()} {platform.release()}, "
        + (
            "unpinned"
            if args.no_pin
            else f"proxies on CPU {PROXY_CPU}, simulator and client on CPU {CLIENT_CPU}"
        )
        + (", anchor: mitmproxy's master without the Dumper" if args.anchor == "master" else "")
    )
    set_affinity(client_cpu)
    t_begin = time.monotonic()
    sim = SimChild.start(__file__, client_cpu)
    upstream = f"http://127.0.0.1:{sim.port}"
    proxies = {
        "mitmproxy": Proxy.start(
            "mitmproxy" if args.anchor == "mitmdump" else "master", upstream, proxy_cpu
        ),
        "recorder": Proxy.start("recorder", upstream, proxy_cpu, extra=args.recorder_arg),
    }
    if args.compare is not None:
        proxies["compare"] = Proxy.start(
            "recorder", upstream, proxy_cpu, extra=args.recorder_arg, code=args.compare.resolve()
        )
    otlp_sink = None
    if args.otlp:
        endpoint = args.otlp_endpoint
        if endpoint is None:
            otlp_sink = OtlpSink.start()
            endpoint = otlp_sink.url
        proxies["otlp"] = Proxy.start(
            "recorder", upstream, proxy_cpu, extra=[*args.recorder_arg, "--otlp-endpoint", endpoint]
        )
    recorders = [k for k in proxies if k != "mitmproxy"]
    ports = {"direct": sim.port, **{k: p.port for k, p in proxies.items()}}
    failures: list[str] = []
    sent_to = dict.fromkeys(recorders, 0)
    # the rows each recorder should hold: (endpoint, transport) -> records
    planned: dict[str, Counter[tuple[str, str]]] = {k: Counter() for k in recorders}

    def plan_rows(path: str, streams: list[Stream]) -> None:
        for s in streams:
            sent_to[path] += s.records
            planned[path][s.recorded_as] += s.records

    seq = 0

    def check(streams: list[Stream], where: str, times: dict[str, list[float]]) -> None:
        for s in streams:
            if s.error or not s.complete or len(s.arrivals) != len(times[s.sim_id]):
                failures.append(
                    f"{where} {s.sim_id}: {s.error or ''} complete={s.complete}"
                    f" {len(s.arrivals)} blocks, {len(times[s.sim_id])} sent"
                )

    def run(path: str, kind: str) -> Round:
        nonlocal seq
        seq += 1
        prefix = f"{kind}{seq}-{path}"
        proxy = proxies.get(path)
        c0 = proxy.cpu_seconds() if proxy else 0.0
        t0 = time.monotonic()
        if kind == "paced":
            streams = asyncio.run(
                paced(ports[path], prefix, args.streams, args.deltas, args.interval, args.spread)
            )
        else:
            streams = asyncio.run(flood(ports[path], prefix, args.flood_streams, args.flood_deltas))
        wall = max(s.end for s in streams) - t0
        c1 = proxy.cpu_seconds() if proxy else 0.0
        if path in sent_to:
            plan_rows(path, streams)
        times = {s.sim_id: sim.write_times(s.sim_id) for s in streams}
        check(streams, f"{kind} {path}", times)
        r = Round(events=sum(len(s.arrivals) for s in streams), cpu=c1 - c0, wall=wall)
        for s in streams:
            if len(s.arrivals) == len(times[s.sim_id]):
                r.lat.extend(a - w for a, w in zip(s.arrivals, times[s.sim_id], strict=True))
        return r

    # the proxies of a paired round: (a), (b) and (c) with --compare, not the OTLP one
    together = [k for k in proxies if k != "otlp"]

    # the paced load split among them: CPU 0 as busy as in a sequential round (a
    # saturated proxy reads several events at once, and costs less per event)
    paired_streams = max(1, round(args.streams / len(together)))

    def run_paired() -> dict[str, float]:
        """The paced load, split, through every proxy of ``together`` at once; each
        recorder's CPU per event over (a)'s."""
        nonlocal seq
        seq += 1
        before = {k: proxies[k].cpu_seconds() for k in together}

        async def all_at_once() -> list[list[Stream]]:
            return list(
                await asyncio.gather(
                    *(
                        paced(
                            proxies[k].port,
                            f"pair{seq}-{k}",
                            paired_streams,
                            args.deltas,
                            args.interval,
                            args.spread,
                        )
                        for k in together
                    )
                )
            )

        got = dict(zip(together, asyncio.run(all_at_once()), strict=True))
        per_event: dict[str, float] = {}
        for name, streams in got.items():
            if name != "mitmproxy":
                plan_rows(name, streams)
            check(streams, f"paired {name}", {s.sim_id: sim.write_times(s.sim_id) for s in streams})
            events = sum(len(s.arrivals) for s in streams)
            if not events:  # every stream failed: check() said how; no ratio this round
                return {}
            per_event[name] = (proxies[name].cpu_seconds() - before[name]) / events
        return {k: v / per_event["mitmproxy"] for k, v in per_event.items() if k != "mitmproxy"}

    paired: dict[str, list[float]] = {k: [] for k in together if k != "mitmproxy"}
    proxied = ("mitmproxy", *recorders)
    paced_rounds: dict[str, list[Round]] = {p: [] for p in ("direct", *proxied)}
    flood_rounds: dict[str, list[Round]] = {p: [] for p in proxied}
    rss: dict[str, float] = {}
    streams_total: dict[str, float] = {}
    spans: dict[str, float] = {}
    try:
        # warm-up: first connections, lazy imports, the recorder's templates and DB
        for path in ports:
            run(path, "warm")
        for r in range(args.rounds):
            order = ("direct", *proxied)
            k = r % len(order)
            for path in order[k:] + order[:k]:
                paced_rounds[path].append(run(path, "paced"))
        for r in range(args.rounds):
            k = r % len(proxied)
            for path in proxied[k:] + proxied[:k]:
                flood_rounds[path].append(run(path, "flood"))
        if args.paired:
            for _ in range(args.rounds):
                for k, ratio in run_paired().items():
                    paired[k].append(ratio)
        rss = {k: p.rss_mib() for k, p in proxies.items()}
        for name in recorders:
            streams_total[name] = proxies[name].wait_metric("llm_streams_total", sent_to[name])
        if "otlp" in proxies:
            want = sent_to["otlp"]
            exported = "llm_recorder_otlp_exported_total"
            spans["exported"] = proxies["otlp"].wait_metric(exported, want)
            spans["dropped"] = proxies["otlp"].metric_sum("llm_recorder_otlp_dropped_total")
    finally:
        codes = {k: p.stop() for k, p in proxies.items()}
        sim.stop()
        if otlp_sink is not None:
            otlp_sink.stop()
    db_rows: dict[str, tuple[int, int]] = {}
    recorded: dict[str, Counter[tuple[str, str]]] = {}
    try:
        for name in recorders:
            with sqlite3.connect(proxies[name].workdir / "recorder.db") as db:
                db_rows[name] = db.execute(
                    "SELECT count(*), count(DISTINCT id) FROM streams"
                ).fetchone()
                # every stream of the bench completes: a row of another outcome is wrong
                recorded[name] = Counter(
                    {
                        (endpoint, transport): n
                        for endpoint, transport, n in db.execute(
                            "SELECT endpoint, transport, count(*) FROM streams"
                            " WHERE outcome = 'completed' GROUP BY endpoint, transport"
                        )
                    }
                )
    finally:
        for p in proxies.values():
            p.cleanup()
    for name in recorders:
        sent = sent_to[name]
        if codes[name] != 0:
            failures.append(f"{name} proxy exited {codes[name]}")
        if db_rows.get(name) != (sent, sent):
            failures.append(f"{sent} requests through {name}, rows {db_rows.get(name)}")
        if recorded.get(name) != planned[name]:
            failures.append(
                f"{name}: completed rows by (endpoint, transport) {dict(recorded.get(name) or {})},"
                f" planned {dict(planned[name])}"
            )
        if streams_total.get(name) != sent:
            failures.append(f"{name}: llm_streams_total {streams_total.get(name)}, requests {sent}")
    if spans and (spans["dropped"] or spans["exported"] != sent_to["otlp"]):
        failures.append(f"otlp: {spans}, requests {sent_to['otlp']}")
    elapsed = time.monotonic() - t_begin

    # -- report
    per_s = args.streams / args.interval
    spread = args.deltas * args.interval / 2 if args.spread is None else args.spread
    print(
        f"# paced: {args.streams} streams x {args.deltas} deltas (0.5-1.5x), an event every"
        f" {args.interval * 1e3:.0f} ms each (up to ~{per_s:,.0f} events/s in all),"
        f" starts spread over {spread:g} s;"
        f" flood: {args.flood_streams} x {args.flood_deltas} deltas;"
        f" {args.rounds} rounds; {elapsed:.0f} s in all"
    )
    if args.websocket:
        print(
            f"# websocket: a stream is a connection (Responses in WebSocket mode and Realtime"
            f" in turn) of {WS_RESPONSES} responses one after the other, its deltas shared among"
            f" them; an event is a text message (Realtime: audio and transcript deltas)"
        )
    for name in recorders:
        print(
            f"# {name}: {sent_to[name]} requests, {db_rows.get(name, (-1,))[0]} rows,"
            f" llm_streams_total {streams_total.get(name, -1):.0f}; completed rows as planned"
            f" (endpoint, transport): {'yes' if recorded.get(name) == planned[name] else 'NO'},"
            + ",".join(f" {e} {t} {n}" for (e, t), n in sorted(planned[name].items()))
        )
    print("# RSS at the end: " + ", ".join(f"{k} {v:.0f} MiB" for k, v in rss.items()))
    if spans:
        print(f"# otlp: {spans['exported']:.0f} spans exported, {spans['dropped']:.0f} dropped")
        if otlp_sink is not None and otlp_sink.requests:
            print(
                f"# otlp: {otlp_sink.bytes / max(1, spans['exported']):,.0f} bytes per span"
                f" (protobuf, uncompressed; {otlp_sink.requests} requests,"
                f" {otlp_sink.bytes:,} bytes)"
            )
    print()

    def fmt(values: list[float], spec: str = ".2f") -> str:
        if not values:  # no round measured it (its streams failed, listed below)
            return "none"
        m, lo, hi = median_spread(values)
        return f"{m:{spec}} [{lo:{spec}}-{hi:{spec}}]"

    print("Paced traffic: median of rounds [min-max]")
    print()
    print(
        "| path | proxy CPU s per 10k events | latency p50 ms | latency p99 ms"
        " | added p50 / p99 ms |"
    )
    print("|---|---|---|---|---|")
    d = paced_rounds["direct"]
    for path, rounds in paced_rounds.items():
        cpu = fmt([r.cpu_per_10k for r in rounds], ".3f") if path != "direct" else "-"
        added = "-"
        if path != "direct":
            a50 = [r.p(0.5) - x.p(0.5) for r, x in zip(rounds, d, strict=True)]
            a99 = [r.p(0.99) - x.p(0.99) for r, x in zip(rounds, d, strict=True)]
            added = f"{fmt(a50)} / {fmt(a99)}"
        print(
            f"| {path} | {cpu} | {fmt([r.p(0.5) for r in rounds])}"
            f" | {fmt([r.p(0.99) for r in rounds])} | {added} |"
        )
    print()
    a, b = paced_rounds["mitmproxy"], paced_rounds["recorder"]
    cpu_ratio = [y.cpu_per_10k / x.cpu_per_10k for x, y in zip(a, b, strict=True)]
    d50 = [y.p(0.5) - x.p(0.5) for x, y in zip(a, b, strict=True)]
    d99 = [y.p(0.99) - x.p(0.99) for x, y in zip(a, b, strict=True)]
    gain_ratio = [
        (y.p(0.99) - z.p(0.99)) / (x.p(0.99) - z.p(0.99))
        for x, y, z in zip(a, b, d, strict=True)
        if x.p(0.99) - z.p(0.99) > 0
    ]
    print("Flood (saturating): median of rounds [min-max]")
    print()
    print("| path | proxy CPU s per 10k events | events/s |")
    print("|---|---|---|")
    for path, rounds in flood_rounds.items():
        print(
            f"| {path} | {fmt([r.cpu_per_10k for r in rounds], '.3f')}"
            f" | {fmt([r.events / r.wall for r in rounds], ',.0f')} |"
        )
    fa, fb = flood_rounds["mitmproxy"], flood_rounds["recorder"]
    flood_cpu = [y.cpu_per_10k / x.cpu_per_10k for x, y in zip(fa, fb, strict=True)]
    flood_eps = [(y.events / y.wall) / (x.events / x.wall) for x, y in zip(fa, fb, strict=True)]
    print()
    print("Recorder (b) against mitmproxy (a), per round, median [min-max]:")
    print()
    m_cpu = median_spread(cpu_ratio)[0]
    target = TARGET_CPU_RATIO_31 if args.bedrock or args.websocket else TARGET_CPU_RATIO
    m_d99 = median_spread(d99)[0]
    print(
        f"- paced, CPU b/a: **{fmt(cpu_ratio)}** (target <= {target:.2f}:"
        f" {'met' if m_cpu <= target else 'MISSED'})"
    )
    print(
        f"- paced, latency b-a: p50 {fmt(d50)} ms, p99 **{fmt(d99)} ms** (target < "
        f"{TARGET_ADDED_P99_MS} ms: {'met' if m_d99 < TARGET_ADDED_P99_MS else 'MISSED'})"
    )
    if gain_ratio:
        print(f"- paced, p99 latency gained over direct, b/a: {fmt(gain_ratio)}")
    print(f"- flood, CPU b/a: {fmt(flood_cpu)}; events/s b/a: {fmt(flood_eps)}")
    if args.paired:
        print(
            f"- paced, (a) and (b) at the same time ({paired_streams} streams each), CPU b/a:"
            f" **{fmt(paired['recorder'])}**"
        )
    if "compare" in proxies:
        c = paced_rounds["compare"]
        print()
        print(f"The recorder of {args.compare} (c), per round, median [min-max]:")
        print()
        print(
            "- paced, CPU c/a: "
            + fmt([z.cpu_per_10k / x.cpu_per_10k for x, z in zip(a, c, strict=True)])
            + "; b/c: "
            + fmt([y.cpu_per_10k / z.cpu_per_10k for y, z in zip(b, c, strict=True)])
        )
        fc = flood_rounds["compare"]
        print(
            "- flood, CPU c/a: "
            + fmt([z.cpu_per_10k / x.cpu_per_10k for x, z in zip(fa, fc, strict=True)])
        )
        if args.paired:
            print(
                f"- paced, (a), (b) and (c) at the same time, CPU c/a: **{fmt(paired['compare'])}**"
            )
    if "otlp" in proxies:
        c = paced_rounds["otlp"]
        fc = flood_rounds["otlp"]
        print()
        print("OTLP export on (c) against off (b), per round, median [min-max]:")
        print()
        print(
            "- paced, CPU c/b: **"
            + fmt([z.cpu_per_10k / y.cpu_per_10k for y, z in zip(b, c, strict=True)])
            + "**; CPU µs per event c-b: "
            + fmt([(z.cpu_per_10k - y.cpu_per_10k) * 100 for y, z in zip(b, c, strict=True)])
            + "; CPU ms per stream (one span) c-b: "
            + fmt([(z.cpu - y.cpu) * 1e3 / args.streams for y, z in zip(b, c, strict=True)])
        )
        print(
            "- paced, latency c-b: p50 "
            + fmt([z.p(0.5) - y.p(0.5) for y, z in zip(b, c, strict=True)])
            + " ms, p99 "
            + fmt([z.p(0.99) - y.p(0.99) for y, z in zip(b, c, strict=True)])
            + " ms"
        )
        print(
            "- flood, CPU c/b: "
            + fmt([z.cpu_per_10k / y.cpu_per_10k for y, z in zip(fb, fc, strict=True)])
            + "; events/s c/b: "
            + fmt([(z.events / z.wall) / (y.events / y.wall) for y, z in zip(fb, fc, strict=True)])
        )
    return exit_status(failures)


class OtlpSink:
    """A local OTLP/HTTP receiver for the bench: answers every POST with 200 and an
    empty ExportTraceServiceResponse, counts requests and body bytes."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.url = ""
        self._server: Any = None

    @classmethod
    def start(cls) -> OtlpSink:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        sink = cls()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                sink.requests += 1
                sink.bytes += n
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        sink._server = server
        sink.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return sink

    def stop(self) -> None:
        self._server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
