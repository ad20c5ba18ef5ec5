"""Google's Interactions API: real captures (tests/fixtures/interactions, vercel/ai's,
payload-only), the events the SDK's own types name, and the legacy content-based
events the API still sends when steps are disabled, whole and split.

Expected figures for the captures come from this file's reading of them with the
standard library's json.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from recorder.core.billing import complete_usage
from recorder.core.meter import StreamMeter

USAGE = {
    "total_input_tokens": 1520,
    "total_output_tokens": 31,
    "total_thought_tokens": 210,
    "total_cached_tokens": 1024,
    "total_tool_use_tokens": 12,
    "total_tokens": 1773,
}


def _event(obj: dict[str, Any]) -> bytes:
    return (
        b"event: " + obj["event_type"].encode() + b"\ndata: " + json.dumps(obj).encode() + b"\n\n"
    )


def _stream(status: str = "completed") -> list[bytes]:
    return [
        _event(
            {
                "event_type": "interaction.created",
                "interaction": {
                    "id": "v1_abc",
                    "status": "in_progress",
                    "model": "gemini-3-flash-preview",
                },
            }
        ),
        _event({"event_type": "step.start", "index": 0, "step": {"type": "thought"}}),
        _event(
            {
                "event_type": "step.delta",
                "index": 0,
                "delta": {
                    "type": "thought_summary",
                    "content": {"type": "text", "text": "Counting."},
                },
            }
        ),
        _event({"event_type": "step.start", "index": 1, "step": {"type": "model_output"}}),
        _event(
            {"event_type": "step.delta", "index": 1, "delta": {"type": "text", "text": "1, 2, 3"}}
        ),
        _event(
            {"event_type": "step.start", "index": 2, "step": {"type": "function_call", "name": "f"}}
        ),
        _event(
            {
                "event_type": "step.delta",
                "index": 2,
                "delta": {"type": "arguments_delta", "arguments": '{"n": 3}'},
            }
        ),
        _event(
            {
                "event_type": "interaction.completed",
                "interaction": {"id": "v1_abc", "status": status, "usage": USAGE},
            }
        ),
        b"data: [DONE]\n\n",
    ]


def _meter(pieces: list[bytes], ending: str = "eof") -> tuple[Any, StreamMeter]:
    m = StreamMeter("interactions", start=0.0)
    m.headers(0.1, 200)
    for n, piece in enumerate(pieces):
        m.feed(piece, 0.2 + n / 10)
    return m.finish(2.0, ending=ending), m


@pytest.mark.parametrize("split", ["events", "bytes"])
def test_completed_interaction_is_billed_as_reported(split: str) -> None:
    pieces = _stream()
    if split == "bytes":
        whole = b"".join(pieces)
        pieces = [whole[i : i + 1] for i in range(len(whole))]
    rec, _ = _meter(pieces)
    assert rec.outcome == "completed"
    assert rec.input_tokens == USAGE["total_input_tokens"] + USAGE["total_tool_use_tokens"]
    assert rec.output_tokens == USAGE["total_output_tokens"] + USAGE["total_thought_tokens"]
    assert rec.reasoning_tokens == USAGE["total_thought_tokens"]
    assert rec.cache_read_tokens == USAGE["total_cached_tokens"]
    assert (rec.response_id, rec.response_model, rec.tool_calls) == (
        "v1_abc",
        "gemini-3-flash-preview",
        1,
    )
    assert rec.output_chars == len("1, 2, 3") + len('{"n": 3}') + len("Counting.")
    assert rec.parse_issues == 0


@pytest.mark.parametrize(
    ("status", "outcome"),
    [("incomplete", "incomplete"), ("failed", "error"), ("requires_action", "completed")],
)
def test_final_status_decides(status: str, outcome: str) -> None:
    rec, _ = _meter(_stream(status))
    assert rec.outcome == outcome


def test_error_event_and_cut_stream() -> None:
    err = _event(
        {"event_type": "error", "error": {"code": "resource_exhausted", "message": "quota"}}
    )
    rec, _ = _meter([*_stream()[:5], err])
    assert (rec.outcome, rec.error_code, rec.error_message) == (
        "error",
        "resource_exhausted",
        "quota",
    )
    rec, m = _meter(_stream()[:5], ending="client_disconnect")
    assert rec.outcome == "client_disconnect" and rec.output_tokens is None
    complete_usage(rec, m.interpreter.obs, None, None, None, learn=False)
    assert rec.output_source == "estimated" and rec.output_tokens


# -- real captures -----------------------------------------------------------------

CAPTURES = sorted((Path(__file__).parents[2] / "fixtures" / "interactions").glob("*.jsonl"))


def _framed(lines: list[bytes], named: bool) -> bytes:
    """As the API writes them (``event: <type>`` then ``data:``), or data only."""
    out = []
    for line in lines:
        head = b"event: " + json.loads(line)["event_type"].encode() + b"\n" if named else b""
        out.append(head + b"data: " + line + b"\n\n")
    return b"".join(out)


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
@pytest.mark.parametrize("named", [True, False])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_real_captures_agree_with_an_independent_reading(path: Path, named: bool, how: str) -> None:
    lines = [x for x in path.read_bytes().splitlines() if x.strip()]
    docs = [json.loads(x) for x in lines]
    done = next(d["interaction"] for d in docs if d["event_type"] == "interaction.completed")
    usage = done["usage"]
    deltas = [d["delta"] for d in docs if d["event_type"] == "step.delta"]
    steps = [d["step"] for d in docs if d["event_type"] == "step.start"]
    body = _framed(lines, named)
    if how == "whole":
        pieces = [body]
    elif how == "bytes":
        pieces = [body[i : i + 1] for i in range(len(body))]
    else:
        cuts = sorted(random.Random(5).sample(range(1, len(body)), 25))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    rec, m = _meter(pieces)
    complete_usage(rec, m.interpreter.obs, None, None, None, learn=False)
    assert rec.outcome == "completed"
    assert rec.input_tokens == usage["total_input_tokens"] + usage["total_tool_use_tokens"]
    assert rec.output_tokens == usage["total_output_tokens"] + usage["total_thought_tokens"]
    assert rec.reasoning_tokens == usage["total_thought_tokens"]
    assert rec.cache_read_tokens == usage["total_cached_tokens"]
    assert (rec.response_id, rec.response_model) == (done["id"], done["model"])
    assert rec.service_tier == done["service_tier"]
    assert rec.finish_reason == (None if done["status"] == "completed" else done["status"])
    assert rec.tool_calls == sum(s["type"] == "function_call" for s in steps)
    text = sum(len(d.get("text", "")) for d in deltas if d["type"] == "text")
    args = sum(len(d["arguments"]) for d in deltas if d["type"] == "arguments_delta")
    assert rec.output_chars == text + args
    assert (rec.events, rec.parse_issues) == (len(docs), 0)


# -- the legacy events ---------------------------------------------------------------

# Google's API reference's example events (the content-based stream, "used when steps
# are disabled"), with a function call as its FunctionCallDelta declares it
LEGACY_USAGE = {
    "input_tokens_by_modality": [{"modality": "text", "tokens": 11}],
    "total_cached_tokens": 0,
    "total_input_tokens": 11,
    "total_output_tokens": 364,
    "total_thought_tokens": 1120,
    "total_tokens": 1495,
    "total_tool_use_tokens": 0,
}
STORY = "Elara\u2019s life was a symphony of quiet moments."


def _legacy(status: str = "completed") -> list[bytes]:
    iid = "v1_ChdTMjQ0YWJ5TUF1TzcxZThQdjRpcnFRcxIXUzI0NGFieU1BdU83MWU4UHY0aXJxUXM"
    return [
        _event(
            {
                "event_type": "interaction.start",
                "interaction": {
                    "id": iid,
                    "model": "gemini-3-flash-preview",
                    "object": "interaction",
                    "status": "in_progress",
                },
            }
        ),
        _event(
            {
                "event_type": "interaction.status_update",
                "interaction_id": iid,
                "status": "in_progress",
            }
        ),
        _event({"event_type": "content.start", "content": {"type": "text"}, "index": 1}),
        _event(
            {"event_type": "content.delta", "delta": {"type": "text", "text": STORY}, "index": 1}
        ),
        _event({"event_type": "content.stop", "index": 1}),
        _event({"event_type": "content.start", "content": {"type": "function_call"}, "index": 2}),
        _event(
            {
                "event_type": "content.delta",
                "index": 2,
                "delta": {
                    "type": "function_call",
                    "id": "c1",
                    "name": "get_weather",
                    "arguments": {"location": "Paris"},
                },
            }
        ),
        _event({"event_type": "content.stop", "index": 2}),
        _event(
            {
                "event_type": "interaction.complete",
                "interaction": {
                    "id": iid,
                    "model": "gemini-3-flash-preview",
                    "status": status,
                    "usage": LEGACY_USAGE,
                },
            }
        ),
        b"event: done\ndata: [DONE]\n\n",
    ]


@pytest.mark.parametrize("split", ["events", "bytes"])
def test_legacy_content_events_are_read_as_steps(split: str) -> None:
    pieces = _legacy("requires_action")
    if split == "bytes":
        whole = b"".join(pieces)
        pieces = [whole[i : i + 1] for i in range(len(whole))]
    rec, _ = _meter(pieces)
    assert (rec.outcome, rec.finish_reason, rec.tool_calls) == ("completed", "requires_action", 1)
    assert rec.input_tokens == 11
    assert rec.output_tokens == 364 + 1120
    assert rec.response_id is not None and rec.response_id.startswith("v1_")
    assert rec.output_chars == len(STORY) + len('{"location":"Paris"}')
    assert rec.parse_issues == 0


def test_a_refusal_as_a_bare_json_line_is_an_error() -> None:
    """A streamed request the content filter refuses: ``interaction.created``, a
    status update, then the error as a bare JSON line, no ``data:`` in front
    (googleapis/js-genai#1973)."""
    created = _stream()[0]
    update = _event(
        {
            "event_type": "interaction.status_update",
            "interaction_id": "v1_abc",
            "status": "in_progress",
        }
    )
    refusal = b'{"error":{"message":"The content was blocked.","code":"prohibited_content"}}\n'
    for pieces in ([created, update, refusal], [created + update + refusal]):
        rec, _ = _meter(pieces)
        assert (rec.outcome, rec.error_code) == ("error", "prohibited_content")
        assert rec.error_message == "The content was blocked."
        assert rec.output_tokens is None


def test_a_whole_interaction_counts_its_steps() -> None:
    """``stream: false``: the output of the steps, counted as their deltas would be."""
    body = {
        "id": "v1_abc",
        "status": "requires_action",
        "model": "gemini-3-flash-preview",
        "steps": [
            {"type": "thought", "summary": [{"type": "text", "text": "Counting."}]},
            {"type": "model_output", "content": [{"type": "text", "text": "1, 2, 3"}]},
            {"type": "function_call", "id": "c1", "name": "f", "arguments": {"n": 3}},
        ],
        "usage": USAGE,
    }
    m = StreamMeter("interactions", start=0.0)
    m.headers(0.1, 200)
    m.read_body(json.dumps(body).encode())
    rec = m.finish(1.0)
    assert (rec.outcome, rec.finish_reason, rec.tool_calls) == ("completed", "requires_action", 1)
    assert rec.output_chars == len("Counting.") + len("1, 2, 3") + len('{"n":3}')
    assert rec.output_tokens == USAGE["total_output_tokens"] + USAGE["total_thought_tokens"]
