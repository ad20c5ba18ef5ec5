"""The stream meter's timing rules, field by field as docs/record.md defines them.

Every stream is built by hand with explicit timestamps (the core reads no clock):
the request starts at 100.0 s, so a piece fed at 100.5 is 500 ms into the stream.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from recorder.core import meter as meter_mod
from recorder.core import rhythm
from recorder.core.meter import StreamMeter
from recorder.core.record import INTERRUPTED_OUTCOMES, Gap, StreamRecord
from tests.kit.records import TIMING_FIELDS

T0 = 100.0
KEEPALIVE = b": hopbase-keepalive\n\n"


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event; ``data`` is JSON-encoded unless it is already bytes."""
    payload = data if isinstance(data, bytes) else json.dumps(data).encode()
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + payload + b"\n\n"


# -- Chat Completions -----------------------------------------------------------


def chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
    )


ROLE = chat({"role": "assistant", "content": ""})
DONE = b"data: [DONE]\n\n"


def text(s: str) -> bytes:
    return chat({"content": s})


def chat_usage(prompt: int = 10, completion: int = 5) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


# -- Responses ------------------------------------------------------------------


def resp(typ: str, **body: Any) -> bytes:
    return sse({"type": typ, **body}, event=typ)


RESP_CREATED = resp(
    "response.created", response={"id": "resp_1", "model": "gpt-5", "status": "in_progress"}
)


def resp_text(s: str) -> bytes:
    return resp("response.output_text.delta", delta=s)


# -- Anthropic Messages ---------------------------------------------------------


def anth(typ: str, **body: Any) -> bytes:
    return sse({"type": typ, **body}, event=typ)


def anth_start(input_tokens: int = 11, **usage: int) -> bytes:
    return anth(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4",
            "content": [],
            "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
        },
    )


ANTH_BLOCK = anth("content_block_start", index=0, content_block={"type": "text", "text": ""})
PING = anth("ping")


def anth_text(s: str) -> bytes:
    return anth("content_block_delta", index=0, delta={"type": "text_delta", "text": s})


def meter(endpoint: str = "chat.completions", **kw: Any) -> StreamMeter:
    kw.setdefault("start", T0)
    kw.setdefault("stall_after", 1.0)
    return StreamMeter(endpoint, **kw)


TIMINGS = (*TIMING_FIELDS, "stalls")


# == ttfb, first event, ttft, duration ==========================================


def test_ttfb_is_request_start_to_headers() -> None:
    m = meter()
    m.headers(100.2, 200)
    m.feed(ROLE + text("Hi") + DONE, 100.5)
    rec = m.finish(100.6)
    assert rec.ttfb_ms == 200.0
    assert rec.http_status == 200


def test_duration_is_request_start_to_end() -> None:
    m = meter()
    m.headers(100.2, 200)
    m.feed(ROLE + text("Hi") + DONE, 100.5)
    rec = m.finish(103.0)
    assert rec.duration_ms == 3000.0


def test_role_chunk_is_first_event_but_not_first_token() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE, 100.5)
    m.feed(text("Hello"), 101.25)
    m.feed(DONE, 101.5)
    rec = m.finish(101.5)
    assert rec.first_event_ms == 500.0
    assert rec.ttft_ms == 1250.0


def test_role_chunk_with_null_content_is_not_output() -> None:
    m = meter()
    m.feed(chat({"role": "assistant", "content": None}), 100.3)
    m.feed(text("x"), 100.7)
    m.feed(DONE, 100.8)
    rec = m.finish(100.8)
    assert rec.first_event_ms == 300.0
    assert rec.ttft_ms == 700.0


def test_keepalive_comment_is_neither_first_event_nor_first_token() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(KEEPALIVE, 100.3)
    m.feed(b": another comment\n", 100.4)
    m.feed(ROLE, 100.6)
    m.feed(text("a"), 100.9)
    m.feed(DONE, 101.0)
    rec = m.finish(101.0)
    assert rec.keepalives == 2
    assert rec.first_event_ms == 600.0
    assert rec.ttft_ms == 900.0


def test_anthropic_ping_is_first_event_not_keepalive_not_token() -> None:
    m = meter("messages")
    m.headers(100.1, 200)
    m.feed(PING, 100.2)
    m.feed(anth_start(), 100.4)
    m.feed(ANTH_BLOCK + PING, 100.5)
    m.feed(anth_text("Hello"), 100.8)
    m.feed(anth("message_stop"), 100.9)
    rec = m.finish(100.9)
    assert rec.first_event_ms == 200.0
    assert rec.ttft_ms == 800.0
    assert rec.keepalives == 0
    assert rec.events == 6
    assert rec.outcome == "completed"


def test_malformed_event_counts_as_first_event_and_event() -> None:
    m = meter()
    m.feed(b"data: {not json\n\n", 100.3)
    m.feed(text("a"), 100.4)
    m.feed(DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.first_event_ms == 300.0
    assert rec.ttft_ms == 400.0
    assert rec.events == 3
    assert rec.parse_issues == 1


def test_responses_structure_events_are_not_first_token() -> None:
    m = meter("responses")
    m.headers(100.1, 200)
    m.feed(RESP_CREATED, 100.2)
    m.feed(resp("response.in_progress", response={"id": "resp_1"}), 100.3)
    m.feed(
        resp("response.output_item.added", item={"type": "message", "id": "msg_1"})
        + resp("response.content_part.added", part={"type": "output_text", "text": ""}),
        100.4,
    )
    m.feed(resp_text("Hi"), 100.9)
    m.feed(resp("response.output_text.done", text="Hi"), 101.0)
    m.feed(resp("response.completed", response={"id": "resp_1", "status": "completed"}), 101.0)
    rec = m.finish(101.0)
    assert rec.first_event_ms == 200.0
    assert rec.ttft_ms == 900.0
    assert rec.outcome == "completed"
    assert rec.events == 7


@pytest.mark.parametrize(
    "delta",
    [
        {"refusal": "I can't"},
        {"reasoning_content": "thinking"},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]},
    ],
    ids=["refusal", "reasoning", "tool-arguments"],
)
def test_other_output_kinds_set_first_token(delta: dict[str, Any]) -> None:
    m = meter()
    m.feed(ROLE, 100.2)
    m.feed(chat(delta), 100.7)
    m.feed(DONE, 100.8)
    rec = m.finish(100.8)
    assert rec.ttft_ms == 700.0


