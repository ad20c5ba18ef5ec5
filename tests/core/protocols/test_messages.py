"""Anthropic Messages edge cases (docs/ARCHITECTURE.md, "The protocols"), hand-written bodies."""

from __future__ import annotations

from typing import Any

import pytest

EP = "messages"


def start(
    usage: dict[str, Any] | None = None, mid: str = "msg_1", model: str = "claude-x"
) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage if usage is not None else {"input_tokens": 9, "output_tokens": 1},
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, d: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def text(index: int, t: str) -> dict[str, Any]:
    return delta(index, {"type": "text_delta", "text": t})


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(usage: dict[str, Any], stop_reason: str | None = "end_turn") -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": usage,
    }


STOP = {"type": "message_stop"}
PING = {"type": "ping"}
INTERRUPTED = {
    "type": "error",
    "error": {"type": "api_error", "message": "Response stream interrupted, please retry"},
}


def body(wire: Any, *events: dict[str, Any]) -> bytes:
    return b"".join(wire.event(e) for e in events)


# -- the seed's example -------------------------------------------------------------


def test_seed_example_japanese_text_and_message_delta_usage(wire: Any) -> None:
    # HopBase docs (seed 000), verbatim events
    raw = (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg_EXAMPLE","role":"assistant",'
        '"model":"claude-sonnet-5","content":[],"usage":{"input_tokens":9,"output_tokens":1}}}\n'
        "\n"
        "event: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
        '"text":"こんにちは！"}}\n'
        "\n"
        "event: message_delta\n"
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        '"usage":{"output_tokens":14}}\n'
        "\n"
        "event: message_stop\n"
        'data: {"type":"message_stop"}\n'
        "\n"
    ).encode()
    rec = wire.meter(EP, raw)
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.response_id == "msg_EXAMPLE"
    assert rec.response_model == "claude-sonnet-5"
    assert rec.finish_reason == "end_turn"
    assert rec.output_chars == 6  # characters, not bytes
    assert (rec.input_tokens, rec.output_tokens) == (9, 14)
    assert rec.cache_read_tokens is None and rec.cache_write_tokens is None
    assert rec.events == 4
    assert rec.usage_source == "reported"


def test_seed_gateway_interruption_error(wire: Any) -> None:
    # HopBase adds one api_error "Response stream interrupted" when a Claude stream is cut
    rec = wire.meter(EP, body(wire, start(), text(0, "こんにち"), INTERRUPTED))
    assert rec.outcome == "error"
    assert rec.interrupted is True
    assert rec.error_type == "api_error"
    assert rec.error_message == "Response stream interrupted, please retry"
    assert rec.output_chars == 4
    assert rec.input_tokens == 9
    assert rec.output_tokens is None


def test_overloaded_error(wire: Any) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    rec = wire.meter(EP, body(wire, start(), PING, overloaded))
    assert rec.outcome == "error"
    assert (rec.error_type, rec.error_message) == ("overloaded_error", "Overloaded")


def test_message_stop_then_error_stays_completed(wire: Any) -> None:
    rec = wire.meter(
        EP,
        body(wire, start(), text(0, "Hi"), message_delta({"output_tokens": 3}), STOP, INTERRUPTED),
    )
    assert rec.outcome == "completed"
    assert rec.events == 5


# -- events, pings, keepalives ------------------------------------------------------


def test_ping_is_an_event_not_a_keepalive(wire: Any) -> None:
    rec = wire.meter(EP, body(wire, start(), PING, PING, STOP))
    assert rec.events == 4
    assert rec.keepalives == 0
    assert rec.output_chars == 0


def test_keepalive_comment_is_counted_in_keepalives(wire: Any) -> None:
    raw = (
        wire.event(start())
        + b": keepalive\n\n"
        + wire.event(text(0, "Hi"))
        + b": hopbase-keepalive\n"
        + wire.event(STOP)
    )
    rec = wire.meter(EP, raw)
    assert rec.keepalives == 2
    assert rec.events == 3
    assert rec.output_chars == 2
    assert rec.outcome == "completed"


