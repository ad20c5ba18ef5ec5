"""Bedrock's two protocols metered from their event streams: real ConverseStream
captures, InvokeModel's base64 chunks (Anthropic's Messages events inside, and
another family's by its metrics), exceptions after status 200, damage. Expected
figures come from botocore's reading of the body and plain ``json``."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from botocore.eventstream import EventStreamBuffer

from recorder.core.billing import absorb
from recorder.core.eventstream import encode_message
from recorder.core.meter import StreamMeter
from recorder.core.protocols import converse
from recorder.core.protocols.invoke_model import InvokeModelInterpreter
from recorder.core.record import StreamRecord

FIXTURES = Path(__file__).parents[2] / "fixtures" / "bedrock"
CAPTURE = FIXTURES / "converse_stream_nova_micro.bin"
CAPTURES = sorted(FIXTURES.glob("converse_stream_*.bin"))


def payloads(body: bytes) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    buf = EventStreamBuffer()
    buf.add_data(body)
    return [(m.headers[":event-type"], json.loads(m.payload)) for m in buf]


def meter(endpoint: str, pieces: list[bytes]) -> StreamRecord:
    m = StreamMeter(endpoint, start=0.0)
    m.headers(0.1, 200)
    for i, piece in enumerate(pieces):
        m.feed(piece, 0.2 + i * 0.01)
    rec = m.finish(5.0)
    absorb(rec, m.interpreter.obs, None)  # what billing copies (the cache writes by lifetime)
    return rec


def splits(body: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), 40))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


@pytest.mark.parametrize("capture", CAPTURES, ids=[p.stem for p in CAPTURES])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
def test_the_real_converse_captures(
    capture: Path, how: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every real capture, whole, byte by byte and at random splits, with the
    template fast path and without: the figures botocore's reading gives."""
    monkeypatch.setattr(converse, "FAST_PATH", fast)
    body = capture.read_bytes()
    events = payloads(body)
    deltas = [p["delta"] for n, p in events if n == "contentBlockDelta"]
    text = "".join(d.get("text", "") for d in deltas)
    reasoning = "".join(d.get("reasoningContent", {}).get("text", "") for d in deltas)
    meta = events[-1][1]
    if how == "whole":
        pieces = [body]
    elif how == "bytes":
        pieces = [body[i : i + 1] for i in range(len(body))]
    else:
        pieces = splits(body, 7)
    rec = meter("converse", pieces)
    assert (rec.endpoint, rec.provider, rec.outcome) == ("converse", "aws.bedrock", "completed")
    assert rec.events == len(events)
    assert rec.output_chars == len(text) + len(reasoning)
    assert (rec.output_breakdown or {}).get("reasoning", 0) == len(reasoning)
    assert rec.input_tokens == meta["usage"]["inputTokens"]
    assert rec.output_tokens == meta["usage"]["outputTokens"]
    assert rec.finish_reason == events[-2][1]["stopReason"]
    assert rec.provider_latency_ms == meta["metrics"]["latencyMs"]
    assert rec.parse_issues == 0


def msg(name: str, obj: object, mtype: str = "event") -> bytes:
    key = ":exception-type" if mtype == "exception" else ":event-type"
    return encode_message(
        {key: name, ":content-type": "application/json", ":message-type": mtype},
        json.dumps(obj).encode(),
    )


def chunk(obj: object) -> bytes:
    return msg("chunk", {"bytes": base64.b64encode(json.dumps(obj).encode()).decode(), "p": "ab"})


ANTHROPIC = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_bdrk_01",
            "model": "claude-sonnet-4-5-20250929",
            "usage": {
                "input_tokens": 12,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 50,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 20,
                    "ephemeral_1h_input_tokens": 30,
                },
                "output_tokens": 1,
            },
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " world"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
    {
        "type": "message_stop",
        "amazon-bedrock-invocationMetrics": {
            "inputTokenCount": 12,
            "outputTokenCount": 9,
            "invocationLatency": 812,
            "firstByteLatency": 301,
            "cacheReadInputTokenCount": 100,
            "cacheWriteInputTokenCount": 50,
        },
    },
]


@pytest.mark.parametrize("how", ["whole", "bytes"])
def test_invoke_model_reads_anthropic_messages_inside_the_chunks(how: str) -> None:
    body = b"".join(chunk(e) for e in ANTHROPIC)
    pieces = [body] if how == "whole" else [body[i : i + 1] for i in range(len(body))]
    rec = meter("invoke_model", pieces)
    assert (rec.endpoint, rec.outcome, rec.finish_reason) == (
        "invoke_model",
        "completed",
        "end_turn",
    )
    assert rec.output_chars == len("Hello world")
    assert rec.input_tokens == 12 + 100 + 50
    assert (rec.cache_read_tokens, rec.cache_write_tokens) == (100, 50)
    assert (rec.cache_write_5m_tokens, rec.cache_write_1h_tokens) == (20, 30)
    assert rec.output_tokens == 9
    assert rec.response_model == "claude-sonnet-4-5-20250929"
    assert (rec.provider_latency_ms, rec.provider_first_byte_ms) == (812, 301)