def test_role_chunk_that_carries_text_is_output() -> None:
    m = meter()
    m.feed(chat({"role": "assistant", "content": "Hi"}), 100.4)
    m.feed(DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.first_event_ms == 400.0
    assert rec.ttft_ms == 400.0


def test_empty_output_delta_is_not_first_token() -> None:
    m = meter("messages")
    m.feed(anth_start(), 100.1)
    m.feed(
        anth("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""})
        + anth("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": ""})
        + anth("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"}),
        100.2,
    )
    m.feed(
        anth("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "h"}),
        100.6,
    )
    m.feed(anth("message_stop"), 100.7)
    rec = m.finish(100.7)
    assert rec.ttft_ms == 600.0
    assert rec.events == 6


def test_events_within_one_piece_share_its_arrival_time() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a") + text("b"), 100.5)
    m.feed(text("c") + DONE, 101.5)
    rec = m.finish(101.5)
    assert rec.first_event_ms == 500.0
    assert rec.ttft_ms == 500.0
    assert list(m.output_intervals) == [0.0, pytest.approx(1.0)]
    assert rec.max_output_gap_ms == 1000.0


def test_event_split_across_pieces_arrives_with_its_end() -> None:
    m = meter()
    piece = text("Hello")
    m.feed(ROLE, 100.2)
    m.feed(piece[:20], 100.4)
    m.feed(piece[20:-1], 100.6)
    m.feed(piece[-1:], 100.9)  # the blank line that dispatches it
    m.feed(DONE, 101.0)
    rec = m.finish(101.0)
    assert rec.ttft_ms == 900.0


def test_no_output_means_no_ttft() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.ttft_ms is None
    assert rec.first_event_ms == 500.0


def test_no_events_means_no_first_event() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(KEEPALIVE, 100.5)
    rec = m.finish(101.0)
    assert rec.first_event_ms is None
    assert rec.ttft_ms is None
    assert rec.events == 0
    assert rec.keepalives == 1


def test_ttfb_none_without_headers() -> None:
    m = meter()
    m.feed(ROLE + text("a") + DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.ttfb_ms is None
    assert rec.first_event_ms == 500.0


# == events and keepalives ======================================================


def test_events_count_every_dispatched_event() -> None:
    m = meter()
    m.feed(ROLE, 100.1)
    m.feed(b"data: oops\n\n", 100.2)  # malformed
    m.feed(text("a"), 100.3)
    m.feed(KEEPALIVE, 100.4)  # a comment, not an event
    m.feed(DONE, 100.5)
    m.feed(text("late") + DONE, 100.6)  # after the terminal event
    rec = m.finish(100.7)
    assert rec.events == 6
    assert rec.keepalives == 1
    assert rec.outcome == "completed"


def test_event_without_data_is_not_dispatched() -> None:
    m = meter("messages")
    m.feed(b"event: ping\n\n", 100.1)
    m.feed(anth_start(), 100.2)
    rec = m.finish(100.3)
    assert rec.events == 1
    assert rec.first_event_ms == 200.0


def test_keepalives_count_comment_lines() -> None:
    m = meter()
    m.feed(b": hopbase-keepalive\n\n: OPENROUTER PROCESSING\n\n", 100.1)
    m.feed(b": ping - 2025-01-01 00:00:00\r\n\r\n", 100.2)
    m.feed(b":\n", 100.3)  # an empty comment is still a comment line
    m.feed(ROLE + text("a") + DONE, 100.4)
    rec = m.finish(100.4)
    assert rec.keepalives == 4
    assert rec.events == 3


def test_max_keepalive_gap_is_null_with_fewer_than_two() -> None:
    m = meter()
    m.feed(ROLE + text("a") + DONE, 100.4)
    assert m.finish(100.4).max_keepalive_gap_ms is None

    m = meter()
    m.feed(KEEPALIVE, 100.2)
    m.feed(ROLE + text("a") + DONE, 100.4)
    rec = m.finish(100.4)
    assert rec.keepalives == 1
    assert rec.max_keepalive_gap_ms is None


def test_max_keepalive_gap_is_longest_between_consecutive_comments() -> None:
    m = meter()
    m.feed(ROLE, 100.1)
    m.feed(KEEPALIVE, 101.0)
    m.feed(KEEPALIVE, 103.0)
    m.feed(text("a"), 104.0)  # output in between does not reset the keepalive rhythm
    m.feed(KEEPALIVE, 108.0)
    m.feed(KEEPALIVE, 109.0)
    m.feed(DONE, 109.5)
    rec = m.finish(109.5)
    assert rec.keepalives == 4
    assert rec.max_keepalive_gap_ms == 5000.0
    assert list(m.keepalive_intervals) == [2.0, 5.0, 1.0]


def test_keepalives_in_one_piece_have_zero_gap() -> None:
    m = meter()
    m.feed(KEEPALIVE + KEEPALIVE, 100.5)
    rec = m.finish(100.6)
    assert rec.keepalives == 2
    assert rec.max_keepalive_gap_ms == 0.0


# == max_silence_ms =============================================================


def test_max_silence_counts_from_request_start_to_headers() -> None:
    m = meter()
    m.headers(102.0, 200)
    m.feed(ROLE + text("a") + DONE, 102.5)
    rec = m.finish(102.5)
    assert rec.max_silence_ms == 2000.0
    assert Gap("silence", 0.0, 2000.0) in rec.gaps


def test_max_silence_counts_from_request_start_without_headers() -> None:
    m = meter()
    m.feed(ROLE, 101.5)
    m.feed(text("a") + DONE, 102.0)
    rec = m.finish(102.0)
    assert rec.max_silence_ms == 1500.0


def test_max_silence_between_pieces() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE, 100.2)
    m.feed(text("a"), 100.5)
    m.feed(text("b"), 104.0)
    m.feed(DONE, 104.25)
    rec = m.finish(104.25)
    assert rec.max_silence_ms == 3500.0
    assert Gap("silence", 500.0, 3500.0) in rec.gaps


def test_keepalives_break_the_silence() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a"), 100.5)
    for i in range(1, 10):
        m.feed(KEEPALIVE, 100.5 + 0.5 * i)  # every 0.5 s until 105.0
    m.feed(text("b") + DONE, 105.25)
    rec = m.finish(105.25)
    assert rec.max_silence_ms == 500.0
    # ... but not the output silence
    assert rec.max_output_gap_ms == 4750.0


def test_max_silence_runs_to_the_end() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a"), 100.5)
    rec = m.finish(107.0, ending="upstream_disconnect")
    assert rec.max_silence_ms == 6500.0
    assert Gap("silence", 500.0, 6500.0) in rec.gaps


def test_empty_piece_is_not_bytes() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(b"", 102.0)
    m.feed(ROLE + text("a") + DONE, 103.0)
    rec = m.finish(103.0)
    assert rec.max_silence_ms == 2900.0
    assert rec.events == 3


# == output gaps and stalls =====================================================


def test_output_gap_between_consecutive_outputs() -> None:
    m = meter(stall_after=10.0)
    m.feed(ROLE, 100.1)
    m.feed(text("a"), 100.5)
    m.feed(text("b"), 101.0)
    m.feed(text("c"), 103.0)
    m.feed(text("d"), 103.5)
    m.feed(DONE, 109.0)  # a completed stream: the tail is not an output gap
    rec = m.finish(109.5)
    assert rec.max_output_gap_ms == 2000.0
    assert rec.stalls == 0
    assert rec.stall_ms == 0.0
    assert list(m.output_intervals) == [0.5, 2.0, 0.5]


def test_a_long_wait_for_the_first_output_is_a_stall_and_the_ttft() -> None:
    # the silence a gateway cuts (no model output for so long) runs from the request
    # start too: it is a stall, and still the time to the first token
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE, 100.2)
    m.feed(KEEPALIVE, 102.0)
    m.feed(text("a"), 105.0)
    m.feed(text("b") + DONE, 105.5)
    rec = m.finish(105.5)
    assert rec.ttft_ms == 5000.0
    assert rec.stalls == 1
    assert rec.stall_ms == 5000.0
    assert rec.max_output_gap_ms == 500.0  # output gaps are between outputs
    assert [g for g in rec.gaps if g.kind == "stall"] == [Gap("stall", 0.0, 5000.0)]


