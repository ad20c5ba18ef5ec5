"""OTLP export of finished records, one span each, off the event loop.

``SpanExport.export`` runs where the record is completed (on mitmproxy's event
loop): it builds the span from the finished record (``recorder.otel.spans``) and
hands it to the SDK's ``BatchSpanProcessor``, which only appends it to a bounded
queue; the processor's own thread encodes and sends batches. So a collector that
is slow or down never blocks traffic and never grows memory past
``max_queue_size`` spans: spans that do not fit, or whose batch failed to send
(after the exporter's own retries), are dropped, counted in ``dropped``
(``llm_recorder_otlp_dropped_total``) and logged, a line per power of ten.

The SDK itself drops the oldest span silently when the queue is full and only
logs failed sends, so both are counted here: ``_CountingExporter`` counts the
spans of every failed batch, ``_QueueGuard`` the spans the queue had no room for
(it tracks how many are queued from what goes in and what the exporter took).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from recorder import __version__ as _recorder_version
from recorder.core.errors import UsageError
from recorder.core.record import StreamRecord
from recorder.otel.spans import SEMCONV, plan_span

log = logging.getLogger("recorder")

DEFAULT_SERVICE_NAME = "llm-recorder"
TRACES_PATH = "/v1/traces"
PROTOCOLS = ("http/protobuf", "grpc")
# Bounds of the batch processor: spans kept while the collector is away, and how
# long shutdown waits for the last ones before counting them dropped.
DEFAULT_MAX_QUEUE_SIZE = 2048
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0


class OtlpConfigError(UsageError):
    """A bad OTLP setting; printed as one line."""


def traces_url(endpoint: str, protocol: str = "http/protobuf") -> str:
    """``--otlp-endpoint`` as the exporter wants it. Like OTEL_EXPORTER_OTLP_ENDPOINT it
    is the collector's base URL (``http://host:4318``); over HTTP the signal path
    ``/v1/traces`` is added unless it is there already."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OtlpConfigError(
            f"the OTLP endpoint must be an http(s) URL such as http://127.0.0.1:4318, not"
            f" {endpoint!r} (--otlp-endpoint, recorder_otlp_endpoint or OTEL_EXPORTER_OTLP_*)"
        )
    if protocol == "grpc":
        return endpoint
    path = parts.path.rstrip("/")
    if path.endswith(TRACES_PATH):
        return endpoint
    return parts._replace(path=path + TRACES_PATH).geturl()


def shown_url(url: str) -> str:
    """``url`` without user info or query, for the banner (they may hold secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return f"{parts.scheme}://{netloc}{parts.path}"


def env_endpoint() -> str | None:
    """The collector the standard variables name, if any (traces first); none when
    OTEL_SDK_DISABLED is true."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def env_protocol() -> str:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return "http/protobuf"


