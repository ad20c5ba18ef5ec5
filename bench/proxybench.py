"""What the proxy benchmarks share: child processes, the timing simulator, a raw client.

Everything runs on loopback, each party in its own process (no two share a GIL):

- the simulator (``recorder.simulate``), in a child of the bench that also notes,
  per request with an ``x-sim-id``, the ``time.time()`` at which it wrote each SSE
  block (an event or a keepalive comment), each event-stream message (Bedrock), or
  each WebSocket text message (the whole connection's, under its upgrade's id);
- the proxies, started as a user would start them: ``mitmdump -s`` with a
  passthrough addon (the anchor), and ``recorder proxy`` (SQLite, metrics on);
- the client, this process: asyncio, raw HTTP/1.1 (and raw WebSocket frames),
  reading the chunked body and noting when the last byte of each SSE block (or
  event-stream message, or WebSocket message) arrived: the kernel's receive stamp
  (``SO_TIMESTAMPNS``, on the ``time.time()`` scale, one clock for every process),
  so that the client's own scheduling is not in the figure.

Proxies can be pinned to a CPU (``taskset``) so that their CPU time is theirs alone;
their CPU time is read from ``/proc/<pid>/task/*/schedstat`` (nanoseconds, every
thread), their memory from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PASSTHROUGH = Path(__file__).with_name("passthrough_addon.py")
ANCHOR_MASTER = Path(__file__).with_name("anchor_proxy.py")


# -- the simulator child ----------------------------------------------------------


def child_sim() -> None:
    """Run the simulator; note when it writes each SSE block of a request with x-sim-id.

    Protocol on stdin/stdout: the first line out is ``PORT n``; ``dump ID`` answers one
    JSON line with that request's write times (and forgets them); ``ids`` answers the
    ids it has finished requests for; EOF stops it.
    """
    import contextvars

    from recorder.simulate import in_thread, server, ws_frames

    current: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_id", default=None)
    # what an event is on this request: an SSE block, an event-stream message, or a
    # WebSocket text message (counted where the session sends it, not in its frames)
    kind: contextvars.ContextVar[str] = contextvars.ContextVar("kind", default="sse")
    log: dict[str, list[float]] = {}
    lock = threading.Lock()
    orig_handle = server.Simulator._handle
    orig_send = server.Conn.send
    orig_send_text = ws_frames.WebSocket.send_text

    def note(sid: str, n: int) -> None:
        now = time.time()  # the kernel's receive stamps are on this scale
        with lock:
            log.setdefault(sid, []).extend([now] * n)

    async def handle(self: Any, conn: Any, req: Any) -> bool:
        token = current.set(req.headers.get("x-sim-id"))
        how = kind.set(
            "ws" if ws_frames.is_upgrade(req) else "eventstream" if "/model/" in req.path else "sse"
        )
        try:
            return await orig_handle(self, conn, req)
        finally:
            kind.reset(how)
            current.reset(token)

    async def send(self: Any, data: bytes) -> None:
        sid = current.get()
        if sid is not None:
            k = kind.get()
            n = (
                data.count(b"\n\n")
                if k == "sse"
                else eventstream_messages(data)
                if k == "eventstream"
                else 0
            )
            if n:
                note(sid, n)
        await orig_send(self, data)

    async def send_text(self: Any, data: bytes) -> None:
        sid = current.get()
        if sid is not None:
            note(sid, 1)
        await orig_send_text(self, data)

    server.Simulator._handle = handle  # type: ignore[method-assign]
    server.Conn.send = send  # type: ignore[method-assign]
    ws_frames.WebSocket.send_text = send_text  # type: ignore[method-assign]
    with in_thread.run_in_thread(max_sent=100_000) as sim:
        print(f"PORT {sim.port}", flush=True)
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "dump":
                with lock:
                    times = log.pop(arg, [])
                print(json.dumps(times), flush=True)
            elif cmd == "sent":
                rec = sim.sent.get(arg)
                print(json.dumps(None if rec is None else rec.to_dict()), flush=True)


def eventstream_messages(chunk: bytes) -> int:
    """The event-stream messages in one write of the simulator's chunked body (it
    writes each message whole, one a step); 0 for the response head or the last chunk."""
    size, _, rest = chunk.partition(b"\r\n")
    try:
        end = int(size, 16)
    except ValueError:
        return 0  # the response head
    n = at = 0
    while at + 4 <= end:
        at += int.from_bytes(rest[at : at + 4], "big") or end
        n += 1
    return n


@dataclass
class SimChild:
    """The simulator child, spoken to over its stdin/stdout."""

    proc: subprocess.Popen[str]
    port: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, script: str, cpu: int | None) -> SimChild:
        proc = subprocess.Popen(
            [*pin(cpu), sys.executable, script, "--child-sim"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            proc.kill()
            raise RuntimeError(f"the simulator did not start: {line!r}")
        return cls(proc, int(line.split()[1]))

    def ask(self, line: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def write_times(self, sim_id: str) -> list[float]:
        return list(self.ask(f"dump {sim_id}"))

    def sent(self, sim_id: str) -> dict[str, Any] | None:
        result = self.ask(f"sent {sim_id}")
        return result if isinstance(result, dict) else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- proxies ------------------------------------------------------------------------


def pin(cpu: int | None) -> list[str]:
    """``taskset -c CPU`` when pinning is asked for and possible."""
    if cpu is None or shutil.which("taskset") is None or (os.cpu_count() or 1) <= cpu:
        return []
    return ["taskset", "-c", str(cpu)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port} after {timeout} s")


@dataclass
class Proxy:
    """A proxy process: ``mitmdump`` with the passthrough addon, or ``recorder proxy``."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    metrics_port: int | None = None

    @classmethod
    def start(
        cls,
        kind: str,
        upstream: str,
        cpu: int | None,
        extra: Sequence[str] = (),
        command: Sequence[str] | None = None,
        code: Path | None = None,
    ) -> Proxy:
        """``kind``: ``mitmproxy`` (``mitmdump``), ``master`` (mitmproxy's master as
        ``recorder proxy`` builds it, no Dumper: ``anchor_proxy.py``) or
        ``recorder``; ``command`` replaces the ``recorder`` executable (a wrapper
        that runs the same CLI); ``code``: run the ``recorder`` package of that
        checkout instead of this one's (its C extensions built), on this venv."""
        workdir = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
        port = free_port()
        env = {**os.environ, "HOME": str(workdir)}  # mitmproxy's CA in ~/.mitmproxy
        if code is not None:
            env["PYTHONPATH"] = str(code)
        env.pop("RECORDER_DB", None)
        metrics_port = None
        if kind in ("mitmproxy", "master"):
            cmd = [
                *(
                    [str(VENV_BIN / "mitmdump")]
                    if kind == "mitmproxy"
                    else [sys.executable, str(ANCHOR_MASTER)]
                ),
                "--mode",
                f"reverse:{upstream}",
                "--listen-host",
                "127.0.0.1",
                "-p",
                str(port),
                "-s",
                str(PASSTHROUGH),
                # what `recorder proxy` sets: no per-flow console output, warnings only
                *(["--set", "flow_detail=0"] if kind == "mitmproxy" else []),  # (the Dumper's)
                "--set",
                "termlog_verbosity=warn",
            ]
        elif kind == "recorder":
            metrics_port = free_port()
            cmd = [
                *(command or [str(VENV_BIN / "recorder")]),
                "proxy",
                "--mode",
                f"reverse:{upstream}",
                "--listen-port",
                str(port),
                "--db",
                f"sqlite:///{workdir / 'recorder.db'}",
                "--spool-dir",
                str(workdir / "spool"),
                "--metrics-port",
                str(metrics_port),
            ]
        else:
            raise ValueError(kind)
        log = (workdir / "proxy.log").open("wb")
        proc = subprocess.Popen(
            [*pin(cpu), *cmd, *extra],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )
        log.close()
        try:
            wait_listening(port, proc)
            if metrics_port is not None:
                wait_listening(metrics_port, proc)
        except RuntimeError as e:
            proc.kill()
            raise RuntimeError(f"{kind}: {e}; log: {(workdir / 'proxy.log').read_text()}") from e
        return cls(kind, proc, port, workdir, metrics_port)

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.workdir / 'recorder.db'}"

    def cpu_seconds(self) -> float:
        """User + system time of every thread alive now (ns resolution)."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9

    def cpu_seconds_stat(self) -> float:
        """User + system time of the whole process, dead threads included (10 ms ticks)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def metrics(self) -> dict[str, float]:
        """``/metrics``, as ``{"name{labels}": value}`` (recorder only)."""
        assert self.metrics_port is not None
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def metric_sum(self, name: str) -> float:
        return sum(v for k, v in self.metrics().items() if k.split("{", 1)[0] == name)

    def wait_metric(self, name: str, want: float, timeout: float = 30.0) -> float:
        """``metric_sum(name)`` once it reaches ``want`` (or at the timeout): a record
        reaches the metrics a moment after its stream ends."""
        end = time.monotonic() + timeout
        while True:
            value = self.metric_sum(name)
            if value >= want or time.monotonic() > end:
                return value
            time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (the recorder drains its records), then wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