def test_a_short_wait_for_the_first_output_is_no_stall() -> None:
    m = meter()
    m.feed(ROLE, 100.2)
    m.feed(text("a"), 100.9)
    m.feed(text("b") + DONE, 101.2)
    rec = m.finish(101.2)
    assert rec.ttft_ms == 900.0 and rec.stalls == 0 and rec.stall_ms == 0.0


def test_single_output_completed_has_no_output_gap_but_a_stall_after_it() -> None:
    # the wait after the last output counts as a stall, however the stream ends
    m = meter()
    m.feed(ROLE + text("a"), 100.5)
    m.feed(DONE, 110.0)
    rec = m.finish(110.0)
    assert rec.max_output_gap_ms is None
    assert rec.stalls == 1
    assert rec.stall_ms == 9500.0
    assert [g for g in rec.gaps if g.kind == "stall"] == [Gap("stall", 500.0, 9500.0)]


def test_completed_without_output_has_no_output_gap_and_one_stall() -> None:
    m = meter()
    m.feed(ROLE, 100.5)
    m.feed(DONE, 110.0)
    rec = m.finish(110.0)
    assert rec.max_output_gap_ms is None
    assert rec.stalls == 1 and rec.stall_ms == 10000.0  # the whole stream, silent


def test_stall_between_outputs() -> None:
    m = meter(stall_after=1.0)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(text("b"), 100.75)
    m.feed(text("c"), 103.25)  # 2.5 s output silence
    m.feed(DONE, 103.5)
    rec = m.finish(103.5)
    assert rec.stalls == 1
    assert rec.stall_ms == 2500.0
    assert rec.max_output_gap_ms == 2500.0
    assert [g for g in rec.gaps if g.kind == "stall"] == [Gap("stall", 750.0, 2500.0)]


def test_stall_threshold_is_inclusive() -> None:
    m = meter(stall_after=1.0)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(text("b"), 101.5)  # exactly 1.0 s: a stall
    m.feed(text("c"), 102.25)  # 0.75 s: not a stall
    m.feed(DONE, 102.5)
    rec = m.finish(102.5)
    assert rec.stalls == 1
    assert rec.stall_ms == 1000.0


