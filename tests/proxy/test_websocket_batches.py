"""A WebSocket connection's messages are held and metered in batches
(recorder.proxy.websocket): wherever a batch is cut (its size, the walk, a live
view asking, a ping, the connection's end, shutdown), every record says what it
says when each message is metered as it comes."""

from __future__ import annotations

import dataclasses
import logging
import random
from datetime import datetime
from typing import Any

import pytest

from recorder.core.record import StreamRecord
from recorder.proxy import websocket as ws_module
from recorder.proxy.addon import Recorder
from recorder.proxy.walk import WALK_S
from recorder.proxy.ws_pings import LOGGER
from tests.kit.flows import Clock, make, timers_of
from tests.kit.websockets import (
    close,
    create,
    metered,
    realtime_session,
    realtime_turn,
    responses_turn,
    send,
    ws_flow,
)

PEER = ("127.0.0.1", 52345)
# what differs between two runs of the same traffic whatever the batches: the
# ids (the record's, the flow's), and the wall-clock start (the test's clock is not the wall's)
_RUN_FIELDS = {"id", "started_at", "connection_id"}


def _ping(clock: Clock, step: float) -> None:
    clock.now += step
    logging.getLogger(LOGGER).info(
        "Received WebSocket ping from client (payload: b'')", extra={"client": PEER}
    )


def _traffic(path: str, seed: int) -> list[tuple[str, Any, float]]:
    """One connection's life: (what, message or None, seconds before it), with
    silences, pings between and inside responses, and a cut in the last one."""
    rng = random.Random(seed)
    out: list[tuple[str, Any, float]] = []
    if "realtime" in path:
        out.append(("server", realtime_session(), 0.01))
    for n in range(6):
        text = [rng.choice(["a", "bc", "def", " "]) for _ in range(rng.randint(1, 9))]
        if "realtime" in path:
            out.append(("client", {"type": "response.create"}, 0.2))
            events = realtime_turn(f"resp_{seed}_{n}", text, audio_chunks=2, audio_bytes=96)
        else:
            out.append(("client", create(), 0.2))
            events = responses_turn(f"resp_{seed}_{n}", text)
        if n == 5:
            events = events[: len(events) // 2]  # the connection drops mid-response
        for event in events:
            if rng.random() < 0.15:
                out.append(("ping", None, rng.choice([0.05, 1.5])))
            out.append(("server", event, rng.choice([0.01, 0.02, 0.3, 6.0])))
    return out


def _run(
    path: str, seed: int, *, batch: int, looks: float, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[StreamRecord], Recorder]:
    """The traffic through the hooks, messages held up to ``batch`` at a time and
    metered early at random moments (``looks``: the chance after each message)."""
    monkeypatch.setattr(ws_module, "BATCH_MESSAGES", batch)
    addon, sink, clock = make(stall_after=5.0)
    flow = ws_flow(path, peer=PEER)
    addon.websocket_start(flow)
    rng = random.Random(seed * 7 + batch)
    for what, message, step in _traffic(path, seed):
        if what == "ping":
            _ping(clock, step)
        else:
            send(addon, flow, message, clock, client=what == "client", step=step)
        if rng.random() < looks:
            metered(addon)
    close(addon, flow, by_client=False, code=1006)
    return list(sink.records), addon


def _facts(rec: StreamRecord) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(rec).items() if k not in _RUN_FIELDS}


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/realtime?model=gpt-realtime"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_records_are_the_same_wherever_the_batches_are_cut(
    path: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    each, _ = _run(path, seed, batch=1, looks=0.0, monkeypatch=monkeypatch)
    assert len(each) == 6
    assert [r.outcome for r in each][-1] == "upstream_disconnect"
    assert sum(r.keepalives for r in each) > 0 and any(r.stalls for r in each)
    for batch, looks in ((2, 0.0), (5, 0.3), (64, 0.0), (64, 0.05)):
        got, addon = _run(path, seed, batch=batch, looks=looks, monkeypatch=monkeypatch)
        assert [_facts(r) for r in got] == [_facts(r) for r in each], (batch, looks)
        assert addon.health.internal_errors == 0


