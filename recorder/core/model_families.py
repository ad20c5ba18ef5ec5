"""Model names and families, as token estimation and pricing see them.

A name's base (:func:`model_base`: no provider prefix, snapshot date or
``-latest``) is what a price table and a calibration key on. Its family
(:func:`family_for`) is the tokenizer it counts with, and each family has a
built-in :class:`Profile` of characters per token by kind of text and fixed
overheads (:data:`PROFILES`): the fallback that calibration replaces
(``recorder.core.estimate`` says where the figures come from).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

KINDS = ("latin", "alphabetic", "cjk", "tool")
# A model whose reasoning is never streamed in full: an estimate from what was
# received misses it.
_HIDDEN_REASONING = re.compile(r"^(o\d|gpt-5|gpt-6|codex)")


@dataclass(frozen=True, slots=True)
class Profile:
    """Characters per token for one model family, and fixed overheads in tokens."""

    latin: float
    alphabetic: float
    cjk: float
    tool: float
    call_tokens: float  # output: per tool call, beyond its argument characters
    response_tokens: float  # output: per response that output text
    per_token_deltas: bool  # the protocol streams about one token per output delta
    message_tokens: float  # input: framing per message / input item
    request_tokens: float  # input: framing per request
    tools_prompt_tokens: float  # input: added when tools are defined
    image_tokens: float  # input: per image

    def ratio(self, kind: str) -> float:
        """The built-in characters-per-token ratio of ``kind``."""
        return float(getattr(self, kind))


PROFILES: dict[str, Profile] = {
    # GPT-4o, 4.1, 4.5: o200k_base (ratios measured with it).
    "openai-o200k": Profile(4.0, 3.0, 1.4, 3.0, 10, 0, True, 4, 3, 0, 765),
    # GPT-5.x, o-series, codex: o200k_base too; each output message and call
    # carries framing tokens of its own (fitted on the captured Responses streams).
    "openai-reasoning": Profile(4.0, 3.0, 1.4, 3.0, 13, 4, True, 4, 3, 0, 765),
    # GPT-4, GPT-4 Turbo, GPT-3.5: cl100k_base.
    "openai-cl100k": Profile(4.0, 1.5, 0.95, 3.0, 10, 0, True, 4, 3, 0, 765),
    # Claude: ASCII and tool ratios fitted on captured streams; alphabetic and
    # cjk are guesses close to cl100k's until calibrated; 346 tokens is the
    # tool-use system prompt Anthropic documents for tool_choice auto.
    "anthropic": Profile(3.6, 2.0, 1.0, 3.0, 40, 3, False, 4, 8, 346, 1600),
    # Claude Opus 4.7 and later (Claude 5, ...): a new tokenizer that makes more
    # tokens of the same text. ASCII fitted on the one large captured stream (2.41
    # characters a token, 1.47 times Claude 4.5's); the others are Claude's divided
    # by about 1.3 (what Anthropic states) until calibration replaces them.
    "anthropic-new": Profile(2.45, 1.55, 0.8, 2.3, 50, 3, False, 5, 10, 450, 2100),
    # Anything else (DeepSeek, xAI, open models behind an OpenAI-style server).
    "default": Profile(4.0, 2.5, 1.2, 3.0, 10, 0, True, 4, 3, 0, 765),
}

_PREFIX = re.compile(r"^(?:[\w.-]+/)+")  # "openai/", "azure/eu/"
_REGION = re.compile(r"^(?:[a-z]{2,4}\.)?(?:anthropic|openai)\.")  # Bedrock "us.anthropic."
_SNAPSHOT = re.compile(r"(?:-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest))?(?:-v\d+(?::\d+)?)?$")


# Names up to this long are remembered (below); no real model's is longer, and a
# request may name any string: a cache of 1024 huge names would hold them all.
CACHED_NAME = 256


def bedrock_model_id(model: str) -> str:
    """The model id or inference profile an Amazon Bedrock ARN names
    (``arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-…``
    -> ``us.anthropic.claude-…``); any other name as it is."""
    if model.startswith("arn:"):
        return model.rpartition("/")[2]
    return model


def model_base(model: str) -> str:
    """A model name without provider prefix, snapshot date or ``-latest``.

    ``gpt-4o-2024-08-06`` -> ``gpt-4o``; ``claude-sonnet-4-5-20250929`` ->
    ``claude-sonnet-4-5``; ``openai/gpt-4.1`` -> ``gpt-4.1``.
    """
    if len(model) > CACHED_NAME:
        return _model_base(model)
    return _remembered_base(model)


def _model_base(model: str) -> str:
    name = bedrock_model_id(model.strip().lower())
    name = _PREFIX.sub("", name)
    name = _REGION.sub("", name)
    return _SNAPSHOT.sub("", name) or name


# three regex passes, several times per record
_remembered_base = functools.lru_cache(maxsize=1024)(_model_base)


# "claude-opus-4-7" -> (4, 7); "claude-3-5-sonnet" -> (3, 5); "claude-sonnet-5" -> (5, 0)
_CLAUDE_VERSION = re.compile(r"claude-(?:[a-z]+-)?(\d{1,2})(?:[-.](\d{1,2})(?!\d))?")
# the first Claude version counted by the new tokenizer
NEW_CLAUDE_TOKENIZER = (4, 7)


def _claude_family(name: str) -> str:
    found = _CLAUDE_VERSION.search(name)
    if found is None:
        return "anthropic"
    version = (int(found.group(1)), int(found.group(2) or 0))
    return "anthropic-new" if version >= NEW_CLAUDE_TOKENIZER else "anthropic"


def family_for(model: str | None, endpoint: str | None = None) -> str:
    """The :data:`PROFILES` key for a model (by name, else by the endpoint's provider)."""
    if model is not None and len(model) > CACHED_NAME:
        return _family_for(model, endpoint)
    return _remembered_family(model, endpoint)


def _family_for(model: str | None, endpoint: str | None) -> str:
    if model:
        name = model_base(model)
        if "claude" in name:
            return _claude_family(name)
        if _HIDDEN_REASONING.match(name):
            return "openai-reasoning"
        if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "chatgpt", "gpt-oss")):
            return "openai-o200k"
        if name.startswith(("gpt-4", "gpt-3.5")):
            return "openai-cl100k"
    if endpoint == "messages":
        return "anthropic"
    return "default"


# a pure function of two short strings, asked once or twice per record: remembered
# (a Claude name's regex search costs more than the rest of the lookup)
_remembered_family = functools.lru_cache(maxsize=1024)(_family_for)


def hides_reasoning(model: str | None, endpoint: str | None) -> bool:
    """Whether a model's reasoning tokens are billed but not streamed in full."""
    if endpoint == "messages" or not model:
        return False
    return bool(_HIDDEN_REASONING.match(model_base(model)))