def test_several_stalls_add_up() -> None:
    m = meter(stall_after=1.0)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(text("b"), 102.5)  # 2 s
    m.feed(text("c"), 102.75)
    m.feed(text("d"), 106.75)  # 4 s
    m.feed(text("e"), 107.0)
    m.feed(DONE, 107.0)
    rec = m.finish(107.0)
    assert rec.stalls == 2
    assert rec.stall_ms == 6000.0
    assert rec.max_output_gap_ms == 4000.0
    assert [g for g in rec.gaps if g.kind == "stall"] == [
        Gap("stall", 500.0, 2000.0),
        Gap("stall", 2750.0, 4000.0),
    ]


def test_keepalive_during_output_silence_does_not_end_the_stall() -> None:
    m = meter(stall_after=1.0)
    m.headers(100.1, 200)
    m.feed(ROLE, 100.2)
    m.feed(text("a"), 101.0)
    for i in range(1, 10):  # every 0.3 s: 101.3 ... 103.7
        m.feed(KEEPALIVE, 101.0 + 0.3 * i)
    m.feed(text("b"), 104.0)
    m.feed(DONE, 104.0)
    rec = m.finish(104.0)
    assert rec.keepalives == 9
    assert rec.stalls == 2  # (the first output came 1.0 s after the request: a stall too)
    assert rec.stall_ms == 4000.0
    assert rec.max_output_gap_ms == 3000.0
    assert rec.max_keepalive_gap_ms == 300.0
    assert rec.max_silence_ms == 800.0  # 100.2 -> 101.0; keepalives keep bytes flowing
    stalls = [g for g in rec.gaps if g.kind == "stall"]
    assert stalls == [Gap("stall", 0.0, 1000.0), Gap("stall", 1000.0, 3000.0)]


def test_silence_running_into_a_cut_is_a_stall() -> None:
    m = meter(stall_after=1.0)
    m.headers(100.1, 200)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(text("b"), 100.75)
    m.feed(KEEPALIVE, 101.75)
    m.feed(KEEPALIVE, 102.75)
    rec = m.finish(103.75, ending="upstream_disconnect", transport_error="connection reset")
    assert rec.outcome == "upstream_disconnect"
    assert rec.stalls == 1
    assert rec.stall_ms == 3000.0
    assert rec.max_output_gap_ms == 3000.0
    assert [g for g in rec.gaps if g.kind == "stall"] == [Gap("stall", 750.0, 3000.0)]


def test_short_tail_before_a_cut_is_an_output_gap_but_no_stall() -> None:
    m = meter(stall_after=1.0)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(text("b"), 100.75)
    rec = m.finish(101.25, ending="client_disconnect")
    assert rec.max_output_gap_ms == 500.0
    assert rec.stalls == 0
    assert rec.stall_ms == 0.0


def test_no_output_before_a_cut_is_a_stall_from_request_start() -> None:
    m = meter(stall_after=1.0)
    m.headers(100.1, 200)
    m.feed(ROLE, 100.2)
    m.feed(KEEPALIVE, 101.0)
    m.feed(KEEPALIVE, 102.0)
    rec = m.finish(103.0, ending="eof")
    assert rec.outcome == "truncated"
    assert rec.ttft_ms is None
    assert rec.max_output_gap_ms == 3000.0
    assert rec.stalls == 1
    assert rec.stall_ms == 3000.0
    assert [g for g in rec.gaps if g.kind == "stall"] == [Gap("stall", 0.0, 3000.0)]


def test_error_outcome_counts_the_tail_silence() -> None:
    m = meter(stall_after=1.0)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(sse({"error": {"message": "boom", "type": "server_error"}}), 102.5)
    rec = m.finish(102.5)
    assert rec.outcome == "error"
    assert rec.max_output_gap_ms == 2000.0
    assert rec.stalls == 1
    assert rec.stall_ms == 2000.0


def test_incomplete_outcome_counts_the_tail_as_a_stall_not_an_output_gap() -> None:
    m = meter("responses", stall_after=1.0)
    m.feed(RESP_CREATED + resp_text("a"), 100.5)
    m.feed(
        resp(
            "response.incomplete",
            response={
                "id": "resp_1",
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
            },
        ),
        105.0,
    )
    rec = m.finish(105.0)
    assert rec.outcome == "incomplete"
    assert rec.interrupted is False
    assert rec.finish_reason == "max_output_tokens"
    assert rec.max_output_gap_ms is None
    assert rec.stalls == 1 and rec.stall_ms == 4500.0


def test_output_after_terminal_event_still_counts_as_output() -> None:
    m = meter(stall_after=1.0)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(DONE, 100.6)
    m.feed(text("b"), 102.5)
    rec = m.finish(102.5)
    assert rec.outcome == "completed"
    assert rec.output_chars == 2
    assert rec.max_output_gap_ms == 2000.0
    assert rec.stalls == 1


# == outcomes ===================================================================


def test_done_is_completed() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a") + chat({}, finish="stop") + DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.finish_reason == "stop"
    assert rec.transport_error is None


