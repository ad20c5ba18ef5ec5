"""The record factories of the suite: every ``StreamRecord`` a test builds by hand
starts here.

- ``simple_record`` / ``full_record``: a small completed stream / every field set;
- ``rec`` and ``random_records``: the audit's streams (every outcome, source and
  unknown value; costs up to the column's limit); ``REFUSED``, the overrides of a
  refused request;
- ``priced_record`` and ``fixture_records``: streams costed with the repricing
  tests' ``V1`` table (tests.kit.prices);
- ``span_record``: a stream with the figures an OpenTelemetry span carries;
- ``metric_record``: the fields the Prometheus exporter reads;
- ``DOCUMENTED_FIELDS``: every field of a record, in its documented order;
- ``TIMING_FIELDS``: the record's timings (docs/record.md).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from recorder.core.record import (
    INTERRUPTED_OUTCOMES,
    OUTCOMES,
    SOURCES,
    TRANSPORTS,
    Gap,
    StreamRecord,
    combine_sources,
)
from recorder.proxy.ids import new_record_id
from tests.kit.prices import V1, expected_cost

# docs/record.md's timings: what only the stream's clock gives (None for a body
# replayed with no times; compared with rounding slack when replayed from offsets).
TIMING_FIELDS = (
    "ttfb_ms",
    "first_event_ms",
    "ttft_ms",
    "duration_ms",
    "max_keepalive_gap_ms",
    "max_silence_ms",
    "max_output_gap_ms",
    "stall_ms",
)

# Every field of a recorded stream, in the order the record's specification lists
# them (the order users script against).
DOCUMENTED_FIELDS = (
    "id",
    "started_at",
    "endpoint",
    "provider",
    "upstream",
    "model",
    "response_model",
    "request_id",
    "response_id",
    "project",
    "streamed",
    "http_status",
    "outcome",
    "interrupted",
    "finish_reason",
    "error_type",
    "error_code",
    "error_message",
    "ttfb_ms",
    "first_event_ms",
    "ttft_ms",
    "duration_ms",
    "events",
    "keepalives",
    "max_keepalive_gap_ms",
    "max_silence_ms",
    "max_output_gap_ms",
    "stalls",
    "stall_ms",
    "output_chars",
    "tool_calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "input_source",
    "output_source",
    "usage_source",
    "estimate_method",
    "cost_usd",
    "price_version",
    "api_key_id",
)

# the endpoints random records are drawn from: fixed, so that a new endpoint does not
# change every seeded draw of the tests built on them
RANDOM_ENDPOINTS = ("chat.completions", "responses", "messages", "realtime")


def full_record(**overrides: Any) -> StreamRecord:
    """A record with every field set (nothing left at its default)."""
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at="2026-03-04T05:06:07.089Z",
        endpoint="messages",
        provider="anthropic",
        upstream="api.anthropic.com:443",
        model="claude-sonnet-4-5",
        response_model="claude-sonnet-4-5-20250929",
        request_id="req_011CUZ",
        response_id="msg_01XYZ",
        project="wrkspc_01",
        streamed=True,
        http_status=200,
        outcome="upstream_disconnect",
        interrupted=True,
        finish_reason="max_tokens",
        error_type="overloaded_error",
        error_code="529",
        error_message="Overloaded: «ça déborde» 😅",
        ttfb_ms=212.5,
        first_event_ms=230.25,
        ttft_ms=731.125,
        duration_ms=95123.5,
        events=1234,
        keepalives=17,
        max_keepalive_gap_ms=15000.5,
        max_silence_ms=45000.0,
        max_output_gap_ms=61000.25,
        stalls=2,
        stall_ms=96000.75,
        output_chars=4567,
        tool_calls=3,
        input_tokens=12345,
        cache_read_tokens=10000,
        cache_write_tokens=345,
        output_tokens=890,
        reasoning_tokens=120,
        input_source="reported",
        output_source="estimated",
        usage_source="mixed",
        estimate_method="chars/4",
        cost_usd="0.123456789012",
        price_version="anthropic-2026-01",
        api_key_id="…3456:0a1b2c3d4e5f",
        organization="org-abc",
        include_usage=True,
        max_output_tokens=4096,
        parse_issues=2,
        oversized_events=1,
        partial_event_at_end=True,
        transport_error="connection reset by peer",
        recorder_error="ValueError: boom",
        raw_usage={"input_tokens": 1000, "cache_read_input_tokens": 10000, "nested": {"a": [1, 2]}},
        service_tier="priority",
        requested_tier="fast",
        cache_write_5m_tokens=300,
        cache_write_1h_tokens=45,
        server_tool_requests={"web_search": 2},
        output_breakdown={"text": 4000, "tool_arguments": 567},
        input_breakdown={"latin": 40000, "cjk": 1200},
        unpriced_reason="no 'priority' service-tier rate for claude-x",
        content_mismatch="declared text/plain, body is an event stream",
        transport="eventstream",
        connection_id="b7e1c0de-5e55-4a11-9c0a-000000000031",
        input_audio_tokens=5000,
        cache_read_audio_tokens=4000,
        input_image_tokens=300,
        cache_read_image_tokens=100,
        output_audio_tokens=600,
        output_audio_ms=29875.5,
        user_id="u:0123456789abcdef",
        session_id="6f1c2d3e-0000-4000-8000-000000000001",
        prompt_cache_key="conv-42",
        tags={"team": "search", "feature": "summarise"},
        request_fingerprint="0a1b2c3d4e5f60718293a4b5",
        retry_of="01a24961-58db-75eb-9f35-000000000001",
        attempt=2,
        usage_parts=[
            {
                "kind": "compaction",
                "model": None,
                "input_tokens": 40000,
                "cache_read_tokens": 30000,
                "cache_write_tokens": 0,
                "cache_write_5m_tokens": 0,
                "cache_write_1h_tokens": 0,
                "output_tokens": 800,
                "reasoning_tokens": None,
                "cost_usd": "0.021000000000",
                "price_version": "2026-12-01:claude-x@2026-11-30",
                "unpriced_reason": None,
            },
            {
                "kind": "advisor_message",
                "model": "claude-y",
                "input_tokens": 2100,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "cache_write_5m_tokens": 0,
                "cache_write_1h_tokens": 0,
                "output_tokens": 400,
                "reasoning_tokens": None,
                "cost_usd": None,
                "price_version": None,
                "unpriced_reason": "no price for model 'claude-y'",
            },
        ],
        provider_latency_ms=97512.25,
        provider_first_byte_ms=812.5,
        gaps=[
            Gap("stall", 1000.0, 61000.25),
            Gap("keepalive", 2000.0, 15000.5),
            Gap("silence", 3000.5, 45000.0),
            Gap("stall", 62000.0, 35000.5),
        ],
    )
    values.update(overrides)
    return StreamRecord(**values)


def simple_record(i: int = 0, **overrides: Any) -> StreamRecord:
    """A small completed record."""
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at=f"2026-02-01T00:00:{i % 60:02d}.000Z",
        endpoint="chat.completions",
        provider="openai",
        upstream="api.openai.com:443",
        model="gpt-4o-mini",
        outcome="completed",
        interrupted=False,
        http_status=200,
        duration_ms=1500.0 + i,
        ttft_ms=300.0,
        input_tokens=100,
        output_tokens=20 + i,
        input_source="reported",
        output_source="reported",
        usage_source="reported",
        cost_usd="0.000027000000",
        gaps=[Gap("silence", 300.0, 800.0)],
    )
    values.update(overrides)
    return StreamRecord(**values)


BASE = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)


KEYS = [None, "…1111:aaaaaaaaaaaa", "…2222:bbbbbbbbbbbb"]


PROJECTS = [None, "proj_a", "proj_b"]


MODELS = [None, "gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5"]


UPSTREAMS = [None, "api.openai.com:443", "gateway.internal:8443"]


def random_records(rng: random.Random, n: int) -> list[StreamRecord]:
    """``n`` streams with every kind of value an audit meets: unknown keys,
    projects and models, every outcome and source, unknown figures, unpriced
    streams, and costs up to the column's limit (12 integer digits)."""
    out = []
    for _ in range(n):
        outcome = rng.choice(OUTCOMES)
        in_src = rng.choice(SOURCES)
        out_src = rng.choice(SOURCES)
        usage = combine_sources(in_src, out_src)

        def tokens(source: str, hi: int = 50_000) -> int | None:
            return None if source == "none" else rng.randint(0, hi)

        priced = usage != "none" and rng.random() < 0.8
        if priced:
            if rng.random() < 0.05:
                cost = f"{rng.randint(0, 10**12 - 1)}.{rng.randint(0, 10**12 - 1):012d}"
            else:
                cost = f"0.{rng.randint(0, 10**12 - 1):012d}"
        started = BASE + timedelta(milliseconds=rng.randint(0, 3 * 86_400_000))
        out.append(
            StreamRecord(
                id=new_record_id(),
                started_at=started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                endpoint=rng.choice(RANDOM_ENDPOINTS),
                provider="openai",
                model=rng.choice(MODELS),
                project=rng.choice(PROJECTS),
                api_key_id=rng.choice(KEYS),
                outcome=outcome,
                interrupted=outcome in INTERRUPTED_OUTCOMES,
                input_tokens=tokens(in_src),
                cache_read_tokens=tokens(in_src, 1000) if rng.random() < 0.5 else None,
                cache_write_tokens=tokens(in_src, 1000) if rng.random() < 0.3 else None,
                output_tokens=tokens(out_src),
                reasoning_tokens=tokens(out_src, 500) if rng.random() < 0.3 else None,
                input_source=in_src,
                output_source=out_src,
                usage_source=usage,
                cost_usd=cost if priced else None,
                price_version="t:m@d" if priced else None,
                upstream=rng.choice(UPSTREAMS),
            )
        )
        # (drawn after the record's other values: the same seed gives them as before)
        out[-1].transport = rng.choice(TRANSPORTS)
    return out


