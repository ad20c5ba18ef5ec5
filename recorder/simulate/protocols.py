"""The three wire protocols: the chosen answer as SSE events or as a JSON body.

Shapes follow real captured streams (tests/fixtures/) and the official SDKs'
decoders: Chat chunks with a role chunk first, ``usage: null`` on every chunk
when ``stream_options.include_usage`` is set and a last ``choices: []`` chunk
with the usage, then ``data: [DONE]``; Responses events with ``event:`` lines
and ``sequence_number``; Anthropic ``message_start`` (exact input usage,
provisional ``output_tokens: 1``), content blocks, ``ping``, a cumulative
``message_delta`` and ``message_stop``.

Every event carries its own ground truth (output characters and tokens, tool
calls started, finish reason, usage, terminal kind) so the server can add up
what it really sent, whatever fault cut the stream short.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from recorder.simulate.content import Content, Ids, Prompt
from recorder.simulate.faults import Faults

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

    def data(self) -> bytes:
        """The ``data:`` payload (or the JSON body)."""
        if self.raw is not None:
            return self.raw
        return orjson.dumps(self.obj)

    def encode(self, line_end: bytes) -> bytes:
        """The event as SSE text, ending with a blank line."""
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
    anthropic = p.endpoint == "messages"
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


def http_error_body(
    endpoint: str, status: int, code: str | None, request_id: str
) -> tuple[dict[str, Any], tuple[str | None, str | None, str | None]]:
    """The provider's JSON error body for an HTTP error status, and its error fields."""
    if endpoint == "messages":
        err = anthropic_error(code, ANTHROPIC_STATUS_TYPES.get(status, "api_error"))
        body = {"type": "error", "error": err, "request_id": request_id}
        return body, (err["type"], None, err["message"])
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


