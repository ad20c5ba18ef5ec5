"""`recorder reconcile --fetch openai|anthropic`: the usage and cost APIs, paged through.

With an admin key from the environment (``OPENAI_ADMIN_KEY`` /
``ANTHROPIC_ADMIN_KEY``), asks the provider's usage endpoint and cost endpoint
for daily buckets of the period, grouped as reconciliation groups (model, key,
project or workspace, batch or service tier), following ``next_page`` until
``has_more`` is false. Each page's text is handed on as if it had been saved to
a file (:func:`recorder.billing.usage_api.read_pages` reads it), so fetching and
reading saved pages are one code path.

The key goes only to the base URL, and only over HTTPS unless the base URL is
on this machine (a local test server, or a forwarding proxy the user runs); it is
never printed: an error the provider sends back is scrubbed of it. Paging stops
at :data:`MAX_PAGES` or at a cursor seen before (a server that loops).

Written from the providers' API references; it was tested against recorded
responses served locally, not against the live APIs.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from ipaddress import ip_address

from recorder.billing.export_model import ExportError
from recorder.core.keys import scrub_key

MAX_PAGES = 1000
TIMEOUT_S = 60.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error, never followed: urllib would send the admin key's
    headers on to wherever the answer points."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint to page through: its path and its fixed query."""

    path: str
    query: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Provider:
    """How to ask one provider."""

    name: str
    base_url: str
    key_env: str
    endpoints: tuple[Endpoint, ...]
    time_params: Callable[[datetime, datetime], list[tuple[str, str]]]
    headers: Callable[[str], dict[str, str]]


def _unix(since: datetime, until: datetime) -> list[tuple[str, str]]:
    return [("start_time", str(int(since.timestamp()))), ("end_time", str(int(until.timestamp())))]


def _rfc3339(since: datetime, until: datetime) -> list[tuple[str, str]]:
    def fmt(when: datetime) -> str:
        return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    return [("starting_at", fmt(since)), ("ending_at", fmt(until))]


PROVIDERS = {
    "openai": Provider(
        "openai",
        "https://api.openai.com",
        "OPENAI_ADMIN_KEY",
        (
            Endpoint(
                "/v1/organization/usage/completions",
                (
                    ("bucket_width", "1d"),
                    ("limit", "31"),
                    *(
                        ("group_by", g)
                        for g in ("model", "api_key_id", "project_id", "batch", "service_tier")
                    ),
                ),
            ),
            Endpoint(
                "/v1/organization/costs",
                (
                    ("bucket_width", "1d"),
                    ("limit", "31"),
                    ("group_by", "line_item"),
                    ("group_by", "project_id"),
                ),
            ),
        ),
        _unix,
        lambda key: {"Authorization": f"Bearer {key}"},
    ),
    "anthropic": Provider(
        "anthropic",
        "https://api.anthropic.com",
        "ANTHROPIC_ADMIN_KEY",
        (
            Endpoint(
                "/v1/organizations/usage_report/messages",
                (
                    ("bucket_width", "1d"),
                    ("limit", "31"),
                    *(
                        ("group_by[]", g)
                        for g in (
                            "api_key_id",
                            "workspace_id",
                            "model",
                            "service_tier",
                            "context_window",
                        )
                    ),
                ),
            ),
            Endpoint(
                "/v1/organizations/cost_report",
                (
                    ("bucket_width", "1d"),
                    ("limit", "31"),
                    ("group_by[]", "workspace_id"),
                    ("group_by[]", "description"),
                ),
            ),
        ),
        _rfc3339,
        lambda key: {"x-api-key": key, "anthropic-version": "2023-06-01"},
    ),
}


def check_base_url(url: str) -> str:
    """The base URL without a trailing slash; refused unless HTTPS or on this machine."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ExportError(f"--base-url: not an http(s) URL: {url!r}")
    if parts.scheme == "http":
        try:
            local = host == "localhost" or ip_address(host).is_loopback
        except ValueError:
            local = False
        if not local:
            raise ExportError(
                f"--base-url: {url} would carry the admin key unencrypted: use https "
                "(plain http only to this machine)"
            )
    return url.rstrip("/")


Getter = Callable[[str, dict[str, str]], str]


def http_get(url: str, headers: dict[str, str]) -> str:
    """GET ``url``, the body as text; an HTTP error as :class:`ExportError` (without the key)."""
    request = urllib.request.Request(url, headers={**headers, "Accept": "application/json"})
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            body: bytes = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read(2000).decode("utf-8", "replace")
        raise ExportError(f"{url}: HTTP {e.code}: {detail.strip() or e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ExportError(f"{url}: {getattr(e, 'reason', None) or e}") from None
    return body.decode("utf-8", "replace")


def fetch(
    provider: str,
    since: datetime,
    until: datetime,
    *,
    admin_key: str,
    base_url: str | None = None,
    get: Getter = http_get,
) -> list[tuple[str, str]]:
    """Every page of the provider's usage and cost endpoints for [since, until), as
    (name, text): the name is the page's URL without the key (there is none in it)."""
    spec = PROVIDERS[provider]
    base = check_base_url(base_url or spec.base_url)
    headers = spec.headers(admin_key)
    pages: list[tuple[str, str]] = []
    for endpoint in spec.endpoints:
        query = [*spec.time_params(since, until), *endpoint.query]
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = query + ([("page", cursor)] if cursor else [])
            url = f"{base}{endpoint.path}?{urllib.parse.urlencode(params)}"
            try:
                text = get(url, headers)
            except ExportError as e:
                raise ExportError(scrub_key(str(e), admin_key) or "") from None
            pages.append((url, text))
            cursor = _next_cursor(text, url)
            if cursor is None:
                break
            if cursor in seen:
                raise ExportError(f"{url}: next_page {cursor!r} was given before: the server loops")
            seen.add(cursor)
        else:
            raise ExportError(f"{base}{endpoint.path}: more than {MAX_PAGES} pages")
    return pages


def _next_cursor(text: str, url: str) -> str | None:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ExportError(f"{url}: not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ExportError(f"{url}: not a page object")
    cursor = doc.get("next_page")
    return str(cursor) if doc.get("has_more") is True and cursor else None


def admin_key(provider: str, environ: Mapping[str, str] | None = None) -> str:
    """The provider's admin key from the environment, or a one-line error naming the variable."""
    env = os.environ if environ is None else environ
    name = PROVIDERS[provider].key_env
    key = (env.get(name) or "").strip()
    if not key:
        raise ExportError(f"--fetch {provider}: set {name} to an admin API key")
    return key


def names() -> Sequence[str]:
    """The providers --fetch knows."""
    return tuple(PROVIDERS)
