"""A stall is one fact, told alike everywhere: whatever the timing of a stream,
what the live view said while it ran (each stall as it began, each as it ended)
is what the record says after, stall for stall, to the millisecond; the gauge
counted a stream as stalled exactly while the meter said it was."""

from __future__ import annotations

import io

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy.test import taddons, tflow

from recorder.proxy.live import Live
from tests.kit.flows import make, make_flow, sse_response, timers_of

STALL_AFTER = 5.0
ROLE = (
    b'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
)
OUTPUT = (
    b'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
)
PIECES = {"output": OUTPUT, "keepalive": b": keepalive\n\n", "role": ROLE}

# a stream: what comes, each after a delay (seconds, to the millisecond); how it ends
STEPS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=12_000).map(lambda ms: ms / 1000.0),
        st.sampled_from(["output", "output", "keepalive", "role"]),
    ),
    max_size=12,
)
ENDINGS = st.sampled_from(["done", "cut", "eof"])


class Gauge:
    """The stall gauge at each walk, with the walk's time on the test's clock."""

    def __init__(self, clock: object) -> None:
        self.clock = clock
        self.seen: list[tuple[float, int]] = []

    def __call__(self, stalled: dict[tuple[str, str], int], oldest: object) -> None:
        self.seen.append((self.clock.now, sum(stalled.values())))  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, ending=ENDINGS, tail=st.integers(0, 12_000).map(lambda ms: ms / 1000.0))
def test_the_live_view_says_what_the_record_says(
    steps: list[tuple[float, str]], ending: str, tail: float
) -> None:
    addon, sink, clock = make(stall_after=STALL_AFTER)
    timers = timers_of(addon)
    out = io.StringIO()
    gauge = Gauge(clock)
    t0 = clock.now
    live = Live(addon, out=out, log_format="json", on_tick=gauge, wall=lambda: 1.79e9)
    with taddons.context(addon, live):
        flow = make_flow()
        addon.requestheaders(flow)
        addon.request(flow)
        flow.response = sse_response()
        addon.responseheaders(flow)
        tap = flow.response.stream
        assert callable(tap)
        for delay, kind in steps:
            timers.advance(delay)  # the walk looks once a second meanwhile
            tap(PIECES[kind])
        timers.advance(tail)
        if ending == "done":
            tap(b"data: [DONE]\n\n")
        if ending == "cut":
            flow.error = tflow.terr("Client disconnected.")
            addon.error(flow)
        else:
            tap(b"")
            addon.response(flow)
    (rec,) = sink.records
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    recorded = [(g.start_ms, g.length_ms) for g in rec.gaps if g.kind == "stall"]
    assert rec.stalls == len(recorded)
    over = [
        (round(x["start_s"] * 1000, 3), round(x["stall_s"] * 1000, 3))
        for x in lines
        if x["type"] == "stall_over"
    ]
    assert over == recorded  # every stall the record counts, said once, alike
    began = {round(x["start_s"] * 1000, 3) for x in lines if x["type"] == "stall"}
    assert began <= {start for start, _ in recorded}  # never a stall the record lacks
    # at each walk the gauge said "stalled" exactly while a recorded stall was under
    # way (from its threshold to its end); walks within a millisecond of either edge
    # are not judged (the record keeps milliseconds)
    for at, stalled in gauge.seen:
        t = (at - t0) * 1000.0
        edges = [e for s, n in recorded for e in (s + STALL_AFTER * 1000.0, s + n)]
        if any(abs(t - e) < 1.0 for e in edges):
            continue
        under_way = any(s + STALL_AFTER * 1000.0 <= t < s + n for s, n in recorded)
        assert stalled == int(under_way), (t, recorded)