def test_another_family_is_read_by_its_metrics() -> None:
    llama = [
        {"generation": "Hi", "prompt_token_count": 8, "generation_token_count": 1},
        {"generation": " there", "generation_token_count": 2, "stop_reason": None},
        {
            "generation": "",
            "stop_reason": "stop",
            "amazon-bedrock-invocationMetrics": {
                "inputTokenCount": 8,
                "outputTokenCount": 2,
                "invocationLatency": 400,
                "firstByteLatency": 120,
            },
        },
    ]
    rec = meter("invoke_model", [b"".join(chunk(e) for e in llama)])
    assert (rec.outcome, rec.finish_reason) == ("completed", "stop")
    assert (rec.input_tokens, rec.output_tokens, rec.output_chars) == (8, 2, len("Hi there"))


@pytest.mark.parametrize("endpoint", ["converse", "invoke_model"])
def test_an_exception_after_200_is_an_error_of_its_type(endpoint: str) -> None:
    first = (
        msg("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}})
        if endpoint == "converse"
        else chunk(ANTHROPIC[0]) + chunk(ANTHROPIC[2])
    )
    body = first + msg(
        "throttlingException", {"message": "Too many tokens, please wait."}, "exception"
    )
    rec = meter(endpoint, [body])
    assert rec.outcome == "error" and rec.interrupted
    assert (rec.error_type, rec.error_message) == (
        "throttlingException",
        "Too many tokens, please wait.",
    )


def test_a_cut_converse_stream_keeps_its_output_and_no_usage() -> None:
    body = CAPTURE.read_bytes()
    m = StreamMeter("converse", start=0.0)
    m.headers(0.1, 200)
    m.feed(body[: len(body) // 2], 0.3)
    rec = m.finish(1.0, ending="upstream_disconnect")
    assert rec.outcome == "upstream_disconnect"
    assert rec.output_chars > 0 and rec.output_tokens is None
    assert rec.partial_event_at_end


def test_a_bad_crc_is_a_parse_issue_and_the_rest_is_metered() -> None:
    good = msg("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "abc"}})
    bad = bytearray(good)
    bad[-8] ^= 0xFF
    meta = msg(
        "metadata", {"usage": {"inputTokens": 3, "outputTokens": 2}, "metrics": {"latencyMs": 5}}
    )
    rec = meter("converse", [good + bytes(bad) + good + meta])
    assert rec.parse_issues == 1
    assert rec.events == 4
    assert rec.output_chars == 6
    assert rec.outcome == "completed"


def test_a_converse_answer_not_streamed() -> None:
    answer = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"text": "Paris."},
                    {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 9, "cacheReadInputTokens": 2},
        "metrics": {"latencyMs": 321},
        "serviceTier": {"type": "priority"},
    }
    m = StreamMeter("converse", start=0.0)
    m.headers(0.1, 200)
    m.read_body(json.dumps(answer).encode(), 0.4)
    rec = m.finish(0.4)
    absorb(rec, m.interpreter.obs, None)
    assert (rec.outcome, rec.finish_reason, rec.tool_calls) == ("completed", "tool_use", 1)
    assert rec.output_chars == len("Paris.") + len('{"a":1}')
    assert (rec.input_tokens, rec.output_tokens) == (7, 9)
    assert rec.provider_latency_ms == 321
    assert rec.service_tier == "priority"


def test_invoke_not_streamed_takes_its_usage_from_bedrocks_headers() -> None:
    """A non-Claude family's answer has no usage Bedrock normalises: its metric
    headers are the usage, and the invocation latency the provider's timing."""
    m = StreamMeter("invoke_model", start=0.0)
    m.headers(0.1, 200)
    interp = m.interpreter
    assert isinstance(interp, InvokeModelInterpreter)
    interp.read_headers(
        {
            "x-amzn-bedrock-input-token-count": "17",
            "x-amzn-bedrock-output-token-count": "5",
            "x-amzn-bedrock-invocation-latency": "433",
        }
    )
    answer = {"generation": "Hello there", "stop_reason": "stop", "generation_token_count": 5}
    m.read_body(json.dumps(answer).encode(), 0.5)
    rec = m.finish(0.5)
    assert (rec.outcome, rec.transport, rec.finish_reason) == ("completed", "json", "stop")
    assert (rec.input_tokens, rec.output_tokens, rec.output_chars) == (17, 5, len("Hello there"))
    assert rec.provider_latency_ms == 433
