"""One finished record as one span, through the real OpenTelemetry SDK.

The exporter is the SDK's in-memory one (what the batch processor hands the OTLP
exporter); what a real collector stores is checked in test_otlp_proxy.py.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from recorder.core.record import OUTCOMES, Gap, StreamRecord
from recorder.otel import SpanExport
from recorder.otel.export import OtlpConfigError, traces_url
from tests.kit.records import span_record as record

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def export_one(
    rec: StreamRecord, traceparent: str | None = None, tracestate: str | None = None
) -> ReadableSpan:
    memory = InMemorySpanExporter()
    spans = SpanExport(exporter=memory)
    spans.export(rec, traceparent, tracestate)
    spans.close()
    [span] = memory.get_finished_spans()
    return span


def ns(iso: str) -> int:
    return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp() * 1e6) * 1000


def test_a_completed_stream_is_a_client_span_named_and_timed_as_the_conventions_say() -> None:
    span = export_one(record())
    assert span.kind is SpanKind.CLIENT
    assert span.name == "chat gpt-4o"
    start = ns("2026-12-01T10:00:00.250")
    assert span.start_time == start
    assert span.end_time == start + 2_500_000_000
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-4o"
    assert attrs["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["gen_ai.response.id"] == "chatcmpl-1"
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs["gen_ai.usage.input_tokens"] == 120
    assert attrs["gen_ai.usage.output_tokens"] == 38
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 100
    assert attrs["gen_ai.usage.cache_write.input_tokens"] == 0  # zero is known, not absent
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == 12
    assert attrs["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.08)
    assert attrs["server.address"] == "api.openai.com"
    assert attrs["server.port"] == 443
    assert attrs["http.response.status_code"] == 200
    assert "error.type" not in attrs
    assert span.status.status_code is StatusCode.UNSET
    assert attrs["recorder.outcome"] == "completed"
    assert attrs["recorder.usage_source"] == "reported"
    assert attrs["recorder.cost_usd"] == "0.00068500"  # the decimal string, unrounded
    assert attrs["recorder.price_version"] == "2026-11-01"
    assert attrs["recorder.stalls"] == 1
    assert attrs["recorder.keepalives"] == 3
    assert attrs["recorder.max_output_gap_ms"] == 1200.0
    assert attrs["recorder.api_key_id"] == "key_3f9a"
    events = [(e.name, e.timestamp - start, dict(e.attributes or {})) for e in span.events]
    assert events == [
        ("recorder.first_event", 80_000_000, {}),
        ("recorder.first_output_token", 95_500_000, {}),
        ("recorder.stall", 400_000_000, {"recorder.stall.length_ms": 1200.0}),
    ]


def test_unknown_figures_are_left_out_never_zero() -> None:
    rec = record(
        input_tokens=None,
        output_tokens=None,
        cache_read_tokens=None,
        cache_write_tokens=None,
        reasoning_tokens=None,
        cost_usd=None,
        model=None,
        first_event_ms=None,
        ttft_ms=None,
        gaps=[],
    )
    span = export_one(rec)
    attrs = dict(span.attributes or {})
    assert span.name == "chat"
    for name in (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_write.input_tokens",
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.request.model",
        "gen_ai.response.time_to_first_chunk",
        "recorder.cost_usd",
    ):
        assert name not in attrs
    assert span.events == ()


@pytest.mark.parametrize("outcome", [o for o in OUTCOMES if o != "completed"])
def test_every_outcome_but_completed_has_an_error_type_and_an_error_status(outcome: str) -> None:
    status = 429 if outcome == "http_error" else 200
    span = export_one(record(outcome=outcome, http_status=status, error_type=None))
    attrs = dict(span.attributes or {})
    want = "429" if outcome == "http_error" else outcome
    assert attrs["error.type"] == want
    assert span.status.status_code is StatusCode.ERROR
    assert attrs["recorder.outcome"] == outcome


def test_an_error_event_after_200_and_the_interruption_are_span_events() -> None:
    rec = record(
        outcome="error",
        interrupted=True,
        error_type="server_error",
        error_code="server_error",
        error_message="The server had an error " + "x" * 1000,
        finish_reason=None,
    )
    span = export_one(rec)
    assert dict(span.attributes or {})["error.type"] == "server_error"
    end = span.end_time
    by_name = {e.name: e for e in span.events}
    error = by_name["recorder.error"]
    assert error.timestamp == end
    assert error.attributes is not None
    assert error.attributes["error.type"] == "server_error"
    assert error.attributes["recorder.error_code"] == "server_error"
    assert len(str(error.attributes["recorder.error_message"])) <= 256  # cut, not a log
    cut = by_name["recorder.interrupted"]
    assert cut.timestamp == end
    assert cut.attributes is not None and cut.attributes["recorder.outcome"] == "error"


def test_a_cut_stream_has_an_interruption_but_no_error_event() -> None:
    rec = record(outcome="upstream_disconnect", interrupted=True, transport_error="peer reset")
    names = [e.name for e in export_one(rec).events]
    assert "recorder.interrupted" in names and "recorder.error" not in names


def test_a_traceparent_makes_the_span_a_child_in_the_callers_trace() -> None:
    span = export_one(record(), TRACEPARENT, "vendor=abc")
    assert span.parent is not None and span.parent.is_remote
    assert span.parent.span_id == int(PARENT_ID, 16)
    assert span.context is not None
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert span.context.span_id != int(PARENT_ID, 16)
    assert span.context.trace_state.get("vendor") == "abc"


@pytest.mark.parametrize(
    "bad",
    [
        "garbage",
        f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff is invalid
        f"{TRACEPARENT}, {TRACEPARENT}",  # a repeated header, folded
        "",
    ],
)
def test_an_invalid_traceparent_starts_a_trace_of_its_own(bad: str) -> None:
    span = export_one(record(), bad)
    assert span.parent is None
    assert span.context is not None and span.context.trace_id != int(TRACE_ID, 16)


def test_a_caller_that_does_not_sample_gets_no_span() -> None:
    memory = InMemorySpanExporter()
    spans = SpanExport(exporter=memory)
    spans.export(record(), f"00-{TRACE_ID}-{PARENT_ID}-00")
    spans.close()
    assert memory.get_finished_spans() == ()
    assert spans.dropped == 0  # not sampled is not dropped


def test_no_content_and_no_key_reach_the_span() -> None:
    """The record holds no prompt or completion text; a key echoed in an error message
    is scrubbed before the record is completed, and only the fingerprint id goes out."""
    rec = record(outcome="error", error_type="x", error_message="bad request")
    span = export_one(rec)
    names = set(span.attributes or {}) | {k for e in span.events for k in (e.attributes or {})}
    assert not {
        n for n in names if n.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.prompt"))
    }
    assert not {n for n in names if "message" in n and n.startswith("gen_ai")}


class _Blocked(SpanExporter):
    """A collector that hangs until released, then takes everything."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.received: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        self.received.extend(spans)
        return SpanExportResult.SUCCESS


