"""The addon's hooks, driven directly (mitmproxy's taddons/tflow), with a fake clock."""

from __future__ import annotations

import asyncio
import gzip
import hashlib

import brotli
import orjson
import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from recorder.core.keys import fingerprint
from recorder.core.record import StreamRecord
from recorder.proxy.addon import INLINE_PARSE_LIMIT, Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.tap import BATCH_BYTES, BATCH_PIECES, Tap
from recorder.proxy.walk import WALK_S
from recorder.store.sinks import MemorySink
from tests.kit.flows import (
    CHAT_SSE,
    MESSAGES_SSE,
    SECRET,
    Clock,
    make,
    make_flow,
    pieces_of,
    sse_response,
    start,
    stream_through,
    timers_of,
)


async def test_streamed_chat_is_recorded_and_bytes_pass_unchanged() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow(headers=[(b"authorization", b"Bearer sk-test-abcdef1234")])
        await start(addon, flow, clock)
        assert "accept-encoding" not in flow.request.headers
        flow.response = sse_response()
        addon.responseheaders(flow)
        out = stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
        addon.response(flow)
    assert hashlib.sha256(out).digest() == hashlib.sha256(CHAT_SSE).digest()
    (rec,) = sink.records
    assert rec.outcome == "completed" and rec.streamed is True
    assert rec.endpoint == "chat.completions" and rec.provider == "openai"
    assert rec.model == "gpt-4o" and rec.response_model == "gpt-4o-2024-08-06"
    assert rec.upstream == "api.example.com:443"
    assert rec.request_id == "req_1"
    assert rec.http_status == 200
    assert (rec.input_tokens, rec.output_tokens) == (19, 177)
    assert rec.include_usage is False  # the body did not ask; the fixture had usage anyway
    assert rec.ttfb_ms == 250.0
    assert rec.ttft_ms is not None and rec.ttft_ms > rec.ttfb_ms
    assert rec.api_key_id == fingerprint("sk-test-abcdef1234", SECRET)
    assert "sk-test" not in orjson.dumps(rec.to_dict(with_gaps=True)).decode()
    assert addon.open_flows == 0 and addon.health.in_flight == 0


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/chat/completions", "chat.completions"),
        ("/openai/v1/chat/completions", "chat.completions"),
        (
            "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21",
            "chat.completions",
        ),
        ("/v1/responses", "responses"),
        ("/v1/messages", "messages"),
    ],
)
async def test_endpoints_are_recognised_under_prefixes(path: str, endpoint: str) -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow(path=path)
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream_through(flow, [b": hi\n\n"], clock)
        addon.response(flow)
    assert [r.endpoint for r in sink.records] == [endpoint]


@pytest.mark.parametrize(
    "path", ["/v1/models", "/v1/threads/t1/messages", "/v1/messages/count_tokens"]
)
async def test_other_paths_are_not_tapped(path: str) -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow(path=path)
        await start(addon, flow, clock)
        assert "accept-encoding" in flow.request.headers
        flow.response = sse_response()
        addon.responseheaders(flow)
        assert not callable(flow.response.stream)
        addon.response(flow)
    assert sink.records == []


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("br", brotli.compress)],
)
async def test_compressed_stream_is_metered_on_the_side(encoding: str, compress: object) -> None:
    addon, sink, clock = make()
    body = compress(MESSAGES_SSE)  # type: ignore[operator]
    with taddons.context(addon):
        flow = make_flow(path="/v1/messages", body={"model": "claude-x", "stream": True})
        await start(addon, flow, clock)
        flow.response = sse_response(extra=[(b"content-encoding", encoding.encode())])
        addon.responseheaders(flow)
        out = stream_through(flow, pieces_of(body, 13), clock)
        addon.response(flow)
    assert out == body  # the client still gets the compressed bytes
    (rec,) = sink.records
    assert rec.outcome == "completed" and rec.output_chars > 0
    assert addon.health.decode_errors == 0


async def test_undecodable_encoding_is_recorded_without_events() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response(extra=[(b"content-encoding", b"compress")])
        addon.responseheaders(flow)
        out = stream_through(flow, [CHAT_SSE], clock)
        addon.response(flow)
    assert out == CHAT_SSE
    (rec,) = sink.records
    assert rec.outcome == "truncated" and rec.events == 0
    assert addon.health.decode_errors == 1
    # the record says its figures are missing, and nothing is estimated from nothing
    assert rec.recorder_error == "events not metered: content-encoding 'compress' cannot be decoded"
    assert rec.output_source == "none" and rec.output_tokens is None


