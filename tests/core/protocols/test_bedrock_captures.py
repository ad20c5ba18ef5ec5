"""Bedrock's two streamed protocols against more real captures (PROVENANCE.md in
tests/fixtures/bedrock): an InvokeModelWithResponseStream body as recorded, an
exception that is a whole stream, and ConverseStream events others kept one JSON
a line, framed here as the wire carries them. Expected figures come from
botocore's reading of the bodies and plain ``json``, never from recorder."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer

from recorder.core.billing import absorb
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord
from tests.kit import cassettes

FIXTURES = Path(__file__).parents[2] / "fixtures" / "bedrock"
INVOKE = sorted(FIXTURES.glob("invoke_stream_claude_*.bin"))
TITAN = sorted(FIXTURES.glob("invoke_stream_titan_*.bin"))
PAYLOADS = sorted((FIXTURES / "converse_payloads").glob("*.jsonl"))
HOW = ["whole", "bytes", "random"]


def messages(body: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    buf = EventStreamBuffer()
    buf.add_data(body)
    return [(dict(m.headers), json.loads(m.payload)) for m in buf]


def pieces(body: bytes, how: str) -> list[bytes]:
    if how == "whole":
        return [body]
    if how == "bytes":
        return [body[i : i + 1] for i in range(len(body))]
    cuts = sorted(random.Random(11).sample(range(1, len(body)), 30))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def meter(endpoint: str, parts: list[bytes]) -> StreamRecord:
    m = StreamMeter(endpoint, start=0.0)
    m.headers(0.1, 200)
    for i, part in enumerate(parts):
        m.feed(part, 0.2 + i * 0.001)
    rec = m.finish(5.0)
    absorb(rec, m.interpreter.obs, None)
    return rec


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("capture", INVOKE, ids=[p.stem for p in INVOKE])
def test_real_invoke_model_streams(capture: Path, how: str) -> None:
    """Anthropic's Messages events, base64 in each ``chunk``: the input is
    ``message_start``'s, the output ``message_delta``'s, and Bedrock's metrics on
    ``message_stop`` say the same."""
    body = capture.read_bytes()
    docs = [json.loads(base64.b64decode(p["bytes"])) for _, p in messages(body)]
    start = docs[0]["message"]
    delta = next(d for d in reversed(docs) if d["type"] == "message_delta")
    metrics = docs[-1]["amazon-bedrock-invocationMetrics"]
    text = "".join(d["delta"].get("text", "") for d in docs if d["type"] == "content_block_delta")
    rec = meter("invoke_model", pieces(body, how))
    assert (rec.provider, rec.outcome) == ("aws.bedrock", "completed")
    assert rec.input_tokens == start["usage"]["input_tokens"] == metrics["inputTokenCount"]
    assert rec.output_tokens == delta["usage"]["output_tokens"] == metrics["outputTokenCount"]
    assert rec.finish_reason == delta["delta"]["stop_reason"]
    assert (rec.response_model, rec.response_id) == (start["model"], start["id"])
    assert rec.output_chars == len(text)
    assert rec.provider_latency_ms == metrics["invocationLatency"]
    assert rec.provider_first_byte_ms == metrics["firstByteLatency"]
    assert (rec.events, rec.parse_issues) == (len(docs), 0)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("capture", TITAN, ids=[p.stem for p in TITAN])
def test_real_invoke_model_streams_of_another_family(capture: Path, how: str) -> None:
    """Amazon Titan's own chunks (``outputText``, ``completionReason``): the usage
    is the ``amazon-bedrock-invocationMetrics`` Bedrock adds to the last."""
    body = capture.read_bytes()
    docs = [json.loads(base64.b64decode(p["bytes"])) for _, p in messages(body)]
    metrics = docs[-1]["amazon-bedrock-invocationMetrics"]
    rec = meter("invoke_model", pieces(body, how))
    assert rec.outcome == "completed"
    assert (rec.input_tokens, rec.output_tokens) == (
        metrics["inputTokenCount"],
        metrics["outputTokenCount"],
    )
    assert rec.output_tokens == docs[-1]["totalOutputTextTokenCount"]
    assert rec.input_tokens == docs[0]["inputTextTokenCount"]
    assert rec.finish_reason == docs[-1]["completionReason"]
    assert rec.output_chars == sum(len(d["outputText"]) for d in docs)
    assert rec.provider_latency_ms == metrics["invocationLatency"]
    assert (rec.events, rec.parse_issues) == (len(docs), 0)


@pytest.mark.parametrize("endpoint", ["converse", "invoke_model"])
def test_a_real_exception_as_the_whole_stream(endpoint: str) -> None:
    """Status 200, then one ``modelStreamErrorException`` message and nothing else:
    an error of that type, with the upstream status it reports as its code."""
    body = (FIXTURES / "exception_model_stream_error.bin").read_bytes()
    ((headers, payload),) = messages(body)
    rec = meter(endpoint, pieces(body, "bytes"))
    assert rec.outcome == "error" and rec.interrupted
    assert rec.error_type == headers[":exception-type"]
    assert rec.error_message == payload["message"]
    assert rec.error_code == str(payload["originalStatusCode"])
    assert (rec.input_tokens, rec.output_tokens, rec.output_chars) == (None, None, 0)


def test_the_kits_framing_is_what_botocore_reads() -> None:
    for path in PAYLOADS:
        lines = cassettes.json_lines(path)
        decoded = messages(cassettes.converse_stream(lines))
        assert [{h[":event-type"]: p} for h, p in decoded] == [json.loads(x) for x in lines]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("path", PAYLOADS, ids=[p.stem for p in PAYLOADS])
def test_real_converse_events_framed_as_the_wire(path: Path, how: str) -> None:
    events = [json.loads(x) for x in cassettes.json_lines(path)]
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    text = "".join(d.get("text", "") for d in deltas)
    reasoning = "".join(d.get("reasoningContent", {}).get("text", "") for d in deltas)
    meta = next(e["metadata"] for e in events if "metadata" in e)
    stop = next(e["messageStop"] for e in events if "messageStop" in e)
    body = cassettes.converse_stream(cassettes.json_lines(path))
    rec = meter("converse", pieces(body, how))
    assert rec.outcome == "completed"
    assert (rec.input_tokens, rec.output_tokens) == (
        meta["usage"]["inputTokens"],
        meta["usage"]["outputTokens"],
    )
    assert rec.finish_reason == stop["stopReason"]
    assert rec.output_chars == len(text) + len(reasoning)
    assert (rec.output_breakdown or {}).get("reasoning", 0) == len(reasoning)
    assert rec.provider_latency_ms == meta["metrics"]["latencyMs"]
    assert (rec.events, rec.parse_issues) == (len(events), 0)


WHOLE = sorted((FIXTURES / "converse_whole").glob("*.yaml"))


@pytest.mark.parametrize("path", WHOLE, ids=[p.stem for p in WHOLE])
def test_real_converse_answers_with_the_cache(path: Path) -> None:
    """Converse not streamed: the input is the uncached tokens plus the cache's
    reads and writes, the writes by lifetime from ``cacheDetails``."""
    n = len(cassettes.vcr_responses(path))
    for i in range(n):
        answer = json.loads(cassettes.vcr_body(path, i))
        usage = answer["usage"]
        m = StreamMeter("converse", start=0.0)
        m.headers(0.1, 200)
        m.read_body(cassettes.vcr_body(path, i), 0.3)
        rec = m.finish(0.3)
        absorb(rec, m.interpreter.obs, None)
        read, write = usage["cacheReadInputTokens"], usage["cacheWriteInputTokens"]
        assert (rec.outcome, rec.finish_reason) == ("completed", answer["stopReason"])
        assert rec.input_tokens == usage["inputTokens"] + read + write
        assert rec.input_tokens + usage["outputTokens"] == usage["totalTokens"]
        assert (rec.cache_read_tokens, rec.cache_write_tokens) == (read, write)
        five = sum(d["inputTokens"] for d in usage.get("cacheDetails", []) if d["ttl"] == "5m")
        assert (rec.cache_write_5m_tokens or 0) == five
        assert rec.output_tokens == usage["outputTokens"]
        assert rec.provider_latency_ms == answer["metrics"]["latencyMs"]
