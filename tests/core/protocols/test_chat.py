"""Chat Completions edge cases (docs/ARCHITECTURE.md, "The protocols"), hand-written bodies."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kit.usage import DEEPSEEK_CHAT_USAGE

EP = "chat.completions"
DONE = b"data: [DONE]\n\n"


def chunk(delta: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A chat.completion.chunk with one choice (index 0) unless ``choices`` is given."""
    obj: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-x",
    }
    if "choices" not in extra:
        reason = extra.pop("finish_reason", None)
        obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": reason}]
    obj.update(extra)
    return obj


ROLE = chunk({"role": "assistant", "content": ""})
ROLE_NULL = chunk({"role": "assistant", "content": None, "refusal": None})
FINISH = chunk({}, finish_reason="stop")


# -- what is output ---------------------------------------------------------------


@pytest.mark.parametrize("role", [ROLE, ROLE_NULL], ids=["empty-content", "null-content"])
def test_role_chunk_is_not_output_and_does_not_start_ttft(wire: Any, role: dict) -> None:
    rec = wire.timed(
        EP,
        [
            (0.1, wire.data(role)),
            (0.5, wire.data(chunk({"content": "Hi"}))),
            (0.6, wire.data(FINISH) + DONE),
        ],
        end=0.7,
    )
    assert rec.first_event_ms == 100.0
    assert rec.ttft_ms == 500.0
    assert rec.output_chars == 2
    assert rec.outcome == "completed"


def test_a_stream_of_role_chunk_only_has_no_ttft(wire: Any) -> None:
    rec = wire.timed(EP, [(0.1, wire.data(ROLE)), (0.2, wire.data(FINISH) + DONE)], end=0.3)
    assert rec.ttft_ms is None
    assert rec.output_chars == 0


@pytest.mark.parametrize(
    ("delta", "chars"),
    [
        ({"refusal": "I can't"}, 7),
        ({"reasoning_content": "Let me think"}, 12),
        ({"reasoning": "hmm"}, 3),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]}, 7),
        ({"content": "こんにちは"}, 5),
    ],
    ids=["refusal", "reasoning_content", "reasoning", "tool-arguments", "multibyte"],
)
def test_output_kinds_count_and_start_ttft(wire: Any, delta: dict, chars: int) -> None:
    rec = wire.timed(
        EP,
        [
            (0.1, wire.data(ROLE_NULL)),
            (0.3, wire.data(chunk(delta))),
            (0.4, wire.data(FINISH) + DONE),
        ],
        end=0.5,
    )
    assert rec.output_chars == chars
    assert rec.ttft_ms == 300.0