# The overrides of a refused request (an http_error): no usage known, never priced.
REFUSED: dict[str, Any] = dict(
    outcome="http_error",
    input_tokens=None,
    output_tokens=None,
    input_source="none",
    output_source="none",
    usage_source="none",
    cost_usd=None,
    price_version=None,
)


def rec(**kw: Any) -> StreamRecord:
    """A reported, priced gpt-4o chat stream (the audit's unit of account)."""
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at="2026-05-05T10:30:00.000Z",
        endpoint="chat.completions",
        model="gpt-4o",
        outcome="completed",
        interrupted=False,
        input_tokens=100,
        output_tokens=10,
        input_source="reported",
        output_source="reported",
        usage_source="reported",
        cost_usd="0.000350000000",
        price_version="t:gpt-4o@d",
    )
    values.update(kw)
    return StreamRecord(**values)


def priced_record(
    model: str | None, inp: int | None, out: int | None, started: str, **kw: Any
) -> StreamRecord:
    """A chat stream of ``model`` costed with the ``V1`` table (unpriced when V1 has
    no rate; no usage at all when both token counts are None)."""
    known = inp is not None or out is not None
    cost = expected_cost(V1, model or "", inp or 0, out or 0) if known else None
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at=started,
        endpoint="chat.completions",
        provider="openai",
        model=model,
        outcome="completed",
        interrupted=False,
        input_tokens=inp,
        output_tokens=out,
        input_source="reported" if inp is not None else "none",
        output_source="reported" if out is not None else "none",
        usage_source="reported" if known else "none",
        cost_usd=None if cost is None else f"{cost:f}",
        price_version=None if cost is None else f"v1:{model}@2026-01-01",
        unpriced_reason=f"no price for model {model!r}" if known and cost is None else None,
    )
    values.update(kw)
    return StreamRecord(**values)


