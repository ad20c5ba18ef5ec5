"""Serve ``/metrics`` from a daemon thread (loopback by default).

A scrape is answered on the server's own threads, never on mitmproxy's event
loop: collecting reads the registry under its locks and calls the health
callables, nothing else. Only ``/metrics`` (and ``/`` with a pointer to it) is
served, and ``/streams`` when a live view is given (the open and recent streams as
JSON, taken on the event loop by ``recorder.proxy.live``); anything else is a 404.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464

StartResponse = Callable[..., Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


def _family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family and numeric address to bind ``host`` (an IPv6 host too)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        streams: Callable[[], bytes] | None = None,
    ) -> None:
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO") or "/"
            if path == "/metrics":
                result: Iterable[bytes] = metrics_app(environ, start_response)
                return result
            if path == "/streams" and streams is not None:
                try:
                    body = streams()
                except Exception:  # the proxy is stopping, or its loop is busy
                    start_response(
                        "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")]
                    )
                    return [b"the proxy did not answer in time\n"]
                start_response("200 OK", [("Content-Type", "application/json")])
                return [body]
            if path == "/":
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"recorder: metrics at /metrics\n"]
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: metrics are at /metrics\n"]

        class Server(ThreadingWSGIServer):
            """ThreadingWSGIServer with the address family of ``host``."""

        Server.address_family, addr = _family(host, port)
        self._httpd = make_server(addr, port, app, Server, handler_class=_QuietHandler)
        self.host = host
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="recorder-metrics", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        """The ``/metrics`` URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (once)."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(
    registry: CollectorRegistry,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    streams: Callable[[], bytes] | None = None,
) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` (``port=0``: any free port),
    and ``streams()`` (JSON) at ``/streams`` if given.

    Raises ``OSError`` if the address cannot be bound.
    """
    return MetricsServer(registry, host, port, streams)
