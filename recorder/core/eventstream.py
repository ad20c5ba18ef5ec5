"""AWS event-stream framer (``application/vnd.amazon.eventstream``): bytes in, events out.

Theory of operation
-------------------
Amazon Bedrock streams its answers (``ConverseStream``,
``InvokeModelWithResponseStream``) as AWS's binary event stream, not SSE. A
message is::

    total length (u32) | headers length (u32) | prelude CRC32 (u32)
    headers (headers length bytes) | payload | message CRC32 (u32)

all big-endian; the prelude CRC covers the first 8 bytes, the message CRC every
byte before it. A header is a name (u8 length, then the name), a type byte and a
value of that type: 0 true, 1 false, 2 byte, 3 short, 4 int, 5 long, 6 byte
array (u16 length), 7 string (u16 length), 8 timestamp (i64 milliseconds), 9 UUID
(16 bytes).

The framer hands the interpreters the same :class:`~recorder.core.framing.Event`
the SSE framer does: ``event`` is the message's ``:event-type`` (an event), its
``:exception-type`` (an exception: ``throttlingException``, …) or its
``:error-code`` (an error message, whose ``:error-message`` becomes the data as
``{"message": …}``); ``data`` is the payload, undecoded; ``id`` is the
``:message-type`` (``event``, ``exception``, ``error``), so that an interpreter
tells an exception from an event of the same name.

Damage is counted, never raised: a message whose CRC does not match is skipped
and reported (:attr:`IssueKind.BAD_CRC`); a prelude whose CRC does not match,
or whose lengths cannot be, leaves nothing to find the next message by, so the
rest of the body is reported once and not framed (the client still receives
every byte: the framer only reads). Memory is bounded as the SSE framer bounds
an event: a message longer than ``max_event_bytes`` is reported
(:attr:`IssueKind.OVERSIZED`) as soon as its prelude is read and its bytes are
skipped as they come, never held. ``feed(b"")`` ends the stream; a message still
pending then is :attr:`IssueKind.UNTERMINATED`, evidence of a cut.

The usual piece is one whole message (Bedrock writes one per HTTP chunk): it is
framed from the piece itself, without copying; a message's headers are decoded
once per distinct header block (they repeat on every delta) and then looked up.

Where a C compiler was there at install, the sound messages are framed in C
(``recorder/core/protocols/_eventstream.c``): from a position of a piece on, every
whole message whose CRCs match, under the cap, whose header block this framer
has named already, in one call, up to the first message that is anything else,
which the Python code below frames (reports its damage, names its block, keeps
what is cut) before it hands the rest of the piece back. The meter's batch path
reads a piece that is one whole delta in one call there too
(:meth:`EventStreamFramer.message_reader`): the message framed, its payload
handed to the interpreter's template reader. The C code decides
nothing the Python code would decide otherwise; the Python framer
(``in_c=False``, or no compiler) stays the reference, and the tests compare both
on bodies cut anywhere and damaged (tests/core/protocols/test_native_eventstream.py).
"""

from __future__ import annotations

import struct
import uuid
from binascii import crc32  # (zlib's, a little faster to call)
from typing import TYPE_CHECKING, Any

import orjson

from recorder.core.errors import RecorderError
from recorder.core.framing import Event, FramingIssue, IssueKind
from recorder.core.sse_lines import DEFAULT_MAX_EVENT_BYTES

try:  # the run of sound messages in C (_eventstream.c), built at install with a C compiler
    import recorder.core.protocols._eventstream as native
except ImportError:  # pragma: no cover - an install without a compiler
    native = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from recorder.core.framing import EventReader, EventRun, Item, Wrappable

__all__ = ["CONTENT_TYPE", "EventStreamFramer", "HeaderError", "encode_message", "read_headers"]

CONTENT_TYPE = "application/vnd.amazon.eventstream"
PRELUDE = 12  # total length, headers length, prelude CRC
MIN_MESSAGE = PRELUDE + 4  # no headers, no payload, the message CRC
_HEADS_KEPT = 64  # distinct header blocks decoded once per stream, then looked up

_prelude = struct.Struct(">III").unpack_from
_u32 = struct.Struct(">I").unpack_from
_new = tuple.__new__  # builds an Event without NamedTuple's Python-level __new__


class HeaderError(RecorderError, ValueError):
    """A header block that cannot be read (the framer counts it; never raised past it)."""


_FIXED = {
    2: struct.Struct(">b"),
    3: struct.Struct(">h"),
    4: struct.Struct(">i"),
    5: struct.Struct(">q"),
    8: struct.Struct(">q"),
}


