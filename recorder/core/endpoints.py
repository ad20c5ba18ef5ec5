"""Which requests are tapped: the three endpoints, recognised by path suffix.

Suffixes rather than exact paths, because the same APIs are served under
prefixes (``/openai/v1/...``, gateways' ``/api/v1/...``) and Azure names its
deployments in the path (``/openai/deployments/<name>/chat/completions``).
Anthropic's suffix keeps its ``/v1``: a bare ``/messages`` would also catch
OpenAI's Assistants ``/threads/<id>/messages``.
"""

from __future__ import annotations

from urllib.parse import unquote

_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "chat.completions"),
    ("/v1/responses", "responses"),
    ("/openai/responses", "responses"),  # Azure OpenAI's v1 API
    ("/v1/messages", "messages"),
)


# Amazon Bedrock's runtime: /model/{modelId}/<action>; the model id may be an
# inference profile or a URL-encoded ARN (whose slashes are %2F)
_BEDROCK_ACTIONS = {
    "converse-stream": "converse",
    "converse": "converse",
    "invoke-with-response-stream": "invoke_model",
    "invoke": "invoke_model",
}


def bedrock_model(path: str) -> str | None:
    """The model id of a Bedrock runtime path, decoded (``/model/us.anthropic.claude-
    sonnet-4-5-20250929-v1%3A0/converse-stream`` names ``us.anthropic.claude-sonnet-
    4-5-20250929-v1:0``); None when ``path`` is not one."""
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    head, _, action = path.rpartition("/")
    if action not in _BEDROCK_ACTIONS:
        return None
    _, found, model = head.partition("/model/")
    if not found:
        return None
    return unquote(model) or None


def endpoint_for(method: str, path: str) -> str | None:
    """The endpoint a request targets, or None when it is not one we meter."""
    if method.upper() != "POST":
        return None
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    action = path.rpartition("/")[2]
    if action in _BEDROCK_ACTIONS and "/model/" in path:
        return _BEDROCK_ACTIONS[action]
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
