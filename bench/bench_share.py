"""The recorder's share of the proxy's CPU, sampled: what `perf` finds running.

Run: ``.venv/bin/python bench/bench_share.py --bedrock`` (about a minute a proxy;
``--compare DIR`` samples the recorder of another checkout too, after this one's;
needs Linux's ``perf`` and the right to sample one's own processes).

Why this bench: the timers of ``bench_in_situ.py`` cost as much as the steps they
time where a step is under a microsecond (the tap, a delta's reading), and the
through-proxy ratios of ``bench_overhead.py`` move between sittings by more than
such a step. Sampling adds no code to the path it measures. ``recorder proxy``
runs as ``bench_overhead.py`` runs it (pinned to CPU 0, SQLite with the journal,
metrics served) with Python's perf trampolines on (``PYTHONPERFSUPPORT=1``, which
name each Python function for perf, at some cost to every call alike), under the
paced load of ``bench_overhead.py`` (``--bedrock``, ``--websocket``, or the SSE
mix), after a warm-up; ``perf record`` samples its threads with DWARF call
graphs for the whole load. Each sample goes to the innermost Python function on
its stack, or, when a frame of one of the recorder's C extensions is below that,
to the C function (so a C reader's time is the recorder's, not its caller's).

Reported per proxy: samples, the recorder's share (samples in a function of
``recorder/`` or of its C extensions, over all the process's samples), the
proxy's CPU per 10,000 events in the sampled run (perf's own cost included), and
the recorder's functions by share. A share is a count: its standard error is
about sqrt(share x (1 - share) / samples) (some 0.35 points at 4 % of 3,000).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_overhead
from bench_overhead import STREAMS_WS, paced
from proxybench import BEDROCK, WS_PATHS, Proxy, SimChild, child_sim, set_affinity

PROXY_CPU, CLIENT_CPU = 0, 1
_PY_FRAME = re.compile(r"py::(\S+):(\S+)")


def sample(code: Path | None, streams: int, deltas: int, freq: int, out: Path) -> tuple[float, str]:
    """Run the load through one ``recorder proxy`` (``code``'s package if given)
    under ``perf record``; its CPU per 10k events, and perf's file."""
    os.environ["PYTHONPERFSUPPORT"] = "1"
    sim = SimChild.start(__file__, CLIENT_CPU)
    try:
        proxy = Proxy.start("recorder", f"http://127.0.0.1:{sim.port}", PROXY_CPU, code=code)
        try:
            asyncio.run(paced(proxy.port, "warm", 10, 20, 0.02))
            perf = subprocess.Popen(
                [
                    *("perf", "record", "-F", str(freq), "--call-graph", "dwarf,32768"),
                    *("-p", str(proxy.proc.pid), "-o", str(out)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # (perf attaches)
            c0 = proxy.cpu_seconds()
            got = asyncio.run(paced(proxy.port, "r", streams, deltas, 0.02))
            events = sum(len(s.arrivals) for s in got)
            cpu = 1e4 * (proxy.cpu_seconds() - c0) / max(events, 1)
            perf.send_signal(2)
            perf.wait(60)
        finally:
            proxy.stop()
            proxy.cleanup()
    finally:
        sim.stop()
        os.environ.pop("PYTHONPERFSUPPORT", None)
    return cpu, str(out)


def attribute(data: str) -> tuple[int, collections.Counter[str]]:
    """Samples in all, and the recorder's functions' samples."""
    script = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,tid,ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = 0
    ours: collections.Counter[str] = collections.Counter()
    for block in script.split("\n\n"):
        lines = block.strip().split("\n")
        if len(lines) < 2:
            continue
        total += 1
        native = None
        for line in lines[1:]:
            frame = _PY_FRAME.search(line)
            if frame:
                name, path = frame.groups()
                if native is None and "/recorder/" in path and "site-packages" not in path:
                    native = f"{name} ({path.rsplit('/recorder/', 1)[1]})"
                break
            if native is None and "/recorder/" in line and ".so" in line:
                native = f"{line.split()[1]} (C)"
        if native is not None:
            ours[native] += 1
    return total, ours


def report(label: str, cpu: float, total: int, ours: collections.Counter[str], top: int) -> None:
    share = sum(ours.values()) / max(total, 1)
    err = (share * (1 - share) / max(total, 1)) ** 0.5
    print(f"## {label}: {total} samples, the recorder {100 * share:.2f} % (± {100 * err:.2f})")
    print(f"(the proxy's CPU per 10k events while sampled: {cpu:.3f} s)")
    print()
    print("| function | share of the process's samples |")
    print("|---|---|")
    for name, n in ours.most_common(top):
        print(f"| {name} | {100 * n / total:.2f} % |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child-sim", action="store_true", help=argparse.SUPPRESS)
    traffic = parser.add_mutually_exclusive_group()
    traffic.add_argument("--bedrock", action="store_true", help="bench_overhead --bedrock's load")
    traffic.add_argument(
        "--websocket", action="store_true", help="bench_overhead --websocket's load"
    )
    parser.add_argument("--compare", metavar="DIR", help="also sample this checkout's recorder")
    parser.add_argument("--freq", type=int, default=999, help="samples a second (perf -F)")
    parser.add_argument("--top", type=int, default=15, help="functions listed")
    parser.add_argument("--quick", action="store_true", help="a short load (a smoke run)")
    args = parser.parse_args()
    if args.child_sim:
        child_sim()
        return 0
    if shutil.which("perf") is None:
        print("bench_share: needs Linux's perf (Debian: linux-perf)", file=sys.stderr)
        return 2
    streams, deltas = (10, 20) if args.quick else (100, 200)
    if args.bedrock:
        bench_overhead.TRAFFIC = BEDROCK
    elif args.websocket:
        bench_overhead.TRAFFIC, bench_overhead.OVER_WEBSOCKET = WS_PATHS, True
        streams = 6 if args.quick else STREAMS_WS
    set_affinity(CLIENT_CPU)
    what = "Bedrock" if args.bedrock else "WebSocket" if args.websocket else "the SSE mix"
    print(f"# bench_share: {what}, {streams} streams x {deltas} deltas, perf at {args.freq} Hz")
    print()
    runs = [("this checkout", None)]
    if args.compare:
        runs.append((args.compare, Path(args.compare).resolve()))
    with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp:
        for i, (label, code) in enumerate(runs):
            cpu, data = sample(code, streams, deltas, args.freq, Path(tmp) / f"{i}.data")
            total, ours = attribute(data)
            if total == 0:
                print(f"bench_share: perf took no samples of {label}", file=sys.stderr)
                return 1
            report(label, cpu, total, ours, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
