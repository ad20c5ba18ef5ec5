"""Which requests are tapped: the three endpoints, recognised by path suffix.

Suffixes rather than exact paths, because the same APIs are served under
prefixes (``/openai/v1/...``, gateways' ``/api/v1/...``) and Azure names its
deployments in the path (``/openai/deployments/<name>/chat/completions``).
Anthropic's suffix keeps its ``/v1``: a bare ``/messages`` would also catch
OpenAI's Assistants ``/threads/<id>/messages``.

Google names the model and the method in the path's last segment
(``/v1beta/models/gemini-2.5-flash:streamGenerateContent``): Gemini's API and
Vertex AI's (``/v1/projects/P/locations/L/publishers/google/models/M:...``) are
the endpoint ``generate_content``, told apart as providers by that path; the
Interactions API (``/v1beta/interactions``) is ``interactions``; Anthropic's
models on Vertex (``.../publishers/anthropic/models/M:streamRawPredict``) speak
Messages and are ``messages`` with Vertex as the provider.
"""

from __future__ import annotations

import re
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


# Google's methods, the last segment's part after the colon
_GOOGLE_METHODS: dict[str, str] = {
    "streamGenerateContent": "generate_content",
    "generateContent": "generate_content",
}
_ANTHROPIC_ON_VERTEX = frozenset({"streamRawPredict", "rawPredict"})
_INTERACTIONS = ("/v1beta/interactions", "/v1/interactions")
# the model of a Google path: the segment after models/ (or tunedModels/), before the colon
_MODEL = re.compile(r"/(?:tuned)?[mM]odels/([^/:]+):[A-Za-z]+$")
_VERTEX = re.compile(r"/projects/[^/]+/locations/[^/]+/publishers/")

GEMINI = "gcp.gemini"
VERTEX_AI = "gcp.vertex_ai"


def _bare(path: str) -> str:
    return path.split("?", 1)[0].split("#", 1)[0].rstrip("/")


def endpoint_for(method: str, path: str) -> str | None:
    """The endpoint a request targets, or None when it is not one we meter."""
    if method.upper() != "POST":
        return None
    path = _bare(path)
    action = path.rpartition("/")[2]
    if action in _BEDROCK_ACTIONS and "/model/" in path:
        return _BEDROCK_ACTIONS[action]
    for suffix, endpoint in _SUFFIXES:
        if path.endswith(suffix):
            return endpoint
    head, colon, verb = path.rpartition(":")
    if colon and "/" not in verb:
        found = _GOOGLE_METHODS.get(verb)
        if found is not None and _MODEL.search(path):
            return found
        if verb in _ANTHROPIC_ON_VERTEX and "/publishers/anthropic/models/" in head:
            return "messages"
        return None
    if path.endswith(_INTERACTIONS):
        return "interactions"
    return None


def provider_for(endpoint: str, path: str) -> str | None:
    """The provider a request to ``endpoint`` at ``path`` goes to, where the path
    tells it (Vertex AI's project paths); None: the endpoint's own."""
    if endpoint in ("generate_content", "messages") and _VERTEX.search(_bare(path)):
        return VERTEX_AI
    return None


def model_in_path(path: str) -> str | None:
    """The model a Google path names (``/v1beta/models/M:streamGenerateContent``),
    or None; percent-escapes decoded."""
    found = _MODEL.search(_bare(path))
    if found is None:
        return None
    return unquote(found.group(1)) or None


def streams_by_path(path: str) -> bool:
    """Whether a Google path asks for a stream (``:streamGenerateContent``)."""
    return _bare(path).endswith(":streamGenerateContent")


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
