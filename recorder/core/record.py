"""The finished record of one stream, field for field as docs/record.md defines it.

The record is the product's public face: users script against its field names
(`recorder sessions --format json`, the SQL columns, the audit). ``FIELDS`` fixes
the order in which they are printed. Fields beyond the contract table (parse issues,
the transport's own words about an ending, ...) are additions, never renames.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

# The closed vocabularies of a record, as types: mypy rejects a value outside them
# (a typo in ``record.outcome = "upstream_disconect"`` fails the type check).
Outcome = Literal[
    "completed",
    "incomplete",
    "error",
    "upstream_disconnect",
    "client_disconnect",
    "truncated",
    "http_error",
]
# Where one figure (input or output tokens) comes from.
Source = Literal["reported", "estimated", "none"]
# Where a record's usage as a whole comes from: ``mixed`` when its figures differ.
UsageSource = Literal["reported", "estimated", "none", "mixed"]
GapKind = Literal["stall", "keepalive", "silence"]
Transport = Literal["sse", "json", "json-array", "eventstream", "websocket"]

OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
INTERRUPTED_OUTCOMES: frozenset[Outcome] = frozenset(
    {"error", "upstream_disconnect", "client_disconnect", "truncated"}
)
SOURCES: tuple[Source, ...] = get_args(Source)
USAGE_SOURCES: tuple[UsageSource, ...] = get_args(UsageSource)
GAP_KINDS: tuple[GapKind, ...] = get_args(GapKind)
TRANSPORTS: tuple[Transport, ...] = get_args(Transport)


@dataclass(slots=True, frozen=True)
class Gap:
    """A notable silence of a stream, for the timeline of `recorder show`.

    ``kind`` is ``stall`` (an output silence of at least the stall threshold),
    ``keepalive`` (an interval between two keepalive comments) or ``silence``
    (the longest interval with no bytes at all). Offsets are from the request start.
    """

    kind: GapKind
    start_ms: float
    length_ms: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `recorder show`."""
        return {"kind": self.kind, "start_ms": self.start_ms, "length_ms": self.length_ms}