def fixture_records() -> list[StreamRecord]:
    """The streams the repricing tests store: seven from 2026-04 on, one before."""
    return [
        priced_record("gpt-4o", 1000, 200, "2026-04-01T10:00:00.000Z"),
        priced_record("gpt-4o", 12345, 6789, "2026-04-02T10:00:00.000Z"),
        priced_record(  # an estimated (cut) stream is repriced all the same
            "gpt-4o",
            800,
            33,
            "2026-04-02T11:00:00.000Z",
            outcome="upstream_disconnect",
            interrupted=True,
            output_source="estimated",
            usage_source="mixed",
        ),
        priced_record("claude-x", 5000, 700, "2026-04-02T12:00:00.000Z"),
        priced_record("gpt-4o-mini", 3000, 100, "2026-04-03T12:00:00.000Z"),  # unpriced in v1
        priced_record("legacy-model", 10, 20, "2026-04-03T13:00:00.000Z"),
        priced_record(  # an http_error: no usage, never priced
            "gpt-4o",
            None,
            None,
            "2026-04-03T14:00:00.000Z",
            outcome="http_error",
            http_status=429,
        ),
        priced_record("gpt-4o", 999, 999, "2026-03-01T00:00:00.000Z"),  # before --since
    ]


def span_record(**over: object) -> StreamRecord:
    """A finished chat stream with the figures a span carries (overrides set after)."""
    rec = StreamRecord(
        id="rec_1",
        started_at="2026-12-01T10:00:00.250Z",
        endpoint="openai-chat",
        provider="openai",
        upstream="api.openai.com:443",
        model="gpt-4o",
        response_model="gpt-4o-2024-08-06",
        response_id="chatcmpl-1",
        http_status=200,
        outcome="completed",
        interrupted=False,
        finish_reason="stop",
        first_event_ms=80.0,
        ttft_ms=95.5,
        duration_ms=2500.0,
        events=40,
        keepalives=3,
        stalls=1,
        max_output_gap_ms=1200.0,
        input_tokens=120,
        cache_read_tokens=100,
        cache_write_tokens=0,
        output_tokens=38,
        reasoning_tokens=12,
        usage_source="reported",
        input_source="reported",
        output_source="reported",
        cost_usd="0.00068500",
        price_version="2026-11-01",
        api_key_id="key_3f9a",
        gaps=[Gap("stall", 400.0, 1200.0), Gap("keepalive", 100.0, 200.0)],
    )
    for name, value in over.items():
        setattr(rec, name, value)
    return rec


