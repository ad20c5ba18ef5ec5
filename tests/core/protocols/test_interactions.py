"""Google's Interactions API: the events the SDK's own types name, whole and split.

The events are written after the shapes google-genai's generated types declare
(``InteractionSSEEvent``: ``interaction.created``, ``step.start``, ``step.delta``,
``interaction.completed``, ``error``); no public capture of a real stream was found.
"""

from __future__ import annotations

import json
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
