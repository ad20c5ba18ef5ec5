"""Proxy benchmark: events per second delivered to a client, and latency added per
event, through bare mitmproxy and through mitmproxy with the recorder addon.

Run: ``.venv/bin/python bench/bench_proxy.py`` (``--quick`` for a smoke run).

Three paths to the same upstream, the simulator (``recorder.simulate``), all on
loopback, each in its own process so that no two share a GIL:

- ``direct``: the client talks to the simulator (context: what the client and the
  simulator can do without a proxy).
- ``mitmproxy`` (the anchor): mitmproxy in reverse mode with one addon that sets
  ``flow.response.stream = lambda b: b`` in ``responseheaders`` (without it
  mitmproxy buffers the SSE body). Started by ``recorder.proxy.runner.run_in_thread``
  like the recorder, so options and logging are the same.
- ``recorder``: mitmproxy with the ``Recorder`` addon (a ``MemorySink``, the shipped
  prices), as ``recorder proxy`` runs it.

The client (this process, asyncio, raw HTTP/1.1 over a socket) posts a Chat
Completions request with ``stream: true`` and reads the chunked body, noting when
each event's last byte arrives.

Two measurements:

- ``throughput``: ``gpt-4o+deltas=N`` streams with no delays, 1 and 8 at once: every
  event of every stream over the wall time from the first request to the last byte.
  Also the CPU time of the proxy's process per event (``/proc/<pid>/stat``, summed
  over the rounds), which is what the proxy pays whatever the client does.
- ``latency``: ``gpt-4o+deltas=M+delay=D`` streams, 1 and 8 at once, paced well below
  any path's capacity. The simulator's process notes ``time.monotonic()`` before it
  writes each event (``CLOCK_MONOTONIC`` is one clock for every process of the
  machine); the client notes it when the event's last byte is read. Per event, the
  difference is its latency; p50 and p99 over every event of every round. What a
  proxy adds is its figure less ``direct``'s.

Paths run interleaved, in a rotating order, every round; a throughput figure is the
median of the rounds, a ratio is against the anchor in the same run. The exit status
is non-zero only if something crashes or a stream comes back short.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PATHS = ("direct", "mitmproxy", "recorder")
ANCHOR = "mitmproxy"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- child processes ------------------------------------------------------------


def _child_sim() -> None:
    """Run the simulator; note when it writes each event of a request with x-sim-id.

    Protocol on stdin/stdout: the first line out is ``PORT n``; ``dump ID`` answers
    one JSON line with that request's write times (and forgets them); EOF stops it.
    """
    from recorder.simulate import server

    current: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_id", default=None)
    log: dict[str, list[float]] = {}
    lock = threading.Lock()
    orig_handle = server.Simulator._handle
    orig_send = server.Conn.send

    async def handle(self: Any, conn: Any, req: Any) -> bool:
        sid = req.headers.get("x-sim-id")
        token = current.set(sid if sid and sid.startswith("lat-") else None)
        try:
            return await orig_handle(self, conn, req)
        finally:
            current.reset(token)

    async def send(self: Any, data: bytes) -> None:
        sid = current.get()
        if sid is not None and b"data:" in data:
            now = time.monotonic()
            with lock:
                log.setdefault(sid, []).append(now)
        await orig_send(self, data)

    server.Simulator._handle = handle  # type: ignore[method-assign]
    server.Conn.send = send  # type: ignore[method-assign]
    with server.run_in_thread() as sim:
        print(f"PORT {sim.port}", flush=True)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "dump":
                with lock:
                    times = log.pop(arg, [])
                print(json.dumps(times), flush=True)


class Passthrough:
    """The anchor's only addon: stream every response body unchanged."""

    def responseheaders(self, flow: Any) -> None:
        flow.response.stream = lambda b: b

    def close(self) -> None:  # run_in_thread closes its addon like the recorder
        return None


def _child_proxy(kind: str, upstream: str) -> None:
    """Run mitmproxy in reverse mode (bare or with the recorder); stop at EOF on stdin."""
    from recorder.prices import shipped_prices
    from recorder.proxy.addon import Recorder, RecorderConfig
    from recorder.proxy.runner import ProxySettings, run_in_thread
    from recorder.sinks import MemorySink

    addon: Any
    if kind == "recorder":
        addon = Recorder(MemorySink(), RecorderConfig(key_secret=b"x", prices=shipped_prices()))
    else:
        addon = Passthrough()
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as confdir:
        settings = ProxySettings(
            modes=[f"reverse:{upstream}"], listen_host="127.0.0.1", listen_port=0, confdir=confdir
        )
        with run_in_thread(addon, settings) as listeners:
            print(f"PORT {listeners[0].port}", flush=True)
            sys.stdin.read()


