"""Server-Sent-Events framer: bytes in, events and comments out, for any chunking.

Theory of operation
-------------------
The framer follows the WHATWG "event stream interpretation" rules, but works on
bytes: a line is decoded (UTF-8, with replacement) only once it is whole, so a
multibyte character split across two reads survives. Line ends are CRLF, LF or
CR. A CR that ends a read is already a complete line end; we only remember to
swallow an LF that may begin the next read (a CRLF split across reads).

Data lines stay ``bytes``: the protocol interpreters hand them straight to the
JSON parser, which reads UTF-8 itself, so the hot path never builds a ``str``
for a payload it is about to parse.

``feed(b"")`` ends the stream (as mitmproxy's stream callable and h11 do). An
event still pending then is not dispatched (the spec says so); we report it as
a :class:`FramingIssue` because, for a recorder, it is evidence of a cut.

Memory is bounded: an event whose pending bytes exceed ``max_event_bytes`` is
skipped up to its terminating blank line and reported once. The framer never
raises on any input.
"""

from __future__ import annotations

from contextlib import suppress
from typing import NamedTuple

_BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
_NAMES_KEPT = 32  # event names decoded once per stream, then looked up


class Event(NamedTuple):
    """A dispatched SSE event. ``data`` is the joined data lines, undecoded."""

    event: str
    data: bytes
    id: str | None
    retry: int | None


class Comment(NamedTuple):
    """A comment line (``: hopbase-keepalive``), without the leading colon."""

    text: str


class FramingIssue(NamedTuple):
    """Damage seen by the framer.

    ``kind`` is ``oversized_event`` (an event skipped because it grew past the
    cap) or ``unterminated_event`` (the stream ended inside an event).
    ``size`` is the number of bytes concerned (at least the cap for oversized).
    """

    kind: str
    size: int


Item = Event | Comment | FramingIssue

_new = tuple.__new__  # builds an Event without NamedTuple's Python-level __new__


