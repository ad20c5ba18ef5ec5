"""OpenAI over a WebSocket: which messages of a connection make which response.

A WebSocket connection to ``/v1/responses`` (the Responses API's WebSocket mode)
or ``/v1/realtime`` (the Realtime API) carries many responses, one after the
other or, on some, side by side. Each is one record, metered as an HTTP stream
is: its events are the server's messages of that response, each message one
event (its ``type``, its text), fed to the endpoint's interpreter with the time
it arrived (``StreamMeter.feed_event``). A :class:`Conversation` (one per
connection, sans-IO: messages and times in, calls to its :class:`Exchanges`
out) decides, message by message, when a response begins, which open response
a server message belongs to, and when a response ends. It holds the open
responses of its connection and nothing of the finished ones: a connection open
for hours costs the same as one open for seconds.

**Responses** (:class:`ResponsesConversation`): the client's ``response.create``
begins a response (its time is the record's start, so the time to first token
runs from it); the server's events follow, exactly those of the SSE form, and
``response.completed``, ``response.failed`` or ``response.incomplete`` ends it.
Responses of one *lane* (the ``stream_id`` a ``response.create`` may name; one
lane without it) are served in order, first come first served: a server event
belongs to the oldest open response of its lane. An ``error`` before the
response was created is the refusal of its ``response.create``, and ends it;
after, the response goes on to its terminal event (``response.failed``). A
``response.created`` with no ``response.create`` waiting (the server's own
successor of a steered response) begins a response at that time.

**Realtime** (:class:`RealtimeConversation`): a response is ``response.created``
through ``response.done`` (its id in every event: ``response_id``, or
``response.id``), begun at the client's ``response.create`` when one waits
(else, a response the server began on its own when voice activity detection
saw the user stop, at ``response.created``). Several may be open at once
(out-of-band responses), each event going to its own by id. An ``error`` whose
``event_id`` names a waiting ``response.create`` ends that one; session,
conversation and input-audio events are no response's. The session's model
and output audio format (``session.created``, ``session.updated``) are handed
to each response.

A message is read as little as possible: its type from its first bytes when
the JSON begins with it (as OpenAI writes them), a full parse only for the few
messages routing needs (a ``response.created``, a ``response.done``, a session
event, an ``error``, and any message once several responses are open).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from recorder.core.framing import Event

__all__ = [
    "TERMINAL_TYPES",
    "Conversation",
    "Exchanges",
    "RealtimeConversation",
    "ResponsesConversation",
    "audio_bytes_per_second",
    "conversation_for",
    "message_type",
]

# The Responses events that end a response
TERMINAL_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
# A client message larger than this is not parsed on the loop (a response.create
# whose input inlines images runs to megabytes): only scanned
PARSE_LIMIT = 64 * 1024
_TYPE_HEAD = b'{"type":"'


class Exchanges[T](Protocol):
    """What a conversation does with the responses it finds (the proxy's exchanges)."""

    def begin(self, now: float, request: bytes | None) -> T | None:
        """A response begins at ``now``; ``request`` is the client's ``response.create``
        message (None: the server began it). None if it cannot be recorded."""
        ...

    def feed(self, exchange: T, event: Event, now: float) -> None:
        """One server message of the response, received at ``now``."""
        ...

    def keepalive(self, exchange: T, now: float) -> None:
        """A ping or pong on the connection while the response is open."""
        ...

    def end(self, exchange: T, now: float) -> None:
        """Its last event came: the response is over."""
        ...

    def session(self, exchange: T, model: str | None, audio_bytes_per_s: float | None) -> None:
        """What the session said of the model and the output audio (Realtime)."""
        ...

    def quick(self, exchange: T) -> Quick | None:
        """What meters a server message of ``exchange`` that it reads whole by its
        bytes alone, as ``feed`` would have metered it (True), or does nothing
        (False: the message is routed and fed as usual); None: nothing does."""
        ...


# A server message metered whole (True), or left alone (False): Exchanges.quick
Quick = Callable[[bytes, float], bool]


def message_type(data: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """A message's ``type``, from its first bytes when it begins ``{"type":"``,
    else from a full parse (then also the parsed object); (None, None) for a
    message that is not a JSON object with a string type."""
    if data.startswith(_TYPE_HEAD):
        end = data.find(b'"', len(_TYPE_HEAD))
        if end > 0 and data.find(b"\\", len(_TYPE_HEAD), end) < 0:
            try:
                return data[len(_TYPE_HEAD) : end].decode("ascii"), None
            except UnicodeDecodeError:
                pass
    obj = _parse(data)
    if obj is None:
        return None, None
    typ = obj.get("type")
    return (typ, obj) if isinstance(typ, str) else (None, obj)


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _string(obj: Any, *path: str) -> str | None:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj if isinstance(obj, str) and obj else None


def audio_bytes_per_second(session: Any) -> float | None:
    """The output audio's bytes per second that a Realtime session object says
    (GA: ``audio.output.format`` ``{"type": "audio/pcm", "rate": 24000}``,
    ``audio/pcmu``, ``audio/pcma``; beta: ``output_audio_format`` ``pcm16``,
    ``g711_ulaw``, ``g711_alaw``); None when it says nothing readable."""
    if not isinstance(session, dict):
        return None
    fmt: Any = None
    audio = session.get("audio")
    if isinstance(audio, dict) and isinstance(audio.get("output"), dict):
        fmt = audio["output"].get("format")
    if fmt is None:
        fmt = session.get("output_audio_format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "audio/pcm":
            rate = fmt.get("rate")
            if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
                return 2.0 * float(rate)
            return 48_000.0
        if kind in ("audio/pcmu", "audio/pcma"):
            return 8_000.0
        return None
    if fmt == "pcm16":
        return 48_000.0
    if fmt in ("g711_ulaw", "g711_alaw"):
        return 8_000.0
    return None


class Conversation[T]:
    """The responses of one WebSocket connection (see the module docstring)."""

    endpoint: str = ""

    def __init__(self, exchanges: Exchanges[T]) -> None:
        self._x = exchanges
        self.responses = 0  # responses begun on this connection
        # While one response is open, the server's messages of it are mostly
        # deltas like the one before: its Exchanges.quick meters each of them
        # without the routing (None: no response is alone, or none reads so)
        self._quick: Quick | None = None

    def client(self, data: bytes, now: float) -> None:
        """A message the client sent (text; a binary one means nothing here)."""
        self._client(data, now)
        self._quick = self._quick_of_alone()

    def server(self, data: bytes, now: float) -> None:
        """A message the server sent."""
        quick = self._quick
        if quick is not None and quick(data, now):
            return  # a delta of the response open alone, metered
        try:
            self._server(data, now)
        finally:
            self._quick = self._quick_of_alone()

    def _client(self, data: bytes, now: float) -> None:
        raise NotImplementedError

    def _server(self, data: bytes, now: float) -> None:
        raise NotImplementedError

    def _alone(self) -> T | None:
        """The response every server message that it could read goes to (a
        delta: not one that begins or ends a response), if there is one."""
        raise NotImplementedError

    def _quick_of_alone(self) -> Quick | None:
        alone = self._alone()
        return None if alone is None else self._x.quick(alone)

    def open(self) -> Iterator[T]:
        """The responses open now (begun, not ended), oldest first."""
        raise NotImplementedError

    def keepalive(self, now: float) -> None:
        """A ping or pong crossed the connection: a keepalive of every open response."""
        for exchange in list(self.open()):
            self._x.keepalive(exchange, now)

    def close(self) -> list[T]:
        """The connection is over: the responses still open, let go of here (the
        caller ends each as its disconnect)."""
        raise NotImplementedError

    def _begin(self, now: float, request: bytes | None) -> T | None:
        exchange = self._x.begin(now, request)
        if exchange is not None:
            self.responses += 1
        return exchange


@dataclass(slots=True)
class _Turn[T]:
    """A response of a Responses lane, and whether the server created it yet."""

    exchange: T
    created: bool = False


class ResponsesConversation[T](Conversation[T]):
    """``/v1/responses`` over a WebSocket: lanes of responses served in order."""

    endpoint = "responses"

    def __init__(self, exchanges: Exchanges[T]) -> None:
        super().__init__(exchanges)
        self._lanes: dict[str, deque[_Turn[T]]] = {}

    def open(self) -> Iterator[T]:
        for lane in self._lanes.values():
            for turn in lane:
                yield turn.exchange

    def _alone(self) -> T | None:
        # one lane: a delta goes to its oldest response, once the server made it
        if len(self._lanes) != 1:
            return None
        for lane in self._lanes.values():
            if lane[0].created:
                return lane[0].exchange
        return None

    def _client(self, data: bytes, now: float) -> None:
        typ, obj = message_type(data)
        if typ != "response.create":
            return
        exchange = self._begin(now, data)
        if exchange is not None:
            self._lanes.setdefault(_lane(data, obj), deque()).append(_Turn(exchange))

    def _server(self, data: bytes, now: float) -> None:
        typ, obj = message_type(data)
        if not self._lanes and typ != "response.created":
            return  # between responses: no response's
        key = _lane(data, obj)
        lane = self._lanes.get(key)
        turn = lane[0] if lane else None
        if typ == "response.created" and (turn is None or turn.created):
            if turn is not None and lane is not None:
                # a new response on the lane while the last one never ended
                lane.popleft()
                self._x.end(turn.exchange, now)
                turn = lane[0] if lane else None
            if turn is None:
                exchange = self._begin(now, None)  # the server's own successor
                if exchange is None:
                    return
                turn = _Turn(exchange)
                lane = self._lanes.setdefault(key, deque())
                lane.append(turn)
        if turn is None or lane is None:
            return
        if typ == "response.created":
            turn.created = True
        self._x.feed(turn.exchange, Event(typ or "message", data, None, None), now)
        if typ in TERMINAL_TYPES or (typ == "error" and not turn.created):
            lane.popleft()
            if not lane:
                del self._lanes[key]
            self._x.end(turn.exchange, now)

    def close(self) -> list[T]:
        out = list(self.open())
        self._lanes.clear()
        self._quick = None
        return out


def _lane(data: bytes, obj: dict[str, Any] | None) -> str:
    """A Responses message's lane: its ``stream_id`` ("" for none)."""
    if b'"stream_id"' not in data:
        return ""
    if obj is None:
        if len(data) > PARSE_LIMIT:
            return ""
        obj = _parse(data)
    return _string(obj, "stream_id") or ""


@dataclass(slots=True)
class _Waiting[T]:
    """A Realtime ``response.create`` the server has not answered yet."""

    exchange: T
    event_id: str | None


class RealtimeConversation[T](Conversation[T]):
    """``/v1/realtime``: responses by id, several open at once."""

    endpoint = "realtime"

    def __init__(self, exchanges: Exchanges[T]) -> None:
        super().__init__(exchanges)
        self._waiting: deque[_Waiting[T]] = deque()
        self._by_id: dict[str, T] = {}
        self.model: str | None = None  # the session's, as the server said it
        self.audio_bytes_per_s: float | None = None

    def open(self) -> Iterator[T]:
        for waiting in self._waiting:
            yield waiting.exchange
        yield from self._by_id.values()

    def _alone(self) -> T | None:
        # one response made: every response event but response.done goes to it
        if len(self._by_id) != 1:
            return None
        for exchange in self._by_id.values():
            return exchange
        return None

    def _client(self, data: bytes, now: float) -> None:
        typ, obj = message_type(data)
        if typ != "response.create":
            return
        if obj is None and len(data) <= PARSE_LIMIT:
            obj = _parse(data)
        exchange = self._begin(now, data)
        if exchange is not None:
            self._x.session(exchange, self.model, self.audio_bytes_per_s)
            self._waiting.append(_Waiting(exchange, _string(obj, "event_id")))

    def _server(self, data: bytes, now: float) -> None:
        typ, obj = message_type(data)
        if typ is None:
            return
        if typ.startswith("session."):
            self._session(data, obj)
            return
        if typ == "error":
            self._error(data, obj, now)
            return
        if not typ.startswith("response."):
            return  # the conversation's, the input buffer's, rate limits: no response's
        by_id = self._by_id
        if typ == "response.created":
            rid = _string(obj if obj is not None else _parse(data), "response", "id")
            exchange = self._bound(now, rid)
        elif len(by_id) == 1 and typ != "response.done":
            exchange = next(iter(by_id.values()))
            rid = None
        else:
            if obj is None:
                obj = _parse(data)
            rid = _string(obj, "response_id") or _string(obj, "response", "id")
            exchange = by_id.get(rid) if rid is not None else None
            if exchange is None and len(by_id) == 1:
                rid, exchange = next(iter(by_id.items()))
        if exchange is None:
            return
        self._x.feed(exchange, Event(typ, data, None, None), now)
        if typ == "response.done":
            if rid is not None:
                by_id.pop(rid, None)
            self._x.end(exchange, now)

    def _bound(self, now: float, rid: str | None) -> T | None:
        """The exchange a ``response.created`` begins: the oldest waiting
        ``response.create``'s, or a new one (the server began it)."""
        if self._waiting:
            exchange = self._waiting.popleft().exchange
        else:
            begun = self._begin(now, None)
            if begun is None:
                return None
            exchange = begun
            self._x.session(exchange, self.model, self.audio_bytes_per_s)
        key = rid if rid is not None else f"#{self.responses}"
        old = self._by_id.pop(key, None)
        if old is not None:  # the same id again: the one before never ended
            self._x.end(old, now)
        self._by_id[key] = exchange
        return exchange

    def _session(self, data: bytes, obj: dict[str, Any] | None) -> None:
        if obj is None:
            obj = _parse(data)
        session = obj.get("session") if obj is not None else None
        model = _string(session, "model")
        if model:
            self.model = model
        rate = audio_bytes_per_second(session)
        if rate:
            self.audio_bytes_per_s = rate

    def _error(self, data: bytes, obj: dict[str, Any] | None, now: float) -> None:
        """An error names the client event it answers: a waiting response.create's
        refusal ends that response."""
        if obj is None:
            obj = _parse(data)
        cause = _string(obj, "error", "event_id")
        if cause is None:
            return
        for n, waiting in enumerate(self._waiting):
            if waiting.event_id == cause:
                del self._waiting[n]
                self._x.feed(waiting.exchange, Event("error", data, None, None), now)
                self._x.end(waiting.exchange, now)
                return

    def close(self) -> list[T]:
        out = list(self.open())
        self._waiting.clear()
        self._by_id.clear()
        self._quick = None
        return out


def conversation_for[T](endpoint: str, exchanges: Exchanges[T]) -> Conversation[T] | None:
    """The conversation of a connection to ``endpoint`` (None: not one we meter)."""
    if endpoint == "responses":
        return ResponsesConversation(exchanges)
    if endpoint == "realtime":
        return RealtimeConversation(exchanges)
    return None
