"""The stream tap: what mitmproxy calls with every piece of a metered response body.

It stamps the piece with the clock, keeps it and returns the bytes unchanged, at
once: the client receives exactly what the upstream sent, with no added
buffering. The kept pieces are metered in batches (``BATCH_PIECES`` pieces or
``BATCH_BYTES`` bytes, whichever comes first), by the recorder's periodic walk
(``recorder.proxy.walk``) once a second, and when the exchange ends: the meter's
code then runs hot, several events in a row, instead of once between each two of
mitmproxy's own steps (docs/performance.md). Times are kept per piece, so no
figure changes.

With a capture (``--capture-bodies``, or mitmweb's view) each piece is decoded,
kept with its arrival time and metered as it comes instead.

A tap that fails (a decoder that cannot decode, a meter that raises) gives up on
the stream: it still hands every byte on, and the record says why its events are
missing (:class:`Unmetered`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from recorder.core.captured import CapturedBody
from recorder.core.meter import StreamMeter
from recorder.proxy.decoding import Decoder
from recorder.proxy.internal_errors import InternalErrors

BATCH_PIECES = 128
BATCH_BYTES = 64 * 1024


class Unmetered(enum.Enum):
    """Why a stream's events were not metered (the record's ``recorder_error``)."""

    UNDECODABLE = "content-encoding {detail} cannot be decoded"
    STREAMED_BY_ANOTHER = "another addon streams this response"
    TAP_FAILED = "the stream tap failed ({detail})"

    def say(self, detail: str = "") -> str:
        return self.value.format(detail=detail)


class Tap:
    """The tapped body of one exchange: pieces waiting for the meter, the decoder,
    the capture, and whether the tap has given up."""

    __slots__ = (
        "_buffered",
        "_errors",
        "_meter",
        "broken",
        "capture",
        "decoder",
        "ended_at",
        "pieces",
        "stamps",
        "unmetered",
    )

    def __init__(
        self,
        meter: Callable[[], StreamMeter],
        decoder: Decoder | None,
        errors: InternalErrors,
    ) -> None:
        # the meter is asked for only when pieces are metered: the exchange's record
        # may not be made yet when its body starts
        self._meter = meter
        self._errors = errors
        self.decoder = decoder
        self.capture: CapturedBody | None = None
        self.pieces: list[bytes] = []
        self.stamps: list[float] = []
        self._buffered = 0  # bytes in pieces
        self.broken = False  # given up: still forwards, meters nothing
        self.unmetered: str | None = None  # why, for the record
        self.ended_at: float | None = None  # when mitmproxy ended the body (b"")

    @property
    def waiting(self) -> bool:
        """Whether pieces wait to be metered."""
        return bool(self.pieces)

    def give_up(self, why: Unmetered, detail: str = "") -> None:
        """Meter no more of this stream; the record will say why."""
        self.broken = True
        self.unmetered = why.say(detail)

    def meter_waiting(self) -> None:
        """Meter the pieces kept so far, each at its own arrival time. A failure gives
        up on the stream (counted), never raises."""
        pieces, stamps = self.pieces, self.stamps
        try:
            if not self.broken:
                decoder = self.decoder
                # decoded as they are metered: a piece that fails to decode leaves
                # the ones before it metered
                batch = pieces if decoder is None else map(decoder.decode, pieces)
                self._meter().feed_many(batch, stamps)
        except Exception as e:
            self.failed(e)
        finally:
            pieces.clear()
            stamps.clear()
            self._buffered = 0

    def failed(self, e: Exception) -> None:
        """The tap could not go on: a counted internal error, and the record says so."""
        self.give_up(Unmetered.TAP_FAILED, f"{type(e).__name__}: {e}")
        if self.decoder is not None:  # (possibly) the decoder's doing
            self._errors.decode_error()
        self._errors("stream tap")

    def end_capture(self, now: float, ending: str) -> None:
        """The exchange ended: the capture is complete and now belongs to the record
        (a piece arriving after the end, at shutdown, must not touch it)."""
        if self.capture is not None:
            self.capture.end(now, ending, damaged=self.broken)
            self.broken = True

    def callable(self, clock: Callable[[], float]) -> Callable[[bytes], bytes]:
        """The function mitmproxy calls with each piece (``response.stream``)."""
        if self.capture is not None:
            return self._capturing(clock, self.capture)
        pieces, stamps = self.pieces, self.stamps
        meter_waiting = self.meter_waiting

        def tap(data: bytes) -> bytes:
            # Runs on the event loop for every piece of every stream: keep it lean,
            # and whatever happens, hand the bytes on unchanged.
            try:
                if not data:
                    self.ended_at = clock()
                elif not self.broken:
                    pieces.append(data)
                    stamps.append(clock())
                    self._buffered += len(data)
                    if len(pieces) >= BATCH_PIECES or self._buffered >= BATCH_BYTES:
                        meter_waiting()
            except Exception as e:
                self.failed(e)
            return data

        return tap

    def _capturing(
        self, clock: Callable[[], float], capture: CapturedBody
    ) -> Callable[[bytes], bytes]:
        """The tap that also keeps each decoded piece, with its arrival time."""
        keep = capture.add
        feed = self._meter().feed  # a capture is made with the record: it exists

        def tap(data: bytes) -> bytes:
            try:
                if not data:
                    self.ended_at = clock()
                elif not self.broken:
                    decoder = self.decoder
                    piece = data if decoder is None else decoder.decode(data)
                    now = clock()
                    if piece:  # the meter ignores an empty piece: so does the replay
                        keep(piece, now)
                    feed(piece, now)
            except Exception as e:
                self.failed(e)
            return data

        return tap
