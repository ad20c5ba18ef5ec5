"""OpenAI Chat Completions: chunks with a role chunk first, `usage: null` on every
chunk with `include_usage` and a last `choices: []` chunk with the usage, `[DONE]`."""

from __future__ import annotations

from typing import Any

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import (
    Builder,
    Reply,
    SimEvent,
    openai_error,
)


class ChatBuilder(Builder):
    """``/v1/chat/completions``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = "chatcmpl-" + ids.b62("chatcmpl", 29)
        self.created = ids.created()
        self.fingerprint = "fp_" + ids.hex("fp", 10)
        mode = faults.usage
        self.usage_chunk = mode == "on" or (mode == "default" and p.include_usage)
        self.usage_null = self.usage_chunk or mode == "finish"
        if c.tool_calls and not c.truncated:
            self.finish = "tool_calls"
        elif c.truncated:
            self.finish = "length"
        else:
            self.finish = "stop"

    def _wire_usage(self) -> dict[str, Any]:
        u = self.usage
        out = u.output_tokens or 0
        prompt_details: dict[str, Any] = {"cached_tokens": u.cache_read_tokens, "audio_tokens": 0}
        if u.cache_write_tokens:
            prompt_details["cache_write_tokens"] = u.cache_write_tokens
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": out,
            "total_tokens": u.input_tokens + out,
            "prompt_tokens_details": prompt_details,
            "completion_tokens_details": {
                "reasoning_tokens": u.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _chunk(
        self,
        delta: dict[str, Any] | None,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.p.model,
            "service_tier": "default",
            "system_fingerprint": self.fingerprint,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage is not None or self.usage_null:
            obj["usage"] = usage
        return obj

    def reply(self) -> Reply:
        c = self.c
        events: list[SimEvent] = []
        role: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        if c.reasoning:
            role = {"role": "assistant", "content": None, "reasoning_content": ""}
        elif c.tool_calls and not c.text:
            role = {"role": "assistant", "content": None, "refusal": None}
        events.append(SimEvent(None, self._chunk(role)))
        for piece in c.reasoning:
            delta = {"content": None, "reasoning_content": piece}
            events.append(SimEvent(None, self._chunk(delta), output=piece, tokens=1))
        for piece in c.text:
            events.append(SimEvent(None, self._chunk({"content": piece}), output=piece, tokens=1))
        for n, call in enumerate(c.tool_calls):
            start = {
                "index": n,
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(SimEvent(None, self._chunk({"tool_calls": [start]}), tool_calls=1))
            for piece in call.pieces:
                frag = {"index": n, "function": {"arguments": piece}}
                chunk = self._chunk({"tool_calls": [frag]})
                events.append(SimEvent(None, chunk, output=piece, tokens=1))
        on_finish = self.faults.usage == "finish"
        wire_usage = self._wire_usage()
        finish = self._chunk({}, self.finish, wire_usage if on_finish else None)
        events.append(
            SimEvent(
                None,
                finish,
                finish_reason=self.finish,
                usage=self.usage if on_finish else None,
            )
        )
        if self.usage_chunk:
            events.append(SimEvent(None, self._chunk(None, usage=wire_usage), usage=self.usage))
        events.append(SimEvent(None, raw=b"[DONE]", terminal="completed"))
        return Reply(events, self._body(), self.id, self.finish, self.usage)

    def _body(self) -> SimEvent:
        c = self.c
        message: dict[str, Any] = {
            "role": "assistant",
            "content": c.answer if (c.text or not c.tool_calls) else None,
            "refusal": None,
            "annotations": [],
        }
        if c.reasoning:
            message["reasoning_content"] = c.reasoning_text
        if c.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in c.tool_calls
            ]
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.p.model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish}
            ],
        }
        if self.faults.usage != "off":
            obj["usage"] = self._wire_usage()
        obj["service_tier"] = "default"
        obj["system_fingerprint"] = self.fingerprint
        output = c.reasoning_text + c.answer + "".join(call.arguments for call in c.tool_calls)
        return SimEvent(
            None,
            obj,
            output=output,
            tokens=c.output_tokens - c.hidden,
            tool_calls=len(c.tool_calls),
            finish_reason=self.finish,
            usage=self.usage if self.faults.usage != "off" else None,
            terminal="completed",
        )

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        code = "stream_interrupted" if interrupt else self.faults.error_code
        err = openai_error(code, "server_error")
        fields = (err["type"], err["code"], err["message"])
        events = [SimEvent(None, {"error": err}, terminal="error", error=fields)]
        if self.faults.error_done:
            events.append(SimEvent(None, raw=b"[DONE]"))
        return events
