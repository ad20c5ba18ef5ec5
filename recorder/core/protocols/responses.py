"""OpenAI Responses.

Events are ``event: <type>`` + ``data: <json>`` whose ``type`` repeats it; we
trust the JSON's ``type`` and fall back to the event line. Output is any
``response.*.delta`` carrying a string ``delta`` (text, refusal, reasoning,
function/custom/MCP tool arguments, code, shell commands, patches), except the
few that carry something other than model output (a shell's own output, base64
audio). Unknown types are tolerated, so a new kind of output delta counts
without a code change. Structure events (``output_item.added``,
``content_part.*``, ``*.done``) are not output; an added ``*_call`` item is a
tool call. Terminal: ``response.completed`` / ``response.incomplete`` /
``response.failed``; the top-level ``error`` event is an error, its fields
either nested under ``"error"`` (the wire) or at the top (the API reference).
``data: [DONE]`` is not documented here; it is tolerated and means nothing.
"""

from __future__ import annotations

from typing import Any

from recorder.core.protocols.base import Interpreter, text_len
from recorder.core.sse import Event
from recorder.core.usage import from_openai_responses

_NOT_OUTPUT = frozenset(
    {
        "response.shell_call_output_content.delta",  # what the tool printed, not the model
        "response.audio.delta",  # base64 audio bytes: not characters of output
    }
)
_STARTED = frozenset({"response.created", "response.in_progress", "response.queued"})
_UNREADABLE_TERMINAL = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "error",
    "error": "error",
}


class ResponsesInterpreter(Interpreter):
    """Interpreter for ``/v1/responses``."""

    endpoint = "responses"
    provider = "openai"

    __slots__ = ()

    def handle(self, event: Event) -> int:
        data = event.data
        if data == b"[DONE]":
            return 0
        obj = self.parse(data)
        if obj is None:
            outcome = _UNREADABLE_TERMINAL.get(event.event)
            if outcome is not None:  # the event line still says what ended the stream
                self.obs.decide(outcome)
                if outcome == "error":
                    self.obs.set_error(event.event, None, "unreadable error event")
            return 0
        typ = obj.get("type")
        if not isinstance(typ, str):
            typ = event.event
        if typ.endswith(".delta"):
            if typ in _NOT_OUTPUT:
                return 0
            chars = text_len(obj.get("delta"))
            self.obs.output_chars += chars
            return chars
        if typ == "response.output_item.added":
            item = obj.get("item")
            if isinstance(item, dict) and _is_call(item.get("type")):
                self.obs.tool_calls += 1
        elif typ in _STARTED:
            self._response(obj.get("response"))
        elif typ == "response.completed":
            self.obs.decide("completed")
            self._response(obj.get("response"), final=True)
        elif typ == "response.incomplete":
            self.obs.decide("incomplete")
            self._response(obj.get("response"), final=True)
        elif typ == "response.failed":
            self.obs.decide("error")
            self._response(obj.get("response"), final=True)
        elif typ == "error":
            self.obs.decide("error")
            nested = obj.get("error")
            err = nested if isinstance(nested, dict) else obj
            self.obs.set_error(err.get("type") or "error", err.get("code"), err.get("message"))
        return 0

    def read_body(self, body: bytes) -> int:
        obj = self.parse(body)
        if obj is None:
            return 0
        status = obj.get("status")
        chars = 0
        output = obj.get("output")
        if isinstance(output, list):
            for item in output:
                if isinstance(item, dict):
                    chars += self._item_chars(item)
        self.obs.output_chars += chars
        if obj.get("error"):
            self.obs.decide("error")
        elif status == "incomplete":
            self.obs.decide("incomplete")
        elif status == "failed":
            self.obs.decide("error")
        else:
            self.obs.decide("completed")
        self._response(obj, final=True)
        return chars

    def _item_chars(self, item: dict[str, Any]) -> int:
        if _is_call(item.get("type")):
            self.obs.tool_calls += 1
        chars = text_len(item.get("arguments")) + text_len(item.get("input"))
        for key in ("content", "summary"):
            parts = item.get(key)
            if isinstance(parts, list):
                for part in parts:
                    if isinstance(part, dict):
                        chars += text_len(part.get("text")) + text_len(part.get("refusal"))
        return chars

    def _response(self, resp: Any, *, final: bool = False) -> None:
        if not isinstance(resp, dict):
            return
        obs = self.obs
        # The terminal event's response object is the final word on id and model,
        # as it is on usage: some gateways (GitHub Copilot) rotate the id on every
        # event, and a body holding several responses keeps the last one whole.
        rid = resp.get("id")
        if rid and (final or obs.response_id is None):
            obs.response_id = str(rid)
        model = resp.get("model")
        if model and (final or obs.response_model is None):
            obs.response_model = str(model)
        if not final:
            return
        usage = resp.get("usage")
        if isinstance(usage, dict):
            obs.usage = from_openai_responses(usage)
            obs.raw_usage = usage
            obs.output_final = True
        status = resp.get("status")
        details = resp.get("incomplete_details")
        if isinstance(details, dict) and details.get("reason"):
            obs.finish_reason = obs.finish_reason or str(details["reason"])
        elif isinstance(status, str) and status != "failed" and obs.finish_reason is None:
            obs.finish_reason = status
        error = resp.get("error")
        if isinstance(error, dict):
            obs.set_error(
                error.get("type") or "response.failed", error.get("code"), error.get("message")
            )


def _is_call(item_type: Any) -> bool:
    return isinstance(item_type, str) and item_type.endswith("_call")
