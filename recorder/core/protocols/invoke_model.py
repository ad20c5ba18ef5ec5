"""Amazon Bedrock InvokeModel (``/model/{modelId}/invoke-with-response-stream`` and
``/invoke``): the model's own protocol inside Bedrock's envelope.

The stream is AWS's binary event stream (``recorder.core.eventstream``); its
``chunk`` events carry ``{"bytes": "<base64>"}``, the model family's own JSON.
For Anthropic's models that JSON is exactly an Anthropic Messages event
(``message_start`` … ``message_stop``): it is read by the Messages interpreter
(``recorder.core.protocols.messages``), sharing this stream's observations, so
usage, cache writes by lifetime, tool calls and errors are read as on
``/v1/messages``. The last chunk of every family carries
``amazon-bedrock-invocationMetrics`` (``inputTokenCount``, ``outputTokenCount``,
``cacheReadInputTokenCount``, ``cacheWriteInputTokenCount``,
``invocationLatency``, ``firstByteLatency``): for the other families (Llama,
Mistral, Titan, Cohere, Nova, …) those metrics are the usage, their chunk's
text is counted from the members the families write it in, and the metrics'
chunk completes the stream. An exception message after status 200 is an error
of its type.

A non-streamed ``/invoke`` answer is the family's JSON alone (Anthropic's is a
Messages answer).

The usual chunk (``{"bytes":"<base64>",…}``, an Anthropic event inside) is read
at once (:meth:`InvokeModelInterpreter.handle`): its base64 decoded in C where
built (``_eventstream.chunk_bytes``, which decodes only what ``a2b_base64``
decodes alike and leaves the rest to it), the event inside handed to the
Messages interpreter's template. The meter's batch path does all of it for a
piece that is one whole chunk message in one call to C
(:meth:`InvokeModelInterpreter.piece_reader`).
"""

from __future__ import annotations

import binascii
from binascii import a2b_base64
from typing import Any

from recorder.core.framing import Event, EventReader, Framer
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.converse import read_error
from recorder.core.protocols.messages import AnthropicMessagesInterpreter
from recorder.core.protocols.template import Template
from recorder.core.record import StreamRecord
from recorder.core.usage import from_bedrock_metrics

try:  # a chunk's base64 decoded in C (_eventstream.c), built at install with a C compiler
    from recorder.core.protocols._eventstream import ChunkReader, chunk_bytes
except ImportError:  # pragma: no cover - an install without a compiler
    chunk_bytes = None  # type: ignore[assignment]
    ChunkReader = None  # type: ignore[assignment,misc]

_new = tuple.__new__  # builds an Event without NamedTuple's Python-level __new__
METRICS = "amazon-bedrock-invocationMetrics"
METRICS_BYTES = METRICS.encode()
# how Bedrock writes a chunk's envelope, and how an Anthropic event begins
_BYTES_KEY = b'{"bytes":"'
_BYTES_AT = len(_BYTES_KEY)
_MESSAGES_START = b'{"type":"'
_MESSAGES_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
# where the other families write a chunk's text, and their stop reason
_TEXT_KEYS = ("generation", "outputText", "completion", "text")
_STOP_KEYS = ("stop_reason", "completionReason", "finish_reason", "stopReason")


def _bytes_member(data: bytes) -> bytes | None:
    """The base64 of a chunk's ``bytes`` member when the envelope begins with it, as
    Bedrock writes it (base64 holds no quote), found without a parse; else None."""
    if not data.startswith(_BYTES_KEY):
        return None
    end = data.find(b'"', _BYTES_AT)
    return None if end < 0 else data[_BYTES_AT:end]


def _decoded(data: bytes) -> bytes | None:
    """The decoded ``bytes`` member of a chunk written as Bedrock writes it (empty:
    not base64), None if the envelope is not so written."""
    raw = _bytes_member(data)
    if raw is None:
        return None
    try:
        return a2b_base64(raw, strict_mode=True)
    except binascii.Error:
        return b""


_METRIC_HEADERS = {
    "x-amzn-bedrock-input-token-count": "inputTokenCount",
    "x-amzn-bedrock-output-token-count": "outputTokenCount",
    "x-amzn-bedrock-invocation-latency": "invocationLatency",
    "x-amzn-bedrock-cache-read-input-token-count": "cacheReadInputTokenCount",
    "x-amzn-bedrock-cache-write-input-token-count": "cacheWriteInputTokenCount",
}


