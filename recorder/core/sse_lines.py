"""The SSE field rules, one line at a time: the long way of the framer.

:class:`recorder.core.sse.SSEFramer` builds the usual event straight from the
bytes; every other line (a comment, ``id:``, ``retry:``, several ``data:``
lines, an unknown field, a line split across pieces, an event past the cap)
goes through :class:`SSELines`, which applies the WHATWG "event stream
interpretation" to whole lines: ``data`` lines join with ``\n``, one leading
space of a value is removed, a blank line dispatches an event that has data,
a line starting with ``:`` is a comment, unknown fields are ignored. The cap
on an event's pending bytes is applied here, so that whatever the chunking an
event past it is skipped up to its blank line and reported once.

With ``bare_json`` (Google's streams: after status 200 an error comes as a bare,
often pretty-printed ``{"error": ...}``, with no ``data:`` in front), the lines
of unknown fields are not ignored but kept, up to the cap, and dispatched as
one event of their own (named ``message``) at the next blank line, field line
or the stream's end: the interpreter reads them as the JSON they are.
"""

from __future__ import annotations

from contextlib import suppress

from recorder.core.framing import Comment, Event, FramingIssue, IssueKind, Item

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


class SSELines:
    """The event being built from whole lines, and a line still incomplete.

    The framer's base: its state is the framer's too."""

    __slots__ = (
        "_buf",
        "_data",
        "_data_size",
        "_event",
        "_has_data",
        "_last_id",
        "_max",
        "_midline",
        "_retry",
        "_skipped",
        "_skipping",
        "_stray",
        "_stray_size",
    )

    def __init__(self, max_event_bytes: int, *, bare_json: bool = False) -> None:
        self._max = max(1, max_event_bytes)
        self._buf = bytearray()  # an incomplete line
        self._data: list[bytes] = []
        self._data_size = 0
        self._has_data = False  # a data line was seen in the current event
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._skipping = False  # inside an oversized event, discarding
        self._skipped = 0
        self._midline = False  # skipping began inside a line whose tail is still to come
        # bare_json: the lines of unknown fields kept (None: ignored, as the spec says)
        self._stray: list[bytes] | None = [] if bare_json else None
        self._stray_size = 0

    @property
    def last_event_id(self) -> str | None:
        """The last event id seen (kept across events, as the spec says)."""
        return self._last_id

    @property
    def max_event_bytes(self) -> int:
        """The cap on an event's pending bytes."""
        return self._max

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an event not yet dispatched (bounded by the cap)."""
        return len(self._buf) + self._data_size

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
        return [FramingIssue(IssueKind.OVERSIZED, self._skipped)]

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
                if self._stray:
                    self._flush_stray(out)
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
            if self._stray and _is_field(line):
                self._flush_stray(out)
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
            elif self._stray is not None:
                self._keep_stray(line, out)
            # other field names are ignored, as the spec says

    def _keep_stray(self, line: bytes, out: list[Item]) -> None:
        """A line of an unknown field, kept as part of a bare JSON body (bounded)."""
        stray = self._stray
        if stray is None:
            return
        self._stray_size += len(line) + 1
        if self._stray_size > self._max:
            if stray:
                stray.clear()
                out.append(FramingIssue(IssueKind.OVERSIZED, self._stray_size))
            return
        stray.append(line)

    def _flush_stray(self, out: list[Item]) -> None:
        """The kept lines of unknown fields, dispatched as one event."""
        stray = self._stray
        if stray:
            out.append(Event("message", b"\n".join(stray), self._last_id, None))
            stray.clear()
        self._stray_size = 0

    @property
    def stray_pending(self) -> bool:
        """Lines of unknown fields are kept, not yet dispatched (``bare_json``)."""
        return bool(self._stray)

    def _reset_event(self) -> None:
        self._data.clear()
        self._data_size = 0
        self._has_data = False
        self._event = ""
        self._retry = None


_FIELDS = (b"data", b"event", b"id", b"retry", b":")


def _is_field(line: bytes) -> bool:
    """Whether a line is a field the framer reads (or a comment), not a stray one."""
    if line[:1] == b":":
        return True
    name = line.partition(b":")[0]
    return name in _FIELDS
