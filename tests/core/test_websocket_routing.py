"""The core of OpenAI over a WebSocket: a connection's conversation (which message
makes which response), the meter fed framed events, the Realtime usage and its
price."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from recorder.core.billing import complete_usage
from recorder.core.framing import Event
from recorder.core.meter import StreamMeter
from recorder.core.price_files import shipped_prices
from recorder.core.pricing import Unpriced, unpriced_kind
from recorder.core.protocols import realtime as realtime_module
from recorder.core.record import StreamRecord
from recorder.core.record_cost import cost_or_reason
from recorder.core.usage import from_openai_realtime
from recorder.core.websocket import (
    RealtimeConversation,
    ResponsesConversation,
    audio_bytes_per_second,
    message_type,
)
from tests.kit.websockets import (
    REALTIME_USAGE,
    create,
    realtime_session,
    realtime_turn,
    responses_captures,
    responses_turn,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Log:
    """Exchanges that write down what the conversation does with them."""

    def __init__(self) -> None:
        self.begun: list[tuple[int, float, bytes | None]] = []
        self.fed: dict[int, list[str]] = {}
        self.ended: list[int] = []
        self.kept: dict[int, int] = {}
        self.sessions: dict[int, tuple[str | None, float | None]] = {}

    def begin(self, now: float, request: bytes | None) -> int:
        n = len(self.begun)
        self.begun.append((n, now, request))
        self.fed[n] = []
        return n

    def feed(self, exchange: int, event: Event, now: float) -> None:
        self.fed[exchange].append(event.event)

    def keepalive(self, exchange: int, now: float) -> None:
        self.kept[exchange] = self.kept.get(exchange, 0) + 1

    def end(self, exchange: int, now: float) -> None:
        self.ended.append(exchange)

    def session(self, exchange: int, model: str | None, audio_bytes_per_s: float | None) -> None:
        self.sessions[exchange] = (model, audio_bytes_per_s)

    def quick(self, exchange: int) -> None:
        return None  # every message routed: what this log is for


def _b(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def test_message_type_reads_the_first_bytes_or_parses() -> None:
    assert message_type(b'{"type":"response.created","x":1}') == ("response.created", None)
    typ, obj = message_type(b'{"response": {"type": "no"}, "type": "response.done"}')
    assert typ == "response.done" and obj is not None
    assert message_type(b"not json") == (None, None)
    assert message_type(b'{"type": 3}')[0] is None


def test_responses_one_response_per_create_through_its_terminal_event() -> None:
    log = Log()
    conv: ResponsesConversation[int] = ResponsesConversation(log)
    conv.server(_b({"type": "response.output_text.delta", "delta": "stray"}), 0.5)
    for n in range(2):
        conv.client(_b(create()), 1.0 + n)
        for event in responses_turn(f"r{n}", ["a", "b"]):
            conv.server(_b(event), 1.5 + n)
    assert [b[0] for b in log.begun] == [0, 1] and log.ended == [0, 1]
    assert log.fed[0] == [
        "response.created",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.completed",
    ]
    assert list(conv.open()) == [] and conv.responses == 2


def test_responses_lanes_are_served_first_come_each_apart() -> None:
    log = Log()
    conv: ResponsesConversation[int] = ResponsesConversation(log)
    conv.client(_b(create(stream_id="a")), 1.0)
    conv.client(_b(create(stream_id="b")), 1.0)
    a = responses_turn("ra", ["1", "2", "3"], stream_id="a")
    b = responses_turn("rb", ["x"], stream_id="b")
    for ea, eb in zip(a, b + [None] * len(a), strict=False):
        conv.server(_b(ea), 2.0)
        if eb is not None:
            conv.server(_b(eb), 2.0)
    assert len(log.fed[0]) == 5 and len(log.fed[1]) == 3
    assert sorted(log.ended) == [0, 1]


def test_responses_error_before_created_ends_the_response_after_does_not() -> None:
    log = Log()
    conv: ResponsesConversation[int] = ResponsesConversation(log)
    conv.client(_b(create()), 1.0)
    conv.server(_b({"type": "error", "error": {"code": "bad"}}), 1.1)
    assert log.ended == [0]
    conv.client(_b(create()), 2.0)
    events = responses_turn("r1", ["a"], terminal="response.failed")
    conv.server(_b(events[0]), 2.1)
    conv.server(_b({"type": "error", "error": {"code": "server_error"}}), 2.2)
    assert log.ended == [0]
    for event in events[1:]:
        conv.server(_b(event), 2.3)
    assert log.ended == [0, 1] and log.fed[1][1] == "error"


def test_responses_a_successor_the_server_began_is_a_response_of_its_own() -> None:
    log = Log()
    conv: ResponsesConversation[int] = ResponsesConversation(log)
    conv.client(_b(create()), 1.0)
    for event in responses_turn("r0", ["a"], terminal="response.incomplete"):
        conv.server(_b(event), 1.5)
    for event in responses_turn("r1", ["b"]):  # steered: no response.create of its own
        conv.server(_b(event), 3.0)
    assert [(b[0], b[1], b[2] is None) for b in log.begun] == [(0, 1.0, False), (1, 3.0, True)]
    assert log.ended == [0, 1]


def test_realtime_responses_by_id_and_the_session() -> None:
    log = Log()
    conv: RealtimeConversation[int] = RealtimeConversation(log)
    conv.server(_b(realtime_session("gpt-realtime-2025-08-28")), 0.1)
    conv.client(_b({"type": "response.create"}), 1.0)
    turn = realtime_turn("ra", ["x", "y"])
    for event in turn:
        conv.server(_b(event), 1.5)
    conv.server(_b({"type": "input_audio_buffer.speech_started"}), 2.0)
    assert log.ended == [0] and len(log.fed[0]) == len(turn)
    assert log.sessions[0] == ("gpt-realtime-2025-08-28", 48_000.0)
    conv.keepalive(3.0)
    assert log.kept == {}
    conv.client(_b({"type": "response.create"}), 4.0)
    conv.keepalive(4.5)
    assert log.kept == {1: 1}
    assert conv.close() == [1] and list(conv.open()) == []


def test_realtime_error_names_the_waiting_response_create() -> None:
    log = Log()
    conv: RealtimeConversation[int] = RealtimeConversation(log)
    conv.client(_b({"type": "response.create", "event_id": "c1"}), 1.0)
    conv.server(_b({"type": "error", "error": {"code": "x", "event_id": "other"}}), 1.1)
    assert log.ended == []
    conv.server(_b({"type": "error", "error": {"code": "x", "event_id": "c1"}}), 1.2)
    assert log.ended == [0] and log.fed[0] == ["error"]


@pytest.mark.parametrize(
    ("session", "rate"),
    [
        ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}}}}, 48_000.0),
        ({"audio": {"output": {"format": {"type": "audio/pcmu"}}}}, 8_000.0),
        ({"output_audio_format": "pcm16"}, 48_000.0),
        ({"output_audio_format": "g711_alaw"}, 8_000.0),
        ({"output_audio_format": "opus"}, None),
        ({}, None),
    ],
)
def test_the_output_audio_rate_a_session_says(session: dict[str, Any], rate: float | None) -> None:
    assert audio_bytes_per_second(session) == rate


def _meter_events(endpoint: str, messages: list[bytes], *, start: float = 0.0) -> StreamRecord:
    meter = StreamMeter(endpoint, start=start)
    for n, data in enumerate(messages):
        typ, _ = message_type(data)
        meter.feed_event(Event(typ or "message", data, None, None), start + 0.01 * (n + 1))
    return meter.finish(start + 0.01 * (len(messages) + 1))


@pytest.mark.parametrize("path", list(responses_captures()), ids=lambda p: p.name)
def test_a_captured_responses_stream_fed_as_messages_meters_as_its_sse_body(path: Path) -> None:
    """Each real capture's events as WebSocket messages, and framed as SSE, each
    event in a piece of its own at the same times: the same record."""
    messages = [line for line in path.read_bytes().splitlines() if line.strip()]
    over_ws = _meter_events("responses", messages)
    meter = StreamMeter("responses", start=0.0)
    for n, data in enumerate(messages):
        typ, _ = message_type(data)
        meter.feed(
            b"event: " + (typ or "message").encode() + b"\ndata: " + data + b"\n\n", 0.01 * (n + 1)
        )
    over_sse = meter.finish(0.01 * (len(messages) + 1))
    assert over_ws.to_dict(with_gaps=True) == over_sse.to_dict(with_gaps=True)


@pytest.mark.parametrize("fast", [True, False])
def test_realtime_interpreter_reads_a_response(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    monkeypatch.setattr(realtime_module, "FAST_PATH", fast)
    turn = realtime_turn("resp_1", ["Hello", " wor", "ld"], audio_chunks=2, audio_bytes=2400)
    rec = _meter_events("realtime", [_b(e) for e in turn])
    assert rec.outcome == "completed" and rec.finish_reason == "completed"
    assert rec.output_chars == len("Hello world") and rec.response_id == "resp_1"
    assert rec.output_audio_ms == pytest.approx(100.0)  # 4,800 bytes at 48,000 a second
    assert rec.ttft_ms == pytest.approx(20.0)  # the first audio delta
    assert (rec.input_tokens, rec.output_tokens, rec.output_audio_tokens) == (132, 121, 91)


@pytest.mark.parametrize(
    ("status", "reason", "outcome", "finish"),
    [
        ("cancelled", "turn_detected", "incomplete", "turn_detected"),
        ("incomplete", "max_output_tokens", "incomplete", "max_output_tokens"),
        ("failed", None, "error", None),
    ],
)
def test_realtime_response_done_statuses(
    status: str, reason: str | None, outcome: str, finish: str | None
) -> None:
    turn = realtime_turn("r", ["a"], status=status, reason=reason)
    rec = _meter_events("realtime", [_b(e) for e in turn])
    assert rec.outcome == outcome and rec.finish_reason == finish


def test_realtime_usage_with_and_without_its_modality_split() -> None:
    full = from_openai_realtime(REALTIME_USAGE)
    assert (full.input_tokens, full.cache_read_tokens, full.output_tokens) == (132, 64, 121)
    assert (full.input_audio_tokens, full.cache_read_audio_tokens, full.output_audio_tokens) == (
        13,
        0,
        91,
    )
    bare = from_openai_realtime({"input_tokens": 10, "output_tokens": 5})
    assert (bare.input_tokens, bare.output_tokens) == (10, 5)
    assert bare.input_audio_tokens is None and bare.output_audio_tokens is None


def _realtime_record(**fields: Any) -> StreamRecord:
    return StreamRecord(endpoint="realtime", model="gpt-realtime", **fields)


def test_a_realtime_response_is_priced_at_the_audio_rates() -> None:
    table = shipped_prices()
    rec = _realtime_record(
        input_tokens=1000,
        cache_read_tokens=300,
        output_tokens=500,
        input_audio_tokens=600,
        cache_read_audio_tokens=200,
        input_image_tokens=100,
        cache_read_image_tokens=0,
        output_audio_tokens=400,
    )
    cost = cost_or_reason(rec, table)
    assert cost is not None
    # text: 300 in (100 of them cached) and 100 out; audio: 600 in (200 cached) and
    # 400 out; images: 100 in
    expected = (
        Decimal(200) * Decimal("0.000004")
        + Decimal(100) * Decimal("0.0000004")
        + Decimal(400) * Decimal("0.000032")
        + Decimal(200) * Decimal("0.0000004")
        + Decimal(100) * Decimal("0.000005")
        + Decimal(100) * Decimal("0.000016")
        + Decimal(400) * Decimal("0.000064")
    )
    assert Decimal(cost.usd) == expected


def test_an_audio_model_without_the_modality_split_is_unpriced_not_priced_as_text() -> None:
    table = shipped_prices()
    with pytest.raises(Unpriced) as e:
        cost_or_reason(_realtime_record(input_tokens=100, output_tokens=50), table)
    assert unpriced_kind(str(e.value)) == "modality"
    chat = StreamRecord(
        endpoint="chat.completions", model="gpt-4o", input_tokens=100, output_tokens=5
    )
    assert cost_or_reason(chat, table) is not None  # nothing changes for a model without audio
    audio_on_text_model = StreamRecord(
        model="gpt-4o",
        input_tokens=100,
        output_tokens=50,
        output_audio_tokens=20,
        input_audio_tokens=0,
    )
    with pytest.raises(Unpriced, match="no audio-token rate"):
        cost_or_reason(audio_on_text_model, table)


def test_a_cut_realtime_response_estimates_its_audio_at_one_token_per_50_ms() -> None:
    rec = _realtime_record(
        outcome="upstream_disconnect",
        http_status=101,
        events=5,
        output_chars=12,
        output_audio_ms=1010.0,
    )
    rec.output_breakdown = None
    complete_usage(rec, None, None, shipped_prices(), None)
    assert rec.output_audio_tokens == 21
    assert rec.output_source == "estimated" and (rec.output_tokens or 0) > 21
    assert rec.estimate_method is not None and rec.estimate_method.endswith("+audio-from-duration")
    assert rec.input_source == "none" and rec.cost_usd is not None
