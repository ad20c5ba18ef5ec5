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

Fast path: the output deltas of an item differ only in their text, their
``sequence_number`` and their ``obfuscation`` padding, none of which but the
text is read here. The first one is parsed in full and kept as a byte template
with those three holes (recorder.core.protocols.template); a later one that
matches it says exactly what a full parse would (that text, nothing else), so
only the text is decoded.
"""

from __future__ import annotations

from typing import Any

import orjson

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.protocols.template import HoleKind
from recorder.core.record import Outcome
from recorder.core.usage import from_openai_responses

_NOT_OUTPUT = frozenset(
    {
        "response.shell_call_output_content.delta",  # what the tool printed, not the model
        "response.audio.delta",  # base64 audio bytes: not characters of output
    }
)
_STARTED = frozenset({"response.created", "response.in_progress", "response.queued"})
# Output deltas by kind, for estimation (recorder.core.estimate). A reasoning
# SUMMARY is written by a summariser and is not billed as output tokens; other
# unknown ``*.delta`` types are classed by their name (see _delta_kind).
_DELTA_KINDS = {
    "response.output_text.delta": OutputKind.TEXT,
    "response.refusal.delta": OutputKind.TEXT,
    "response.audio.transcript.delta": OutputKind.TEXT,
    "response.reasoning_text.delta": OutputKind.REASONING,
    "response.reasoning_summary_text.delta": OutputKind.SUMMARY,
    "response.function_call_arguments.delta": OutputKind.TOOL,
    "response.custom_tool_call_input.delta": OutputKind.TOOL,
    "response.mcp_call_arguments.delta": OutputKind.TOOL,
    "response.code_interpreter_call_code.delta": OutputKind.TOOL,
    "response.shell_call_command.delta": OutputKind.TOOL,
    "response.apply_patch_call_operation_diff.delta": OutputKind.TOOL,
}
# Items whose arguments the model wrote but the stream may send only whole, in
# ``response.output_item.done`` (a local shell's action, an MCP approval
# request, a program): counted for estimation when no delta carried them
# (Observations.unstreamed_chars). Not the provider-run tools (their queries
# and results are not billed like output in the captures), nor tool output.
_WHOLE_ARGUMENTS = ("arguments", "action", "code", "input")
_NOT_MODEL_WRITTEN = frozenset(
    {
        "image_generation_call",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "tool_search_call",
    }
)
_OTHER_WRITTEN = frozenset({"mcp_approval_request", "program"})
# Output items run by the provider itself, billed per call beyond their tokens.
_SERVER_TOOLS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation",
    "mcp_call": "mcp",
}
# Fields of an output delta that change from one delta to the next and that
# nothing here reads: holes of the fast path's template, like the text.
_IGNORED = (("obfuscation", HoleKind.STRING), ("sequence_number", HoleKind.INT))
FAST_PATH = True  # tests turn it off to check that both paths agree
# The terminal events, by their type (the outcome they decide).
_TERMINAL: dict[str, Outcome] = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "error",
}
_UNREADABLE_TERMINAL: dict[str, Outcome] = {**_TERMINAL, "error": "error"}


class ResponsesInterpreter(Interpreter):
    """Interpreter for ``/v1/responses``."""

    endpoint = "responses"
    provider = "openai"

    __slots__ = ("_tool_mark",)

    def __init__(self) -> None:
        super().__init__(fast=FAST_PATH)
        self._tool_mark = 0  # tool_chars when the current output item was added

    def interpret(self, event: Event) -> int:
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
            kind = _DELTA_KINDS.get(typ)
            if kind is None:
                kind = _delta_kind(typ)
            obs = self.obs
            chars = obs.add(kind, obj.get("delta"))
            obs.output_chars += chars
            if chars and self._learnable and obj.get("type") == typ:
                # the event's whole effect is its text (the type is its own, not
                # the event line's): later ones like it need no full parse
                self.learn_from(event, obj, ("delta",), kind, _IGNORED)
            return chars
        if typ == "response.output_item.added":
            self._tool_mark = self.obs.tool_chars
            item = obj.get("item")
            if isinstance(item, dict) and _is_call(item.get("type")):
                self.obs.tool_calls += 1
                server_tool = _SERVER_TOOLS.get(item["type"])
                if server_tool is not None:
                    self.obs.add_server_tool(server_tool)
        elif typ == "response.output_item.done":
            item = obj.get("item")
            if isinstance(item, dict) and self.obs.tool_chars == self._tool_mark:
                self._whole_arguments(item)
        elif typ in _STARTED:
            self._response(obj.get("response"))
        elif typ in _TERMINAL:
            self.obs.decide(_TERMINAL[typ])
            self._response(obj.get("response"), final=True)
        elif typ == "error":
            self.obs.error_event(obj)
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
        obs = self.obs
        itype = item.get("type")
        if isinstance(itype, str) and _is_call(itype):
            obs.tool_calls += 1
            server_tool = _SERVER_TOOLS.get(itype)
            if server_tool is not None:
                obs.add_server_tool(server_tool)
        chars = obs.add_tool(item.get("arguments")) + obs.add_tool(item.get("input"))
        add = obs.add_reasoning if itype == "reasoning" else obs.add_text
        parts = item.get("content")
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    chars += add(part.get("text")) + obs.add_text(part.get("refusal"))
        parts = item.get("summary")
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    chars += obs.add_summary(part.get("text")) + obs.add_text(part.get("refusal"))
        return chars

    def _whole_arguments(self, item: dict[str, Any]) -> None:
        itype = item.get("type")
        if not isinstance(itype, str) or itype in _NOT_MODEL_WRITTEN:
            return
        if not (itype.endswith("_call") or itype in _OTHER_WRITTEN):
            return
        for key in _WHOLE_ARGUMENTS:
            value = item.get(key)
            if not value:
                continue
            if isinstance(value, str):
                text = value
            else:
                try:
                    text = orjson.dumps(value).decode()
                except orjson.JSONEncodeError:  # nested deeper than orjson writes (255)
                    continue
            self.obs.add_unstreamed(text)

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
        tier = resp.get("service_tier")  # the request's ("auto") until the final word
        if isinstance(tier, str) and tier and (final or obs.service_tier is None):
            obs.service_tier = tier
        if not final:
            return
        usage = resp.get("usage")
        if isinstance(usage, dict):
            obs.report_usage(from_openai_responses(usage), usage)
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


def _delta_kind(typ: str) -> OutputKind:
    """The kind of an output delta type not in the table, by its name."""
    if "reasoning_summary" in typ:
        return OutputKind.SUMMARY
    if "reasoning" in typ:
        return OutputKind.REASONING
    if "text" in typ or "refusal" in typ or "transcript" in typ:
        return OutputKind.TEXT
    return OutputKind.TOOL  # arguments, inputs, code, commands, diffs