def test_keepalive_is_not_output_and_does_not_start_ttft(wire: Any) -> None:
    rec = wire.timed(
        EP,
        [
            (0.1, wire.event(start())),
            (0.2, b": hopbase-keepalive\n"),
            (0.3, wire.event(PING)),
            (0.9, wire.event(text(0, "Hi"))),
            (1.0, wire.event(STOP)),
        ],
        end=1.1,
    )
    assert rec.ttft_ms == 900.0
    assert rec.first_event_ms == 100.0
    assert rec.keepalives == 1


# -- what is output -----------------------------------------------------------------


def test_signature_and_citations_deltas_are_not_output(wire: Any) -> None:
    citation = {
        "type": "citations_delta",
        "citation": {"type": "char_location", "cited_text": "a long cited passage"},
    }
    rec = wire.timed(
        EP,
        [
            (0.1, wire.event(start())),
            (0.2, wire.event(block_start(0, {"type": "thinking", "thinking": ""}))),
            (0.3, wire.event(delta(0, {"type": "thinking_delta", "thinking": ""}))),
            (0.4, wire.event(delta(0, {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}))),
            (0.5, wire.event(delta(1, citation))),
            (0.6, wire.event(STOP)),
        ],
        end=0.7,
    )
    assert rec.output_chars == 0
    assert rec.ttft_ms is None


def test_thinking_delta_is_output(wire: Any) -> None:
    rec = wire.timed(
        EP,
        [
            (0.1, wire.event(start())),
            (
                0.2,
                wire.event(block_start(0, {"type": "thinking", "thinking": "", "signature": ""})),
            ),
            (0.3, wire.event(delta(0, {"type": "thinking_delta", "thinking": "Simple question"}))),
            (0.4, wire.event(delta(0, {"type": "signature_delta", "signature": "abc="}))),
            (0.5, wire.event(text(1, "Hi"))),
            (0.6, wire.event(STOP)),
        ],
        end=0.7,
    )
    assert rec.output_chars == len("Simple question") + 2
    assert rec.ttft_ms == 300.0


def test_input_json_delta_is_output_and_tool_use_is_a_call(wire: Any) -> None:
    tool = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    rec = wire.timed(
        EP,
        [
            (0.1, wire.event(start())),
            (0.2, wire.event(block_start(0, tool))),
            (0.3, wire.event(delta(0, {"type": "input_json_delta", "partial_json": ""}))),
            (0.4, wire.event(delta(0, {"type": "input_json_delta", "partial_json": '{"loc'}))),
            (0.5, wire.event(delta(0, {"type": "input_json_delta", "partial_json": '":"P"}'}))),
            (0.6, wire.event(message_delta({"output_tokens": 65}, "tool_use"))),
            (0.7, wire.event(STOP)),
        ],
        end=0.8,
    )
    assert rec.tool_calls == 1
    assert rec.output_chars == len('{"loc":"P"}')
    assert rec.ttft_ms == 400.0  # the empty partial_json is no output
    assert rec.finish_reason == "tool_use"


