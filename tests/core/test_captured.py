"""Body capture (``capture_bodies``): what the tap keeps, what is packed, and that a
stored body re-meters to the record the proxy made (hooks driven directly, fake clock)."""

from __future__ import annotations

import argparse
import gzip
import random
from typing import Any

import orjson
import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from recorder.cli.proxy import Settings, _banner
from recorder.core.captured import (
    DEFAULT_CAPTURE_MAX_BYTES,
    BodyFormatError,
    CapturedBody,
    CapturedRecord,
    PackedBody,
    Timeline,
    body_of,
    remeter,
)
from recorder.core.price_files import shipped_prices
from recorder.core.record import StreamRecord
from recorder.proxy.addon import Recorder
from recorder.proxy.checks import OptionError, parse_size
from recorder.proxy.config import RecorderConfig
from recorder.store.sinks import MemorySink, record_json
from tests.kit.flows import (
    CHAT_SSE,
    MESSAGES_SSE,
    SECRET,
    Clock,
    make_flow,
    pieces_of,
    sse_response,
    start,
)
from tests.kit.records import TIMING_FIELDS
from tests.kit.timers import Timers


def make(**config: Any) -> tuple[Recorder, MemorySink, Clock]:
    sink = MemorySink()
    clock = Clock()
    addon = Recorder(
        sink, RecorderConfig(key_secret=SECRET, **config), clock=clock, scheduler=Timers(clock)
    )
    return addon, sink, clock


def feed(flow: http.HTTPFlow, schedule: list[tuple[float, bytes]], clock: Clock) -> bytes:
    """Each piece after its delay; then the end of the body. Returns what the client got."""
    assert flow.response is not None and callable(flow.response.stream)
    out = b""
    for delay, piece in schedule:
        clock.now += delay
        got = flow.response.stream(piece)
        assert got is piece  # the client gets exactly the bytes
        out += got
    flow.response.stream(b"")
    return out