def metric_record(**fields: Any) -> StreamRecord:
    """The few fields the Prometheus exporter reads, and ``fields``."""
    base: dict[str, Any] = {
        "endpoint": "chat.completions",
        "provider": "openai",
        "model": "gpt-4o",
        "outcome": "completed",
        "interrupted": False,
        "duration_ms": 2500.0,
        "ttft_ms": 400.0,
        "max_output_gap_ms": 120.0,
        "stalls": 0,
        "keepalives": 0,
    }
    base.update(fields)
    return StreamRecord(**base)


# The retry chain's fields and the tags (issue 32, sections 1-2), by the names the
# record gives them: a request's fingerprint, the record id of the attempt it
# retries, its attempt number, and its tags (name -> value).
CHAIN_FIELDS = ("request_fingerprint", "retry_of", "attempt", "tags")


def with_chain(record: StreamRecord, **chain: Any) -> StreamRecord:
    """``record`` with ``chain`` (names of ``CHAIN_FIELDS``) set: the record itself
    where it has the fields; else the same record as a ``StreamRecord`` subclass
    that has them, for what reads them as attributes (the exporter)."""
    unknown = set(chain) - set(CHAIN_FIELDS)
    assert not unknown, unknown
    if all(hasattr(record, name) for name in chain):
        for name, value in chain.items():
            setattr(record, name, value)
        return record
    values = {f.name: getattr(record, f.name) for f in fields(record)}
    return _chained_type()(**values, **chain)


@functools.cache
def _chained_type() -> type[StreamRecord]:
    missing = [name for name in CHAIN_FIELDS if name not in StreamRecord.__dataclass_fields__]
    annotations = {name: Any for name in missing}
    namespace = {"__annotations__": annotations, **dict.fromkeys(missing)}
    return dataclass(slots=True)(type("ChainedRecord", (StreamRecord,), namespace))


def chain_row(record: StreamRecord, **chain: Any) -> dict[str, Any]:
    """``record.to_dict()`` with ``chain`` (names of ``CHAIN_FIELDS``) set: on the
    record where it has the field, in the row beside its fields where it has not
    yet, so that the audit reads the same row either way."""
    unknown = set(chain) - set(CHAIN_FIELDS)
    assert not unknown, unknown
    for name, value in chain.items():
        if hasattr(record, name):
            setattr(record, name, value)
    row = record.to_dict()
    row.update(chain)
    return row


def retry_chain(
    fingerprint: str = "fp:0a1b2c3d",
    *,
    model: str = "gpt-4o",
    key: str = "…1111:aaaaaaaaaaaa",
    tags: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A chain of three attempts of one request, priced with ``V1``: cut by the
    upstream (usage estimated), retried and ended by an error event (input
    reported, output estimated), retried again and completed (reported). Money
    with twelve places, where a float would lose cents in a sum. The rows;
    ``retry_chain_records`` gives the records."""
    return [row for _, row in _chain(fingerprint, model, key, tags)]


def retry_chain_records(
    fingerprint: str = "fp:0a1b2c3d",
    *,
    model: str = "gpt-4o",
    key: str = "…1111:aaaaaaaaaaaa",
    tags: dict[str, str] | None = None,
) -> list[StreamRecord]:
    """The records of ``retry_chain`` (its chain fields set where the record has them)."""
    return [record for record, _ in _chain(fingerprint, model, key, tags)]


def _chain(
    fingerprint: str, model: str, key: str, tags: dict[str, str] | None
) -> list[tuple[StreamRecord, dict[str, Any]]]:
    specs = [
        ("upstream_disconnect", 1234, 17, "estimated", "estimated", "10:00:00.000"),
        ("error", 1234, 333, "reported", "estimated", "10:00:03.500"),
        ("completed", 1234, 911, "reported", "reported", "10:00:09.250"),
    ]
    chain: list[tuple[StreamRecord, dict[str, Any]]] = []
    previous: str | None = None
    for attempt, (outcome, inp, out, in_src, out_src, clock) in enumerate(specs, 1):
        record = priced_record(
            model,
            inp,
            out,
            f"2026-05-05T{clock}Z",
            outcome=outcome,
            interrupted=outcome in INTERRUPTED_OUTCOMES,
            http_status=200,
            input_source=in_src,
            output_source=out_src,
            usage_source=combine_sources(in_src, out_src),
            api_key_id=key,
            upstream="api.openai.com:443",
        )
        row = chain_row(
            record, request_fingerprint=fingerprint, retry_of=previous, attempt=attempt, tags=tags
        )
        chain.append((record, row))
        previous = record.id
    return chain
