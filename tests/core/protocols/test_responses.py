"""OpenAI Responses edge cases (docs/ARCHITECTURE.md, "The protocols"), hand-written bodies."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.usage import RESPONSES_USAGE

EP = "responses"


def resp(status: str = "in_progress", **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "model": "gpt-5-nano",
        "output": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }
    obj.update(extra)
    return obj


USAGE = RESPONSES_USAGE


def ev(typ: str, **fields: Any) -> dict[str, Any]:
    return {"type": typ, **fields}


def created(wire: Any, **extra: Any) -> bytes:
    return wire.event(ev("response.created", sequence_number=0, response=resp(**extra))) + (
        wire.event(ev("response.in_progress", sequence_number=1, response=resp(**extra)))
    )


def completed(wire: Any, usage: dict | None = None, **extra: Any) -> bytes:
    return wire.event(
        ev("response.completed", response=resp("completed", usage=usage or USAGE, **extra))
    )


# -- output deltas ------------------------------------------------------------------

OUTPUT_DELTAS = [
    "response.output_text.delta",
    "response.refusal.delta",
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
    "response.mcp_call_arguments.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.code_interpreter_call_code.delta",
    "response.audio.transcript.delta",
]


@pytest.mark.parametrize("typ", OUTPUT_DELTAS)
def test_output_delta_types(wire: Any, typ: str) -> None:
    rec = wire.timed(
        EP,
        [
            (0.1, created(wire)),
            (0.4, wire.event(ev(typ, item_id="x", output_index=0, delta="héllo"))),
            (0.5, completed(wire)),
        ],
        end=0.6,
    )
    assert rec.output_chars == 5
    assert rec.ttft_ms == 400.0
    assert rec.first_event_ms == 100.0
    assert rec.outcome == "completed"


STRUCTURE = [
    ev(
        "response.output_item.added",
        output_index=0,
        item={"id": "msg_1", "type": "message", "role": "assistant", "content": []},
    ),
    ev(
        "response.content_part.added",
        item_id="msg_1",
        part={"type": "output_text", "text": "", "annotations": []},
    ),
    ev("response.output_text.done", item_id="msg_1", text="full text here"),
    ev("response.content_part.done", item_id="msg_1", part={"type": "output_text", "text": "t"}),
    ev(
        "response.output_item.done",
        item={"id": "msg_1", "type": "message", "content": [{"type": "output_text", "text": "t"}]},
    ),
    ev("response.reasoning_summary_part.added", item_id="rs", part={"text": ""}),
    ev("response.reasoning_summary_text.done", item_id="rs", text="summary"),
    ev("response.function_call_arguments.done", item_id="fc", arguments='{"a":1}'),
    ev("response.output_text.annotation.added", annotation={"type": "url_citation"}),
    ev("response.web_search_call.searching", item_id="ws"),
    ev("response.image_generation_call.partial_image", partial_image_b64="aGVsbG8="),
]


def test_structure_events_are_not_output(wire: Any) -> None:
    body = created(wire) + b"".join(wire.event(e) for e in STRUCTURE) + completed(wire)
    rec = wire.timed(EP, [(0.1, body)], end=0.2)
    assert rec.output_chars == 0
    assert rec.ttft_ms is None
    assert rec.tool_calls == 0
    assert rec.events == 2 + len(STRUCTURE) + 1


def test_function_call_item_is_a_tool_call_and_its_arguments_are_output(wire: Any) -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f"}
    body = (
        created(wire)
        + wire.event(ev("response.output_item.added", output_index=0, item=item))
        + wire.event(ev("response.function_call_arguments.delta", item_id="fc_1", delta='{"a":'))
        + wire.event(ev("response.function_call_arguments.delta", item_id="fc_1", delta="1}"))
        + wire.event(ev("response.function_call_arguments.done", arguments='{"a":1}'))
        + wire.event(ev("response.output_item.done", item={**item, "arguments": '{"a":1}'}))
        + completed(wire)
    )
    rec = wire.meter(EP, body)
    assert rec.tool_calls == 1
    assert rec.output_chars == len('{"a":1}')


# -- errors and terminal events -----------------------------------------------------

MESSAGE = "You exceeded your current quota, please check your plan and billing details."


def test_error_event_nested_under_error(wire: Any) -> None:
    # the wire's shape
    error = ev(
        "error",
        sequence_number=2,
        error={
            "type": "insufficient_quota",
            "code": "insufficient_quota",
            "message": MESSAGE,
            "param": None,
        },
    )
    failed = ev(
        "response.failed",
        response=resp("failed", error={"code": "insufficient_quota", "message": MESSAGE}),
    )
    rec = wire.meter(EP, created(wire) + wire.event(error) + wire.event(failed))
    assert rec.outcome == "error"
    assert rec.interrupted is True
    assert (rec.error_type, rec.error_code, rec.error_message) == (
        "insufficient_quota",
        "insufficient_quota",
        MESSAGE,
    )
    assert rec.finish_reason is None
    assert rec.events == 4


def test_error_event_with_top_level_fields(wire: Any) -> None:
    # the API reference's shape
    error = ev("error", code="ERR_SOMETHING", message="Something went wrong", param=None)
    rec = wire.meter(EP, created(wire) + wire.event(error))
    assert rec.outcome == "error"
    assert rec.error_code == "ERR_SOMETHING"
    assert rec.error_message == "Something went wrong"
    assert rec.error_type is not None


def test_response_failed_with_error_code(wire: Any) -> None:
    failed = ev(
        "response.failed",
        response=resp(
            "failed", error={"code": "rate_limit_exceeded", "message": "Rate limit reached"}
        ),
    )
    body = (
        created(wire)
        + wire.event(ev("response.output_text.delta", item_id="m", delta="Part"))
        + wire.event(failed)
    )
    rec = wire.meter(EP, body)
    assert rec.outcome == "error"
    assert rec.error_code == "rate_limit_exceeded"
    assert rec.error_message == "Rate limit reached"
    assert rec.finish_reason is None
    assert rec.output_chars == 4
    assert rec.input_tokens is None and rec.output_tokens is None  # usage: null


@pytest.mark.parametrize("reason", ["max_output_tokens", "content_filter"])
def test_response_incomplete_with_reason(wire: Any, reason: str) -> None:
    usage = {"input_tokens": 10, "output_tokens": 16, "total_tokens": 26}
    incomplete = ev(
        "response.incomplete",
        response=resp("incomplete", incomplete_details={"reason": reason}, usage=usage),
    )
    body = (
        created(wire)
        + wire.event(ev("response.output_text.delta", item_id="m", delta="Once upon"))
        + wire.event(incomplete)
    )
    rec = wire.meter(EP, body)
    assert rec.outcome == "incomplete"
    assert rec.interrupted is False
    assert rec.finish_reason == reason
    assert (rec.input_tokens, rec.output_tokens) == (10, 16)


def test_completed_finish_reason_is_the_status(wire: Any) -> None:
    rec = wire.meter(EP, created(wire) + completed(wire))
    assert rec.finish_reason == "completed"
    assert rec.outcome == "completed"


def test_first_terminal_event_decides(wire: Any) -> None:
    failed = ev("response.failed", response=resp("failed", error={"code": "server_error"}))
    rec = wire.meter(EP, created(wire) + completed(wire) + wire.event(failed))
    assert rec.outcome == "completed"
    assert rec.events == 4


def test_cut_before_the_terminal_event_is_truncated(wire: Any) -> None:
    body = created(wire) + wire.event(ev("response.output_text.delta", item_id="m", delta="Hi"))
    rec = wire.meter(EP, body)
    assert rec.outcome == "truncated"
    assert rec.response_id == "resp_1"
    assert rec.response_model == "gpt-5-nano"
    assert rec.output_tokens is None


# -- tolerance ----------------------------------------------------------------------


def test_unknown_event_types_are_tolerated(wire: Any) -> None:
    body = (
        created(wire)
        + wire.event(ev("response.brand_new_thing", payload={"x": [1, 2]}))
        + wire.event(ev("response.some_future.delta", delta={"not": "text"}))
        + wire.event(ev("totally.unknown"))
        + wire.event(ev("response.output_text.delta", delta="ok", brand_new_field=1))
        + completed(wire)
    )
    rec = wire.meter(EP, body)
    assert rec.outcome == "completed"
    assert rec.parse_issues == 0
    assert rec.output_chars == 2
    assert rec.events == 7


def test_a_done_marker_is_tolerated(wire: Any) -> None:
    rec = wire.meter(EP, created(wire) + completed(wire) + b"data: [DONE]\n\n")
    assert rec.outcome == "completed"
    assert rec.parse_issues == 0
    assert rec.events == 4


def test_a_done_marker_alone_does_not_complete_a_response(wire: Any) -> None:
    rec = wire.meter(EP, created(wire) + b"data: [DONE]\n\n")
    assert rec.outcome == "truncated"


def test_event_line_and_json_type_may_disagree_json_wins(wire: Any) -> None:
    body = created(wire) + wire.event(ev("response.output_text.delta", delta="abc"), "message")
    rec = wire.meter(EP, body + completed(wire))
    assert rec.output_chars == 3


# -- usage and ids ------------------------------------------------------------------


def test_cached_and_reasoning_tokens_are_normalised(wire: Any) -> None:
    rec = wire.meter(EP, created(wire) + completed(wire))
    assert rec.input_tokens == 3737  # already inclusive of the cached part
    assert rec.cache_read_tokens == 2304
    assert rec.output_tokens == 621  # already inclusive of reasoning
    assert rec.reasoning_tokens == 512
    assert rec.cache_write_tokens is None
    assert rec.usage_source == "reported"


def test_cache_write_tokens_in_newer_streams(wire: Any) -> None:
    usage = {
        "input_tokens": 19,
        "input_tokens_details": {"cache_write_tokens": 7, "cached_tokens": 0},
        "output_tokens": 105,
        "output_tokens_details": {"reasoning_tokens": 44},
        "total_tokens": 124,
    }
    rec = wire.meter(EP, created(wire) + completed(wire, usage=usage))
    assert (rec.input_tokens, rec.cache_read_tokens, rec.cache_write_tokens) == (19, 0, 7)


def test_rotating_ids_the_terminal_response_is_the_final_word(wire: Any) -> None:
    # GitHub Copilot rotates the response id on every event
    body = (
        wire.event(ev("response.created", response=resp(id="capture-id-1")))
        + wire.event(ev("response.in_progress", response=resp(id="capture-id-2")))
        + wire.event(ev("response.output_text.delta", delta="x"))
        + completed(wire, id="capture-id-4")
    )
    rec = wire.meter(EP, body)
    assert rec.response_id == "capture-id-4"
    assert rec.response_model == "gpt-5-nano"


def test_several_responses_in_one_body_keep_the_last_whole(wire: Any) -> None:
    first = {"input_tokens": 134, "output_tokens": 28, "total_tokens": 162}
    second = {"input_tokens": 299, "output_tokens": 12, "total_tokens": 311}
    body = (
        created(wire, id="resp_a")
        + completed(wire, usage=first, id="resp_a")
        + created(wire, id="resp_b")
        + completed(wire, usage=second, id="resp_b")
    )
    rec = wire.meter(EP, body)
    assert rec.response_id == "resp_b"
    assert (rec.input_tokens, rec.output_tokens) == (299, 12)
    assert rec.outcome == "completed"


# -- non-streamed bodies ------------------------------------------------------------


def test_non_streamed_body(wire: Any) -> None:
    body = resp(
        "completed",
        id="resp_ns",
        output=[
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Thinking"}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
            },
            {"type": "function_call", "id": "fc_1", "name": "f", "arguments": '{"a":1}'},
        ],
        usage=USAGE,
    )
    rec = wire.body(EP, body)
    assert rec.streamed is False
    assert rec.outcome == "completed"
    assert rec.response_id == "resp_ns"
    assert rec.finish_reason == "completed"
    assert rec.tool_calls == 1
    assert rec.output_chars == len("Thinking") + len("Hello") + len('{"a":1}')
    assert (rec.input_tokens, rec.cache_read_tokens) == (3737, 2304)
    assert (rec.output_tokens, rec.reasoning_tokens) == (621, 512)
    assert rec.events is None


def test_non_streamed_incomplete_body(wire: Any) -> None:
    body = resp(
        "incomplete",
        incomplete_details={"reason": "max_output_tokens"},
        usage={"input_tokens": 5, "output_tokens": 16, "total_tokens": 21},
    )
    rec = wire.body(EP, body)
    assert rec.outcome == "incomplete"
    assert rec.finish_reason == "max_output_tokens"
    assert rec.output_tokens == 16


@pytest.mark.parametrize(
    ("name", "outcome"),
    [
        ("response.completed", "completed"),
        ("response.incomplete", "incomplete"),
        ("response.failed", "error"),
        ("error", "error"),
    ],
)
def test_unreadable_terminal_event_is_told_by_its_event_line(
    wire: Any, name: str, outcome: str
) -> None:
    # a terminal event whose JSON is broken still ended the stream, as its event line says
    raw = created(wire) + f'event: {name}\ndata: {{"type":"{name}"\n\n'.encode()
    rec = wire.meter(EP, raw)
    assert rec.parse_issues == 1
    assert rec.outcome == outcome
