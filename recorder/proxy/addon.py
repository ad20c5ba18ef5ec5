"""The mitmproxy addon: taps the three endpoints' responses and meters them.

Failure policy: recording may fail, traffic may not. Every hook and the stream
tap catch every exception (counted in ``health.internal_errors``, logged), and
the tap always returns the bytes it was given, unchanged, so the client
receives exactly what the upstream sent, with no added buffering. Nothing here
blocks the event loop: the tap meters pieces in small bounded batches,
finished records go to a sink that only enqueues, and a large request body is
read on a worker thread while the request goes on (neither the loop nor the
request waits for it; the record does).

Per-flow state lives in ``self._flows`` from ``requestheaders`` until
``response`` or ``error`` (which exclude each other); with ``start_delay`` it also
waits in ``self._starting`` for its record to be made (``_begin``), that long at
most. After its end, with ``finish_delay``, it waits in ``self._finishing`` for the
batch that closes its record (that long at most), then, only if its request body
is still being read, in ``self._deferred`` until it is, then in ``self._finishing``
again to be completed; ``done`` (and ``close``) finishes whatever is left, so none
of them can grow with the number of requests served.

Accept-Encoding is removed from tapped requests: the upstream then sends plain
SSE, which the tap reads without decompressing. An upstream that compresses
anyway is decoded on the side (``recorder.proxy.decoding``), never for the
client.

With ``capture_bodies`` the tap also keeps every decoded piece and its arrival
time (``recorder.core.captured``: two appends per piece; compression happens on
the writer's thread) and meters each piece as it comes. Without it the tap notes
pieces and meters them in batches (``BATCH_PIECES``), and a sweep once a second
(``SWEEP_S``) meters what waits in every open flow.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mitmproxy import http

from recorder.core.captured import CapturedBody, CapturedRecord
from recorder.core.counts import count_request
from recorder.core.endpoints import endpoint_for
from recorder.core.estimate import Estimator
from recorder.core.keys import KeyMask, authenticating_key, fingerprint, request_keys
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord, ending_outcome
from recorder.core.request import read_request
from recorder.metrics.health import Health
from recorder.proxy.config import RecorderConfig
from recorder.proxy.decoding import decoder_for
from recorder.proxy.finishing import Finishing
from recorder.proxy.ids import new_record_start
from recorder.proxy.observers import Done, Observer, starts
from recorder.proxy.state import (
    FlowState,
    Pending,
    _apply_facts,
    _read_request,
)
from recorder.proxy.tokenizers import counter_for
from recorder.store.sinks import Sink

__all__ = ["BATCH_BYTES", "BATCH_PIECES", "FlowState", "Recorder", "RecorderConfig"]

log = logging.getLogger("recorder")

# Request bodies above this size are read on a worker thread: a long prompt
# (images inlined as base64 run to megabytes) would hold the event loop.
INLINE_PARSE_LIMIT = 16 * 1024

# The tap notes each piece and its arrival time, and meters them in batches: the
# meter's code then runs hot, several events in a row, instead of once between
# each two of mitmproxy's own steps, which measured 3-4x slower per event (see
# docs/performance.md). Times are kept per piece, so no figure changes; a batch
# waits at most this many pieces or bytes (bytes that mitmproxy hands on anyway,
# held a little longer), and is metered whenever the flow ends.
BATCH_PIECES = 128
BATCH_BYTES = 64 * 1024
# Every SWEEP_S a sweep meters what waits in every open flow, a few flows per loop
# callback (at most about SWEEP_SLICE pieces, a block of some 0.3 ms): pieces never
# wait much longer than that for the meter, and flows are metered one after the
# other, so the meter's code stays in the CPU's caches from one flow to the next
# (a batch metered between two of mitmproxy's steps starts cold: in situ that
# doubled the cost of a piece, docs/performance.md).
SWEEP_S = 1.0
SWEEP_SLICE = 256


class Recorder(Finishing):
    """The addon. Construct it with a sink, a config and its observers; add it to a
    master."""

    def __init__(
        self,
        sink: Sink,
        config: RecorderConfig,
        *,
        health: Health | None = None,
        clock: Callable[[], float] = time.monotonic,
        observers: Iterable[Observer] = (),
    ) -> None:
        self.sink = sink
        self.config = config
        self.health = health or Health()
        self._clock = clock
        self.cut_at_shutdown = 0  # streams still open when `done` ended them
        # who hears of each stream's start and completed record, in order
        # (recorder.proxy.observers); add more with add_observer
        self.observers: list[Observer] = []
        self._finished_observers: list[Callable[[Done], None]] = []
        self._started_observers: list[Callable[[StreamRecord], None]] = []
        # what requestheaders calls at a stream's start: None when no observer
        # wants starts, so that a stream costs nothing more then
        self._on_start: Callable[[StreamRecord], None] | None = None
        for observer in observers:
            self.add_observer(observer)
        self._flows: dict[str, FlowState] = {}
        # finished flows whose request body is still being read: their record waits
        self._deferred: dict[int, tuple[FlowState, StreamRecord]] = {}
        self._readers: ThreadPoolExecutor | None = None
        self._closed = False
        self._read_deadline = 0.0  # set by close
        # Whether ``done`` also closes the sink (as under ``mitmdump -s``). The runner
        # sets it False: it closes the sink itself once connections are ended, so that
        # no client waits on the database at shutdown.
        self.close_sink_on_done = True
        # with finish_delay: ended streams waiting to be completed, in order
        self._finishing: list[tuple[FlowState, StreamRecord | None]] = []
        self._finish_timer: asyncio.TimerHandle | None = None
        # the sweep of waiting pieces (SWEEP_S): scheduled while flows are tapped
        self._sweep_timer: asyncio.Handle | None = None
        # with start_delay: flows whose records are still to be made, in order
        self._starting: list[FlowState] = []
        self._start_timer: asyncio.TimerHandle | None = None
        # Learns characters per token from streams whose usage was reported; used
        # and fed on the event loop only.
        self.estimator = Estimator()

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer`` for every stream from now on, after those added before."""
        self.observers.append(observer)
        self._finished_observers.append(observer.stream_finished)
        if starts(observer):
            self._started_observers.append(observer.stream_started)
        started = self._started_observers
        if len(started) == 1:
            self._on_start = started[0]
        elif started:
            self._on_start = self._started

    def _started(self, rec: StreamRecord) -> None:
        for observe in self._started_observers:
            try:
                observe(rec)
            except Exception:
                self._internal_error("observer")

    # -- bookkeeping ----------------------------------------------------------

    @property
    def open_flows(self) -> int:
        """Flows being metered right now."""
        return len(self._flows)

    def _internal_error(self, where: str) -> None:
        self.health.internal_errors += 1
        n = self.health.internal_errors
        if n <= 10 or n % 1000 == 0:
            log.exception("recorder: internal error in %s (#%d); traffic is unaffected", where, n)

    def _close_meter(
        self, state: FlowState, now: float, ending: str, transport_error: str | None
    ) -> StreamRecord:
        """The finished record; if the meter itself fails, still a record, marked."""
        if state.pieces:
            try:
                self._meter_pieces(state)
            except Exception as e:
                self._tap_failed(state, e)
        if state.capture is not None:
            state.capture.end(now, ending, damaged=state.broken)
            # the body now belongs to the record (packed on the writer's thread): a
            # piece arriving after the end (shutdown) must not touch it
            state.broken = True
        try:
            rec = state.meter.finish(now, ending=ending, transport_error=transport_error)
            if state.unmetered is not None:
                # the figures of the events are missing, not zero: say so on the record
                rec.recorder_error = f"events not metered: {state.unmetered}"
            return rec
        except Exception as e:
            self._internal_error("finishing a record")
            rec = state.record
            rec.outcome = ending_outcome(ending)
            rec.interrupted = True
            rec.transport_error = transport_error
            rec.duration_ms = round((now - state.t0) * 1000.0, 3)
            rec.recorder_error = f"{type(e).__name__}: {e}"
            return rec

    # -- hooks ----------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A request to one of the endpoints starts its record: noted here, made by
        ``_begin`` (with ``start_delay``, with those of the other flows that started
        meanwhile)."""
        try:
            req = flow.request
            path = req.path
            endpoint = endpoint_for(req.method, path)
            if endpoint is None:
                return
            t0 = self._clock()
            headers = _pick_headers(req.headers, _REQUEST_HEADERS)
            pending = Pending(
                headers,
                req.query if "?" in path else None,  # some gateways take keys there
                req.host,
                req.port,
                path,
                time.time_ns() // 1_000_000,
            )
            state = FlowState(endpoint, t0, pending, self._begin)
            if self.config.keep_for_ui:
                state.flow = flow
            self._flows[flow.id] = state
            self.health.in_flight += 1
            if self.config.strip_accept_encoding and "accept-encoding" in headers:
                del req.headers["accept-encoding"]
            delay = self.config.start_delay
            if delay <= 0 or self._closed:
                state.begin_now()
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a test calling hooks): made now
                state.begin_now()
                return
            self._starting.append(state)
            if self._start_timer is None:
                self._start_timer = loop.call_later(delay, self._begin_some)
        except Exception:
            self._internal_error("requestheaders")

    # Records made per loop callback (``start_delay``): each slice is one short block.
    START_SLICE = 16

    def _begin_some(self) -> None:
        """Make the records of the flows that started first; come back for the rest."""
        self._start_timer = None
        try:
            batch = self._starting[: self.START_SLICE]
            del self._starting[: self.START_SLICE]
            for state in batch:
                state.begin_now()  # unless something needed it sooner
            if self._starting and not self._closed:
                self._start_timer = asyncio.get_running_loop().call_later(0, self._begin_some)
        except Exception:
            self._internal_error("requestheaders")

    def _begin(self, state: FlowState) -> None:
        """Make the flow's record, meter and key mask from what the hooks noted. If
        that fails the flow is not recorded (as when ``requestheaders`` fails): a
        record without its key mask could store an echo of a key."""
        try:
            self._make_record(state)
        except Exception:
            self._internal_error("requestheaders")
            if not state.made:
                for fid, open_state in list(self._flows.items()):
                    if open_state is state:  # (if it ended, _end counted it out)
                        del self._flows[fid]
                        self.health.in_flight -= 1
                state.broken = True  # the tap forwards, and meters nothing

    def _make_record(self, state: FlowState) -> None:
        pending = state.pending
        assert pending is not None
        endpoint = state.endpoint
        headers, query = pending.headers, pending.query
        key = _header_text(
            authenticating_key(
                headers, query, endpoint=endpoint, host=pending.host, path=pending.path
            )
        )
        record_id, started_at = new_record_start(pending.wall_ms)
        rec = (CapturedRecord if self.config.capture_bodies else StreamRecord)(
            id=record_id,
            started_at=started_at,
            upstream=f"{pending.host}:{pending.port}",
            project=_header_text(
                headers.get("openai-project") or headers.get("anthropic-workspace")
            ),
            organization=_header_text(headers.get("openai-organization")),
            api_key_id=fingerprint(key, self.config.key_secret) if key else None,
        )
        meter = StreamMeter(
            endpoint,
            start=state.t0,
            stall_after=self.config.stall_after,
            max_event_bytes=self.config.max_event_bytes,
            record=rec,
        )
        state.started(meter, rec, KeyMask.of(request_keys(headers, query)))
        if "traceparent" in headers:  # forwarded untouched; read for the span only
            state.trace = (headers["traceparent"], headers.get("tracestate"))
        if self._on_start is not None:
            try:
                self._on_start(rec)  # after the meter, which sets endpoint and provider
            except Exception:
                self._internal_error("observer")
        body = state.body
        if body is not None:
            state.body = None
            try:
                self._read_facts(state, body)
            except Exception:
                self._internal_error("request")
        answer = state.answer
        if answer is not None:
            state.answer = None
            self._answered(state, *answer)

    def request(self, flow: http.HTTPFlow) -> None:
        """Read the request's model, stream flag and limits (never its text)."""
        try:
            state = self._flows.get(flow.id)
            if state is None:
                return
            body = flow.request.get_content(strict=False) or b""
            if not body:
                return
            if len(body) > INLINE_PARSE_LIMIT:
                # Read on a worker thread while the request goes on upstream: neither
                # the event loop nor this request waits; the facts are collected when
                # the record is finished.
                state.reading = self._reader_pool().submit(_read_request, body, state.endpoint)
                return
            if state.begun:
                self._read_facts(state, body)
            else:
                state.body = body  # read when the record is made
        except Exception:
            self._internal_error("request")

    @staticmethod
    def _read_facts(state: FlowState, body: bytes) -> None:
        endpoint = state.endpoint
        facts = read_request(body)
        found = counter_for(facts.model, endpoint)
        if found is None:
            _apply_facts(state, facts, count_request(body, endpoint))
            return
        # A tokenizer counts the prompt exactly, here too: toktok's one-pass count
        # takes about 0.3 µs for a short prompt and some 30 µs for 16 KiB. (Its
        # batch call took 25 µs whatever the text, so these counts went to a
        # worker thread, whose every wake-up cost more CPU than the count.)
        encoding, counter = found
        counts = count_request(body, endpoint, counter=counter, encoding=encoding)
        _apply_facts(state, facts, counts)

    def _reader_pool(self) -> ThreadPoolExecutor:
        if self._readers is None:
            self._readers = ThreadPoolExecutor(2, thread_name_prefix="recorder-read")
        return self._readers

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Headers arrived: time them, and tap the body if it is an event stream."""
        try:
            state = self._flows.get(flow.id)
            if state is None or flow.response is None:
                return
            resp = flow.response
            now = self._clock()
            headers = _pick_headers(resp.headers, _RESPONSE_HEADERS)
            request_id = _header_text(headers.get("x-request-id") or headers.get("request-id"))
            sse = "text/event-stream" in headers.get("content-type", "").lower()
            if state.begun:
                self._answered(state, now, resp.status_code, request_id, sse)
            else:
                state.answer = (now, resp.status_code, request_id, sse)  # for _begin
            if not sse:
                return  # a JSON body: mitmproxy buffers it, `response` reads it
            state.streaming = True
            try:
                state.decoder = decoder_for(headers.get("content-encoding"))
            except ValueError:
                state.broken = True
                state.unmetered = (
                    f"content-encoding {headers.get('content-encoding')!r} cannot be decoded"
                )
                self.health.decode_errors += 1
                log.warning(
                    "recorder: cannot decode %r; %s will be recorded without its events",
                    headers.get("content-encoding"),
                    state.record.id,
                )
            if resp.stream:
                # Another addon streams this response already; leave it be and
                # record the flow without its events.
                state.broken = True
                state.unmetered = "another addon streams this response"
                return
            if (self.config.capture_bodies or self.config.keep_for_ui) and not state.broken:
                state.capture = CapturedBody(
                    state.t0,
                    now,
                    limit=self.config.capture_max_bytes,
                    stall_after=self.config.stall_after,
                    max_event_bytes=self.config.max_event_bytes,
                    mask=state.key,  # an upstream may echo them in an error event
                )
            resp.stream = self._tap(state)
            if self._sweep_timer is None and state.capture is None:
                self._schedule_sweep()
        except Exception:
            self._internal_error("responseheaders")

    @staticmethod
    def _answered(
        state: FlowState, now: float, status: int, request_id: str | None, sse: bool
    ) -> None:
        """The response's headers, on the record and its meter."""
        state.meter.headers(now, status)
        rec = state.record
        rec.request_id = request_id
        if not sse:
            rec.streamed = False

    def _schedule_sweep(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test calling hooks): batches and ends only
            return
        self._sweep_timer = loop.call_later(SWEEP_S, self._sweep, None)

    def _sweep(self, todo: list[tuple[str, FlowState]] | None) -> None:
        """Meter what waits in the open flows, a slice at a time (``SWEEP_S``)."""
        self._sweep_timer = None
        try:
            flows = self._flows
            if todo is None:
                todo = [(fid, state) for fid, state in flows.items() if state.pieces]
            budget = SWEEP_SLICE
            while todo and budget > 0:
                fid, state = todo.pop()
                # a flow that ended since was metered by its end
                if state.pieces and flows.get(fid) is state:
                    budget -= len(state.pieces)
                    try:
                        self._meter_pieces(state)
                    except Exception as e:
                        self._tap_failed(state, e)
            if self._closed:
                return
            loop = asyncio.get_running_loop()
            if todo:  # the rest after the loop's other callbacks
                self._sweep_timer = loop.call_soon(self._sweep, todo)
            elif flows:
                self._sweep_timer = loop.call_later(SWEEP_S, self._sweep, None)
        except Exception:
            self._internal_error("sweep")

    def _tap(self, state: FlowState) -> Callable[[bytes], bytes]:
        if state.capture is not None:
            return self._capturing_tap(state, state.capture)
        clock = self._clock
        pieces, stamps = state.pieces, state.stamps
        meter_pieces = self._meter_pieces

        def tap(data: bytes) -> bytes:
            # Runs on the event loop for every piece of every stream: keep it lean,
            # and whatever happens, hand the bytes on unchanged.
            try:
                if not data:
                    state.ended_at = clock()
                elif not state.broken:
                    pieces.append(data)
                    stamps.append(clock())
                    state.buffered += len(data)
                    if len(pieces) >= BATCH_PIECES or state.buffered >= BATCH_BYTES:
                        meter_pieces(state)
            except Exception as e:
                self._tap_failed(state, e)
            return data

        return tap

    @staticmethod
    def _meter_pieces(state: FlowState) -> None:
        """Meter the pieces the tap has kept, each at its own arrival time."""
        pieces, stamps = state.pieces, state.stamps
        try:
            if state.broken:
                return
            decoder = state.decoder
            # decoded as they are metered: a piece that fails to decode leaves
            # the ones before it metered
            batch = pieces if decoder is None else map(decoder.decode, pieces)
            state.meter.feed_many(batch, stamps)
        finally:
            pieces.clear()
            stamps.clear()
            state.buffered = 0

    def _tap_failed(self, state: FlowState, e: Exception) -> None:
        state.broken = True
        state.unmetered = f"the stream tap failed ({type(e).__name__}: {e})"
        if state.decoder is not None:
            self.health.decode_errors += 1
        self._internal_error("stream tap")

    def _capturing_tap(self, state: FlowState, capture: CapturedBody) -> Callable[[bytes], bytes]:
        """``_tap`` that also keeps each decoded piece, with its arrival time."""
        feed = state.meter.feed
        clock = self._clock
        keep = capture.add

        def tap(data: bytes) -> bytes:
            try:
                if not data:
                    state.ended_at = clock()
                elif not state.broken:
                    decoder = state.decoder
                    piece = data if decoder is None else decoder.decode(data)
                    now = clock()
                    if piece:  # the meter ignores an empty piece: so does the replay
                        keep(piece, now)
                    feed(piece, now)
            except Exception as e:
                self._tap_failed(state, e)
            return data

        return tap

    def response(self, flow: http.HTTPFlow) -> None:
        """The response is complete: finish its record."""
        try:
            state = self._flows.pop(flow.id, None)
            if state is None:
                return
            now = self._clock()
            resp = flow.response
            if not state.streaming and resp is not None:
                # a JSON body, read (as it is now) when the record is closed
                body = resp.get_content(strict=False) or b""
                self._end(state, now, "eof", None, body, resp.status_code)
                return
            self._end(state, state.ended_at or now, "eof", None)
        except Exception:
            self._internal_error("response")

    def error(self, flow: http.HTTPFlow) -> None:
        """The flow broke: a client that went away, or an upstream that did."""
        try:
            state = self._flows.pop(flow.id, None)
            if state is None:
                return
            msg = flow.error.msg if flow.error is not None else "unknown error"
            self._end(state, self._clock(), _ending(flow, msg), msg)
        except Exception:
            self._internal_error("error")

    def stats(self) -> dict[str, Any]:
        """Health counters plus open flows."""
        return {**self.health.snapshot(), "open_flows": self.open_flows}


