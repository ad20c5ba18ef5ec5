"""The WebSocket hooks (recorder.proxy.websocket) with mitmproxy's test flows and a
fake clock: each response of a connection one record, with the life of an HTTP
exchange; endings; keepalives; memory per connection."""

from __future__ import annotations

import logging
import sys
from collections import deque
from typing import Any

import pytest
from mitmproxy.flow import Error

from recorder.core.price_files import shipped_prices
from recorder.core.record import StreamRecord
from recorder.proxy.addon import Recorder
from recorder.proxy.websocket import UPGRADES_KEPT, Connection
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


def _records(sink: Any) -> list[StreamRecord]:
    return list(sink.records)


def _responses(
    addon: Recorder, flow: Any, clock: Clock, rid: str, text: list[str], **kw: Any
) -> None:
    send(addon, flow, create(), clock, client=True)
    for event in responses_turn(rid, text, **kw):
        send(addon, flow, event, clock)


def test_each_response_create_through_its_terminal_event_is_one_record() -> None:
    addon, sink, clock = make(prices=shipped_prices())
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    _responses(addon, flow, clock, "resp_1", ["Hel", "lo"])
    _responses(addon, flow, clock, "resp_2", ["A", "B", "C"])
    close(addon, flow, by_client=True)
    first, second = _records(sink)
    for rec, rid, out in ((first, "resp_1", 2), (second, "resp_2", 3)):
        assert rec.endpoint == "responses" and rec.provider == "openai"
        assert rec.transport == "websocket" and rec.streamed is True
        assert rec.outcome == "completed" and rec.interrupted is False
        assert rec.http_status == 101 and rec.request_id == "req_ws_1"
        assert rec.response_id == rid and rec.model == "gpt-5"
        assert rec.response_model == "gpt-5-2025-08-07"
        assert (rec.input_tokens, rec.output_tokens) == (12, out)
        assert rec.usage_source == "reported" and rec.cost_usd is not None
        assert rec.connection_id == flow.id and rec.api_key_id is not None
        assert rec.events == out + 2
        # from the client's response.create to the first delta: two messages later
        assert rec.ttft_ms == pytest.approx(20.0)
        assert rec.first_event_ms == pytest.approx(10.0)
        assert rec.ttfb_ms is None
    assert first.id != second.id
    assert addon.open_flows == 0 and len(addon.websockets) == 0
    assert addon.health.websocket_connections == 1
    assert addon.health.websocket_connections_without_response == 0


def test_the_meter_reads_a_response_as_the_sse_form_reads_it() -> None:
    """The same events over the WebSocket and as an SSE body: the same facts."""
    from tests.kit.flows import make_flow, sse_response, stream_through

    events = responses_turn("resp_9", ["Hello", ", ", "world"])
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    for event in events:
        send(addon, flow, event, clock)
    metered(addon)
    over_ws = _records(sink)[0]

    import asyncio

    import orjson

    from tests.kit.flows import start

    addon2, sink2, clock2 = make()
    http_flow = make_flow("/v1/responses", {"model": "gpt-5", "stream": True, "input": "Say hello"})
    asyncio.run(start(addon2, http_flow, clock2))
    http_flow.response = sse_response()
    addon2.responseheaders(http_flow)
    body = [
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    ]
    stream_through(http_flow, body, clock2)
    addon2.response(http_flow)
    over_sse = _records(sink2)[0]
    for name in (
        "outcome",
        "events",
        "output_chars",
        "input_tokens",
        "output_tokens",
        "response_id",
        "response_model",
        "finish_reason",
        "model",
        "output_breakdown",
    ):
        assert getattr(over_ws, name) == getattr(over_sse, name), name
    assert over_ws.transport == "websocket" and over_sse.transport == "sse"