def read_headers(block: bytes) -> dict[str, Any]:
    """The headers of a message (every value type of the spec); ``HeaderError``
    when the block is malformed."""
    out: dict[str, Any] = {}
    pos, end = 0, len(block)
    try:
        while pos < end:
            size = block[pos]
            name = block[pos + 1 : pos + 1 + size].decode("utf-8")
            pos += 1 + size
            kind = block[pos]
            pos += 1
            value: Any
            if kind in (0, 1):
                value = kind == 0
            elif kind in _FIXED:
                fmt = _FIXED[kind]
                (value,) = fmt.unpack_from(block, pos)
                pos += fmt.size
            elif kind in (6, 7):
                (length,) = struct.unpack_from(">H", block, pos)
                raw = block[pos + 2 : pos + 2 + length]
                if len(raw) != length:
                    raise HeaderError("a header value runs past the block")
                value = raw.decode("utf-8") if kind == 7 else bytes(raw)
                pos += 2 + length
            elif kind == 9:
                raw = block[pos : pos + 16]
                if len(raw) != 16:
                    raise HeaderError("a UUID runs past the block")
                value = uuid.UUID(bytes=bytes(raw))
                pos += 16
            else:
                raise HeaderError(f"unknown header type {kind}")
            out[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise HeaderError(str(e)) from e
    if pos != end:
        raise HeaderError("a header runs past the block")
    return out


def _naming(block: bytes) -> tuple[str, str, bytes | None]:
    """``(name, message type, data)`` of a header block: what the Event says
    (data None: the payload's own)."""
    headers = read_headers(block)
    mtype = headers.get(":message-type")
    mtype = mtype if isinstance(mtype, str) else "event"
    if mtype == "exception":
        name = headers.get(":exception-type")
    elif mtype == "error":
        name = headers.get(":error-code")
        message = headers.get(":error-message")
        return (
            name if isinstance(name, str) else "error",
            mtype,
            orjson.dumps({"message": message if isinstance(message, str) else None}),
        )
    else:
        name = headers.get(":event-type")
    return (name if isinstance(name, str) else "", mtype, None)


class EventStreamFramer:
    """Incremental event-stream parser. Call :meth:`feed` with each received piece.
    Implements :class:`recorder.core.framing.Framer`; of the batch path's
    shortcuts, it has the reader of a whole message (:meth:`message_reader`), not
    the text wire's templates and runs."""

    __slots__ = (
        "_buf",
        "_ended",
        "_heads",
        "_last",
        "_lost",
        "_max",
        "_need",
        "_scan",
        "_skip",
    )

    def __init__(
        self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, in_c: bool = True
    ) -> None:
        """``in_c``: frame the sound messages in C where it is built (tests compare)."""
        self._max = max(max_event_bytes, MIN_MESSAGE)
        self._buf = bytearray()  # bytes of a message not yet whole
        self._need = PRELUDE  # bytes _buf must hold before it is looked at again
        self._skip = 0  # bytes of an oversized message still to pass over
        self._lost = False  # a broken prelude: nothing more can be framed
        self._ended = False
        self._heads: dict[bytes, tuple[str, str, bytes | None]] = {}
        # the last header block feed_one named, and its naming
        self._last: tuple[bytes, tuple[str, str, bytes | None]] | None = None
        # the sound messages whose header block is in _heads, framed in C (None: in
        # Python); a message it does not frame is this framer's (see _frames)
        self._scan = native.Scanner(Event, self._heads) if in_c and native is not None else None

    @property
    def scans_in_c(self) -> bool:
        """Whether the sound messages are framed in C (``_eventstream.c``)."""
        return self._scan is not None

    # -- the Framer protocol ----------------------------------------------------

    @property
    def max_event_bytes(self) -> int:
        return self._max

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)

    @property
    def idle(self) -> bool:
        return not self._buf and not self._skip and not self._lost and not self._ended

    def settle(self) -> bool:
        return self.idle

    @property
    def piece_limit(self) -> int:
        return self._max  # (a whole message, read by message_reader)

    def whole_event[T: Wrappable](self, template: T, name: str) -> T | None:
        return None

    def message_reader(self, read: EventReader, name: str) -> EventReader | None:
        """``read`` of the payload of a piece that is exactly one whole, sound
        message under the cap whose header block this framer has named an event
        ``name`` with its payload as data (what :meth:`feed_one` returns for it),
        in one call to C; -1 for any other piece, nothing framed. None where the
        C framer is not built."""
        scan = self._scan
        return None if scan is None else scan.reader(name, read, self._max)

    def runner(self, read: EventReader) -> EventRun:
        def run(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
            return pos, 0, 0  # no run is read without framing

        return run

    def splittable(self, data: bytes) -> bool:
        return False

    def feed_next(self, data: bytes, pos: int) -> tuple[list[Item], int]:
        return self.feed(data[pos:]), len(data)

    def feed_one(self, data: bytes) -> Event | None:
        """The piece's event if it is exactly one whole, sound message and nothing is
        pending; else None, nothing consumed."""
        if self._buf or self._skip or self._lost or self._ended or len(data) < MIN_MESSAGE:
            return None
        scan = self._scan
        if scan is not None:
            event = scan.one(data, self._max)
            if event is not None:
                return event
        total, head, pcrc = _prelude(data)
        if total != len(data) or head > total - MIN_MESSAGE or total > self._max:
            return None
        # the prelude's CRC, then the rest of the message's, continued from it (the
        # message CRC covers the prelude and its CRC: crc32 continues a running one)
        prelude_crc = crc32(data[:8])
        if prelude_crc != pcrc or crc32(data[8:-4], prelude_crc) != _u32(data, total - 4)[0]:
            return None
        try:
            return self._event(data, 0, head, total)
        except HeaderError:
            return None  # (feed reports it)

    # -- framing ----------------------------------------------------------------

    def feed(self, data: bytes) -> list[Item]:
        """One received piece; ``b""`` ends the stream. Never raises."""
        try:
            return self._feed(data)
        except Exception:  # a framer bug must reach no one: reported, framing stops
            self._lost = True
            self._buf = bytearray()
            return [FramingIssue(IssueKind.INTERNAL_ERROR, len(data))]

    def _feed(self, data: bytes) -> list[Item]:
        if self._ended:
            return []
        if not data:
            self._ended = True
            if self._buf and not self._lost:
                size = len(self._buf)
                self._buf = bytearray()
                return [FramingIssue(IssueKind.UNTERMINATED, size)]
            return []
        if self._lost:
            return []
        out: list[Item] = []
        if self._skip:
            taken = min(self._skip, len(data))
            self._skip -= taken
            if taken == len(data):
                return out
            data = data[taken:]
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return out
            data = bytes(self._buf)
            self._buf = bytearray()
        self._frames(data, out)
        return out

    def _frames(self, data: bytes, out: list[Item]) -> None:
        """Frame the messages of ``data`` (nothing pending before it); keep the rest."""
        pos, size = 0, len(data)
        scan = self._scan
        while size - pos >= PRELUDE:
            if scan is not None:
                # the sound messages of named header blocks, in C; the next one
                # (damaged, cut, new, or too long) is framed below
                pos = scan(data, pos, self._max, out)
                if size - pos < PRELUDE:
                    break
            total, head, pcrc = _prelude(data, pos)
            prelude_crc = crc32(data[pos : pos + 8])
            if prelude_crc != pcrc:
                self._lose(out, IssueKind.BAD_CRC, size - pos)
                return
            if total < MIN_MESSAGE or head > total - MIN_MESSAGE:
                self._lose(out, IssueKind.MALFORMED, size - pos)
                return
            if total > self._max:
                out.append(FramingIssue(IssueKind.OVERSIZED, total))
                here = size - pos
                if here < total:
                    self._skip = total - here
                    return
                pos += total
                continue
            end = pos + total
            if end > size:
                break
            # the message CRC continues the prelude's (it covers the prelude too)
            if crc32(data[pos + 8 : end - 4], prelude_crc) != _u32(data, end - 4)[0]:
                out.append(FramingIssue(IssueKind.BAD_CRC, total))
            else:
                try:
                    out.append(self._event(data, pos, head, end))
                except HeaderError:
                    out.append(FramingIssue(IssueKind.MALFORMED, total))
            pos = end
        if pos < size:
            self._buf = bytearray(data[pos:])
            self._need = PRELUDE if size - pos < PRELUDE else _prelude(data, pos)[0]

    def _lose(self, out: list[Item], kind: IssueKind, size: int) -> None:
        out.append(FramingIssue(kind, size))
        self._lost = True
        self._buf = bytearray()

    def _event(self, data: bytes, pos: int, head: int, end: int) -> Event:
        """The Event of the sound message ``data[pos:end]`` whose headers are ``head`` long."""
        start = pos + PRELUDE
        last = self._last
        if last is not None and len(last[0]) == head and data.startswith(last[0], start):
            named = last[1]
        else:
            block = data[start : start + head]
            known = self._heads.get(block)
            if known is None:
                known = _naming(block)
                if len(self._heads) < _HEADS_KEPT:
                    self._heads[block] = known
            named = known
            self._last = (block, named)
        name, mtype, text = named
        return _new(
            Event, (name, data[start + head : end - 4] if text is None else text, mtype, None)
        )


def _header(name: str, value: str) -> bytes:
    raw_name = name.encode()
    raw = value.encode()
    return bytes((len(raw_name),)) + raw_name + b"\x07" + struct.pack(">H", len(raw)) + raw


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One message with string headers (what the tests and the benchmark write)."""
    block = b"".join(_header(k, v) for k, v in headers.items())
    total = MIN_MESSAGE + len(block) + len(payload)
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", crc32(prelude))
    body = prelude + block + payload
    return body + struct.pack(">I", crc32(body))