@dataclass(slots=True)
class StreamRecord:
    """One recorded stream. ``None`` means unknown, never zero."""

    id: str | None = None
    started_at: str | None = None
    endpoint: str | None = None
    provider: str | None = None
    upstream: str | None = None
    model: str | None = None
    response_model: str | None = None
    request_id: str | None = None
    response_id: str | None = None
    project: str | None = None
    streamed: bool = True
    http_status: int | None = None
    outcome: Outcome = "truncated"
    interrupted: bool = True
    finish_reason: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    ttfb_ms: float | None = None
    first_event_ms: float | None = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    events: int | None = None
    keepalives: int | None = None
    max_keepalive_gap_ms: float | None = None
    max_silence_ms: float | None = None
    max_output_gap_ms: float | None = None
    stalls: int | None = None
    stall_ms: float | None = None
    output_chars: int = 0
    tool_calls: int = 0
    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    input_source: Source = "none"
    output_source: Source = "none"
    usage_source: UsageSource = "none"
    estimate_method: str | None = None
    cost_usd: str | None = None
    price_version: str | None = None
    api_key_id: str | None = None
    # Additions beyond the contract table (docs/record.md).
    organization: str | None = None  # OpenAI-Organization header
    include_usage: bool | None = None  # the request's stream_options.include_usage
    max_output_tokens: int | None = None  # the request's output limit
    parse_issues: int = 0
    oversized_events: int = 0
    partial_event_at_end: bool = False
    transport_error: str | None = None
    recorder_error: str | None = None  # the recorder failed while metering: figures may be partial
    raw_usage: dict[str, Any] | None = None
    # billing (recorder.core.billing): what pricing needs beyond the token fields,
    # and the counts estimation works from (characters and counts, never text)
    # the tier that served it as the response reported it (default, standard, flex,
    # priority, fast, ultrafast, batch, ...), else the one the request asked for
    service_tier: str | None = None
    requested_tier: str | None = None  # the request's service_tier (Anthropic: speed "fast")
    cache_write_5m_tokens: int | None = None  # of cache_write_tokens: 5-minute cache writes
    cache_write_1h_tokens: int | None = None  # of cache_write_tokens: 1-hour cache writes
    server_tool_requests: dict[str, int] | None = None  # e.g. {"web_search": 2}, billed per call
    output_breakdown: dict[str, int] | None = None  # output chars by kind / writing system
    input_breakdown: dict[str, int] | None = None  # request body chars by kind / writing system
    # why cost_usd is null although usage is known: no price for the model, no
    # rate for its service tier (recorder.core.pricing.Unpriced)
    unpriced_reason: str | None = None
    # the response's declared Content-Type said otherwise than its body, which was
    # metered as what it is ("declared text/plain, body is an event stream")
    content_mismatch: str | None = None
    # how the response came: "sse" (an event stream), "json" (one answer, not
    # streamed), "json-array" (a JSON array streamed an element at a time: Google's
    # streamGenerateContent without alt=sse), "eventstream" (AWS's binary event
    # stream), "websocket" (one response
    # of many on a WebSocket connection)
    transport: Transport = "sse"
    # issue 31, OpenAI over WebSocket: the connection a response came on (the
    # responses of one connection share it; null over HTTP), the modality parts of
    # the token figures (Realtime: text is the rest), and the output audio's length
    connection_id: str | None = None
    input_audio_tokens: int | None = None  # of input_tokens: audio (cached included)
    cache_read_audio_tokens: int | None = None  # of cache_read_tokens: audio
    input_image_tokens: int | None = None  # of input_tokens: images (cached included)
    cache_read_image_tokens: int | None = None  # of cache_read_tokens: images
    output_audio_tokens: int | None = None  # of output_tokens: audio
    output_audio_ms: float | None = None  # the output audio streamed, in milliseconds
    # issue 32, attribution (recorder.core.attribution): who and what a request was
    # for, as its client said it; never prompt text
    user_id: str | None = None  # the end user: an HMAC fingerprint unless --keep-user-ids
    session_id: str | None = None  # an agent client's session or conversation
    prompt_cache_key: str | None = None  # OpenAI's prompt_cache_key
    tags: dict[str, str] | None = None  # name -> value, bounded (attribution.MAX_TAGS)
    # issue 32, retry chains (recorder.core.retries): what the request asked, as an
    # HMAC; the record id of the attempt it retries; its place in the chain
    request_fingerprint: str | None = None
    retry_of: str | None = None
    attempt: int | None = None
    # issue 30: the priced parts the token figures are the sums of (Anthropic's
    # usage.iterations), each with its model and cost; null: one part, the record's
    usage_parts: list[dict[str, Any]] | None = None
    # issue 31, Amazon Bedrock: the provider's own timing, beside the measured one
    # (Converse's metrics.latencyMs, InvokeModel's invocationLatency; its
    # firstByteLatency)
    provider_latency_ms: float | None = None
    provider_first_byte_ms: float | None = None
    gaps: list[Gap] = field(default_factory=list)

    def to_dict(self, *, with_gaps: bool = False) -> dict[str, Any]:
        """The record as docs/record.md prints it (``gaps`` only when asked)."""
        out = {name: getattr(self, name) for name in FIELDS}
        if with_gaps:
            out["gaps"] = [g.to_dict() for g in self.gaps]
        return out


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StreamRecord) if f.name != "gaps")


def ending_outcome(ending: str) -> Outcome:
    """The outcome of a stream whose body ended as ``ending`` says (``eof``,
    ``upstream_disconnect``, ``client_disconnect``) before any terminal event: a
    clean end without one is ``truncated``; an ending the edge does not name is
    taken for the upstream's."""
    if ending == "eof":
        return "truncated"
    if ending == "client_disconnect":
        return "client_disconnect"
    return "upstream_disconnect"


def combine_sources(input_source: Source, output_source: Source) -> UsageSource:
    """``usage_source`` from the two per-figure sources (docs/record.md, "Usage")."""
    if input_source == output_source:
        return input_source
    if input_source == "none" and output_source == "none":
        return "none"
    return "mixed"