async def test_undecodable_header_bytes_become_clean_text() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow(
            headers=[
                (b"openai-project", b"proj_\xff\xfe"),
                (b"authorization", b"Bearer sk-\xffkey12345"),
            ]
        )
        await start(addon, flow, clock)
        flow.response = sse_response(extra=[(b"x-request-id", b"req_\xc3")])
        flow.response.headers["x-request-id"] = "req_\udcc3"  # as mitmproxy decodes it
        addon.responseheaders(flow)
        stream_through(flow, [CHAT_SSE], clock)
        addon.response(flow)
    (rec,) = sink.records
    assert rec.project == "proj_\ufffd\ufffd"
    assert rec.api_key_id is not None and "\udcff" not in rec.api_key_id
    for value in (rec.project, rec.api_key_id, rec.request_id):
        assert value is not None
        value.encode("utf-8")  # no lone surrogates left


async def test_a_key_echoed_in_an_error_is_masked() -> None:
    addon, sink, clock = make()
    key = "sk-proj-ECHOEDSECRET0001"
    body = {"error": {"message": f"Incorrect API key provided: {key}. Also sk-ant-other000000."}}
    with taddons.context(addon):
        flow = make_flow(headers=[(b"authorization", f"Bearer {key}".encode())])
        await start(addon, flow, clock)
        flow.response = tutils.tresp(
            status_code=401,
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=orjson.dumps(body),
        )
        addon.responseheaders(flow)
        addon.response(flow)
    (rec,) = sink.records
    assert rec.error_message is not None
    assert "ECHOEDSECRET" not in rec.error_message and "other000000" not in rec.error_message
    assert "[api key]" in rec.error_message


async def test_client_disconnect_mid_stream() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        assert flow.response.stream(CHAT_SSE[:1500]) == CHAT_SSE[:1500]
        clock.now += 2.0
        flow.error = tflow.terr("Client disconnected.")
        addon.error(flow)
    (rec,) = sink.records
    assert rec.outcome == "client_disconnect" and rec.interrupted
    assert rec.transport_error == "Client disconnected."
    assert rec.max_output_gap_ms is not None and rec.max_output_gap_ms >= 2000.0
    assert addon.open_flows == 0


async def test_upstream_disconnect_mid_stream() -> None:
    addon, sink, clock = make()
    msg = "HTTP/1 protocol error: peer closed connection without sending complete message body"
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        flow.response.stream(CHAT_SSE[:1500])
        flow.error = tflow.terr(msg)
        addon.error(flow)
    (rec,) = sink.records
    assert rec.outcome == "upstream_disconnect" and rec.transport_error == msg


async def test_upstream_gone_before_headers() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.error = tflow.terr("server closed connection")
        addon.error(flow)
    (rec,) = sink.records
    assert rec.outcome == "upstream_disconnect" and rec.http_status is None
    assert rec.ttfb_ms is None


async def test_clean_end_without_terminal_event_is_truncated() -> None:
    addon, sink, clock = make()
    cut = CHAT_SSE[: CHAT_SSE.index(b"data: [DONE]")]
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream_through(flow, [cut], clock)
        addon.response(flow)
    (rec,) = sink.records
    assert rec.outcome == "truncated" and rec.interrupted


async def test_non_streamed_json_response() -> None:
    addon, sink, clock = make()
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "こんにちは"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
    with taddons.context(addon):
        flow = make_flow(body={"model": "gpt-4o", "messages": []})
        await start(addon, flow, clock)
        flow.response = tutils.tresp(
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=None,
        )
        addon.responseheaders(flow)
        # streamed to the client as it comes (never buffered whole), read on the side
        raw = orjson.dumps(body)
        got = stream_through(flow, pieces_of(raw, 40), clock)
        assert got == raw
        clock.now += 0.5
        addon.response(flow)
    (rec,) = sink.records
    assert rec.streamed is False and rec.outcome == "completed"
    assert rec.content_mismatch is None
    assert (rec.input_tokens, rec.output_tokens, rec.output_chars) == (9, 3, 5)
    assert rec.finish_reason == "stop" and rec.response_id == "chatcmpl-1"
    assert rec.events is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {
                "error": {
                    "message": "Rate limit reached",
                    "type": "requests",
                    "code": "rate_limit_exceeded",
                }
            },
            ("requests", "rate_limit_exceeded", "Rate limit reached"),
        ),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            ("overloaded_error", None, "Overloaded"),
        ),
    ],
)
async def test_http_error_records_type_and_message(
    body: dict[str, object], expected: tuple[object, ...]
) -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = tutils.tresp(
            status_code=429,
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=orjson.dumps(body),
        )
        addon.responseheaders(flow)
        addon.response(flow)
    (rec,) = sink.records
    assert rec.outcome == "http_error" and rec.http_status == 429 and not rec.interrupted
    assert (rec.error_type, rec.error_code, rec.error_message) == expected