def test_length_finish_is_a_completion() -> None:
    m = meter()
    m.feed(ROLE + text("a") + chat({}, finish="length") + DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("ending", ["upstream_disconnect", "client_disconnect"])
def test_transport_ending_after_terminal_does_not_change_outcome(ending: str) -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a") + DONE, 100.5)
    rec = m.finish(101.0, ending=ending, transport_error="peer closed connection")
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.transport_error == "peer closed connection"
    assert rec.stalls == 0


@pytest.mark.parametrize("ending", ["eof", "upstream_disconnect", "client_disconnect"])
def test_transport_ending_after_error_event_keeps_error(ending: str) -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(sse({"error": {"message": "overloaded", "type": "server_error", "code": "503"}}), 101)
    rec = m.finish(101.5, ending=ending, transport_error="reset" if ending != "eof" else None)
    assert rec.outcome == "error"
    assert rec.interrupted is True
    assert rec.error_type == "server_error"
    assert rec.error_code == "503"
    assert rec.error_message == "overloaded"
    assert rec.transport_error == ("reset" if ending != "eof" else None)


def test_error_event_then_done_is_error() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + sse({"error": {"message": "x", "type": "invalid_request_error"}}) + DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.outcome == "error"
    assert rec.events == 3
    assert rec.http_status == 200


def test_done_then_error_event_is_completed() -> None:
    m = meter()
    m.feed(ROLE + text("a") + DONE + sse({"error": {"message": "late"}}), 100.5)
    rec = m.finish(100.5)
    assert rec.outcome == "completed"
    assert rec.interrupted is False


def test_no_terminal_and_eof_is_truncated() -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a") + chat({}, finish="stop"), 100.5)
    rec = m.finish(100.6, ending="eof")
    assert rec.outcome == "truncated"
    assert rec.interrupted is True
    assert rec.partial_event_at_end is False


@pytest.mark.parametrize("ending", ["upstream_disconnect", "client_disconnect"])
def test_no_terminal_and_transport_ending(ending: str) -> None:
    m = meter()
    m.headers(100.1, 200)
    m.feed(ROLE + text("a"), 100.5)
    rec = m.finish(100.6, ending=ending, transport_error="gone")
    assert rec.outcome == ending
    assert rec.interrupted is True
    assert rec.transport_error == "gone"


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503, 301])
def test_non_2xx_status_is_http_error(status: int) -> None:
    m = meter()
    m.headers(100.1, status)
    m.read_body(
        json.dumps(
            {"error": {"message": "Rate limit reached", "type": "requests", "code": "rl"}}
        ).encode(),
        100.2,
    )
    rec = m.finish(100.2)
    assert rec.outcome == "http_error"
    assert rec.interrupted is False
    assert rec.http_status == status
    assert rec.error_type == "requests"
    assert rec.error_code == "rl"
    assert rec.error_message == "Rate limit reached"


def test_non_2xx_status_beats_a_terminal_event() -> None:
    m = meter()
    m.headers(100.1, 502)
    m.feed(ROLE + text("a") + DONE, 100.5)
    rec = m.finish(100.5)
    assert rec.outcome == "http_error"
    assert rec.interrupted is False


def test_non_2xx_with_no_body() -> None:
    m = meter()
    m.headers(100.1, 500)
    rec = m.finish(100.1)
    assert rec.outcome == "http_error"
    assert rec.ttfb_ms == 100.0
    assert rec.duration_ms == 100.0


def test_http_error_after_a_long_wait_is_not_a_stall() -> None:
    # a 504 after 60 s had no output stream to stall, however the edge reads its body
    m = meter(stall_after=1.0)
    m.headers(160.0, 504)
    rec = m.finish(160.1)
    assert rec.outcome == "http_error"
    assert rec.stalls == 0 and rec.stall_ms == 0.0
    assert rec.max_output_gap_ms is None


@pytest.mark.parametrize("status", [200, 201, 299])
def test_2xx_is_not_http_error(status: int) -> None:
    m = meter()
    m.headers(100.1, status)
    m.feed(ROLE + text("a") + DONE, 100.2)
    assert m.finish(100.2).outcome == "completed"


def test_unknown_ending_is_treated_as_upstream_disconnect() -> None:
    m = meter()
    m.feed(ROLE + text("a"), 100.2)
    rec = m.finish(100.3, ending="bogus")
    assert rec.outcome == "upstream_disconnect"


def test_responses_outcomes() -> None:
    m = meter("responses")
    m.feed(RESP_CREATED + resp_text("a"), 100.2)
    m.feed(
        resp(
            "response.completed",
            response={
                "id": "resp_1",
                "status": "completed",
                "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
            },
        ),
        100.3,
    )
    rec = m.finish(100.3)
    assert rec.outcome == "completed"
    assert rec.finish_reason == "completed"

    m = meter("responses")
    m.feed(RESP_CREATED + resp_text("a"), 100.2)
    m.feed(resp("error", error={"type": "server_error", "code": "oops", "message": "bad"}), 100.3)
    rec = m.finish(100.3)
    assert rec.outcome == "error"
    assert (rec.error_type, rec.error_code, rec.error_message) == ("server_error", "oops", "bad")


