"""The simulator's HTTP/1.1 server: asyncio streams, hand-written framing.

Theory of operation
-------------------
One task per connection reads requests (keep-alive by default, ``Connection:
close`` honoured both ways) and answers each one in three steps:

1. plan: read the body into a :class:`~recorder.simulate.content.Prompt`,
   parse the faults (defaults, model suffix, ``x-sim-fault`` header), choose
   the answer and build the protocol's events (:mod:`~recorder.simulate.protocols`);
2. script: lay the events out in time as a list of :class:`Step` s: waits
   (``delay``, ``ttft``, ``stall``...) become sleeps, and a ``: hopbase-keepalive``
   comment falls at every multiple of the keepalive interval on that planned
   timeline (counted from the headers), between events as a gateway writes
   them. Keepalives thus depend on the plan, not on the clock: the same
   request gives the same bytes;
3. run: write each step (compressed and framed), stop early where a cut fault
   says so, and fold every event fully written into the request's
   :class:`SentRecord`, the ground truth that end-to-end tests compare with the
   recorder's record.

Waits watch the client: if it goes away, the response stops and the record
says ``client_disconnect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http
import socket
import ssl
import struct
import termios
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from recorder.simulate import wire
from recorder.simulate.content import READERS, BadRequest, Ids, choose
from recorder.simulate.faults import LINE_ENDS, FaultError, Faults, parse_faults
from recorder.simulate.protocols import SimEvent, http_error_body, plan

KEEPALIVE_COMMENT = b": hopbase-keepalive"
MAX_BODY = 32 * 1024 * 1024
MAX_HEAD = 64 * 1024
POLL_S = 0.05  # how often a wait looks for a vanished client
RST_FLUSH_S = 1.0  # how long a reset waits for the kernel to send what was written
ENDPOINTS = ("chat.completions", "responses", "messages")
REASONS = {529: "Site Overloaded"}
_PRIVATE = frozenset({"done", "t0", "body"})


class ClientGone(Exception):
    """The client closed or reset the connection."""


class BadHTTP(Exception):
    """A request the server cannot parse; answered with ``status`` and closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class SentRecord:
    """What the simulator did for one request: the ground truth.

    Counts cover only what was fully written to the socket: an event cut in
    half (``midevent``) is not counted. ``outcome`` is the outcome a correct
    recorder should find (docs/record.md, "Outcomes"); ``transport`` says how the
    connection ended. ``usage`` is the last usage the wire carried, normalised
    (``None``: none was sent); ``planned_usage`` what the whole response would
    have reported. ``output_tokens_sent`` applies the token rule (one per
    non-empty output delta) to what was sent; ``hidden`` reasoning tokens come
    on top.
    """

    request_id: str
    endpoint: str
    method: str
    path: str
    requested_model: str | None = None
    model: str | None = None
    faults: str = ""
    streamed: bool = False
    http_status: int | None = None
    response_id: str | None = None
    content_encoding: str | None = None
    framing: str | None = None
    outcome: str = "pending"
    transport: str = "pending"
    terminal: str | None = None
    finish_reason: str | None = None
    planned_finish_reason: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    events: int = 0
    planned_events: int = 0
    keepalives: int = 0
    output_deltas: int = 0
    output_chars: int = 0
    output_tokens_sent: int = 0
    hidden: int = 0
    tool_calls: int = 0
    text: str = ""
    usage: dict[str, int | None] | None = None
    planned_usage: dict[str, int | None] | None = None
    body_bytes: int = 0
    headers_ms: float | None = None
    first_event_ms: float | None = None
    first_output_ms: float | None = None
    duration_ms: float | None = None
    finished: bool = False
    t0: float = 0.0
    # the request's W3C trace context header as it arrived (a proxy must not touch it)
    traceparent: str | None = None
    # with Simulator(keep_bodies=True): the body bytes written, as on the wire but
    # without the chunked framing (compressed if compressed); not in to_dict
    body: bytearray | None = field(default=None, repr=False)
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``GET /_sim/sent/<id>``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _PRIVATE}

    def _ms(self) -> float:
        return round((time.monotonic() - self.t0) * 1000.0, 3)


@dataclass(slots=True)
class Step:
    """One write of the script, after sleeping ``delay`` seconds."""

    delay: float
    raw: bytes
    kind: str  # event | keepalive | end
    event: SimEvent | None = None
    pause: float = 0.0  # split: the seconds between the two halves of the event