async def test_a_failing_meter_never_breaks_traffic() -> None:
    addon, sink, clock = make()
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
        out = stream_through(flow, pieces_of(CHAT_SSE, 500), clock)
        addon.response(flow)
    assert out == CHAT_SSE
    # one error in the tap (which then gives up on the stream), one finishing the record
    assert addon.health.internal_errors == 2
    (rec,) = sink.records  # the stream is recorded all the same, and marked
    assert rec.recorder_error == "RuntimeError: bug in the meter"
    assert rec.outcome == "truncated" and rec.http_status == 200


async def test_hook_errors_are_caught_and_counted() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = None
        flow.error = None
        addon.streams.get(flow.id)._meter = None  # type: ignore[union-attr]
        addon.error(flow)  # finishing with no meter raises inside; must be caught
    assert addon.health.internal_errors == 2  # finishing the record, completing its usage
    (rec,) = sink.records
    assert rec.recorder_error is not None and rec.outcome == "upstream_disconnect"


async def test_done_finishes_open_flows_and_closes_the_sink() -> None:
    closed: list[bool] = []

    class Sink(MemorySink):
        def close(self) -> None:
            closed.append(True)

    sink = Sink()
    addon = Recorder(sink, RecorderConfig(key_secret=SECRET), clock=Clock())
    with taddons.context(addon):
        flow = make_flow()
        addon.requestheaders(flow)
        addon.done()
        addon.done()
    assert [r.outcome for r in sink.records] == ["client_disconnect"]
    assert closed == [True]


async def test_state_is_released_on_every_path() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        for i in range(300):
            flow = make_flow()
            await start(addon, flow, clock)
            if i % 3 == 0:
                flow.error = tflow.terr("Client disconnected.")
                addon.error(flow)
                continue
            flow.response = sse_response(status=200 if i % 3 == 1 else 500)
            addon.responseheaders(flow)
            if callable(flow.response.stream):
                stream_through(flow, [CHAT_SSE[:300]], clock)
            addon.response(flow)
    assert addon.open_flows == 0
    assert addon.health.in_flight == 0
    assert len(sink.records) == 300
    assert all(isinstance(r, StreamRecord) for r in sink.records)


async def test_a_large_request_body_is_read_without_holding_the_request() -> None:
    addon, sink, clock = make()
    prompt = "調和 harmony " * 5000  # well over the inline limit
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": prompt}]}
    with taddons.context(addon):
        flow = make_flow(body=body)
        addon.requestheaders(flow)
        addon.request(flow)  # returns at once: the body is read on a worker thread
        state = addon.streams.get(flow.id)
        assert state is not None and state.reading is not None
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream_through(flow, [CHAT_SSE], clock)
        addon.response(flow)
        for _ in range(200):  # the record waits for the body, then is finished on the loop
            timers_of(addon).run_due()
            if sink.records:
                break
            await asyncio.sleep(0.01)
    (rec,) = sink.records
    assert rec.model == "gpt-4o" and rec.include_usage is False
    assert rec.input_breakdown is not None and rec.input_breakdown["cjk"] >= 10000
    assert addon.open_flows == 0 and addon.finishing.waiting == 0
    assert addon.health.in_flight == 0


async def test_shutdown_waits_for_a_body_still_being_read() -> None:
    addon, sink, _clock = make()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 100_000}]}
    with taddons.context(addon):
        flow = make_flow(body=body)
        addon.requestheaders(flow)
        addon.request(flow)
        addon.done()  # the flow is still open and its body maybe unread: nothing is lost
    (rec,) = sink.records
    assert rec.outcome == "client_disconnect" and rec.model == "gpt-4o"


