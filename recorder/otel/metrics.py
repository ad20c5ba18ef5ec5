"""The exporter's counters on /metrics (``llm_recorder_otlp_*``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from recorder.otel.export import SpanExport


class _OtlpCollector(Collector):
    def __init__(self, export: SpanExport) -> None:
        self._export = export

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "llm_recorder_otlp_dropped",
            "Spans the OTLP export dropped: queue full (collector slow or away), a failed"
            " send, or still queued at shutdown. Traffic and records are unaffected.",
            value=self._export.dropped,
        )
        yield CounterMetricFamily(
            "llm_recorder_otlp_exported",
            "Spans the OTLP collector accepted.",
            value=self._export.exported,
        )


def register(registry: CollectorRegistry, export: SpanExport) -> None:
    """Serve ``export``'s counters from ``registry``."""
    registry.register(_OtlpCollector(export))
