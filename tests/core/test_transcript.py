"""recorder.core.transcript: the events of a stream as mitmweb's "LLM stream"
view shows them. Display only, yet it must agree with the meter: the output it
reassembles is exactly the output the meter counted, for every captured stream,
and the stalls and keepalives it flags are the meter's."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from recorder.core.meter import StreamMeter
from recorder.core.transcript import transcript
from tests.kit import framing

FILES = framing.fixture_files()


def _pieces(body: bytes, seed: int) -> list[tuple[float, bytes]]:
    """``body`` cut at random points, a piece every 10 ms."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), min(20, max(len(body) - 1, 0))))
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return [(0.01 * (n + 1), p) for n, p in enumerate(parts)]


@pytest.mark.parametrize("path", FILES, ids=[framing.fixture_name(p) for p in FILES])
def test_output_reassembled_is_what_the_meter_counted(path: Path) -> None:
    endpoint = framing.endpoint_for(path)
    body = framing.load_body(path)
    pieces = _pieces(body, len(body))
    meter = StreamMeter(endpoint, start=0.0)
    for at, data in pieces:
        meter.feed(data, at)
    rec = meter.finish(pieces[-1][0] + 0.01)
    t = transcript(pieces, endpoint, 30.0)
    assert sum(len(x) for parts in t.output.values() for x in parts) == rec.output_chars
    assert t.events == meter.events
    assert t.keepalives == meter.keepalives
    assert len(t.lines) == t.events + t.keepalives + sum(1 for line in t.lines if "!!" in line)


def test_times_keepalives_and_stalls() -> None:
    pieces = [
        (0.10, b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'),
        (0.60, b": keepalive\n\n"),
        (1.10, b": keepalive\n\n"),
        (1.70, b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'),
        (
            1.80,
            b'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}'
            b"\n\ndata: [DONE]\n\n",
        ),
    ]
    t = transcript(pieces, "chat.completions", 1.0)
    assert (t.events, t.keepalives, t.stalls) == (4, 2, 1)
    text = t.render()
    lines = text.splitlines()
    assert lines[0] == "4 events, 2 keepalives, 1 stall (times in ms)"
    assert lines[2].split()[:2] == ["100.0", "0.0"]
    assert lines[3].split()[:2] == ["600.0", "500.0"] and lines[3].endswith("[keepalive]")
    assert lines[5].split()[:2] == ["1700.0", "600.0"]
    assert "[STALL: 1.6 s without output]" in lines[5]
    assert 'text: "lo"' in lines[5]
    assert lines[7].split()[:2] == ["1800.0", "0.0"]  # two events of one piece: one time
    assert text.endswith("── text ──\nHello\n\n── tool arguments ──\n{}")


def test_the_wait_for_the_first_token_is_not_a_stall() -> None:
    pieces = [(5.0, b'data: {"choices":[{"delta":{"content":"late"}}]}\n\n')]
    assert transcript(pieces, "chat.completions", 1.0).stalls == 0


def test_damage_is_shown_not_raised() -> None:
    pieces = [(0.1, b"data: {not json\n\n"), (0.2, b"data: half an event")]
    t = transcript(pieces, "messages", 30.0)
    assert t.events == 1 and any("unterminated event" in line for line in t.lines)


def test_a_bedrock_stream_reads_as_botocore_reads_it() -> None:
    """mitmweb's view of a captured ConverseStream: its text is the deltas botocore
    decodes, and the meter's count; InvokeModel's chunks show the Claude text inside."""
    import base64
    import json

    from botocore.eventstream import EventStreamBuffer

    from recorder.core.eventstream import encode_message

    path = Path(__file__).parents[1] / "fixtures" / "bedrock" / "converse_stream_nova_micro.bin"
    body = path.read_bytes()
    buf = EventStreamBuffer()
    buf.add_data(body)
    text = "".join(
        json.loads(m.payload)["delta"].get("text", "")
        for m in buf
        if m.headers[":event-type"] == "contentBlockDelta"
    )
    pieces = _pieces(body, 3)
    t = transcript(pieces, "converse", 30.0)
    assert "".join(t.output["text"]) == text
    assert t.events == 33
    event = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hi"},
    }
    chunk = encode_message(
        {":event-type": "chunk", ":message-type": "event"},
        json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode(),
    )
    t = transcript([(0.1, chunk)], "invoke_model", 30.0)
    assert t.output["text"] == ["Hi"]


def test_an_interactions_refusal_as_bare_json_is_shown_as_the_meter_reads_it() -> None:
    """Google's Interactions API sends an error after status 200 as a bare JSON
    line (googleapis/js-genai#1973): the view shows it, as the meter counts it, and
    the legacy ``content.delta`` events' text as the step events'."""
    created = b'data: {"event_type":"interaction.created","interaction":{"id":"v1_a"}}\n\n'
    legacy = (
        b'data: {"event_type":"content.delta","index":0,"delta":{"type":"text","text":"Hi"}}\n\n'
    )
    refusal = b'{"error":{"message":"The content was blocked.","code":"prohibited_content"}}\n'
    pieces = [(0.1, created), (0.2, legacy), (0.3, refusal)]
    meter = StreamMeter("interactions", start=0.0)
    for at, data in pieces:
        meter.feed(data, at)
    rec = meter.finish(0.4)
    t = transcript(pieces, "interactions", 30.0)
    assert rec.outcome == "error" and t.events == meter.events == 3
    assert any("prohibited_content" in line for line in t.lines)
    assert t.output["text"] == ["Hi"] and rec.output_chars == 2