def events_of(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


def rhythmic(body: bytes, *, stall_at: int, stall: float) -> list[tuple[float, bytes]]:
    """A body's events with keepalive comments between them, a stall before event
    ``stall_at``, and pieces split at random points (some events several per piece)."""
    rng = random.Random(7)
    out: list[tuple[float, bytes]] = []
    for i, event in enumerate(events_of(body)):
        if i == stall_at:
            for k in range(int(stall / 0.4)):  # distinct gaps: no ties for "longest"
                out.append((0.4 - 0.003 * k, b": keepalive\n\n"))
        cut = rng.randrange(1, len(event))
        out.append((0.013 * rng.random() + 0.001, event[:cut]))
        out.append((0.0, event[cut:]))
    return out


async def run_stream(
    addon: Recorder,
    clock: Clock,
    schedule: list[tuple[float, bytes]],
    *,
    path: str = "/v1/chat/completions",
    extra: list[tuple[bytes, bytes]] | None = None,
    body: dict[str, object] | None = None,
) -> http.HTTPFlow:
    flow = make_flow(path=path, body=body)
    await start(addon, flow, clock)
    flow.response = sse_response(extra=extra)
    addon.responseheaders(flow)
    feed(flow, schedule, clock)
    return flow


def replayed(rec: StreamRecord, **kw: Any) -> StreamRecord:
    body = body_of(rec)
    assert body is not None
    return remeter(body.pack(), rec, **kw)


# Offsets are stored in whole microseconds: a timing replayed may differ from the
# one measured by that much (twice, for an interval), after rounding to 0.001 ms.
TIMING_TOL_MS = 0.0025
TIMINGS = frozenset(TIMING_FIELDS)


def assert_same(again: StreamRecord, rec: StreamRecord) -> None:
    """Every field equal; timings to the microsecond the timeline keeps."""
    a, b = again.to_dict(), rec.to_dict()
    assert a.keys() == b.keys()
    for name in a:
        if name in TIMINGS and a[name] is not None and b[name] is not None:
            assert abs(a[name] - b[name]) <= TIMING_TOL_MS, (name, a[name], b[name])
        else:
            assert a[name] == b[name], (name, a[name], b[name])
    assert [g.kind for g in again.gaps] == [g.kind for g in rec.gaps]
    for g1, g2 in zip(again.gaps, rec.gaps, strict=True):
        assert abs(g1.start_ms - g2.start_ms) <= TIMING_TOL_MS, (g1, g2)
        assert abs(g1.length_ms - g2.length_ms) <= TIMING_TOL_MS, (g1, g2)


# -- off by default, and then no trace of it ------------------------------------------


async def test_off_by_default_records_carry_no_body() -> None:
    addon, sink, clock = make()
    assert addon.config.capture_bodies is False
    assert addon.config.capture_max_bytes == DEFAULT_CAPTURE_MAX_BYTES == 8 * 1024 * 1024
    with taddons.context(addon):
        flow = await run_stream(addon, clock, [(0.01, p) for p in pieces_of(CHAT_SSE, 97)])
        addon.response(flow)
    (rec,) = sink.records
    assert type(rec) is StreamRecord and body_of(rec) is None
    assert rec.outcome == "completed"


# -- what the tap keeps ------------------------------------------------------------------


async def test_the_body_is_kept_with_its_timing_and_bytes_pass_unchanged() -> None:
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)  # headers 250 ms after the request
        flow.response = sse_response()
        addon.responseheaders(flow)
        out = feed(flow, [(0.01, p) for p in pieces_of(CHAT_SSE, 97)], clock)
        addon.response(flow)
    assert out == CHAT_SSE
    (rec,) = sink.records
    assert isinstance(rec, CapturedRecord)
    body = rec.body
    assert isinstance(body, CapturedBody)
    assert body.size == len(CHAT_SSE) and not body.truncated
    packed = body.pack()
    assert packed.encoding == "zstd" and packed.body() == CHAT_SSE
    assert len(packed.data) < len(CHAT_SSE) // 3
    tl = packed.timeline()
    assert tl.headers_us == 250_000 and tl.ending == "eof"
    assert [n for _, n in tl.chunks] == [len(p) for p in pieces_of(CHAT_SSE, 97)]
    assert [o for o, _ in tl.chunks][:3] == [260_000, 270_000, 280_000]
    assert tl.end_us == tl.chunks[-1][0]  # the end of the body came with the last piece
    assert tl.stall_after == 30.0
    # the body never shows in the record's JSON (nor, thus, in --jsonl or the columns)
    assert b"body" not in record_json(rec) and "body" not in rec.to_dict(with_gaps=True)
    assert body.chunks == []  # packed once, the pieces are let go


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_a_stored_body_re_meters_to_the_same_record(path: str) -> None:
    sse = CHAT_SSE if "chat" in path else MESSAGES_SSE
    addon, sink, clock = make(capture_bodies=True, stall_after=1.0, prices=shipped_prices())
    body = (
        {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100, "messages": []}
        if "messages" in path
        else None
    )
    with taddons.context(addon):
        flow = await run_stream(
            addon,
            clock,
            rhythmic(sse, stall_at=len(events_of(sse)) // 2, stall=2.0),
            path=path,
            body=body,
        )
        addon.response(flow)
    (rec,) = sink.records
    assert rec.stalls == 1 and rec.keepalives == 5 and rec.outcome == "completed"
    again = replayed(rec, prices=shipped_prices())
    assert_same(again, rec)


async def test_a_cut_stream_re_meters_to_the_same_outcome_and_estimate() -> None:
    addon, sink, clock = make(capture_bodies=True, stall_after=1.0, prices=shipped_prices())
    events = events_of(CHAT_SSE)
    with taddons.context(addon):
        flow = make_flow(
            body={
                "model": "gpt-4o",
                "stream": True,
                "messages": [{"role": "user", "content": "Hi there"}],
            }
        )
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        for e in events[:6]:
            clock.now += 0.05
            flow.response.stream(e)
        clock.now += 1.5  # a silence, then the upstream goes away
        flow.error = tflow.terr("HTTP/1 protocol error: peer closed connection")
        addon.error(flow)
    (rec,) = sink.records
    assert rec.outcome == "upstream_disconnect" and rec.stalls == 1
    assert rec.output_source == "estimated" and rec.input_source == "estimated"
    again = replayed(rec, prices=shipped_prices())
    assert_same(again, rec)
    assert body_of(rec).pack().timeline().ending == "upstream_disconnect"  # type: ignore[union-attr]


async def test_client_disconnect_and_shutdown_are_kept_as_endings() -> None:
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = await run_stream(addon, clock, [(0.01, CHAT_SSE[:500])])
        flow.error = tflow.terr("Client disconnected.")
        addon.error(flow)
        open_flow = make_flow()
        await start(addon, open_flow, clock)
        open_flow.response = sse_response()
        addon.responseheaders(open_flow)
        assert open_flow.response.stream(CHAT_SSE[:300]) is not None
        addon.done()
        kept = list(body_of(sink.records[1]).chunks)  # type: ignore[union-attr]
        assert open_flow.response.stream(CHAT_SSE[300:400]) is not None  # after the end
        assert body_of(sink.records[1]).chunks == kept  # type: ignore[union-attr]
    first, second = sink.records
    for rec in (first, second):
        assert rec.outcome == "client_disconnect"
        assert_same(replayed(rec), rec)


async def test_a_compressed_upstream_is_stored_decoded() -> None:
    addon, sink, clock = make(capture_bodies=True)
    gz = gzip.compress(CHAT_SSE)
    with taddons.context(addon):
        flow = await run_stream(
            addon,
            clock,
            [(0.01, p) for p in pieces_of(gz, 50)],
            extra=[(b"content-encoding", b"gzip")],
        )
        addon.response(flow)
    (rec,) = sink.records
    packed = body_of(rec).pack()  # type: ignore[union-attr]
    assert packed.body() == CHAT_SSE  # what the meter saw, not the gzip on the wire
    # pieces that decoded to nothing (gzip's header) are not kept, as the meter ignores them
    assert all(n > 0 for _, n in packed.timeline().chunks)
    assert_same(replayed(rec), rec)


async def test_past_the_cap_pieces_are_counted_not_kept() -> None:
    addon, sink, clock = make(capture_bodies=True, capture_max_bytes=1000)
    pieces = pieces_of(CHAT_SSE, 300)
    with taddons.context(addon):
        flow = await run_stream(addon, clock, [(0.01, p) for p in pieces])
        addon.response(flow)
    (rec,) = sink.records
    assert rec.outcome == "completed"  # metering is not capped
    packed = body_of(rec).pack()  # type: ignore[union-attr]
    assert packed.truncated and packed.size == len(CHAT_SSE)
    assert packed.body() == b"".join(pieces[:3])  # whole pieces, up to the cap
    assert replayed(rec).outcome == "truncated"  # the stored part has no [DONE]


async def test_only_event_streams_are_kept() -> None:
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = make_flow(body={"model": "gpt-4o", "messages": []})
        await start(addon, flow, clock)
        flow.response = tutils.tresp(
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}',
        )
        addon.responseheaders(flow)
        addon.response(flow)
        gone = make_flow()
        await start(addon, gone, clock)
        gone.error = tflow.terr("server closed connection")  # before any response
        addon.error(gone)
    assert [body_of(r) for r in sink.records] == [None, None]


