"""Prometheus metrics: the exporter (built on an injected registry) and its HTTP server."""

from recorder.metrics.collectors import DEFAULT_MAX_MODEL_LABELS, HEALTH_METRICS, ModelLabels
from recorder.metrics.exporter import Metrics
from recorder.metrics.server import DEFAULT_HOST, DEFAULT_PORT, MetricsServer, serve_metrics

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_MODEL_LABELS",
    "DEFAULT_PORT",
    "HEALTH_METRICS",
    "Metrics",
    "MetricsServer",
    "ModelLabels",
    "serve_metrics",
]
