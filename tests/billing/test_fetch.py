"""`--fetch`: the providers' usage and cost endpoints paged through, against their
recorded responses served locally (not the live APIs): the pages read as the saved
files do, the admin key goes where it should and nowhere else, a looping server and
an unencrypted remote base URL are refused."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recorder.billing import fetch
from recorder.billing.export_model import ExportError
from recorder.billing.exports import read_exports
from tests.kit.recorded_api import EXPORTS, recorded_api

SINCE = datetime(2026, 4, 1, tzinfo=UTC)
UNTIL = datetime(2026, 4, 3, tzinfo=UTC)
KEY = "sk-admin-" + "k" * 40


def test_openai_pages_are_followed_and_read_as_the_saved_files() -> None:
    with recorded_api() as api:
        pages = fetch.fetch("openai", SINCE, UNTIL, admin_key=KEY, base_url=api.base_url)
    assert [a.path for a in api.asked] == [
        "/v1/organization/usage/completions",
        "/v1/organization/usage/completions",
        "/v1/organization/costs",
    ]
    first, second, costs = api.asked
    assert all(a.headers["authorization"] == f"Bearer {KEY}" for a in api.asked)
    assert ("start_time", "1775001600") in first.query and ("end_time", "1775174400") in first.query
    assert {v for k, v in first.query if k == "group_by"} == {
        "model",
        "api_key_id",
        "project_id",
        "batch",
        "service_tier",
    }
    assert "page" not in dict(first.query) and dict(second.query)["page"] == "page_AAAAAGnMnIA="
    assert {v for k, v in costs.query if k == "group_by"} == {"line_item", "project_id"}
    assert all(KEY not in name for name, _ in pages)

    fetched = read_exports([], lambda p: "", pages)

    saved = read_exports(
        [str(EXPORTS / "openai_usage_pages"), str(EXPORTS / "openai_costs.json")],
        lambda p: Path(p).read_text(encoding="utf-8"),
    )
    assert fetched.format == saved.format == "openai-usage+openai-costs"
    assert [(r.day, r.model, r.key, r.figures, r.batch) for r in fetched.rows] == [
        (r.day, r.model, r.key, r.figures, r.batch) for r in saved.rows
    ]


def test_anthropic_is_asked_with_its_headers_and_time_format() -> None:
    with recorded_api() as api:
        pages = fetch.fetch("anthropic", SINCE, UNTIL, admin_key=KEY, base_url=api.base_url)
    usage, cost = api.asked
    assert usage.headers["x-api-key"] == KEY and usage.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in usage.headers
    assert dict(usage.query)["starting_at"] == "2026-04-01T00:00:00Z"
    assert dict(usage.query)["ending_at"] == "2026-04-03T00:00:00Z"
    assert "service_tier" in {v for k, v in usage.query if k == "group_by[]"}
    assert cost.path == "/v1/organizations/cost_report"
    export = read_exports([], lambda p: "", pages)
    assert export.format == "anthropic-usage+anthropic-cost"
    assert [r.batch for r in export.rows] == [False, True, False, False, True]


def test_an_error_is_one_line_without_the_key() -> None:
    with recorded_api() as api:
        api.override = (401, f'{{"error": {{"message": "invalid x-api-key {KEY}"}}}}')
        with pytest.raises(ExportError) as e:
            fetch.fetch("anthropic", SINCE, UNTIL, admin_key=KEY, base_url=api.base_url)
    assert "HTTP 401" in str(e.value) and KEY not in str(e.value)


def test_a_server_that_loops_is_left() -> None:
    with recorded_api() as api:
        api.override = (200, '{"data": [], "has_more": true, "next_page": "same"}')
        with pytest.raises(ExportError, match="given before: the server loops"):
            fetch.fetch("openai", SINCE, UNTIL, admin_key=KEY, base_url=api.base_url)
    assert len(api.asked) == 2


@pytest.mark.parametrize(
    "url", ["http://api.example.com", "http://10.0.0.1:8080", "ftp://127.0.0.1", "nonsense"]
)
def test_the_key_never_travels_unencrypted_off_this_machine(url: str) -> None:
    def never(url: str, headers: dict[str, str]) -> str:
        raise AssertionError("asked")

    with pytest.raises(ExportError, match="--base-url"):
        fetch.fetch("openai", SINCE, UNTIL, admin_key=KEY, base_url=url, get=never)


def test_the_admin_key_comes_from_the_environment() -> None:
    assert fetch.admin_key("openai", {"OPENAI_ADMIN_KEY": " k "}) == "k"
    with pytest.raises(ExportError, match="set ANTHROPIC_ADMIN_KEY"):
        fetch.admin_key("anthropic", {})


def test_a_redirect_is_refused_and_the_key_goes_nowhere_else() -> None:
    """A base URL that answers 3xx never takes the admin key elsewhere: urllib's
    own redirect handling would send every header on to the new address."""
    seen: list[dict[str, str]] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)

    class Redirecting(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{other.server_port}/steal")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    first = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (first, other)]
    for t in threads:
        t.start()
    try:
        with pytest.raises(ExportError, match="HTTP 302"):
            fetch.http_get(f"http://127.0.0.1:{first.server_port}/x", {"Authorization": "Bearer k"})
    finally:
        for s in (first, other):
            s.shutdown()
            s.server_close()
    assert seen == []
