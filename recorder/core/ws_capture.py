"""A WebSocket capture (``.ws.jsonl``): a connection's messages with their times,
and metering one again (``recorder replay FILE.ws.jsonl``).

The format, one JSON object per line, in the order the messages crossed:

- ``{"t": 0.412, "dir": "c2s", "text": "{\\"type\\":\\"response.create\\",...}"}``:
  a text message, ``t`` its time in seconds since the connection opened,
  ``dir`` ``c2s`` (the client sent it) or ``s2c`` (the server did), ``text``
  the message as it was (decompressed, as mitmproxy shows it);
- ``{"t": 5.0, "dir": "s2c", "ping": true}`` (or ``"pong": true``): a ping or a
  pong, a keepalive of the responses open then;
- optionally a first line ``{"websocket": "/v1/realtime?model=gpt-realtime"}``:
  the upgrade request's path, which says the endpoint (and Realtime's model).

Lines of any other shape are skipped and counted. Each response of the
connection is one record, found and metered as the proxy finds and meters it
(``recorder.core.websocket``), with its times: its start is its
``response.create``'s ``t`` (or its ``response.created``'s), so timings and stalls
come out as the proxy measured them; what a capture does not hold (the key, the
upstream) is null.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from recorder.core.endpoints import websocket_endpoint_for
from recorder.core.errors import UsageError
from recorder.core.framing import Event
from recorder.core.meter import SWITCHING_PROTOCOLS, StreamMeter
from recorder.core.protocols.realtime import RealtimeInterpreter
from recorder.core.record import StreamRecord
from recorder.core.request import read_request
from recorder.core.websocket import Conversation, Quick, conversation_for

CLIENT, SERVER = "c2s", "s2c"
# Message types only the Realtime API sends
_REALTIME_ONLY = frozenset({"session.created", "response.done", "input_audio_buffer.append"})


class NotACapture(UsageError, ValueError):
    """Lines that hold no WebSocket message of this format."""


@dataclass(slots=True, frozen=True)
class Line:
    """One line of a capture: a message (``text``) or a keepalive (``text`` None)."""

    t: float
    client: bool
    text: bytes | None


@dataclass(slots=True)
class Capture:
    """A parsed capture: its lines, the upgrade path if given, lines skipped."""

    lines: list[Line]
    path: str | None = None
    skipped: int = 0

    @property
    def endpoint(self) -> str | None:
        """What the path says, else what the messages say (Realtime's own types)."""
        if self.path is not None:
            found = websocket_endpoint_for(self.path)
            if found is not None:
                return found
        for line in self.lines:
            if line.text is not None and _type_of(line.text) in _REALTIME_ONLY:
                return "realtime"
        if any(line.text is not None for line in self.lines):
            return "responses"
        return None


def _type_of(text: bytes) -> str | None:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    typ = obj.get("type") if isinstance(obj, dict) else None
    return typ if isinstance(typ, str) else None


def looks_like_capture(head: bytes) -> bool:
    """Whether a file beginning with ``head`` is a capture: its first line a JSON
    object with ``dir`` or ``websocket``."""
    first = head.split(b"\n", 1)[0]
    if not first.lstrip().startswith(b"{"):
        return False
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and ("dir" in obj or "websocket" in obj)


def read_capture(raw: Iterable[bytes]) -> Capture:
    """Parse a capture's lines; NotACapture when none is a message of this format."""
    capture = Capture([])
    for number, line in enumerate(raw):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            capture.skipped += 1
            continue
        if number == 0 and isinstance(obj.get("websocket"), str):
            capture.path = obj["websocket"]
            continue
        t, way = obj.get("t"), obj.get("dir")
        if isinstance(t, bool) or not isinstance(t, int | float) or way not in (CLIENT, SERVER):
            capture.skipped += 1
            continue
        text = obj.get("text")
        if isinstance(text, str):
            capture.lines.append(
                Line(float(t), way == CLIENT, text.encode("utf-8", "surrogatepass"))
            )
        elif obj.get("ping") is True or obj.get("pong") is True:
            capture.lines.append(Line(float(t), way == CLIENT, None))
        else:
            capture.skipped += 1
    if not capture.lines:
        raise NotACapture('no line of it is a WebSocket message ({"t", "dir", "text"})')
    return capture


class _Replay:
    """The exchanges of a replayed connection: a meter each, records in order."""

    def __init__(self, endpoint: str, model: str | None, stall_after: float) -> None:
        self.endpoint = endpoint
        self.model = model
        self.stall_after = stall_after
        self.done: list[tuple[StreamMeter, StreamRecord]] = []
        self._open: list[StreamMeter] = []

    def begin(self, now: float, request: bytes | None) -> StreamMeter:
        meter = StreamMeter(self.endpoint, start=now, stall_after=self.stall_after)
        meter.headers(None, SWITCHING_PROTOCOLS)
        rec = meter.record
        rec.transport = "websocket"
        if self.endpoint == "responses" and request is not None:
            facts = read_request(request)
            rec.model, rec.max_output_tokens = facts.model, facts.max_output_tokens
        else:
            rec.model = self.model
        self._open.append(meter)
        return meter

    def feed(self, exchange: StreamMeter, event: Event, now: float) -> None:
        exchange.feed_event(event, now)

    def keepalive(self, exchange: StreamMeter, now: float) -> None:
        exchange.feed_keepalive(now)

    def end(self, exchange: StreamMeter, now: float, how: str = "eof") -> None:
        if exchange in self._open:
            self._open.remove(exchange)
        self.done.append((exchange, exchange.finish(now, ending=how)))

    def session(self, exchange: StreamMeter, model: str | None, rate: float | None) -> None:
        if isinstance(exchange.interpreter, RealtimeInterpreter):
            exchange.interpreter.session(model, rate)

    def quick(self, exchange: StreamMeter) -> Quick:
        return exchange.feed_read


def replay_capture(
    capture: Capture, endpoint: str, *, stall_after: float = 30.0
) -> list[tuple[StreamMeter, StreamRecord]]:
    """Every response of a captured connection, metered at its times, in the
    order they ended; a response still open at the last line ends there as
    ``truncated`` (the capture does not say how the connection ended)."""
    model = None
    if capture.path and "?" in capture.path:
        query = urllib.parse.parse_qs(capture.path.split("?", 1)[1])
        models = query.get("model")
        model = models[0] if models else None
    replay = _Replay(endpoint, model, stall_after)
    conversation: Conversation[StreamMeter] | None = conversation_for(endpoint, replay)
    if conversation is None:
        raise NotACapture(f"{endpoint} is not served over a WebSocket")
    last = 0.0
    for line in capture.lines:
        last = line.t
        if line.text is None:
            conversation.keepalive(line.t)
        elif line.client:
            conversation.client(line.text, line.t)
        else:
            conversation.server(line.text, line.t)
    for meter in conversation.close():
        replay.end(meter, last)
    return replay.done
