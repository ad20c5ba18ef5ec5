"""What the live view's once-a-second walk costs, against the metering it watches.

Run: ``.venv/bin/python bench/bench_live.py`` (about 20 s; ``--quick`` for a smoke run).

In one process, a recorder addon holds ``--streams`` open Chat Completions streams
(mitmproxy's test flows, the addon's own hooks, a fake clock), as `recorder proxy`
would under load. Per round, interleaved:

- **anchor**: one second of those streams' traffic, an event every ``--interval``
  seconds each (10,000 events for 500 streams at 50 ms), through the addon's tap and
  its batch metering: what the proxy does anyway for a second of that load;
- **tick**: one walk of the live view over the open streams (``Live.tick``: each
  stream's silence, the stall bookkeeping, the gauges' values), done once a second;
- **snapshot**: one ``GET /streams`` document (``Live.snapshot`` plus its JSON), done
  only while someone watches (`recorder top` asks once a second).

Reported: the median of ``--rounds`` rounds with min-max, and the tick's and the
snapshot's share of the anchor (a second of metering). Nothing here is a target: the
live view is meant to cost next to nothing next to the traffic it watches.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from recorder.proxy.addon import Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.live import SNAPSHOT_SLICE, Live
from recorder.store.sinks import MemorySink


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def delta(i: int) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": f" word{i}"}}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def open_flows(addon: Recorder, n: int) -> list[http.HTTPFlow]:
    flows = []
    for _ in range(n):
        body = orjson.dumps({"model": "gpt-4o", "stream": True, "messages": []})
        req = tutils.treq(
            method=b"POST",
            host="api.example.com",
            port=443,
            scheme=b"https",
            path=b"/v1/chat/completions",
            headers=http.Headers(
                [(b"content-type", b"application/json"), (b"authorization", b"Bearer sk-x1234")]
            ),
            content=body,
        )
        flow = tflow.tflow(req=req)
        flow.response = None
        addon.requestheaders(flow)
        addon.request(flow)
        flow.response = tutils.tresp(
            status_code=200,
            headers=http.Headers([(b"content-type", b"text/event-stream")]),
            content=None,
        )
        addon.responseheaders(flow)
        flows.append(flow)
    return flows


async def run(args: argparse.Namespace) -> int:
    clock = Clock()
    addon = Recorder(MemorySink(), RecorderConfig(key_secret=b"bench"), clock=clock)
    live = Live(addon, out=io.StringIO(), quiet=True, on_tick=lambda s, o: None)
    per_stream = round(1.0 / args.interval)
    pieces = [delta(i) for i in range(per_stream)]
    anchor, tick, snap = [], [], []
    with taddons.context(addon, live):
        flows = open_flows(addon, args.streams)
        taps = [f.response.stream for f in flows]  # type: ignore[union-attr]
        for _ in range(args.rounds):
            # one second of traffic: every stream sends its events in turn
            t0 = time.perf_counter()
            for piece in pieces:
                clock.now += args.interval / len(taps)
                for tap in taps:
                    tap(piece)  # type: ignore[operator]
            for view in addon.streams.views():  # what the batches hold, as the walk meters it
                view.catch_up()
            anchor.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            live.tick()
            tick.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            orjson.dumps(live.snapshot(), default=str)
            snap.append(time.perf_counter() - t0)
    events = args.streams * per_stream

    def fmt(values: list[float], scale: float, unit: str) -> str:
        med = statistics.median(values) * scale
        return f"{med:.2f} {unit} [{min(values) * scale:.2f}-{max(values) * scale:.2f}]"

    print(
        f"# bench_live: {args.streams} open streams, an event every {args.interval} s each"
        f" ({events:,} events a second), {args.rounds} rounds"
    )
    print()
    print("| step | time per call, median [min-max] | share of the anchor |")
    print("|---|---|---|")
    a = statistics.median(anchor)
    print(f"| anchor: a second of metering ({events:,} events) | {fmt(anchor, 1e3, 'ms')} | 1 |")
    shares_t = [t / x for t, x in zip(tick, anchor, strict=True)]
    shares_s = [t / x for t, x in zip(snap, anchor, strict=True)]
    print(
        f"| live tick (once a second) | {fmt(tick, 1e3, 'ms')} |"
        f" {statistics.median(shares_t):.2%} [{min(shares_t):.2%}-{max(shares_t):.2%}] |"
    )
    print(
        f"| /streams snapshot (while watched) | {fmt(snap, 1e3, 'ms')} |"
        f" {statistics.median(shares_s):.2%} [{min(shares_s):.2%}-{max(shares_s):.2%}] |"
    )
    print()
    slices = -(-args.streams // SNAPSHOT_SLICE)
    print(
        f"The snapshot is taken in {slices} event-loop callbacks of {SNAPSHOT_SLICE} streams:"
        f" about {statistics.median(snap) / slices * 1e3:.2f} ms each."
    )
    print(f"per open stream: tick {statistics.median(tick) / args.streams * 1e6:.2f} µs,", end="")
    print(f" snapshot {statistics.median(snap) / args.streams * 1e6:.2f} µs; anchor {a:.3f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.streams, args.rounds = 50, 2
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
