"""A local stand-in for the providers' admin APIs: serves the recorded responses of
tests/fixtures/usage_exports on 127.0.0.1 (a free port), and keeps what it was asked."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "usage_exports"

# path -> {page cursor (None: the first page) -> fixture file}
ROUTES: dict[str, dict[str | None, str]] = {
    "/v1/organization/usage/completions": {
        None: "openai_usage_pages/page-1.json",
        "page_AAAAAGnMnIA=": "openai_usage_pages/page-2.json",
    },
    "/v1/organization/costs": {None: "openai_costs.json"},
    "/v1/organizations/usage_report/messages": {None: "anthropic_usage_report.json"},
    "/v1/organizations/cost_report": {None: "anthropic_cost_report.json"},
}


@dataclass
class Asked:
    """One request the server answered: its path, query and headers."""

    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]


@dataclass
class RecordedApi:
    base_url: str
    asked: list[Asked] = field(default_factory=list)
    # a body to answer every request with instead, and its status
    override: tuple[int, str] | None = None


@contextmanager
def recorded_api() -> Iterator[RecordedApi]:
    api = RecordedApi("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qsl(parts.query)
            api.asked.append(
                Asked(parts.path, query, {k.lower(): v for k, v in self.headers.items()})
            )
            if api.override is not None:
                status, body = api.override
            else:
                pages = ROUTES.get(parts.path, {})
                name = pages.get(dict(query).get("page"))
                status, body = (
                    (200, (EXPORTS / name).read_text(encoding="utf-8"))
                    if name
                    else (404, '{"error": "not recorded"}')
                )
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
