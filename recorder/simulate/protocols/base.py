"""What the three protocols share: the events with their ground truth, usage, the
providers' error objects, and the base of the per-protocol builders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt

INTERRUPTED_MESSAGE = "Response stream interrupted, please retry"

OPENAI_ERRORS: dict[str, tuple[str, str]] = {
    "server_error": (
        "server_error",
        "The server had an error while processing your request. Sorry about that!",
    ),
    "rate_limit_exceeded": ("requests", "Rate limit reached for requests. Please try again in 1s."),
    "insufficient_quota": (
        "insufficient_quota",
        "You exceeded your current quota, please check your plan and billing details.",
    ),
    "invalid_prompt": (
        "invalid_request_error",
        "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
    ),
    "context_length_exceeded": (
        "invalid_request_error",
        "This model's maximum context length is 128000 tokens.",
    ),
    "invalid_api_key": ("invalid_request_error", "Incorrect API key provided."),
    "model_not_found": ("invalid_request_error", "The model does not exist."),
    "stream_interrupted": ("api_error", INTERRUPTED_MESSAGE),
}
ANTHROPIC_ERRORS: dict[str, str] = {
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
    "rate_limit_error": "This request would exceed the rate limit for your organization.",
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "The requested resource could not be found.",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "billing_error": "Your credit balance is too low to access the Anthropic API.",
}
OPENAI_STATUS_CODES: dict[int, str] = {
    400: "invalid_prompt",
    401: "invalid_api_key",
    404: "model_not_found",
    429: "rate_limit_exceeded",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}
ANTHROPIC_STATUS_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


BEDROCK_STATUS_TYPES: dict[int, str] = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


@dataclass(slots=True)
class SimUsage:
    """Usage as the simulator reports it, normalised like the recorder's record.

    ``input_tokens`` is ALL prompt tokens (Anthropic's three fields summed),
    ``output_tokens`` ALL output tokens (reasoning included). ``None``: the
    wire did not carry that figure (Anthropic's provisional output count
    included).
    """

    input_tokens: int
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None

    def to_dict(self) -> dict[str, int | None]:
        """The JSON shape."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }


@dataclass(slots=True)
class SimEvent:
    """One SSE event (or a whole JSON body) and what it carries."""

    name: str | None
    obj: dict[str, Any] | None = None
    raw: bytes | None = None
    output: str = ""
    tokens: int = 0
    tool_calls: int = 0
    finish_reason: str | None = None
    usage: SimUsage | None = None
    terminal: str | None = None  # completed | incomplete | error
    error: tuple[str | None, str | None, str | None] | None = None
    # Google's wire: written as it is (bare JSON, or an element of a JSON array
    # between its prefix and suffix), not as an SSE event
    bare: bool = False
    prefix: bytes = b""
    suffix: bytes = b""

    def data(self) -> bytes:
        """The ``data:`` payload (or the JSON body)."""
        if self.raw is not None:
            return self.raw
        return orjson.dumps(self.obj)

    def encode(self, line_end: bytes) -> bytes:
        """The event as SSE text, ending with a blank line (bare: as it is)."""
        if self.bare:
            return self.prefix + self.data() + self.suffix + (b"" if self.prefix else line_end)
        out = b""
        if self.name is not None:
            out = b"event: " + self.name.encode() + line_end
        return out + b"data: " + self.data() + line_end + line_end


@dataclass(slots=True)
class Reply:
    """A planned response: the clean stream and the clean JSON body."""

    events: list[SimEvent]
    body: SimEvent
    response_id: str
    finish_reason: str
    usage: SimUsage
    extra: dict[str, Any] = field(default_factory=dict)


def _usage(p: Prompt, c: Content, faults: Faults) -> SimUsage:
    anthropic = p.endpoint in ("messages", "invoke_model")
    return SimUsage(
        input_tokens=c.input_tokens,
        output_tokens=c.output_tokens,
        cache_read_tokens=c.cache_read,
        cache_write_tokens=c.cache_write if (anthropic or c.cache_write) else None,
        reasoning_tokens=((c.reasoning_tokens or None) if anthropic else c.reasoning_tokens),
    )


def openai_error(code: str | None, default: str) -> dict[str, Any]:
    """An OpenAI ``error`` object for ``code``."""
    code = code or default
    etype, message = OPENAI_ERRORS.get(code, (code, f"Simulated error: {code}"))
    return {"message": message, "type": etype, "param": None, "code": code}


def anthropic_error(etype: str | None, default: str) -> dict[str, Any]:
    """An Anthropic ``error`` object for ``etype``."""
    etype = etype or default
    return {"type": etype, "message": ANTHROPIC_ERRORS.get(etype, f"Simulated error: {etype}")}


# code, status, message of Google's errors (google.rpc.Status in JSON)
GOOGLE_ERRORS: dict[str, tuple[int, str, str]] = {
    "UNAVAILABLE": (503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
    "INTERNAL": (500, "INTERNAL", "An internal error has occurred."),
    "RESOURCE_EXHAUSTED": (429, "RESOURCE_EXHAUSTED", "Resource has been exhausted."),
    "INVALID_ARGUMENT": (400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
    "PERMISSION_DENIED": (403, "PERMISSION_DENIED", "Permission denied."),
    "NOT_FOUND": (404, "NOT_FOUND", "Requested entity was not found."),
    "UNAUTHENTICATED": (401, "UNAUTHENTICATED", "API key not valid. Please pass a valid API key."),
}
GOOGLE_STATUS: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def google_error(status: str | None, default: str) -> dict[str, Any]:
    """A Google ``error`` object for ``status`` (an unknown one keeps its name)."""
    status = status or default
    code, name, message = GOOGLE_ERRORS.get(status, (500, status, f"Simulated error: {status}"))
    return {"code": code, "message": message, "status": name}


def http_error_body(
    endpoint: str, status: int, code: str | None, request_id: str
) -> tuple[dict[str, Any], tuple[str | None, str | None, str | None]]:
    """The provider's JSON error body for an HTTP error status, and its error fields."""
    if endpoint in ("converse", "invoke_model"):  # Amazon Bedrock: {"message": ...}
        etype = BEDROCK_STATUS_TYPES.get(status, "InternalServerException")
        message = code or f"Simulated {etype}"
        return {"message": message}, (None, None, message)
    if endpoint == "messages":
        err = anthropic_error(code, ANTHROPIC_STATUS_TYPES.get(status, "api_error"))
        body = {"type": "error", "error": err, "request_id": request_id}
        return body, (err["type"], None, err["message"])
    if endpoint in ("generate_content", "interactions"):
        gerr = google_error(code, GOOGLE_STATUS.get(status, "INTERNAL"))
        gerr["code"] = status
        return {"error": gerr}, (gerr["status"], str(status), gerr["message"])
    default = OPENAI_STATUS_CODES.get(status, "server_error" if status >= 500 else "invalid_prompt")
    err = openai_error(code, default)
    if status >= 500 and code is None:
        err["code"] = None
    return {"error": err}, (err["type"], err["code"], err["message"])


class Builder:
    """Base: one instance per request, builds the stream, the body, the errors."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        self.p = p
        self.c = c
        self.ids = ids
        self.faults = faults
        self.usage = _usage(p, c, faults)

    def reply(self) -> Reply:
        """The clean stream and body."""
        raise NotImplementedError

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        """The events that report an error after status 200."""
        raise NotImplementedError

    def finalize(self, events: list[SimEvent]) -> None:
        """Fix up what depends on the final order (sequence numbers)."""