@dataclass
class Child:
    """A child process of this script, speaking lines on stdin/stdout."""

    name: str
    proc: subprocess.Popen[str]
    port: int

    @classmethod
    def start(cls, name: str, *args: str) -> Child:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            proc.kill()
            raise RuntimeError(f"{name} did not start: {line!r}")
        return cls(name, proc, int(line.split()[1]))

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- the client -----------------------------------------------------------------


@dataclass
class Stream:
    """What the client saw of one stream."""

    start: float
    end: float = 0.0
    arrivals: list[float] = field(default_factory=list)
    chunks: int = 0


async def fetch(port: int, model: str, sim_id: str) -> Stream:
    """POST a Chat Completions stream; note the arrival time of every event."""
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Authorization: Bearer sk-bench\r\nx-sim-id: {sim_id}\r\nConnection: close\r\n\r\n"
    ).encode()
    out = Stream(time.monotonic())
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    try:
        writer.write(head + body)
        headers = await reader.readuntil(b"\r\n\r\n")
        status = headers.split(b" ", 2)[1]
        if status != b"200" or b"chunked" not in headers.lower():
            raise RuntimeError(f"unexpected response: {headers[:300]!r}")
        arrivals = out.arrivals
        last = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                break
            data = await reader.readexactly(size + 2)
            now = time.monotonic()
            out.chunks += 1
            data = last + data[:-2]
            n = data.count(b"\n\n")
            if n:
                arrivals.extend([now] * n)
            last = data[-1:]
        out.end = time.monotonic()
    finally:
        writer.close()
    return out


async def run_streams(port: int, model: str, prefix: str, concurrency: int) -> list[Stream]:
    return await asyncio.gather(*(fetch(port, model, f"{prefix}-{i}") for i in range(concurrency)))