def test_a_response_create_held_for_its_batch_starts_the_record_at_its_own_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """started_at is the message's wall time, not the batch's: two responses begun
    2.5 s apart and metered together start 2.5 s apart."""
    monkeypatch.setattr(ws_module, "BATCH_MESSAGES", 64)
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    for event in responses_turn("resp_a", ["x"]):
        send(addon, flow, event, clock)
    send(addon, flow, create(), clock, client=True, step=2.5)
    for event in responses_turn("resp_b", ["y"]):
        send(addon, flow, event, clock)
    assert addon.open_flows == 0 and not sink.records  # all of it held
    close(addon, flow, by_client=True)
    first, second = sink.records

    def at(rec: StreamRecord) -> datetime:
        assert rec.started_at is not None
        return datetime.fromisoformat(rec.started_at.replace("Z", "+00:00"))

    gap = (at(second) - at(first)).total_seconds()
    steps = 2.5 + 0.01 * len(responses_turn("resp_a", ["x"]))
    assert gap == pytest.approx(steps, abs=0.002)


def test_held_messages_are_metered_by_the_walk() -> None:
    """Fewer than a batch: the next walk meters them (the live view sees the open
    response, its events as of their own times)."""
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    events = responses_turn("resp_w", ["a", "b", "c"])  # created, 3 deltas, completed
    for event in events[:3]:
        send(addon, flow, event, clock)
    assert addon.open_flows == 0  # the response.create is held too
    timers_of(addon).advance(WALK_S)
    assert timers_of(addon).pending == 1  # the next walk, one only
    (view,) = addon.streams.views()
    assert view.events == 3
    for event in events[3:]:
        send(addon, flow, event, clock)
    timers_of(addon).advance(WALK_S)
    assert addon.open_flows == 0
    (rec,) = sink.records
    assert rec.outcome == "completed" and rec.events == len(events)


def test_shutdown_meters_what_is_held_before_it_cuts_what_is_open() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    for event in responses_turn("resp_1", ["done"]):
        send(addon, flow, event, clock)
    send(addon, flow, create(), clock, client=True)
    send(addon, flow, responses_turn("resp_2", ["a"])[0], clock)
    addon.done()
    close(addon, flow, by_client=False)
    first, second = sink.records
    assert first.outcome == "completed"
    assert second.outcome == "client_disconnect" and second.transport_error == "proxy shut down"
    assert second.events == 1


def test_a_message_that_fails_is_counted_and_the_others_are_metered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    conn = addon.websockets.connection(flow.id)
    assert conn is not None
    server = conn.conversation.server
    poison = b'{"type":"poison"}'

    def failing(data: bytes, now: float) -> None:
        if data == poison:
            raise RuntimeError("boom")
        server(data, now)

    monkeypatch.setattr(conn.conversation, "server", failing)
    send(addon, flow, create(), clock, client=True)
    events = responses_turn("resp_f", ["a", "b"])
    for n, event in enumerate(events):
        send(addon, flow, event, clock)
        if n == 2:
            send(addon, flow, poison, clock)
    close(addon, flow, by_client=True)
    (rec,) = sink.records
    assert rec.outcome == "completed" and rec.events == len(events)
    assert addon.health.internal_errors == 1


def test_the_walk_meters_held_messages_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many connections holding messages: the walk meters them at most about
    WALK_SLICE messages per loop callback (a short block each), and all of them
    before it tells its watchers; one walk is coming after it, no more."""
    from recorder.proxy import walk as walk_module

    monkeypatch.setattr(walk_module, "WALK_SLICE", 40)
    addon, sink, clock = make()
    flows = [ws_flow("/v1/responses", peer=("127.0.0.1", 40000 + n)) for n in range(12)]
    for flow in flows:
        addon.websocket_start(flow)
    for n, flow in enumerate(flows):
        send(addon, flow, create(), clock, client=True, step=0.0)
        for event in responses_turn(f"resp_{n}", ["a"] * 10)[:8]:
            send(addon, flow, event, clock, step=0.0)
    held = sum(c.waiting for c in addon.streams.held())
    assert held == 12 * 9 and addon.open_flows == 0
    seen: list[int] = []
    addon.watch(lambda views, now: seen.append(len(views)))
    timers = timers_of(addon)
    clock.now += WALK_S
    slices = []
    while timers.next_due is not None and timers.next_due <= clock.now:
        timers.step()
        slices.append(held - sum(c.waiting for c in addon.streams.held()))
        held -= slices[-1]
    assert held == 0 and addon.open_flows == 12
    assert len(slices) >= 3 and max(slices) <= 40 + 9  # a slice, and the connection at its edge
    assert seen == [12]  # told once, after all of it
    assert timers.pending == 1  # the next walk
    assert not sink.records and addon.health.internal_errors == 0
