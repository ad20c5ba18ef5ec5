"""The body tap: what mitmproxy calls with every piece of a metered response body.

It stamps the piece with the clock, keeps it and returns the bytes unchanged, at
once: the client receives exactly what the upstream sent, as it arrives, whatever
the body is. That call, the one made for every piece, is the tap's piece taker
(``recorder.proxy.piece_tap``: in C where the install built it). The kept pieces
are metered in batches (``BATCH_PIECES`` pieces or ``BATCH_BYTES`` bytes,
whichever comes first), by the recorder's periodic walk
(``recorder.proxy.walk``) once a second, and when the exchange ends: the meter's
code then runs hot, several events in a row, instead of once between each two of
mitmproxy's own steps (docs/performance.md). Times are kept per piece, so no
figure changes.

What the body is, is told from the body (as ``recorder replay`` does), not from its
declared Content-Type: an event stream is fed to the meter; so is a JSON array
when the endpoint streams one (Google's ``:streamGenerateContent`` without
``alt=sse``, declared ``application/json``: each element is metered as it comes);
a JSON answer (not streamed, or an error) is kept, up to ``JSON_MAX_BYTES``, and
read whole at the end. A body whose declared type says otherwise is metered all the same, and the
record says so (``content_mismatch``).

A compressed body is decoded on the side, bounded (``recorder.proxy.decoding``),
and never inside the tap: its pieces are decoded in loop callbacks of their own
(``scheduling``), each piece to at most ``DECODE_RATIO`` times its size at once
(what any real compression gives, so each piece's output keeps its arrival time);
what a piece decodes to beyond that (a bomb's ratio) waits in the decoder and is
decoded ``DECODE_SLICE`` bytes a callback, the loop serving everything else between
two slices. Past ``DECODE_MAX_BYTES`` a body is decoded no further: the rest passes
unmetered and the record says why.

With a capture (``--capture-bodies``, or mitmweb's view) each piece is metered as
it comes, and an event stream's decoded pieces are kept with their times.

A tap that fails (a decoder that cannot decode, a meter that raises) gives up on
the body: it still hands every byte on, and the record says why its events are
missing (:class:`Unmetered`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from recorder.core.captured import CapturedBody
from recorder.core.meter import StreamMeter
from recorder.proxy.decoding import Decoder
from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.piece_tap import Taker, new_taker
from recorder.proxy.scheduling import Handle, Scheduler

BATCH_PIECES = 128
BATCH_BYTES = 64 * 1024
# a compressed piece may decode to this many times its size at once
DECODE_RATIO = 32
# decoded bytes per loop callback beyond that (a block of about a millisecond)
DECODE_SLICE = 64 << 10
# when the exchange ends, what is left to decode, at most
DECODE_AT_END = 1 << 20
DECODE_MAX_BYTES = 32 << 20  # per body
JSON_MAX_BYTES = 16 << 20  # a body that is not streamed, kept to be read at the end
HEAD_MAX_BYTES = 64 << 10  # read to tell what a body is, at most
REQUEST_MAX_BYTES = 64 << 20  # a request body read for its facts, at most (decoded too)
# what is looked at to tell an event stream from JSON
_SSE_STARTS = (b"data:", b"event:", b":", b"id:", b"retry:")
_WHITESPACE = b" \t\r\n\xef\xbb\xbf"  # (a UTF-8 byte order mark too)


class BodyKind(enum.Enum):
    SSE = "an event stream"
    ARRAY = "a streamed JSON array"
    JSON = "JSON"
    # AWS's binary event stream (Amazon Bedrock): told by its declared type only,
    # since its first bytes are a length, not a sign
    EVENTSTREAM = "an AWS event stream"


# the kinds of body fed to the meter as they come
STREAMED = frozenset({BodyKind.SSE, BodyKind.ARRAY, BodyKind.EVENTSTREAM})
# the kinds of body --capture-bodies keeps (a JSON body or array is not kept)
CAPTURED = frozenset({BodyKind.SSE, BodyKind.EVENTSTREAM})


class Unmetered(enum.Enum):
    """Why a body's events were not metered, or not all (the record's ``recorder_error``)."""

    UNDECODABLE = "content-encoding {detail} cannot be decoded"
    STREAMED_BY_ANOTHER = "another addon streams this response"
    TAP_FAILED = "the stream tap failed ({detail})"
    DECODED_TOO_LARGE = "the body decodes to more than {detail}: the rest was not metered"
    DECODED_FASTER = (
        "the body decodes to more than could be metered as it came ({detail} decoded):"
        " the rest was not metered"
    )
    JSON_TOO_LARGE = "the body is over {detail}: it was not read"
    NOT_A_BODY_WE_READ = "the body is neither an event stream nor JSON ({detail})"

    def say(self, detail: str = "") -> str:
        return self.value.format(detail=detail)


def declared_kind(content_type: str) -> BodyKind | None:
    """What the declared Content-Type says the body is (None: it does not say)."""
    low = content_type.lower()
    if "text/event-stream" in low:
        return BodyKind.SSE
    if "vnd.amazon.eventstream" in low:
        return BodyKind.EVENTSTREAM
    if "json" in low:
        return BodyKind.JSON
    return None


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


class Tap:
    """The tapped body of one exchange: pieces waiting for the meter, the decoder,
    what the body is, the capture, and whether the tap has given up."""

    __slots__ = (
        "_decoded",
        "_decoding",
        "_errors",
        "_head",
        "_json",
        "_last_stamp",
        "_meter",
        "_scheduler",
        "_taker",
        "capture",
        "content_type",
        "decoder",
        "kind",
        "mismatch",
        "pieces",
        "stamps",
        "unmetered",
    )

    def __init__(
        self,
        meter: Callable[[], StreamMeter],
        decoder: Decoder | None,
        errors: InternalErrors,
        content_type: str = "text/event-stream",
        scheduler: Scheduler | None = None,
    ) -> None:
        # the meter is asked for only when pieces are metered: the exchange's record
        # may not be made yet when its body starts
        self._meter = meter
        self._errors = errors
        # decodes a compressed body in callbacks of its own (None: in the tap's batches)
        self._scheduler = scheduler
        self._decoding: Handle | None = None
        self.decoder = decoder
        self.content_type = content_type
        # what the body is: an event stream unless it turns out otherwise (told from
        # its first bytes); the declared type is the guess until then
        self.kind: BodyKind | None = None
        self.mismatch: str | None = None  # the declared type said otherwise
        self.capture: CapturedBody | None = None
        self.pieces: list[bytes] = []
        self.stamps: list[float] = []
        # what mitmproxy calls with each piece (callable): it keeps them in these
        # lists, and knows whether one came, their bytes, the body's end, and
        # whether the tap has given up (broken)
        self._taker: Taker = new_taker(self.pieces, self.stamps, self.failed)
        self._decoded = 0  # bytes the decoder gave, in all
        self._last_stamp = 0.0  # of the last piece taken in (for a decoder's backlog)
        self._head: list[tuple[bytes, float]] = []  # read before the kind is known
        self._json = bytearray()
        self.unmetered: str | None = None  # why the tap gave up, for the record

    @property
    def broken(self) -> bool:
        """Given up: still forwards, meters nothing."""
        return self._taker.broken

    @property
    def ended_at(self) -> float | None:
        """When mitmproxy ended the body (an empty piece), or None."""
        return self._taker.ended_at

    @property
    def waiting(self) -> bool:
        """Whether pieces wait to be metered (or decoded output of earlier ones)."""
        if self.pieces:
            return True
        decoder = self.decoder
        return decoder is not None and decoder.backlog and not self.broken

    @property
    def json_body(self) -> bytes | None:
        """A body that is not an event stream, as read (None for an event stream, or
        when it was not read)."""
        if self.kind is not BodyKind.JSON or self.broken:
            return None
        return bytes(self._json)

    def give_up(self, why: Unmetered, detail: str = "") -> None:
        """Meter no more of this body; the record will say why."""
        self._taker.broken = True
        self.unmetered = why.say(detail)
        self._json.clear()

    def meter_waiting(self, *, final: bool = False) -> None:
        """Meter the pieces kept so far, each at its own arrival time; ``final`` when
        the exchange ends (what a decoder still holds is decoded then, bounded). A
        failure gives up on the body (counted), never raises."""
        pieces, stamps = self.pieces, self.stamps
        try:
            if not self.broken:
                if self.decoder is None and self.kind in STREAMED and self.capture is None:
                    self._meter().feed_many(pieces, stamps)  # the common case, as it comes
                else:
                    self._take(pieces, stamps, DECODE_AT_END if final else DECODE_SLICE)
                if final and self.kind is None:
                    self._decide(final=True)
                if final and self.decoder is not None and self.decoder.backlog and not self.broken:
                    self.give_up(Unmetered.DECODED_FASTER, _mib(self._decoded))
        except Exception as e:
            self.failed(e)
        finally:
            pieces.clear()
            stamps.clear()
            self._taker.buffered = 0

    def _take(self, pieces: list[bytes], stamps: list[float], budget: int) -> None:
        """Decode (bounded) what came, and pass it on by kind."""
        decoder = self.decoder
        out: list[bytes] = []
        times: list[float] = []
        for piece, stamp in zip(pieces, stamps, strict=True):
            self._last_stamp = stamp
            # (at most what a real compression gives: a bomb's rest waits in the decoder)
            data = piece if decoder is None else decoder.decode(piece, DECODE_RATIO * len(piece))
            if data:
                out.append(data)
                times.append(stamp)
        while decoder is not None and budget > 0 and decoder.backlog:
            data = decoder.decode(b"", budget)
            if not data:
                break
            budget -= len(data)
            out.append(data)
            times.append(self._last_stamp)
        if decoder is not None:
            self._decoded += sum(map(len, out))
            if self._decoded > DECODE_MAX_BYTES:
                self.give_up(Unmetered.DECODED_TOO_LARGE, _mib(DECODE_MAX_BYTES))
                return
        if out:
            self._pass_on(out, times)

    def _pass_on(self, out: list[bytes], times: list[float]) -> None:
        if self.kind is None:
            # white space before the first sign says nothing (and is not kept); once
            # a sign is kept, every piece is (one byte a piece, a line's end is a
            # piece of its own); a binary stream's bytes are never white space
            binary = declared_kind(self.content_type) is BodyKind.EVENTSTREAM
            head = self._head
            for data, at in zip(out, times, strict=True):
                if head or binary or data.strip(_WHITESPACE):
                    head.append((data, at))
            if not self._decide(final=False):
                if sum(len(d) for d, _ in self._head) > HEAD_MAX_BYTES:
                    self.kind = BodyKind.SSE  # (so that nothing more is held for telling)
                    self.give_up(
                        Unmetered.NOT_A_BODY_WE_READ, self.content_type or "no content type"
                    )
                return
            out = [data for data, _ in self._head]
            times = [at for _, at in self._head]
            self._head = []
            if self.broken:
                return
        if self.kind in STREAMED:
            capture = self.capture
            if capture is not None and self.kind in CAPTURED:
                for data, at in zip(out, times, strict=True):
                    capture.add(data, at)
            self._meter().feed_many(out, times)
        else:
            for data in out:
                if len(self._json) + len(data) > JSON_MAX_BYTES:
                    self.give_up(Unmetered.JSON_TOO_LARGE, _mib(JSON_MAX_BYTES))
                    return
                self._json += data

    def _decide(self, *, final: bool) -> bool:
        """What the body is, from its first bytes that are not white space; whether
        that is known now (at the end, whatever there is decides)."""
        head = b"".join(data for data, _ in self._head).lstrip(_WHITESPACE)
        if not head and not final:
            return False
        declared = declared_kind(self.content_type)
        if declared is BodyKind.EVENTSTREAM and not head.startswith((b"{", b"[")):
            kind = BodyKind.EVENTSTREAM
        elif head.startswith(b"[") and self._meter().frames_json_array():
            kind = BodyKind.ARRAY
            declared = kind if declared is BodyKind.JSON else declared  # as it says
        elif head.startswith((b"{", b"[")):
            kind = BodyKind.JSON
        elif head.startswith(_SSE_STARTS) or (not head and declared is not BodyKind.JSON):
            kind = BodyKind.SSE
        elif not head:
            kind = BodyKind.JSON
        elif len(head) < 8 and not final and any(s.startswith(head) for s in _SSE_STARTS):
            return False  # "dat": more is needed to tell
        else:
            self.kind = BodyKind.SSE  # (so that nothing more is held for telling)
            self.give_up(Unmetered.NOT_A_BODY_WE_READ, self.content_type or "no content type")
            return True
        self.kind = kind
        if declared is not kind:
            declared_as = self.content_type or "no content type"
            self.mismatch = f"declared {declared_as}, body is {kind.value}"
        return True

    def take_whole(self, body: bytes, at: float) -> None:
        """The whole body, had it not come through the tap (an addon after the
        recorder had mitmproxy buffer it after all): metered as one piece."""
        taker = self._taker
        if not taker.seen and body and not taker.broken:
            taker.seen = True
            self.pieces.append(body)
            self.stamps.append(at)

    def _decode_soon(self) -> None:
        """Have what waits decoded and metered in a loop callback of its own."""
        if self._decoding is None:
            if self._scheduler is None:
                self.meter_waiting()
            else:
                self._decoding = self._scheduler.call_later(0, self._decode_some)

    def _decode_some(self) -> None:
        """One slice of a compressed body: what came, and ``DECODE_SLICE`` of what a
        piece holds beyond; another callback for the rest."""
        self._decoding = None
        self.meter_waiting()
        if self.waiting and not self.broken:
            self._decode_soon()

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
        self._taker.broken = True

    def callable(self, clock: Callable[[], float]) -> Callable[[bytes], bytes]:
        """What mitmproxy calls with each piece (``response.stream``): the taker
        (``recorder.proxy.piece_tap``), which keeps it and its time and hands it
        back unchanged, at once, whatever happens."""
        # a compressed body is decoded in callbacks of its own, never in the tap
        meter_waiting = self._decode_soon if self.decoder is not None else self.meter_waiting
        # with a capture every piece is metered (and kept) as it comes
        batch_pieces = 1 if self.capture is not None else BATCH_PIECES
        self._taker.start(clock, meter_waiting, batch_pieces, BATCH_BYTES)
        return self._taker


class RequestKeeper:
    """A request body that mitmproxy streams upstream (``stream_large_bodies``):
    passed on unchanged, piece by piece, and kept, up to ``limit`` bytes, for its
    facts to be read once it is whole."""

    __slots__ = ("_limit", "_parts", "_size", "over")

    def __init__(self, limit: int = REQUEST_MAX_BYTES) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self.over = False  # past the limit: nothing is kept

    def __call__(self, data: bytes) -> bytes:
        if data and not self.over:
            self._size += len(data)
            if self._size > self._limit:
                self.over = True
                self._parts.clear()
            else:
                self._parts.append(data)
        return data

    def body(self) -> bytes:
        """What was kept (empty past the limit)."""
        return b"".join(self._parts)