def test_a_hung_collector_never_blocks_and_every_span_it_never_got_is_counted() -> None:
    hung = _Blocked()
    spans = SpanExport(exporter=hung, max_queue_size=4, schedule_delay_ms=60_000)
    for i in range(50):
        spans.export(record(id=f"rec_{i}"))  # returns although the collector hangs
    assert spans.dropped >= 50 - 8  # at most one batch being sent and a full queue
    hung.release.set()
    spans.close()
    assert len(hung.received) + spans.dropped == 50
    assert spans.exported == len(hung.received)


class _Failing(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        return SpanExportResult.FAILURE


def test_spans_of_a_failed_send_are_counted_dropped() -> None:
    failing = _Failing()
    spans = SpanExport(exporter=failing)
    for i in range(7):
        spans.export(record(id=f"rec_{i}"))
    spans.close()
    assert failing.calls >= 1
    assert spans.dropped == 7 and spans.exported == 0


def test_a_collector_that_is_down_costs_a_bounded_close_and_counts_every_span() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spans = SpanExport(f"http://127.0.0.1:{port}")
    for i in range(5):
        spans.export(record(id=f"rec_{i}"))
    spans.close(timeout_s=1.0)
    assert spans.dropped == 5 and spans.exported == 0


def test_endpoint_urls() -> None:
    assert traces_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"
    assert traces_url("http://c:4317", "grpc") == "http://c:4317"
    for bad in ("127.0.0.1:4318", "ftp://c", "http://"):
        with pytest.raises(OtlpConfigError):
            traces_url(bad)


def test_service_name_defaults_and_follows_otel_service_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = export_one(record())
    monkeypatch.setenv("OTEL_SERVICE_NAME", "team-a-proxy")
    second = export_one(record())
    assert first.resource.attributes["service.name"] == "llm-recorder"
    assert second.resource.attributes["service.name"] == "team-a-proxy"


def test_a_stream_with_many_stalls_keeps_its_ending_events() -> None:
    gaps = [Gap("stall", 100.0 + i, 1.0) for i in range(500)]
    rec = record(outcome="upstream_disconnect", interrupted=True, gaps=gaps, stalls=500)
    span = export_one(rec)
    names = [e.name for e in span.events]
    assert names.count("recorder.stall") == 100
    assert names[-1] == "recorder.interrupted"  # not pushed out by the SDK's event limit
    assert dict(span.attributes or {})["recorder.stalls"] == 500


def test_the_standard_variables_name_the_collector_unless_the_sdk_is_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from recorder.otel.export import env_endpoint

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")
    assert env_endpoint() == "http://c:4318"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/v1/traces")
    assert env_endpoint() == "http://t:4318/v1/traces"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert env_endpoint() is None


def test_every_tag_and_the_chain_are_span_attributes_the_user_only_as_stored() -> None:
    tags = {f"t{i}": f"v{i}" for i in range(16)} | {"team": "search"}
    rec = record(
        tags=tags,
        user_id="u:0123456789abcdef",
        session_id="7c9e6679-7425-40de-944b-e07fc1f90ae7",
        request_fingerprint="0a1b2c3d4e5f60718293a4b5",
        retry_of="01a24961-58db-75eb-9f35-000000000001",
        attempt=2,
    )
    attrs = dict(export_one(rec).attributes or {})
    assert {
        k[len("recorder.tag.") :]: v for k, v in attrs.items() if k.startswith("recorder.tag.")
    } == tags
    assert attrs["enduser.id"] == "u:0123456789abcdef"
    assert attrs["session.id"] == rec.session_id
    assert (attrs["recorder.retry_of"], attrs["recorder.attempt"]) == (rec.retry_of, 2)
    bare = dict(export_one(record()).attributes or {})
    assert not any(k.startswith(("recorder.tag.", "enduser.", "session.")) for k in bare)
    assert "recorder.retry_of" not in bare


def test_each_usage_part_is_an_event_under_its_own_model() -> None:
    """Issue 30: a backend summing tokens or cost by model finds an advisor's part
    under the advisor's model; a part that names none is the record's."""
    parts = [
        {
            "kind": "message",
            "model": None,
            "input_tokens": 100,
            "output_tokens": 10,
            "cache_read_tokens": 0,
            "cost_usd": "0.000450000000",
            "price_version": "t:own@d",
        },
        {
            "kind": "advisor_message",
            "model": "claude-opus-4-7",
            "input_tokens": 300,
            "output_tokens": 900,
            "cache_read_tokens": None,
            "cost_usd": "0.024000000000",
            "price_version": "t:claude-opus-4-7@d",
        },
    ]
    rec = record(response_model="claude-sonnet-4-6", input_tokens=400, output_tokens=910)
    rec.usage_parts = parts
    span = export_one(rec)
    events = [e for e in span.events if e.name == "recorder.usage_part"]
    assert [dict(e.attributes or {}) for e in events] == [
        {
            "recorder.usage_part.kind": "message",
            "gen_ai.response.model": "claude-sonnet-4-6",
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10,
            "gen_ai.usage.cache_read.input_tokens": 0,
            "recorder.cost_usd": "0.000450000000",
            "recorder.price_version": "t:own@d",
        },
        {
            "recorder.usage_part.kind": "advisor_message",
            "gen_ai.response.model": "claude-opus-4-7",
            "gen_ai.usage.input_tokens": 300,
            "gen_ai.usage.output_tokens": 900,
            "recorder.cost_usd": "0.024000000000",
            "recorder.price_version": "t:claude-opus-4-7@d",
        },
    ]
    assert all(e.timestamp == span.end_time for e in events)
    assert dict(span.attributes or {})["gen_ai.usage.input_tokens"] == 400
    assert not [e for e in export_one(record()).events if e.name == "recorder.usage_part"]


def test_a_bedrock_record_names_aws_bedrock_and_its_own_timing() -> None:
    rec = record(
        endpoint="converse",
        provider="aws.bedrock",
        model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        upstream="bedrock-runtime.us-east-1.amazonaws.com:443",
        transport="eventstream",
        provider_latency_ms=2210.0,
    )
    attrs = dict(export_one(rec).attributes or {})
    assert attrs["gen_ai.provider.name"] == "aws.bedrock"
    assert attrs["recorder.transport"] == "eventstream"
    assert attrs["recorder.provider_latency_ms"] == 2210.0
    assert "recorder.provider_first_byte_ms" not in attrs  # unknown: left out


@pytest.mark.parametrize(
    ("provider", "operation"),
    [("gcp.gemini", "generate_content"), ("gcp.vertex_ai", "generate_content")],
)
def test_gemini_is_generate_content_under_its_provider(provider: str, operation: str) -> None:
    rec = record()
    rec.endpoint, rec.provider, rec.model = "generate_content", provider, "gemini-2.5-flash"
    span = export_one(rec)
    attrs = dict(span.attributes or {})
    assert span.name == "generate_content gemini-2.5-flash"
    assert (attrs["gen_ai.operation.name"], attrs["gen_ai.provider.name"]) == (operation, provider)
