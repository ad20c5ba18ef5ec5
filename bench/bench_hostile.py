"""A hostile upstream through `recorder proxy`: what it costs, before and after.

Run:

    .venv/bin/python bench/bench_hostile.py --before ../before   # a checkout of an
                                                                # earlier commit, its .venv built
    .venv/bin/python bench/bench_hostile.py --quick              # this tree only, smaller cases

For each recorder (this tree's, and ``--before``'s when given), each case runs
through a fresh ``recorder proxy`` (SQLite, pinned to CPU 0; this process, the
upstream and the clients on CPU 1) on a metered path (``/v1/chat/completions``):

- ``bomb-gzip``, ``bomb-br``, ``bomb-zstd``: an event stream compressed with each
  encoding that decodes to ``--bomb-mib`` MiB (a few KiB to half a MiB on the wire),
  sent in 16 KiB pieces;
- ``big-json``: a JSON answer of ``--json-mib`` MiB with its Content-Length, in
  1 MiB pieces;
- ``lying-type``: ten SSE events half a second apart declared ``text/plain``.

Measured in the same run, for each case:

- the client's first byte: from the request sent to the first byte of the body
  (ms);
- the delay of another stream's events: a chat stream paced at one event per 50 ms
  runs through the same proxy during the case; each event's delay is its arrival
  at its client less its write by the upstream (one process, one clock); the
  largest and the 99th percentile (ms);
- the proxy's resident memory: before the case, its peak (the kernel's high-water
  mark, VmHWM) and after (VmRSS three seconds after the case), MiB.

Nothing is asserted: the figures are printed, one line per (recorder, case).
docs/reliability.md keeps them.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import socket
import statistics
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import brotli

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxybench import VENV_BIN, Proxy, set_affinity

from recorder.proxy.decoding import zstd

MIB = 1 << 20
CHUNK = (
    b'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
)


def _bomb(encoding: str, mib: int) -> bytes:
    if encoding == "gzip":
        c: Any = zlib.compressobj(6, zlib.DEFLATED, 31)
        process, finish = c.compress, c.flush
    elif encoding == "br":
        c = brotli.Compressor(quality=5)
        process, finish = c.process, c.finish
    else:
        c = zstd.ZstdCompressor(level=3)
        process, finish = c.compress, c.flush
    block = b"a" * MIB
    return b"".join([process(b"data: "), *(process(block) for _ in range(mib)), finish()])


class Upstream:
    """Answers each request by its ``case`` query; the paced stream notes when it
    wrote each event."""

    def __init__(self, bomb_mib: int, json_mib: int) -> None:
        self.bombs = {e: _bomb(e, bomb_mib) for e in ("gzip", "br", "zstd")}
        self.json_mib = json_mib
        self.written: list[float] = []  # the paced stream's write times
        self.stop_paced = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            case = target.split("case=", 1)[1] if "case=" in target else ""
            with contextlib.suppress(OSError):  # the client or the proxy went away
                self._send(conn, case)

    def _send(self, conn: socket.socket, case: str) -> None:
        def headers(ctype: str, extra: str = "", length: int | None = None) -> None:
            framing = f"content-length: {length}" if length is not None else "connection: close"
            conn.sendall(
                f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\n{extra}{framing}\r\n\r\n".encode()
            )

        if case.startswith("bomb-"):
            enc = case.split("-", 1)[1]
            bomb = self.bombs[enc]
            headers("text/event-stream", f"content-encoding: {enc}\r\n", len(bomb))
            for i in range(0, len(bomb), 16 * 1024):
                conn.sendall(bomb[i : i + 16 * 1024])
        elif case == "big-json":
            head, tail = b'{"id":"x","object":"chat.completion","choices":[],"pad":"', b'"}'
            total = len(head) + self.json_mib * MIB + len(tail)
            headers("application/json", length=total)
            conn.sendall(head)
            block = b"a" * MIB
            for _ in range(self.json_mib):
                conn.sendall(block)
            conn.sendall(tail)
        elif case == "lying-type":
            headers("text/plain")
            for _ in range(10):
                conn.sendall(CHUNK)
                time.sleep(0.5)
            conn.sendall(b"data: [DONE]\n\n")
        elif case == "paced":
            headers("text/event-stream")
            while not self.stop_paced.is_set():
                self.written.append(time.monotonic())
                conn.sendall(CHUNK)
                time.sleep(0.05)
            conn.sendall(b"data: [DONE]\n\n")


def _post(port: int, case: str) -> tuple[float, int]:
    """The case's request: (ms to the body's first byte, bytes received)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = b'{"model":"gpt-4o","stream":true,"messages":[]}'
    t0 = time.monotonic()
    conn.request("POST", f"/v1/chat/completions?case={case}", body)
    resp = conn.getresponse()
    first = None
    got = 0
    while True:
        data = resp.read1(MIB)
        if not data:
            break
        if first is None:
            first = (time.monotonic() - t0) * 1000.0
        got += len(data)
    conn.close()
    return first if first is not None else float("nan"), got


