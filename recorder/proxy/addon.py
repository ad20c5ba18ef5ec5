"""The mitmproxy addon: taps the metered endpoints' responses and meters them.

Failure policy: recording may fail, traffic may not. Every hook and the stream
tap catch every exception (counted in ``health.internal_errors``, logged), and
the tap always returns the bytes it was given, unchanged, so the client
receives exactly what the upstream sent, with no added buffering. Nothing here
blocks the event loop: the tap meters pieces in small bounded batches
(``recorder.proxy.tap``), finished records go to a sink that only enqueues, and a
large request body is read on a worker thread while the request goes on (neither
the loop nor the request waits for it; the record does).

Each metered exchange lives through the phases of ``recorder.proxy.lifecycle``:
NOTED at ``requestheaders``, OPEN once its record is made (``start_delay`` later,
with the others that came meanwhile, ``recorder.proxy.making``), ENDED at
``response`` or ``error``, then closed, settled and completed by the finishing
pipeline (``recorder.proxy.finishing``). The registry of open exchanges
(``recorder.proxy.open_streams``) and the once-a-second walk over them
(``recorder.proxy.walk``) are the recorder's; the live view and mitmweb's view
watch the walk and read the open streams through a read-only view.

Accept-Encoding is removed from tapped requests: the upstream then sends plain
SSE, which the tap reads without decompressing. An upstream that compresses
anyway is decoded on the side (``recorder.proxy.decoding``), never for the
client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mitmproxy import http

from recorder.core.attribution import TAG_HEADER
from recorder.core.captured import CapturedBody
from recorder.core.endpoints import endpoint_for
from recorder.core.estimate import Estimator
from recorder.core.printable import printable
from recorder.core.sink import Sink
from recorder.metrics.health import Health
from recorder.proxy.config import RecorderConfig
from recorder.proxy.decoding import decoder_for
from recorder.proxy.finishing import Finishing
from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.lifecycle import NOTED
from recorder.proxy.making import (
    RESPONSE_HEADERS,
    RecordMaker,
    answer,
    bedrock_metrics,
    header_text,
    pending_of,
    pick_headers,
    wanted_headers,
)
from recorder.proxy.observers import Observer, Observers
from recorder.proxy.open_streams import OpenStreams
from recorder.proxy.scheduling import LoopScheduler, Scheduler, Sliced
from recorder.proxy.state import (
    NO_UPSTREAM,
    Answer,
    Ending,
    FlowState,
    apply_facts,
    read_encoded_request,
    read_request_facts,
)
from recorder.proxy.tap import (
    BATCH_BYTES,
    BATCH_PIECES,
    STREAMED,
    BodyKind,
    RequestKeeper,
    Tap,
    Unmetered,
    declared_kind,
)
from recorder.proxy.walk import Walk, Watcher
from recorder.proxy.websocket import WebSockets

__all__ = ["BATCH_BYTES", "BATCH_PIECES", "FlowState", "Recorder", "RecorderConfig"]

log = logging.getLogger("recorder")

# Request bodies above this size are read on a worker thread: a long prompt
# (images inlined as base64 run to megabytes) would hold the event loop.
INLINE_PARSE_LIMIT = 16 * 1024
# Records made per loop callback (``start_delay``): each slice is one short block.
START_SLICE = 16


class Recorder:
    """The addon. Construct it with a sink, a config and its observers; add it to a
    master. ``clock`` and ``scheduler`` are the event loop's unless given (tests
    pass their own)."""

    def __init__(
        self,
        sink: Sink,
        config: RecorderConfig,
        *,
        health: Health | None = None,
        clock: Callable[[], float] = time.monotonic,
        scheduler: Scheduler | None = None,
        observers: Iterable[Observer] = (),
    ) -> None:
        self.sink = sink
        self.config = config
        self.health = health or Health()
        self.clock = clock
        self.scheduler: Scheduler = scheduler or LoopScheduler()
        self.internal_error = InternalErrors(self.health)
        self.cut_at_shutdown = 0  # streams still open when `done` ended them
        # who hears of each stream's start and completed record, in order
        # (recorder.proxy.observers); add more with add_observer
        self.observers = Observers(self.internal_error)
        for observer in observers:
            self.add_observer(observer)
        # Learns characters per token from streams whose usage was reported; used
        # and fed on the event loop only.
        self.estimator = Estimator()
        self.streams = OpenStreams(self.health)
        self._maker = RecordMaker(
            config, self.internal_error, self.observers.started, self.streams.discard
        )
        self._starts: Sliced[FlowState] = Sliced(
            self.scheduler, config.start_delay, START_SLICE, self._open_some
        )
        self.finishing = Finishing(
            config,
            sink,
            self.health,
            self.internal_error,
            self.observers,
            self.estimator,
            self.scheduler,
        )
        self.walk = Walk(self.scheduler, self.streams, clock, self.internal_error)
        self._readers: ThreadPoolExecutor | None = None
        self._wanted = wanted_headers(config.tag_headers)
        # the headers --strip-tag-headers removes before the request goes on
        self._tag_headers = (TAG_HEADER, *config.tag_headers)
        # WebSocket connections: each response an exchange (recorder.proxy.websocket)
        self.websockets = WebSockets(
            config,
            self.streams,
            self._maker,
            self.finishing,
            self.walk,
            self.health,
            self.internal_error,
            clock,
            self._reader_pool,
        )
        self._closed = False
        self._said_no_upstream = False  # (said once per process)
        # Whether ``done`` also closes the sink (as under ``mitmdump -s``). The runner
        # sets it False: it closes the sink itself once connections are ended, so that
        # no client waits on the database at shutdown.
        self.close_sink_on_done = True

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer`` for every stream from now on, after those added before."""
        self.observers.add(observer)

    def watch(self, watcher: Watcher) -> None:
        """Show ``watcher`` the open streams once a second (``recorder.proxy.walk``)."""
        self.walk.watch(watcher)

    @property
    def open_flows(self) -> int:
        """Exchanges being metered right now."""
        return len(self.streams)

    def stats(self) -> dict[str, Any]:
        """Health counters plus open flows."""
        return {**self.health.snapshot(), "open_flows": self.open_flows}

    # -- hooks ----------------------------------------------------------------

    def running(self) -> None:
        """The proxy runs: the walk starts if anyone watches it."""
        try:
            if self.walk.watched:
                self.walk.want()
        except Exception:
            self.internal_error("running")

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A request to one of the endpoints starts its record: NOTED here, made by
        ``_open_some`` (with ``start_delay``, with those of the other exchanges that
        came meanwhile)."""
        try:
            req = flow.request
            endpoint = endpoint_for(req.method, req.path)
            if endpoint is None:
                # a WebSocket's upgrade: its headers read for its responses' records
                upgrade = self.websockets.upgrade(flow)
                if upgrade is not None:
                    self._strip_tags(req, upgrade)
                return
            t0 = self.clock()
            headers = pick_headers(req.headers, self._wanted)
            state = FlowState(endpoint, t0, pending_of(req, headers), self._maker)
            if self.config.keep_for_ui:
                state.flow = flow
            self.streams.add(flow.id, state)
            if req.stream is True:
                # a large body mitmproxy streams upstream: kept on the way, for its facts
                req.stream = RequestKeeper()
            if self.config.strip_accept_encoding and "accept-encoding" in headers:
                del req.headers["accept-encoding"]
            self._strip_tags(req, headers)
            if self.config.start_delay <= 0 or self._closed:
                state.make()
            else:
                self._starts.add(state)
        except Exception:
            self.internal_error("requestheaders")

    def _strip_tags(self, req: http.Request, headers: dict[str, str]) -> None:
        """``--strip-tag-headers``: the tag headers read (``headers``) go no further."""
        if self.config.strip_tag_headers:
            for name in self._tag_headers:
                if name in headers:
                    del req.headers[name]

    def _open_some(self, batch: list[FlowState]) -> None:
        """NOTED -> OPEN for the exchanges that came first (unless something needed
        their records sooner)."""
        for state in batch:
            try:
                if state.phase is NOTED:
                    state.make()
            except Exception:
                self.internal_error("requestheaders")

    def request(self, flow: http.HTTPFlow) -> None:
        """Read the request's model, stream flag and limits (never its text)."""
        try:
            state = self.streams.get(flow.id)
            if state is None:
                return
            req = flow.request
            keeper = req.stream if isinstance(req.stream, RequestKeeper) else None
            body = keeper.body() if keeper is not None else req.raw_content or b""
            if not body:
                return
            encoding = req.headers.get("content-encoding")
            if len(body) > INLINE_PARSE_LIMIT or encoding:
                # Read (and decoded, bounded) on a worker thread while the request goes
                # on upstream: neither the event loop nor this request waits; the facts
                # are collected when the record is finished.
                state.reading = self._reader_pool().submit(
                    read_encoded_request, body, encoding, state.endpoint, self.config.reading
                )
            elif state.pending is not None:
                state.pending.body = body  # read when the record is made
            else:
                apply_facts(state, *read_request_facts(body, state.endpoint, self.config.reading))
        except Exception:
            self.internal_error("request")

    def _reader_pool(self) -> ThreadPoolExecutor:
        if self._readers is None:
            self._readers = ThreadPoolExecutor(2, thread_name_prefix="recorder-read")
        return self._readers

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Headers arrived: time them, and tap the body, whatever it is."""
        try:
            state = self.streams.get(flow.id)
            if state is None or flow.response is None:
                return
            resp = flow.response
            headers = pick_headers(resp.headers, RESPONSE_HEADERS)
            content_type = headers.get("content-type", "")
            got = Answer(
                self.clock(),
                resp.status_code,
                header_text(
                    headers.get("x-request-id")
                    or headers.get("request-id")
                    or headers.get("x-amzn-requestid")  # Amazon Bedrock
                ),
                declared_kind(content_type) in STREAMED,
                bedrock_metrics(headers),
            )
            if state.pending is not None:
                state.pending.answer = got  # put on the record when it is made
            else:
                answer(state, got)
            self._tap(state, resp, headers.get("content-encoding"), content_type, got.at)
        except Exception:
            self.internal_error("responseheaders")

    def _tap(
        self,
        state: FlowState,
        resp: http.Response,
        encoding: str | None,
        content_type: str,
        at: float,
    ) -> None:
        """Stream the body to the client as it arrives, and meter it on the side."""
        try:
            decoder = decoder_for(encoding)
        except ValueError:
            decoder = None
            undecodable = True
        else:
            undecodable = False
        tap = state.tap = Tap(
            lambda: state.meter, decoder, self.internal_error, content_type, self.scheduler
        )
        if undecodable:
            tap.give_up(Unmetered.UNDECODABLE, repr(encoding))
            self.internal_error.decode_error()
            log.warning(
                "recorder: cannot decode %r; %s will be recorded without its events",
                encoding,
                state.record.id,
            )
        if callable(resp.stream):
            # Another addon taps this response already; leave it be and record the
            # exchange without its events.
            tap.give_up(Unmetered.STREAMED_BY_ANOTHER)
            return
        capture = self.config.capture_bodies or self.config.keep_for_ui
        if capture and not tap.broken and declared_kind(content_type) is not BodyKind.JSON:
            tap.capture = CapturedBody(
                state.t0,
                at,
                limit=self.config.capture_max_bytes,
                stall_after=self.config.stall_after,
                max_event_bytes=self.config.max_event_bytes,
                mask=state.key,  # an upstream may echo them in an error event
            )
        resp.stream = tap.callable(self.clock)
        self.walk.want()

    def response(self, flow: http.HTTPFlow) -> None:
        """The response is complete: its exchange ends."""
        try:
            state = self.streams.pop(flow.id)
            if state is None:
                self.websockets.forget(flow)  # an upgrade refused, if it was one
                return
            now = self.clock()
            tap, resp = state.tap, flow.response
            if tap is None and resp is not None:
                # not tapped (the tap could not be set): the body mitmproxy buffered
                body = resp.get_content(strict=False) or b""
                self.finishing.end(state, Ending(now, "eof", None, body, resp.status_code))
                return
            ended_at = tap.ended_at if tap is not None else None
            if tap is not None and resp is not None and resp.raw_content:
                tap.take_whole(resp.raw_content, ended_at or now)
            self.finishing.end(state, Ending(ended_at or now, "eof", None))
        except Exception:
            self.internal_error("response")

    def error(self, flow: http.HTTPFlow) -> None:
        """The flow broke: a client that went away, or an upstream that did."""
        try:
            state = self.streams.pop(flow.id)
            if state is None:
                self.websockets.forget(flow)  # an upgrade that broke, if it was one
                return
            msg = flow.error.msg if flow.error is not None else "unknown error"
            how = _ending(flow, msg)
            if how == NO_UPSTREAM and not self._said_no_upstream:
                self._said_no_upstream = True
                log.warning(
                    "recorder: %s reached the regular-mode proxy as a base URL (502 Request"
                    " destination unknown): base URLs need reverse mode, --mode"
                    " reverse:https://api.openai.com@8081",
                    printable(flow.request.path.split("?", 1)[0]),
                )
            self.finishing.end(state, Ending(self.clock(), how, msg))
        except Exception:
            self.internal_error("error")

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        """A WebSocket connection began: one to a metered endpoint is watched."""
        try:
            self.websockets.websocket_start(flow)
        except Exception:
            self.internal_error("websocket_start")

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """A message crossed it (read, never changed): a response begins, goes on or ends."""
        try:
            self.websockets.websocket_message(flow)
        except Exception:
            self.internal_error("websocket_message")

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        """It closed: a response still open is its disconnect."""
        try:
            self.websockets.websocket_end(flow)
        except Exception:
            self.internal_error("websocket_end")

    def done(self) -> None:
        """Shutdown: end what is still open, finish every record, then (unless the
        runner does) close the sink."""
        try:
            self.walk.stop()
            now = self.clock()
            self._starts.take_all()  # made as they end, below
            self.websockets.shutdown()
            open_states = self.streams.take_all()
            self.cut_at_shutdown += len(open_states)
            self.finishing.drain()  # from now on nothing is put off
            for state in open_states:
                try:
                    self.finishing.end(state, Ending(now, "client_disconnect", "proxy shut down"))
                except Exception:  # its record could not be made: the others still are
                    self.internal_error("done")
            self.finishing.drain()
        except Exception:
            self.internal_error("done")
        if self.close_sink_on_done:
            self.close()

    def close(self) -> None:
        """Finish what waits, then flush and close the sink (once)."""
        if self._closed:
            return
        self._closed = True
        self.walk.stop()
        self._starts.take_all()  # made when they end
        self.finishing.close()
        if self._readers is not None:
            self._readers.shutdown(wait=False, cancel_futures=True)


# mitmproxy's words for an upstream whose TLS failed ("The remote server does not
# speak TLS.", "Certificate verify failed: ...", "Server TLS handshake failed")
_UPSTREAM_TLS = ("does not speak tls", "certificate verify failed", "tls handshake failed")


def _ending(flow: http.HTTPFlow, msg: str) -> str:
    """Whose side broke. A request that never arrived whole is the client's.
    mitmproxy's HTTP/2 layer words it alike for either side
    ("stream reset by client (CANCEL)", "peer closed connection"): it is the
    client's when only the client's connection speaks HTTP/2 (the upstream's HTTP/1
    layer says "peer closed connection" with more after it). When both sides speak
    HTTP/2 the message cannot tell, and the upstream is blamed, as before."""
    low = msg.lower()
    if "request destination unknown" in low:
        return NO_UPSTREAM
    if "client disconnected" in low:
        return "client_disconnect"
    if any(words in low for words in _UPSTREAM_TLS):
        # the upstream's TLS failed: whenever that came, it is the upstream's doing
        return "upstream_disconnect"
    req = flow.request
    if flow.response is None and req.timestamp_end is None and not req.stream:
        # The request never arrived whole (headers, then part of a body): mitmproxy
        # reads a request to its end before it goes upstream, so the peer that
        # closed ("peer closed connection without sending complete message body")
        # is the client; the upstream never saw the request.
        return "client_disconnect"
    h2_words = low.startswith(("stream reset by client", "http/2 connection closed")) or (
        low == "peer closed connection"
    )
    if h2_words and flow.client_conn.alpn == b"h2" and flow.server_conn.alpn != b"h2":
        return "client_disconnect"
    return "upstream_disconnect"