async def test_an_undecodable_body_is_not_kept() -> None:
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = await run_stream(
            addon, clock, [(0.01, b"\x00garbage")], extra=[(b"content-encoding", b"snappy")]
        )
        addon.response(flow)
    (rec,) = sink.records
    assert body_of(rec) is None and rec.events == 0


async def test_a_failing_meter_marks_the_kept_body_incomplete() -> None:
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)

        class Broken:
            def feed(self, data: bytes) -> list[object]:
                raise RuntimeError("bug in the meter")

        # the tap holds the meter's bound feed; break the framer beneath it
        addon.streams.get(flow.id).meter.framer = Broken()  # type: ignore[union-attr,assignment]
        assert flow.response.stream(CHAT_SSE[:100]) == CHAT_SSE[:100]
        assert flow.response.stream(CHAT_SSE[100:200]) == CHAT_SSE[100:200]
        flow.response.stream(b"")
        addon.response(flow)
    (rec,) = sink.records
    packed = body_of(rec).pack()  # type: ignore[union-attr]
    assert packed.truncated and packed.body() == CHAT_SSE[:100]  # kept up to the failure


# -- the packed form ---------------------------------------------------------------------


def test_packed_bodies_round_trip_through_the_spool_form() -> None:
    body = CapturedBody(10.0, 10.2, stall_after=5.0, max_event_bytes=4096)
    body.add(b"data: 1\n\n", 10.25)
    body.add(b"data: 2\n\n", 11.5000004)
    body.end(12.0, "client_disconnect")
    packed = body.pack()
    assert body.pack() is packed  # once
    doc = orjson.loads(orjson.dumps(packed.to_doc()))
    assert PackedBody.from_doc(doc) == packed
    tl = packed.timeline()
    assert tl == Timeline(
        200_000, 2_000_000, "client_disconnect", 5.0, 4096, [(250_000, 9), (1_500_000, 9)]
    )


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"encoding": "lz4", "data": "", "timings": "", "size": 0, "truncated": False},
        {"encoding": "zstd", "data": "!!", "timings": "", "size": 0, "truncated": False},
        {"encoding": "zstd", "data": "", "timings": "", "size": "x", "truncated": False},
    ],
)
def test_bad_spooled_bodies_are_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(BodyFormatError):
        PackedBody.from_doc(doc)


