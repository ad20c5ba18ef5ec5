"""Amazon Bedrock: Converse and InvokeModel, streamed as AWS's binary event stream.

Each event is one event-stream message (prelude, string headers ``:event-type``,
``:content-type``, ``:message-type``, a JSON payload, CRC32s), written here
without any of the recorder's code (the simulator is the recorder's ground
truth) and in the form botocore's ``EventStreamBuffer`` reads.

- **Converse** (``/model/{id}/converse-stream``): ``messageStart``, per block
  ``contentBlockStart`` (tool use only), ``contentBlockDelta``…,
  ``contentBlockStop``, ``messageStop`` (``stopReason``), ``metadata`` (``usage``
  with the cache reads and writes apart from ``inputTokens``, ``metrics.latencyMs``).
  Every payload carries Bedrock's ``p`` padding.
- **InvokeModel** (``/model/{id}/invoke-with-response-stream``): the Anthropic
  Messages events, each base64 in a ``chunk`` event's ``bytes``; the last one
  (``message_stop``) also carries ``amazon-bedrock-invocationMetrics``.
- An error after status 200 is an exception message (``:message-type:
  exception``, ``:exception-type`` ``throttlingException``,
  ``modelStreamErrorException``, ...).
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import orjson

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import Builder, Reply, SimEvent, SimUsage
from recorder.simulate.protocols.messages import MessagesBuilder

CONTENT_TYPE = "application/vnd.amazon.eventstream"
# the exception an error fault sends, by its code (the default: a model stream error)
EXCEPTIONS = {
    "throttling": "throttlingException",
    "internal": "internalServerException",
    "unavailable": "serviceUnavailableException",
    "validation": "validationException",
}
_DEFAULT_EXCEPTION = "modelStreamErrorException"
_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def frame(headers: list[tuple[str, str]], payload: bytes) -> bytes:
    """One event-stream message with string headers."""
    block = b""
    for name, value in headers:
        raw = value.encode()
        block += bytes((len(name),)) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    total = 16 + len(block) + len(payload)
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


class AwsEvent(SimEvent):
    """A SimEvent written as an event-stream message (``name`` its event or
    exception type)."""

    __slots__ = ("exception",)

    def __init__(self, name: str, obj: dict[str, Any], *, exception: bool = False, **kw: Any):
        super().__init__(name, obj, **kw)
        self.exception = exception

    def encode(self, line_end: bytes) -> bytes:
        kind = ":exception-type" if self.exception else ":event-type"
        headers = [
            (kind, self.name or ""),
            (":content-type", "application/json"),
            (":message-type", "exception" if self.exception else "event"),
        ]
        return frame(headers, self.data())


def _pad(n: int) -> str:
    return _PAD[: 1 + n % len(_PAD)]


def _usage(c: Content) -> SimUsage:
    return SimUsage(
        input_tokens=c.input_tokens,
        output_tokens=c.output_tokens,
        cache_read_tokens=c.cache_read,
        cache_write_tokens=c.cache_write,
        reasoning_tokens=None,  # Bedrock reports no reasoning figure
    )


def _exception(faults: Faults, interrupt: bool) -> AwsEvent:
    name = EXCEPTIONS.get(faults.error_code or "", _DEFAULT_EXCEPTION)
    message = "The model stream was interrupted." if interrupt else f"Simulated {name}"
    obj: dict[str, Any] = {"message": message}
    if name == _DEFAULT_EXCEPTION:
        obj |= {"originalStatusCode": 500, "originalMessage": message}
    return AwsEvent(name, obj, exception=True, terminal="error", error=(name, None, message))


class ConverseBuilder(Builder):
    """``/model/{id}/converse-stream`` and ``/converse``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.usage = _usage(c)
        self.id = "bedrock-" + ids.b62("msg", 16)
        if c.truncated:
            self.finish = "max_tokens"
        elif c.tool_calls:
            self.finish = "tool_use"
        else:
            self.finish = "end_turn"
        self.latency_ms = 100 + len(c.text) * 7

    def _usage_obj(self) -> dict[str, Any]:
        c = self.c
        base = c.input_tokens - c.cache_read - c.cache_write
        return {
            "inputTokens": base,
            "outputTokens": c.output_tokens,
            "totalTokens": c.input_tokens + c.output_tokens,
            "cacheReadInputTokens": c.cache_read,
            "cacheWriteInputTokens": c.cache_write,
        }

    def reply(self) -> Reply:
        c = self.c
        n = 0

        def ev(name: str, obj: dict[str, Any], **kw: Any) -> AwsEvent:
            nonlocal n
            n += 1
            return AwsEvent(name, {**obj, "p": _pad(n)}, **kw)

        events: list[SimEvent] = [ev("messageStart", {"role": "assistant"})]
        index = 0
        if c.reasoning:
            for piece in c.reasoning:
                delta = {"reasoningContent": {"text": piece}}
                events.append(
                    ev(
                        "contentBlockDelta",
                        {"contentBlockIndex": index, "delta": delta},
                        output=piece,
                        tokens=1,
                    )
                )
            sig = {"reasoningContent": {"signature": c.signature}}
            events.append(ev("contentBlockDelta", {"contentBlockIndex": index, "delta": sig}))
            events.append(ev("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        if c.text:
            for piece in c.text:
                events.append(
                    ev(
                        "contentBlockDelta",
                        {"contentBlockIndex": index, "delta": {"text": piece}},
                        output=piece,
                        tokens=1,
                    )
                )
            events.append(ev("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        for call in c.tool_calls:
            start = {"toolUse": {"toolUseId": call.call_id, "name": call.name}}
            events.append(
                ev("contentBlockStart", {"contentBlockIndex": index, "start": start}, tool_calls=1)
            )
            for piece in call.pieces:
                delta = {"toolUse": {"input": piece}}
                events.append(
                    ev(
                        "contentBlockDelta",
                        {"contentBlockIndex": index, "delta": delta},
                        output=piece,
                        tokens=1,
                    )
                )
            events.append(ev("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        events.append(ev("messageStop", {"stopReason": self.finish}, finish_reason=self.finish))
        meta: dict[str, Any] = {"metrics": {"latencyMs": self.latency_ms}}
        off = self.faults.usage == "off"
        if not off:
            meta["usage"] = self._usage_obj()
        events.append(ev("metadata", meta, usage=None if off else self.usage, terminal="completed"))
        return Reply(events, self._body(), self.id, self.finish, self.usage)

    def _body(self) -> SimEvent:
        c = self.c
        content: list[dict[str, Any]] = []
        output = ""
        if c.reasoning:
            text = c.reasoning_text
            content.append(
                {"reasoningContent": {"reasoningText": {"text": text, "signature": c.signature}}}
            )
            output += text
        if c.text:
            content.append({"text": c.answer})
            output += c.answer
        for call in c.tool_calls:
            try:
                value = orjson.loads(call.arguments)
            except orjson.JSONDecodeError:
                value = {}
            tool_input = value if isinstance(value, dict) else {}
            content.append(
                {"toolUse": {"toolUseId": call.call_id, "name": call.name, "input": tool_input}}
            )
            if tool_input:
                output += orjson.dumps(tool_input).decode()
        off = self.faults.usage == "off"
        obj: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self.finish,
            "metrics": {"latencyMs": self.latency_ms},
        }
        if not off:
            obj["usage"] = self._usage_obj()
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
        return [_exception(self.faults, interrupt)]


class InvokeModelBuilder(Builder):
    """``/model/{id}/invoke-with-response-stream`` and ``/invoke`` for an Anthropic
    model: its Messages events, each base64 in a ``chunk``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.messages = MessagesBuilder(p, c, ids, faults)
        self.usage = self.messages.usage

    def _metrics(self) -> dict[str, Any]:
        c = self.c
        return {
            "inputTokenCount": c.input_tokens - c.cache_read - c.cache_write,
            "outputTokenCount": c.output_tokens,
            "invocationLatency": 100 + len(c.text) * 7,
            "firstByteLatency": 40,
            "cacheReadInputTokenCount": c.cache_read,
            "cacheWriteInputTokenCount": c.cache_write,
        }

    def reply(self) -> Reply:
        inner = self.messages.reply()
        events: list[SimEvent] = []
        for i, e in enumerate(inner.events):
            obj = dict(e.obj or {})
            if i == len(inner.events) - 1:
                obj["amazon-bedrock-invocationMetrics"] = self._metrics()
            events.append(self._chunk(e, obj))
        return Reply(events, inner.body, inner.response_id, inner.finish_reason, inner.usage)

    @staticmethod
    def _chunk(e: SimEvent, obj: dict[str, Any]) -> AwsEvent:
        payload = {"bytes": base64.b64encode(orjson.dumps(obj)).decode(), "p": _pad(len(obj))}
        return AwsEvent(
            "chunk",
            payload,
            output=e.output,
            tokens=e.tokens,
            tool_calls=e.tool_calls,
            finish_reason=e.finish_reason,
            usage=e.usage,
            terminal=e.terminal,
            error=e.error,
        )

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        return [_exception(self.faults, interrupt)]
