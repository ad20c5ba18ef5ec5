"""Reported usage, normalised to the record's token fields (docs/record.md, "Usage").

The providers count differently, and a billing audit must not care:

- ``input_tokens`` is ALL prompt tokens. OpenAI's ``prompt_tokens`` /
  ``input_tokens`` already include cached ones; Anthropic's ``input_tokens``
  excludes cache reads and writes, so we add them.
- ``output_tokens`` is ALL output tokens including reasoning. OpenAI's
  ``completion_tokens`` includes reasoning; xAI's does not (its
  ``total_tokens`` = prompt + completion + reasoning), so there we add it.
- cache and reasoning figures are parts of those totals, never added twice.

A figure the provider did not report stays ``None``: unknown is not zero.

Several priced parts: Anthropic bills every sampling iteration of a request
(``usage.iterations``: a compaction summary, an advisor's consultation, a
fallback), while its top-level figures cover only some of them (the last
message for compaction, the executor for the advisor). When the iterations are
reported, the totals are their sums and each iteration is a :class:`UsagePart`
with the model it ran on (an advisor iteration names its own, which is priced
at its own rates; one that names none ran on the request's model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Usage:
    """Normalised token counts; ``None`` where the provider said nothing."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    # the parts of cache_write_tokens by cache lifetime (Anthropic ``cache_creation``)
    cache_write_5m_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    # the parts of the figures by modality (OpenAI Realtime's token details)
    input_audio_tokens: int | None = None
    cache_read_audio_tokens: int | None = None
    input_image_tokens: int | None = None
    cache_read_image_tokens: int | None = None
    output_audio_tokens: int | None = None
    # the priced parts whose sums these figures are (None: one part, the request's model)
    parts: tuple[UsagePart, ...] | None = None


@dataclass(slots=True, frozen=True)
class UsagePart:
    """One priced part of a request's usage: a sampling iteration (``kind`` as the
    provider names it: ``message``, ``compaction``, ``advisor_message``, ...) on
    ``model`` (None: the request's model), with its normalised figures."""

    kind: str
    model: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_5m_tokens: int | None = None
    cache_write_1h_tokens: int | None = None


# the figures of a part, in the order a record's ``usage_parts`` entry gives them
PART_FIGURES = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
)


MAX_COUNT = 2**63 - 1  # what a BIGINT column holds; anything above is noise


def _int(value: Any) -> int | None:
    # bool is an int subclass; a provider sending true/false here is noise
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_COUNT:
        return int(value)
    return None


def _sub(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(key)
    return None


def from_openai_chat(raw: dict[str, Any]) -> Usage:
    """Chat Completions ``usage`` (OpenAI, Azure, DeepSeek, xAI and the like)."""
    prompt = _int(raw.get("prompt_tokens"))
    completion = _int(raw.get("completion_tokens"))
    total = _int(raw.get("total_tokens"))
    reasoning = _int(_sub(raw.get("completion_tokens_details"), "reasoning_tokens"))
    cached = _int(_sub(raw.get("prompt_tokens_details"), "cached_tokens"))
    if cached is None:
        cached = _int(raw.get("prompt_cache_hit_tokens"))  # DeepSeek's own name
    if cached is None:
        cached = _int(raw.get("cached_tokens"))  # Together: beside prompt_tokens
    if cached is None:
        cached = _int(raw.get("num_cached_tokens"))  # Mistral's own name
    output = completion
    if (
        completion is not None
        and reasoning
        and prompt is not None
        and total is not None
        and total == prompt + completion + reasoning
        and total != prompt + completion
    ):
        output = completion + reasoning  # xAI: reasoning is outside completion_tokens
    cache_write = _int(_sub(raw.get("prompt_tokens_details"), "cache_write_tokens"))
    if cache_write is None:
        # gateways relaying Anthropic-style counts (Vercel's AI Gateway)
        cache_write = _int(raw.get("cache_creation_input_tokens"))
    return Usage(prompt, output, cached, cache_write, reasoning)


def from_openai_responses(raw: dict[str, Any]) -> Usage:
    """Responses ``response.usage``."""
    details = raw.get("input_tokens_details")
    cache_write = _int(_sub(details, "cache_write_tokens"))
    if cache_write is None:
        cache_write = _int(_sub(details, "cache_creation_tokens"))
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=_int(_sub(details, "cached_tokens")),
        cache_write_tokens=cache_write,
        reasoning_tokens=_int(_sub(raw.get("output_tokens_details"), "reasoning_tokens")),
    )


