"""Long streams on simulated time: the meter's memory stays flat and the record is right.

The proxy-level versions (a million events and an hour of keepalives through a
running recorder) are benchmark modes: ``bench/bench_load.py --long``.
"""

from __future__ import annotations

import tracemalloc

import orjson

from recorder.core.meter import MAX_INTERVALS, StreamMeter

ROLE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
)
FINISH = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
)
DONE = b"data: [DONE]\n\n"


def delta(i: int) -> bytes:
    # words of varying length, so no two neighbours are the same bytes
    text = " w" + "x" * (i % 7)
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def usage(completion: int) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": completion,
            "total_tokens": 9 + completion,
        },
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def test_a_million_events_in_flat_memory() -> None:
    n = 1_000_000
    pieces = [delta(i) for i in range(7)]  # the seven shapes, reused: no test-side growth
    chars = sum(len(" w" + "x" * (i % 7)) for i in range(n))
    meter = StreamMeter("chat.completions", start=0.0)
    meter.headers(0.1, 200)
    meter.feed(ROLE, 0.2)
    tracemalloc.start()
    try:
        now = 0.2
        at_tenth = 0
        for i in range(n):
            now += 0.001
            meter.feed(pieces[i % 7], now)
            if i == n // 10:
                at_tenth = tracemalloc.get_traced_memory()[0]
        at_end, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    meter.feed(FINISH + usage(n) + DONE, now + 0.001)
    rec = meter.finish(now + 0.002, ending="eof")
    # The interval array fills up to its cap (100,000 doubles, 0.8 MB) in the first
    # tenth; after that nothing grows. A leak of even 8 bytes per event would be 7 MB.
    assert len(meter.output_intervals) == MAX_INTERVALS
    assert at_end - at_tenth < 256 * 1024, (at_tenth, at_end)
    assert peak - at_tenth < 1024 * 1024, (at_tenth, peak)
    assert rec.outcome == "completed"
    assert rec.events == n + 4
    assert rec.output_chars == chars
    assert rec.output_tokens == n and rec.output_source == "reported"
    assert rec.ttft_ms == 201.0  # the first delta (the role chunk carries no text)
    assert rec.stalls == 0
    assert rec.parse_issues == 0


def test_an_hour_of_keepalives_before_the_first_token() -> None:
    meter = StreamMeter("chat.completions", start=0.0, stall_after=30.0)
    meter.headers(0.5, 200)
    meter.feed(b": keepalive\n\n", 1.0)  # some gateways ping before any event
    tracemalloc.start()
    try:
        at_start = tracemalloc.get_traced_memory()[0]
        for s in range(2, 3601):  # one a second for an hour of simulated time
            meter.feed(b": keepalive\n\n", float(s))
        grown = tracemalloc.get_traced_memory()[0] - at_start
    finally:
        tracemalloc.stop()
    meter.feed(ROLE, 3600.5)
    meter.feed(delta(0) + delta(1), 3601.0)
    meter.feed(FINISH + usage(2) + DONE, 3601.2)
    rec = meter.finish(3601.3, ending="eof")
    assert rec.keepalives == 3600
    assert rec.max_keepalive_gap_ms == 1000.0
    assert rec.ttft_ms == 3601000.0
    assert rec.first_event_ms == 3600500.0
    assert rec.outcome == "completed" and rec.output_tokens == 2
    assert len(meter.keepalive_intervals) == 3599
    # 3,599 intervals as doubles (28 kB) and nothing per comment beyond them
    assert grown < 64 * 1024, grown


def test_an_hour_of_keepalives_mid_stream_is_one_stall() -> None:
    """A model that goes quiet for an hour, pinging: one stall of the whole hour."""
    meter = StreamMeter("chat.completions", start=0.0, stall_after=30.0)
    meter.headers(0.1, 200)
    meter.feed(ROLE + delta(0), 0.2)
    for s in range(1, 3601):
        meter.feed(b": keepalive\n\n", 0.2 + s)
    meter.feed(delta(1), 3600.7)
    meter.feed(FINISH + usage(2) + DONE, 3600.8)
    rec = meter.finish(3600.9, ending="eof")
    assert rec.keepalives == 3600
    assert rec.stalls == 1
    assert rec.max_output_gap_ms == 3600500.0
    assert rec.outcome == "completed"
