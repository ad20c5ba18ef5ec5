"""Server-Sent-Events framer: bytes in, events and comments out, for any chunking.

Theory of operation
-------------------
The framer follows the WHATWG "event stream interpretation" rules, but works on
bytes: a line is decoded (UTF-8, with replacement) only once it is whole, so a
multibyte character split across two reads survives. Line ends are CRLF, LF or
CR. A CR that ends a read is already a complete line end; we only remember to
swallow an LF that may begin the next read (a CRLF split across reads). The
usual event (``data: V`` or ``event: N`` + ``data: V``, then a blank line) is
built straight from the bytes; every other line takes the long way, the field
rules of :mod:`recorder.core.sse_lines`.

Data lines stay ``bytes``: the protocol interpreters hand them straight to the
JSON parser, which reads UTF-8 itself, so the hot path never builds a ``str``
for a payload it is about to parse.

``feed(b"")`` ends the stream (as mitmproxy's stream callable and h11 do). An
event still pending then is not dispatched (the spec says so); we report it as
a :class:`FramingIssue` because, for a recorder, it is evidence of a cut.

Memory is bounded: an event whose pending bytes exceed ``max_event_bytes`` is
skipped up to its terminating blank line and reported once. The framer never
raises on any input.

This module is the only code that knows how SSE writes an event in bytes: the
meter's batch path asks it (``recorder.core.framing.Framer``) how one whole
event is written as a piece, for the interpreter's byte template to read such
pieces without framing them, and where the events of a piece end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recorder.core.framing import Event, FramingIssue, IssueKind
from recorder.core.sse_lines import DEFAULT_MAX_EVENT_BYTES, SSELines

if TYPE_CHECKING:
    from recorder.core.framing import EventReader, EventRun, Item, Wrappable

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEFramer"]

_BOM = b"\xef\xbb\xbf"
_BLANK_CRLF = b"\r\n\r\n"  # a line end and a blank line, CRLF
_NAMES_KEPT = 32  # event names decoded once per stream, then looked up

_new = tuple.__new__  # builds an Event without NamedTuple's Python-level __new__


class SSEFramer(SSELines):
    """Incremental SSE parser. Call :meth:`feed` with each received piece."""

    __slots__ = (
        "_at_start",
        "_blank",
        "_crlf",
        "_ended",
        "_idle",
        "_names",
        "_prefix",
        "_prefix_name",
        "_skip_lf",
    )

    def __init__(
        self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, bare_json: bool = False
    ) -> None:
        super().__init__(max_event_bytes, bare_json=bare_json)
        self._skip_lf = False  # the previous read ended in CR
        # The stream wrote a CR: its line ends are likely CRLF (Google's), so the
        # batch path reads whole events written so (whole_event, runner). Only a
        # guess of how the next events are written: what they are is checked.
        self._crlf = False
        # the blank line that ends an event as whole_event last wrote one, which
        # runner, splittable and feed_next split at (so that they agree)
        self._blank = b"\n\n"
        self._at_start = True  # a BOM may still come
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
                or self._stray
                or self._skip_lf
                or self._at_start
                or self._ended
            )
        return self._idle

    # -- the batch path's part (recorder.core.framing.Framer) -------------------

    @property
    def piece_limit(self) -> int:
        """The longest piece :meth:`feed_one` takes: the cap, and the blank line."""
        return self._max + 2

    def whole_event[T: Wrappable](self, template: T, name: str) -> T | None:
        """The template of a piece that is exactly one event named ``name`` whose
        data ``template`` reads: ``data: `` (or ``event: N`` then ``data: ``),
        the data, a line end and a blank line. None if a literal of the template
        holds a line end (an event learned from several data lines), or the name
        one.

        Such a piece is one event, as :meth:`feed_one` would return it, whenever
        the framer is :attr:`idle` and the piece is at most :attr:`piece_limit`
        long: the data is one line, because its literals hold no line end and
        no hole nor text that a template's reader accepts holds a control
        character (so neither CR nor LF).

        Line ends are LF, or CRLF once the stream wrote a CR (Google's): either
        way each line end of such a piece is one, and the piece the same event."""
        eol = b"\r\n" if self._crlf else b"\n"
        self._blank = eol + eol
        if name == "message":
            lead = b"data: "
        else:
            lead = b"event: " + name.encode("utf-8", "replace")
            if lead.find(b"\n") >= 0 or lead.find(b"\r") >= 0:
                return None
            lead += eol + b"data: "
        if any(lit.find(b"\n") >= 0 or lit.find(b"\r") >= 0 for lit in template.literals()):
            return None
        return template.enclosed(lead, eol + eol)

    def message_reader(self, read: EventReader, name: str) -> EventReader | None:
        return None  # (a text wire: whole_event's template reads a piece)

    def runner(self, read: EventReader) -> EventRun:
        """``run(data, pos, limit)`` for a reader of :meth:`whole_event`'s
        template: read the whole events of ``data`` from ``pos`` on while each is
        at most ``limit`` bytes (its blank line included) and ``read`` reads it;
        return where it stopped, the events read and how many carried output.
        For the run to frame as :meth:`feed` would, the framer must be settled
        at ``pos`` (:meth:`splittable`): each event read is one line (see
        :meth:`whole_event`) and its blank line, whatever else the piece holds.

        The C reader's own ``run`` when ``read`` has one (it ends events at a
        blank line, as here: no Python call per event), else the same loop in
        Python. A blank line is ``\\n\\n``, or ``\\r\\n\\r\\n`` for a stream
        with CRLF line ends (as :meth:`whole_event` writes one)."""
        blank = self._blank
        native: Any = getattr(read, "run", None)
        if native is not None:
            if blank != _BLANK_CRLF:
                run: EventRun = native
                return run

            def crlf_run(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
                return native(data, pos, limit, _BLANK_CRLF)  # type: ignore[no-any-return]

            return crlf_run
        step = len(blank)

        def python_run(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
            events = outputs = 0
            size = len(data)
            while pos < size:
                stop = data.find(blank, pos)
                if stop < 0 or stop + step - pos > limit:
                    break
                n = read(data[pos : stop + step])
                if n < 0:
                    break
                events += 1
                if n:
                    outputs += 1
                pos = stop + step
            return pos, events, outputs

        return python_run

    def splittable(self, data: bytes) -> bool:
        """Whether ``data`` holds more than one event (a blank line before its
        last bytes), with no CR, or with CRLF line ends if :meth:`whole_event`
        wrote them so, so that a run may read its events."""
        if self._blank == _BLANK_CRLF:
            return 0 <= data.find(_BLANK_CRLF) < len(data) - 4
        return 0 <= data.find(b"\n\n") < len(data) - 2 and data.find(b"\r") < 0

    def feed_next(self, data: bytes, pos: int) -> tuple[list[Item], int]:
        """:meth:`feed` the bytes of ``data`` from ``pos`` through its next blank
        line (to its end if there is none): their items, and where they stopped.
        (Any chunking frames alike: where it splits is only how far a run may go.)"""
        blank = self._blank
        stop = data.find(blank, pos)
        stop = len(data) if stop < 0 else stop + len(blank)
        return self.feed(data[pos:stop]), stop

    # -- framing ---------------------------------------------------------------

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
            return [FramingIssue(IssueKind.INTERNAL_ERROR, len(data))]

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
            # the same with CRLF line ends (Google's streams): "data: V\r\n\r\n"
            cr = last - 2
            if (
                data.endswith(b"\r\n\r\n")
                and data.find(b"\r", 6) == cr
                and data.find(b"\n", 6) == cr + 1
                and cr <= self._max
            ):
                self._crlf = True
                return _new(Event, ("message", data[6:cr], self._last_id, None))
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
            data = self._after_bom(data)
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
            self._crlf = True
            self._skip_lf = data[-1] == 0x0D
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[Item] = []
        pos = 0
        if self._buf or self._midline:  # the first line began in an earlier piece
            nl = data.find(b"\n")
            if nl < 0:
                return self._hold(data)
            self._end_held_line(data[:nl], out)
            pos = nl + 1
        end = len(data) - 1  # a line end at i < end can be followed by a blank line
        pos, clean = self._events(data, pos, out)
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

    def _after_bom(self, data: bytes) -> bytes:
        """The stream's first bytes without a BOM (b"": nothing to frame yet)."""
        if self._buf:
            data = bytes(self._buf) + data
            self._buf.clear()
        if len(data) < 3 and _BOM.startswith(data):
            self._buf += data  # could still become a BOM
            return b""
        self._at_start = False
        return data[3:] if data.startswith(_BOM) else data

    def _end_held_line(self, tail: bytes, out: list[Item]) -> None:
        """The end of the line an earlier piece began (``tail``: up to its line end)."""
        if self._midline:
            self._midline = False
            self._skipped += len(tail) + 1  # the tail of the oversized line, not a blank line
        else:
            self._buf += tail
            line = bytes(self._buf)
            self._buf.clear()
            self._lines([line], out)

    def _events(self, data: bytes, pos: int, out: list[Item]) -> tuple[int, bool]:
        """The whole events of ``data`` (line ends all LF) from ``pos``, a line's
        start, into ``out``: where they stop, and whether nothing of an event is
        pending there.

        The usual event, ``data: V`` or ``event: N`` + ``data: V`` then a blank
        line, found with nothing of another event pending and well under the
        cap, is built straight from the bytes: per event this is most of the
        framer's CPU on the proxy's event loop. Anything else goes through
        _lines, one stretch up to a blank line at a time, which is what the fast
        path does for the usual event."""
        end = len(data) - 1  # a line end at i < end can be followed by a blank line
        clean = not (
            self._data
            or self._event
            or self._retry is not None
            or self._skipping
            or self._data_size
            or self._stray
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
        return pos, clean

    def _finish(self) -> list[Item]:
        if self._ended:
            return []
        self._ended = True
        pending = len(self._buf)
        if self._at_start:
            pending = 0 if _BOM.startswith(bytes(self._buf)) else pending
        out: list[Item] = []
        if self._stray is not None and pending and not self._skipping and not self._at_start:
            line = bytes(self._buf)  # the last line, with no line end
            self._buf.clear()
            pending = 0
            self._lines([line], out)
            if self._has_data or self._event:
                out.append(FramingIssue(IssueKind.UNTERMINATED, self._data_size))
                self._reset_event()
        if self._stray:
            self._flush_stray(out)
        if self._skipping:
            out.append(FramingIssue(IssueKind.UNTERMINATED, self._skipped + pending))
        elif self._has_data or self._event or pending:
            out.append(FramingIssue(IssueKind.UNTERMINATED, self._data_size + pending))
        self._buf.clear()
        self._reset_event()
        self._skipping = False
        self._midline = False
        return out
