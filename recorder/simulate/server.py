"""The simulator's server: connections, routing, and one simulated request.

Theory of operation
-------------------
One task per connection reads requests (keep-alive by default, ``Connection:
close`` honoured both ways; :mod:`~recorder.simulate.http1`) and answers each one
in three steps:

1. plan: read the body into a :class:`~recorder.simulate.prompts.Prompt`,
   parse the faults (defaults, model suffix, ``x-sim-fault`` header), choose
   the answer (:mod:`~recorder.simulate.content`) and build the protocol's
   events (:mod:`~recorder.simulate.protocols`);
2. script: lay the events out in time as a list of steps
   (:mod:`~recorder.simulate.script`, the pure scheduler): waits become sleeps,
   and keepalives fall on the planned timeline, so the same request gives the
   same bytes;
3. run: write each step (compressed and framed; :mod:`~recorder.simulate.respond`),
   stop early where a cut fault says so, and fold every event fully written into
   the request's :class:`~recorder.simulate.sent.SentRecord`, the ground truth
   that end-to-end tests compare with the recorder's record.

Waits watch the client: if it goes away, the response stops and the record
says ``client_disconnect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from recorder.simulate import wire
from recorder.simulate.content import Ids, choose
from recorder.simulate.faults import LINE_ENDS, FaultError, Faults, parse_faults
from recorder.simulate.http1 import (
    MAX_HEAD,
    BadHTTP,
    ClientGone,
    Conn,
    Request,
    read_request,
    status_head,
)
from recorder.simulate.prompts import READERS, BadRequest, Prompt, endpoint_of, request_document
from recorder.simulate.protocols import BEDROCK, Reply, SimEvent, plan
from recorder.simulate.respond import Body, negotiated_coding, write_error_status, write_response
from recorder.simulate.script import Step, script
from recorder.simulate.sent import SentRecord, outcome_of
from recorder.simulate.ws_frames import is_upgrade
from recorder.simulate.ws_session import WebSocketSession, websocket_endpoint

__all__ = ["Conn", "SentRecord", "Simulator", "endpoint_of"]


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
        # how many requests of each body came (by its digest; the last max_sent):
        # a retry sends the same body again, and fail_first counts it
        self._bodies: OrderedDict[bytes, int] = OrderedDict()
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
        try:
            self._server = await asyncio.start_server(
                self._connection, self.host, self.port, ssl=self.tls, limit=MAX_HEAD
            )
        except OSError as e:
            # asyncio words it "[Errno 98] error while attempting to bind on address
            # (...): [errno 98] address already in use": the reason once is enough
            if e.errno is None:
                raise
            raise OSError(e.errno, os.strerror(e.errno)) from None
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
                    await conn.send(status_head(e.status, headers) + body)
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
        if is_upgrade(req) and websocket_endpoint(path) is not None:
            return await self._websocket(conn, req, websocket_endpoint(path) or "")
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

    async def _websocket(self, conn: Conn, req: Request, endpoint: str) -> bool:
        """A WebSocket connection (``recorder.simulate.ws_session``): its responses,
        each one request of the ground truth; the connection ends with it."""

        def new_id() -> str:
            self.requests += 1
            return f"req_sim{self.requests:06d}"

        session = WebSocketSession(
            conn,
            req,
            endpoint,
            default_faults=self.default_faults,
            new_id=new_id,
            register=self._register,
            finish=self._finish,
        )
        await session.run()
        return False

    def _finish(self, rec: SentRecord) -> None:
        if rec.finished:
            return
        rec.outcome = outcome_of(rec)
        rec.duration_ms = rec.elapsed_ms()
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
                "endpoints": [
                    "/v1/chat/completions",
                    "/v1/responses",
                    "/v1/messages",
                    "/model/{modelId}/converse-stream",
                    "/model/{modelId}/converse",
                    "/model/{modelId}/invoke-with-response-stream",
                    "/model/{modelId}/invoke",
                    "/v1beta/models/{model}:streamGenerateContent",
                    "/v1beta/models/{model}:generateContent",
                    "/v1beta/interactions",
                ],
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
        await conn.send(status_head(status, headers) + body)
        return keep

    # --- one simulated request ----------------------------------------------
    # --- one simulated request ----------------------------------------------

    async def _simulate(self, conn: Conn, req: Request, rec: SentRecord) -> bool:
        planned = self._plan(req, rec)
        if isinstance(planned, _Refused):
            return await self._error_status(
                conn, req, rec, Faults(), 400, planned.code, planned.why
            )
        prompt, faults, reply, events = planned
        conn.bytewise = faults.bytewise
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
                conn, req, rec, faults, faults.status, faults.error_code, None
            )
        coding = negotiated_coding(faults, req)
        if coding not in wire.available():
            why = f"content coding {coding!r} unavailable"
            return await self._error_status(conn, req, rec, Faults(), 400, None, why)
        body = self._body(req, rec, prompt, faults, reply, events, coding)
        # A JSON answer is computed before its headers: the model's time shows there.
        head_wait = faults.header_delay
        if not prompt.stream:
            head_wait += faults.ttft + faults.stall
        return await write_response(conn, rec, body, faults, head_wait, self._finish)

    def _plan(
        self, req: Request, rec: SentRecord
    ) -> tuple[Prompt, Faults, Reply, list[SimEvent]] | _Refused:
        """Read the request, parse its faults, choose the answer and its events."""
        endpoint = rec.endpoint
        doc = request_document(endpoint, req.body, req.path, req.target)
        if doc is None:
            code = "invalid_request_error" if endpoint == "messages" else "invalid_prompt"
            return _Refused("the request body is not a JSON object", code)
        model = doc.get("model")
        rec.requested_model = model if isinstance(model, str) else None
        try:
            prompt = READERS[endpoint](doc)
        except BadRequest as e:
            return _Refused(str(e))
        rec.model = prompt.model
        rec.streamed = prompt.stream
        try:
            faults = parse_faults(self.default_faults)
            parse_faults(prompt.model_faults, sep="+", into=faults)
            parse_faults(req.headers.get("x-sim-fault", ""), into=faults)
            if endpoint in BEDROCK:  # a binary stream: no comment lines, no BOM
                faults.keepalive = None
                faults.bom = False
        except FaultError as e:
            return _Refused(str(e))
        rec.faults = faults.describe()
        rec.attempt = self._attempt(endpoint, req.path, req.body)
        if faults.fail_first is not None and rec.attempt > faults.fail_first:
            faults.clear_failures()
        ids = Ids(prompt.seed() + endpoint.encode() + req.headers.get("x-sim-id", "").encode())
        content = choose(prompt, faults, ids)
        reply, events = plan(prompt, content, ids, faults)
        rec.response_id = reply.response_id
        rec.planned_finish_reason = reply.finish_reason
        rec.planned_usage = reply.usage.to_dict()
        rec.hidden = content.hidden
        return prompt, faults, reply, events

    def _attempt(self, endpoint: str, path: str, body: bytes) -> int:
        """This request's number among the requests of the same endpoint, path (Bedrock
        and Google name the model there) and body."""
        key = hashlib.sha256(b"\0".join((endpoint.encode(), path.encode(), body))).digest()
        n = self._bodies.pop(key, 0) + 1
        self._bodies[key] = n
        while len(self._bodies) > self.max_sent:
            self._bodies.popitem(last=False)
        return n

    def _body(
        self,
        req: Request,
        rec: SentRecord,
        prompt: Prompt,
        faults: Faults,
        reply: Reply,
        events: list[SimEvent],
        coding: str,
    ) -> Body:
        """The steps of the body, its coding and framing, and whether the connection stays."""
        framing = faults.framing or ("chunked" if prompt.stream else "length")
        if framing == "chunked" and req.version == "HTTP/1.0":
            framing = "eof"
        rec.content_encoding = coding
        rec.framing = framing
        if prompt.stream:
            rec.planned_events = len(events)
            steps, cut_index = script(events, faults, LINE_ENDS[faults.line_end].encode())
        else:
            indent = rec.endpoint != "messages"
            raw = orjson.dumps(reply.body.obj, option=orjson.OPT_INDENT_2 if indent else 0)
            steps = [Step(faults.body_delay, raw, "body", reply.body), Step(0.0, b"", "end")]
            cut_index = 0 if faults.cut is not None else None
        if faults.bom:
            steps[0].raw = b"\xef\xbb\xbf" + steps[0].raw
        keep = req.keep_alive() and not faults.close and framing != "eof" and cut_index is None
        array = (
            prompt.stream and rec.endpoint == "generate_content" and prompt.body.get("alt") != "sse"
        )
        return Body(steps, cut_index, coding, framing, prompt.stream, keep, array)

    async def _error_status(
        self,
        conn: Conn,
        req: Request,
        rec: SentRecord,
        faults: Faults,
        status: int,
        code: str | None,
        message: str | None,
    ) -> bool:
        """An HTTP error status with the provider's JSON error body."""
        return await write_error_status(conn, req, rec, faults, status, code, message, self._finish)


@dataclass(slots=True, frozen=True)
class _Refused:
    """A request answered with a 400: why, and the error code if not the provider's."""

    why: str
    code: str | None = None
