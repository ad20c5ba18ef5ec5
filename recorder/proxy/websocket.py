"""The recorder's WebSocket hooks: OpenAI's Responses API over a WebSocket and the
Realtime API, each response one exchange (``recorder.proxy.lifecycle``).

mitmproxy relays a WebSocket's messages itself, decoded if the connection
compresses them (permessage-deflate), and calls ``websocket_start``, then
``websocket_message`` with each message (``flow.websocket.messages[-1]``),
then ``websocket_end``. These hooks only read: a message is never changed,
dropped or held. Which message makes which response is the core's
(:mod:`recorder.core.websocket`, one :class:`~recorder.core.websocket.Conversation`
per connection); here each response the conversation finds becomes an exchange
of the recorder's, with the life of an HTTP one: NOTED and made OPEN at once when
the client asks for it (its ``response.create``; or the server's
``response.created`` of a response it began itself), in the registry of open
streams under ``<flow id>#<n>``; fed each server message of its own as an event
with its arrival time (``StreamMeter.feed_event``); ENDED at its last event, or
when the connection closes under it (the side that closed says whose disconnect
it is), then closed, settled and completed by the same finishing pipeline.

Messages are metered in batches, as an HTTP body's pieces are
(``recorder.proxy.tap``): ``websocket_message`` only holds the message with
its arrival time; the held messages of a connection are metered, in order and
at their own times, once ``BATCH_MESSAGES`` wait, at the recorder's walk (once
a second, a slice at a time), before a ping or pong of the connection is
counted, when the connection ends, at shutdown, and before a view of the open
streams that catches up (``OpenStreams.views``).
mitmproxy calls its whole addon chain for each message: a message metered
between two of those calls finds the CPU's caches cold and costs several times
what it costs in a batch (docs/performance.md). What a record says does not
change: every message keeps the time it arrived.

What a connection holds (:class:`Connection`) is its open responses, the
messages waiting for their batch, and what every response of it shares (the
upgrade request's headers, read at its ``requestheaders`` as a POST's are, then
its tag headers stripped if asked; who its responses are from, read once; its path
and upstream; the session's model):
nothing per finished response, so a connection that stays open for an hour
with thousands of responses costs what one with a single response does.
(mitmproxy itself keeps every message of a connection in
``flow.websocket.messages`` until the connection ends; bare mitmproxy does the
same.)

Pings and pongs: mitmproxy answers and relays them itself and calls no hook for
them; it logs each one ("Received WebSocket ping from client"). The recorder
reads that log line (``recorder.proxy.ws_pings``) and counts each ping and
pong as a keepalive of every response open on that connection.

A connection that carried no response makes no record; it is counted
(``Health.websocket_connections_without_response``).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from mitmproxy import http, websocket
from wsproto.frame_protocol import Opcode

from recorder.core.endpoints import websocket_endpoint_for
from recorder.core.framing import Event
from recorder.core.meter import SWITCHING_PROTOCOLS
from recorder.core.protocols.realtime import RealtimeInterpreter
from recorder.core.websocket import Conversation, Quick, conversation_for
from recorder.metrics.health import Health
from recorder.proxy.config import RecorderConfig
from recorder.proxy.finishing import Finishing
from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.making import (
    RESPONSE_HEADERS,
    RecordMaker,
    header_text,
    pending_of,
    pick_headers,
    query_of,
    wanted_headers,
)
from recorder.proxy.open_streams import OpenStreams
from recorder.proxy.state import Caller, Ending, FlowState, read_encoded_request
from recorder.proxy.walk import Walk
from recorder.proxy.ws_pings import PingWatch

log = logging.getLogger("recorder")

# A response.create above this size is read on a worker thread (as a request body is)
INLINE_PARSE_LIMIT = 16 * 1024
# A browser's Realtime client has no headers of its own: its key rides in a subprotocol
_KEY_PROTOCOL = "openai-insecure-api-key."
_CLOSE_WORDS = {1000: "normal closure", 1001: "going away", 1006: "no close frame"}
# A connection's messages wait for a batch of this many (or the walk, a ping, its end)
BATCH_MESSAGES = 64


@dataclass(slots=True)
class Exchange:
    """One response of a connection: its reference in the registry, its state."""

    ref: str
    state: FlowState


class Connection:
    """One WebSocket connection to a metered endpoint: its conversation, and what
    all of its responses share. The :class:`~recorder.core.websocket.Exchanges`
    of its conversation."""

    __slots__ = (
        "_hooks",
        "_seq",
        "_waiting",
        "caller",
        "conversation",
        "endpoint",
        "flow",
        "headers",
        "model",
        "peer",
        "query",
        "request_id",
    )

    def __init__(
        self, hooks: WebSockets, flow: http.HTTPFlow, endpoint: str, headers: dict[str, str]
    ) -> None:
        self._hooks = hooks
        self.flow = flow
        self.endpoint = endpoint
        req = flow.request
        self.headers = headers  # what the records read of its upgrade request
        self.query = query_of(req)
        self.caller: Caller | None = None  # who its responses are from, read once
        self.model = header_text(self.query.get("model") if self.query is not None else None)
        answer = pick_headers(flow.response.headers, RESPONSE_HEADERS) if flow.response else {}
        self.request_id = header_text(answer.get("x-request-id") or answer.get("request-id"))
        self.peer: Any = flow.client_conn.peername
        self._seq = itertools.count(1)
        # messages held for their batch, each with its arrival time
        self._waiting: list[tuple[websocket.WebSocketMessage, float]] = []
        conversation = conversation_for(endpoint, self)
        if conversation is None:
            raise ValueError(f"no conversation for {endpoint!r}")
        self.conversation: Conversation[Exchange] = conversation

    @property
    def waiting(self) -> int:
        """Messages held, not metered yet."""
        return len(self._waiting)

    def hold(self, message: websocket.WebSocketMessage, now: float) -> None:
        """A message crossed the connection at ``now``: metered with its batch."""
        waiting = self._waiting
        waiting.append((message, now))
        if len(waiting) == 1:
            self._hooks.walk_soon()  # the walk meters it if no batch fills first
        elif len(waiting) >= BATCH_MESSAGES:
            self.meter_waiting()

    def meter_waiting(self) -> None:
        """Meter the messages held, in order, each at its own time (never raises: a
        message that fails is counted, and the others are metered)."""
        waiting = self._waiting
        if not waiting:
            return
        self._waiting = []  # (a response ended meanwhile meters nothing twice)
        conversation = self.conversation
        for message, now in waiting:
            try:
                # the OpenAI protocols are JSON text: a binary message is no event
                if message.type is not Opcode.TEXT:
                    continue
                if message.from_client:
                    conversation.client(message.content, now)
                else:
                    conversation.server(message.content, now)
            except Exception:
                self._hooks.errors("websocket_message")

    # -- the conversation's Exchanges ------------------------------------------

    def begin(self, now: float, request: bytes | None) -> Exchange | None:
        return self._hooks.begin(self, now, request)

    def feed(self, exchange: Exchange, event: Event, now: float) -> None:
        exchange.state.meter.feed_event(event, now)

    def keepalive(self, exchange: Exchange, now: float) -> None:
        exchange.state.meter.feed_keepalive(now)

    def end(self, exchange: Exchange, now: float) -> None:
        self._hooks.end(exchange, Ending(now, "eof", None))

    def session(
        self, exchange: Exchange, model: str | None, audio_bytes_per_s: float | None
    ) -> None:
        interpreter = exchange.state.meter.interpreter
        if isinstance(interpreter, RealtimeInterpreter):
            interpreter.session(model, audio_bytes_per_s)

    def quick(self, exchange: Exchange) -> Quick:
        return exchange.state.meter.feed_read

    def ref(self) -> str:
        """The next response's reference in the registry of open streams."""
        return f"{self.flow.id}#{next(self._seq)}"


