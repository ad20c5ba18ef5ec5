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
``response`` or ``error`` (which exclude each other), then, only if its request
body is still being read, in ``self._deferred`` until it is, then, with
``finish_delay``, in ``self._finishing`` for that long at most; ``done`` (and
``close``) finishes whatever is left, so none of them can grow with the number of
requests served.

Accept-Encoding is removed from tapped requests: the upstream then sends plain
SSE, which the tap reads without decompressing. An upstream that compresses
anyway is decoded on the side (``recorder.proxy.decoding``), never for the
client.

With ``capture_bodies`` the tap also keeps every decoded piece and its arrival
time (``recorder.core.captured``: two appends per piece; compression happens on
the writer's thread) and meters each piece as it comes. Without it the tap notes
pieces and meters them in batches (``BATCH_PIECES``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mitmproxy import http

from recorder.core.billing import complete_usage
from recorder.core.captured import DEFAULT_CAPTURE_MAX_BYTES, CapturedBody, CapturedRecord
from recorder.core.endpoints import endpoint_for
from recorder.core.estimate import Estimator, InputCounts, count_request
from recorder.core.keys import KeyMask, authenticating_key, fingerprint, request_keys, scrub_key
from recorder.core.meter import DEFAULT_STALL_AFTER_S, StreamMeter
from recorder.core.pricing import PriceTable
from recorder.core.record import StreamRecord
from recorder.core.request import RequestFacts, read_error_body, read_request
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES
from recorder.metrics.health import Health
from recorder.proxy.decoding import Decoder, decoder_for
from recorder.proxy.ids import new_record_start
from recorder.proxy.tokenizers import TokenCounter, counter_for
from recorder.proxy.unpriced import WARNINGS as UNPRICED
from recorder.store.sinks import Sink

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
BATCH_PIECES = 32
BATCH_BYTES = 64 * 1024
# At shutdown, how long ``done`` waits for request bodies still being read, in all.
DONE_READ_WAIT_S = 1.0


@dataclass(slots=True)
class RecorderConfig:
    """How the addon meters."""

    key_secret: bytes
    prices: PriceTable | None = None  # None: records are not costed
    stall_after: float = DEFAULT_STALL_AFTER_S
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    strip_accept_encoding: bool = True
    # Keep raw SSE response bodies (decoded, compressed later) for `recorder replay
    # --id`; never request bodies. Pieces past the cap are counted, not kept.
    capture_bodies: bool = False
    capture_max_bytes: int = DEFAULT_CAPTURE_MAX_BYTES
    # Seconds a finished stream waits before its usage, cost, metrics and record are
    # completed, together with the others that ended meanwhile (0: at once). In a
    # batch that work runs hot, and it is done in slices between the loop's other
    # callbacks instead of as one block in mitmproxy's `response` hook.
    finish_delay: float = 0.0
    # Under mitmweb (recorder.proxy.webview): keep each tapped body with its arrival
    # times, capped at capture_max_bytes, for the flow shown in the UI; not stored.
    keep_for_ui: bool = False


class FlowState:
    """What the addon holds for one tapped flow."""

    __slots__ = (
        "broken",
        "buffered",
        "capture",
        "decoder",
        "ended_at",
        "flow",
        "input_counts",
        "key",
        "meter",
        "pieces",
        "reading",
        "record",
        "stamps",
        "streaming",
        "t0",
        "trace",
        "unmetered",
    )

    def __init__(self, meter: StreamMeter, record: StreamRecord, t0: float) -> None:
        self.meter = meter
        self.record = record
        self.t0 = t0
        self.streaming = False
        self.decoder: Decoder | None = None
        self.broken = False  # the tap gave up on this stream (it still forwards)
        self.ended_at: float | None = None
        self.input_counts: InputCounts | None = None  # for estimating unreported input
        self.capture: CapturedBody | None = None  # with capture_bodies, a tapped SSE body
        self.unmetered: str | None = None  # why the stream's events could not be metered
        # every credential of the request, held only to mask echoes of them; never stored
        self.key: KeyMask | None = None
        # a large request body being read on a worker thread (facts, input counts)
        self.reading: Future[tuple[RequestFacts, InputCounts | None]] | None = None
        # pieces the tap has passed on but not metered yet, with their arrival times
        self.pieces: list[bytes] = []
        self.stamps: list[float] = []
        self.buffered = 0  # bytes in self.pieces
        self.flow: http.HTTPFlow | None = None  # kept only for the web UI (keep_for_ui)
        # the request's W3C trace context (traceparent, tracestate), for on_span
        self.trace: tuple[str, str | None] | None = None


class Recorder:
    """The addon. Construct it with a sink and a config; add it to a master."""

    def __init__(
        self,
        sink: Sink,
        config: RecorderConfig,
        *,
        health: Health | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_record: Callable[[StreamRecord, StreamMeter], None] | None = None,
        on_start: Callable[[StreamRecord], None] | None = None,
        on_span: Callable[[StreamRecord, str | None, str | None], None] | None = None,
    ) -> None:
        self.sink = sink
        self.config = config
        self.health = health or Health()
        self._clock = clock
        self._on_record = on_record
        self._on_start = on_start
        self.cut_at_shutdown = 0  # streams still open when `done` ended them
        # set by recorder.proxy.webview under mitmweb: the flow, its completed record
        # and the body kept for the UI
        self.on_flow_done: (
            Callable[[http.HTTPFlow, StreamRecord, CapturedBody | None], None] | None
        ) = None
        # more consumers of each completed record (the live view), after on_record
        self.consumers: list[Callable[[StreamRecord], None]] = []
        # called with each completed record and its request's traceparent and
        # tracestate headers (recorder.otel exports it as a span); settable later
        self.on_span = on_span
        self._flows: dict[str, FlowState] = {}
        # finished flows whose request body is still being read: their record waits
        self._deferred: dict[int, tuple[FlowState, StreamRecord]] = {}
        self._readers: ThreadPoolExecutor | None = None
        self._closed = False
        # Whether ``done`` also closes the sink (as under ``mitmdump -s``). The runner
        # sets it False: it closes the sink itself once connections are ended, so that
        # no client waits on the database at shutdown.
        self.close_sink_on_done = True
        # with finish_delay: ended streams waiting to be completed, in order
        self._finishing: list[tuple[FlowState, StreamRecord]] = []
        self._finish_timer: asyncio.TimerHandle | None = None
        # Learns characters per token from streams whose usage was reported; used
        # and fed on the event loop only.
        self.estimator = Estimator()

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
            rec.outcome = ending if ending != "eof" else "truncated"
            rec.interrupted = True
            rec.transport_error = transport_error
            rec.duration_ms = round((now - state.t0) * 1000.0, 3)
            rec.recorder_error = f"{type(e).__name__}: {e}"
            return rec

    def _finish(self, state: FlowState, rec: StreamRecord) -> None:
        reading = state.reading
        if reading is not None:
            if not reading.done():
                try:
                    loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
                except RuntimeError:
                    loop = None
                if loop is not None:  # finish once the body is read, back on the loop
                    self._deferred[id(state)] = (state, rec)
                    reading.add_done_callback(
                        lambda _: loop.call_soon_threadsafe(self._finish_deferred, id(state))
                    )
                    return
                with contextlib.suppress(Exception):  # no loop (shutdown): wait a little
                    reading.result(timeout=10)
            state.reading = None
            if reading.done():
                try:
                    _apply_facts(state, *reading.result())
                except Exception:
                    self._internal_error("reading the request")
        # an upstream may echo a key of the request (or another one) in an error
        mask = state.key
        rec.error_message = scrub_key(rec.error_message, mask)
        rec.transport_error = scrub_key(rec.transport_error, mask)
        rec.recorder_error = scrub_key(rec.recorder_error, mask)
        rec.error_type = scrub_key(rec.error_type, mask)
        rec.error_code = scrub_key(rec.error_code, mask)
        state.key = None
        self.health.in_flight -= 1
        delay = self.config.finish_delay
        if delay > 0 and not self._closed:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not None:
                self._finishing.append((state, rec))
                if self._finish_timer is None:
                    self._finish_timer = running.call_later(delay, self._complete_some)
                return
        self._complete(state, rec)

    # Records completed per loop callback: each slice is one short block, the loop
    # serves the connections between two slices.
    FINISH_SLICE = 4

    def _complete_some(self) -> None:
        """Complete the oldest waiting records; come back for the rest."""
        self._finish_timer = None
        batch = self._finishing[: self.FINISH_SLICE]
        del self._finishing[: self.FINISH_SLICE]
        for state, rec in batch:
            self._complete(state, rec)
        if self._finishing:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._complete_all()
                return
            self._finish_timer = loop.call_later(0, self._complete_some)

    def _complete_all(self) -> None:
        """Complete every waiting record now (shutdown)."""
        if self._finish_timer is not None:
            with contextlib.suppress(Exception):  # the loop may be gone already
                self._finish_timer.cancel()
            self._finish_timer = None
        while self._finishing:
            state, rec = self._finishing.pop(0)
            self._complete(state, rec)

    def _complete(self, state: FlowState, rec: StreamRecord) -> None:
        """Usage, cost, health, metrics; then the record goes to the sink."""
        try:
            complete_usage(
                rec,
                state.meter.interpreter.obs,
                state.input_counts,
                self.config.prices,
                self.estimator,
            )
        except Exception:
            self._internal_error("completing usage")
        try:
            UNPRICED.check(rec)  # one warning line per unpriced model per process
        except Exception:
            self._internal_error("unpriced warning")
        self.health.records += 1
        self.health.parse_issues += rec.parse_issues
        if state.capture is not None and isinstance(rec, CapturedRecord):
            rec.body = state.capture  # packed (compressed) by the sink, off the loop
        if self._on_record is not None:
            try:
                self._on_record(rec, state.meter)
            except Exception:
                self._internal_error("on_record")
        if state.flow is not None and self.on_flow_done is not None:
            try:  # before the sink: its writer may pack (and let go of) the body
                self.on_flow_done(state.flow, rec, state.capture)
            except Exception:
                self._internal_error("on_flow_done")
            state.flow = None
        for consume in self.consumers:
            try:
                consume(rec)
            except Exception:
                self._internal_error("record consumer")
        if self.on_span is not None:
            try:
                self.on_span(rec, *(state.trace or (None, None)))
            except Exception:
                self._internal_error("on_span")
        self.sink.submit(rec)

    def _finish_deferred(self, key: int) -> None:
        entry = self._deferred.pop(key, None)
        if entry is not None:  # else done() finished it already
            self._finish(*entry)

    # -- hooks ----------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A request to one of the endpoints starts its record."""
        try:
            req = flow.request
            endpoint = endpoint_for(req.method, req.path)
            if endpoint is None:
                return
            t0 = self._clock()
            headers = _pick_headers(req.headers, _REQUEST_HEADERS)
            query = req.query if "?" in req.path else None  # some gateways take keys there
            key = _header_text(
                authenticating_key(headers, query, endpoint=endpoint, host=req.host, path=req.path)
            )
            record_id, started_at = new_record_start()
            rec = (CapturedRecord if self.config.capture_bodies else StreamRecord)(
                id=record_id,
                started_at=started_at,
                upstream=f"{req.host}:{req.port}",
                project=_header_text(
                    headers.get("openai-project") or headers.get("anthropic-workspace")
                ),
                organization=_header_text(headers.get("openai-organization")),
                api_key_id=fingerprint(key, self.config.key_secret) if key else None,
            )
            meter = StreamMeter(
                endpoint,
                start=t0,
                stall_after=self.config.stall_after,
                max_event_bytes=self.config.max_event_bytes,
                record=rec,
            )
            state = FlowState(meter, rec, t0)
            state.key = KeyMask.of(request_keys(headers, query))
            if self.config.keep_for_ui:
                state.flow = flow
            if "traceparent" in headers:  # forwarded untouched; read for the span only
                state.trace = (headers["traceparent"], headers.get("tracestate"))
            self._flows[flow.id] = state
            self.health.in_flight += 1
            if self._on_start is not None:
                self._on_start(rec)  # after the meter, which sets endpoint and provider
            if self.config.strip_accept_encoding and "accept-encoding" in headers:
                del req.headers["accept-encoding"]
        except Exception:
            self._internal_error("requestheaders")

    def request(self, flow: http.HTTPFlow) -> None:
        """Read the request's model, stream flag and limits (never its text)."""
        try:
            state = self._flows.get(flow.id)
            if state is None:
                return
            body = flow.request.get_content(strict=False) or b""
            if not body:
                return
            endpoint = state.meter.endpoint
            if len(body) > INLINE_PARSE_LIMIT:
                # Read on a worker thread while the request goes on upstream: neither
                # the event loop nor this request waits; the facts are collected when
                # the record is finished.
                state.reading = self._reader_pool().submit(_read_request, body, endpoint)
                return
            facts = read_request(body)
            found = counter_for(facts.model, endpoint)
            if found is None:
                _apply_facts(state, facts, count_request(body, endpoint))
                return
            # A tokenizer counts the prompt exactly: on a worker thread too, whatever
            # the body's size. The call lets go of the GIL (another thread then holds
            # it and the loop waits for it back) and costs about 0.5 ms per 16 KiB.
            # The facts are the record's now (the live view shows the model); the
            # counts join them when the record is finished.
            _apply_facts(state, facts, None)
            state.reading = self._reader_pool().submit(_count_tokens, body, endpoint, facts, found)
        except Exception:
            self._internal_error("request")

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
            state.meter.headers(now, resp.status_code)
            rec = state.record
            headers = _pick_headers(resp.headers, _RESPONSE_HEADERS)
            rec.request_id = _header_text(headers.get("x-request-id") or headers.get("request-id"))
            ctype = headers.get("content-type", "").lower()
            if "text/event-stream" not in ctype:
                rec.streamed = False
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
                    rec.id,
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
        except Exception:
            self._internal_error("responseheaders")

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
            feed = state.meter.feed
            decoder = state.decoder
            if decoder is None:
                for piece, now in zip(pieces, stamps, strict=True):
                    feed(piece, now)
            else:
                for piece, now in zip(pieces, stamps, strict=True):
                    feed(decoder.decode(piece), now)
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
            meter, rec = state.meter, state.record
            if not state.streaming and resp is not None:
                body = resp.get_content(strict=False) or b""
                if 200 <= resp.status_code < 300:
                    meter.read_body(body, now)
                else:
                    rec.error_type, rec.error_code, rec.error_message = read_error_body(body)
            self._finish(state, self._close_meter(state, state.ended_at or now, "eof", None))
        except Exception:
            self._internal_error("response")

    def error(self, flow: http.HTTPFlow) -> None:
        """The flow broke: a client that went away, or an upstream that did."""
        try:
            state = self._flows.pop(flow.id, None)
            if state is None:
                return
            msg = flow.error.msg if flow.error is not None else "unknown error"
            ending = _ending(flow, msg)
            self._finish(state, self._close_meter(state, self._clock(), ending, msg))
        except Exception:
            self._internal_error("error")

    def done(self) -> None:
        """Shutdown: finish what is still open, then (unless the runner does) close
        the sink."""
        try:
            now = self._clock()
            self.cut_at_shutdown += len(self._flows)
            for flow_id in list(self._flows):
                state = self._flows.pop(flow_id)
                rec = self._close_meter(state, now, "client_disconnect", "proxy shut down")
                self._finish(state, rec)
            # shutting down: wait for their bodies, a bounded time for all of them
            # (the loop, and so every client, waits meanwhile)
            deadline = time.monotonic() + DONE_READ_WAIT_S
            for key in list(self._deferred):
                state, rec = self._deferred.pop(key)
                if state.reading is not None:
                    with contextlib.suppress(Exception):
                        state.reading.result(timeout=max(0.0, deadline - time.monotonic()))
                    if not state.reading.done():
                        state.reading = None  # finish without its facts rather than lose it
                self._finish(state, rec)
            self._complete_all()
        except Exception:
            self._internal_error("done")
        if self.close_sink_on_done:
            self.close()

    def close(self) -> None:
        """Flush and close the sink (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._complete_all()
        except Exception:
            self._internal_error("close")
        if self._readers is not None:
            self._readers.shutdown(wait=False, cancel_futures=True)
        try:
            self.sink.close()
        except Exception:
            self._internal_error("sink close")

    def stats(self) -> dict[str, Any]:
        """Health counters plus open flows."""
        return {**self.health.snapshot(), "open_flows": self.open_flows}


def _read_request(body: bytes, endpoint: str) -> tuple[RequestFacts, InputCounts | None]:
    """The request's facts and the counts input estimation needs (never its text).

    With a tokenizer installed for the model (``recorder.proxy.tokenizers``), prompt
    text is counted exactly; otherwise by characters.
    """
    facts = read_request(body)
    found = counter_for(facts.model, endpoint)
    if found is None:
        return facts, count_request(body, endpoint)
    encoding, counter = found
    return facts, count_request(body, endpoint, counter=counter, encoding=encoding)


def _count_tokens(
    body: bytes, endpoint: str, facts: RequestFacts, found: tuple[str, TokenCounter]
) -> tuple[RequestFacts, InputCounts | None]:
    """``_read_request``'s result for a body whose facts were read already."""
    encoding, counter = found
    return facts, count_request(body, endpoint, counter=counter, encoding=encoding)


def _apply_facts(state: FlowState, facts: RequestFacts, counts: InputCounts | None) -> None:
    state.input_counts = counts
    rec = state.record
    rec.model = facts.model
    rec.include_usage = facts.include_usage
    rec.max_output_tokens = facts.max_output_tokens
    rec.requested_tier = facts.service_tier


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
