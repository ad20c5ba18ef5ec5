"""Unit tests of recorder/core/usage.py: reported usage normalised per docs/record.md."""

from __future__ import annotations

from typing import Any

import pytest

from recorder.core.usage import (
    Usage,
    from_anthropic,
    from_bedrock_converse,
    from_bedrock_metrics,
    from_openai_chat,
    from_openai_responses,
)
from tests.kit.usage import DEEPSEEK_CHAT_USAGE, RESPONSES_USAGE


def figures(u: Usage) -> tuple[int | None, ...]:
    """(input, cache_read, cache_write, output, reasoning)."""
    return (
        u.input_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.output_tokens,
        u.reasoning_tokens,
    )


def test_usage_defaults_to_unknown_not_zero() -> None:
    assert figures(Usage()) == (None, None, None, None, None)


# -- Chat Completions ---------------------------------------------------------------


def test_chat_openai_reasoning_is_inside_completion_tokens() -> None:
    raw = {
        "prompt_tokens": 15,
        "completion_tokens": 78,
        "total_tokens": 93,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 64, "audio_tokens": 0},
    }
    assert figures(from_openai_chat(raw)) == (15, 0, None, 78, 64)


def test_chat_xai_reasoning_is_added_when_total_says_it_is_outside() -> None:
    raw = {
        "prompt_tokens": 12,
        "completion_tokens": 2,
        "total_tokens": 354,
        "prompt_tokens_details": {"cached_tokens": 11},
        "completion_tokens_details": {"reasoning_tokens": 340},
        "cost_in_usd_ticks": 1721250,
    }
    assert figures(from_openai_chat(raw)) == (12, 11, None, 342, 340)


def test_chat_reasoning_not_added_when_total_is_inconsistent() -> None:
    # total matches neither accounting: take completion_tokens as it is
    raw = {
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "total_tokens": 999,
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    assert from_openai_chat(raw).output_tokens == 20


def test_chat_reasoning_not_added_without_total() -> None:
    raw = {
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    assert from_openai_chat(raw).output_tokens == 20


def test_chat_zero_reasoning_changes_nothing() -> None:
    raw = {
        "prompt_tokens": 79,
        "completion_tokens": 11,
        "total_tokens": 90,
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert figures(from_openai_chat(raw)) == (79, None, None, 11, 0)


def test_chat_deepseek_cache_hit_tokens() -> None:
    raw = DEEPSEEK_CHAT_USAGE
    assert figures(from_openai_chat(raw)) == (339, 320, None, 83, 39)


def test_chat_deepseek_own_cache_name_when_details_are_missing() -> None:
    raw = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "prompt_cache_hit_tokens": 64,
        "prompt_cache_miss_tokens": 36,
    }
    assert from_openai_chat(raw).cache_read_tokens == 64


def test_chat_cache_write_tokens_when_reported() -> None:
    raw = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 50},
    }
    assert figures(from_openai_chat(raw)) == (100, 10, 50, 5, None)


def test_chat_minimal_usage_leaves_details_unknown() -> None:
    raw = {"prompt_tokens": 14, "completion_tokens": 52, "total_tokens": 66}
    assert figures(from_openai_chat(raw)) == (14, None, None, 52, None)


def test_chat_empty_usage_is_all_unknown() -> None:
    assert figures(from_openai_chat({})) == (None, None, None, None, None)


# -- Responses ----------------------------------------------------------------------


def test_responses_usage() -> None:
    raw = RESPONSES_USAGE
    assert figures(from_openai_responses(raw)) == (3737, 2304, None, 621, 512)


def test_responses_cache_write_tokens() -> None:
    raw = {
        "input_tokens": 19,
        "input_tokens_details": {"cache_write_tokens": 7, "cached_tokens": 0},
        "output_tokens": 105,
        "output_tokens_details": {"reasoning_tokens": 44},
        "total_tokens": 124,
    }
    assert figures(from_openai_responses(raw)) == (19, 0, 7, 105, 44)