RECORD_FIGURES = (
    "outcome",
    "events",
    "keepalives",
    "output_chars",
    "ttfb_ms",
    "first_event_ms",
    "ttft_ms",
    "duration_ms",
    "max_output_gap_ms",
    "max_silence_ms",
    "stalls",
    "parse_issues",
    "partial_event_at_end",
    "finish_reason",
    "output_tokens",
    "transport_error",
)


@pytest.mark.parametrize("cut", [None, 0.5])
@pytest.mark.parametrize("size", [1, 13, 97, 4096, 70_000])
async def test_metering_in_batches_changes_no_figure(size: int, cut: float | None) -> None:
    """The tap meters pieces in batches, each at its own arrival time: the record is
    the one a meter fed piece by piece gives, across batch boundaries (count and
    bytes), and pieces still waiting when the flow ends (cut or not) are metered."""
    from recorder.core.meter import StreamMeter

    body = (CHAT_SSE.replace(b"\n\n", b"\n\n: ping\n\n", 3)) * 3  # keepalives, >1 batch
    pieces = pieces_of(body, size)
    if cut is not None:
        pieces = pieces[: max(1, int(len(pieces) * cut))]
    # the sizes cross both bounds: many small pieces, and pieces over BATCH_BYTES
    assert len(pieces_of(body, 1)) > BATCH_PIECES and BATCH_BYTES < 70_000
    addon, sink, clock = make()
    ref = StreamMeter("chat.completions", start=clock.now, stall_after=0.05)
    addon.config.stall_after = 0.05
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response()
        ref.headers(clock.now, 200)
        addon.responseheaders(flow)
        assert flow.response.stream is not None
        for i, piece in enumerate(pieces):
            clock.now += 0.001 if i % 50 else 0.2  # now and then a stall
            ref.feed(piece, clock.now)
            assert flow.response.stream(piece) is piece
        clock.now += 0.01
        if cut is None:
            flow.response.stream(b"")
            addon.response(flow)
            want = ref.finish(clock.now, ending="eof")
        else:
            flow.error = tflow.terr("Client disconnected.")
            addon.error(flow)
            want = ref.finish(
                clock.now, ending="client_disconnect", transport_error="Client disconnected."
            )
    (got,) = sink.records
    assert {k: getattr(got, k) for k in RECORD_FIGURES} == {
        k: getattr(want, k) for k in RECORD_FIGURES
    }
    assert got.gaps == want.gaps
    assert got.events


def test_picked_headers_read_as_mitmproxy_reads_them() -> None:
    from recorder.proxy.making import pick_headers

    headers = http.Headers(
        [
            (b"Content-Type", b"text/event-stream"),
            (b"X-Request-Id", b"req_\xc3\xa9"),  # UTF-8
            (b"x-request-id", b"second"),  # repeated: folded
            (b"Request-Id", b"\xff\xfe"),  # not UTF-8: surrogateescape, as mitmproxy
            (b"other", b"x"),
        ]
    )
    wanted = frozenset({b"content-type", b"x-request-id", b"request-id", b"absent"})
    picked = pick_headers(headers, wanted)
    assert picked == {
        name: headers[name] for name in ("content-type", "x-request-id", "request-id")
    }
    assert picked["x-request-id"] == "req_é, second"


async def _run_one(addon: Recorder, clock: Clock) -> http.HTTPFlow:
    flow = make_flow(headers=[(b"authorization", b"Bearer sk-test-abcdef1234")])
    await start(addon, flow, clock)
    flow.response = sse_response()
    addon.responseheaders(flow)
    stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
    addon.response(flow)
    return flow


async def test_finish_delay_completes_records_later_and_unchanged() -> None:
    at_once, sink_now, clock_now = make()
    # a delay longer than the 20 requests take (each waits, on the loop, for its
    # prompt's token count from the worker thread)
    later, sink_later, clock_later = make(finish_delay=1.0)
    with taddons.context(at_once):
        await _run_one(at_once, clock_now)
    with taddons.context(later):
        flows = [await _run_one(later, clock_later) for _ in range(20)]
        # the streams have ended; their records wait
        assert later.health.in_flight == 0 and later.open_flows == 0
        assert sink_later.records == [] and later.health.records == 0
        timers_of(later).advance(1.5)
    assert len(sink_later.records) == 20 == later.health.records
    # in the order the streams ended, completed as they would be at once
    assert [r.id for r in sink_later.records] == sorted(r.id for r in sink_later.records)
    want = {k: getattr(sink_now.records[0], k) for k in (*RECORD_FIGURES, "cost_usd")}
    for rec in sink_later.records:
        assert {k: getattr(rec, k) for k in (*RECORD_FIGURES, "cost_usd")} == want
        assert rec.input_tokens == 19 and rec.api_key_id == sink_now.records[0].api_key_id
    assert len(flows) == 20