def test_realtime_responses_are_records_of_their_own_with_the_modality_split() -> None:
    addon, sink, clock = make(prices=shipped_prices())
    flow = ws_flow("/v1/realtime?model=gpt-realtime")
    addon.websocket_start(flow)
    send(addon, flow, realtime_session(), clock)
    send(addon, flow, {"type": "input_audio_buffer.append", "audio": "AAAA"}, clock, client=True)
    send(addon, flow, {"type": "response.create"}, clock, client=True)
    for event in realtime_turn("resp_r1", ["Hi", " there"], audio_chunks=2, audio_bytes=4800):
        send(addon, flow, event, clock)
    send(addon, flow, {"type": "rate_limits.updated", "rate_limits": []}, clock)
    close(addon, flow, by_client=True)
    (rec,) = _records(sink)
    assert rec.endpoint == "realtime" and rec.provider == "openai" and rec.transport == "websocket"
    assert rec.model == "gpt-realtime" and rec.response_model == "gpt-realtime-2025-08-28"
    assert rec.outcome == "completed" and rec.response_id == "resp_r1"
    assert (rec.input_tokens, rec.cache_read_tokens, rec.output_tokens) == (132, 64, 121)
    assert (rec.input_audio_tokens, rec.cache_read_audio_tokens) == (13, 0)
    assert (rec.input_image_tokens, rec.cache_read_image_tokens) == (0, 0)
    assert rec.output_audio_tokens == 91
    assert rec.output_audio_ms == pytest.approx(200.0)  # 9,600 bytes of pcm16 at 24 kHz
    assert rec.output_chars == len("Hi there")
    # text: 119-64 uncached at $4/M, 64 cached at $0.40/M, 30 out at $16/M;
    # audio: 13 in at $32/M, 91 out at $64/M (gpt-realtime's rates)
    expected = (55 * 4 + 64 * 0.4 + 30 * 16 + 13 * 32 + 91 * 64) / 1e6
    assert float(rec.cost_usd or "nan") == pytest.approx(expected)
    # the first output is the first audio delta: two messages after response.create
    assert rec.ttft_ms == pytest.approx(20.0)
    assert rec.events == 2 + 2 + 2  # created, 2 audio, 2 transcript, done (not rate limits)


def test_a_realtime_response_the_server_began_starts_at_its_response_created() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/realtime?model=gpt-realtime")
    addon.websocket_start(flow)
    send(addon, flow, {"type": "input_audio_buffer.speech_stopped"}, clock, step=5.0)
    for event in realtime_turn("resp_vad", ["ok"], audio_chunks=1):
        send(addon, flow, event, clock)
    close(addon, flow, by_client=True)
    (rec,) = _records(sink)
    assert rec.outcome == "completed" and rec.first_event_ms == 0.0
    assert rec.ttft_ms == pytest.approx(10.0)


def test_out_of_band_realtime_responses_side_by_side_are_told_apart_by_id() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/realtime?model=gpt-realtime")
    addon.websocket_start(flow)
    send(addon, flow, {"type": "response.create"}, clock, client=True)
    send(
        addon,
        flow,
        {"type": "response.create", "response": {"conversation": "none"}},
        clock,
        client=True,
    )
    a = realtime_turn("resp_a", ["one", "two"], audio_chunks=0, usage=None)
    b = realtime_turn("resp_b", ["x"], audio_chunks=0, usage=None)
    send(addon, flow, a[0], clock)
    send(addon, flow, b[0], clock)
    for ea, eb in zip(a[1:], b[1:], strict=False):
        send(addon, flow, ea, clock)
        send(addon, flow, eb, clock)
    for rest in a[len(b) :]:
        send(addon, flow, rest, clock)
    close(addon, flow, by_client=True)
    recs = {r.response_id: r for r in _records(sink)}
    assert set(recs) == {"resp_a", "resp_b"}
    assert recs["resp_a"].output_chars == len("onetwo") and recs["resp_b"].output_chars == 1
    assert recs["resp_a"].events == 4 and recs["resp_b"].events == 3


