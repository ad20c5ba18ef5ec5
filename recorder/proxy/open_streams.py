"""The exchanges under way, and the read-only view of them that the live view,
``GET /streams`` and mitmweb's view are given.

The registry holds an exchange from ``requestheaders`` until it ends (its phase
NOTED or OPEN, ``recorder.proxy.lifecycle``) and keeps the in-flight count with
it. A :class:`StreamView` answers what a watcher asks of one open exchange (its
record's names, its timings so far, its output so far) without handing out the
meter or the tap: only the recorder feeds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from mitmproxy import http

from recorder.core.protocols.observations import Observations
from recorder.core.record import Gap
from recorder.metrics.health import Health
from recorder.proxy.state import FlowState


class Held(Protocol):
    """Something that holds work for the meter outside an exchange's tap (a
    WebSocket connection's messages)."""

    @property
    def waiting(self) -> int:
        """How much waits (messages)."""
        ...

    def meter_waiting(self) -> None:
        """Meter what waits, in order (never raises)."""
        ...


class StreamView:
    """One open exchange, read-only, as of now."""

    __slots__ = ("_state",)

    def __init__(self, state: FlowState) -> None:
        self._state = state

    def catch_up(self) -> StreamView:
        """Have the pieces its tap keeps waiting metered now (at their own arrival
        times), so that what the view says is as of now; the view itself."""
        self._state.catch_up()
        return self

    # the record's names (made on demand: a view needs them)
    @property
    def id(self) -> str | None:
        return self._state.record.id

    @property
    def endpoint(self) -> str | None:
        return self._state.record.endpoint

    @property
    def provider(self) -> str | None:
        return self._state.record.provider

    @property
    def model(self) -> str | None:
        return self._state.record.model

    @property
    def api_key_id(self) -> str | None:
        return self._state.record.api_key_id

    @property
    def http_status(self) -> int | None:
        return self._state.record.http_status

    @property
    def streamed(self) -> bool:
        """Whether its response is (or may yet be) an event stream."""
        return self._state.record.streamed is not False

    @property
    def transport(self) -> str:
        """How its response comes: ``websocket`` for one response of a WebSocket
        connection (the record's, once the exchange ends)."""
        return self._state.record.transport

    @property
    def streaming(self) -> bool:
        """Whether its body is being tapped now."""
        return self._state.tap is not None

    @property
    def t0(self) -> float:
        """When its request came (the recorder's clock)."""
        return self._state.t0

    @property
    def flow(self) -> http.HTTPFlow | None:
        """The mitmproxy flow, kept only under mitmweb."""
        return self._state.flow

    # what the meter knows so far
    @property
    def first_output_at(self) -> float | None:
        return self._state.meter.first_output_at

    @property
    def last_output_at(self) -> float | None:
        return self._state.meter.last_output_at

    @property
    def silent_since(self) -> float | None:
        """Since when no output came (the last output, or the request start)."""
        return self._state.meter.silent_since()

    def stalled_since(self, now: float) -> float | None:
        """When the stall under way at ``now`` began, or None: the meter's one
        definition of a stall (``recorder.core.rhythm``)."""
        return self._state.meter.stalled_since(now)

    @property
    def stall_gaps(self) -> list[Gap]:
        """The stalls over so far, as the record will hold them."""
        return self._state.meter.stall_gaps

    @property
    def keepalives(self) -> int:
        return self._state.meter.keepalives

    @property
    def events(self) -> int:
        return self._state.meter.events

    @property
    def observations(self) -> Observations:
        """The facts of its events so far (output counts, usage if reported)."""
        return self._state.meter.interpreter.obs


class OpenStreams:
    """The exchanges under way, by reference (a flow's id), in the order they came."""

    def __init__(self, health: Health) -> None:
        self._health = health
        self._by_ref: dict[str, FlowState] = {}
        self._held: list[Callable[[], Sequence[Held]]] = []

    def held_by(self, holders: Callable[[], Sequence[Held]]) -> None:
        """``holders`` gives what holds work outside the exchanges' taps now: the
        WebSocket connections with messages waiting, whose metering may begin and
        end exchanges. It must not raise."""
        self._held.append(holders)

    def held(self) -> list[Held]:
        """What holds work outside the taps now (the walk meters it in slices)."""
        return [holder for holders in self._held for holder in holders()]

    def meter_held(self) -> None:
        """Meter what waits outside the taps, at its own arrival times, at once (a
        live view on the loop, the walk's tell: little waits by then)."""
        for holder in self.held():
            holder.meter_waiting()

    def __len__(self) -> int:
        return len(self._by_ref)

    def __iter__(self) -> Iterator[FlowState]:
        return iter(list(self._by_ref.values()))

    def add(self, ref: str, state: FlowState) -> None:
        self._by_ref[ref] = state
        self._health.in_flight += 1

    def get(self, ref: str) -> FlowState | None:
        return self._by_ref.get(ref)

    def pop(self, ref: str) -> FlowState | None:
        """Take the exchange out: it ended."""
        state = self._by_ref.pop(ref, None)
        if state is not None:
            self._health.in_flight -= 1
        return state

    def discard(self, state: FlowState) -> None:
        """Let go of ``state`` wherever it is held (its record could not be made)."""
        for ref, held in list(self._by_ref.items()):
            if held is state:
                self.pop(ref)

    def take_all(self) -> list[FlowState]:
        """Every exchange still under way, taken out (shutdown)."""
        states = list(self._by_ref.values())
        self._by_ref.clear()
        self._health.in_flight -= len(states)
        return states

    def views(self, *, catch_up: bool = False) -> list[StreamView]:
        """The open exchanges whose records exist or can be made, as of now (as of
        the last walk for pieces and messages still waiting for their batch, unless
        ``catch_up`` meters them first, at their own arrival times)."""
        out = []
        if catch_up:
            self.meter_held()
        for state in list(self._by_ref.values()):
            if catch_up:
                state.catch_up()
            state.make()
            if state.made:
                out.append(StreamView(state))
        return out