async def test_finish_delay_shutdown_completes_what_waits() -> None:
    addon, sink, clock = make(finish_delay=60.0)
    with taddons.context(addon):
        for _ in range(3):
            await _run_one(addon, clock)
        assert sink.records == []
        addon.done()  # shutdown: no waiting a minute, nothing lost
        assert len(sink.records) == 3 and addon.health.records == 3
    addon2, sink2, clock2 = make(finish_delay=60.0)
    with taddons.context(addon2):
        await _run_one(addon2, clock2)
    addon2.close()  # closed without done (the runner's last resort)
    assert len(sink2.records) == 1


async def test_an_unpriced_model_is_said_once_per_process(caplog: pytest.LogCaptureFixture) -> None:
    from recorder.core.price_files import load_prices

    prices = load_prices(b'{"models": {"claude-x": {"input": "1", "output": "2"}}}')
    addon, sink, clock = make(prices=prices)
    caplog.set_level("WARNING", logger="recorder.prices")
    with taddons.context(addon):
        for _ in range(3):
            flow = make_flow(body={"model": "gpt-4o-unpriced-test", "stream": True, "messages": []})
            await start(addon, flow, clock)
            flow.response = sse_response()
            addon.responseheaders(flow)
            stream_through(flow, pieces_of(CHAT_SSE, 500), clock)
            addon.response(flow)
    assert len(sink.records) == 3
    for rec in sink.records:
        assert rec.usage_source == "reported" and rec.cost_usd is None
        assert rec.unpriced_reason == "no price for model 'gpt-4o-2024-08-06'"
    lines = [r.getMessage() for r in caplog.records if r.name == "recorder.prices"]
    assert len(lines) == 1
    assert "gpt-4o-2024-08-06" in lines[0] and "--prices" in lines[0]


async def test_a_small_prompt_is_counted_at_once_and_exactly() -> None:
    from recorder.core.counts import count_request
    from recorder.proxy.tokenizers import counter_for

    found = counter_for("gpt-4o", "chat.completions")
    if found is None:
        pytest.skip("no exact tokenizer installed (the 'tokenizers' extra)")
    encoding, counter = found
    body = {
        "model": "gpt-4o",
        "stream": True,
        "messages": [{"role": "user", "content": "Count me exactly, 調和 harmony."}],
    }
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = make_flow(body=body)
        addon.requestheaders(flow)
        addon.request(flow)
        state = addon.streams.get(flow.id)
        assert state is not None
        assert len(flow.request.content or b"") < INLINE_PARSE_LIMIT
        # counted in the hook (a one-pass count of well under a microsecond): no
        # worker thread woken for it
        assert state.reading is None and addon._readers is None
        assert state.record.model == "gpt-4o"  # the facts are the record's at once
        counted = state.input_counts
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream_through(flow, [CHAT_SSE], clock)
        addon.response(flow)
        for _ in range(400):  # the record waits for the count, then is finished
            if sink.records:
                break
            await asyncio.sleep(0.01)
    (rec,) = sink.records
    want = count_request(
        flow.request.content or b"", "chat.completions", counter=counter, encoding=encoding
    )
    assert want is not None and want.text_tokens
    assert counted == want
    assert rec.input_breakdown == want.to_breakdown()
    assert rec.model == "gpt-4o" and rec.include_usage is False


