"""Anthropic Messages.

Output is ``content_block_delta`` with ``text_delta``, ``input_json_delta``
(tool arguments, also a server tool's), ``thinking_delta``, ``compaction_delta``
(a context summary the model wrote); ``signature_delta``
and ``citations_delta`` are not output text. A ``tool_use`` /
``server_tool_use`` / ``mcp_tool_use`` block start is a tool call.

Usage: ``message_start`` carries exact input and cache counts and a
PROVISIONAL ``output_tokens``; ``message_delta``'s counts are cumulative and
overwrite (never add to) what came before, input and cache counts included
(they grow when server tools ran). A stream cut before ``message_delta`` thus
has exact input usage and no reported output. A duplicated ``message_start``
(a misbehaving gateway) changes nothing; a second one with another id (a
spliced retry) makes that message the one whose id and usage we keep.
``ping`` is an event, not a keepalive. ``event: error`` is an error event,
including a gateway's "Response stream interrupted, please retry".

Fast path: the ``content_block_delta`` events of a block differ only in their
text. The first one is parsed in full and kept as a byte template
(recorder.core.protocols.template); a later one that matches it says exactly
what a full parse would (that text, nothing else), so only the text is decoded.
"""

from __future__ import annotations

from typing import Any

import orjson

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.usage import from_anthropic

_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
# The content_block_delta types that carry output: their kind, and the key of the text.
_DELTAS = {
    "text_delta": (OutputKind.TEXT, "text"),
    "input_json_delta": (OutputKind.TOOL, "partial_json"),
    "thinking_delta": (OutputKind.REASONING, "thinking"),
    "compaction_delta": (OutputKind.TEXT, "content"),  # a summary the model wrote: billed
}
FAST_PATH = True  # tests turn it off to check that both paths agree


class AnthropicMessagesInterpreter(Interpreter):
    """Interpreter for ``/v1/messages``."""

    endpoint = "messages"
    provider = "anthropic"

    __slots__ = ("_usage",)

    def __init__(self) -> None:
        super().__init__(fast=FAST_PATH)
        self._usage: dict[str, Any] = {}

    def interpret(self, event: Event) -> int:
        obj = self.parse(event.data)
        if obj is None:
            if event.event == "message_stop":  # unreadable, but the event line says it
                self.obs.decide("completed")
            elif event.event == "error":
                self.obs.decide("error")
                self.obs.set_error("error", None, "unreadable error event")
            return 0
        typ = obj.get("type")
        if not isinstance(typ, str):
            typ = event.event
        if typ == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                return 0
            dtype = delta.get("type")
            found = _DELTAS.get(dtype) if type(dtype) is str else None
            if found is None:
                return 0
            kind, key = found
            chars = self.obs.add(kind, delta.get(key))
            self.obs.output_chars += chars
            if chars and self._learnable and obj.get("type") == typ:
                # the event's whole effect is its text (the type is its own, not
                # the event line's): later ones like it need no full parse
                self.learn_from(event, obj, ("delta", key), kind)
            return chars
        if typ == "content_block_start":
            block = obj.get("content_block")
            # (a type that is not a string, a list say, cannot be looked up in a set)
            if isinstance(block, dict) and _is_tool_block(block.get("type")):
                self.obs.tool_calls += 1
        elif typ == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.obs.finish_reason = str(delta["stop_reason"])
            self._merge_usage(obj.get("usage"), final=True)
        elif typ == "message_start":
            self._start(obj.get("message"))
        elif typ == "message_stop":
            self.obs.decide("completed")
        elif typ == "error":
            self.obs.decide("error")
            err = obj.get("error")
            if not isinstance(err, dict):
                err = obj
            self.obs.set_error(err.get("type") or "error", err.get("code"), err.get("message"))
        return 0

    def read_body(self, body: bytes) -> int:
        obj = self.parse(body)
        if obj is None:
            return 0
        if obj.get("type") == "error":
            self.handle(Event("error", body, None, None))
            return 0
        self._start(obj)
        chars = 0
        content = obj.get("content")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                btype = block.get("type")
                if _is_tool_block(btype):
                    self.obs.tool_calls += 1
                    chars += self.obs.add_tool(_compact_json(block.get("input")))
                chars += self.obs.add_text(block.get("text"))
                chars += self.obs.add_reasoning(block.get("thinking"))
        self.obs.output_chars += chars
        if obj.get("stop_reason"):
            self.obs.finish_reason = str(obj["stop_reason"])
        self._merge_usage(obj.get("usage"), final=True)
        self.obs.decide("completed")
        return chars

    def _start(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        obs = self.obs
        mid = message.get("id")
        if obs.response_id is not None and (not mid or str(mid) == obs.response_id):
            # a duplicated message_start (a misbehaving gateway) changes nothing, even
            # after message_delta: its provisional counts must not undo the final ones
            return
        if mid:
            if obs.response_id is not None:
                # a spliced retry: the new message's usage replaces the old one
                self._usage = {}
                obs.output_final = False
            obs.response_id = str(mid)
        model = message.get("model")
        if model and (obs.response_model is None or mid):
            obs.response_model = str(model)
        self._merge_usage(message.get("usage"), final=False)

    def _merge_usage(self, usage: Any, *, final: bool) -> None:
        if not isinstance(usage, dict):
            return
        for key, value in usage.items():
            if value is not None:
                self._usage[key] = value
        if final:
            self.obs.output_final = True
        self.obs.raw_usage = dict(self._usage)
        self.obs.usage = from_anthropic(self._usage, output_final=self.obs.output_final)
        tier = self._usage.get("service_tier")
        if isinstance(tier, str) and tier:
            self.obs.service_tier = tier
        # fast mode is reported apart from the tier (usage.speed: standard | fast)
        # and billed at its own rate: it is the tier that prices the request
        speed = self._usage.get("speed")
        if speed == "fast":
            base = self.obs.service_tier
            self.obs.service_tier = "fast" if base in (None, "standard", "fast") else f"{base}+fast"
        tools = self._usage.get("server_tool_use")
        if isinstance(tools, dict):  # cumulative, like the token counts
            self.obs.server_tools = {
                str(name).removesuffix("_requests"): count
                for name, count in tools.items()
                if isinstance(count, int) and not isinstance(count, bool) and count > 0
            } or None


def _is_tool_block(btype: Any) -> bool:
    return isinstance(btype, str) and btype in _TOOL_BLOCKS


def _compact_json(value: Any) -> str:
    """The tool input as the stream would have carried it (compact JSON)."""
    if not value:
        return ""  # an empty input streams as no argument characters at all
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return ""
