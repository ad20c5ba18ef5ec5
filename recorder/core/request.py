"""What the recorder keeps of a request body: a few facts, never the prompt.

Also the error body of a non-2xx response (OpenAI ``{"error": {...}}``,
Anthropic ``{"type": "error", "error": {...}}``), read into the record's
error fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(slots=True)
class RequestFacts:
    """Facts of a request body; None where the body did not say."""

    model: str | None = None
    stream: bool | None = None
    include_usage: bool | None = None
    max_output_tokens: int | None = None
    # the service tier asked for: OpenAI's ``service_tier``; Anthropic's
    # ``speed: "fast"`` is the tier ``fast`` (its ``service_tier`` when not)
    service_tier: str | None = None
    parsed: bool = False


_MAX_KEYS = ("max_completion_tokens", "max_output_tokens", "max_tokens")


def read_request(body: bytes) -> RequestFacts:
    """Facts of a JSON request body (unparseable bodies give an empty result)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return RequestFacts()
    if not isinstance(obj, dict):
        return RequestFacts()
    facts = RequestFacts(parsed=True)
    model = obj.get("model")
    if isinstance(model, str) and model:
        facts.model = model
    stream = obj.get("stream")
    if isinstance(stream, bool):
        facts.stream = stream
    options = obj.get("stream_options")
    if isinstance(options, dict) and isinstance(options.get("include_usage"), bool):
        facts.include_usage = options["include_usage"]
    elif facts.stream:
        facts.include_usage = False
    tier = obj.get("service_tier")
    if isinstance(tier, str) and tier.strip():
        facts.service_tier = tier.strip().lower()[:32]
    speed = obj.get("speed")
    if isinstance(speed, str) and speed.strip().lower() == "fast":
        facts.service_tier = "fast"
    for key in _MAX_KEYS:
        value = obj.get(key)
        # a client may send anything here; only what a BIGINT column holds is kept
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
            facts.max_output_tokens = value
            break
    return facts


def read_error_body(body: bytes) -> tuple[str | None, str | None, str | None]:
    """``(type, code, message)`` of an error response body; Nones when unreadable."""
    try:
        obj: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body[:500].decode("utf-8", "replace").strip()
        return None, None, text or None
    if not isinstance(obj, dict):
        return None, None, None
    err = obj.get("error")
    if isinstance(err, dict):
        etype, code, message = err.get("type"), err.get("code"), err.get("message")
    elif isinstance(err, str):
        etype, code, message = None, None, err
    else:
        etype, code, message = obj.get("type"), obj.get("code"), obj.get("message")
        if etype == "error":
            etype = None
    return (
        None if etype is None else str(etype),
        None if code is None else str(code),
        None if message is None else str(message),
    )