@pytest.mark.parametrize(
    ("by_client", "code", "outcome"),
    [
        (True, 1000, "client_disconnect"),
        (False, 1011, "upstream_disconnect"),
        (False, 1006, "upstream_disconnect"),
    ],
)
def test_a_connection_closed_mid_response_is_that_responses_disconnect(
    by_client: bool, code: int, outcome: str
) -> None:
    addon, sink, clock = make(prices=shipped_prices())
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    _responses(addon, flow, clock, "resp_1", ["done"])
    send(addon, flow, create(), clock, client=True)
    for event in responses_turn("resp_2", ["cut", " here", " now"])[:3]:
        send(addon, flow, event, clock)
    close(addon, flow, by_client=by_client, code=code)
    first, cut = _records(sink)
    assert first.outcome == "completed" and first.usage_source == "reported"
    assert cut.outcome == outcome and cut.interrupted is True
    assert cut.transport_error is not None and str(code) in cut.transport_error
    assert cut.output_source == "estimated" and (cut.output_tokens or 0) >= 1
    assert cut.input_source == "estimated"  # from the response.create's input
    assert cut.cost_usd is not None


def test_a_realtime_response_cut_mid_audio_estimates_its_audio_from_the_duration() -> None:
    addon, sink, clock = make(prices=shipped_prices())
    flow = ws_flow("/v1/realtime?model=gpt-realtime")
    addon.websocket_start(flow)
    send(addon, flow, realtime_session(), clock)
    send(addon, flow, {"type": "response.create"}, clock, client=True)
    events = realtime_turn("resp_cut", ["Hello", " the", "re"], audio_chunks=3, audio_bytes=48_000)
    for event in events[:-1]:
        send(addon, flow, event, clock)
    close(addon, flow, by_client=False, code=1006)
    (rec,) = _records(sink)
    assert rec.outcome == "upstream_disconnect"
    assert rec.output_audio_ms == pytest.approx(3000.0)  # 3 s of pcm16 at 24 kHz
    assert rec.output_audio_tokens == 60  # one token per 50 ms
    assert rec.output_source == "estimated" and (rec.output_tokens or 0) > 60
    assert rec.estimate_method is not None and "+audio-from-duration" in rec.estimate_method
    assert rec.input_source == "none"  # the conversation is the server's: not estimated
    assert rec.cost_usd is not None


def test_a_connection_that_carried_no_response_is_counted_not_recorded() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/realtime?model=gpt-realtime")
    addon.websocket_start(flow)
    send(addon, flow, realtime_session(), clock)
    send(addon, flow, {"type": "session.update", "session": {}}, clock, client=True)
    close(addon, flow, by_client=True)
    assert _records(sink) == []
    assert addon.health.websocket_connections == 1
    assert addon.health.websocket_connections_without_response == 1
    assert addon.stats()["websocket_connections_without_response"] == 1


def test_a_refused_response_create_is_an_error_record_and_the_connection_goes_on() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    err = {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "previous_response_not_found",
            "message": "Previous response not found",
        },
    }
    send(addon, flow, err, clock)
    _responses(addon, flow, clock, "resp_ok", ["fine"])
    close(addon, flow, by_client=True)
    refused, ok = _records(sink)
    assert refused.outcome == "error" and refused.error_code == "previous_response_not_found"
    assert ok.outcome == "completed" and ok.response_id == "resp_ok"


def test_a_realtime_error_naming_the_response_create_ends_it() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/realtime?model=gpt-realtime")
    addon.websocket_start(flow)
    send(addon, flow, {"type": "response.create", "event_id": "client_7"}, clock, client=True)
    err = {
        "type": "error",
        "event_id": "e1",
        "error": {
            "type": "invalid_request_error",
            "code": "conversation_already_has_active_response",
            "message": "busy",
            "event_id": "client_7",
        },
    }
    send(addon, flow, err, clock)
    close(addon, flow, by_client=True)
    (rec,) = _records(sink)
    assert rec.outcome == "error" and rec.error_code == "conversation_already_has_active_response"
    assert addon.open_flows == 0