def test_responses_cache_creation_tokens_alias() -> None:
    raw = {"input_tokens": 30, "input_tokens_details": {"cache_creation_tokens": 12}}
    assert from_openai_responses(raw).cache_write_tokens == 12


def test_responses_minimal_usage() -> None:
    raw = {"input_tokens": 14, "output_tokens": 58, "total_tokens": 72}
    assert figures(from_openai_responses(raw)) == (14, None, None, 58, None)


def test_responses_null_details() -> None:
    raw = {
        "input_tokens": 14,
        "input_tokens_details": None,
        "output_tokens": 58,
        "output_tokens_details": None,
    }
    assert figures(from_openai_responses(raw)) == (14, None, None, 58, None)


# -- Anthropic ----------------------------------------------------------------------


def test_anthropic_input_is_inclusive_of_cache_reads_and_writes() -> None:
    raw = {
        "input_tokens": 6,
        "cache_creation_input_tokens": 3337,
        "cache_read_input_tokens": 6289,
        "output_tokens": 198,
    }
    assert figures(from_anthropic(raw, output_final=True)) == (9632, 6289, 3337, 198, None)


def test_anthropic_provisional_output_is_not_output() -> None:
    raw = {"input_tokens": 28, "cache_read_input_tokens": 0, "output_tokens": 5}
    u = from_anthropic(raw, output_final=False)
    assert u.output_tokens is None
    assert u.input_tokens == 28


def test_anthropic_without_cache_fields_cache_is_unknown() -> None:
    raw = {"input_tokens": 11, "output_tokens": 6}
    assert figures(from_anthropic(raw, output_final=True)) == (11, None, None, 6, None)


def test_anthropic_cache_creation_by_ttl_when_the_total_is_missing() -> None:
    raw = {
        "input_tokens": 2,
        "cache_creation": {"ephemeral_5m_input_tokens": 3000, "ephemeral_1h_input_tokens": 68},
        "output_tokens": 1,
    }
    u = from_anthropic(raw, output_final=True)
    assert u.cache_write_tokens == 3068
    assert u.input_tokens == 3070


def test_anthropic_cache_creation_total_wins_over_ttl_breakdown() -> None:
    raw = {
        "input_tokens": 2,
        "cache_creation_input_tokens": 3068,
        "cache_creation": {"ephemeral_5m_input_tokens": 3068, "ephemeral_1h_input_tokens": 0},
    }
    assert from_anthropic(raw, output_final=True).cache_write_tokens == 3068


def test_anthropic_thinking_tokens_are_reasoning() -> None:
    raw = {
        "input_tokens": 28,
        "output_tokens": 106,
        "output_tokens_details": {"thinking_tokens": 67},
    }
    assert from_anthropic(raw, output_final=True).reasoning_tokens == 67
    assert from_anthropic(raw, output_final=False).reasoning_tokens is None


def test_anthropic_missing_input_is_unknown_even_with_cache_figures() -> None:
    raw = {"cache_read_input_tokens": 100, "output_tokens": 3}
    u = from_anthropic(raw, output_final=True)
    assert u.input_tokens is None
    assert u.cache_read_tokens == 100


# -- noise ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, 7),
        (0, 0),
        (7.0, 7),
        (7.5, None),
        (-1, None),
        (True, None),
        ("7", None),
        (None, None),
        ([7], None),
    ],
)
def test_only_non_negative_whole_numbers_are_counts(value: Any, expected: int | None) -> None:
    assert from_openai_chat({"prompt_tokens": value}).input_tokens == expected
    assert from_openai_responses({"output_tokens": value}).output_tokens == expected
    assert from_anthropic({"input_tokens": value}, output_final=True).input_tokens == expected


def test_details_that_are_not_objects_are_ignored() -> None:
    raw = {
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "prompt_tokens_details": "cached",
        "completion_tokens_details": [1, 2],
    }
    assert figures(from_openai_chat(raw)) == (5, None, None, 1, None)
    raw2 = {"input_tokens": 5, "input_tokens_details": 3, "output_tokens_details": "x"}
    assert figures(from_openai_responses(raw2)) == (5, None, None, None, None)


