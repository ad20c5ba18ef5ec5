"""One finished record as one OpenTelemetry span: name, times, attributes, events.

Pure data, no SDK: ``recorder.otel.export`` hands the plan to the SDK. Names follow
the OpenTelemetry GenAI semantic conventions (``SEMCONV``, the inference client
span); what the conventions have no name for goes under ``recorder.``. No prompt or
completion text is ever put on a span: the record holds none to begin with, and the
conventions' content attributes (``gen_ai.input.messages`` ...) are never set.

A record of several priced parts (``usage_parts``: an advisor iteration on another
model, a compaction) carries one ``recorder.usage_part`` event per part at the
span's end, with the part's model (``gen_ai.response.model``), its token counts
under the span's own attribute names, and its cost: a backend that sums tokens or
cost by model counts each part under the model it ran on. The span's own token
attributes are the record's totals.

Times: the record has its wall-clock start (``started_at``) and offsets from it in
milliseconds; the span runs from the request's start to the stream's end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from recorder.core.record import INTERRUPTED_OUTCOMES, StreamRecord

# The published GenAI conventions these names come from (open-telemetry/
# semantic-conventions-genai, the repository they moved to from the main one).
SEMCONV = "semantic-conventions-genai v0.1.0"

AttributeValue = str | bool | int | float | list[str]

# Providers and operations as the conventions name them (gen_ai.provider.name well
# known values: openai, anthropic, gcp.gemini, gcp.vertex_ai, the record's own
# spelling; every endpoint the recorder meters is a chat-style inference, which
# the conventions call generate_content for Google's generateContent).
_OPERATION = "chat"
_OPERATIONS = {"generate_content": "generate_content"}
_PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "aws.bedrock": "aws.bedrock"}


def operation_of(rec: StreamRecord) -> str:
    """``gen_ai.operation.name`` of a record's endpoint."""
    return _OPERATIONS.get(rec.endpoint or "", _OPERATION)


# Stall events per span: the SDK keeps 128 events per span by default; the record
# has them all (and the stall count is an attribute).
MAX_STALL_EVENTS = 100

# Error texts are cut: a span attribute is not a log, and a backend may cap it.
MAX_ERROR_TEXT = 256


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(slots=True)
class SpanPlan:
    """What the exporter gives the SDK for one record."""

    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    events: list[SpanEvent]
    error: str | None  # error.type, also the span's ERROR status; None when completed


def start_ns(rec: StreamRecord) -> int | None:
    """The record's start as nanoseconds since the epoch (None without one)."""
    if not rec.started_at:
        return None
    try:
        when = datetime.fromisoformat(rec.started_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(when.timestamp() * 1_000_000) * 1000


def _at(start: int, offset_ms: float | None) -> int | None:
    return None if offset_ms is None else start + int(offset_ms * 1_000_000)


def server_address(upstream: str | None) -> tuple[str | None, int | None]:
    """``host:port`` (an IPv6 host keeps its colons) as (server.address, server.port)."""
    if not upstream:
        return None, None
    host, sep, port = upstream.rpartition(":")
    if not sep or not port.isdigit():
        return upstream, None
    return host.strip("[]"), int(port)


def error_type(rec: StreamRecord) -> str | None:
    """``error.type`` for every outcome but ``completed``: the provider's error type
    when it named one, the HTTP status of an ``http_error`` (as the HTTP conventions
    do), else the outcome itself (``upstream_disconnect``, ``truncated`` ...)."""
    if rec.outcome == "completed":
        return None
    if rec.error_type:
        return rec.error_type
    if rec.outcome == "http_error" and rec.http_status is not None:
        return str(rec.http_status)
    return rec.outcome


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_TEXT:
        return text
    return text[: MAX_ERROR_TEXT - 1] + "…"


def plan_span(rec: StreamRecord, now_ns: int) -> SpanPlan:
    """The span of ``rec``; ``now_ns`` stands in for a record without a start time."""
    start = start_ns(rec)
    if start is None:
        start = now_ns - int((rec.duration_ms or 0.0) * 1_000_000)
    end = _at(start, rec.duration_ms) or start
    err = error_type(rec)
    events = _events(rec, start, end, err)
    operation = operation_of(rec)
    name = f"{operation} {rec.model}" if rec.model else operation
    return SpanPlan(name, start, max(end, start), _attributes(rec, err), events, err)


def _attributes(rec: StreamRecord, err: str | None) -> dict[str, AttributeValue]:
    """The span's attributes: the conventions' names first, then ``recorder.``'s;
    a figure the record does not have is left out."""
    host, port = server_address(rec.upstream)
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": operation_of(rec),
        "gen_ai.provider.name": _PROVIDERS.get(rec.provider or "", rec.provider or "unknown"),
        "gen_ai.request.stream": rec.streamed,
        "recorder.outcome": rec.outcome,
        "recorder.usage_source": rec.usage_source,
        "recorder.input_source": rec.input_source,
        "recorder.output_source": rec.output_source,
    }
    optional: dict[str, AttributeValue | None] = {
        "gen_ai.request.model": rec.model,
        "gen_ai.response.model": rec.response_model,
        "gen_ai.response.id": rec.response_id,
        "gen_ai.response.finish_reasons": [rec.finish_reason] if rec.finish_reason else None,
        "gen_ai.usage.input_tokens": rec.input_tokens,
        "gen_ai.usage.output_tokens": rec.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": rec.cache_read_tokens,
        "gen_ai.usage.cache_write.input_tokens": rec.cache_write_tokens,
        "gen_ai.usage.reasoning.output_tokens": rec.reasoning_tokens,
        "gen_ai.response.time_to_first_chunk": (
            rec.first_event_ms / 1000.0 if rec.first_event_ms is not None and rec.streamed else None
        ),
        "gen_ai.request.max_tokens": rec.max_output_tokens,
        "server.address": host,
        "server.port": port,
        "http.response.status_code": rec.http_status,
        "error.type": err,
        "recorder.record_id": rec.id,
        "recorder.endpoint": rec.endpoint,
        "recorder.transport": rec.transport,
        "recorder.connection_id": rec.connection_id,
        "recorder.estimate_method": rec.estimate_method,
        "recorder.cost_usd": rec.cost_usd,  # a decimal string: no float rounding
        "recorder.price_version": rec.price_version,
        "recorder.service_tier": rec.service_tier,
        "recorder.ttft_ms": rec.ttft_ms,
        "recorder.ttfb_ms": rec.ttfb_ms,
        # the provider's own timing beside ours (Amazon Bedrock)
        "recorder.provider_latency_ms": rec.provider_latency_ms,
        "recorder.provider_first_byte_ms": rec.provider_first_byte_ms,
        "recorder.events": rec.events,
        "recorder.stalls": rec.stalls,
        "recorder.stall_ms": rec.stall_ms,
        "recorder.keepalives": rec.keepalives,
        "recorder.max_output_gap_ms": rec.max_output_gap_ms,
        "recorder.api_key_id": rec.api_key_id,  # the key's fingerprint id, never the key
        "recorder.project": rec.project,
        "recorder.request_id": rec.request_id,
        "recorder.error_code": rec.error_code,
        # attribution and retry chains (docs/record.md): the user only as stored
        "enduser.id": rec.user_id,
        "session.id": rec.session_id,
        "recorder.request_fingerprint": rec.request_fingerprint,
        "recorder.retry_of": rec.retry_of,
        "recorder.attempt": rec.attempt,
    }
    attrs.update(_present(optional))
    for name, value in (rec.tags or {}).items():  # bounded: attribution.MAX_TAGS
        attrs[f"{TAG_ATTRIBUTE}{name}"] = value
    return attrs