# -- the client -----------------------------------------------------------------------

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")
# Google's generateContent (bench_overhead.py --gemini): the model is in the path
GEMINI = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
# Amazon Bedrock (bench_overhead.py --bedrock): a Claude model's ConverseStream and
# InvokeModelWithResponseStream, the model in the path (URL-encoded, as the AWS SDKs
# send it), the answer AWS's binary event stream
BEDROCK_MODEL = "global.anthropic.claude-sonnet-4-5-20250929-v1:0"
CONVERSE = f"/model/{BEDROCK_MODEL.replace(':', '%3A')}/converse-stream"
INVOKE = f"/model/{BEDROCK_MODEL.replace(':', '%3A')}/invoke-with-response-stream"
BEDROCK = (CONVERSE, INVOKE)
MODELS = {
    "/v1/chat/completions": "gpt-4o",
    "/v1/responses": "gpt-4.1",
    "/v1/messages": "claude-sonnet-4-5",
    GEMINI: "gemini-2.5-flash",
    CONVERSE: BEDROCK_MODEL,
    INVOKE: BEDROCK_MODEL,
}
# what a stream to each path is in the recorder's rows: (endpoint, transport)
RECORDED_AS = {
    "/v1/chat/completions": ("chat.completions", "sse"),
    "/v1/responses": ("responses", "sse"),
    "/v1/messages": ("messages", "sse"),
    GEMINI: ("generate_content", "sse"),
    CONVERSE: ("converse", "eventstream"),
    INVOKE: ("invoke_model", "eventstream"),
}
# a SigV4 header as the AWS SDKs sign a request (the recorder fingerprints its key id)
SIGV4 = (
    "AWS4-HMAC-SHA256 Credential=AKIABENCHEXAMPLE0001/20261206/us-east-1/bedrock/aws4_request,"
    " SignedHeaders=content-type;host;x-amz-date, Signature=" + "0f" * 32
)


