"""Every captured stream in tests/fixtures, replayed through StreamMeter.

The expectations are tests/fixtures/expected.json, derived from the captures
themselves by tests/fixtures/derive_expected.py (which shares no code with
recorder) and committed: this test never regenerates them.

Each body is fed whole, one byte at a time, and cut at 20 seeded random points;
the three records must be identical and match expected.json field by field.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from recorder.core import StreamMeter, StreamRecord
from tests.kit import framing

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "expected.json").read_text())
FILES = framing.fixture_files()
NAMES = [framing.fixture_name(p) for p in FILES]

# expected.json key -> StreamRecord attribute (same names, except one)
COMPARED = {
    "endpoint": "endpoint",
    "outcome": "outcome",
    "finish_reason": "finish_reason",
    "tool_calls": "tool_calls",
    "output_chars": "output_chars",
    "response_id": "response_id",
    "response_model": "response_model",
    "input_tokens": "input_tokens",
    "cache_read_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_write_tokens",
    "output_tokens": "output_tokens",
    "reasoning_tokens": "reasoning_tokens",
    "error_type": "error_type",
    "error_code": "error_code",
    "error_message": "error_message",
    "events": "events",
    "keepalives": "keepalives",
    "parse_issues": "parse_issues",
    "unterminated_tail": "partial_event_at_end",
}


def replay(endpoint: str, pieces: list[bytes]) -> StreamRecord:
    meter = StreamMeter(endpoint)
    for piece in pieces:
        meter.feed(piece)
    return meter.finish()


def whole(body: bytes) -> list[bytes]:
    return [body]


def bytewise(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


def random_splits(body: bytes, seed: str, n: int = 20) -> list[bytes]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), min(n, len(body) - 1)))
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def test_every_fixture_has_expectations() -> None:
    assert sorted(EXPECTED) == sorted(NAMES)
    assert len(NAMES) >= 90


def test_expectations_cover_every_outcome_the_fixtures_can_show() -> None:
    outcomes = {e["outcome"] for e in EXPECTED.values()}
    assert {"completed", "error", "truncated"} <= outcomes
    assert {e["endpoint"] for e in EXPECTED.values()} == {
        "chat.completions",
        "responses",
        "messages",
    }


@pytest.mark.parametrize("path", FILES, ids=NAMES)
def test_fixture_replay(path: Path) -> None:
    name = framing.fixture_name(path)
    expected = EXPECTED[name]
    endpoint = framing.endpoint_for(path)
    body = framing.load_body(path)

    rec = replay(endpoint, whole(body))
    by_byte = replay(endpoint, bytewise(body))
    by_splits = replay(endpoint, random_splits(body, name))
    assert by_byte.to_dict() == rec.to_dict()
    assert by_splits.to_dict() == rec.to_dict()

    got = {key: getattr(rec, attr) for key, attr in COMPARED.items()}
    want = {key: expected[key] for key in COMPARED}
    assert got == want
    parts = rec.usage_parts
    assert expected["parts"] == (
        None
        if parts is None
        else [[p["kind"], p["model"], p["input_tokens"], p["output_tokens"]] for p in parts]
    )

    assert rec.streamed is True
    assert rec.provider == ("anthropic" if endpoint == "messages" else "openai")
    assert rec.interrupted == (expected["outcome"] in {"error", "truncated"})
    if expected["output_chars"]:
        assert rec.output_chars > 0
    # a body replayed offline has no timings
    assert rec.ttft_ms is None and rec.duration_ms is None and rec.first_event_ms is None


UNTERMINATED = [p for p in FILES if EXPECTED[framing.fixture_name(p)]["unterminated_tail"]]


@pytest.mark.parametrize("path", UNTERMINATED, ids=[framing.fixture_name(p) for p in UNTERMINATED])
def test_restoring_the_missing_blank_line_delivers_the_terminal_event(path: Path) -> None:
    """Some captures were stored without the blank line that ends their last event.

    The spec discards such an event, so as stored they are ``truncated``; with
    the blank line back, the terminal event arrives and they are completions.
    """
    expected = EXPECTED[framing.fixture_name(path)]
    assert expected["outcome"] == "truncated"
    rec = replay(framing.endpoint_for(path), [framing.load_body(path), b"\n\n"])
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.partial_event_at_end is False
    assert rec.events == expected["events"] + 1
    assert rec.finish_reason == expected["finish_reason"]


def test_payload_only_framing_follows_provenance() -> None:
    chat = framing.frame_payloads([b'{"a":1}', b'{"b":2}'], "chat.completions")
    assert chat == b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
    resp = framing.frame_payloads([b'{"type":"response.created","x":1}'], "responses")
    assert resp == b'event: response.created\ndata: {"type":"response.created","x":1}\n\n'
    msgs = framing.frame_payloads([b'{"type":"ping"}'], "messages")
    assert msgs == b'event: ping\ndata: {"type":"ping"}\n\n'
    # a malformed payload still names its event, as the wire would
    bad = framing.frame_payloads([b'{"type":"response.completed","r":{}'], "responses")
    assert bad.startswith(b"event: response.completed\n")


def test_the_already_framed_payload_only_file_is_used_as_is() -> None:
    path = FIXTURES / "payload-only" / "openai-chat" / "anthropic-fallback-tool-call.sse"
    assert framing.load_body(path) == path.read_bytes()