_REQUEST_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"api-key",
        b"x-goog-api-key",
        b"proxy-authorization",
        b"openai-project",
        b"anthropic-workspace",
        b"openai-organization",
        b"accept-encoding",
        b"traceparent",
        b"tracestate",
    }
)
_RESPONSE_HEADERS = frozenset(
    {b"x-request-id", b"request-id", b"content-type", b"content-encoding"}
)


def _pick_headers(headers: http.Headers, wanted: frozenset[bytes]) -> dict[str, str]:
    """The ``wanted`` headers (lower-case names) of ``headers``, read as
    ``headers.get`` reads them (repeated ones folded with ", ", values decoded as
    UTF-8 with surrogateescape), in one pass over the raw fields: a flow needs a
    dozen lookups, and each ``get`` walks and converts every field again."""
    out: dict[str, str] = {}
    for name, value in headers.fields:
        low = name.lower()
        if low in wanted:
            key = low.decode("ascii")
            text = value.decode("utf-8", "surrogateescape")
            out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def _ending(flow: http.HTTPFlow, msg: str) -> str:
    """Whose side broke. A request that never arrived whole is the client's.
    mitmproxy's HTTP/2 layer words it alike for either side
    ("stream reset by client (CANCEL)", "peer closed connection"): it is the
    client's when only the client's connection speaks HTTP/2 (the upstream's HTTP/1
    layer says "peer closed connection" with more after it). When both sides speak
    HTTP/2 the message cannot tell, and the upstream is blamed, as before."""
    low = msg.lower()
    if "client disconnected" in low:
        return "client_disconnect"
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


def _header_text(value: str | None) -> str | None:
    """A header value as clean text: mitmproxy keeps undecodable bytes as lone
    surrogates, which no database or JSON encoder accepts; they become U+FFFD."""
    if not value:
        return None
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
