"""Which requests are tapped: the three endpoints, recognised by path suffix.

Suffixes rather than exact paths, because the same APIs are served under
prefixes (``/openai/v1/...``, gateways' ``/api/v1/...``) and Azure names its
deployments in the path (``/openai/deployments/<name>/chat/completions``).
Anthropic's suffix keeps its ``/v1``: a bare ``/messages`` would also catch
OpenAI's Assistants ``/threads/<id>/messages``.
"""

from __future__ import annotations

_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "chat.completions"),
    ("/v1/responses", "responses"),
    ("/openai/responses", "responses"),  # Azure OpenAI's v1 API
    ("/v1/messages", "messages"),
)


def endpoint_for(method: str, path: str) -> str | None:
    """The endpoint a request targets, or None when it is not one we meter."""
    if method.upper() != "POST":
        return None
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    for suffix, endpoint in _SUFFIXES:
        if path.endswith(suffix):
            return endpoint
    return None


# The endpoints served over a WebSocket (a GET that upgrades): the Responses API's
# WebSocket mode and the Realtime API.
_WEBSOCKET_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("/v1/responses", "responses"),
    ("/openai/responses", "responses"),
    ("/v1/realtime", "realtime"),
    ("/openai/realtime", "realtime"),  # Azure OpenAI's v1 API
)


def websocket_endpoint_for(path: str) -> str | None:
    """The endpoint a WebSocket connection (its upgrade request's path) serves, or
    None when it is not one we meter."""
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    for suffix, endpoint in _WEBSOCKET_SUFFIXES:
        if path.endswith(suffix):
            return endpoint
    return None
