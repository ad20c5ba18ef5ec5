"""A stream's rhythm: when its bytes, first event, outputs and keepalives came.

:class:`Rhythm` is the timekeeping half of :class:`recorder.core.meter.StreamMeter`
(which reads the stream and tells it when what happened); the figures it keeps
are those docs/record.md defines:

- ``max_silence_ms``: the longest interval with no bytes at all, counted from
  the request start, through response headers and every piece, to the end
  (what an idle timeout between proxy and upstream would see).
- output timing: ``ttft_ms`` is the first output delta. Output gaps are the
  intervals between consecutive outputs and, when the stream was interrupted
  (``error``, ``upstream_disconnect``, ``client_disconnect``, ``truncated``),
  the interval from the last output (or the request start) to the end.
- stalls, one definition for the record and every live view
  (:meth:`Rhythm.stalled_since`): a stall is an interval of at least
  ``stall_after`` seconds without output in a streamed response, from the request
  start or an output to the next output or to the end of the stream, however it
  ends: the wait for the first output counts (it is also ``ttft_ms``), and so does
  the wait after the last. A gateway cuts a stream after so long without model
  output (docs/record.md), before the first token as after it; a stall is the
  silence that puts a stream at that risk. An ``http_error`` or a JSON answer had
  no output stream to stall. Keepalive comments are not output, so they never
  end a stall.
- keepalives: comment lines, the intervals between consecutive ones.

Time is always an argument: the core reads no clock. With ``start=None`` (a
body replayed offline) nothing is timed. Memory stays bounded however long a
stream runs: the intervals kept are capped, every one still counts in the
maxima and totals.
"""

from __future__ import annotations

import heapq
from array import array
from itertools import repeat

from recorder.core.record import Gap, StreamRecord

DEFAULT_STALL_AFTER_S = 30.0
# How much rhythm detail one stream may keep (see the module docstring).
MAX_INTERVALS = 100_000
MAX_STALL_GAPS = 1_000
KEEPALIVE_GAPS_KEPT = 5


def ms(seconds: float) -> float:
    """Seconds as the record's milliseconds."""
    return round(seconds * 1000.0, 3)


class Rhythm:
    """The timings of one stream, told what happened when. Not thread-safe.

    Its state is the meter's too: the meter's hot paths update the figures in
    place where a call per piece would cost more than the update."""

    __slots__ = (
        "_first_event",
        "_first_output",
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
        "output_intervals",
        "stall_after",
    )

    def __init__(self, start: float | None, stall_after: float) -> None:
        self.stall_after = stall_after
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

    def _headers_at(self, now: float) -> None:
        """Response headers arrived (timed streams only)."""
        assert self._t0 is not None
        self._ttfb = now - self._t0
        self._bytes_at(now)

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
            self._first(now)
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
            self._stall(start, gap)

    def _stall(self, start: float, gap: float) -> None:
        self._stalls += 1
        self._stall_s += gap
        if len(self._stall_gaps) < MAX_STALL_GAPS:
            assert self._t0 is not None
            self._stall_gaps.append(Gap("stall", ms(start - self._t0), ms(gap)))

    def _first(self, now: float) -> None:
        """The first output: the wait for it was a stall if it was long enough."""
        self._first_output = now
        t0 = self._t0
        if t0 is not None and now - t0 >= self.stall_after:
            self._stall(t0, now - t0)

    def stalled_since(self, now: float) -> float | None:
        """When the stall under way at ``now`` began (the last output, or the request
        start before the first), or None: the one definition of a stall while it
        lasts (see the module docstring), read by every live view; the meter does
        no extra work for it."""
        since = self._last_output if self._last_output is not None else self._t0
        if since is None or now - since < self.stall_after:
            return None
        return since

    def silent_since(self) -> float | None:
        """Since when no output came: the last output, or the request start before
        the first (None for an untimed stream)."""
        return self._last_output if self._last_output is not None else self._t0

    @property
    def last_output_ms(self) -> float | None:
        """The last output, in the record's milliseconds from the request start."""
        if self._last_output is None or self._t0 is None:
            return None
        return ms(self._last_output - self._t0)

    @property
    def stall_gaps(self) -> list[Gap]:
        """The stalls over so far (their start from the request start, and length),
        in order; read, not changed."""
        return self._stall_gaps

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

    def _time_record(self, rec: StreamRecord, now: float) -> None:
        """The stream ended at ``now``: fill the record's timings (its outcome,
        and whether it was streamed, already set). Nothing for an untimed stream."""
        t0 = self._t0
        if t0 is None:
            return
        self._bytes_at(now)
        if rec.streamed and rec.outcome != "http_error":
            since = self._last_output if self._last_output is not None else t0
            tail = now - since
            # a silence that runs into a cut is an output gap
            if rec.interrupted and (self._max_out_gap is None or tail > self._max_out_gap):
                self._max_out_gap = tail
            if tail >= self.stall_after:
                self._stall(since, tail)  # a stall that ran into the end, however it ended
        rec.ttfb_ms = None if self._ttfb is None else ms(self._ttfb)
        rec.first_event_ms = None if self._first_event is None else ms(self._first_event - t0)
        rec.ttft_ms = None if self._first_output is None else ms(self._first_output - t0)
        rec.duration_ms = ms(now - t0)
        rec.max_silence_ms = ms(self._max_silence)
        rec.max_output_gap_ms = None if self._max_out_gap is None else ms(self._max_out_gap)
        rec.max_keepalive_gap_ms = None if self._max_ka_gap is None else ms(self._max_ka_gap)
        rec.stalls = self._stalls
        rec.stall_ms = ms(self._stall_s)
        gaps = list(self._stall_gaps)
        gaps += [
            Gap("keepalive", ms(start - t0), ms(length))
            for length, start in sorted(self._ka_top, key=lambda g: g[1])
        ]
        if self._max_silence > 0:
            gaps.append(Gap("silence", ms(self._silence_at - t0), ms(self._max_silence)))
        rec.gaps = sorted(gaps, key=lambda g: (g.start_ms, g.kind))
