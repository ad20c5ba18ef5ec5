"""A streamed JSON array, framed: bytes in, each element as an event, for any chunking.

Theory of operation
-------------------
Google's ``:streamGenerateContent`` without ``alt=sse`` answers with one JSON
array written a piece at a time: ``[{...}`` then ``,\\r\\n{...}`` ... then ``]``.
Each element is a whole response chunk, so the framer hands each one to the
interpreter as an :class:`~recorder.core.framing.Event` named ``message`` (its
``data`` the element's bytes, undecoded) as soon as its closing brace arrives:
the stream's rhythm is then timed as an SSE stream's is.

The framer tracks nesting on bytes: inside an element, the C reader's ``scan``
walks to its end in one call; elsewhere (and without the C reader) a regular
expression skips, in C, every byte that is no bracket, brace nor quote and
every whole string, so that Python looks only at brackets and braces; a string
a piece ends inside is read to its closing quote in the next, a backslash
escaping the next byte even across two pieces. An object that opens at the top
(a bare ``{"error": ...}`` after the array, or instead of it) is an element
too; what lies between elements (commas, white space, the array's brackets)
is framing.

Memory is bounded as the SSE framer's is: an element whose bytes pass
``max_event_bytes`` is skipped to its end and reported once
(:class:`~recorder.core.framing.FramingIssue`, ``oversized_event``); an element
still open when the stream ends is ``unterminated_event``. Bytes that are not
JSON between elements are skipped. The framer never raises.

It has the SSE framer's batch shortcuts: a piece that is exactly ``,`` CRLF
and one element (how Google writes each element after the first) is read whole
by the interpreter's byte template when the framer is between elements
(:meth:`whole_event`), and so is each such element of a piece cut anywhere, one
run at a time (:meth:`runner`, in C: ``_reader.Reader.run_objects``); what no
run reads goes through the framer an element at a time (:meth:`feed_next`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from recorder.core.framing import Event, FramingIssue, IssueKind
from recorder.core.protocols.template import native_scan
from recorder.core.sse_lines import DEFAULT_MAX_EVENT_BYTES

if TYPE_CHECKING:
    from recorder.core.framing import EventReader, EventRun, Item, Wrappable

__all__ = ["JSONArrayFramer"]

# what changes nothing: bytes that are no bracket, brace nor quote, and whole strings
_SKIP = re.compile(rb'[^"\[\]{}]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"\[\]{}]*)*', re.DOTALL)
# inside a string: its closing quote, or a backslash (which escapes the next byte)
_IN_STRING = re.compile(rb'["\\]')
_OPEN = frozenset(b"[{")
# between two elements: bytes that change no nesting (a separator, white space)
_FRAMING = re.compile(rb'[^"\[\]{}]*')
# how Google writes each element after the first, as a piece of its own
_LEAD = b",\r\n"


class JSONArrayFramer:
    """Incremental framer of a streamed JSON array. Call :meth:`feed` with each piece."""

    __slots__ = (
        "_base",
        "_depth",
        "_element",
        "_ended",
        "_escape",
        "_in_element",
        "_in_string",
        "_max",
        "_size",
        "_skipping",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max(1, max_event_bytes)
        self._depth = 0  # brackets and braces open, the outer array's included
        self._base = 0  # the depth at which an element opens (1 inside the array)
        self._in_string = False
        self._escape = False  # a backslash ended the last piece, inside a string
        self._in_element = False
        self._element: list[bytes] = []  # the element's pieces so far
        self._size = 0  # their bytes
        self._skipping = False  # an element past the cap: read to its end, not kept
        self._ended = False

    # -- what the meter asks of a framer (recorder.core.framing.Framer) ---------

    @property
    def max_event_bytes(self) -> int:
        """The cap on an element's bytes."""
        return self._max

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an element not yet complete (none of one being skipped)."""
        return 0 if self._skipping else self._size

    @property
    def idle(self) -> bool:
        """Between two elements of the outer array, nothing of one pending: a piece
        that is exactly ``,`` CRLF and one element may be read whole."""
        return (
            self._base == 1
            and self._depth == 1
            and not self._in_element
            and not self._in_string
            and not self._ended
        )

    def settle(self) -> bool:
        """The same as :attr:`idle`."""
        return self.idle

    @property
    def piece_limit(self) -> int:
        """The cap (no piece is read whole without framing here)."""
        return self._max

    def whole_event[T: Wrappable](self, template: T, name: str) -> T | None:
        """The template of a piece that is exactly the separator Google writes
        between two elements (``,`` CRLF) and one element whose bytes ``template``
        reads. Such a piece, taken when the framer is :attr:`idle`, is one whole
        element: the template compares every byte of it but the holes' tokens, so
        it is the learned element's JSON object, balanced, with other values, and
        it leaves the framer as it was (between two elements)."""
        if name != "message":
            return None
        return template.enclosed(_LEAD, b"")

    def message_reader(self, read: EventReader, name: str) -> EventReader | None:
        return None  # (a text wire: whole_event's template reads a piece)

    def runner(self, read: EventReader) -> EventRun:
        """``run(data, pos, limit)`` for a reader of :meth:`whole_event`'s template:
        read the elements of ``data`` from ``pos`` on, each past the framing
        before it (bytes that change no nesting: whatever separator the stream
        writes) and from its brace through the one that closes it
        (:func:`object_end`), while each is at most ``limit`` bytes and ``read``
        reads it (less the lead of a whole piece); return where it stopped, the
        elements read and how many carried output. The framer must be
        :attr:`idle` at ``pos``: then each element read is one whole element (see
        :meth:`whole_event`) and leaves it idle, as :meth:`feed` would.

        The C reader's ``run_objects`` when ``read`` has one, else the same loop
        in Python."""
        native: Any = getattr(read, "run_objects", None)
        if native is not None:

            def c_run(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
                return native(data, pos, limit, len(_LEAD))  # type: ignore[no-any-return]

            return c_run

        def python_run(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
            events = outputs = 0
            size = len(data)
            while pos < size:
                start = _FRAMING.match(data, pos).end()  # type: ignore[union-attr]
                if start >= size or data[start] != 0x7B:
                    break
                stop = object_end(data, start, min(size, start + limit))
                if stop < 0:
                    break
                n = read(_LEAD + data[start:stop])
                if n < 0:
                    break
                events += 1
                if n:
                    outputs += 1
                pos = stop
            return pos, events, outputs

        return python_run

    def splittable(self, data: bytes) -> bool:
        """Whether an element may begin in ``data``, for a run to read."""
        return data.find(b"{") >= 0

    def feed_next(self, data: bytes, pos: int) -> tuple[list[Item], int]:
        """:meth:`feed` the bytes of ``data`` from ``pos`` through the end of the
        next element that ends in it (to its end if none does): their items, and
        where they stopped."""
        if self._ended:
            return [], len(data)
        out: list[Item] = []
        try:
            stop = self._scan(data, out, pos, once=True)
        except Exception:  # pragma: no cover - a bug here must not reach the proxy
            self._reset()
            return [FramingIssue(IssueKind.INTERNAL_ERROR, len(data) - pos)], len(data)
        return out, stop

    def feed_one(self, data: bytes) -> Event | None:
        """None: no piece is taken whole without framing."""
        return None

    # -- framing ---------------------------------------------------------------

    def feed(self, data: bytes) -> list[Item]:
        """Feed one received piece; ``b""`` ends the stream. Never raises."""
        try:
            if not data:
                return self._finish()
            if self._ended:
                return []
            out: list[Item] = []
            self._scan(data, out)
            return out
        except Exception:  # pragma: no cover - a bug here must not reach the proxy
            self._reset()
            return [FramingIssue(IssueKind.INTERNAL_ERROR, len(data))]

    def _scan(self, data: bytes, out: list[Item], pos: int = 0, *, once: bool = False) -> int:
        """Frame ``data`` from ``pos``; with ``once``, stop after the first element
        that ends. Where it stopped."""
        start = pos if self._in_element else -1  # where the element's bytes in data begin
        size = len(data)
        skip = _SKIP.match
        scan = native_scan()
        while pos < size:
            if self._in_element and scan is not None:
                # inside an element, to its end in one call: what the loop below
                # does for it (tests/core/test_json_array.py)
                string = (2 if self._escape else 1) if self._in_string else 0
                end, depth, string = scan(data, pos, self._depth - self._base, string)
                self._in_string = string > 0
                self._escape = string == 2
                if end < 0:
                    self._depth = self._base + depth
                    break
                self._depth = self._base
                self._element_end(data, start, end, out)
                start = -1
                pos = end
                if once:
                    return pos
                continue
            if self._in_string:
                pos = self._string(data, pos)
                continue
            # past every byte that changes nothing, whole strings included (in C)
            pos = skip(data, pos).end()  # type: ignore[union-attr]
            if pos >= size:
                break
            char = data[pos]
            at = pos
            pos += 1
            if char == 0x22:  # '"': a string the piece ends inside
                self._in_string = True
                continue
            if char in _OPEN:
                if not self._in_element and char == 0x7B and self._depth == self._base:
                    self._in_element = True
                    start = at
                elif not self._in_element and char == 0x5B and self._depth == 0:
                    self._base = 1  # the outer array: its elements open at depth 1
                self._depth += 1
                continue
            # a closing bracket or brace
            if self._depth > 0:
                self._depth -= 1
            if self._in_element and self._depth == self._base:
                self._element_end(data, start, pos, out)
                start = -1
                if once:
                    return pos
            elif self._depth == 0:
                self._base = 0  # the outer array closed: a bare object may follow
        if self._in_element and start >= 0:
            self._keep(data[start:], out)
        return size

    def _string(self, data: bytes, pos: int) -> int:
        """Past the string's closing quote in ``data`` from ``pos`` (or its end)."""
        if self._escape:
            self._escape = False
            pos += 1  # the escaped byte
        while True:
            found = _IN_STRING.search(data, pos)
            if found is None:
                return len(data)
            at = found.start()
            if data[at] == 0x22:
                self._in_string = False
                return at + 1
            if at + 1 >= len(data):
                self._escape = True  # the backslash ends the piece
                return len(data)
            pos = at + 2

    def _keep(self, part: bytes, out: list[Item]) -> None:
        """Bytes of an element still open at the piece's end (bounded by the cap)."""
        if self._skipping:
            self._size += len(part)
            return
        self._size += len(part)
        if self._size > self._max:
            self._skip(out)
            return
        self._element.append(part)

    def _skip(self, out: list[Item]) -> None:
        self._skipping = True
        self._element.clear()
        out.append(FramingIssue(IssueKind.OVERSIZED, self._size))

    def _element_end(self, data: bytes, start: int, end: int, out: list[Item]) -> None:
        part = data[max(start, 0) : end]
        self._in_element = False
        if self._skipping:
            self._skipping = False
            self._size = 0
            return
        if self._size + len(part) > self._max:
            self._size += len(part)
            self._skip(out)
            self._skipping = False
            self._size = 0
            return
        if self._element:
            self._element.append(part)
            part = b"".join(self._element)
            self._element.clear()
        self._size = 0
        out.append(Event("message", part, None, None))

    def _finish(self) -> list[Item]:
        if self._ended:
            return []
        self._ended = True
        out: list[Item] = []
        if self._in_element:
            out.append(FramingIssue(IssueKind.UNTERMINATED, self._size))
        self._reset()
        return out

    def _reset(self) -> None:
        self._element.clear()
        self._size = 0
        self._in_element = False
        self._in_string = False
        self._escape = False
        self._skipping = False


def object_end(data: bytes, pos: int, stop: int) -> int:
    """The end (one past it) of the bracket that closes the first bracket in
    ``data[pos:stop]``, strings skipped; -1 if it does not close there. Where a
    run guesses that an element ends (the C reader's ``object_end`` is the same):
    the template's reader says whether it is one."""
    depth = 0
    skip = _SKIP.match
    while pos < stop:
        pos = skip(data, pos, stop).end()  # type: ignore[union-attr]
        if pos >= stop or data[pos] == 0x22:  # (a string that does not close before stop)
            return -1
        char = data[pos]
        pos += 1
        if char in _OPEN:
            depth += 1
            continue
        depth -= 1
        if depth <= 0:
            return pos if depth == 0 else -1
    return -1