def _paced(port: int, upstream: Upstream, arrived: list[float]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions?case=paced", b'{"model":"gpt-4o","stream":true}')
    resp = conn.getresponse()
    buf = b""
    while True:
        data = resp.read1(65536)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            _, buf = buf.split(b"\n\n", 1)
            arrived.append(time.monotonic())
    conn.close()


def _memory(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def _p99(values: list[float]) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def run_case(command: list[str], upstream: Upstream, case: str) -> dict[str, float]:
    proxy = Proxy.start("recorder", upstream.url, cpu=0, command=command)
    try:
        time.sleep(1.0)  # settled after start
        _, before = _memory(proxy.proc.pid)
        upstream.written.clear()
        upstream.stop_paced.clear()
        arrived: list[float] = []
        paced = threading.Thread(target=_paced, args=(proxy.port, upstream, arrived))
        paced.start()
        time.sleep(0.5)
        first, _ = _post(proxy.port, case)
        time.sleep(0.5)
        upstream.stop_paced.set()
        paced.join(60)
        peak, _ = _memory(proxy.proc.pid)
        time.sleep(3.0)
        _, after = _memory(proxy.proc.pid)
    finally:
        proxy.stop()
        proxy.cleanup()
    delays = [(a - w) * 1000.0 for w, a in zip(upstream.written, arrived, strict=False)]
    return {
        "first_byte_ms": first,
        "other_max_ms": max(delays, default=float("nan")),
        "other_p99_ms": _p99(delays),
        "rss_before": before,
        "rss_peak": peak,
        "rss_after": after,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--before", type=Path, help="a checkout of an earlier commit, .venv built")
    ap.add_argument("--bomb-mib", type=int, default=2048)
    ap.add_argument("--json-mib", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="smaller cases, this tree only")
    args = ap.parse_args()
    if args.quick:
        args.bomb_mib, args.json_mib, args.before = 64, 20, None
    set_affinity(1)
    upstream = Upstream(args.bomb_mib, args.json_mib)
    trees = [("after", [str(VENV_BIN / "recorder")])]
    if args.before is not None:
        trees.insert(0, ("before", [str(args.before / ".venv" / "bin" / "recorder")]))
    cases = ["bomb-gzip", "bomb-br", "bomb-zstd", "big-json", "lying-type"]
    print(
        f"bomb {args.bomb_mib} MiB decoded; JSON {args.json_mib} MiB; "
        "another stream paced at 20 events/s alongside"
    )
    print(
        f"{'tree':7} {'case':11} {'first byte':>11} {'other max':>10} {'other p99':>10}"
        f" {'RSS before':>11} {'peak':>8} {'after':>8}"
    )
    for name, command in trees:
        for case in cases:
            r = run_case(command, upstream, case)
            print(
                f"{name:7} {case:11} {r['first_byte_ms']:9.0f}ms {r['other_max_ms']:8.0f}ms"
                f" {r['other_p99_ms']:8.0f}ms {r['rss_before']:9.0f}Mi {r['rss_peak']:6.0f}Mi"
                f" {r['rss_after']:6.0f}Mi",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