# -- Anthropic's usage.iterations (issue 30) ----------------------------------------

# the compaction stream: the top level covers only the last iteration
COMPACTION = {
    "input_tokens": 181,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
    "output_tokens": 8,
    "iterations": [
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
    ],
}


def test_every_iteration_is_counted_not_only_the_last() -> None:
    u = from_anthropic(COMPACTION, output_final=True)
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (55377, 55096, 91)
    assert u.cache_write_tokens == 0
    assert u.parts is not None
    assert [(p.kind, p.model, p.input_tokens, p.output_tokens) for p in u.parts] == [
        ("compaction", None, 55196, 83),
        ("message", None, 181, 8),
    ]


def test_an_advisor_iteration_keeps_its_own_model() -> None:
    raw = {
        "input_tokens": 30,
        "output_tokens": 20,
        "iterations": [
            {"type": "message", "input_tokens": 10, "output_tokens": 5},
            {
                "type": "advisor_message",
                "model": "claude-opus-4-7",
                "input_tokens": 40,
                "output_tokens": 300,
                "cache_read_input_tokens": 7,
            },
            {"type": "message", "input_tokens": 20, "output_tokens": 15},
        ],
    }
    u = from_anthropic(raw, output_final=True)
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens) == (77, 320, 7)
    assert u.parts is not None
    assert [p.model for p in u.parts] == [None, "claude-opus-4-7", None]


@pytest.mark.parametrize(
    "iterations",
    [
        [],
        "nope",
        [{"type": "message", "output_tokens": 3}],  # no input: the top level stands
        [{"type": "message", "input_tokens": 1, "output_tokens": 2}, 7],
    ],
    ids=["empty", "not-a-list", "no-input", "not-an-object"],
)
def test_iterations_that_cannot_be_summed_leave_the_top_level(iterations: Any) -> None:
    u = from_anthropic({**COMPACTION, "iterations": iterations}, output_final=True)
    assert (u.input_tokens, u.output_tokens, u.parts) == (181, 8, None)


def test_one_iteration_on_the_request_model_is_no_part() -> None:
    raw = {**COMPACTION, "iterations": COMPACTION["iterations"][1:]}
    u = from_anthropic(raw, output_final=True)
    assert (u.input_tokens, u.output_tokens, u.parts) == (181, 8, None)


def test_iterations_of_a_provisional_usage_are_not_output() -> None:
    u = from_anthropic(COMPACTION, output_final=False)
    assert u.output_tokens is None and u.parts is None


def test_together_cached_tokens_beside_prompt_tokens() -> None:
    u = from_openai_chat({"prompt_tokens": 12, "completion_tokens": 3, "cached_tokens": 0})
    assert u.cache_read_tokens == 0


def test_bedrock_converse_usage_adds_the_cache_to_the_input() -> None:
    raw = {
        "inputTokens": 4,
        "outputTokens": 37,
        "totalTokens": 3700,
        "cacheReadInputTokens": 0,
        "cacheWriteInputTokens": 3659,
        "cacheDetails": [{"ttl": "1h", "inputTokens": 3000}, {"ttl": "5m", "inputTokens": 659}],
    }
    u = from_bedrock_converse(raw)
    assert u.input_tokens == raw["totalTokens"] - raw["outputTokens"]
    assert (u.cache_read_tokens, u.cache_write_tokens) == (0, 3659)
    assert (u.cache_write_5m_tokens, u.cache_write_1h_tokens) == (659, 3000)
    assert u.output_tokens == 37
    assert from_bedrock_converse({"inputTokens": 4}).cache_write_5m_tokens is None


def test_bedrock_invocation_metrics_are_usage() -> None:
    u = from_bedrock_metrics(
        {
            "inputTokenCount": 10,
            "outputTokenCount": 20,
            "cacheReadInputTokenCount": 5,
            "cacheWriteInputTokenCount": 7,
        }
    )
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        22,
        20,
        5,
        7,
    )