@dataclass(slots=True)
class Request:
    """A parsed HTTP request."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.split("?", 1)[0]

    def keep_alive(self) -> bool:
        """Whether the client wants the connection kept open."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


class Conn:
    """One client connection: reading, writing, noticing the client left."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.bytewise: float | None = None
        self.written = 0

    def gone(self) -> bool:
        """True once the client closed or reset its side."""
        r = self.reader
        return r.at_eof() or r.exception() is not None or self.writer.transport.is_closing()

    async def send(self, data: bytes) -> None:
        """Write raw bytes (one byte per write with ``bytewise``)."""
        if not data:
            return
        try:
            if self.bytewise is None:
                self.writer.write(data)
                await self.writer.drain()
            else:
                for i in range(len(data)):
                    self.writer.write(data[i : i + 1])
                    await self.writer.drain()
                    if self.bytewise:
                        await asyncio.sleep(self.bytewise)
        except (ConnectionError, OSError) as e:
            raise ClientGone from e
        if self.writer.transport.is_closing():
            raise ClientGone
        self.written += len(data)

    async def sleep(self, seconds: float) -> None:
        """Sleep, but give up as soon as the client goes away."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while True:
            if self.gone():
                raise ClientGone
            left = end - loop.time()
            if left <= 0:
                return
            await asyncio.sleep(min(left, POLL_S))

    async def reset(self) -> None:
        """Abort with a TCP RST, once the kernel has sent what we wrote."""
        sock = self.writer.get_extra_info("socket")
        loop = asyncio.get_running_loop()
        end = loop.time() + RST_FLUSH_S
        transport = self.writer.transport
        while transport.get_write_buffer_size() and loop.time() < end:
            await asyncio.sleep(0.005)
        if sock is not None:
            while loop.time() < end:
                try:
                    buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                    if struct.unpack("i", buf)[0] == 0:
                        break
                except OSError:
                    await asyncio.sleep(0.05)
                    break
                await asyncio.sleep(0.005)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def close(self) -> None:
        """Close (FIN) after flushing."""
        with contextlib.suppress(Exception):
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)


