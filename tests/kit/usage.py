"""Usage objects as the providers send them, shared by the tests that read them at
different layers (the usage parsers, the protocol interpreters, pricing).

Treat them as read-only: copy (``{**X, ...}``) to vary one.
"""

from __future__ import annotations

from typing import Any

# DeepSeek's chat usage: OpenAI's details plus its own cache hit/miss counts.
DEEPSEEK_CHAT_USAGE: dict[str, Any] = {
    "prompt_tokens": 339,
    "completion_tokens": 83,
    "total_tokens": 422,
    "prompt_tokens_details": {"cached_tokens": 320},
    "completion_tokens_details": {"reasoning_tokens": 39},
    "prompt_cache_hit_tokens": 320,
    "prompt_cache_miss_tokens": 19,
}

# The Responses API's usage, with cached input and reasoning output.
RESPONSES_USAGE: dict[str, Any] = {
    "input_tokens": 3737,
    "input_tokens_details": {"cached_tokens": 2304},
    "output_tokens": 621,
    "output_tokens_details": {"reasoning_tokens": 512},
    "total_tokens": 4358,
}

# Anthropic's usage with a cache read and cache writes split by lifetime (5m / 1h).
ANTHROPIC_CACHE_USAGE: dict[str, Any] = {
    "input_tokens": 100,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 500,
    "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 200},
    "output_tokens": 1,
    "service_tier": "standard",
}