async def test_the_walk_meters_what_waits_in_every_open_flow_and_changes_no_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pieces short of a batch are metered by the walk (a slice of flows per loop
    callback), not only when their flow ends: every open flow's meter has seen
    every piece soon after it passed, and the records are those of meters fed
    piece by piece. A flow that ends while the walk is under way is metered once,
    by its end."""
    from recorder.core.meter import StreamMeter
    from recorder.proxy import walk

    monkeypatch.setattr(walk, "WALK_SLICE", 7)  # several callbacks a walk
    addon, sink, clock = make()
    timers = timers_of(addon)
    pieces = pieces_of(CHAT_SSE, len(CHAT_SSE) // 100 + 1)  # cut anywhere, 100 pieces
    half = len(pieces) // 2
    # no batch fills: only the walk meters
    assert half < BATCH_PIECES and len(CHAT_SSE) < BATCH_BYTES

    def tap_of(flow: http.HTTPFlow) -> Tap:
        state = addon.streams.get(flow.id)
        assert state is not None and state.tap is not None
        return state.tap

    refs: dict[str, StreamMeter] = {}
    with taddons.context(addon):
        flows = [make_flow() for _ in range(12)]
        for flow in flows:
            await start(addon, flow, clock)
            state = addon.streams.get(flow.id)
            assert state is not None
            refs[flow.id] = StreamMeter("chat.completions", start=state.t0)
            flow.response = sse_response()
            refs[flow.id].headers(clock.now, 200)
            addon.responseheaders(flow)
        assert addon.walk.scheduled
        for piece in pieces[:half]:
            for flow in flows:
                clock.now += 0.001
                refs[flow.id].feed(piece, clock.now)
                assert flow.response.stream(piece) is piece  # type: ignore[union-attr,operator]
        assert all(tap_of(f).waiting for f in flows)
        timers.advance(WALK_S)  # one walk, in slices
        for flow in flows:
            assert not tap_of(flow).waiting
            assert addon.streams.get(flow.id).meter.events == refs[flow.id].events > 0  # type: ignore[union-attr]
        # the rest; the flows end while the next walk has slices to go
        for piece in pieces[half:]:
            for flow in flows:
                clock.now += 0.001
                refs[flow.id].feed(piece, clock.now)
                flow.response.stream(piece)  # type: ignore[union-attr,operator]
        due = timers.next_due
        assert due is not None
        clock.now = max(clock.now, due)
        assert timers.step()  # the walk's first slice
        assert timers.pending  # its other slices
        ends = {}
        for flow in flows:
            clock.now += 0.001
            ends[flow.id] = clock.now
            flow.response.stream(b"")  # type: ignore[union-attr,operator]
            addon.response(flow)
        assert addon.open_flows == 0
        timers.run_due()  # the rest of the walk: nothing left to meter
        assert not addon.walk.scheduled  # no open flow, no watcher: it stops
    assert len(sink.records) == len(flows)  # completed at once, in order
    for flow, rec in zip(flows, sink.records, strict=True):
        want = refs[flow.id].finish(ends[flow.id], ending="eof")
        assert {k: getattr(rec, k) for k in RECORD_FIGURES} == {
            k: getattr(want, k) for k in RECORD_FIGURES
        }


async def test_metering_that_fails_in_the_walk_marks_its_record_and_spares_the_others() -> None:
    """Metering that raises while the walk meters a flow's pieces: that stream is
    recorded without its events, saying why; the other flows of the same walk are
    metered; no exception leaves the walk, and the bytes still pass unchanged."""
    addon, sink, clock = make()
    pieces = pieces_of(CHAT_SSE, len(CHAT_SSE) // 20 + 1)
    with taddons.context(addon):
        flows = [make_flow() for _ in range(3)]
        for flow in flows:
            await start(addon, flow, clock)
            flow.response = sse_response()
            addon.responseheaders(flow)
        states = [addon.streams.get(flow.id) for flow in flows]
        bad = states[1]
        assert bad is not None and bad.tap is not None

        class Broken:  # a side decoder that fails on the walk's first piece
            backlog = False

            def decode(self, data: bytes, limit: int) -> bytes:
                raise RuntimeError("meter broke")

        bad.tap.decoder = Broken()  # type: ignore[assignment]
        for piece in pieces[:5]:
            for flow in flows:
                clock.now += 0.001
                assert flow.response.stream(piece) is piece  # type: ignore[union-attr,operator]
        timers_of(addon).advance(WALK_S)
        assert bad.tap.broken and "meter broke" in (bad.tap.unmetered or "")
        assert addon.health.internal_errors == 1
        for state in (states[0], states[2]):
            assert state is not None and state.tap is not None
            assert not state.tap.waiting and state.meter.events
        for piece in pieces[5:]:
            for flow in flows:
                assert flow.response.stream(piece) is piece  # type: ignore[union-attr,operator]
        for flow in flows:
            flow.response.stream(b"")  # type: ignore[union-attr,operator]
            addon.response(flow)
    assert [r.recorder_error is not None for r in sink.records] == [False, True, False]