@pytest.mark.parametrize("kind", ["server_tool_use", "mcp_tool_use"])
def test_server_and_mcp_tool_blocks_are_calls(wire: Any, kind: str) -> None:
    block = {"type": kind, "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    rec = wire.meter(EP, body(wire, start(), block_start(0, block), block_start(1, result), STOP))
    assert rec.tool_calls == 1


# -- usage --------------------------------------------------------------------------


def test_cumulative_message_delta_usage_overwrites_never_sums(wire: Any) -> None:
    rec = wire.meter(
        EP,
        body(
            wire,
            start({"input_tokens": 9, "output_tokens": 5}),
            text(0, "a"),
            message_delta({"output_tokens": 10}, None),
            text(0, "b"),
            message_delta({"output_tokens": 25}),
            STOP,
        ),
    )
    assert rec.output_tokens == 25
    assert rec.input_tokens == 9


def test_message_delta_input_and_cache_counts_override_message_start(wire: Any) -> None:
    first = {
        "input_tokens": 2,
        "cache_creation_input_tokens": 3068,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 3068, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 69,
    }
    final = {
        "input_tokens": 6,
        "cache_creation_input_tokens": 3337,
        "cache_read_input_tokens": 6289,
        "output_tokens": 198,
        "output_tokens_details": {"thinking_tokens": 0},
        "server_tool_use": {"web_search_requests": 0},
    }
    rec = wire.meter(EP, body(wire, start(first), text(0, "x"), message_delta(final), STOP))
    assert rec.input_tokens == 6 + 3337 + 6289
    assert rec.cache_read_tokens == 6289
    assert rec.cache_write_tokens == 3337
    assert rec.output_tokens == 198
    assert rec.reasoning_tokens == 0


def test_message_delta_input_tokens_only(wire: Any) -> None:
    rec = wire.meter(
        EP,
        body(
            wire,
            start({"input_tokens": 43, "output_tokens": 1}),
            text(0, "pong"),
            message_delta({"input_tokens": 61, "output_tokens": 2}),
            STOP,
        ),
    )
    assert (rec.input_tokens, rec.output_tokens) == (61, 2)


def test_cache_counts_are_part_of_input(wire: Any) -> None:
    usage = {
        "input_tokens": 10,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 1000,
        "output_tokens": 1,
    }
    rec = wire.meter(EP, body(wire, start(usage), message_delta({"output_tokens": 7}), STOP))
    assert rec.input_tokens == 1110
    assert (rec.cache_read_tokens, rec.cache_write_tokens) == (100, 1000)


def test_thinking_tokens_are_the_reasoning_part_of_output(wire: Any) -> None:
    final = {"output_tokens": 106, "output_tokens_details": {"thinking_tokens": 67}}
    rec = wire.meter(EP, body(wire, start(), message_delta(final, "refusal"), STOP))
    assert (rec.output_tokens, rec.reasoning_tokens) == (106, 67)
    assert rec.finish_reason == "refusal"


def test_cut_before_message_delta_keeps_exact_input_but_no_output(wire: Any) -> None:
    usage = {
        "input_tokens": 450,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 30,
        "output_tokens": 1,  # provisional: not the output
    }
    rec = wire.meter(
        EP, body(wire, start(usage), block_start(0, {"type": "text", "text": ""}), text(0, "I'll"))
    )
    assert rec.outcome == "truncated"
    assert rec.input_tokens == 500
    assert (rec.cache_read_tokens, rec.cache_write_tokens) == (30, 20)
    assert rec.output_tokens is None
    assert rec.reasoning_tokens is None
    assert rec.input_source == "reported"
    assert rec.output_source == "none"
    assert rec.usage_source == "mixed"
    assert rec.output_chars == 4


def test_duplicated_message_start_is_not_counted_twice(wire: Any) -> None:
    dup = start({"input_tokens": 17, "output_tokens": 1}, mid="msg_dup")
    rec = wire.meter(
        EP,
        body(wire, dup, dup, text(0, "Hello"), message_delta({"output_tokens": 227}), STOP),
    )
    assert rec.input_tokens == 17
    assert rec.output_tokens == 227
    assert rec.response_id == "msg_dup"
    assert rec.output_chars == 5
    assert rec.events == 5


def test_spliced_message_start_with_new_id_keeps_the_new_message(wire: Any) -> None:
    first = start(
        {"input_tokens": 17, "cache_read_input_tokens": 5, "output_tokens": 1}, mid="msg_first"
    )
    second = start({"input_tokens": 20, "output_tokens": 1}, mid="msg_second", model="claude-y")
    rec = wire.meter(
        EP,
        body(
            wire,
            first,
            text(0, "abc"),
            second,
            text(0, "de"),
            message_delta({"output_tokens": 65}, "tool_use"),
            STOP,
        ),
    )
    assert rec.response_id == "msg_second"
    assert rec.response_model == "claude-y"
    assert rec.input_tokens == 20  # the first message's cache read is not carried over
    assert rec.cache_read_tokens is None
    assert rec.output_tokens == 65
    assert rec.output_chars == 5  # output received is output received


def test_whitespace_padded_json(wire: Any) -> None:
    raw = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"id":"msg_pad","model":"claude-x",'
        b'"usage":{"input_tokens":450,"output_tokens":1}}          }\n\n'
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"I"}       }\n\n'
        b"event: message_delta\n"
        b'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},'
        b'"usage":{"output_tokens":124}    }\n\n'
        b"event: message_stop\n"
        b'data: {"type":"message_stop" }\n\n'
    )
    rec = wire.meter(EP, raw)
    assert rec.parse_issues == 0
    assert rec.outcome == "completed"
    assert rec.finish_reason == "max_tokens"
    assert (rec.input_tokens, rec.output_tokens) == (450, 124)
    assert rec.output_chars == 1