def request_body(endpoint: str, model: str) -> bytes:
    if endpoint == "/v1/chat/completions":
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    elif endpoint == "/v1/responses":
        body = {"model": model, "input": "Hi", "stream": True}
    elif endpoint == GEMINI:
        body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    elif endpoint == CONVERSE:
        body = {
            "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
            "inferenceConfig": {"maxTokens": 64_000},
        }
    elif endpoint == INVOKE:
        body = {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 64_000,
            "messages": [{"role": "user", "content": "Hi"}],
        }
    else:
        body = {
            "model": model,
            "max_tokens": 10_000_000,
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": True,
        }
    return json.dumps(body).encode()


@dataclass
class Stream:
    """What the client saw of one stream."""

    sim_id: str
    endpoint: str
    start: float
    end: float = 0.0
    status: int = 0
    arrivals: list[float] = field(default_factory=list)
    chunks: int = 0
    body_bytes: int = 0
    complete: bool = False  # the chunked body ended with its last chunk
    error: str | None = None
    records: int = 1  # the records it should make (a WebSocket connection: its responses)
    recorded_as: tuple[str, str] = ("", "")  # each record's (endpoint, transport)


class SSEBlocks:
    """Counts the SSE blocks completed by each piece of a body (a block ends with a
    blank line, which may straddle two pieces)."""

    def __init__(self) -> None:
        self.last = b""

    def feed(self, piece: bytes) -> int:
        n = (self.last + piece).count(b"\n\n")
        self.last = piece[-1:]
        return n


class EventStreamMessages:
    """Counts the event-stream messages completed by each piece of a body (each
    message starts with its total length, 4 bytes big-endian)."""

    def __init__(self) -> None:
        self.pending = bytearray()

    def feed(self, piece: bytes) -> int:
        self.pending += piece
        n = 0
        while len(self.pending) >= 4:
            total = int.from_bytes(self.pending[:4], "big")
            if total < 16 or len(self.pending) < total:
                break
            del self.pending[:total]
            n += 1
        return n


# Linux: the kernel stamps each packet as it reaches the socket (CLOCK_REALTIME); a
# read returns the stamp with its data. An arrival time taken so is free of the
# client's own scheduling, which on a 2-CPU machine shares a CPU with the simulator.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _recv(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> tuple[bytes, float]:
    """One read, and the kernel's arrival time of its data (``time.time()`` scale)."""
    while True:
        try:
            data, ancdata, _flags, _addr = sock.recvmsg(1 << 18, 256)
            break
        except BlockingIOError:
            fut: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _wake, fut)
            try:
                await fut
            finally:
                loop.remove_reader(sock.fileno())
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
            sec, nsec = struct.unpack("qq", cdata[:16])
            return data, sec + nsec * 1e-9
    return data, time.time()


