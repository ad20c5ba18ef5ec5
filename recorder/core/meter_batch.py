"""The stream meter's batch path: :meth:`StreamMeter.feed_many` and its helper.

Kept apart from :mod:`recorder.core.meter` because it is one concern (metering a
batch of pieces at less cost a piece, see docs/performance.md) that reads and
writes the meter's state directly: the functions take the meter as ``self`` and
leave exactly what ``StreamMeter.feed`` for each piece would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from recorder.core.protocols.template import runner
from recorder.core.sse import Comment, Event, FramingIssue

if TYPE_CHECKING:
    from recorder.core.meter import StreamMeter


def feed_many(
    self: StreamMeter,
    pieces: Iterable[bytes],
    stamps: Iterable[float | None],
    max_intervals: int,
) -> None:
    """``feed(piece, now)`` for each piece and its arrival time, in order.

    The same state after, exactly, at less cost per piece: the meter's and the
    framer's state stay in locals across the batch, and a piece that is one
    whole event whose data the interpreter's byte template reads (the usual
    output delta, one per piece on an HTTP/1 chunked stream) is read in one
    call, with no Event and no framing (see ``Template.framed``). Any other
    piece goes through :meth:`feed`, with the locals written back first.
    Both arguments are consumed in step, so ``pieces`` may be made lazily (an
    exception raised making one leaves the pieces before it metered).
    ``max_intervals`` is the meter's cap on kept output intervals (the caller
    passes its module's, so the two paths keep one limit).
    """
    pairs = zip(pieces, stamps, strict=True)
    if self._t0 is None or self._last_byte is None:
        for data, now in pairs:
            self.feed(data, now)
        return
    framer = self.framer
    limit = framer.max_event_bytes + 2  # feed_one's cap, on the piece's length
    stall_after = self.stall_after
    intervals = self.output_intervals
    append = intervals.append
    while True:
        read = self._fused if framer.idle and self._first_event is not None else None
        last_byte = self._last_byte
        max_silence = self._max_silence
        silence_at = self._silence_at
        events = self.events
        last_output = self._last_output
        top = self._max_out_gap
        room = max_intervals - len(intervals)
        slow = None
        try:
            for data, now in pairs:
                if read is None or now is None or len(data) > limit:
                    slow = data, now
                    break
                n = read(data)  # counts nothing when it returns -1
                if n < 0:
                    slow = data, now
                    break
                # what feed does for this piece: _bytes_at, the event, _output(now, 1)
                if now - last_byte > max_silence:
                    max_silence = now - last_byte
                    silence_at = last_byte
                last_byte = now
                events += 1
                if n:
                    if last_output is None:
                        self._first_output = now
                    else:
                        gap = now - last_output
                        if top is None or gap > top or gap >= stall_after:
                            self._output_gap(last_output, gap)
                            top = self._max_out_gap
                        if room > 0:
                            append(gap)
                            room -= 1
                    last_output = now
        finally:
            self._last_byte = last_byte
            self._max_silence = max_silence
            self._silence_at = silence_at
            self.events = events
            self._last_output = last_output
        if slow is None:
            return
        data, now = slow
        read = self._fused
        if (
            read is not None
            and now is not None
            and 0 <= data.find(b"\n\n") < len(data) - 2  # more than one event
            and data.find(b"\r") < 0
        ):
            _feed_events(self, data, now, read)
        else:
            self.feed(data, now)
        template = self.interpreter.template
        if template is not self._fused_for:  # learned another: read pieces with it
            self._fused_for = template
            self._fused = self.interpreter.framed_reader()


def _feed_events(
    self: StreamMeter, data: bytes, now: float, read: Callable[[bytes], int] | None
) -> None:
    """``feed(data, now)`` for a piece of several events, timed, with no CR: each
    run of events that begins where nothing is pending and that ``read`` reads
    whole is read so (by its ``runner``: in C, one call for the run), the rest
    goes through the framer, an event at a time, in order, as stretches that end
    with a blank line (any chunking frames alike), then the interpreter."""
    last = self._last_byte  # _bytes_at
    if last is not None and now - last > self._max_silence:
        self._max_silence = now - last
        self._silence_at = last
    self._last_byte = now
    framer = self.framer
    settle = framer.settle
    feed = framer.feed
    interpreter = self.interpreter
    handle = interpreter.handle
    template = interpreter.template
    run = None if read is None else runner(read)
    limit = framer.max_event_bytes + 2
    events = outputs = 0
    pos = 0
    size = len(data)
    # settle() once, then again only after the framer was fed: a read leaves the
    # framer as it was (settled, with its _idle set by that settle)
    settled = False
    try:
        while pos < size:
            if run is not None and (settled or settle()):
                settled = True
                pos, read_events, read_outputs = run(data, pos, limit)
                events += read_events
                outputs += read_outputs
                if pos >= size:
                    break
            # an event the run did not read (or none could): through the framer
            stop = data.find(b"\n\n", pos)
            stop = size if stop < 0 else stop + 2
            settled = False
            items = feed(data[pos:stop])
            pos = stop
            for item in items:  # as feed does
                kind = type(item)
                if kind is Event:
                    events += 1
                    if handle(item):  # type: ignore[arg-type]
                        outputs += 1
                    if interpreter.template is not template:
                        run = None  # learned another: the caller makes its reader
                elif kind is Comment:
                    self.keepalives += 1
                    self._keepalive(now)
                elif isinstance(item, FramingIssue) and item.kind == "oversized_event":
                    events += 1
                    self.oversized_events += 1
    except BaseException:
        if pos < size:  # feed frames the whole piece before it interprets any of it
            feed(data[pos:])
        raise
    finally:
        if events:
            self.events += events
            if self._first_event is None:
                self._first_event = now
        if outputs:
            self._output(now, outputs)