async def read_request(conn: Conn) -> Request | None:
    """The next request on the connection, or None at a clean end."""
    reader = conn.reader
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise BadHTTP(400, "incomplete request head") from e
    except asyncio.LimitOverrunError as e:
        raise BadHTTP(431, "request head too large") from e
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadHTTP(400, f"bad request line {lines[0]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadHTTP(400, f"bad header line {line!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if headers.get("expect", "").lower() == "100-continue":
        await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = b""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise BadHTTP(400, "bad Content-Length") from None
            if length < 0 or length > MAX_BODY:
                raise BadHTTP(413, "request body too large")
            body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise ClientGone from e
    return Request(method, target, version, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadHTTP(400, "bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise BadHTTP(413, "request body too large")
        body += (await reader.readexactly(size + 2))[:-2]


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = REASONS.get(status, "Error")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def endpoint_of(path: str) -> str | None:
    """The protocol a request path speaks, by its ending (any prefix is fine)."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat.completions"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    return None


class Simulator:
    """A local LLM upstream speaking the three protocols, faults on request.

    Use it in-process (``await sim.start()`` ... ``await sim.stop()``, or
    ``async with``), or from sync code with :func:`run_in_thread`. ``sent``
    maps each request id (the ``x-sim-request`` response header, also the
    provider's ``x-request-id`` / ``request-id``) to its :class:`SentRecord`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
        *,
        default_faults: str = "",
        max_sent: int = 10_000,
        log: Callable[[SentRecord], None] | None = None,
        keep_bodies: bool = False,
    ) -> None:
        parse_faults(default_faults)  # fail now, not on the first request
        self.host = host
        self.port = port
        self.tls = tls
        self.default_faults = default_faults
        self.max_sent = max_sent
        self.log = log
        self.keep_bodies = keep_bodies
        self.sent: OrderedDict[str, SentRecord] = OrderedDict()
        self.requests = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_id: str | None = None

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> int:
        """Listen; return the actual port."""
        self.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, ssl=self.tls, limit=MAX_HEAD
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        """Stop listening and drop every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for conn in list(self._conns):
            conn.writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5.0)

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """``http://host:port`` (``https`` with TLS): the Anthropic base URL."""
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The OpenAI SDK's ``base_url`` (``…/v1``)."""
        return self.url + "/v1"

    # --- ground truth -------------------------------------------------------

    def last(self) -> SentRecord | None:
        """The most recent request's record (maybe still running: see :meth:`wait_sent`)."""
        return self.sent.get(self._last_id) if self._last_id is not None else None

    async def wait_sent(self, request_id: str, timeout: float = 10.0) -> SentRecord:
        """The record of ``request_id`` once its response has ended."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            rec = self.sent.get(request_id)
            if rec is not None and rec.finished:
                return rec
            if loop.time() >= end:
                raise TimeoutError(f"no finished record for {request_id!r}")
            await asyncio.sleep(0.005)

    def wait_sent_blocking(self, request_id: str, timeout: float = 10.0) -> SentRecord:
        """As :meth:`wait_sent`, from another thread (never from the loop's)."""
        end = time.monotonic() + timeout
        while True:
            rec = self.sent.get(request_id)
            if rec is not None:
                if rec.done.wait(max(end - time.monotonic(), 0.0)):
                    return rec
                raise TimeoutError(f"record {request_id!r} did not finish")
            if time.monotonic() >= end:
                raise TimeoutError(f"no record for {request_id!r}")
            time.sleep(0.005)

    def _register(self, rec: SentRecord) -> None:
        self.sent[rec.request_id] = rec
        self._last_id = rec.request_id
        self.sent.move_to_end(rec.request_id)
        while len(self.sent) > self.max_sent:
            self.sent.popitem(last=False)

    # --- connections --------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(reader, writer)
        self._conns.add(conn)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is None:
            # drain() then returns only once the kernel has every byte: writes are
            # as prompt as the script says. (A TLS transport never reports an
            # empty buffer to a zero limit, so it keeps the default.)
            writer.transport.set_write_buffer_limits(0)
        try:
            while True:
                try:
                    req = await read_request(conn)
                except BadHTTP as e:
                    body = orjson.dumps(
                        {"error": {"message": str(e), "type": "invalid_request_error"}}
                    )
                    headers = [
                        ("content-type", "application/json"),
                        ("content-length", str(len(body))),
                        ("connection", "close"),
                    ]
                    await conn.send(_head(e.status, headers) + body)
                    break
                if req is None:
                    break
                if not await self._handle(conn, req):
                    break
        except (ClientGone, ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.discard(conn)
            self._tasks.discard(task)
            if not writer.transport.is_closing():
                await conn.close()
            else:
                writer.transport.abort()

    async def _handle(self, conn: Conn, req: Request) -> bool:
        """Answer one request; return whether the connection stays open."""
        conn.bytewise = None  # faults are per request, the connection may be reused
        path = req.path
        if path.startswith("/_sim/"):
            return await self._internal(conn, req)
        endpoint = endpoint_of(path)
        if endpoint is None:
            doc = {
                "error": {
                    "message": f"Unknown path {path}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "unknown_url",
                }
            }
            return await self._json(conn, req, 404, doc)
        if req.method != "POST":
            doc = {
                "error": {
                    "message": f"Method {req.method} not allowed",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "method_not_allowed",
                }
            }
            return await self._json(conn, req, 405, doc)
        self.requests += 1
        rid = req.headers.get("x-sim-id") or f"req_sim{self.requests:06d}"
        rec = SentRecord(rid, endpoint, req.method, path, t0=time.monotonic())
        rec.traceparent = req.headers.get("traceparent")
        if self.keep_bodies:
            rec.body = bytearray()
        self._register(rec)
        try:
            return await self._simulate(conn, req, rec)
        except ClientGone:
            if not rec.finished:
                rec.transport = "client_gone"
            return False
        except asyncio.CancelledError:
            if not rec.finished:
                rec.transport = "server_stopped"
            raise
        finally:
            self._finish(rec)

    def _finish(self, rec: SentRecord) -> None:
        if rec.finished:
            return
        if rec.http_status is not None and rec.http_status >= 400:
            rec.outcome = "http_error"
        elif rec.terminal is not None:
            rec.outcome = rec.terminal
        elif rec.transport == "client_gone":
            rec.outcome = "client_disconnect"
        elif rec.transport == "fin" and rec.framing == "eof":
            rec.outcome = "truncated"
        elif rec.transport in ("rst", "fin", "drop", "drop_rst", "server_stopped"):
            rec.outcome = "upstream_disconnect"
        else:
            rec.outcome = "truncated"
        rec.duration_ms = rec._ms()
        rec.finished = True
        rec.done.set()
        if self.log is not None:
            with contextlib.suppress(Exception):
                self.log(rec)

    async def _internal(self, conn: Conn, req: Request) -> bool:
        path = req.path.rstrip("/")
        if path == "/_sim/health":
            doc: Any = {
                "status": "ok",
                "endpoints": ["/v1/chat/completions", "/v1/responses", "/v1/messages"],
                "encodings": list(wire.available()),
                "requests": self.requests,
            }
            return await self._json(conn, req, 200, doc)
        if path == "/_sim/sent":
            return await self._json(conn, req, 200, {"ids": list(self.sent)})
        if path.startswith("/_sim/sent/"):
            rec = self.sent.get(path[len("/_sim/sent/") :])
            if rec is None:
                return await self._json(conn, req, 404, {"error": {"message": "no such request"}})
            return await self._json(conn, req, 200, rec.to_dict())
        return await self._json(conn, req, 404, {"error": {"message": f"Unknown path {path}"}})

    async def _json(self, conn: Conn, req: Request, status: int, doc: Any) -> bool:
        body = orjson.dumps(doc)
        keep = req.keep_alive()
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            ("connection", "keep-alive" if keep else "close"),
        ]
        await conn.send(_head(status, headers) + body)
        return keep

    # --- one simulated request ----------------------------------------------

    async def _simulate(self, conn: Conn, req: Request, rec: SentRecord) -> bool:
        endpoint = rec.endpoint
        try:
            doc = orjson.loads(req.body) if req.body else None
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            return await self._error_status(
                conn,
                req,
                rec,
                Faults(),
                400,
                None,
                "invalid_request_error" if endpoint == "messages" else "invalid_prompt",
                "the request body is not a JSON object",
            )
        model = doc.get("model")
        rec.requested_model = model if isinstance(model, str) else None
        try:
            prompt = READERS[endpoint](doc)
        except BadRequest as e:
            return await self._error_status(conn, req, rec, Faults(), 400, None, None, str(e))
        rec.model = prompt.model
        rec.streamed = prompt.stream
        try:
            faults = parse_faults(self.default_faults)
            parse_faults(prompt.model_faults, sep="+", into=faults)
            parse_faults(req.headers.get("x-sim-fault", ""), into=faults)
        except FaultError as e:
            return await self._error_status(conn, req, rec, Faults(), 400, None, None, str(e))
        rec.faults = faults.describe()
        conn.bytewise = faults.bytewise
        ids = Ids(prompt.seed() + endpoint.encode() + req.headers.get("x-sim-id", "").encode())
        content = choose(prompt, faults, ids)
        reply, events = plan(prompt, content, ids, faults)
        rec.response_id = reply.response_id
        rec.planned_finish_reason = reply.finish_reason
        rec.planned_usage = reply.usage.to_dict()
        rec.hidden = content.hidden

        if faults.drop is not None:
            await conn.sleep(faults.header_delay)
            rec.transport = "drop" if faults.drop == "fin" else "drop_rst"
            self._finish(rec)
            if faults.drop == "rst":
                await conn.reset()
            else:
                await conn.close()
            return False
        if faults.status is not None:
            await conn.sleep(faults.header_delay)
            return await self._error_status(
                conn, req, rec, faults, faults.status, faults.retry_after, faults.error_code, None
            )

        coding = "identity"
        if faults.compress == "auto":
            coding = wire.negotiate(req.headers.get("accept-encoding"))
        elif faults.compress is not None:
            coding = faults.compress
        if coding not in wire.available():
            return await self._error_status(
                conn, req, rec, Faults(), 400, None, None, f"content coding {coding!r} unavailable"
            )
        framing = faults.framing or ("chunked" if prompt.stream else "length")
        if framing == "chunked" and req.version == "HTTP/1.0":
            framing = "eof"
        rec.content_encoding = coding
        rec.framing = framing
        line_end = LINE_ENDS[faults.line_end].encode()

        if prompt.stream:
            rec.planned_events = len(events)
            steps, cut_index = self._script(events, faults, line_end)
        else:
            indent = endpoint != "messages"
            raw = orjson.dumps(reply.body.obj, option=orjson.OPT_INDENT_2 if indent else 0)
            steps = [Step(faults.body_delay, raw, "body", reply.body), Step(0.0, b"", "end")]
            cut_index = 0 if faults.cut is not None else None
        if faults.bom:
            first = steps[0]
            first.raw = b"\xef\xbb\xbf" + first.raw

        keep = req.keep_alive() and not faults.close and framing != "eof" and cut_index is None
        ctype = "text/event-stream; charset=utf-8" if prompt.stream else "application/json"
        headers = [("content-type", ctype)]
        if prompt.stream:
            headers.append(("cache-control", "no-cache"))
        if endpoint == "messages":
            headers.append(("request-id", rec.request_id))
        else:
            headers += [("x-request-id", rec.request_id), ("openai-version", "2020-10-01")]
        headers.append(("x-sim-request", rec.request_id))
        if coding != "identity":
            headers.append(("content-encoding", coding))
        if framing == "chunked":
            headers.append(("transfer-encoding", "chunked"))
        elif framing == "length":
            probe = wire.Encoder(coding)
            total = sum(len(probe.piece(s.raw)) for s in steps if s.kind != "end")
            headers.append(("content-length", str(total + len(probe.finish()))))
        headers.append(("connection", "keep-alive" if keep else "close"))
        headers.append(("server", "recorder-simulate"))

        # A JSON answer is computed before its headers: the model's time shows there.
        head_wait = faults.header_delay
        if not prompt.stream:
            head_wait += faults.ttft + faults.stall
        await conn.sleep(head_wait)
        await conn.send(_head(200, headers))
        rec.http_status = 200
        rec.headers_ms = rec._ms()
        head_bytes = conn.written
        encoder = wire.Encoder(coding)

        kept = rec.body

        async def body(data: bytes) -> None:
            if not data:
                return
            if kept is not None:
                # before the write: a client may have read it before send() returns
                kept.extend(data)
            if framing != "chunked":
                await conn.send(data)
            elif conn.bytewise is None:
                await conn.send(wire.chunk(data))
            else:
                for i in range(len(data)):
                    await conn.send(wire.chunk(data[i : i + 1]))

        for index, step in enumerate(steps):
            if step.delay:
                await conn.sleep(step.delay)
            if index == cut_index:
                partial = b""
                if step.kind == "body" or (faults.midevent and step.kind == "event"):
                    partial = step.raw[: len(step.raw) // 2]
                if partial:
                    await body(encoder.piece(partial))
                rec.body_bytes = conn.written - head_bytes
                rec.transport = faults.cut or "rst"
                self._finish(rec)
                if faults.cut == "rst":
                    await conn.reset()
                else:
                    await conn.close()
                return False
            if step.kind == "end":
                break
            if step.pause:
                half = len(step.raw) // 2
                await body(encoder.piece(step.raw[:half]))
                await conn.sleep(step.pause)
                await body(encoder.piece(step.raw[half:]))
            else:
                await body(encoder.piece(step.raw))
            self._account(rec, step)
        await body(encoder.finish())
        if framing == "chunked":
            await conn.send(wire.LAST_CHUNK)
        rec.body_bytes = conn.written - head_bytes
        rec.transport = "complete"
        self._finish(rec)
        if not keep:
            await conn.close()
        return keep

    def _script(
        self, events: list[SimEvent], faults: Faults, line_end: bytes
    ) -> tuple[list[Step], int | None]:
        """Lay the events out in time; the index of the step where a cut falls."""
        steps: list[Step] = []
        keepalive = KEEPALIVE_COMMENT + line_end + line_end
        clock = 0.0  # planned seconds since the headers
        due = 1  # the next keepalive is due at due * interval

        def wait_then(seconds: float, step: Step) -> None:
            nonlocal clock, due
            interval = faults.keepalive
            end = clock + seconds
            last = clock
            while interval is not None and due * interval < end:
                steps.append(Step(due * interval - last, keepalive, "keepalive"))
                last = due * interval
                due += 1
            step.delay = end - last
            steps.append(step)
            clock = end

        first_output = next((i for i, e in enumerate(events) if e.tokens), None)
        stall_at = faults.stall_at
        if stall_at is None and faults.stall:
            stall_at = first_output + 1 if first_output is not None else 1
        split_at = faults.split_at
        if split_at is None and faults.split is not None:
            split_at = first_output if first_output is not None else 0
        event_steps: list[int] = []
        for i, ev in enumerate(events):
            wait = faults.body_delay if i == 0 else faults.delay
            if i == first_output:
                wait += faults.ttft
            if i == stall_at:
                wait += faults.stall
            wait_then(wait, Step(0.0, ev.encode(line_end), "event", ev))
            event_steps.append(len(steps) - 1)
            if i == split_at and faults.split:
                steps[-1].pause = faults.split
                clock += faults.split  # inside the event: no keepalive falls there
        tail = faults.stall if stall_at is not None and stall_at >= len(events) else 0.0
        wait_then(tail, Step(0.0, b"", "end"))
        cut_index: int | None = None
        if faults.cut is not None:
            k = faults.cut_after
            cut_index = event_steps[k] if k < len(event_steps) else len(steps) - 1
        return steps, cut_index

    def _account(self, rec: SentRecord, step: Step) -> None:
        if step.kind == "keepalive":
            rec.keepalives += 1
            return
        ev = step.event
        if ev is None:
            return
        if step.kind == "event":
            rec.events += 1
            if rec.first_event_ms is None:
                rec.first_event_ms = rec._ms()
        if ev.output:
            rec.output_chars += len(ev.output)
            rec.text += ev.output
        if ev.tokens:
            if step.kind == "event":
                rec.output_deltas += 1
            rec.output_tokens_sent += ev.tokens
            if rec.first_output_ms is None:
                rec.first_output_ms = rec._ms()
        rec.tool_calls += ev.tool_calls
        if ev.finish_reason and rec.finish_reason is None:
            rec.finish_reason = ev.finish_reason
        if ev.usage is not None:
            rec.usage = ev.usage.to_dict()
        if ev.error is not None and rec.error_type is None:
            rec.error_type, rec.error_code, rec.error_message = ev.error
        if ev.terminal is not None and rec.terminal is None:
            rec.terminal = ev.terminal

    async def _error_status(
        self,
        conn: Conn,
        req: Request,
        rec: SentRecord,
        faults: Faults,
        status: int,
        retry_after: float | None,
        code: str | None,
        message: str | None,
    ) -> bool:
        """An HTTP error status with the provider's JSON error body."""
        doc, error_fields = http_error_body(rec.endpoint, status, code, rec.request_id)
        if message is not None:
            doc["error"]["message"] = message
            error_fields = (error_fields[0], error_fields[1], message)
        indent = rec.endpoint != "messages"
        raw = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0) + b"\n"
        coding = "identity"
        if faults.compress == "auto":
            coding = wire.negotiate(req.headers.get("accept-encoding"))
        elif faults.compress in wire.available():
            coding = faults.compress
        encoder = wire.Encoder(coding)
        payload = encoder.piece(raw) + encoder.finish()
        keep = req.keep_alive() and not faults.close
        headers = [("content-type", "application/json")]
        if rec.endpoint == "messages":
            headers.append(("request-id", rec.request_id))
        else:
            headers.append(("x-request-id", rec.request_id))
        headers.append(("x-sim-request", rec.request_id))
        if retry_after is not None or status == 429:
            headers.append(("retry-after", f"{retry_after if retry_after is not None else 1:g}"))
        if coding != "identity":
            headers.append(("content-encoding", coding))
        headers.append(("content-length", str(len(payload))))
        headers.append(("connection", "keep-alive" if keep else "close"))
        headers.append(("server", "recorder-simulate"))
        await conn.send(_head(status, headers))
        rec.http_status = status
        rec.headers_ms = rec._ms()
        rec.content_encoding = coding
        rec.framing = "length"
        rec.error_type, rec.error_code, rec.error_message = error_fields
        if rec.body is not None:
            rec.body.extend(payload)
        await conn.send(payload)
        rec.body_bytes = len(payload)
        rec.transport = "complete"
        self._finish(rec)
        if not keep:
            await conn.close()
        return keep


@contextlib.contextmanager
def run_in_thread(
    host: str = "127.0.0.1",
    port: int = 0,
    tls: ssl.SSLContext | None = None,
    **kwargs: Any,
) -> Iterator[Simulator]:
    """Run a :class:`Simulator` on its own event loop in a daemon thread.

    ``with run_in_thread() as sim: sim.port`` — the simulator is listening
    inside the block and stopped (every connection dropped) after it.
    """
    sim = Simulator(host, port, tls, **kwargs)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    errors: list[BaseException] = []
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            await sim.start()
        except BaseException as e:
            errors.append(e)
            started.set()
            return
        started.set()
        try:
            await stop.wait()
        finally:
            await sim.stop()

    thread = threading.Thread(
        target=loop.run_until_complete, args=(main(),), name="recorder-simulate", daemon=True
    )
    thread.start()
    if not started.wait(10.0):
        raise TimeoutError("the simulator did not start")
    if errors:
        thread.join(5.0)
        loop.close()
        raise errors[0]
    try:
        yield sim
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(10.0)
        if not thread.is_alive():
            loop.close()
