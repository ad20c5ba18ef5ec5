"""The stream meter: ``(bytes, now)`` pairs in, one finished record out.

Theory of operation
-------------------
The edge (the mitmproxy addon, or `recorder replay`) creates a meter when a
request reaches the proxy, tells it when response headers arrived, feeds every
received piece with its arrival time, and finally calls :meth:`StreamMeter.finish`
with how the body ended. The meter frames the bytes (its framer,
:mod:`recorder.core.sse`), hands events to the endpoint's interpreter
(:mod:`recorder.core.protocols`) and keeps the stream's rhythm
(:class:`~recorder.core.rhythm.Rhythm`, whose docstring defines the figures).
All events of one piece share its arrival time, so what an event changes in
the rhythm is settled once per piece.

Two ways in, one state: :meth:`StreamMeter.feed` takes a piece,
:meth:`StreamMeter.feed_many` a batch of pieces with their times (the proxy
meters in batches), and leaves exactly what ``feed`` for each would, at less
cost a piece: the rhythm stays in locals across the batch, and a piece that is
one whole event the interpreter's byte template reads (the usual output delta,
one per piece on an HTTP/1 chunked stream) is read in one call, with no Event
and no framing; a piece of several such events is read a run at a time
(``Framer.runner``). The framer says how an event is written whole
(``Framer.whole_event``; a binary wire's framer reads such a piece itself,
``Framer.message_reader``), the interpreter gives the template
(``Interpreter.piece_reader``); docs/performance.md has the figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from recorder.core.eventstream import EventStreamFramer
from recorder.core.framing import Comment, Event, Framer, FramingIssue, IssueKind
from recorder.core.json_array import JSONArrayFramer
from recorder.core.protocols import EVENTSTREAM_ENDPOINTS, PROVIDERS, interpreter_for
from recorder.core.record import INTERRUPTED_OUTCOMES, StreamRecord, ending_outcome
from recorder.core.record_observed import put_observed
from recorder.core.rhythm import (
    DEFAULT_STALL_AFTER_S,
    KEEPALIVE_GAPS_KEPT,
    MAX_INTERVALS,
    MAX_STALL_GAPS,
    Rhythm,
)
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES, SSEFramer

if TYPE_CHECKING:
    from recorder.core.framing import EventReader, EventRun, Item

__all__ = [
    "DEFAULT_STALL_AFTER_S",
    "ENDINGS",
    "KEEPALIVE_GAPS_KEPT",
    "MAX_INTERVALS",
    "MAX_STALL_GAPS",
    "SWITCHING_PROTOCOLS",
    "StreamMeter",
]

ENDINGS = ("eof", "upstream_disconnect", "client_disconnect")
# The status of a WebSocket upgrade: each response on the connection came after it
SWITCHING_PROTOCOLS = 101

# the framing issues that are a message sent and unreadable (a binary wire's)
_DAMAGED = frozenset({IssueKind.BAD_CRC, IssueKind.MALFORMED})

Pairs = Iterator[tuple[bytes, float | None]]


class StreamMeter(Rhythm):
    """Meters one response body. Not thread-safe; one per stream."""

    __slots__ = (
        "_fused",
        "_fused_for",
        "_run",
        "endpoint",
        "events",
        "framer",
        "interpreter",
        "keepalives",
        "oversized_events",
        "partial_event_at_end",
        "record",
    )

    def __init__(
        self,
        endpoint: str,
        *,
        start: float | None = None,
        stall_after: float = DEFAULT_STALL_AFTER_S,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        record: StreamRecord | None = None,
    ) -> None:
        super().__init__(start, stall_after)
        self.endpoint = endpoint
        self.interpreter = interpreter_for(endpoint)
        self.framer: Framer = (
            EventStreamFramer(max_event_bytes)
            if endpoint in EVENTSTREAM_ENDPOINTS
            else SSEFramer(max_event_bytes, bare_json=self.interpreter.bare_json)
        )
        self.record = record if record is not None else StreamRecord()
        self.record.endpoint = endpoint
        self.record.provider = PROVIDERS[endpoint]
        if endpoint in EVENTSTREAM_ENDPOINTS:
            self.record.transport = "eventstream"  # (read_body makes it json)
        self.events = 0
        self.keepalives = 0
        self.oversized_events = 0
        self.partial_event_at_end = False
        # the batch path's reader of a whole piece and of a run of events in a
        # piece, and the template they were made from (see _follow_template)
        self._fused: EventReader | None = None
        self._run: EventRun | None = None
        self._fused_for: object = None

    # -- intake ---------------------------------------------------------------

    def frames_json_array(self) -> bool:
        """The body is a streamed JSON array (its first byte is ``[``): frame it so,
        if this endpoint streams one (Google's ``:streamGenerateContent`` without
        ``alt=sse``); whether it does. Call it before the first piece."""
        if not self.interpreter.json_array:
            return False
        self.framer = JSONArrayFramer(self.framer.max_event_bytes)
        self.record.transport = "json-array"
        self.record.streamed = True  # (its headers said JSON: the live view watches it now)
        return True

    def headers(self, now: float | None, status: int | None) -> None:
        """Response headers arrived, with this HTTP status."""
        self.record.http_status = status
        if self._t0 is not None and now is not None:
            self._headers_at(now)

    def feed(self, data: bytes, now: float | None = None) -> None:
        """One received piece of the body (``b""`` is allowed and means nothing here)."""
        if not data:
            return
        if self._t0 is None:
            now = None
        elif now is not None:
            last = self._last_byte  # _bytes_at, inlined: this runs for every piece
            if last is not None and now - last > self._max_silence:
                self._max_silence = now - last
                self._silence_at = last
            self._last_byte = now
        event = self.framer.feed_one(data)
        if event is None:
            items = self.framer.feed(data)
            if items:
                self._interpret(items, now)
            return
        # The usual piece, one whole event: what _interpret does for it,
        # _output(now, 1) included, without the list, the loop and the calls.
        self.events += 1
        if now is None:
            self.interpreter.handle(event)
            return
        if self._first_event is None:
            self._first_event = now
        if self.interpreter.handle(event):
            last = self._last_output
            self._last_output = now
            if last is None:
                self._first(now)
                return
            gap = now - last
            top = self._max_out_gap
            if top is None or gap > top or gap >= self.stall_after:
                self._output_gap(last, gap)
            intervals = self.output_intervals
            if len(intervals) < MAX_INTERVALS:
                intervals.append(gap)

    def _interpret(self, items: list[Item], now: float | None) -> None:
        """The items of one piece, which arrived at ``now`` (None: untimed). Per
        event only what differs between events is done here; counts and output
        timing are settled once (the finally keeps them exact should an
        interpreter raise)."""
        handle = self.interpreter.handle
        events = outputs = 0
        try:
            for item in items:
                kind = type(item)
                if kind is Event:
                    events += 1
                    if handle(item):  # type: ignore[arg-type]
                        outputs += 1
                elif kind is Comment:
                    self.keepalives += 1
                    if now is not None:
                        self._keepalive(now)
                elif isinstance(item, FramingIssue):
                    if item.kind is IssueKind.OVERSIZED:
                        # skipped for its size, but the upstream did send an event
                        events += 1
                        self.oversized_events += 1
                    elif item.kind in _DAMAGED:
                        # a binary message that failed its CRC or could not be read:
                        # sent, unreadable, as a malformed SSE event is
                        events += 1
                        self.interpreter.obs.parse_issues += 1
        finally:
            if events:
                self.events += events
                if now is not None and self._first_event is None:
                    self._first_event = now
            if outputs and now is not None:
                self._output(now, outputs)

    def feed_many(self, pieces: Iterable[bytes], stamps: Iterable[float | None]) -> None:
        """``feed(piece, now)`` for each piece and its arrival time, in order.

        The same state after, exactly, at less cost per piece (see the module
        docstring): a piece the template cannot read whole goes through
        :meth:`feed`. Both arguments are consumed in step, so ``pieces`` may be
        made lazily (an exception raised making one leaves the pieces before it
        metered)."""
        pairs = zip(pieces, stamps, strict=True)
        if self._t0 is None or self._last_byte is None:
            for data, now in pairs:
                self.feed(data, now)
            return
        framer = self.framer
        limit = framer.piece_limit
        while True:
            slow = self._whole_pieces(pairs, limit)
            if slow is None:
                return
            data, now = slow
            run = self._run
            if run is not None and now is not None and framer.splittable(data):
                self._feed_events(data, now, run)
            else:
                self.feed(data, now)
            self._follow_template()

    def _whole_pieces(self, pairs: Pairs, limit: int) -> tuple[bytes, float | None] | None:
        """Meter the next pieces of ``pairs`` while each is one whole event that the
        fused reader reads (what ``feed`` does for it: the bytes' time, the event,
        ``_output(now, 1)``); return the first piece it cannot read, not metered
        (None: the pairs ran out). The rhythm stays in locals meanwhile."""
        read = self._fused if self.framer.idle and self._first_event is not None else None
        last_byte = self._last_byte
        assert last_byte is not None  # feed_many checked: a timed stream
        max_silence = self._max_silence
        silence_at = self._silence_at
        events = self.events
        last_output = self._last_output
        top = self._max_out_gap
        stall_after = self.stall_after
        intervals = self.output_intervals
        append = intervals.append
        room = MAX_INTERVALS - len(intervals)
        try:
            for data, now in pairs:
                if read is None or now is None or len(data) > limit:
                    return data, now
                n = read(data)  # counts nothing when it returns -1
                if n < 0:
                    return data, now
                if now - last_byte > max_silence:
                    max_silence = now - last_byte
                    silence_at = last_byte
                last_byte = now
                events += 1
                if n:
                    if last_output is None:
                        self._first(now)
                    else:
                        gap = now - last_output
                        if top is None or gap > top or gap >= stall_after:
                            self._output_gap(last_output, gap)
                            top = self._max_out_gap
                        if room > 0:
                            append(gap)
                            room -= 1
                    last_output = now
            return None
        finally:
            self._last_byte = last_byte
            self._max_silence = max_silence
            self._silence_at = silence_at
            self.events = events
            self._last_output = last_output

    def _feed_events(self, data: bytes, now: float, run: EventRun | None) -> None:
        """``feed(data, now)`` for a timed piece the framer finds splittable: each
        run of events that begins where nothing is pending and that ``run`` reads
        whole is read so (in C, one call for the run); the rest goes through the
        framer an event at a time, in order (any chunking frames alike), then
        the interpreter."""
        self._bytes_at(now)
        framer = self.framer
        template = self.interpreter.template
        limit = framer.piece_limit
        events = outputs = 0
        pos = 0
        size = len(data)
        # settle() once, then again only after the framer was fed: a run leaves
        # the framer as it was, settled
        settled = False
        try:
            while pos < size:
                if run is not None and (settled or framer.settle()):
                    settled = True
                    pos, read_events, read_outputs = run(data, pos, limit)
                    events += read_events
                    outputs += read_outputs
                    if pos >= size:
                        break
                # an event the run did not read (or none could): through the framer
                settled = False
                items, pos = framer.feed_next(data, pos)
                self._interpret(items, now)
                if self.interpreter.template is not template:
                    run = None  # learned another: feed_many makes its reader
        except BaseException:
            if pos < size:  # feed frames the whole piece before it interprets any of it
                framer.feed(data[pos:])
            raise
        finally:
            if events:
                self.events += events
                if self._first_event is None:
                    self._first_event = now
            if outputs:
                self._output(now, outputs)

    def _follow_template(self) -> None:
        """After a piece that went the long way: if the interpreter learned another
        template, read whole pieces, and runs of events, with it."""
        template = self.interpreter.template
        if template is not self._fused_for:
            self._fused_for = template
            self._fused = read = self.interpreter.piece_reader(self.framer)
            self._run = None if read is None else self.framer.runner(read)

    def feed_event(self, event: Event, now: float | None = None) -> None:
        """One event framed already (a WebSocket message: its ``type`` and its
        text), received at ``now``: what :meth:`feed` does for a piece that is
        exactly this one event (the time's silence, the event, its output)."""
        if self._t0 is None:
            now = None
        elif now is not None:
            self._bytes_at(now)
        self._interpret([event], now)

    def feed_read(self, data: bytes, now: float) -> bool:
        """:meth:`feed_event` of a message that the interpreter reads whole by its
        data alone (``Interpreter.quick``: a delta like the last), received at
        ``now``; False, having done nothing, when it cannot (the caller feeds the
        message as an event then). The same state after, exactly, without the
        routing and the Event: most of a WebSocket's messages are deltas like the last."""
        read = self.interpreter.quick
        if read is None or self._t0 is None:
            return False
        n = read(data)
        if n < 0:
            return False
        # what feed_event -> _interpret does for one event at ``now``
        self._bytes_at(now)
        self.events += 1
        if self._first_event is None:
            self._first_event = now
        if n:
            self._output(now)
        return True

    def feed_keepalive(self, now: float | None = None) -> None:
        """A keepalive that is not a comment of the body (a WebSocket ping or pong),
        received at ``now``: counted, timed and kept as a comment line is."""
        if self._t0 is None:
            now = None
        elif now is not None:
            self._bytes_at(now)
        self._interpret([Comment("ping")], now)

    def read_body(self, body: bytes, now: float | None = None) -> None:
        """A whole non-streamed JSON body (``streamed: false``)."""
        self.record.streamed = False
        self.record.transport = "json"
        if self._t0 is not None and now is not None:
            self._bytes_at(now)
        if self.interpreter.read_body(body) and self._t0 is not None and now is not None:
            # an answer all at once: its output has a time, no stream to stall
            self._first_output = self._last_output = now

    # -- ending ---------------------------------------------------------------

    def finish(
        self,
        now: float | None = None,
        *,
        ending: str = "eof",
        transport_error: str | None = None,
    ) -> StreamRecord:
        """End the body and return the finished record.

        ``ending`` is ``eof`` (the body ended cleanly), ``upstream_disconnect`` or
        ``client_disconnect``; ``transport_error`` is the edge's own words for it.
        The outcome follows the precedence of docs/record.md, "Outcomes".
        """
        if ending not in ENDINGS:
            ending = "upstream_disconnect"
        ended = self.framer.feed(b"")
        for item in ended:
            if type(item) is not Event and type(item) is not Comment:
                self.partial_event_at_end = True
        last: list[Item] = [item for item in ended if type(item) is Event]
        if last:  # bare JSON that only the end completes (a framer with bare_json)
            self._interpret(last, self._last_byte if self._t0 is not None else None)
        obs = self.interpreter.obs
        rec = self.record
        status = rec.http_status
        if status is not None and not 200 <= status < 300 and status != SWITCHING_PROTOCOLS:
            rec.outcome = "http_error"
        elif obs.terminal is not None:
            rec.outcome = obs.terminal
        else:
            rec.outcome = ending_outcome(ending)
        rec.interrupted = rec.outcome in INTERRUPTED_OUTCOMES
        rec.transport_error = transport_error
        if now is not None:
            self._time_record(rec, now)
        if rec.streamed:
            rec.events = self.events
            rec.keepalives = self.keepalives
        rec.oversized_events = self.oversized_events
        rec.partial_event_at_end = self.partial_event_at_end
        put_observed(rec, obs)
        self.interpreter.annotate(rec)
        return rec