def test_anthropic_outcomes() -> None:
    m = meter("messages")
    m.feed(anth_start() + ANTH_BLOCK + anth_text("a"), 100.2)
    m.feed(
        anth("content_block_stop", index=0)
        + anth("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 4})
        + anth("message_stop"),
        100.3,
    )
    rec = m.finish(100.3)
    assert rec.outcome == "completed"
    assert rec.finish_reason == "max_tokens"

    m = meter("messages")
    m.feed(anth_start() + ANTH_BLOCK + anth_text("a"), 100.2)
    rec = m.finish(100.3)
    assert rec.outcome == "truncated"


def test_responses_tolerates_done_and_counts_it() -> None:
    m = meter("responses")
    m.feed(RESP_CREATED + resp_text("a"), 100.2)
    m.feed(resp("response.completed", response={"id": "resp_1", "status": "completed"}), 100.3)
    m.feed(DONE, 100.3)
    rec = m.finish(100.3)
    assert rec.outcome == "completed"
    assert rec.events == 4
    assert rec.parse_issues == 0


OUTCOME_CASES = {
    "completed": (200, ROLE + text("a") + DONE, "eof"),
    "error": (200, ROLE + sse({"error": {"message": "x"}}), "eof"),
    "truncated": (200, ROLE + text("a"), "eof"),
    "upstream_disconnect": (200, ROLE + text("a"), "upstream_disconnect"),
    "client_disconnect": (200, ROLE + text("a"), "client_disconnect"),
    "http_error": (500, b"", "eof"),
}


@pytest.mark.parametrize("outcome", sorted(OUTCOME_CASES))
def test_interrupted_exactly_for_the_four_outcomes(outcome: str) -> None:
    status, body, ending = OUTCOME_CASES[outcome]
    m = meter()
    m.headers(100.1, status)
    m.feed(body, 100.2)
    rec = m.finish(100.3, ending=ending)
    assert rec.outcome == outcome
    assert rec.interrupted is (
        outcome in {"error", "upstream_disconnect", "client_disconnect", "truncated"}
    )


def test_interrupted_outcomes_constant() -> None:
    assert (
        frozenset({"error", "upstream_disconnect", "client_disconnect", "truncated"})
        == INTERRUPTED_OUTCOMES
    )


# == the seeds' scenario: keepalives through a long silence, then the stall error ==

SEED_CASES = {
    "chat.completions": {
        "opening": ROLE,
        "output": text("Let me think."),
        "error": sse(
            {
                "error": {
                    "message": "Upstream stalled: no output for 120 s",
                    "type": "server_error",
                    "code": "stream_stalled",
                }
            }
        ),
        "events": 3,
        "error_fields": ("server_error", "stream_stalled", "Upstream stalled: no output for 120 s"),
    },
    "responses": {
        "opening": RESP_CREATED,
        "output": resp_text("Let me think."),
        "error": resp(
            "response.failed",
            response={
                "id": "resp_1",
                "status": "failed",
                "error": {"code": "server_error", "message": "The model stopped responding"},
                "usage": None,
            },
        ),
        "events": 3,
        "error_fields": ("response.failed", "server_error", "The model stopped responding"),
    },
    "messages": {
        "opening": anth_start() + ANTH_BLOCK + PING,
        "output": anth_text("Let me think."),
        "error": anth(
            "error",
            error={"type": "api_error", "message": "Response stream interrupted, please retry"},
        ),
        "events": 5,
        "error_fields": ("api_error", None, "Response stream interrupted, please retry"),
    },
}


@pytest.mark.parametrize("endpoint", list(SEED_CASES))
def test_seed_stall_error_after_keepalives(endpoint: str) -> None:
    case = SEED_CASES[endpoint]
    m = StreamMeter(endpoint, start=T0, stall_after=30.0)
    m.headers(100.2, 200)
    m.feed(case["opening"], 100.5)
    m.feed(case["output"], 101.0)
    for i in range(1, 12):  # ": hopbase-keepalive" every 10 s: 111 ... 211
        m.feed(KEEPALIVE, 101.0 + 10.0 * i)
    m.feed(case["error"], 221.0)  # 120 s without output: the gateway gives up
    rec = m.finish(221.0, ending="eof")

    assert rec.http_status == 200
    assert rec.outcome == "error"
    assert rec.interrupted is True
    assert (rec.error_type, rec.error_code, rec.error_message) == case["error_fields"]
    assert rec.ttfb_ms == 200.0
    assert rec.first_event_ms == 500.0
    assert rec.ttft_ms == 1000.0
    assert rec.duration_ms == 121000.0
    assert rec.events == case["events"]
    assert rec.keepalives == 11
    assert rec.max_keepalive_gap_ms == 10000.0
    assert rec.max_silence_ms == 10000.0
    assert rec.max_output_gap_ms == 120000.0
    assert rec.stalls == 1
    assert rec.stall_ms == 120000.0
    assert rec.output_chars == len("Let me think.")
    stalls = [g for g in rec.gaps if g.kind == "stall"]
    assert stalls == [Gap("stall", 1000.0, 120000.0)]
    keepalive_gaps = [g for g in rec.gaps if g.kind == "keepalive"]
    assert len(keepalive_gaps) == meter_mod.KEEPALIVE_GAPS_KEPT
    assert all(g.length_ms == 10000.0 for g in keepalive_gaps)
    assert [g for g in rec.gaps if g.kind == "silence"] == [Gap("silence", 1000.0, 10000.0)]


@pytest.mark.parametrize("endpoint", list(SEED_CASES))
def test_seed_stall_with_no_output_at_all(endpoint: str) -> None:
    case = SEED_CASES[endpoint]
    m = StreamMeter(endpoint, start=T0, stall_after=30.0)
    m.headers(100.2, 200)
    m.feed(case["opening"], 100.5)
    for i in range(1, 13):  # 110.5 ... 220.5
        m.feed(KEEPALIVE, 100.5 + 10.0 * i)
    m.feed(case["error"], 220.5)
    rec = m.finish(220.5)
    assert rec.outcome == "error"
    assert rec.ttft_ms is None
    assert rec.keepalives == 12
    assert rec.max_output_gap_ms == 120500.0
    assert rec.stalls == 1
    assert rec.stall_ms == 120500.0
    assert [g for g in rec.gaps if g.kind == "stall"] == [Gap("stall", 0.0, 120500.0)]


def test_seed_anthropic_interrupted_error_after_cut_then_disconnect() -> None:
    m = StreamMeter("messages", start=T0, stall_after=30.0)
    m.headers(100.2, 200)
    m.feed(anth_start() + ANTH_BLOCK, 100.5)
    m.feed(anth_text("partial answer"), 101.0)
    m.feed(SEED_CASES["messages"]["error"], 101.5)
    rec = m.finish(101.6, ending="upstream_disconnect", transport_error="EOF")
    assert rec.outcome == "error"
    assert rec.error_message == "Response stream interrupted, please retry"
    assert rec.transport_error == "EOF"
    assert rec.stalls == 0
    assert rec.max_output_gap_ms == 600.0


# == gaps =======================================================================


def test_gaps_are_sorted_and_relative_to_request_start() -> None:
    m = meter(stall_after=1.0)
    m.headers(100.25, 200)
    m.feed(ROLE + text("a"), 100.5)
    m.feed(KEEPALIVE, 101.0)
    m.feed(KEEPALIVE, 103.0)
    m.feed(text("b"), 103.5)
    m.feed(DONE, 103.5)
    rec = m.finish(103.5)
    assert rec.gaps == [
        Gap("stall", 500.0, 3000.0),
        Gap("keepalive", 1000.0, 2000.0),
        Gap("silence", 1000.0, 2000.0),
    ]
    assert rec.to_dict(with_gaps=True)["gaps"] == [
        {"kind": "stall", "start_ms": 500.0, "length_ms": 3000.0},
        {"kind": "keepalive", "start_ms": 1000.0, "length_ms": 2000.0},
        {"kind": "silence", "start_ms": 1000.0, "length_ms": 2000.0},
    ]


def test_gaps_keep_only_the_longest_keepalive_intervals() -> None:
    m = meter(stall_after=100.0)
    m.feed(ROLE + text("a"), 100.1)
    lengths = [1, 7, 2, 6, 3, 5, 4, 8, 1, 1]
    t = 101.0
    m.feed(KEEPALIVE, t)
    starts = {}
    for length in lengths:
        starts.setdefault(length, t)
        t += length
        m.feed(KEEPALIVE, t)
    m.feed(DONE, t)
    rec = m.finish(t)
    kept = [g for g in rec.gaps if g.kind == "keepalive"]
    assert len(kept) == meter_mod.KEEPALIVE_GAPS_KEPT == 5
    assert sorted(g.length_ms for g in kept) == [4000.0, 5000.0, 6000.0, 7000.0, 8000.0]
    assert [g.start_ms for g in kept] == sorted(g.start_ms for g in kept)
    for g in kept:
        assert g.start_ms == (starts[int(g.length_ms / 1000)] - T0) * 1000
    assert rec.max_keepalive_gap_ms == 8000.0
    assert len(m.keepalive_intervals) == len(lengths)


def test_no_gaps_for_a_smooth_untimed_stream() -> None:
    m = StreamMeter("chat.completions")
    m.feed(ROLE + text("a") + DONE)
    assert m.finish().gaps == []


# == untimed (start=None) =======================================================


def test_start_none_gives_all_timings_none() -> None:
    m = StreamMeter("chat.completions", start=None, stall_after=1.0)
    m.headers(100.2, 200)
    m.feed(ROLE, 100.5)
    m.feed(KEEPALIVE, 101.0)
    m.feed(KEEPALIVE, 105.0)
    m.feed(text("a"), 110.0)
    rec = m.finish(200.0, ending="upstream_disconnect")
    for name in TIMINGS:
        assert getattr(rec, name) is None, name
    assert rec.gaps == []
    assert rec.events == 2
    assert rec.keepalives == 2
    assert rec.outcome == "upstream_disconnect"
    assert rec.http_status == 200
    assert len(m.output_intervals) == 0


def test_start_none_and_no_times_at_all() -> None:
    m = StreamMeter("messages")
    m.feed(anth_start() + ANTH_BLOCK + anth_text("hi") + anth("message_stop"))
    rec = m.finish()
    for name in TIMINGS:
        assert getattr(rec, name) is None, name
    assert rec.outcome == "completed"
    assert rec.events == 4
    assert rec.output_chars == 2


# == bounded memory =============================================================


def test_output_intervals_capped_but_every_interval_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the cap is the rhythm's, applied by the meter's fast paths too
    monkeypatch.setattr(rhythm, "MAX_INTERVALS", 10)
    monkeypatch.setattr(meter_mod, "MAX_INTERVALS", 10)
    m = meter(stall_after=5.0)
    m.feed(ROLE, 100.0)
    t = 100.0
    for _ in range(1000):
        t += 0.25
        m.feed(text("x"), t)
    t += 7.0  # the longest gap comes long after the cap was reached
    m.feed(text("y"), t)
    for _ in range(1000):
        t += 0.25
        m.feed(KEEPALIVE, t)
    m.feed(DONE, t)
    rec = m.finish(t)
    assert len(m.output_intervals) == 10
    assert len(m.keepalive_intervals) == 10
    assert rec.max_output_gap_ms == 7000.0
    assert rec.stalls == 2  # the 7 s gap, and the 250 s of keepalives after the last output
    assert rec.stall_ms == 257000.0
    assert rec.output_chars == 1001
    assert rec.keepalives == 1000
    assert rec.events == 1003


def test_stall_gaps_capped_but_every_stall_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rhythm, "MAX_STALL_GAPS", 3)
    m = meter(stall_after=1.0)
    t = 100.5
    m.feed(ROLE + text("x"), t)
    for _ in range(6):
        t += 2.0
        m.feed(text("x"), t)
    m.feed(DONE, t)
    rec = m.finish(t)
    assert rec.stalls == 6
    assert rec.stall_ms == 12000.0
    assert len([g for g in rec.gaps if g.kind == "stall"]) == 3