def _span_exporter(url: str | None, protocol: str) -> SpanExporter:
    """The SDK's OTLP exporter. Headers, timeout, TLS and compression come from the
    standard OTEL_EXPORTER_OTLP_* variables, which the exporter reads itself; with
    ``url`` None so does the endpoint."""
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise OtlpConfigError(
                "OTLP over gRPC needs the grpc extra: pip install 'recorder[otlp-grpc]'"
            ) from None
        return cast(SpanExporter, GrpcExporter(endpoint=url))
    if protocol != "http/protobuf":
        raise OtlpConfigError(
            f"OTLP protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=url)


class _Counts:
    """Spans queued, exported and dropped; shared by the two wrappers below."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queued = 0  # in the batch processor's queue (as far as we can tell)
        self.exported = 0
        self.dropped = 0
        # set at close once what is left is counted dropped: later sends count nothing
        self.settled = False
        self._next_log = 1

    def drop(self, n: int, why: str) -> None:
        with self.lock:
            self.dropped += n
            total = self.dropped
            due = total >= self._next_log
            if due:
                while self._next_log <= total:
                    self._next_log *= 10
        if due:
            log.warning(
                "recorder: OTLP export dropped %d span(s) (%s); %d dropped so far;"
                " traffic and records are unaffected",
                n,
                why,
                total,
            )


class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting the spans of each batch it failed to send."""

    def __init__(self, inner: SpanExporter, counts: _Counts) -> None:
        self.inner = inner
        self.counts = counts

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        with self.counts.lock:
            if self.counts.settled:  # counted dropped already, at close
                return SpanExportResult.FAILURE
            self.counts.queued = max(0, self.counts.queued - n)
        try:
            result = self.inner.export(spans)
        except Exception as e:  # the processor would log it; count it too
            self.counts.drop(n, f"export failed: {type(e).__name__}")
            return SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            with self.counts.lock:
                self.counts.exported += n
        else:
            self.counts.drop(n, "the collector did not take them")
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _QueueGuard(SpanProcessor):
    """Before the batch processor: counts the spans its full queue pushes out (it
    drops the oldest span for each new one, with only a log line)."""

    def __init__(self, inner: BatchSpanProcessor, counts: _Counts, max_queue_size: int) -> None:
        self.inner = inner
        self.counts = counts
        self.max_queue_size = max_queue_size

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return  # the batch processor skips it as well
        with self.counts.lock:
            full = self.counts.queued >= self.max_queue_size
            if not full:
                self.counts.queued += 1
        if full:
            self.counts.drop(1, "queue full: the collector is slow or away")
        self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class SpanExport:
    """Exports one span per finished record over OTLP. Construct once per proxy."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        protocol: str | None = None,
        service_name: str | None = None,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        schedule_delay_ms: int = 1000,
        exporter: SpanExporter | None = None,
    ) -> None:
        """``endpoint``: the collector's base URL (None: the OTEL_EXPORTER_OTLP_*
        variables say). ``exporter`` replaces the OTLP one (tests, benches)."""
        protocol = protocol or env_protocol()
        if exporter is None:
            url = traces_url(endpoint, protocol) if endpoint else None
            exporter = _span_exporter(url, protocol)
        self.endpoint = endpoint or env_endpoint() or ""
        self.protocol = protocol
        self._counts = _Counts()
        attrs: dict[str, Any] = {}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attrs["service.name"] = service_name or DEFAULT_SERVICE_NAME
        # close() shuts it down, bounded; an atexit shutdown of its own could wait
        # on a collector that is away (older SDKs join the batch thread untimed)
        self._provider = TracerProvider(resource=Resource.create(attrs), shutdown_on_exit=False)
        self._exporter = _CountingExporter(exporter, self._counts)
        self._batch = BatchSpanProcessor(
            self._exporter,
            max_queue_size=max_queue_size,
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=min(512, max_queue_size),
        )
        self._provider.add_span_processor(_QueueGuard(self._batch, self._counts, max_queue_size))
        self._tracer = self._provider.get_tracer(
            "recorder", _recorder_version, schema_url=None, attributes={"semconv": SEMCONV}
        )
        self._propagator = TraceContextTextMapPropagator()
        self._closed = False

    @property
    def dropped(self) -> int:
        """Spans lost: no room in the queue, a failed send, or still queued at close."""
        return self._counts.dropped

    @property
    def exported(self) -> int:
        """Spans the collector accepted."""
        return self._counts.exported

    def export(
        self, rec: StreamRecord, traceparent: str | None = None, tracestate: str | None = None
    ) -> None:
        """Queue the span of ``rec``; a valid ``traceparent`` (W3C trace context) makes it
        a child of the caller's span. Never blocks, never raises into the caller's
        path for bad input (an invalid traceparent starts a trace of its own)."""
        if self._closed:
            return
        plan = plan_span(rec, time.time_ns())
        parent = None
        if traceparent:
            carrier = {"traceparent": traceparent}
            if tracestate:
                carrier["tracestate"] = tracestate
            parent = self._propagator.extract(carrier)
        span = self._tracer.start_span(
            plan.name,
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=plan.attributes,
            start_time=plan.start_ns,
        )
        for event in plan.events:
            span.add_event(event.name, event.attributes, timestamp=event.time_ns)
        if plan.error is not None:
            span.set_status(Status(StatusCode.ERROR, plan.error))
        span.end(end_time=plan.end_ns)

    def close(self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
        """Send what is queued, waiting ``timeout_s`` at most; what is left is dropped."""
        if self._closed:
            return
        self._closed = True
        # The processor's shutdown waits up to 30 s for a collector that is away:
        # give it timeout_s on a thread of its own, then stop the exporter's retries.
        closing = threading.Thread(
            target=self._batch.shutdown, name="recorder-otlp-close", daemon=True
        )
        closing.start()
        closing.join(timeout_s)
        if closing.is_alive():
            with contextlib.suppress(Exception):
                self._exporter.inner.shutdown()
            closing.join(1.0)
        with self._counts.lock:
            left, self._counts.queued = self._counts.queued, 0
            self._counts.settled = True
        if left:
            self._counts.drop(left, "not sent before shutdown")
