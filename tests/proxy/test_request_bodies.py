"""Request bodies are read for their facts, never their text, at bounded cost: a
body mitmproxy streams upstream (past ``stream_large_bodies``) is kept on the way
and read once whole; a compressed body is decoded on a worker thread, bounded (a
request bomb is said on the record, not decoded to its end)."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import orjson
from mitmproxy.test import taddons

from recorder.proxy.tap import REQUEST_MAX_BYTES, RequestKeeper
from tests.kit.flows import (
    CHAT_SSE,
    make,
    make_flow,
    pieces_of,
    sse_response,
    stream_through,
    timers_of,
)


async def _finish(addon: object, flow: object, clock: object, sink: object) -> None:
    flow.response = sse_response()  # type: ignore[attr-defined]
    addon.responseheaders(flow)  # type: ignore[attr-defined]
    stream_through(flow, pieces_of(CHAT_SSE, 500), clock)  # type: ignore[arg-type]
    addon.response(flow)  # type: ignore[attr-defined]
    for _ in range(500):  # the worker thread's read: bounded
        timers_of(addon).run_due()  # type: ignore[arg-type]
        if sink.records:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.01)


async def test_a_compressed_request_is_read_for_its_facts() -> None:
    addon, sink, clock = make()
    doc = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with taddons.context(addon):
        flow = make_flow(body=doc)
        flow.request.headers["content-encoding"] = "gzip"
        flow.request.raw_content = gzip.compress(orjson.dumps(doc))
        addon.requestheaders(flow)
        addon.request(flow)
        await _finish(addon, flow, clock, sink)
    (rec,) = sink.records
    assert rec.model == "gpt-4o" and rec.recorder_error is None
    assert addon.health.internal_errors == 0


async def test_a_request_bomb_is_said_on_the_record_not_decoded_to_its_end() -> None:
    addon, sink, clock = make()
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = b'{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"'
    parts = [c.compress(head)]
    parts += [c.compress(b"a" * (1 << 20)) for _ in range(REQUEST_MAX_BYTES // (1 << 20) + 16)]
    parts += [c.compress(b'"}]}'), c.flush()]
    bomb = b"".join(parts)
    assert len(bomb) < 1 << 20
    with taddons.context(addon):
        flow = make_flow()
        flow.request.headers["content-encoding"] = "gzip"
        flow.request.raw_content = bomb
        addon.requestheaders(flow)
        addon.request(flow)
        await _finish(addon, flow, clock, sink)
    (rec,) = sink.records
    assert rec.recorder_error == "request not read: the request body decodes to more than 64 MiB"
    assert rec.model is None and addon.health.internal_errors == 0
    assert rec.outcome == "completed"  # the stream itself is metered as ever


async def test_a_streamed_request_is_kept_on_the_way_and_read_once_whole() -> None:
    addon, sink, clock = make()
    doc = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "x" * 50_000}],
    }
    raw = orjson.dumps(doc)
    with taddons.context(addon):
        flow = make_flow(body=doc)
        flow.request.stream = True  # as mitmproxy's stream_large_bodies sets it
        addon.requestheaders(flow)
        keeper = flow.request.stream
        assert isinstance(keeper, RequestKeeper)
        for piece in pieces_of(raw, 4096):  # upstream, unchanged
            assert keeper(piece) is piece
        flow.request.raw_content = None  # mitmproxy keeps no streamed body
        addon.request(flow)
        await _finish(addon, flow, clock, sink)
    (rec,) = sink.records
    assert rec.model == "gpt-4o-mini" and rec.input_breakdown is not None


def test_a_keeper_keeps_nothing_past_its_limit_and_passes_everything() -> None:
    keeper = RequestKeeper(limit=10)
    assert [keeper(p) for p in (b"abcd", b"efgh", b"ijkl")] == [b"abcd", b"efgh", b"ijkl"]
    assert keeper.over and keeper.body() == b""