def test_default_caps_are_sane() -> None:
    assert meter_mod.MAX_INTERVALS >= 1000
    assert meter_mod.MAX_STALL_GAPS >= 10
    assert meter_mod.KEEPALIVE_GAPS_KEPT >= 1


# == unfinished and oversized events ============================================


def test_unfinished_event_at_end_sets_partial_event_at_end() -> None:
    m = meter()
    m.feed(ROLE + text("a"), 100.2)
    m.feed(b'data: {"id": "chatcmpl-1", "choi', 100.3)
    rec = m.finish(100.4, ending="upstream_disconnect")
    assert rec.partial_event_at_end is True
    assert rec.events == 2
    assert rec.outcome == "upstream_disconnect"


def test_unfinished_done_at_end_is_not_completed() -> None:
    m = meter()
    m.feed(ROLE + text("a") + b"data: [DONE]\n", 100.2)
    rec = m.finish(100.3)
    assert rec.partial_event_at_end is True
    assert rec.outcome == "truncated"


def test_clean_end_has_no_partial_event() -> None:
    m = meter()
    m.feed(ROLE + text("a") + DONE, 100.2)
    assert m.finish(100.3).partial_event_at_end is False


def test_oversized_event_is_counted_not_dispatched() -> None:
    m = meter(max_event_bytes=256)
    m.feed(ROLE, 100.1)
    m.feed(text("x" * 1000), 100.2)
    m.feed(text("a") + DONE, 100.3)
    rec = m.finish(100.3)
    assert rec.oversized_events == 1
    # the skipped event still arrived: it counts among events, not as output
    assert rec.events == 4
    assert rec.output_chars == 1
    assert rec.outcome == "completed"