def test_output_silence_is_a_stall_as_over_sse() -> None:
    addon, sink, clock = make(stall_after=5.0)
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    events = responses_turn("resp_s", ["a", "b"])
    send(addon, flow, events[0], clock)
    send(addon, flow, events[1], clock)
    send(addon, flow, events[2], clock, step=7.0)
    send(addon, flow, events[3], clock)
    close(addon, flow, by_client=True)
    (rec,) = _records(sink)
    assert rec.stalls == 1 and rec.stall_ms == pytest.approx(7000.0)
    assert rec.max_output_gap_ms == pytest.approx(7000.0)


def test_pings_and_pongs_mitmproxy_logs_are_keepalives_of_the_open_response() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses", peer=("127.0.0.1", 51234))
    other = ws_flow("/v1/responses", peer=("127.0.0.1", 59999))
    logger = logging.getLogger(LOGGER)
    handlers, level = list(logger.handlers), logger.level
    addon.websocket_start(flow)
    addon.websocket_start(other)
    send(addon, flow, create(), clock, client=True)
    events = responses_turn("resp_p", ["a"])
    send(addon, flow, events[0], clock)
    for what in ("ping from client", "pong from server", "ping from client"):
        clock.now += 1.0
        logger.info(
            f"Received WebSocket {what} (payload: b'')", extra={"client": ("127.0.0.1", 51234)}
        )
    logger.info(
        "Received WebSocket ping from client (payload: b'')", extra={"client": ("127.0.0.1", 1)}
    )
    for event in events[1:]:
        send(addon, flow, event, clock)
    close(addon, flow, by_client=True)
    close(addon, other, by_client=True)
    (rec,) = _records(sink)
    assert rec.keepalives == 3
    assert rec.max_keepalive_gap_ms == pytest.approx(1000.0)
    # the watch is gone with the last connection, and the logger's level is back
    assert (logger.handlers, logger.level) == (handlers, level)


def test_shutdown_mid_response_records_it_once() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    send(addon, flow, responses_turn("resp_x", ["a"])[0], clock)
    addon.done()
    close(addon, flow, by_client=False)  # mitmproxy ends the connection after `done`
    (rec,) = _records(sink)
    assert rec.outcome == "client_disconnect" and rec.transport_error == "proxy shut down"
    assert addon.health.websocket_connections == 1


def test_a_browser_key_in_the_subprotocol_is_fingerprinted_and_masked() -> None:
    key = "sk-browser-secret-0123456789"
    addon, sink, clock = make()
    flow = ws_flow(
        "/v1/realtime?model=gpt-realtime",
        headers=[(b"sec-websocket-protocol", f"realtime, openai-insecure-api-key.{key}".encode())],
    )
    addon.websocket_start(flow)
    send(addon, flow, {"type": "response.create", "event_id": "c1"}, clock, client=True)
    err = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": "bad",
            "message": f"key {key} is bad",
            "event_id": "c1",
        },
    }
    send(addon, flow, err, clock)
    close(addon, flow, by_client=True)
    (rec,) = _records(sink)
    assert rec.api_key_id is not None and rec.api_key_id.startswith("…6789:")
    assert key not in (rec.error_message or "") and "[api key]" in (rec.error_message or "")