def from_anthropic(raw: dict[str, Any], *, output_final: bool) -> Usage:
    """Anthropic usage, merged from ``message_start`` and ``message_delta``.

    ``output_final`` is false while only ``message_start``'s provisional
    ``output_tokens`` is known: that number is not the output, so it stays None.
    With the final ``usage.iterations`` (each a whole usage), the figures are
    their sums and each is a part (see the module's docstring).
    """
    top = _anthropic_figures(raw, output_final=output_final)
    parts = _iterations(raw.get("iterations")) if output_final else None
    if not parts:
        return top
    totals = {name: _sum(getattr(p, name) for p in parts) for name in PART_FIGURES}
    if totals["reasoning_tokens"] is None:
        totals["reasoning_tokens"] = top.reasoning_tokens  # no iteration says it apart
    if len(parts) == 1 and parts[0].model is None:
        parts = None  # one iteration on the request's model: the usage is one part
    return Usage(**totals, parts=parts)


def _sum(values: Any) -> int | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _iterations(value: Any) -> tuple[UsagePart, ...] | None:
    """The parts of ``usage.iterations``; None unless every one is a usage with
    its input and output counts (a partial list would bill a part twice or not)."""
    if not isinstance(value, list) or not value:
        return None
    parts = []
    for item in value:
        if not isinstance(item, dict):
            return None
        u = _anthropic_figures(item, output_final=True)
        if u.input_tokens is None or u.output_tokens is None:
            return None
        kind, model = item.get("type"), item.get("model")
        parts.append(
            UsagePart(
                kind=kind if isinstance(kind, str) and kind else "message",
                model=model if isinstance(model, str) and model else None,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=u.cache_read_tokens,
                cache_write_tokens=u.cache_write_tokens,
                reasoning_tokens=u.reasoning_tokens,
                cache_write_5m_tokens=u.cache_write_5m_tokens,
                cache_write_1h_tokens=u.cache_write_1h_tokens,
            )
        )
    return tuple(parts)


def _anthropic_figures(raw: dict[str, Any], *, output_final: bool) -> Usage:
    """One Anthropic usage object (the top level, or one iteration), normalised."""
    base = _int(raw.get("input_tokens"))
    cache_read = _int(raw.get("cache_read_input_tokens"))
    cache_write = _int(raw.get("cache_creation_input_tokens"))
    by_ttl = raw.get("cache_creation")
    write_5m = write_1h = None
    if isinstance(by_ttl, dict):
        write_5m = _int(by_ttl.get("ephemeral_5m_input_tokens"))
        write_1h = _int(by_ttl.get("ephemeral_1h_input_tokens"))
        if cache_write is None:
            parts = [_int(v) for v in by_ttl.values()]
            if parts and all(p is not None for p in parts):
                cache_write = sum(p for p in parts if p is not None)
    total_in = None
    if base is not None:
        total_in = base + (cache_read or 0) + (cache_write or 0)
    return Usage(
        input_tokens=total_in,
        output_tokens=_int(raw.get("output_tokens")) if output_final else None,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        # newer message_deltas report ``output_tokens_details.thinking_tokens``
        reasoning_tokens=(
            _int(_sub(raw.get("output_tokens_details"), "thinking_tokens"))
            if output_final
            else None
        ),
        cache_write_5m_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
    )


def from_openai_realtime(raw: dict[str, Any]) -> Usage:
    """Realtime ``response.done``'s ``response.usage``: totals, and their parts by
    modality (``input_token_details``: text, audio, image and cached tokens, the
    cached ones by modality in ``cached_tokens_details``; ``output_token_details``:
    text and audio). ``input_tokens`` includes the cached ones. Without the
    details (some paths send only the totals) every part stays None: the
    modality split is unknown, not zero."""
    details = raw.get("input_token_details")
    cached = _sub(details, "cached_tokens_details")
    if cached is None and _sub(details, "cached_tokens") == 0:
        cached = {"audio_tokens": 0, "image_tokens": 0}  # nothing cached: no part of it
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=_int(_sub(details, "cached_tokens")),
        reasoning_tokens=_int(_sub(raw.get("output_token_details"), "reasoning_tokens")),
        input_audio_tokens=_int(_sub(details, "audio_tokens")),
        cache_read_audio_tokens=_int(_sub(cached, "audio_tokens")),
        input_image_tokens=_int(_sub(details, "image_tokens")),
        cache_read_image_tokens=_int(_sub(cached, "image_tokens")),
        output_audio_tokens=_int(_sub(raw.get("output_token_details"), "audio_tokens")),
    )


# what pricing adds to a record's ``usage_parts`` entry (recorder.core.pricing)
PART_COST_FIELDS = ("cost_usd", "price_version", "unpriced_reason")


def usage_parts(parts: tuple[UsagePart, ...] | None) -> list[dict[str, Any]] | None:
    """A record's ``usage_parts`` (docs/record.md): one object per part, its kind,
    its model (null: the record's own), its figures, and its cost, unset until
    priced; None for a usage of one part."""
    if not parts:
        return None
    return [
        {
            "kind": part.kind,
            "model": part.model,
            **{name: getattr(part, name) for name in PART_FIGURES},
            **dict.fromkeys(PART_COST_FIELDS),
        }
        for part in parts
    ]