async def fetch(
    port: int, endpoint: str, model: str, sim_id: str, *, leave_after: int | None = None
) -> Stream:
    """POST a streaming request; note the arrival time of every SSE block (Bedrock:
    of every event-stream message).

    Arrival times are the kernel's receive stamps (``time.time()`` scale), of the read
    that completed the block's HTTP chunk. ``leave_after``: the client resets its
    connection after that many blocks. Faults after a ``+`` in ``model``
    (``gpt-4o+deltas=5``) go to the simulator in its ``x-sim-fault`` header, so the
    proxy sees the plain model name, as in real traffic (a few names, not one per
    stream length: per-model caches, prices and metric labels as in production).
    """
    model, _, faults = model.partition("+")
    body = request_body(endpoint, model)
    key = (
        "x-api-key: sk-ant-bench\r\nanthropic-version: 2023-06-01"
        if endpoint == "/v1/messages"
        else "x-goog-api-key: AIza-bench"
        if endpoint == GEMINI
        else f"Authorization: {SIGV4}\r\nX-Amz-Date: 20261206T062000Z"
        if endpoint in BEDROCK
        else "Authorization: Bearer sk-bench"
    )
    counter = EventStreamMessages() if endpoint in BEDROCK else SSEBlocks()
    head = (
        f"POST {endpoint} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"{key}\r\nx-sim-id: {sim_id}\r\nConnection: close\r\n"
        + (f"x-sim-fault: {faults.replace('+', ',')}\r\n" if faults else "")
        + "\r\n"
    ).encode()
    out = Stream(sim_id, endpoint, time.monotonic())
    out.recorded_as = RECORDED_AS.get(endpoint, ("", ""))
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    buf = bytearray()
    arrivals = out.arrivals
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, head + body)
        while (end_of_head := buf.find(b"\r\n\r\n")) < 0:
            data, _ = await _recv(loop, sock)
            if not data:
                raise ConnectionError("closed before the response headers")
            buf += data
        headers = bytes(buf[:end_of_head])
        del buf[: end_of_head + 4]
        out.status = int(headers.split(b" ", 2)[1])
        if out.status != 200 or b"chunked" not in headers.lower():
            out.error = f"unexpected response: {headers[:200]!r}"
            return out
        stamp = time.time()
        while not out.complete:
            # every whole chunk in the buffer: its blocks arrived with the last read
            while True:
                eol = buf.find(b"\r\n")
                if eol < 0:
                    break
                size = int(bytes(buf[:eol]).split(b";", 1)[0], 16)
                if size == 0:
                    out.complete = True
                    break
                if len(buf) < eol + 2 + size + 2:
                    break
                chunk = bytes(buf[eol + 2 : eol + 2 + size])
                del buf[: eol + 2 + size + 2]
                out.chunks += 1
                out.body_bytes += size
                n = counter.feed(chunk)
                if n:
                    arrivals.extend([stamp] * n)
            if out.complete:
                break
            if leave_after is not None and len(arrivals) >= leave_after:
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                out.error = "left"
                break
            data, stamp = await _recv(loop, sock)
            if not data:
                raise ConnectionError("closed before the last chunk")
            buf += data
    except (OSError, ValueError) as e:
        out.error = f"{type(e).__name__}: {e}"
    finally:
        out.end = time.monotonic()
        sock.close()
    return out


# -- WebSocket: OpenAI's Responses API in WebSocket mode, the Realtime API -------------

WS_RESPONSES = "/v1/responses"
WS_REALTIME = "/v1/realtime?model=gpt-realtime"
WS_PATHS = (WS_RESPONSES, WS_REALTIME)
# the messages that end a response, by path
_WS_ENDS = {
    WS_RESPONSES: (b"response.completed", b"response.failed", b"response.incomplete"),
    WS_REALTIME: (b"response.done",),
}
WS_RECORDED_AS = {WS_RESPONSES: ("responses", "websocket"), WS_REALTIME: ("realtime", "websocket")}
WS_TEXT, WS_CLOSE = 1, 8


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """A client's frame: masked, as a client's must be, with a zero key (XOR with it
    leaves the payload as it is: no work on the client, and none hidden in the proxy)."""
    n = len(payload)
    if n < 126:
        length = bytes((0x80 | n,))
    elif n < 1 << 16:
        length = bytes((0x80 | 126,)) + n.to_bytes(2, "big")
    else:
        length = bytes((0x80 | 127,)) + n.to_bytes(8, "big")
    return bytes((0x80 | opcode,)) + length + b"\0\0\0\0" + payload