# every tag of the request is an attribute: recorder.tag.<name>
TAG_ATTRIBUTE = "recorder.tag."


def _events(rec: StreamRecord, start: int, end: int, err: str | None) -> list[SpanEvent]:
    """The span's events in time order: first event, first output, stalls, and
    the error or cut that ended the stream."""
    events: list[SpanEvent] = []
    first_event = _at(start, rec.first_event_ms)
    if first_event is not None:
        events.append(SpanEvent("recorder.first_event", first_event))
    first_token = _at(start, rec.ttft_ms)
    if first_token is not None:
        events.append(SpanEvent("recorder.first_output_token", first_token))
    for gap in [g for g in rec.gaps if g.kind == "stall"][:MAX_STALL_EVENTS]:
        at = start + int(gap.start_ms * 1_000_000)
        events.append(SpanEvent("recorder.stall", at, {"recorder.stall.length_ms": gap.length_ms}))
    if rec.outcome == "error" and rec.http_status in (200, 101):
        # an error event inside a stream that had begun well; it ends the stream
        details = {
            "error.type": err,
            "recorder.error_code": rec.error_code,
            "recorder.error_message": _cut(rec.error_message),
        }
        events.append(SpanEvent("recorder.error", end, _present(details)))
    if rec.outcome in INTERRUPTED_OUTCOMES:
        cut = {
            "recorder.outcome": rec.outcome,
            "recorder.transport_error": _cut(rec.transport_error),
        }
        events.append(SpanEvent("recorder.interrupted", end, _present(cut)))
    events.extend(_part_events(rec, end))
    events.sort(key=lambda e: e.time_ns)
    return events


# a usage part's figures, as the span's own attributes name them
_PART_ATTRIBUTES = (
    ("gen_ai.usage.input_tokens", "input_tokens"),
    ("gen_ai.usage.output_tokens", "output_tokens"),
    ("gen_ai.usage.cache_read.input_tokens", "cache_read_tokens"),
    ("gen_ai.usage.cache_write.input_tokens", "cache_write_tokens"),
    ("gen_ai.usage.reasoning.output_tokens", "reasoning_tokens"),
    ("recorder.cost_usd", "cost_usd"),
    ("recorder.price_version", "price_version"),
)


def _part_events(rec: StreamRecord, end: int) -> list[SpanEvent]:
    """One ``recorder.usage_part`` event per priced part of the usage."""
    events = []
    for part in rec.usage_parts or ():
        values: dict[str, AttributeValue | None] = {
            "recorder.usage_part.kind": _text(part.get("kind")),
            "gen_ai.response.model": _text(part.get("model")) or rec.response_model or rec.model,
        }
        for name, key in _PART_ATTRIBUTES:
            value = part.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                values[name] = value
        events.append(SpanEvent("recorder.usage_part", end, _present(values)))
    return events


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _present(values: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    return {k: v for k, v in values.items() if v is not None}