def test_bad_stored_bodies_are_refused() -> None:
    rec = StreamRecord(endpoint="chat.completions")
    good = CapturedBody(0.0, 0.1)
    good.add(b"data: [DONE]\n\n", 0.2)
    good.end(0.3, "eof")
    packed = good.pack()
    for broken in (
        PackedBody("zstd", b"not zstd", packed.timings, 14, False),
        PackedBody("zstd", packed.data, b"not zstd", 14, False),
        PackedBody("identity", packed.body(), b'{"v": 99}', 14, False),
        PackedBody(
            "identity", packed.body() + b"more", b"".join([packed.timeline().to_json()]), 14, False
        ),
    ):
        with pytest.raises(BodyFormatError):
            remeter(broken, rec)
    assert remeter(packed, rec).outcome == "completed"


# -- `recorder proxy` wiring ----------------------------------------------------------------


def proxy_args(*argv: str) -> argparse.Namespace:
    from recorder.cli import proxy

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    proxy.add_parser(sub)
    return parser.parse_args(["proxy", *argv])


def test_proxy_options(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("RECORDER_CAPTURE_BODIES", "RECORDER_CAPTURE_MAX_BYTES"):
        monkeypatch.delenv(name, raising=False)
    s = Settings(proxy_args())
    assert s.capture_bodies is False and s.capture_max_bytes == 8 * 1024 * 1024
    s = Settings(proxy_args("--capture-bodies", "--capture-max-bytes", "512K"))
    assert s.capture_bodies is True and s.capture_max_bytes == 512 * 1024
    monkeypatch.setenv("RECORDER_CAPTURE_BODIES", "1")
    monkeypatch.setenv("RECORDER_CAPTURE_MAX_BYTES", "2MiB")
    s = Settings(proxy_args())
    assert s.capture_bodies is True and s.capture_max_bytes == 2 * 1024 * 1024
    s.metrics_url = "http://127.0.0.1:9464/metrics"
    _banner(s, "/conf")([])  # type: ignore[operator]
    out = capsys.readouterr().out
    assert "SSE response bodies, compressed" in out and "up to 2 MiB each" in out
    assert [parse_size(t, "x") for t in ("65536", "8M", "8MiB", "1g")] == [
        65536,
        8 << 20,
        8 << 20,
        1 << 30,
    ]
    for bad in ("", "many", "0", "-5M"):
        with pytest.raises(OptionError):
            parse_size(bad, "--capture-max-bytes")


# -- every credential of the request is masked in the body ------------------------------

K1 = "sk-proj-Q9vTz/Xk2-Lm_8Rb4Nc7Wd1Ye6Hf3Jg5Kh0Pq"  # Authorization: Bearer
K2 = "sk-ant-api03-Zy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0-Gf9Ed8Cb7Ua"  # x-api-key


def _echoing_body() -> tuple[bytes, bytes]:
    """An Anthropic stream whose error event echoes both keys, raw and as JSON
    encoders escape them; and the same body with each echo masked to its length."""
    echoes = [
        K1.encode(),
        K2.encode(),
        K1.replace("-", "\\u002d").replace("/", "\\/").encode(),
        K2.replace("-", "\\u002D").encode(),
    ]
    marks = [b"@ECHO%d@" % i for i in range(len(echoes))]
    message = "keys " + ", ".join(m.decode() for m in marks)
    err = {"type": "error", "error": {"type": "authentication_error", "message": message}}
    body = MESSAGES_SSE.split(b"event: message_stop")[0]
    body += b"event: error\ndata: " + orjson.dumps(err) + b"\n\n"
    want = body
    for mark, echo in zip(marks, echoes, strict=True):
        body, want = body.replace(mark, echo), want.replace(mark, b"*" * len(echo))
    return body, want


async def _run_two_keys(pieces: list[bytes]) -> StreamRecord:
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = make_flow(
            path="/v1/messages",
            body={"model": "claude-sonnet-4-5", "stream": True, "messages": []},
            headers=[(b"authorization", f"Bearer {K1}".encode()), (b"x-api-key", K2.encode())],
        )
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        feed(flow, [(0.01, p) for p in pieces], clock)
        addon.response(flow)
    (rec,) = sink.records
    return rec


async def test_both_keys_echoed_are_masked_wherever_the_pieces_split() -> None:
    """Authorization and x-api-key on /v1/messages, both echoed in an SSE error
    event (raw and JSON-escaped), the body split into two pieces at every offset
    around the echoes, and into one-byte pieces: the stored body is the upstream's
    with each echo masked to its length, and nothing else changed."""
    body, want = _echoing_body()
    first = body.index(b"event: error")
    for cut in [*range(first, len(body)), -1]:
        pieces = (
            [body[i : i + 1] for i in range(len(body))] if cut < 0 else [body[:cut], body[cut:]]
        )
        rec = await _run_two_keys(pieces)
        packed = body_of(rec).pack()  # type: ignore[union-attr]
        assert packed.body() == want, cut
        assert packed.timeline().chunks[-1][1] == len(pieces[-1])
    assert rec.outcome == "error" and rec.error_message is not None
    assert K1 not in rec.error_message and K2 not in rec.error_message
    assert rec.error_message.count("[api key]") == 4
    assert replayed(rec).error_message == "keys " + ", ".join(
        "*" * len(e)
        for e in (
            K1,
            K2,
            K1.replace("-", "\\u002d").replace("/", "\\/"),
            K2.replace("-", "\\u002D"),
        )
    )


async def test_messages_fingerprint_the_x_api_key() -> None:
    """On /v1/messages Anthropic authenticates with x-api-key: that key is the one
    fingerprinted, even when an Authorization header comes with it."""
    rec = await _run_two_keys([MESSAGES_SSE])
    assert rec.api_key_id is not None and rec.api_key_id.startswith(f"…{K2[-4:]}:")


async def test_a_body_cut_inside_an_echo_keeps_no_start_of_the_key() -> None:
    """The upstream goes away in the middle of an echo, or the cap cuts the body
    there: the stored body ends in as many ``*`` as the key's start took."""
    body, _ = _echoing_body()
    at = body.index(K2.encode(), body.index(b"event: error")) + 20  # mid-K2, raw
    for how in ("disconnect", "cap"):
        addon, sink, clock = make(
            capture_bodies=True, **({"capture_max_bytes": at} if how == "cap" else {})
        )
        with taddons.context(addon):
            flow = make_flow(
                path="/v1/messages",
                body={"model": "claude-sonnet-4-5", "stream": True, "messages": []},
                headers=[(b"x-api-key", K2.encode())],
            )
            await start(addon, flow, clock)
            flow.response = sse_response()
            addon.responseheaders(flow)
            assert flow.response.stream is not None and callable(flow.response.stream)
            flow.response.stream(body[:at])
            if how == "cap":
                flow.response.stream(body[at:])
                flow.response.stream(b"")
                addon.response(flow)
            else:
                flow.error = tflow.terr("peer closed connection")
                addon.error(flow)
        (rec,) = sink.records
        stored = body_of(rec).pack().body()  # type: ignore[union-attr]
        assert stored == body[: at - 20] + b"*" * 20, how
