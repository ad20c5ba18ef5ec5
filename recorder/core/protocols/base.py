"""The base of every protocol interpreter: the template fast path, parsing, learning.

An interpreter is fed a stream's events in order (:meth:`Interpreter.handle`)
and records what they say on its :class:`Observations`. Whatever the
protocol, most events of a stream are output deltas that differ only in their
text: once an interpreter has learned a byte template from one
(:meth:`Interpreter.learn_from`, see ``recorder.core.protocols.template``),
``handle`` reads a later event that matches it without a parse, and only
the events that miss it reach the protocol's own :meth:`Interpreter.interpret`.

The meter's batch path also reads whole pieces with the template, framed as
the stream's framer writes one event (:meth:`Interpreter.piece_reader`): the
interpreter knows the template and the event's name, the framer how an event
is written (``recorder.core.framing``), or, for a binary wire, how to read one
to its data.
"""

from __future__ import annotations

from typing import Any, ClassVar

from orjson import JSONDecodeError, loads

from recorder.core.framing import Event, EventReader, Framer
from recorder.core.protocols.observations import Observations, OutputKind
from recorder.core.protocols.template import MAX_LEARNED, HoleKind, Path, Template, learn
from recorder.core.record import StreamRecord

_new = tuple.__new__  # builds an Event without NamedTuple's Python-level __new__


class Interpreter:
    """Base class: one instance per stream, fed events in order.

    A protocol implements :meth:`interpret` (an event that the template did not
    read) and :meth:`read_body`, and calls :meth:`learn_from` with an event
    whose whole effect was its text."""

    endpoint: ClassVar[str]
    provider: ClassVar[str]
    # Google's wire: a stream may also come as a JSON array (``json_array``), and an
    # error after status 200 as bare JSON among the SSE lines (``bare_json``)
    json_array: ClassVar[bool] = False
    bare_json: ClassVar[bool] = False

    __slots__ = ("_kind", "_learnable", "_name", "_read", "_template", "obs", "quick")

    # Whether the protocol reads more than its template's events without their
    # name (its own ``quick``, set in its ``__init__``: Realtime's audio deltas)
    own_quick: ClassVar[bool] = False

    def __init__(self, *, fast: bool = True) -> None:
        """``fast``: learn templates (tests turn it off to compare both paths)."""
        self.obs = Observations()
        # The byte template of the last output delta learned, its kind of output,
        # the name of the event it was learned from, and the function that reads
        # an event's data with it (None: none learned yet).
        self._template: Template | None = None
        self._kind = OutputKind.TEXT
        self._name = "message"
        self._read: EventReader | None = None
        self._learnable = MAX_LEARNED if fast else 0  # see learn_from
        # What reads a whole event's data, its name unknown, as ``handle`` would
        # (the output characters), or says -1 having done nothing: the template's
        # reader once one is learned (None before). Read by a caller whose events
        # come framed already and mostly alike (a WebSocket's messages: see
        # ``StreamMeter.feed_read``), so that the usual one costs one C call.
        self.quick: EventReader | None = None

    def handle(self, event: Event) -> int:
        """Interpret one event; return the output characters it carried (0: no output)."""
        read = self._read
        if read is not None:
            n = read(event.data)
            if n >= 0:
                return n
        return self.interpret(event)

    def handle_data(self, data: bytes) -> int:
        """:meth:`handle` of an event without a name, id or retry whose data is
        ``data`` (an event carried inside another protocol's: Bedrock's chunks),
        without the Event unless the template cannot read it."""
        read = self._read
        if read is not None:
            n = read(data)
            if n >= 0:
                return n
        return self.interpret(_new(Event, ("", data, None, None)))

    def interpret(self, event: Event) -> int:
        """:meth:`handle` for an event the template did not read: the protocol's own."""
        raise NotImplementedError

    def read_body(self, body: bytes) -> int:
        """Interpret a whole non-streamed JSON response body; return output chars."""
        raise NotImplementedError

    def annotate(self, record: StreamRecord) -> None:
        """Put on the finished record what this protocol knows beyond
        :class:`Observations` (nothing, but for a protocol that says so)."""

    def parse(self, data: bytes) -> dict[str, Any] | None:
        """JSON object of an event, or None (counted as a parse issue)."""
        try:
            obj = loads(data)
        except JSONDecodeError:
            self.obs.parse_issues += 1
            return None
        if not isinstance(obj, dict):
            self.obs.parse_issues += 1
            return None
        return obj

    def learn_from(
        self,
        event: Event,
        obj: dict[str, Any],
        text: Path,
        kind: OutputKind,
        ignored: tuple[tuple[str | Path, HoleKind], ...] = (),
    ) -> None:
        """Read later events like ``event`` (parsed: ``obj``; its text at the path
        ``text``, of this kind) with a template, if one can be made of it. Call
        it only for an event whose whole effect was its text, while
        ``self._learnable`` (the templates it may still learn, ``MAX_LEARNED`` a
        stream at most) is not 0."""
        self._learnable -= 1
        template = learn(event.data, obj, text, ignored)
        if template is not None:
            self._template = template
            self._kind = kind
            self._name = event.event
            self._read = template.reader(self.obs, kind)
            if not self.own_quick:
                self.quick = self._read

    @property
    def template(self) -> Template | None:
        """The template in use (a new object whenever another is learned)."""
        return self._template

    def piece_reader(self, framer: Framer) -> EventReader | None:
        """What :meth:`handle` does for a whole piece that is one event read by the
        template, as ``framer`` writes it (``Framer.whole_event``), without the
        framing, or as a binary framer reads it (``Framer.message_reader``). None
        if there is no template, or ``framer`` has no such piece."""
        template = self._template
        if template is None or self._read is None:
            return None
        whole = framer.whole_event(template, self._name)
        if whole is not None:
            return whole.reader(self.obs, self._kind)
        return framer.message_reader(self._read, self._name)