class WSMessages:
    """The server's messages (and control frames) completed by each piece of the
    stream, fragments joined: ``(opcode, payload)``."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts = bytearray()
        self.opcode = 0

    def feed(self, piece: bytes) -> list[tuple[int, bytes]]:
        buf = self.buf
        buf += piece
        out: list[tuple[int, bytes]] = []
        while len(buf) >= 2:
            first, n, at = buf[0], buf[1] & 0x7F, 2
            if n == 126:
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < at + n:
                break
            payload = bytes(buf[at : at + n])
            del buf[: at + n]
            opcode = first & 0x0F
            if opcode >= 8:  # a control frame, between a message's fragments or not
                out.append((opcode, payload))
                continue
            if opcode:
                self.opcode = opcode
            self.parts += payload
            if first & 0x80:
                out.append((self.opcode, bytes(self.parts)))
                self.parts.clear()
        return out


def ws_type(message: bytes) -> bytes:
    """A server event's ``type``: its first key, as OpenAI's servers (and the
    simulator) write it."""
    at = message.find(b'"type":"')
    return message[at + 8 : message.find(b'"', at + 8)] if at >= 0 else b""


async def ws_fetch(port: int, path: str, sim_id: str, responses: int, faults: str) -> Stream:
    """One WebSocket connection: ``responses`` responses one after the other (each
    ``response.create`` sent when the previous response has ended), then a close.

    Every text message the server sends is an event: its arrival time is the
    kernel's receive stamp of the read that completed it, as ``fetch`` notes an SSE
    block's. ``faults`` go to the simulator in the upgrade's ``x-sim-fault`` (every
    response of the connection), so the proxy sees plain model names.
    """
    ends = _WS_ENDS[path]
    create = (
        b'{"type":"response.create"}'
        if path == WS_REALTIME
        else b'{"type":"response.create","model":"gpt-5","input":"Hi"}'
    )
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}"
        f"\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer sk-bench-ws\r\n"
        f"x-sim-id: {sim_id}\r\n" + (f"x-sim-fault: {faults}\r\n" if faults else "") + "\r\n"
    ).encode()
    out = Stream(sim_id, path, time.monotonic(), records=responses)
    out.recorded_as = WS_RECORDED_AS[path]
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    buf = bytearray()
    reader = WSMessages()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, head + ws_frame(WS_TEXT, create))
        while (end_of_head := buf.find(b"\r\n\r\n")) < 0:
            data, stamp = await _recv(loop, sock)
            if not data:
                raise ConnectionError("closed before the upgrade")
            buf += data
        out.status = int(bytes(buf[:end_of_head]).split(b" ", 2)[1])
        if out.status != 101:
            out.error = f"unexpected response: {bytes(buf[:200])!r}"
            return out
        got = reader.feed(bytes(buf[end_of_head + 4 :]))
        ended = 0
        while True:
            for opcode, message in got:
                if opcode == WS_CLOSE:
                    raise ConnectionError(f"closed by the server after {ended} responses")
                if opcode != WS_TEXT:
                    continue
                out.arrivals.append(stamp)
                out.body_bytes += len(message)
                if ws_type(message) in ends:
                    ended += 1
                    if ended < responses:
                        await loop.sock_sendall(sock, ws_frame(WS_TEXT, create))
            if ended >= responses:
                break
            data, stamp = await _recv(loop, sock)
            if not data:
                raise ConnectionError(f"closed after {ended} responses")
            got = reader.feed(data)
        # a client's close: the server answers with its own and ends the connection
        await loop.sock_sendall(sock, ws_frame(WS_CLOSE, (1000).to_bytes(2, "big")))
        while data:
            data, _ = await asyncio.wait_for(_recv(loop, sock), 30)
            if any(opcode == WS_CLOSE for opcode, _ in reader.feed(data)):
                break
        out.complete = True
    except (OSError, ValueError, TimeoutError) as e:
        out.error = f"{type(e).__name__}: {e}"
    finally:
        out.end = time.monotonic()
        sock.close()
    return out


# -- figures ------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def median_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def exit_status(failures: Sequence[str], limit: int = 30) -> int:
    """Print what failed (if anything) and return the script's exit status."""
    if not failures:
        return 0
    print()
    print("FAILED:")
    for f in failures[:limit]:
        print(f"  {f}")
    return 1


def set_affinity(cpu: int | None) -> None:
    """Pin this process (the client) to one CPU, when asked and possible."""
    if cpu is not None and (os.cpu_count() or 1) > cpu and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
