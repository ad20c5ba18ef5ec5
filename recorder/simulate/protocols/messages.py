"""Anthropic Messages: `message_start` (exact input usage, provisional
`output_tokens: 1`), content blocks, a `ping`, a cumulative `message_delta`,
`message_stop`."""

from __future__ import annotations

from typing import Any

import orjson

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import (
    INTERRUPTED_MESSAGE,
    Builder,
    Reply,
    SimEvent,
    SimUsage,
    anthropic_error,
)


class MessagesBuilder(Builder):
    """Anthropic ``/v1/messages``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = "msg_01" + ids.b62("msg", 22)
        if c.truncated:
            self.finish = "max_tokens"
        elif c.tool_calls:
            self.finish = "tool_use"
        else:
            self.finish = "end_turn"
        self.base_input = c.input_tokens - c.cache_read - c.cache_write

    def _start_usage(self) -> dict[str, Any]:
        c = self.c
        return {
            "input_tokens": self.base_input,
            "cache_creation_input_tokens": c.cache_write,
            "cache_read_input_tokens": c.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": c.cache_write,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": 1,
            "service_tier": "standard",
        }

    def _final_usage(self) -> dict[str, Any]:
        c = self.c
        usage: dict[str, Any] = {
            "input_tokens": self.base_input,
            "cache_creation_input_tokens": c.cache_write,
            "cache_read_input_tokens": c.cache_read,
            "output_tokens": c.output_tokens,
        }
        if c.reasoning_tokens:
            usage["output_tokens_details"] = {"thinking_tokens": c.reasoning_tokens}
        return usage

    def _message(
        self, content: list[dict[str, Any]], stop: str | None, usage: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.p.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def reply(self) -> Reply:
        c = self.c
        provisional = SimUsage(
            input_tokens=c.input_tokens,
            output_tokens=None,
            cache_read_tokens=c.cache_read,
            cache_write_tokens=c.cache_write,
            reasoning_tokens=None,
        )
        start = {"type": "message_start", "message": self._message([], None, self._start_usage())}
        events = [SimEvent("message_start", start, usage=provisional)]
        if self.faults.dup_start:
            events.append(SimEvent("message_start", start, usage=provisional))
        ping = SimEvent("ping", {"type": "ping"})
        index = 0

        def block_start(block: dict[str, Any], tool: bool = False) -> None:
            obj = {"type": "content_block_start", "index": index, "content_block": block}
            events.append(SimEvent("content_block_start", obj, tool_calls=1 if tool else 0))
            if index == 0:
                events.append(ping)

        def delta(d: dict[str, Any], output: str = "") -> None:
            obj = {"type": "content_block_delta", "index": index, "delta": d}
            events.append(
                SimEvent("content_block_delta", obj, output=output, tokens=1 if output else 0)
            )

        def stop() -> None:
            obj = {"type": "content_block_stop", "index": index}
            events.append(SimEvent("content_block_stop", obj))

        if c.reasoning:
            block_start({"type": "thinking", "thinking": "", "signature": ""})
            for piece in c.reasoning:
                delta({"type": "thinking_delta", "thinking": piece}, piece)
            delta({"type": "thinking_delta", "thinking": ""})
            delta({"type": "signature_delta", "signature": c.signature})
            stop()
            index += 1
        if c.text:
            block_start({"type": "text", "text": ""})
            for piece in c.text:
                delta({"type": "text_delta", "text": piece}, piece)
            stop()
            index += 1
        for call in c.tool_calls:
            block_start(
                {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}, True
            )
            delta({"type": "input_json_delta", "partial_json": ""})
            for piece in call.pieces:
                delta({"type": "input_json_delta", "partial_json": piece}, piece)
            stop()
            index += 1
        if index == 0:
            events.append(ping)
        final_usage = self._final_usage()
        off = self.faults.usage == "off"
        message_delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": self.finish, "stop_sequence": None},
        }
        if not off:
            message_delta["usage"] = final_usage
        events.append(
            SimEvent(
                "message_delta",
                message_delta,
                finish_reason=self.finish,
                usage=None if off else self.usage,
            )
        )
        events.append(SimEvent("message_stop", {"type": "message_stop"}, terminal="completed"))
        return Reply(events, self._body(), self.id, self.finish, self.usage)

    def _body(self) -> SimEvent:
        c = self.c
        content: list[dict[str, Any]] = []
        chars = 0
        if c.reasoning:
            content.append(
                {"type": "thinking", "thinking": c.reasoning_text, "signature": c.signature}
            )
            chars += len(c.reasoning_text)
        if c.text:
            content.append({"type": "text", "text": c.answer})
            chars += len(c.answer)
        output = c.reasoning_text + c.answer
        for call in c.tool_calls:
            try:
                value = orjson.loads(call.arguments)
            except orjson.JSONDecodeError:
                value = {}
            tool_input = value if isinstance(value, dict) else {}
            content.append(
                {"type": "tool_use", "id": call.call_id, "name": call.name, "input": tool_input}
            )
            if tool_input:
                output += orjson.dumps(tool_input).decode()
        usage = {**self._start_usage(), "output_tokens": c.output_tokens}
        if c.reasoning_tokens:
            usage["output_tokens_details"] = {"thinking_tokens": c.reasoning_tokens}
        off = self.faults.usage == "off"
        obj = self._message(content, self.finish, usage)
        if off:
            del obj["usage"]
        return SimEvent(
            None,
            obj,
            output=output,
            tokens=c.output_tokens - c.hidden,
            tool_calls=len(c.tool_calls),
            finish_reason=self.finish,
            usage=None if off else self.usage,
            terminal="completed",
        )

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        if interrupt:
            err = {"type": "api_error", "message": INTERRUPTED_MESSAGE}
        else:
            err = anthropic_error(self.faults.error_code, "overloaded_error")
        obj = {"type": "error", "error": err}
        fields = (err["type"], None, err["message"])
        return [SimEvent("error", obj, terminal="error", error=fields)]