def test_every_response_of_a_connection_is_from_its_caller() -> None:
    """Who a connection's responses are from is read once, from its upgrade request:
    each record has the key's fingerprint, project, session and tags, the tags its
    own to replace; the key is masked in the last response as in the first; the
    upgrade request rewritten later (another addon) changes none of it."""
    key = "sk-proj-caller-0123456789abcdef"
    addon, sink, clock = make(tag_headers={"x-team": "team"})
    flow = ws_flow(
        "/v1/responses",
        headers=[
            (b"authorization", f"Bearer {key}".encode()),
            (b"openai-project", b"proj_ws"),
            (b"x-session-id", b"sess_ws"),
            (b"x-team", b"search"),
        ],
    )
    addon.websocket_start(flow)
    _responses(addon, flow, clock, "resp_1", ["Hi"])
    flow.request.headers["authorization"] = "Bearer sk-proj-someone-else-000000000000"
    flow.request.headers["openai-project"] = "proj_other"
    _responses(addon, flow, clock, "resp_2", ["A", "B"])
    send(addon, flow, create(), clock, client=True)
    refusal = {
        "type": "error",
        "error": {"type": "invalid_request_error", "code": "bad", "message": f"{key} is bad"},
    }
    send(addon, flow, refusal, clock)
    close(addon, flow, by_client=True)
    recs = _records(sink)
    assert len(recs) == 3 and recs[2].outcome == "error"
    fingerprint = recs[0].api_key_id
    assert fingerprint is not None and fingerprint.startswith("…cdef:")
    for rec in recs:
        assert (rec.api_key_id, rec.project, rec.session_id) == (fingerprint, "proj_ws", "sess_ws")
        assert rec.tags == {"team": "search"}
    assert recs[0].tags is not recs[1].tags
    assert key not in (recs[2].error_message or "")
    assert "[api key]" in (recs[2].error_message or "")


def test_an_upgrade_s_tag_headers_are_read_then_stripped_as_a_post_s_are() -> None:
    """``--strip-tag-headers``: the upgrade request goes on without its tag headers,
    and each response of the connection is tagged by them (read at requestheaders,
    before they were taken out)."""
    addon, sink, clock = make(tag_headers={"x-team": "team"}, strip_tag_headers=True)
    flow = ws_flow(
        "/v1/responses",
        headers=[
            (b"authorization", b"Bearer sk-test-key-1234"),
            (b"x-team", b"search"),
            (b"x-recorder-tag", b"app=codex"),
            (b"upgrade", b"websocket"),
        ],
    )
    addon.requestheaders(flow)
    assert "x-team" not in flow.request.headers
    assert "x-recorder-tag" not in flow.request.headers
    assert flow.request.headers["authorization"] == "Bearer sk-test-key-1234"
    addon.response(flow)  # the 101, before websocket_start (its flow.websocket set)
    addon.websocket_start(flow)
    assert addon.websockets.upgrades_waiting == 0
    _responses(addon, flow, clock, "resp_1", ["Hi"])
    _responses(addon, flow, clock, "resp_2", ["A"])
    close(addon, flow, by_client=True)
    recs = _records(sink)
    assert [r.tags for r in recs] == [{"app": "codex", "team": "search"}] * 2


@pytest.mark.parametrize("how", ["refused", "broken"])
def test_an_upgrade_that_never_becomes_a_connection_is_forgotten(how: str) -> None:
    addon, sink, _clock = make()
    flows = []
    for _ in range(3):
        flow = ws_flow("/v1/realtime?model=gpt-realtime", headers=[(b"upgrade", b"websocket")])
        flow.websocket = None  # not upgraded (yet)
        addon.requestheaders(flow)
        flows.append(flow)
    assert addon.websockets.upgrades_waiting == 3
    for flow in flows:
        if how == "refused":
            assert flow.response is not None
            flow.response.status_code = 401
            addon.response(flow)
        else:
            flow.error = Error("connection reset")
            addon.error(flow)
    assert addon.websockets.upgrades_waiting == 0 and not sink.records


def test_upgrades_waiting_are_bounded() -> None:
    addon, _sink, _clock = make()
    for _ in range(UPGRADES_KEPT + 10):
        flow = ws_flow("/v1/responses", headers=[(b"upgrade", b"websocket")])
        addon.requestheaders(flow)  # never answered: a client that hangs up silently
    assert addon.websockets.upgrades_waiting == UPGRADES_KEPT