# -- the measurements -----------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a few seconds, for a smoke run")
    parser.add_argument("--deltas", type=int, default=3000, help="text deltas per stream")
    parser.add_argument("--repeats", type=int, default=7, help="throughput rounds")
    parser.add_argument("--lat-deltas", type=int, default=400, help="deltas per latency stream")
    parser.add_argument("--lat-delay", type=float, default=0.002, help="seconds between events")
    parser.add_argument("--lat-repeats", type=int, default=3, help="latency rounds")
    args = parser.parse_args()
    if args.child:
        if args.child[0] == "sim":
            _child_sim()
        else:
            _child_proxy(args.child[0], args.child[1])
        return 0
    if args.quick:
        args.deltas, args.repeats, args.lat_deltas, args.lat_repeats = 500, 2, 100, 1
    concurrencies = (1, 8)

    import mitmproxy.version

    print(
        f"# bench_proxy: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, mitmproxy {mitmproxy.version.VERSION}, {platform.system()}"
        f" {platform.release()}"
    )
    t_begin = time.monotonic()
    sim = Child.start("simulator", "sim")
    upstream = f"http://127.0.0.1:{sim.port}"
    children = {"mitmproxy": Child.start("mitmproxy", "bare", upstream)}
    children["recorder"] = Child.start("recorder", "recorder", upstream)
    ports = {"direct": sim.port, **{k: c.port for k, c in children.items()}}
    expected = args.deltas + 4  # role chunk, deltas, finish chunk, usage chunk, [DONE]
    lat_expected = args.lat_deltas + 4
    failures: list[str] = []
    seq = 0

    def check(streams: list[Stream], want: int, where: str) -> None:
        for s in streams:
            if len(s.arrivals) != want:
                failures.append(f"{where}: {len(s.arrivals)} events, expected {want}")

    try:
        # warm up every path (first connection, mitmproxy's lazy imports, templates)
        for path in PATHS:
            check(
                asyncio.run(run_streams(ports[path], f"gpt-4o+deltas={args.deltas}", "warm", 2)),
                expected,
                f"warm-up {path}",
            )

        # -- throughput
        eps: dict[tuple[str, int], list[float]] = {}
        chunks: dict[str, int] = {}
        cpu: dict[tuple[str, int], float] = {}
        events: dict[tuple[str, int], int] = {}
        model = f"gpt-4o+deltas={args.deltas}"
        for conc in concurrencies:
            for r in range(args.repeats):
                order = PATHS[r % 3 :] + PATHS[: r % 3]
                for path in order:
                    seq += 1
                    child = children.get(path)
                    c0 = child.cpu_seconds() if child else 0.0
                    t0 = time.monotonic()
                    streams = asyncio.run(run_streams(ports[path], model, f"tp{seq}", conc))
                    wall = max(s.end for s in streams) - t0
                    c1 = child.cpu_seconds() if child else 0.0
                    check(streams, expected, f"throughput {path} x{conc}")
                    n = sum(len(s.arrivals) for s in streams)
                    chunks[path] = max(chunks.get(path, 0), max(s.chunks for s in streams))
                    eps.setdefault((path, conc), []).append(n / wall)
                    cpu[(path, conc)] = cpu.get((path, conc), 0.0) + (c1 - c0)
                    events[(path, conc)] = events.get((path, conc), 0) + n

        # -- latency
        lat: dict[tuple[str, int], list[float]] = {}
        lat_model = f"gpt-4o+deltas={args.lat_deltas}+delay={args.lat_delay}"
        for conc in concurrencies:
            for r in range(args.lat_repeats):
                order = PATHS[r % 3 :] + PATHS[: r % 3]
                for path in order:
                    seq += 1
                    prefix = f"lat-{seq}"
                    streams = asyncio.run(run_streams(ports[path], lat_model, prefix, conc))
                    check(streams, lat_expected, f"latency {path} x{conc}")
                    for i, s in enumerate(streams):
                        sent = json.loads(sim.ask(f"dump {prefix}-{i}"))
                        if len(sent) != len(s.arrivals):
                            failures.append(f"latency {path}: {len(sent)} sent, {len(s.arrivals)}")
                            continue
                        lat.setdefault((path, conc), []).extend(
                            a - w for a, w in zip(s.arrivals, sent, strict=True)
                        )
    finally:
        for child in (*children.values(), sim):
            child.stop()
    elapsed = time.monotonic() - t_begin

    # -- report
    print(
        f"# {args.deltas} deltas per stream ({expected} events), {args.repeats} rounds;"
        f" latency: {args.lat_deltas} deltas, delay={args.lat_delay}, {args.lat_repeats} rounds;"
        f" {elapsed:.0f} s in all"
    )
    got = ", ".join(f"{p} {chunks[p]:,}" for p in PATHS)
    print(f"# most HTTP chunks the client got for one stream: {got}")
    print()
    print("Throughput, events/s delivered to the client (median of rounds):")
    print()
    print("| streams | direct | mitmproxy (anchor) | **recorder** | proxy CPU per event |")
    print("|---|---|---|---|---|")
    for conc in concurrencies:
        med = {p: statistics.median(eps[(p, conc)]) for p in PATHS}
        bare, rec = (1e6 * cpu[(p, conc)] / events[(p, conc)] for p in ("mitmproxy", "recorder"))
        print(
            f"| {conc} | {med['direct']:,.0f}/s | {med['mitmproxy']:,.0f}/s"
            f" | {med['recorder']:,.0f}/s, **{med['recorder'] / med[ANCHOR]:.2f}x**"
            f" | {bare:.1f} µs → {rec:.1f} µs ({rec - bare:+.1f} µs, {rec / bare:.2f}x) |"
        )
    print()
    per = 1 / args.lat_delay
    print(f"Latency per event, ms, at about {per:,.0f} events/s per stream (p50 / p99):")
    print()
    print(
        "| streams | direct | mitmproxy | **recorder** | added by mitmproxy | added by the addon |"
    )
    print("|---|---|---|---|---|---|")
    for conc in concurrencies:
        q = {p: (1e3 * pct(lat[(p, conc)], 0.5), 1e3 * pct(lat[(p, conc)], 0.99)) for p in PATHS}
        d, m, rc = q["direct"], q["mitmproxy"], q["recorder"]
        print(
            f"| {conc} | {d[0]:.2f} / {d[1]:.2f} | {m[0]:.2f} / {m[1]:.2f}"
            f" | {rc[0]:.2f} / {rc[1]:.2f} | {m[0] - d[0]:+.2f} / {m[1] - d[1]:+.2f}"
            f" | {rc[0] - m[0]:+.2f} / {rc[1] - m[1]:+.2f} |"
        )
    if failures:
        print()
        print("FAILED:")
        for f in failures[:20]:
            print(f"  {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