def test_malformed_event_is_a_parse_issue_and_still_an_event(wire: Any) -> None:
    raw = wire.event(start()) + b'event: content_block_delta\ndata: {"type":\n\n' + wire.event(STOP)
    rec = wire.meter(EP, raw)
    assert rec.parse_issues == 1
    assert rec.events == 3
    assert rec.outcome == "completed"


def test_unknown_event_and_delta_types_are_tolerated(wire: Any) -> None:
    rec = wire.meter(
        EP,
        body(
            wire,
            start(),
            {"type": "brand_new_event", "x": 1},
            delta(0, {"type": "future_delta", "text": "???"}),
            text(0, "ok"),
            STOP,
        ),
    )
    assert rec.parse_issues == 0
    assert rec.output_chars == 2


def test_compaction_delta_is_output(wire: Any) -> None:
    # the context summary is written by the model and billed as output
    rec = wire.meter(
        EP, body(wire, start(), delta(0, {"type": "compaction_delta", "content": "summary"}), STOP)
    )
    assert rec.output_chars == len("summary")
    assert rec.outcome == "completed"


# -- non-streamed bodies ------------------------------------------------------------


def test_non_streamed_body(wire: Any) -> None:
    message = {
        "id": "msg_ns",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [
            {"type": "thinking", "thinking": "Hmm", "signature": "sig"},
            {"type": "text", "text": "I'll check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"q": "P"}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 377,
            "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 20,
            "output_tokens": 65,
        },
    }
    rec = wire.body(EP, message)
    assert rec.streamed is False
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.response_id == "msg_ns"
    assert rec.response_model == "claude-sonnet-4-20250514"
    assert rec.finish_reason == "tool_use"
    assert rec.tool_calls == 1
    assert rec.output_chars == len("Hmm") + len("I'll check.") + len('{"q":"P"}')
    assert rec.input_tokens == 400
    assert (rec.cache_read_tokens, rec.cache_write_tokens) == (20, 3)
    assert rec.output_tokens == 65
    assert rec.usage_source == "reported"
    assert rec.events is None


@pytest.mark.parametrize(("name", "outcome"), [("message_stop", "completed"), ("error", "error")])
def test_unreadable_terminal_event_is_told_by_its_event_line(
    wire: Any, name: str, outcome: str
) -> None:
    raw = wire.event(start()) + f"event: {name}\ndata: {{not json\n\n".encode()
    rec = wire.meter(EP, raw)
    assert rec.parse_issues == 1
    assert rec.outcome == outcome


def test_duplicated_message_start_after_message_delta_changes_nothing(wire: Any) -> None:
    final_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 227},
    }
    rec = wire.meter(
        EP, body(wire, start(), text(0, "Hello"), final_delta, start(), {"type": "message_stop"})
    )
    assert rec.output_tokens == 227 and rec.output_source == "reported"
    assert rec.outcome == "completed"


def test_compaction_stream_bills_every_iteration(wire: Any) -> None:
    """Issue 30: the top-level usage of a compaction stream covers only its last
    iteration; the record sums them all (the cache read of the compaction included)."""
    iterations = [
        {
            "type": "compaction",
            "input_tokens": 100,
            "cache_read_input_tokens": 55096,
            "cache_creation_input_tokens": 0,
            "output_tokens": 83,
        },
        {
            "type": "message",
            "input_tokens": 181,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "output_tokens": 8,
        },
    ]
    final = {
        "input_tokens": 181,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "output_tokens": 8,
        "iterations": iterations,
    }
    rec = wire.meter(
        EP,
        body(
            wire,
            start({"input_tokens": 100, "cache_read_input_tokens": 55096, "output_tokens": 1}),
            block_start(0, {"type": "compaction", "content": ""}),
            delta(0, {"type": "compaction_delta", "content": "Summary."}),
            block_stop(0),
            block_start(1, {"type": "text", "text": ""}),
            text(1, "Hello"),
            block_stop(1),
            message_delta(final),
            STOP,
        ),
    )
    assert (rec.input_tokens, rec.cache_read_tokens, rec.output_tokens) == (55377, 55096, 91)
    assert rec.usage_parts is not None
    assert [(p["kind"], p["input_tokens"], p["output_tokens"]) for p in rec.usage_parts] == [
        ("compaction", 55196, 83),
        ("message", 181, 8),
    ]