def _deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by ``obj`` and what it alone refers to (slots, dicts, sequences),
    stopping at the flow and at the recorder (shared, not the connection's)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or type(obj).__module__.startswith(("mitmproxy", "logging")):
        return 0
    if isinstance(obj, Recorder) or type(obj).__name__ in ("WebSockets", "RecordMaker"):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        return size + sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | deque | frozenset):
        return size + sum(_deep_size(v, seen) for v in obj)
    for name in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, name):
            size += _deep_size(getattr(obj, name), seen)
    if hasattr(obj, "__dict__"):
        size += _deep_size(vars(obj), seen)
    return size


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/realtime?model=gpt-realtime"])
def test_a_connection_keeps_no_memory_per_finished_response(path: str) -> None:
    addon, sink, clock = make()
    flow = ws_flow(path)
    addon.websocket_start(flow)
    conn = addon.websockets.connection(flow.id)
    assert isinstance(conn, Connection)
    sizes = []
    for n in range(1000):
        if path.startswith("/v1/responses"):
            _responses(addon, flow, clock, f"resp_{n:04d}", ["a", "b"])
        else:
            send(addon, flow, {"type": "response.create"}, clock, client=True)
            for event in realtime_turn(f"resp_{n:04d}", ["a", "b"], audio_chunks=1, audio_bytes=48):
                send(addon, flow, event, clock)
        if n in (9, 999):
            metered(addon)  # (the messages held for their batch: BATCH_MESSAGES at most)
            sizes.append(_deep_size(conn))
        flow.websocket.messages.clear()  # (mitmproxy's own list: not the recorder's)
    close(addon, flow, by_client=True)
    assert len(_records(sink)) == 1000
    assert sizes[0] == sizes[1]
    assert addon.open_flows == 0 and addon.finishing.waiting == 0
    assert timers_of(addon).pending <= 1  # the walk, at most


def test_with_finish_delay_records_are_completed_later_in_order() -> None:
    addon, sink, clock = make(finish_delay=0.25)
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    for n in range(3):
        _responses(addon, flow, clock, f"resp_{n}", ["x"])
    close(addon, flow, by_client=True)
    assert _records(sink) == []
    timers_of(addon).advance(1.0)
    assert [r.response_id for r in _records(sink)] == ["resp_0", "resp_1", "resp_2"]


def test_an_unmetered_websocket_path_is_left_alone() -> None:
    addon, sink, clock = make()
    flow = ws_flow("/socket.io/")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    close(addon, flow, by_client=True)
    assert _records(sink) == [] and addon.health.websocket_connections == 0


def test_the_live_view_shows_websocket_responses_while_open_and_their_lines() -> None:
    """/streams has the open response (its transport, its stall while it lasts); the
    console line of each finished one says ws; the stall is said once."""
    import io

    from recorder.proxy.live import Live

    addon, sink, clock = make(stall_after=5.0)
    out = io.StringIO()
    live = Live(addon, out=out, wall=lambda: 1_790_000_000.0)
    flow = ws_flow("/v1/responses")
    addon.websocket_start(flow)
    send(addon, flow, create(), clock, client=True)
    events = responses_turn("resp_live", ["a", "b"])
    send(addon, flow, events[0], clock)
    send(addon, flow, events[1], clock)
    clock.now += 6.0
    live.tick()
    (row,) = live.snapshot()["open"]
    assert row["transport"] == "websocket" and row["endpoint"] == "responses"
    assert row["stalled"] is True and row["output_chars"] == 1
    for event in events[2:]:
        send(addon, flow, event, clock)
    close(addon, flow, by_client=True)
    lines = out.getvalue().splitlines()
    assert any(" stall: " in line for line in lines)
    (line,) = [ln for ln in lines if " completed " in ln]
    assert " responses ws gpt-5 101 completed " in line
    assert live.snapshot()["finished"][0]["transport"] == "websocket"
    assert len(_records(sink)) == 1