class ResponsesBuilder(Builder):
    """``/v1/responses``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = "resp_" + ids.hex("resp", 50)
        self.created = ids.created()
        self.msg_id = "msg_" + ids.hex("msg", 50)
        self.rs_id = "rs_" + ids.hex("rs", 50)
        self.finish = "max_output_tokens" if c.truncated else "completed"

    def _wire_usage(self) -> dict[str, Any]:
        u = self.usage
        out = u.output_tokens or 0
        details: dict[str, Any] = {"cached_tokens": u.cache_read_tokens}
        if u.cache_write_tokens:
            details["cache_write_tokens"] = u.cache_write_tokens
        return {
            "input_tokens": u.input_tokens,
            "input_tokens_details": details,
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.input_tokens + out,
        }

    def _response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body = self.p.body
        reasoning = body.get("reasoning")
        if not isinstance(reasoning, dict):
            reasoning = {"effort": None, "summary": None}
        incomplete = {"reason": self.finish} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": self.p.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": reasoning,
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    @staticmethod
    def _ev(typ: str, **fields: Any) -> dict[str, Any]:
        return {"type": typ, "sequence_number": 0, **fields}

    def _items(self) -> list[dict[str, Any]]:
        c = self.c
        items: list[dict[str, Any]] = []
        if c.reasoning:
            summary = [{"type": "summary_text", "text": c.reasoning_text}]
            items.append({"id": self.rs_id, "type": "reasoning", "summary": summary})
        if c.text:
            items.append(
                {
                    "id": self.msg_id,
                    "type": "message",
                    "status": "incomplete" if c.truncated else "completed",
                    "content": [self._part(c.answer)],
                    "role": "assistant",
                }
            )
        for call in c.tool_calls:
            items.append(
                {
                    "id": call.item_id,
                    "type": "function_call",
                    "status": "incomplete" if c.truncated else "completed",
                    "arguments": call.arguments,
                    "call_id": call.call_id,
                    "name": call.name,
                }
            )
        return items

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def reply(self) -> Reply:
        c = self.c
        ev = self._ev
        events = [
            SimEvent(
                "response.created",
                ev("response.created", response=self._response("in_progress", [])),
            ),
            SimEvent(
                "response.in_progress",
                ev("response.in_progress", response=self._response("in_progress", [])),
            ),
        ]
        items = self._items()
        index = 0
        if c.reasoning:
            item = items[index]
            rid = item["id"]
            empty = {"id": rid, "type": "reasoning", "summary": []}
            part = {"type": "summary_text", "text": ""}
            full = {"type": "summary_text", "text": c.reasoning_text}
            where = {"item_id": rid, "output_index": index, "summary_index": 0}
            events.append(self._plain("response.output_item.added", output_index=index, item=empty))
            events.append(self._plain("response.reasoning_summary_part.added", **where, part=part))
            for piece in c.reasoning:
                typ = "response.reasoning_summary_text.delta"
                events.append(SimEvent(typ, ev(typ, **where, delta=piece), output=piece, tokens=1))
            events.append(
                self._plain("response.reasoning_summary_text.done", **where, text=c.reasoning_text)
            )
            events.append(self._plain("response.reasoning_summary_part.done", **where, part=full))
            events.append(self._plain("response.output_item.done", output_index=index, item=item))
            index += 1
        if c.text:
            item = items[index]
            added = {**item, "status": "in_progress", "content": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(self._plain("response.output_item.added", output_index=index, item=added))
            events.append(self._plain("response.content_part.added", **where, part=self._part("")))
            for piece in c.text:
                typ = "response.output_text.delta"
                obj = ev(typ, **where, delta=piece, logprobs=[])
                events.append(SimEvent(typ, obj, output=piece, tokens=1))
            events.append(
                self._plain("response.output_text.done", **where, text=c.answer, logprobs=[])
            )
            events.append(
                self._plain("response.content_part.done", **where, part=self._part(c.answer))
            )
            events.append(self._plain("response.output_item.done", output_index=index, item=item))
            index += 1
        for call in c.tool_calls:
            item = items[index]
            added = {**item, "status": "in_progress", "arguments": ""}
            where = {"item_id": item["id"], "output_index": index}
            obj = ev("response.output_item.added", output_index=index, item=added)
            events.append(SimEvent("response.output_item.added", obj, tool_calls=1))
            for piece in call.pieces:
                typ = "response.function_call_arguments.delta"
                events.append(SimEvent(typ, ev(typ, **where, delta=piece), output=piece, tokens=1))
            events.append(
                self._plain(
                    "response.function_call_arguments.done", **where, arguments=call.arguments
                )
            )
            events.append(self._plain("response.output_item.done", output_index=index, item=item))
            index += 1
        usage = self._wire_usage() if self.faults.usage != "off" else None
        sim_usage = self.usage if usage is not None else None
        if c.truncated:
            final = self._response("incomplete", items, usage)
            typ, terminal = "response.incomplete", "incomplete"
        else:
            final = self._response("completed", items, usage)
            typ, terminal = "response.completed", "completed"
        events.append(
            SimEvent(
                typ,
                ev(typ, response=final),
                finish_reason=self.finish,
                usage=sim_usage,
                terminal=terminal,
            )
        )
        output = "".join(
            c.reasoning + c.text + [piece for call in c.tool_calls for piece in call.pieces]
        )
        body = SimEvent(
            None,
            final,
            output=output,
            tokens=c.output_tokens - c.hidden,
            tool_calls=len(c.tool_calls),
            finish_reason=self.finish,
            usage=sim_usage,
            terminal=terminal,
        )
        return Reply(events, body, self.id, self.finish, self.usage)

    def _plain(self, typ: str, **fields: Any) -> SimEvent:
        return SimEvent(typ, self._ev(typ, **fields))

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        code = "stream_interrupted" if interrupt else self.faults.error_code
        err = openai_error(code, "server_error")
        fields = (err["type"], err["code"], err["message"])
        shape = self.faults.error_shape
        events = []
        if shape in ("both", "error"):
            obj = self._ev("error", error=err)
            events.append(SimEvent("error", obj, terminal="error", error=fields))
        if shape in ("both", "failed"):
            failed_err = {"code": err["code"], "message": err["message"]}
            resp = self._response("failed", [], None, failed_err)
            failed_fields = ("response.failed", err["code"], err["message"])
            events.append(
                SimEvent(
                    "response.failed",
                    self._ev("response.failed", response=resp),
                    terminal="error",
                    error=failed_fields if shape == "failed" else None,
                )
            )
        return events

    def finalize(self, events: list[SimEvent]) -> None:
        for n, event in enumerate(events):
            if event.obj is not None and "sequence_number" in event.obj:
                event.obj["sequence_number"] = n


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


BUILDERS: dict[str, type[Builder]] = {
    "chat.completions": ChatBuilder,
    "responses": ResponsesBuilder,
    "messages": MessagesBuilder,
}


def plan(p: Prompt, c: Content, ids: Ids, faults: Faults) -> tuple[Reply, list[SimEvent]]:
    """The reply, and the events to stream once error faults are applied."""
    builder = BUILDERS[p.endpoint](p, c, ids, faults)
    reply = builder.reply()
    events = list(reply.events)
    at: int | None = None
    interrupt = False
    if faults.interrupt_after is not None:
        at, interrupt = faults.interrupt_after, True
    elif faults.error_after is not None:
        at = faults.error_after
    if at is not None:
        at = min(at, len(events) - 1)
        events = events[:at] + builder.error_events(interrupt)
    builder.finalize(events)
    return reply, events
