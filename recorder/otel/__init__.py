"""OpenTelemetry export: one span per metered stream, in the caller's trace.

``spans`` maps a finished record to a span (names of the GenAI semantic
conventions), ``export`` sends spans over OTLP from the SDK's batch thread, and
``metrics`` puts the exporter's drop counter on /metrics. Fed from record
completion only: nothing here runs per event.
"""

from recorder.otel.export import OtlpConfigError, SpanExport

__all__ = ["OtlpConfigError", "SpanExport"]
