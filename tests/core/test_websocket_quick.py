"""A WebSocket message read whole by the open response's own reader
(``Conversation`` with ``Exchanges.quick``, ``StreamMeter.feed_read``) is metered
exactly as when it is routed and fed as an event: the same records, message for
message, whatever the traffic (real Responses captures, Realtime audio and
transcripts, lanes, responses side by side, refusals, a template learned anew)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from recorder.core.framing import Event
from recorder.core.meter import SWITCHING_PROTOCOLS, StreamMeter
from recorder.core.protocols.realtime import RealtimeInterpreter
from recorder.core.record import StreamRecord
from recorder.core.websocket import conversation_for
from tests.kit.websockets import (
    create,
    realtime_session,
    realtime_turn,
    responses_captures,
    responses_turn,
)


class Meters:
    """Exchanges that meter each response (``quick``: with its own reader)."""

    def __init__(self, endpoint: str, *, quick: bool) -> None:
        self.endpoint = endpoint
        self.use_quick = quick
        self.done: list[StreamRecord] = []
        self.quick_reads = 0

    def begin(self, now: float, request: bytes | None) -> StreamMeter:
        meter = StreamMeter(self.endpoint, start=now)
        meter.headers(None, SWITCHING_PROTOCOLS)
        return meter

    def feed(self, exchange: StreamMeter, event: Event, now: float) -> None:
        exchange.feed_event(event, now)

    def keepalive(self, exchange: StreamMeter, now: float) -> None:
        exchange.feed_keepalive(now)

    def end(self, exchange: StreamMeter, now: float) -> None:
        self.done.append(exchange.finish(now))

    def session(self, exchange: StreamMeter, model: str | None, rate: float | None) -> None:
        if isinstance(exchange.interpreter, RealtimeInterpreter):
            exchange.interpreter.session(model, rate)

    def quick(self, exchange: StreamMeter) -> Callable[[bytes, float], bool] | None:
        if not self.use_quick:
            return None

        def read(data: bytes, now: float) -> bool:
            done = exchange.feed_read(data, now)
            self.quick_reads += done
            return done

        return read


Line = tuple[str, bytes | None]  # ("client" | "server" | "ping", message)


def _bytes(obj: dict[str, Any] | bytes) -> bytes:
    return obj if isinstance(obj, bytes) else orjson.dumps(obj)


def _run(endpoint: str, lines: list[Line], *, quick: bool) -> tuple[list[dict[str, Any]], int]:
    meters = Meters(endpoint, quick=quick)
    conversation = conversation_for(endpoint, meters)
    assert conversation is not None
    rng = random.Random(5)
    now = 0.0
    for way, data in lines:
        now += rng.choice([0.01, 0.02, 0.5, 7.0])
        if way == "ping":
            conversation.keepalive(now)
        elif way == "client":
            assert data is not None
            conversation.client(data, now)
        else:
            assert data is not None
            conversation.server(data, now)
    for meter in conversation.close():
        meters.done.append(meter.finish(now + 1.0, ending="upstream_disconnect"))
    return [r.to_dict(with_gaps=True) for r in meters.done], meters.quick_reads


def _both(endpoint: str, lines: list[Line]) -> int:
    slow, none = _run(endpoint, lines, quick=False)
    fast, reads = _run(endpoint, lines, quick=True)
    assert none == 0
    assert fast == slow
    return reads


@pytest.mark.parametrize("path", list(responses_captures()), ids=lambda p: p.name)
def test_real_responses_streams_one_after_another(path: Any) -> None:
    events = [line for line in path.read_bytes().splitlines() if line.strip()]
    lines: list[Line] = []
    for _ in range(3):
        lines.append(("client", _bytes(create())))
        lines += [("server", e) for e in events]
    _both("responses", lines)


def test_responses_with_pings_refusals_a_second_lane_and_a_cut() -> None:
    rng = random.Random(11)
    lines: list[Line] = []
    for n in range(8):
        lane = {"stream_id": "b"} if n % 3 == 2 else {}
        lines.append(("client", _bytes(create(**lane))))
        if n == 4:  # refused before it was created
            lines.append(("server", _bytes({"type": "error", "error": {"message": "no"}})))
            continue
        text = [rng.choice(["a", "bc", " "]) for _ in range(rng.randint(1, 12))]
        events = [_bytes(e) for e in responses_turn(f"resp_{n}", text, **lane)]
        if n == 7:
            events = events[:-3]  # cut
        for e in events:
            if rng.random() < 0.2:
                lines.append(("ping", None))
            lines.append(("server", e))
    assert _both("responses", lines) > 0


def test_responses_two_lanes_interleaved_are_never_read_quick_across_lanes() -> None:
    a = [_bytes(e) for e in responses_turn("resp_a", ["x", "y", "z", "w"])]
    b = [_bytes(e) for e in responses_turn("resp_b", ["1", "2", "3"], stream_id="b")]
    lines: list[Line] = [("client", _bytes(create())), ("client", _bytes(create(stream_id="b")))]
    for ea, eb in zip(a, b, strict=False):
        lines += [("server", ea), ("server", eb)]
    lines += [("server", e) for e in a[len(b) :]]
    _both("responses", lines)


def test_realtime_audio_transcripts_and_responses_side_by_side() -> None:
    rng = random.Random(3)
    lines: list[Line] = [("server", _bytes(realtime_session()))]
    for n in range(6):
        lines.append(("client", _bytes({"type": "response.create"})))
        text = [rng.choice(["hi", " there", "!"]) for _ in range(rng.randint(1, 8))]
        turn = realtime_turn(f"resp_{n}", text, audio_chunks=3, audio_bytes=960)
        events = [_bytes(e) for e in turn]
        if n == 3:  # an out-of-band response alongside this one
            lines.append(("client", _bytes({"type": "response.create"})))
            other = [_bytes(e) for e in realtime_turn("resp_oob", ["side"], audio_chunks=2)]
            for ea, eb in zip(events, other, strict=False):
                lines += [("server", ea), ("server", eb)]
            lines += [("server", e) for e in events[len(other) :]]
            continue
        for e in events:
            if rng.random() < 0.1:
                lines.append(("ping", None))
            lines.append(("server", e))
    assert _both("realtime", lines) > 0


def test_a_delta_unlike_the_last_is_routed_and_read_as_before() -> None:
    """Deltas whose text has escapes and quotes among plain ones: each read quick
    only when the learned reader can read it whole."""
    events = [_bytes(e) for e in responses_turn("resp_t", ["a", "b", 'say "hi"\\n', "c"])]
    lines: list[Line] = [("client", _bytes(create()))] + [("server", e) for e in events]
    assert _both("responses", lines) > 0