def tool_start(index: int, call_id: str, name: str) -> dict[str, Any]:
    """A delta that starts tool call ``index``: its id and name, no arguments yet."""
    call = {"index": index, "id": call_id, "type": "function"}
    return {"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]}


def test_tool_call_start_without_arguments_is_a_call_but_not_output(wire: Any) -> None:
    start = tool_start(0, "call_1", "get_weather")
    args = {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":"Paris"}'}}]}
    rec = wire.timed(
        EP,
        [
            (0.1, wire.data(chunk({"role": "assistant", "content": None, **start}))),
            (0.4, wire.data(chunk(args))),
            (0.5, wire.data(chunk({}, finish_reason="tool_calls")) + DONE),
        ],
        end=0.6,
    )
    assert rec.tool_calls == 1
    assert rec.ttft_ms == 400.0
    assert rec.output_chars == len('{"city":"Paris"}')
    assert rec.finish_reason == "tool_calls"


def test_reasoning_content_null_and_content_null_are_not_output(wire: Any) -> None:
    body = wire.data(chunk({"content": None, "reasoning_content": None})) + DONE
    rec = wire.meter(EP, body)
    assert rec.output_chars == 0


# -- usage --------------------------------------------------------------------------


def test_deepseek_usage_on_the_finish_chunk(wire: Any) -> None:
    usage = DEEPSEEK_CHAT_USAGE
    body = (
        wire.data(chunk({"role": "assistant", "content": None, "reasoning_content": ""}))
        + wire.data(chunk({"reasoning_content": "Think."}, usage=None))
        + wire.data(chunk({"content": "Done."}, usage=None))
        + wire.data(chunk({"content": ""}, finish_reason="stop", usage=usage))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert (rec.input_tokens, rec.cache_read_tokens) == (339, 320)
    assert (rec.output_tokens, rec.reasoning_tokens) == (83, 39)  # DeepSeek: reasoning inside
    assert rec.finish_reason == "stop"
    assert rec.output_chars == len("Think.") + len("Done.")
    assert (rec.input_source, rec.output_source, rec.usage_source) == (
        "reported",
        "reported",
        "reported",
    )


def test_xai_reasoning_tokens_are_added_to_completion_tokens(wire: Any) -> None:
    # xAI: total = prompt + completion + reasoning (reasoning outside completion)
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 2,
        "total_tokens": 354,
        "prompt_tokens_details": {"cached_tokens": 11},
        "completion_tokens_details": {"reasoning_tokens": 340},
    }
    body = (
        wire.data(chunk({"reasoning_content": "First", "role": "assistant"}))
        + wire.data(chunk({"content": "Hi"}))
        + wire.data(chunk({}, finish_reason="stop"))
        + wire.data(chunk(choices=[], usage=usage))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert rec.output_tokens == 342
    assert rec.reasoning_tokens == 340
    assert (rec.input_tokens, rec.cache_read_tokens) == (12, 11)
    assert rec.output_chars == len("First") + len("Hi")


def test_openai_reasoning_tokens_are_already_inside_completion_tokens(wire: Any) -> None:
    usage = {
        "prompt_tokens": 15,
        "completion_tokens": 78,
        "total_tokens": 93,
        "completion_tokens_details": {"reasoning_tokens": 64},
    }
    body = wire.data(chunk({"content": "x"})) + wire.data(chunk(choices=[], usage=usage)) + DONE
    rec = wire.meter(EP, body)
    assert (rec.output_tokens, rec.reasoning_tokens) == (78, 64)


def test_usage_is_found_by_non_null_usage_not_by_empty_choices(wire: Any) -> None:
    # an empty-choices chunk without usage (Azure's leading one) is not usage,
    # and usage riding on a chunk with choices is usage
    azure = {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
    }
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    body = (
        wire.data(azure)
        + wire.data(chunk({"content": "A"}, usage=None))
        + wire.data(chunk({}, finish_reason="stop", usage=usage))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert (rec.input_tokens, rec.output_tokens) == (5, 1)


def test_usage_null_chunks_are_ignored_even_after_the_usage_chunk(wire: Any) -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    body = (
        wire.data(chunk({"content": "Foo"}, usage=None))
        + wire.data(chunk({}, finish_reason="stop", usage=None))
        + wire.data(chunk(choices=[], usage=usage))
        + wire.data(chunk(choices=[], usage=None))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert (rec.input_tokens, rec.output_tokens) == (9, 2)


def test_no_usage_reported_leaves_the_figures_unknown(wire: Any) -> None:
    body = wire.data(chunk({"content": "Foo"})) + wire.data(FINISH) + DONE
    rec = wire.meter(EP, body)
    assert rec.outcome == "completed"
    assert rec.input_tokens is None and rec.output_tokens is None
    assert (rec.input_source, rec.output_source, rec.usage_source) == ("none", "none", "none")


# -- noise and shapes ---------------------------------------------------------------


def test_azure_leading_empty_choices_chunk_with_prompt_filter_results(wire: Any) -> None:
    azure = {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "object": "",
        "prompt_filter_results": [
            {"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False}}}
        ],
    }
    first = chunk(
        {"content": "", "refusal": None, "role": "assistant"},
        id="chatcmpl-az",
        model="gpt-5-nano-2025-08-07",
        obfuscation="D3Wb",
    )
    first["choices"][0]["content_filter_results"] = {}
    body = (
        wire.data(azure)
        + wire.data(first)
        + wire.data(chunk({"content": "Capital"}, id="chatcmpl-az"))
        + wire.data(chunk({}, finish_reason="stop", id="chatcmpl-az"))
        + DONE
    )
    rec = wire.timed(EP, [(0.1, body)], end=0.2)
    assert rec.response_id == "chatcmpl-az"  # the empty "" id of the Azure chunk is no id
    assert rec.response_model == "gpt-5-nano-2025-08-07"
    assert rec.output_chars == len("Capital")
    assert rec.events == 5
    assert rec.parse_issues == 0
    assert rec.outcome == "completed"


def test_n_greater_than_one_interleaved_choices(wire: Any) -> None:
    def c(index: int, delta: dict, reason: str | None = None) -> dict:
        return chunk(choices=[{"index": index, "delta": delta, "finish_reason": reason}])

    body = (
        wire.data(c(0, {"role": "assistant", "content": ""}))
        + wire.data(c(0, {"content": "ab"}))
        + wire.data(c(1, {"role": "assistant", "content": ""}))
        + wire.data(c(1, {"content": "cde"}))
        + wire.data(c(2, {"role": "assistant", "content": ""}))
        + wire.data(c(2, {"content": "f"}))
        + wire.data(c(1, {}, "length"))  # another choice finishes first
        + wire.data(c(0, {}, "stop"))
        + wire.data(c(2, {}, "stop"))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert rec.output_chars == 6
    assert rec.finish_reason == "stop"  # the first choice's
    assert rec.events == 10


def test_n_greater_than_one_tool_calls_are_counted_per_choice(wire: Any) -> None:
    def call(index: int) -> dict:
        return chunk(
            choices=[
                {
                    "index": index,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": f"call_{index}", "function": {"arguments": "{}"}}
                        ]
                    },
                }
            ]
        )

    rec = wire.meter(EP, wire.data(call(0)) + wire.data(call(1)) + DONE)
    assert rec.tool_calls == 2


def test_tool_calls_starting_at_index_1(wire: Any) -> None:
    # Anthropic's OpenAI compatibility layer numbers the first tool call 1
    start = tool_start(1, "toolu_1", "read_file")
    body = (
        wire.data(chunk({"role": "assistant"}))
        + wire.data(chunk({"content": "Reading"}))
        + wire.data(chunk(start))
        + wire.data(chunk({"tool_calls": [{"index": 1, "function": {"arguments": ""}}]}))
        + wire.data(chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"pa'}}]}))
        + wire.data(chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'th": 1}'}}]}))
        + wire.data(chunk({}, finish_reason="tool_calls"))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert rec.tool_calls == 1
    assert rec.output_chars == len("Reading") + len('{"path": 1}')
    assert rec.finish_reason == "tool_calls"


def test_parallel_tool_calls(wire: Any) -> None:
    def start(i: int) -> dict:
        return chunk(
            {
                "tool_calls": [
                    {"index": i, "id": f"c{i}", "type": "function", "function": {"name": "f"}}
                ]
            }
        )

    def args(i: int, text: str) -> dict:
        return chunk({"tool_calls": [{"index": i, "function": {"arguments": text}}]})

    body = (
        wire.data(start(0))
        + wire.data(args(0, "{}"))
        + wire.data(start(1))
        + wire.data(args(1, "{ }"))
        + wire.data(chunk({}, finish_reason="tool_calls"))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert rec.tool_calls == 2
    assert rec.output_chars == 5


def test_a_whole_tool_call_in_one_chunk(wire: Any) -> None:
    whole = {
        "tool_calls": [
            {
                "id": "call_79382389",
                "function": {"name": "weather", "arguments": '{"location":"San Francisco"}'},
                "index": 0,
                "type": "function",
            }
        ]
    }
    rec = wire.timed(
        EP,
        [(0.2, wire.data(chunk(whole))), (0.3, wire.data(chunk({}, finish_reason="tool_calls")))],
        end=0.4,
    )
    assert rec.tool_calls == 1
    assert rec.output_chars == len('{"location":"San Francisco"}')
    assert rec.ttft_ms == 200.0
    assert rec.outcome == "truncated"  # no [DONE] in this one


def test_unknown_fields_are_tolerated(wire: Any) -> None:
    odd = chunk(
        {"content": "x", "audio": {"id": "a"}, "annotations": []},
        service_tier="default",
        system_fingerprint="fp_1",
        obfuscation="Qup1BsQ3",
        brand_new_field={"nested": [1, 2, 3]},
    )
    odd["choices"][0]["logprobs"] = {"content": [{"token": "x", "logprob": -0.1}]}
    odd["choices"][0]["content_filter_results"] = {}
    rec = wire.meter(EP, wire.data(odd) + DONE)
    assert rec.output_chars == 1
    assert rec.parse_issues == 0
    assert rec.outcome == "completed"


# -- errors, cuts, malformed events -------------------------------------------------

ERROR = {
    "error": {
        "message": "The server had an error while processing your request.",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
}


def test_error_payload_after_200_is_an_error(wire: Any) -> None:
    body = wire.data(ROLE) + wire.data(chunk({"content": "Par"})) + wire.data(ERROR)
    rec = wire.meter(EP, body)
    assert rec.outcome == "error"
    assert rec.interrupted is True
    assert rec.error_type == "server_error"
    assert rec.error_code == "internal_error"
    assert rec.error_message == "The server had an error while processing your request."
    assert rec.output_chars == 3
    assert rec.events == 3


def test_error_followed_by_done_is_still_an_error(wire: Any) -> None:
    rec = wire.meter(EP, wire.data(chunk({"content": "Par"})) + wire.data(ERROR) + DONE)
    assert rec.outcome == "error"
    assert rec.error_type == "server_error"
    assert rec.events == 3


def test_done_then_error_stays_completed(wire: Any) -> None:
    # the first terminal-or-error event decides; what follows is still counted
    rec = wire.meter(EP, wire.data(chunk({"content": "ok"})) + DONE + wire.data(ERROR))
    assert rec.outcome == "completed"
    assert rec.events == 3


def test_cut_before_done_is_truncated(wire: Any) -> None:
    body = wire.data(ROLE) + wire.data(chunk({"content": "Hel"})) + wire.data(FINISH)
    rec = wire.meter(EP, body)
    assert rec.outcome == "truncated"
    assert rec.interrupted is True
    assert rec.finish_reason == "stop"
    assert rec.partial_event_at_end is False


def test_cut_inside_done_is_truncated_and_noted(wire: Any) -> None:
    body = wire.data(chunk({"content": "Hel"})) + b"data: [DONE]\n"
    rec = wire.meter(EP, body)
    assert rec.outcome == "truncated"
    assert rec.partial_event_at_end is True
    assert rec.events == 1


def test_transport_break_before_done_is_an_upstream_disconnect(wire: Any) -> None:
    rec = wire.timed(
        EP, [(0.1, wire.data(chunk({"content": "Hel"})))], end=0.5, eof="upstream_disconnect"
    )
    assert rec.outcome == "upstream_disconnect"
    assert rec.interrupted is True


def test_malformed_json_is_a_parse_issue_but_still_an_event(wire: Any) -> None:
    body = (
        wire.data(chunk({"content": "a"}))
        + b'data: {"id":"chatcmpl-1","choices":[{"delta":{"content":"b"}\n\n'
        + b"data: not json at all\n\n"
        + b"data: [1, 2]\n\n"
        + wire.data(chunk({"content": "c"}))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert rec.parse_issues == 3
    assert rec.events == 6
    assert rec.output_chars == 2
    assert rec.outcome == "completed"


def test_keepalive_comments_are_not_events(wire: Any) -> None:
    body = (
        b": OPENROUTER PROCESSING\n\n"
        + wire.data(chunk({"content": "a"}))
        + b": hopbase-keepalive\n\n"
        + DONE
    )
    rec = wire.meter(EP, body)
    assert rec.keepalives == 2
    assert rec.events == 2


# -- non-streamed bodies ------------------------------------------------------------


def test_non_streamed_body(wire: Any) -> None:
    body = {
        "id": "chatcmpl-ns",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there", "refusal": None},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }
    rec = wire.body(EP, body)
    assert rec.streamed is False
    assert rec.outcome == "completed"
    assert rec.interrupted is False
    assert rec.response_id == "chatcmpl-ns"
    assert rec.response_model == "gpt-4o-2024-08-06"
    assert rec.finish_reason == "stop"
    assert rec.output_chars == len("Hello there")
    assert (rec.input_tokens, rec.cache_read_tokens, rec.output_tokens) == (10, 4, 3)
    assert rec.reasoning_tokens == 0
    assert rec.events is None and rec.keepalives is None


def test_non_streamed_body_with_tool_calls(wire: Any) -> None:
    body = {
        "id": "chatcmpl-t",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"x":1}'},
                        },
                        {
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{}"},
                        },
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
    }
    rec = wire.body(EP, body)
    assert rec.tool_calls == 2
    assert rec.output_chars == len('{"x":1}') + 2
    assert rec.finish_reason == "tool_calls"
    assert rec.outcome == "completed"


def test_non_streamed_error_status_is_an_http_error(wire: Any) -> None:
    rec = wire.body(EP, ERROR, status=500)
    assert rec.outcome == "http_error"
    assert rec.streamed is False


# -- usage where the providers put it (issue 30) -----------------------------------

GROQ_USAGE = {
    "queue_time": 0.06,
    "prompt_tokens": 18,
    "prompt_time": 0.0002,
    "completion_tokens": 439,
    "completion_time": 0.79,
    "total_tokens": 457,
    "total_time": 0.79,
}


def test_groq_usage_only_in_x_groq_is_reported_not_estimated(wire: Any) -> None:
    """Older Groq models send usage only in the last chunk's ``x_groq.usage``: the
    figures are in the body, so they are reported, never estimated."""
    body = (
        wire.data(chunk({"role": "assistant", "content": ""}, x_groq={"id": "req_1"}))
        + b"".join(wire.data(chunk({"content": "word "})) for _ in range(40))
        + wire.data(chunk({}, finish_reason="stop", x_groq={"id": "req_1", "usage": GROQ_USAGE}))
        + DONE
    )
    rec = wire.meter(EP, body)
    assert (rec.input_tokens, rec.output_tokens) == (18, 439)
    assert rec.input_source == rec.output_source == "reported"
    assert rec.raw_usage == GROQ_USAGE


def test_a_top_level_usage_wins_over_x_groq(wire: Any) -> None:
    """Newer Groq models send both; a later top-level usage replaces an earlier
    x_groq one, and an x_groq one never replaces a top-level one."""
    top = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    first = wire.meter(
        EP,
        wire.data(chunk({}, finish_reason="stop", x_groq={"usage": GROQ_USAGE}))
        + wire.data(chunk(choices=[], usage=top))
        + DONE,
    )
    second = wire.meter(
        EP,
        wire.data(chunk({}, finish_reason="stop", usage=top))
        + wire.data(chunk(choices=[], x_groq={"usage": GROQ_USAGE}))
        + DONE,
    )
    assert (first.input_tokens, first.output_tokens) == (20, 5)
    assert (second.input_tokens, second.output_tokens) == (20, 5)


@pytest.mark.parametrize(
    ("usage", "cached", "written"),
    [
        # Together: cached_tokens beside prompt_tokens, 0 when nothing was cached
        ({"prompt_tokens": 30, "completion_tokens": 2, "cached_tokens": 0}, 0, None),
        ({"prompt_tokens": 30, "completion_tokens": 2, "cached_tokens": 12}, 12, None),
        # Mistral's own name
        ({"prompt_tokens": 30, "completion_tokens": 2, "num_cached_tokens": 0}, 0, None),
        # a gateway relaying Anthropic-style cache writes
        (
            {
                "prompt_tokens": 30,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 4},
                "cache_creation_input_tokens": 0,
            },
            4,
            0,
        ),
    ],
    ids=["together-zero", "together-some", "mistral-zero", "gateway-cache-write"],
)
def test_a_cache_figure_the_body_gives_as_zero_is_zero(
    wire: Any, usage: dict[str, Any], cached: int, written: int | None
) -> None:
    rec = wire.meter(EP, wire.data(chunk({}, finish_reason="stop", usage=usage)) + DONE)
    assert rec.cache_read_tokens == cached
    assert rec.cache_write_tokens == written


def test_mistral_content_parts_are_output(wire: Any) -> None:
    """Mistral's reasoning models stream ``content`` as a list of parts: thinking
    parts (reasoning) and text parts; both are output, and TTFT is the first."""
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "Let me see"}]}
    rec = wire.timed(
        EP,
        [
            (0.1, wire.data(ROLE)),
            (0.4, wire.data(chunk({"content": [thinking]}))),
            (0.6, wire.data(chunk({"content": [thinking, {"type": "text", "text": "42"}]}))),
            (0.7, wire.data(FINISH) + DONE),
        ],
        end=0.8,
    )
    assert rec.output_chars == 10 + 10 + 2
    assert rec.ttft_ms == 400.0
    assert rec.output_breakdown is None or rec.output_breakdown["reasoning"] == 20


def test_moonshot_usage_in_the_finishing_choice_is_reported(wire: Any) -> None:
    """Moonshot puts the usage in the finishing choice (``choices[0].usage``); a
    later top-level usage still replaces it."""
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    finishing = {"index": 0, "delta": {}, "finish_reason": "stop", "usage": usage}
    rec = wire.meter(
        EP, wire.data(chunk({"content": "OK."})) + wire.data(chunk(choices=[finishing])) + DONE
    )
    assert (rec.input_tokens, rec.output_tokens, rec.output_source) == (12, 5, "reported")
    top = {"prompt_tokens": 13, "completion_tokens": 6, "total_tokens": 19}
    rec = wire.meter(
        EP,
        wire.data(chunk(choices=[finishing])) + wire.data(chunk(choices=[], usage=top)) + DONE,
    )
    assert (rec.input_tokens, rec.output_tokens) == (13, 6)
