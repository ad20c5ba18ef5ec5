"""An exchange's life as one state machine (recorder.proxy.lifecycle): the table is
the one the architecture draws; any order of hooks, delays and faults mitmproxy can
produce moves every exchange through legal phases only, to exactly one record; a
wrong move is an internal error, counted, and never reaches the traffic."""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from recorder.proxy import lifecycle
from recorder.proxy.addon import INLINE_PARSE_LIMIT, Recorder
from recorder.proxy.lifecycle import (
    COMPLETED,
    DROPPED,
    MOVES,
    NOTED,
    IllegalMove,
    Phase,
    diagram,
    move,
)
from recorder.proxy.state import FlowState
from tests.kit.flows import CHAT_SSE, make, make_flow, pieces_of, sse_response, timers_of

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"


def test_the_architecture_draws_the_table_the_code_checks() -> None:
    text = ARCHITECTURE.read_text()
    drawn = re.search(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", text, re.S)
    assert drawn is not None, "docs/ARCHITECTURE.md has no state diagram"
    assert drawn.group(1) == diagram()


def test_every_phase_is_reached_and_every_life_ends() -> None:
    reached, todo = {NOTED}, [NOTED]
    while todo:
        for target in MOVES[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert reached == set(Phase)
    finals = {p for p, targets in MOVES.items() if not targets}
    assert finals == {COMPLETED, DROPPED}
    for phase in Phase:  # from anywhere, an end can be reached
        seen, todo = {phase}, [phase]
        while todo:
            for target in MOVES[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        assert seen & finals


@pytest.mark.parametrize("source", list(Phase))
@pytest.mark.parametrize("target", list(Phase))
def test_move_allows_exactly_the_table(source: Phase, target: Phase) -> None:
    if target in MOVES[source]:
        assert move(source, target) is target
    else:
        with pytest.raises(IllegalMove, match=f"{source.name} to {target.name}"):
            move(source, target)


async def test_a_wrong_move_is_counted_and_the_traffic_never_notices() -> None:
    """A bug that hands the recorder an exchange it has finished already (here: the
    registry given back a completed exchange) is refused by the table: counted as
    an internal error, no second record, and the response passes as ever."""
    addon, sink, _clock = make()
    with taddons.context(addon):
        flow = make_flow()
        addon.requestheaders(flow)
        addon.request(flow)
        state = addon.streams.get(flow.id)
        assert state is not None
        flow.response = sse_response()
        addon.responseheaders(flow)
        flow.response.stream(CHAT_SSE)  # type: ignore[operator]
        flow.response.stream(b"")  # type: ignore[operator]
        addon.response(flow)
        assert state.phase is COMPLETED and len(sink.records) == 1
        addon.streams.add(flow.id, state)  # the bug
        addon.response(flow)
        addon.error(flow)
    assert len(sink.records) == 1
    assert addon.health.internal_errors == 1  # response: COMPLETED -> ENDED refused
    assert state.phase is COMPLETED


# -- any order of what mitmproxy and time can do ---------------------------------------

SMALL = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
LARGE = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [{"role": "user", "content": "x" * (INLINE_PARSE_LIMIT + 10)}],
}

# what can happen to one exchange, in order; each step may be followed by time passing
STEPS = st.lists(
    st.sampled_from(
        [
            "body",  # the request body arrives (small)
            "large_body",  # a body read on a worker thread
            "sse",  # response headers of an event stream
            "json",  # response headers and body of a JSON answer
            "piece",  # a piece of the stream
            "end",  # the response completes
            "cut",  # the connection breaks
            "time",  # the clock moves and due callbacks run
        ]
    ),
    max_size=8,
)


@contextlib.contextmanager
def watching() -> Iterator[dict[FlowState, list[Phase]]]:
    """Every move of every exchange while it lasts, in order, by exchange."""
    moves: dict[FlowState, list[Phase]] = {}
    real = FlowState.move

    def watched(state: FlowState, to: Phase) -> None:
        moves.setdefault(state, [NOTED]).append(to)
        real(state, to)

    FlowState.move = watched  # type: ignore[method-assign]
    try:
        yield moves
    finally:
        FlowState.move = real  # type: ignore[method-assign]


def _drive(addon: Recorder, flow: http.HTTPFlow, steps: list[str], clock: object) -> None:
    timers = timers_of(addon)
    addon.requestheaders(flow)
    responded = ended = asked = False
    for step in steps:
        if ended:
            break
        if step in ("body", "large_body") and not (responded or asked):  # (once a flow)
            asked = True
            flow.request.content = orjson.dumps(SMALL if step == "body" else LARGE)
            addon.request(flow)
        elif step == "sse" and not responded:
            flow.response = sse_response()
            addon.responseheaders(flow)
            responded = True
        elif step == "json" and not responded:
            flow.response = tutils.tresp(
                status_code=200,
                headers=http.Headers([(b"content-type", b"application/json")]),
                content=b'{"id":"c","object":"chat.completion","choices":[],'
                b'"usage":{"prompt_tokens":3,"completion_tokens":2}}',
            )
            addon.responseheaders(flow)
            responded = True
        elif step == "piece" and responded and callable(flow.response.stream):  # type: ignore[union-attr]
            for piece in pieces_of(CHAT_SSE, 211)[:3]:
                assert flow.response.stream(piece) is piece  # type: ignore[union-attr,operator]
        elif step == "end" and responded:
            if callable(flow.response.stream):  # type: ignore[union-attr]
                flow.response.stream(b"")  # type: ignore[union-attr,operator]
            addon.response(flow)
            ended = True
        elif step == "cut":
            flow.error = tflow.terr("Client disconnected.")
            addon.error(flow)
            ended = True
        elif step == "time":
            timers.advance(0.3)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    lives=st.lists(STEPS, min_size=1, max_size=6),
    start_delay=st.sampled_from([0.0, 0.25]),
    finish_delay=st.sampled_from([0.0, 0.25]),
    shutdown=st.sampled_from(["done", "close", "time"]),
)
def test_any_order_of_hooks_moves_every_exchange_legally_to_one_record(
    lives: list[list[str]],
    start_delay: float,
    finish_delay: float,
    shutdown: str,
) -> None:
    addon, sink, clock = make(start_delay=start_delay, finish_delay=finish_delay)
    timers = timers_of(addon)
    with watching() as moves, taddons.context(addon):
        flows = [make_flow(body={}) for _ in lives]
        for flow, steps in zip(flows, lives, strict=True):
            _drive(addon, flow, steps, clock)
        # while it runs: the in-flight count is the registry's, nothing is lost
        assert addon.health.in_flight == addon.open_flows
        if shutdown == "time":  # the flows that are still open end; time passes
            for flow in flows:
                if addon.streams.get(flow.id) is not None:
                    flow.error = tflow.terr("Client disconnected.")
                    addon.error(flow)
            for _ in range(1000):  # bounded: a body read on a thread takes real time
                timers.advance(0.5)
                if addon.finishing.waiting == 0:
                    break
                time.sleep(0.005)
        elif shutdown == "done":
            addon.done()
        else:
            addon.close()  # the runner's last resort, without done
            addon.done()  # then mitmproxy's done (the open exchanges end)
    # every exchange: one record, whatever happened, and every life legal
    assert addon.health.internal_errors == 0
    assert len(sink.records) == len(flows)
    assert len({r.id for r in sink.records}) == len(flows)
    assert addon.open_flows == 0 and addon.health.in_flight == 0
    assert addon.finishing.waiting == 0
    assert len(moves) == len(flows)
    for path in moves.values():
        for source, target in itertools.pairwise(path):
            assert target in lifecycle.MOVES[source], path
        assert path[-1] is COMPLETED