# == usage sources ==============================================================


def test_reported_usage_on_chat() -> None:
    m = meter()
    m.feed(ROLE + text("a") + chat({}, finish="stop") + chat_usage(10, 5) + DONE, 100.2)
    rec = m.finish(100.2)
    assert (rec.input_tokens, rec.output_tokens) == (10, 5)
    assert rec.input_source == "reported"
    assert rec.output_source == "reported"
    assert rec.usage_source == "reported"
    assert rec.raw_usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_no_usage_reported() -> None:
    m = meter()
    m.feed(ROLE + text("a") + DONE, 100.2)
    rec = m.finish(100.2)
    assert rec.input_tokens is None
    assert rec.output_tokens is None
    assert rec.input_source == "none"
    assert rec.output_source == "none"
    assert rec.usage_source == "none"


def test_anthropic_cut_before_message_delta_is_mixed() -> None:
    m = meter("messages")
    m.feed(
        anth_start(11, cache_read_input_tokens=100, cache_creation_input_tokens=20)
        + ANTH_BLOCK
        + anth_text("partial"),
        100.2,
    )
    rec = m.finish(100.5, ending="upstream_disconnect")
    assert rec.input_tokens == 131
    assert rec.cache_read_tokens == 100
    assert rec.cache_write_tokens == 20
    assert rec.output_tokens is None  # the provisional count is not the output
    assert rec.input_source == "reported"
    assert rec.output_source == "none"
    assert rec.usage_source == "mixed"


def test_anthropic_complete_usage_is_reported() -> None:
    m = meter("messages")
    m.feed(anth_start(11) + ANTH_BLOCK + anth_text("hi"), 100.2)
    m.feed(
        anth("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 6})
        + anth("message_stop"),
        100.3,
    )
    rec = m.finish(100.3)
    assert (rec.input_tokens, rec.output_tokens) == (11, 6)
    assert rec.usage_source == "reported"


# == the record the meter fills =================================================


def test_meter_fills_a_given_record() -> None:
    given = StreamRecord(id="abc", model="gpt-4o", upstream="api.openai.com")
    m = StreamMeter("responses", start=T0, record=given)
    m.feed(RESP_CREATED + resp_text("hi"), 100.1)
    rec = m.finish(100.2, ending="client_disconnect")
    assert rec is given
    assert (rec.id, rec.model, rec.upstream) == ("abc", "gpt-4o", "api.openai.com")
    assert (rec.endpoint, rec.provider) == ("responses", "openai")
    assert rec.response_id == "resp_1"
    assert rec.response_model == "gpt-5"
    assert rec.outcome == "client_disconnect"


@pytest.mark.parametrize(
    ("endpoint", "provider"),
    [("chat.completions", "openai"), ("responses", "openai"), ("messages", "anthropic")],
)
def test_provider_by_protocol(endpoint: str, provider: str) -> None:
    rec = StreamMeter(endpoint).finish()
    assert rec.endpoint == endpoint
    assert rec.provider == provider


def test_unknown_endpoint_raises_key_error() -> None:
    with pytest.raises(KeyError):
        StreamMeter("embeddings")


def test_non_streamed_body() -> None:
    m = meter()
    m.headers(100.5, 200)
    body = {
        "id": "chatcmpl-9",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"content": "Hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    m.read_body(json.dumps(body).encode(), 101.0)
    rec = m.finish(101.0)
    assert rec.streamed is False
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.events is None
    assert rec.keepalives is None
    assert rec.ttfb_ms == 500.0
    assert rec.duration_ms == 1000.0
    assert rec.output_chars == 5
    assert rec.stalls == 0
    assert rec.usage_source == "reported"
