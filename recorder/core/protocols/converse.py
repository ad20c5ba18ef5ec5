"""Amazon Bedrock Converse (``/model/{modelId}/converse-stream`` and ``/converse``).

The stream is AWS's binary event stream (``recorder.core.eventstream``); each
message's ``:event-type`` names the event and its payload is JSON:
``messageStart`` (the role), per content block ``contentBlockStart`` (a
``toolUse`` start is a tool call), ``contentBlockDelta``… and
``contentBlockStop``, then ``messageStop`` (``stopReason``) and ``metadata``, the
last event: ``usage``, ``metrics.latencyMs`` (Bedrock's own measure of the
request), ``serviceTier`` and ``performanceConfig``. Every payload may carry a
``p`` member, padding of random length that Bedrock adds against traffic
analysis: a template hole.

Output is a delta's ``text``, ``toolUse.input`` (tool arguments) and
``reasoningContent.text``; a ``reasoningContent.signature`` or
``redactedContent`` is not output text. The stream completes with ``metadata``
(a stream cut between ``messageStop`` and it has no usage: truncated, and
estimated). An exception message after status 200 (``throttlingException``,
``modelStreamErrorException``, …; the framer's ``id`` is ``exception``) is an
error of that type.

Usage (``recorder.core.usage.from_bedrock_converse``): ``inputTokens`` excludes
the cache reads and writes, which the record's ``input_tokens`` adds.
"""

from __future__ import annotations

from typing import Any

import orjson

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.protocols.template import HoleKind
from recorder.core.record import StreamRecord
from recorder.core.usage import from_bedrock_converse

FAST_PATH = True  # tests turn it off to check that both paths agree
# Bedrock's padding member, and the block index: both change from delta to delta
_IGNORED = (("p", HoleKind.STRING), ("contentBlockIndex", HoleKind.INT))
_DELTAS = (
    ("text", None, OutputKind.TEXT),
    ("toolUse", "input", OutputKind.TOOL),
    ("reasoningContent", "text", OutputKind.REASONING),
)


def read_error(interp: Interpreter, event: Event) -> None:
    """An exception (or error) message of a Bedrock stream: the error it says."""
    obs = interp.obs
    obs.decide("error")
    obj = interp.parse(event.data) if event.data else None
    message = None
    code = None
    if obj is not None:
        message = obj.get("message") or obj.get("Message")
        code = obj.get("originalStatusCode")
    obs.set_error(event.event or event.id, code, message)


def service_tier(obj: dict[str, Any]) -> str | None:
    """The tier a Bedrock answer says served it: ``serviceTier.type`` (``default``,
    ``priority``, ``flex``), else ``latency-optimized`` for
    ``performanceConfig.latency: optimized``."""
    tier = obj.get("serviceTier")
    if isinstance(tier, dict):
        tier = tier.get("type")
    if isinstance(tier, str) and tier:
        return tier.lower()[:32]
    perf = obj.get("performanceConfig")
    if isinstance(perf, dict) and perf.get("latency") == "optimized":
        return "latency-optimized"
    return None


def _ms(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


class ConverseInterpreter(Interpreter):
    """Interpreter for Bedrock's Converse API, streamed or not."""

    endpoint = "converse"
    provider = "aws.bedrock"

    __slots__ = ("latency_ms",)

    def __init__(self) -> None:
        super().__init__(fast=FAST_PATH)
        self.latency_ms: float | None = None  # metrics.latencyMs: Bedrock's own timing

    def interpret(self, event: Event) -> int:
        if event.id is not None and event.id != "event":
            read_error(self, event)
            return 0
        name = event.event
        obj = self.parse(event.data)
        if obj is None:
            return 0
        if name == "contentBlockDelta":
            return self._delta(event, obj)
        if name == "contentBlockStart":
            start = obj.get("start")
            if isinstance(start, dict) and isinstance(start.get("toolUse"), dict):
                self.obs.tool_calls += 1
        elif name == "messageStop":
            reason = obj.get("stopReason")
            if isinstance(reason, str) and reason:
                self.obs.finish_reason = reason
        elif name == "metadata":
            self._metadata(obj)
            self.obs.decide("completed")
        return 0

    def _delta(self, event: Event, obj: dict[str, Any]) -> int:
        delta = obj.get("delta")
        if not isinstance(delta, dict):
            return 0
        for key, inner, kind in _DELTAS:
            value = delta.get(key)
            if value is None:
                continue
            path: tuple[str, ...] = ("delta", key)
            if inner is not None:
                if not isinstance(value, dict):
                    return 0
                value = value.get(inner)
                path = ("delta", key, inner)
            chars = self.obs.add(kind, value)
            self.obs.output_chars += chars
            if chars and self._learnable:
                self.learn_from(event, obj, path, kind, _IGNORED)
            return chars
        return 0

    def _metadata(self, obj: dict[str, Any]) -> None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.obs.report_usage(from_bedrock_converse(usage), dict(usage))
        metrics = obj.get("metrics")
        if isinstance(metrics, dict):
            self.latency_ms = _ms(metrics.get("latencyMs"))
        tier = service_tier(obj)
        if tier is not None:
            self.obs.service_tier = tier

    def read_body(self, body: bytes) -> int:
        obj = self.parse(body)
        if obj is None:
            return 0
        output = obj.get("output")
        message = output.get("message") if isinstance(output, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            if "message" in obj or "Message" in obj:  # an error body
                return 0
            content = []
        chars = 0
        for block in content:
            if isinstance(block, dict):
                chars += self._block(block)
        self.obs.output_chars += chars
        reason = obj.get("stopReason")
        if isinstance(reason, str) and reason:
            self.obs.finish_reason = reason
        self._metadata(obj)
        self.obs.decide("completed")
        return chars

    def _block(self, block: dict[str, Any]) -> int:
        chars = self.obs.add_text(block.get("text"))
        tool = block.get("toolUse")
        if isinstance(tool, dict):
            self.obs.tool_calls += 1
            chars += self.obs.add_tool(_compact(tool.get("input")))
        reasoning = block.get("reasoningContent")
        if isinstance(reasoning, dict):
            text = reasoning.get("reasoningText")
            if isinstance(text, dict):
                chars += self.obs.add_reasoning(text.get("text"))
        return chars

    def annotate(self, record: StreamRecord) -> None:
        record.provider_latency_ms = self.latency_ms


def _compact(value: Any) -> str:
    if not value:
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return ""