def _ms(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


class InvokeModelInterpreter(Interpreter):
    """Interpreter for Bedrock's InvokeModel API, streamed or not."""

    endpoint = "invoke_model"
    provider = "aws.bedrock"

    __slots__ = ("first_byte_ms", "latency_ms", "messages")

    def __init__(self) -> None:
        super().__init__(fast=False)  # the chunks are base64: no template reads them
        self.messages = AnthropicMessagesInterpreter()
        self.obs = self.messages.obs  # one stream, one set of facts
        self.latency_ms: float | None = None
        self.first_byte_ms: float | None = None

    def handle(self, event: Event) -> int:
        # the usual chunk, read at once: an Anthropic event in Bedrock's envelope
        # (no template of this interpreter's own reads base64; the Messages one
        # reads the event inside)
        if event.event == "chunk" and event.id == "event":
            data = event.data
            # the base64 as Bedrock writes it, decoded in C where built; else (None)
            # in Python, as interpret reads it
            inner = None if chunk_bytes is None else chunk_bytes(data)
            if inner is None:
                inner = _decoded(data)
            if (
                inner is not None
                and inner.startswith(_MESSAGES_START)
                and inner.find(METRICS_BYTES) < 0
            ):
                return self.messages.handle_data(inner)
        return self.interpret(event)

    @property
    def template(self) -> Template | None:
        """The Messages interpreter's: it reads the usual chunk's event."""
        return self.messages.template

    def piece_reader(self, framer: Framer) -> EventReader | None:
        """:meth:`handle`'s shortcut for a piece that is one whole ``chunk``
        message, in C: the message framed, its base64 decoded, the Messages
        template's reader given the event inside (``ChunkReader``); None before
        that template is learned, or without the C framer."""
        read = self.messages.quick  # (the Messages template's reader)
        if read is None or ChunkReader is None:
            return None
        return framer.message_reader(ChunkReader(read), "chunk")

    def interpret(self, event: Event) -> int:
        if event.id is not None and event.id != "event":
            read_error(self, event)
            return 0
        if event.event != "chunk":
            return 0
        inner = self._inner(event.data)
        if not inner:
            self.obs.parse_issues += 1
            return 0
        if inner.startswith(_MESSAGES_START):
            # an Anthropic Messages event: the Messages interpreter reads it (its
            # template reads the usual delta without a parse)
            chars = self.messages.handle(_new(Event, ("", inner, None, None)))
            if inner.find(METRICS_BYTES) >= 0:
                obj = self.parse(inner)
                metrics = obj.get(METRICS) if obj is not None else None
                if isinstance(metrics, dict):
                    self._metrics(metrics)
            return chars
        return self._model_json(inner)

    def _inner(self, data: bytes) -> bytes:
        """The model's JSON a chunk carries (empty: none could be read)."""
        raw = _bytes_member(data)
        if raw is not None:
            try:
                return a2b_base64(raw, strict_mode=True)
            except binascii.Error:
                pass  # (escaped, say): read the envelope whole
        envelope = self.parse(data)
        member = envelope.get("bytes") if envelope is not None else None
        if not isinstance(member, str):
            return b""
        try:
            return a2b_base64(member.encode("ascii", "replace"), strict_mode=True)
        except binascii.Error:
            return b""

    def _model_json(self, inner: bytes) -> int:
        obj = self.parse(inner)
        if obj is None:
            return 0
        metrics = obj.get(METRICS)
        typ = obj.get("type")
        if isinstance(typ, str) and typ in _MESSAGES_EVENTS:
            chars = self.messages.handle(Event(typ, inner, None, None))
        else:
            chars = self._other_family(obj)
        if isinstance(metrics, dict):
            self._metrics(metrics)
        return chars

    def _other_family(self, obj: dict[str, Any]) -> int:
        obs = self.obs
        chars = 0
        for key in _TEXT_KEYS:
            chars += obs.add_text(obj.get(key))
        outputs = obj.get("outputs")  # Mistral
        if isinstance(outputs, list):
            for out in outputs:
                if isinstance(out, dict):
                    chars += obs.add_text(out.get("text"))
                    _stop(obs, out)
        choices = obj.get("choices")  # OpenAI-style families
        if isinstance(choices, list):
            for choice in choices:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict):
                    chars += obs.add_text(delta.get("content"))
                    chars += obs.add_reasoning(delta.get("reasoning_content"))
                if isinstance(choice, dict):
                    _stop(obs, choice)
        block = obj.get("contentBlockDelta")  # Nova: Converse's events, by member
        if isinstance(block, dict) and isinstance(block.get("delta"), dict):
            chars += obs.add_text(block["delta"].get("text"))
        _stop(obs, obj)
        obs.output_chars += chars
        return chars

    def _metrics(self, metrics: dict[str, Any]) -> None:
        self.latency_ms = _ms(metrics.get("invocationLatency"))
        self.first_byte_ms = _ms(metrics.get("firstByteLatency"))
        obs = self.obs
        if obs.usage is None or not obs.output_final:
            # the model's own usage wins where it has one (Anthropic's: exact, with
            # the cache writes by lifetime); else the metrics are the usage
            obs.report_usage(from_bedrock_metrics(metrics), dict(metrics))
        obs.decide("completed")  # the last chunk of a stream, whatever the family

    def read_headers(self, headers: dict[str, str]) -> None:
        """A non-streamed answer's ``x-amzn-bedrock-*`` headers (lower-case names):
        the metrics a stream's last chunk carries, read the same way (the body's own
        usage, where the family has one, replaces their counts)."""
        metrics: dict[str, Any] = {}
        for name, key in _METRIC_HEADERS.items():
            value = headers.get(name, "").strip()
            if value.isdigit():
                metrics[key] = int(value)
        if metrics:
            self.latency_ms = _ms(metrics.get("invocationLatency"))
            if "inputTokenCount" in metrics or "outputTokenCount" in metrics:
                self.obs.report_usage(from_bedrock_metrics(metrics), metrics)

    def read_body(self, body: bytes) -> int:
        obj = self.parse(body)
        if obj is None:
            return 0
        if obj.get("type") == "message" or ("content" in obj and "role" in obj):
            return self.messages.read_body(body)
        if "message" in obj or "Message" in obj:  # an error body
            return 0
        chars = self._other_family(obj)
        self.obs.decide("completed")
        return chars

    def annotate(self, record: StreamRecord) -> None:
        record.provider_latency_ms = self.latency_ms
        record.provider_first_byte_ms = self.first_byte_ms


def _stop(obs: Any, obj: dict[str, Any]) -> None:
    for key in _STOP_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            obs.finish_reason = value
            return


__all__ = ["METRICS", "InvokeModelInterpreter"]