# a browser's key rides in a subprotocol: read with the upgrade request's other headers
_SUBPROTOCOL = b"sec-websocket-protocol"
# upgrade requests whose headers were read and whose connection has not begun yet
# (one that is refused never does): the oldest forgotten past this many
UPGRADES_KEPT = 1024


def _credentials(headers: dict[str, str]) -> dict[str, str]:
    """The upgrade request's headers as a record reads them: a key a browser sent as a
    subprotocol (``openai-insecure-api-key.<key>``) is its bearer token (so it is
    fingerprinted and masked as one); the subprotocol header itself is not kept."""
    protocols = headers.pop("sec-websocket-protocol", "")
    if "authorization" not in headers:
        for item in protocols.split(","):
            item = item.strip()
            if item.startswith(_KEY_PROTOCOL) and len(item) > len(_KEY_PROTOCOL):
                headers["authorization"] = "Bearer " + item[len(_KEY_PROTOCOL) :]
                break
    return headers


class WebSockets:
    """The WebSocket hooks of the :class:`~recorder.proxy.addon.Recorder` (which
    calls them), and the connections open now."""

    def __init__(
        self,
        config: RecorderConfig,
        streams: OpenStreams,
        maker: RecordMaker,
        finishing: Finishing,
        walk: Walk,
        health: Health,
        errors: InternalErrors,
        clock: Callable[[], float],
        readers: Callable[[], ThreadPoolExecutor],
    ) -> None:
        self.config = config
        self._streams = streams
        self._maker = maker
        self._finishing = finishing
        self._walk = walk
        self._health = health
        self.errors = errors
        self._clock = clock
        self._readers = readers
        self._connections: dict[str, Connection] = {}  # by flow id
        # what the records of a connection read of its upgrade request, read at its
        # requestheaders (before --strip-tag-headers takes the tags out), by flow id
        self._upgrades: dict[str, dict[str, str]] = {}
        self._wanted = wanted_headers(config.tag_headers) | {_SUBPROTOCOL}
        self._by_peer: dict[Any, Connection] = {}  # by client address, for pings
        self._pings = PingWatch(self._pinged, errors)
        streams.held_by(self.holding)

    def walk_soon(self) -> None:
        """A connection holds messages: make sure a walk comes to meter them."""
        self._walk.want()

    def holding(self) -> list[Connection]:
        """The connections holding messages now."""
        return [conn for conn in self._connections.values() if conn.waiting]

    def meter_waiting(self) -> None:
        """Meter every connection's held messages (shutdown)."""
        for conn in self.holding():
            conn.meter_waiting()

    def __len__(self) -> int:
        return len(self._connections)

    @property
    def upgrades_waiting(self) -> int:
        """Upgrade requests read whose connection has not begun (nor been refused)."""
        return len(self._upgrades)

    def connection(self, flow_id: str) -> Connection | None:
        """The open connection of a flow (None: not one we meter, or over)."""
        return self._connections.get(flow_id)

    # -- hooks -----------------------------------------------------------------

    def upgrade(self, flow: http.HTTPFlow) -> dict[str, str] | None:
        """``requestheaders`` of a request that is no HTTP exchange of ours: one that
        asks to upgrade to a WebSocket of a metered endpoint has its headers read
        now, as an HTTP exchange's are (returned, to strip the tag headers); None
        for any other request."""
        req = flow.request
        if (
            websocket_endpoint_for(req.path) is None
            or req.headers.get("upgrade", "").lower() != "websocket"
        ):
            return None
        headers = pick_headers(req.headers, self._wanted)
        upgrades = self._upgrades
        upgrades[flow.id] = headers
        if len(upgrades) > UPGRADES_KEPT:
            del upgrades[next(iter(upgrades))]
        return headers

    def forget(self, flow: http.HTTPFlow) -> None:
        """A flow's ``response`` or ``error``: an upgrade refused, or broken before
        its connection began, has no connection to read its headers. (mitmproxy
        calls ``response`` for an accepted upgrade too, its ``flow.websocket`` set,
        before ``websocket_start``.)"""
        if self._upgrades and (flow.websocket is None or flow.error is not None):
            self._upgrades.pop(flow.id, None)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        headers = self._upgrades.pop(flow.id, None)
        endpoint = websocket_endpoint_for(flow.request.path)
        if endpoint is None:
            return
        if headers is None:  # its request went by before this addon was loaded
            headers = pick_headers(flow.request.headers, self._wanted)
        conn = Connection(self, flow, endpoint, _credentials(dict(headers)))
        self._connections[flow.id] = conn
        self._by_peer[conn.peer] = conn
        self._pings.watch()

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        conn = self._connections.get(flow.id)
        if conn is None or flow.websocket is None or not flow.websocket.messages:
            return
        conn.hold(flow.websocket.messages[-1], self._clock())

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        conn = self._connections.pop(flow.id, None)
        if conn is None:
            return
        if self._by_peer.get(conn.peer) is conn:
            del self._by_peer[conn.peer]
        if not self._connections:
            self._pings.unwatch()
        conn.meter_waiting()
        ws = flow.websocket
        how, said = _closed(ws)
        self._close(conn, Ending(self._clock(), how, said))

    def shutdown(self) -> None:
        """The proxy stops: the connections are let go of (their open responses were
        ended with every other open exchange); what they hold is metered first."""
        self.meter_waiting()
        for conn in list(self._connections.values()):
            self._count(conn)
        self._connections.clear()
        self._by_peer.clear()
        self._pings.unwatch()

    # -- what the connections ask ------------------------------------------------

    def begin(self, conn: Connection, now: float, request: bytes | None) -> Exchange | None:
        """A response of ``conn`` begins: NOTED, then made (OPEN) at once."""
        flow, endpoint = conn.flow, conn.endpoint
        pending = pending_of(flow.request, conn.headers, conn.query)
        pending.caller = conn.caller  # read by the connection's first response
        # the message's own wall time (it may be metered a batch later)
        pending.wall_ms = time.time_ns() // 1_000_000 - round((self._clock() - now) * 1000)
        state = FlowState(endpoint, now, pending, self._maker)
        if self.config.keep_for_ui:
            state.flow = flow
        ref = conn.ref()
        self._streams.add(ref, state)
        if request is not None and endpoint == "responses":
            # the request's facts (model, limits) and its input counts, as a POST's
            if len(request) > INLINE_PARSE_LIMIT:
                state.reading = self._readers().submit(
                    read_encoded_request, request, None, endpoint, self.config.reading
                )
            else:
                pending.body = request
        state.make()
        if not state.made:
            return None
        conn.caller = pending.caller
        rec = state.record
        state.meter.headers(None, SWITCHING_PROTOCOLS)
        rec.transport = "websocket"
        rec.connection_id = flow.id
        rec.request_id = conn.request_id
        if endpoint == "realtime":
            rec.model = conn.model
            rec.max_output_tokens = _realtime_limit(request)
        self._walk.want()
        return Exchange(ref, state)

    def end(self, exchange: Exchange, ending: Ending) -> None:
        """A response is over: out of the registry, into the finishing pipeline
        (unless shutdown took it already)."""
        if self._streams.pop(exchange.ref) is None:
            return
        self._finishing.end(exchange.state, ending)

    def _close(self, conn: Connection, ending: Ending) -> None:
        for exchange in conn.conversation.close():
            try:
                self.end(exchange, ending)
            except Exception:
                self.errors("websocket_end")
        self._count(conn)

    def _count(self, conn: Connection) -> None:
        self._health.websocket_connections += 1
        if not conn.conversation.responses:
            self._health.websocket_connections_without_response += 1

    def _pinged(self, peer: Any) -> None:
        """mitmproxy relayed a ping or a pong of the client at ``peer``."""
        conn = self._by_peer.get(peer)
        if conn is not None:
            conn.meter_waiting()  # what came before it, first
            conn.conversation.keepalive(self._clock())


def _closed(ws: Any) -> tuple[str, str]:
    """Whose disconnect a connection's end is for a response still open, and the
    words for it (the record's ``transport_error``)."""
    by_client = bool(getattr(ws, "closed_by_client", False))
    code = getattr(ws, "close_code", None)
    reason = getattr(ws, "close_reason", "") or ""
    side = "client" if by_client else "server"
    what = _CLOSE_WORDS.get(code, "") if isinstance(code, int) else ""
    said = f"WebSocket closed by the {side}"
    if code is not None:
        said += f" ({code}{' ' + what if what else ''}{': ' + reason if reason else ''})"
    return ("client_disconnect" if by_client else "upstream_disconnect"), said


def _realtime_limit(request: bytes | None) -> int | None:
    """A Realtime ``response.create``'s ``response.max_output_tokens`` (an int)."""
    if request is None or len(request) > INLINE_PARSE_LIMIT or b"max_output_tokens" not in request:
        return None
    try:
        obj = orjson.loads(request)
    except orjson.JSONDecodeError:
        return None
    resp = obj.get("response") if isinstance(obj, dict) else None
    value = resp.get("max_output_tokens") if isinstance(resp, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return None
