"""Serving ``/metrics`` as an addon of its own.

The composition root (``recorder.app``) builds it beside the recorder; under
``mitmdump -s``/``mitmweb -s`` it is one of the script's addons, and mitmproxy's
``done`` stops it. Its address comes from the option table
(``recorder_metrics_host``, ``recorder_metrics_port``; ``--metrics-host``,
``--metrics-port``): loopback, port 9464 by default; port 0 serves nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from recorder.metrics.server import MetricsServer, serve_metrics


class MetricsServing:
    """``/metrics`` (and ``/streams`` given a live view) of ``registry`` on
    ``host:port``: :meth:`start` binds it, :meth:`close` (or mitmproxy's ``done``)
    stops it."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        streams: Callable[[], bytes] | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.streams = streams
        self.server: MetricsServer | None = None

    @property
    def enabled(self) -> bool:
        """Whether anything is to be served (port 0: not)."""
        return self.port != 0

    def start(self) -> None:
        """Bind and serve (nothing with port 0). Raises ``OSError`` if the address
        cannot be bound."""
        if self.enabled and self.server is None:
            self.server = serve_metrics(self.registry, self.host, self.port, self.streams)

    @property
    def url(self) -> str:
        """The ``/metrics`` URL ("" when not served)."""
        return self.server.url if self.server is not None else ""

    @property
    def bound_port(self) -> int:
        """The port bound (0 when not served)."""
        return self.server.port if self.server is not None else 0

    def done(self) -> None:
        """mitmproxy's shutdown: stop serving."""
        self.close()

    def close(self) -> None:
        """Stop serving and release the port (once)."""
        if self.server is not None:
            self.server.close()
