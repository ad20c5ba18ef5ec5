"""What a framer hands the interpreters, and what the meter asks of a framer.

A framer turns the bytes of a response body, in pieces split anywhere, into
items: :class:`Event` (a name and its data, undecoded), :class:`Comment` (a
keepalive) and :class:`FramingIssue` (damage). The interpreters read events only,
whatever the wire: an SSE stream's (:class:`recorder.core.sse.SSEFramer`) and, by
the same rules, a framer of another wire (a binary event stream) that names
each event and hands over its payload as ``data``.

:class:`Framer` is all the meter uses of one. Beside ``feed`` it has the batch
path's part: a framer says when nothing of an event is pending (``settle``),
how one whole event is written as a piece (``whole_event``, so that an
interpreter's byte template reads such a piece without framing it; a binary
wire's framer reads such a piece itself, ``message_reader``), and where
the events of a piece end (``runner``, ``feed_next``). A framer that has no
such shortcut answers None and False there, and every piece goes through
``feed``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import NamedTuple, Protocol, Self

# A reader of one event's bytes: the output characters it carried (counted into
# the stream's Observations), or -1 when it could not read them (nothing counted).
EventReader = Callable[[bytes], int]
# A run: (a piece, where to start, the cap on an event's size) -> (where it
# stopped, events read, events that carried output); see Framer.runner.
EventRun = Callable[[bytes, int, int], tuple[int, int, int]]


class Event(NamedTuple):
    """A dispatched event. ``data`` is its payload (SSE: the joined data lines), undecoded."""

    event: str
    data: bytes
    id: str | None
    retry: int | None


class Comment(NamedTuple):
    """A comment line (``: hopbase-keepalive``), without the leading colon."""

    text: str


class IssueKind(StrEnum):
    """What a :class:`FramingIssue` reports."""

    OVERSIZED = "oversized_event"  # an event skipped because it grew past the cap
    UNTERMINATED = "unterminated_event"  # the stream ended inside an event
    INTERNAL_ERROR = "internal_error"  # a framer bug, caught so that it reaches no one
    # a binary wire's (recorder.core.eventstream): a message whose CRC does not
    # match, and one whose lengths or headers cannot be read
    BAD_CRC = "bad_crc"
    MALFORMED = "malformed_message"


class FramingIssue(NamedTuple):
    """Damage seen by a framer; ``size`` is the number of bytes concerned (at
    least the cap for an oversized event)."""

    kind: IssueKind
    size: int


Item = Event | Comment | FramingIssue


class Wrappable(Protocol):
    """What a framer needs of a byte template of an event's data
    (:class:`recorder.core.protocols.template.Template`) to write it as a piece."""

    def literals(self) -> tuple[bytes, ...]:
        """The template's fixed bytes (those between its holes, and around them)."""
        ...

    def enclosed(self, lead: bytes, trail: bytes) -> Self:
        """The template of ``lead`` + an event's data + ``trail``."""
        ...


class Framer(Protocol):
    """A framer, as the meter uses it. Every method takes any bytes and never raises."""

    @property
    def max_event_bytes(self) -> int:
        """The cap on an event's pending bytes."""
        ...

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an event not yet dispatched."""
        ...

    def feed(self, data: bytes) -> list[Item]:
        """One received piece; ``b""`` ends the stream."""
        ...

    def feed_one(self, data: bytes) -> Event | None:
        """The piece's event if the piece is exactly one usual event and nothing
        else is pending, as ``feed`` would return it; else None, nothing consumed."""
        ...

    @property
    def idle(self) -> bool:
        """Nothing of an event is pending (as :meth:`settle` last found)."""
        ...

    def settle(self) -> bool:
        """Whether nothing of an event is pending, so that the next bytes begin one."""
        ...

    @property
    def piece_limit(self) -> int:
        """The longest piece that may hold one whole event (its framing included)."""
        ...

    def whole_event[T: Wrappable](self, template: T, name: str) -> T | None:
        """The template of a piece that is exactly one event named ``name`` whose
        data ``template`` reads, taken whole when the framer is idle; None if
        this framer has no such piece."""
        ...

    def message_reader(self, read: EventReader, name: str) -> EventReader | None:
        """A reader of a piece that is exactly one whole event named ``name``,
        taken whole when the framer is idle: ``read`` of its data, or -1 (nothing
        read, nothing framed) when the piece is not one; None if this framer has
        none. A binary wire's, whose framing (lengths, checksums) no byte
        template covers: :meth:`whole_event` serves a text wire."""
        ...

    def runner(self, read: EventReader) -> EventRun:
        """For a reader made from :meth:`whole_event`'s template: a run that reads
        the whole events of a piece from a position on while ``read`` reads
        each, when the framer is settled there."""
        ...

    def splittable(self, data: bytes) -> bool:
        """Whether a piece holds several whole events that a run may read."""
        ...

    def feed_next(self, data: bytes, pos: int) -> tuple[list[Item], int]:
        """``feed`` the bytes of ``data`` from ``pos`` through the end of the next
        event (to the end of the piece if none ends); its items, and where it stopped."""
        ...
