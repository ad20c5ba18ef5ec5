"""The stream meter: ``(bytes, now)`` pairs in, one finished record out.

Theory of operation
-------------------
The edge (the mitmproxy addon, or `recorder replay`) creates a meter when a
request reaches the proxy, tells it when response headers arrived, feeds every
received piece with its arrival time, and finally calls :meth:`StreamMeter.finish`
with how the body ended. The meter frames the bytes (:mod:`recorder.core.sse`),
hands events to the endpoint's interpreter, and keeps the stream's rhythm:

- ``max_silence_ms``: the longest interval with no bytes at all, counted from
  the request start, through response headers and every piece, to the end
  (what an idle timeout between proxy and upstream would see).
- output timing: ``ttft_ms`` is the first output delta. Output gaps are the
  intervals between consecutive outputs and, when the stream was interrupted
  (``error``, ``upstream_disconnect``, ``client_disconnect``, ``truncated``),
  the interval from the last output (or the request start) to the end: a
  silence that runs into a cut is the stall that mattered. An ``http_error``
  had no output stream to stall. Keepalive comments are not output, so
  they never end a stall. Each gap of at least ``stall_after`` seconds is a stall.
- keepalives: comment lines, the intervals between consecutive ones.

Time is always an argument: the core reads no clock. With ``start=None`` (a
body replayed offline) every timing is None and times passed in are ignored.
All events of one piece share its arrival time.

:meth:`StreamMeter.feed_many` takes a batch of pieces with their times (the
proxy meters in batches) and leaves exactly what ``feed`` for each would, at
less cost a piece; see its docstring and docs/performance.md.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Iterable
from itertools import repeat

from recorder.core.meter_batch import feed_many as _feed_many
from recorder.core.protocols import PROVIDERS, interpreter_for
from recorder.core.record import (
    INTERRUPTED_OUTCOMES,
    Gap,
    Outcome,
    StreamRecord,
    combine_sources,
    ending_outcome,
)
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES, Comment, Event, FramingIssue, SSEFramer

ENDINGS = ("eof", "upstream_disconnect", "client_disconnect")
DEFAULT_STALL_AFTER_S = 30.0
# How much rhythm detail one stream may keep, so memory stays bounded however
# long a stream runs: every interval is still counted in the maxima and totals.
MAX_INTERVALS = 100_000
MAX_STALL_GAPS = 1_000
KEEPALIVE_GAPS_KEPT = 5


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class StreamMeter:
    """Meters one response body. Not thread-safe; one per stream."""

    __slots__ = (
        "_first_event",
        "_first_output",
        "_fused",
        "_fused_for",
        "_ka_gaps",
        "_ka_top",
        "_last_byte",
        "_last_ka",
        "_last_output",
        "_max_ka_gap",
        "_max_out_gap",
        "_max_silence",
        "_silence_at",
        "_stall_gaps",
        "_stall_s",
        "_stalls",
        "_t0",
        "_ttfb",
        "endpoint",
        "events",
        "framer",
        "interpreter",
        "keepalives",
        "output_intervals",
        "oversized_events",
        "partial_event_at_end",
        "record",
        "stall_after",
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
        self.endpoint = endpoint
        self.interpreter = interpreter_for(endpoint)
        self.framer = SSEFramer(max_event_bytes)
        self.stall_after = stall_after
        self.record = record if record is not None else StreamRecord()
        self.record.endpoint = endpoint
        self.record.provider = PROVIDERS[endpoint]
        self._t0 = start
        self._ttfb: float | None = None
        self._last_byte = start
        self._max_silence = 0.0
        self._silence_at = 0.0
        self._first_event: float | None = None
        self._first_output: float | None = None
        self._last_output: float | None = None
        self._max_out_gap: float | None = None
        self._stalls = 0
        self._stall_s = 0.0
        self._stall_gaps: list[Gap] = []
        self._last_ka: float | None = None
        self._max_ka_gap: float | None = None
        self._ka_top: list[tuple[float, float]] = []  # min-heap of (length, start)
        self._ka_gaps = array("d")
        self.output_intervals = array("d")
        self.events = 0
        self.keepalives = 0
        self.oversized_events = 0
        self.partial_event_at_end = False
        # feed_many's reader of a whole piece, and the template it was made from
        self._fused: Callable[[bytes], int] | None = None
        self._fused_for: object = None

    # -- intake ---------------------------------------------------------------

    def headers(self, now: float | None, status: int | None) -> None:
        """Response headers arrived, with this HTTP status."""
        self.record.http_status = status
        if self._t0 is not None and now is not None:
            self._ttfb = now - self._t0
            self._bytes_at(now)

    def feed(self, data: bytes, now: float | None = None) -> None:
        """One received piece of the body (``b""`` is allowed and means nothing here)."""
        if not data:
            return
        timed = self._t0 is not None and now is not None
        if timed:
            last = self._last_byte  # _bytes_at, inlined: this runs for every piece
            if last is not None and now - last > self._max_silence:  # type: ignore[operator]
                self._max_silence = now - last  # type: ignore[operator]
                self._silence_at = last
            self._last_byte = now
        event = self.framer.feed_one(data)
        if event is not None:
            # The usual piece, one whole event: what the loop below does for it,
            # _output(now, 1) included, without the list, the loop and the calls.
            self.events += 1
            if not timed:
                self.interpreter.handle(event)
                return
            if self._first_event is None:
                self._first_event = now
            if self.interpreter.handle(event):
                last = self._last_output
                self._last_output = now
                if last is None:
                    self._first_output = now
                    return
                gap = now - last  # type: ignore[operator]
                top = self._max_out_gap
                if top is None or gap > top or gap >= self.stall_after:
                    self._output_gap(last, gap)
                intervals = self.output_intervals
                if len(intervals) < MAX_INTERVALS:
                    intervals.append(gap)
            return
        items = self.framer.feed(data)
        if not items:
            return
        # Per event only what differs between events is done here: all events of
        # a piece share its arrival time, so counts and output timing are settled
        # once per piece (the finally keeps them exact should an interpreter raise).
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
                    if timed:
                        self._keepalive(now)  # type: ignore[arg-type]
                elif isinstance(item, FramingIssue) and item.kind == "oversized_event":
                    # skipped for its size, but the upstream did send an event
                    events += 1
                    self.oversized_events += 1
        finally:
            if events:
                self.events += events
                if timed and self._first_event is None:
                    self._first_event = now
            if outputs and timed:
                self._output(now, outputs)  # type: ignore[arg-type]

    def feed_many(self, pieces: Iterable[bytes], stamps: Iterable[float | None]) -> None:
        """``feed(piece, now)`` for each piece and its arrival time, in order.

        The same state after, exactly, at less cost per piece; the batch path is
        :func:`recorder.core.meter_batch.feed_many` (read its docstring).
        """
        _feed_many(self, pieces, stamps, MAX_INTERVALS)

    def read_body(self, body: bytes, now: float | None = None) -> None:
        """A whole non-streamed JSON body (``streamed: false``)."""
        self.record.streamed = False
        if self._t0 is not None and now is not None:
            self._bytes_at(now)
        if self.interpreter.read_body(body) and self._t0 is not None and now is not None:
            self._output(now)

    # -- rhythm ---------------------------------------------------------------

    def _bytes_at(self, now: float) -> None:
        last = self._last_byte
        if last is not None:
            gap = now - last
            if gap > self._max_silence:
                self._max_silence = gap
                self._silence_at = last
        self._last_byte = now

    def _output(self, now: float, count: int = 1) -> None:
        """``count`` outputs at ``now`` (the outputs of one piece share its time)."""
        last = self._last_output
        self._last_output = now
        if last is None:
            self._first_output = now
            last = now
            count -= 1
            if not count:
                return
        gap = now - last
        self._output_gap(last, gap)
        intervals = self.output_intervals
        if len(intervals) < MAX_INTERVALS:
            intervals.append(gap)
        rest = count - 1
        if rest <= 0:
            return
        gap = now - now  # each of the others follows the one before at no interval
        if gap >= self.stall_after:
            for _ in range(rest):
                self._output_gap(now, gap)
        elif self._max_out_gap is None or gap > self._max_out_gap:
            self._max_out_gap = gap
        room = MAX_INTERVALS - len(intervals)
        if room > 0:
            intervals.extend(repeat(gap, min(rest, room)))

    def _output_gap(self, start: float, gap: float) -> None:
        if self._max_out_gap is None or gap > self._max_out_gap:
            self._max_out_gap = gap
        if gap >= self.stall_after:
            self._stalls += 1
            self._stall_s += gap
            if len(self._stall_gaps) < MAX_STALL_GAPS:
                assert self._t0 is not None
                self._stall_gaps.append(Gap("stall", _ms(start - self._t0), _ms(gap)))

    def _keepalive(self, now: float) -> None:
        last = self._last_ka
        if last is not None:
            gap = now - last
            if self._max_ka_gap is None or gap > self._max_ka_gap:
                self._max_ka_gap = gap
            if len(self._ka_gaps) < MAX_INTERVALS:
                self._ka_gaps.append(gap)
            if len(self._ka_top) < KEEPALIVE_GAPS_KEPT:
                heapq.heappush(self._ka_top, (gap, last))
            elif gap > self._ka_top[0][0]:
                heapq.heapreplace(self._ka_top, (gap, last))
        self._last_ka = now

    @property
    def last_output_at(self) -> float | None:
        """When the latest output arrived (the edge's clock; None: none yet).

        Read by the live view (``recorder.proxy.live``) once a second to see a
        stall while it lasts; the meter does no extra work for it."""
        return self._last_output

    @property
    def first_output_at(self) -> float | None:
        """When the first output arrived (None: none yet)."""
        return self._first_output

    @property
    def keepalive_intervals(self) -> array[float]:
        """Every interval between consecutive keepalives, in seconds (capped)."""
        return self._ka_gaps

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
        """
        if ending not in ENDINGS:
            ending = "upstream_disconnect"
        for item in self.framer.feed(b""):
            if type(item) is not Event and type(item) is not Comment:
                self.partial_event_at_end = True
        obs = self.interpreter.obs
        rec = self.record
        status = rec.http_status
        outcome: Outcome
        if status is not None and not 200 <= status < 300:
            outcome = "http_error"
        elif obs.terminal is not None:
            outcome = obs.terminal
        else:
            outcome = ending_outcome(ending)
        rec.outcome = outcome
        rec.interrupted = outcome in INTERRUPTED_OUTCOMES
        rec.transport_error = transport_error

        t0 = self._t0
        if t0 is not None and now is not None:
            self._bytes_at(now)
            if outcome in INTERRUPTED_OUTCOMES and rec.streamed:
                last = self._last_output if self._last_output is not None else t0
                self._output_gap(last, now - last)
            rec.ttfb_ms = None if self._ttfb is None else _ms(self._ttfb)
            rec.first_event_ms = None if self._first_event is None else _ms(self._first_event - t0)
            rec.ttft_ms = None if self._first_output is None else _ms(self._first_output - t0)
            rec.duration_ms = _ms(now - t0)
            rec.max_silence_ms = _ms(self._max_silence)
            rec.max_output_gap_ms = None if self._max_out_gap is None else _ms(self._max_out_gap)
            rec.max_keepalive_gap_ms = None if self._max_ka_gap is None else _ms(self._max_ka_gap)
            rec.stalls = self._stalls
            rec.stall_ms = _ms(self._stall_s)
            gaps = list(self._stall_gaps)
            gaps += [
                Gap("keepalive", _ms(start - t0), _ms(length))
                for length, start in sorted(self._ka_top, key=lambda g: g[1])
            ]
            if self._max_silence > 0:
                gaps.append(Gap("silence", _ms(self._silence_at - t0), _ms(self._max_silence)))
            rec.gaps = sorted(gaps, key=lambda g: (g.start_ms, g.kind))

        if rec.streamed:
            rec.events = self.events
            rec.keepalives = self.keepalives
        rec.output_chars = obs.output_chars
        rec.tool_calls = obs.tool_calls
        rec.finish_reason = obs.finish_reason
        rec.response_model = obs.response_model
        rec.response_id = obs.response_id
        if obs.error_type or obs.error_code or obs.error_message:
            # an in-stream error; otherwise keep what the edge read from an error body
            rec.error_type = obs.error_type
            rec.error_code = obs.error_code
            rec.error_message = obs.error_message
        rec.parse_issues = obs.parse_issues
        rec.oversized_events = self.oversized_events
        rec.partial_event_at_end = self.partial_event_at_end
        usage = obs.usage
        if usage is not None:
            rec.input_tokens = usage.input_tokens
            rec.output_tokens = usage.output_tokens
            rec.cache_read_tokens = usage.cache_read_tokens
            rec.cache_write_tokens = usage.cache_write_tokens
            rec.reasoning_tokens = usage.reasoning_tokens
            rec.raw_usage = obs.raw_usage
        rec.input_source = "reported" if rec.input_tokens is not None else "none"
        rec.output_source = "reported" if rec.output_tokens is not None else "none"
        rec.usage_source = combine_sources(rec.input_source, rec.output_source)
        return rec