def from_bedrock_converse(raw: dict[str, Any]) -> Usage:
    """Bedrock Converse's ``usage`` (``metadata`` of ConverseStream, or the answer's).

    Its ``inputTokens`` excludes the cache reads and writes, which it reports apart
    (``totalTokens`` is all four): the record's ``input_tokens`` adds them, as for
    Anthropic. ``cacheDetails`` splits the writes by lifetime
    (``[{"ttl": "5m", "inputTokens": N}, {"ttl": "1h", ...}]``)."""
    base = _int(raw.get("inputTokens"))
    cache_read = _int(raw.get("cacheReadInputTokens"))
    cache_write = _int(raw.get("cacheWriteInputTokens"))
    write_5m, write_1h = _bedrock_ttl_split(raw.get("cacheDetails"))
    return Usage(
        input_tokens=None if base is None else base + (cache_read or 0) + (cache_write or 0),
        output_tokens=_int(raw.get("outputTokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cache_write_5m_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
    )


def _bedrock_ttl_split(details: Any) -> tuple[int | None, int | None]:
    if not isinstance(details, list):
        return None, None
    split: dict[str, int] = {}
    for entry in details:
        if isinstance(entry, dict) and isinstance(entry.get("ttl"), str):
            count = _int(entry.get("inputTokens"))
            if count is not None:
                split[entry["ttl"]] = split.get(entry["ttl"], 0) + count
    if not split:
        return None, None
    return split.get("5m", 0), split.get("1h", 0)


def from_bedrock_metrics(raw: dict[str, Any]) -> Usage:
    """InvokeModel's ``amazon-bedrock-invocationMetrics`` (the last chunk of a
    stream): token counts for every model family, the input one without the cache
    reads and writes it reports apart (``cacheReadInputTokenCount``,
    ``cacheWriteInputTokenCount``)."""
    base = _int(raw.get("inputTokenCount"))
    cache_read = _int(raw.get("cacheReadInputTokenCount"))
    cache_write = _int(raw.get("cacheWriteInputTokenCount"))
    return Usage(
        input_tokens=None if base is None else base + (cache_read or 0) + (cache_write or 0),
        output_tokens=_int(raw.get("outputTokenCount")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def from_gemini(raw: dict[str, Any], *, final: bool) -> Usage:
    """Gemini's and Vertex AI's ``usageMetadata`` (cumulative on every chunk: the
    last one is authoritative).

    ``input_tokens`` is ``promptTokenCount`` (cached content included) plus
    ``toolUsePromptTokenCount``; ``output_tokens`` is ``candidatesTokenCount`` plus
    ``thoughtsTokenCount`` (thinking is billed as output); ``reasoning_tokens`` is
    ``thoughtsTokenCount``; ``cache_read_tokens`` ``cachedContentTokenCount``.
    Google writes its messages as proto3 JSON, which leaves a zero count out: once
    the prompt is counted a missing cache or tool count is 0, and in the ``final``
    usage (the chunk that finished the answer, or a whole response) a missing
    output count is 0 too. Before that, the output is not known (a cut stream's
    chunks count only what was streamed so far, or nothing)."""
    prompt = _int(raw.get("promptTokenCount"))
    tool = _int(raw.get("toolUsePromptTokenCount"))
    candidates = _int(raw.get("candidatesTokenCount"))
    thoughts = _int(raw.get("thoughtsTokenCount"))
    cached = _int(raw.get("cachedContentTokenCount"))
    counted = prompt is not None
    total_in = None if prompt is None else prompt + (tool or 0)
    output = reasoning = None
    if final:
        output = (candidates or 0) + (thoughts or 0)
        reasoning = thoughts or 0
    return Usage(
        input_tokens=total_in,
        output_tokens=output,
        cache_read_tokens=cached if cached is not None or not counted else 0,
        reasoning_tokens=reasoning,
    )


def from_gemini_interactions(raw: dict[str, Any]) -> Usage:
    """The Interactions API's ``usage`` (on ``interaction.completed``): the same
    counting as :func:`from_gemini`, under its own names (``total_input_tokens``
    and ``total_tool_use_tokens`` in, ``total_output_tokens`` and
    ``total_thought_tokens`` out, ``total_cached_tokens`` read from the cache).
    Only the completed interaction carries it, so it is final; a count left out
    is 0 once the input is counted."""
    return from_gemini(
        {
            "promptTokenCount": raw.get("total_input_tokens"),
            "toolUsePromptTokenCount": raw.get("total_tool_use_tokens"),
            "candidatesTokenCount": raw.get("total_output_tokens"),
            "thoughtsTokenCount": raw.get("total_thought_tokens"),
            "cachedContentTokenCount": raw.get("total_cached_tokens"),
        },
        final=True,
    )