class SSEFramer:
    """Incremental SSE parser. Call :meth:`feed` with each received piece."""

    __slots__ = (
        "_at_start",
        "_buf",
        "_data",
        "_data_size",
        "_ended",
        "_event",
        "_has_data",
        "_idle",
        "_last_id",
        "_max",
        "_midline",
        "_names",
        "_prefix",
        "_prefix_name",
        "_retry",
        "_skip_lf",
        "_skipped",
        "_skipping",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max(1, max_event_bytes)
        self._buf = bytearray()  # an incomplete line
        self._data: list[bytes] = []
        self._data_size = 0
        self._has_data = False  # a data line was seen in the current event
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._skip_lf = False  # the previous read ended in CR
        self._at_start = True  # a BOM may still come
        self._skipping = False  # inside an oversized event, discarding
        self._skipped = 0
        self._midline = False  # skipping began inside a line whose tail is still to come
        self._ended = False
        self._names: dict[bytes, str] = {}
        # The last ``event: N`` line seen by the fast paths, with the ``data: `` that
        # followed it, and N decoded: the next event most likely begins the same.
        self._prefix = b"event: message\ndata: "
        self._prefix_name = "message"
        # Nothing of an event is pending, no line, no BOM nor split CRLF to look
        # for, not ended: feed_one may take a whole event. Cleared by feed when it
        # goes the long way, set again only where _feed ends with all of that
        # true (feed_one changes none of that state).
        self._idle = False

    @property
    def last_event_id(self) -> str | None:
        """The last event id seen (kept across events, as the spec says)."""
        return self._last_id

    @property
    def idle(self) -> bool:
        """Nothing of an event is pending (what :meth:`feed_one` needs); False is
        also possible when nothing is, until a piece ends with a blank line."""
        return self._idle

    def settle(self) -> bool:
        """Whether nothing of an event is pending, no line, no BOM nor split CRLF
        to look for, and the stream has not ended: then a piece that is one usual
        event may be taken whole (:meth:`feed_one`). Unlike :attr:`idle`, also
        true after a piece that ended inside an event and one that completed it."""
        if not self._idle:
            self._idle = not (
                self._buf
                or self._midline
                or self._data
                or self._has_data
                or self._event
                or self._retry is not None
                or self._skipping
                or self._data_size
                or self._skip_lf
                or self._at_start
                or self._ended
            )
        return self._idle

    @property
    def max_event_bytes(self) -> int:
        """The cap on an event's pending bytes."""
        return self._max

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an event not yet dispatched (bounded by the cap)."""
        return len(self._buf) + self._data_size

    def feed(self, data: bytes) -> list[Item]:
        """Feed one received piece; ``b""`` ends the stream. Never raises."""
        if self._idle:
            event = self.feed_one(data)
            if event is not None:
                return [event]
            self._idle = False  # until _feed ends with nothing pending
        try:
            if not data:
                return self._finish()
            if self._ended:
                return []
            return self._feed(data)
        except Exception:  # pragma: no cover - a bug here must not reach the proxy
            # Unreachable by design (every branch below is total), kept as the
            # last line of the "never raises" promise.
            self._idle = False
            self._reset_event()
            self._buf.clear()
            return [FramingIssue("internal_error", len(data))]

    def feed_one(self, data: bytes) -> Event | None:
        """The piece's event if the piece is exactly one usual event, else None.

        A shortcut of :meth:`feed` for what mitmproxy hands over for most HTTP/1
        chunked streams, one whole event a piece: ``data: V`` or ``event: N`` then
        ``data: V``, then a blank line, with no CR, under the cap, and nothing
        of another event pending. It returns that event, as ``feed(data)`` would
        return ``[event]``, and leaves the framer as ``feed`` would (as it was).
        Otherwise it returns None and has consumed nothing: call :meth:`feed`.
        Never raises.
        """
        if not self._idle:
            return None
        last = len(data) - 2  # where the line end before the blank line must be
        if data.startswith(b"data: "):
            if (
                data.find(b"\n", 6) == last
                and data[-1] == 0x0A
                and last <= self._max
                and data.find(b"\r") < 0
            ):
                return _new(Event, ("message", data[6:last], self._last_id, None))
            return None
        prefix = self._prefix
        if data.startswith(prefix):  # the same event line as the last one: its name
            start = len(prefix)
            if (
                data.find(b"\n", start) == last
                and data[-1] == 0x0A
                and last <= self._max
                and data.find(b"\r") < 0
            ):
                return _new(Event, (self._prefix_name, data[start:last], self._last_id, None))
            return None
        if data.startswith(b"event: "):
            nl = data.find(b"\n", 7)
            if (
                nl > 0
                and data.startswith(b"data: ", nl + 1)
                and data.find(b"\n", nl + 7) == last
                and data[-1] == 0x0A
                and last <= self._max
                and data.find(b"\r") < 0
            ):
                name = self._name(data, 0, nl)
                return _new(Event, (name, data[nl + 7 : last], self._last_id, None))
        return None

    def _name(self, data: bytes, pos: int, nl: int) -> str:
        """The name on the line ``event: N`` at ``pos`` (``nl``: its end), which the
        line ``data: `` follows; kept as the likely prefix of the next event."""
        raw = data[pos + 7 : nl]
        name = self._names.get(raw)
        if name is None:
            name = raw.decode("utf-8", "replace") or "message"
            if len(self._names) < _NAMES_KEPT:
                self._names[raw] = name
        self._prefix = data[pos : nl + 7]
        self._prefix_name = name
        return name

    def _feed(self, data: bytes) -> list[Item]:
        if self._at_start:
            if self._buf:
                data = bytes(self._buf) + data
                self._buf.clear()
            if len(data) < 3 and _BOM.startswith(data):
                self._buf += data  # could still become a BOM
                return []
            self._at_start = False
            if data.startswith(_BOM):
                data = data[3:]
                if not data:
                    return []
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 0x0A:
                data = data[1:]
                if not data:
                    return []
        # find, not `in`: bytes.__contains__ first tries the operand as an int,
        # and the TypeError it raises and swallows costs more than the scan
        if data.find(b"\r") >= 0:
            self._skip_lf = data[-1] == 0x0D
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[Item] = []
        pos = 0
        if self._buf or self._midline:  # the first line began in an earlier piece
            nl = data.find(b"\n")
            if nl < 0:
                return self._hold(data)
            if self._midline:
                self._midline = False
                self._skipped += nl + 1  # the tail of the oversized line, not a blank line
            else:
                self._buf += data[:nl]
                line = bytes(self._buf)
                self._buf.clear()
                self._lines([line], out)
            pos = nl + 1
        # Whole events from here on. The usual one, ``data: V`` or ``event: N`` +
        # ``data: V`` then a blank line, found with nothing of another event
        # pending and well under the cap, is built straight from the bytes: per
        # event this is most of the framer's CPU on the proxy's event loop.
        # Anything else goes through _lines, one stretch up to a blank line at a
        # time, which is what the fast path does for the usual event.
        end = len(data) - 1  # a line end at i < end can be followed by a blank line
        clean = not (
            self._data
            or self._event
            or self._retry is not None
            or self._skipping
            or self._data_size
        )
        cap = self._max
        last_id = self._last_id  # (only _lines changes it)
        prefix = self._prefix
        append = out.append
        while pos < end:
            if clean:
                if data.startswith(b"data: ", pos):
                    nl = data.find(b"\n", pos + 6)
                    if 0 < nl < end and data[nl + 1] == 0x0A and nl - pos <= cap:
                        append(_new(Event, ("message", data[pos + 6 : nl], last_id, None)))
                        pos = nl + 2
                        continue
                elif data.startswith(prefix, pos):  # the event line of the last one
                    nl = pos + len(prefix)
                    nl2 = data.find(b"\n", nl)
                    if 0 < nl2 < end and data[nl2 + 1] == 0x0A and nl2 - pos <= cap:
                        append(_new(Event, (self._prefix_name, data[nl:nl2], last_id, None)))
                        pos = nl2 + 2
                        continue
                elif data.startswith(b"event: ", pos):
                    nl = data.find(b"\n", pos + 7)
                    if nl > 0 and data.startswith(b"data: ", nl + 1):
                        nl2 = data.find(b"\n", nl + 7)
                        if 0 < nl2 < end and data[nl2 + 1] == 0x0A and nl2 - pos <= cap:
                            name = self._name(data, pos, nl)
                            prefix = self._prefix
                            append(_new(Event, (name, data[nl + 7 : nl2], last_id, None)))
                            pos = nl2 + 2
                            continue
            blank = data.find(b"\n\n", pos)
            if blank < 0:
                break
            lines = data[pos:blank].split(b"\n")
            lines.append(b"")
            self._lines(lines, out)
            last_id = self._last_id
            pos = blank + 2
            # after a blank line nothing of an event is pending (at most its size)
            clean = not self._data_size
        if pos <= end:
            nl = data.rfind(b"\n", pos)
            if nl >= 0:  # complete lines of an event whose blank line is still to come
                self._lines(data[pos:nl].split(b"\n"), out)
                pos = nl + 1
            if pos <= end:
                out.extend(self._hold(data[pos:]))
        else:  # the piece ended with a blank line: no line, nor maybe any event, pending
            self._idle = clean and not self._skip_lf
        return out

    def _hold(self, piece: bytes) -> list[Item]:
        """Keep an incomplete line, enforcing the cap."""
        if self._skipping:
            self._skipped += len(piece)
            self._midline = True
            return []
        self._buf += piece
        if len(self._buf) + self._data_size > self._max:
            self._midline = True
            return self._start_skipping(len(self._buf))
        return []

    def _start_skipping(self, extra: int) -> list[Item]:
        self._skipping = True
        self._skipped = self._data_size + extra
        self._buf.clear()
        self._reset_event()
        return [FramingIssue("oversized_event", self._skipped)]

    def _lines(self, lines: list[bytes], out: list[Item]) -> None:
        data = self._data
        for line in lines:
            if self._skipping:
                if line:
                    self._skipped += len(line) + 1
                    continue
                self._skipping = False  # the blank line ends the skipped event
                self._skipped = 0
                continue
            if not line:
                if self._has_data:
                    out.append(
                        Event(
                            self._event or "message", b"\n".join(data), self._last_id, self._retry
                        )
                    )
                    data.clear()
                    self._has_data = False
                # the spec resets the type (and our retry) even when nothing is dispatched
                self._data_size = 0
                self._event = ""
                self._retry = None
                continue
            if len(line) + self._data_size > self._max:
                # the test _hold applies to a partial line, so that the outcome
                # does not depend on how the line was chunked
                out.extend(self._start_skipping(len(line)))
                continue
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                self._data_size += len(value) + 1
                if self._data_size > self._max:
                    out.extend(self._start_skipping(0))
                    continue
                data.append(value)
                self._has_data = True
                continue
            if line[0] == 0x3A:  # ':' starts a comment
                out.append(Comment(line[1:].decode("utf-8", "replace")))
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"event":
                self._event = value.decode("utf-8", "replace")
                self._data_size += len(value)
            elif name == b"data":  # "data" with no colon: an empty data line
                data.append(b"")
                self._data_size += 1
                self._has_data = True
            elif name == b"id":
                if b"\0" not in value:
                    self._last_id = value.decode("utf-8", "replace")
            elif name == b"retry" and value and value.isdigit():
                # more digits than int() converts (sys.set_int_max_str_digits): ignored
                with suppress(ValueError):
                    self._retry = int(value)
            # other field names are ignored, as the spec says

    def _reset_event(self) -> None:
        self._data.clear()
        self._data_size = 0
        self._has_data = False
        self._event = ""
        self._retry = None

    def _finish(self) -> list[Item]:
        if self._ended:
            return []
        self._ended = True
        pending = len(self._buf)
        if self._at_start:
            pending = 0 if _BOM.startswith(bytes(self._buf)) else pending
        out: list[Item] = []
        if self._skipping:
            out.append(FramingIssue("unterminated_event", self._skipped + pending))
        elif self._has_data or self._event or pending:
            out.append(FramingIssue("unterminated_event", self._data_size + pending))
        self._buf.clear()
        self._reset_event()
        self._skipping = False
        self._midline = False
        return out
