"""OpenAI Realtime (``/v1/realtime``, over a WebSocket).

One response of a Realtime session: the server's ``response.*`` events from
``response.created`` to ``response.done`` (the connection's other events, the
session, the conversation, the input audio buffer, rate limits, are not a
response's; ``recorder.core.websocket`` routes each event to its response).
Both the GA names and the beta ones are read (``response.output_text.delta`` /
``response.text.delta``, ``response.output_audio.delta`` /
``response.audio.delta``, ``response.output_audio_transcript.delta`` /
``response.audio_transcript.delta``).

Output is text, the audio's transcript and tool-call arguments (characters, as
for the other protocols), and the audio itself: an audio delta is output for
the timing (time to first output, gaps, stalls: for a voice, the first audio is
the first output), not characters; its decoded bytes are counted, and give the
output audio's length (``output_audio_ms``) at the session's output format
(:meth:`RealtimeInterpreter.session`; pcm16 at 24 kHz unless the session said
otherwise). OpenAI bills an assistant's audio at one token per 50 ms, which is
what an output estimate of a cut response works from (``recorder.core.billing``).

``response.done`` is terminal, its ``response.status`` the outcome:
``completed``; ``incomplete`` (``max_output_tokens``, ``content_filter``) and
``cancelled`` (``turn_detected`` when the user spoke over it,
``client_cancelled``) are ``incomplete``, the reason in ``finish_reason``;
``failed`` is ``error`` with ``status_details.error``. Its ``usage`` has the
modality split (``recorder.core.usage.from_openai_realtime``). An ``error``
event routed to a response (the one its ``response.create`` caused) is
``error``.

Fast path: text and transcript deltas of one item differ only in their text
and their ``event_id``; the first is parsed and kept as a byte template with
those two holes. An audio delta is read without a parse: its type is known
(the router read it) and its ``delta`` is base64, whose length gives the bytes.
"""

from __future__ import annotations

from typing import Any

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.protocols.template import HoleKind
from recorder.core.record import Outcome, StreamRecord
from recorder.core.usage import from_openai_realtime

FAST_PATH = True  # tests turn it off to check that both paths agree
# pcm16 at 24 kHz, mono: the default output format of a session
DEFAULT_AUDIO_BYTES_PER_S = 48_000

_TEXT = frozenset(
    {
        "response.output_text.delta",
        "response.text.delta",
        "response.output_audio_transcript.delta",
        "response.audio_transcript.delta",
    }
)
_TOOL = frozenset({"response.function_call_arguments.delta", "response.mcp_call_arguments.delta"})
_AUDIO = frozenset({"response.output_audio.delta", "response.audio.delta"})
_IGNORED = (("event_id", HoleKind.STRING),)
_STATUS: dict[str, Outcome] = {
    "completed": "completed",
    "incomplete": "incomplete",
    "cancelled": "incomplete",
    "failed": "error",
}
_DELTA = b'"delta":"'
# an audio delta's first bytes, as OpenAI writes it (its type first)
_AUDIO_HEADS = tuple(b'{"type":"' + name.encode() + b'"' for name in sorted(_AUDIO))


class RealtimeInterpreter(Interpreter):
    """Interpreter for one response of ``/v1/realtime``."""

    endpoint = "realtime"
    provider = "openai"

    __slots__ = ("audio_bytes", "audio_bytes_per_s", "audio_deltas")

    own_quick = True

    def __init__(self) -> None:
        super().__init__(fast=FAST_PATH)
        self.audio_bytes = 0  # decoded bytes of output audio
        self.audio_deltas = 0
        self.audio_bytes_per_s: float = DEFAULT_AUDIO_BYTES_PER_S
        if FAST_PATH:
            self.quick = self._quick

    def _quick(self, data: bytes) -> int:
        """A message read without its name (``Interpreter.quick``): a text or
        transcript delta by the template, an audio delta by its first bytes."""
        read = self._read
        if read is not None:
            n = read(data)
            if n >= 0:
                return n
        if data.startswith(_AUDIO_HEADS):
            size = _base64_bytes(data)
            if size is not None:
                return self._audio(size)
        return -1

    def session(self, model: str | None, audio_bytes_per_s: float | None) -> None:
        """What the session said before this response: the model serving it, and
        the output audio's bytes per second (None: the default)."""
        if model:
            self.obs.response_model = model
        if audio_bytes_per_s:
            self.audio_bytes_per_s = audio_bytes_per_s

    def interpret(self, event: Event) -> int:
        data = event.data
        if event.event in _AUDIO:
            size = _base64_bytes(data)
            if size is not None:
                return self._audio(size)
        obj = self.parse(data)
        if obj is None:
            return 0
        typ = obj.get("type")
        if not isinstance(typ, str):
            typ = event.event
        if typ in _TEXT or typ in _TOOL:
            kind = OutputKind.TEXT if typ in _TEXT else OutputKind.TOOL
            obs = self.obs
            chars = obs.add(kind, obj.get("delta"))
            obs.output_chars += chars
            if chars and self._learnable:
                self.learn_from(event, obj, ("delta",), kind, _IGNORED)
            return chars
        if typ in _AUDIO:
            delta = obj.get("delta")
            if isinstance(delta, str) and delta:
                return self._audio(_base64_bytes(delta.encode()) or 0)
            return 0
        if typ == "response.output_item.added":
            item = obj.get("item")
            if isinstance(item, dict) and _is_call(item.get("type")):
                self.obs.tool_calls += 1
        elif typ == "response.created":
            self._response(obj.get("response"))
        elif typ == "response.done":
            self._response(obj.get("response"), final=True)
        elif typ == "error":
            self.obs.error_event(obj)
        return 0

    def _audio(self, size: int) -> int:
        self.audio_bytes += size
        self.audio_deltas += 1
        # output for the timing, never characters: the count only says "output"
        return max(size, 1)

    def read_body(self, body: bytes) -> int:
        """A Realtime response object (``response.done``'s ``response``) on its own."""
        obj = self.parse(body)
        if obj is not None:
            self._response(obj, final=True)
        return 0

    def _response(self, resp: Any, *, final: bool = False) -> None:
        if not isinstance(resp, dict):
            return
        obs = self.obs
        rid = resp.get("id")
        if rid and (final or obs.response_id is None):
            obs.response_id = str(rid)
        if not final:
            return
        status = resp.get("status")
        outcome = _STATUS.get(status) if isinstance(status, str) else None
        obs.decide(outcome or "completed")
        details = resp.get("status_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if isinstance(reason, str) and reason:
            obs.finish_reason = obs.finish_reason or reason
        elif isinstance(status, str) and status and status != "failed":
            obs.finish_reason = obs.finish_reason or status
        error = details.get("error") if isinstance(details, dict) else None
        if isinstance(error, dict):
            obs.set_error(
                error.get("type") or "response.failed", error.get("code"), error.get("message")
            )
        elif outcome == "error":
            obs.set_error("response.failed", None, None)
        usage = resp.get("usage")
        if isinstance(usage, dict):
            obs.report_usage(from_openai_realtime(usage), usage)

    def annotate(self, record: StreamRecord) -> None:
        if self.audio_deltas:
            seconds = self.audio_bytes / self.audio_bytes_per_s
            record.output_audio_ms = round(seconds * 1000.0, 3)


def _base64_bytes(data: bytes) -> int | None:
    """The decoded length of the base64 ``delta`` string of an event's bytes (or of
    the string's own bytes), read without decoding; None when it is not found."""
    start = data.find(_DELTA)
    if start >= 0:
        start += len(_DELTA)
        end = data.find(b'"', start)
        if end < 0 or data.find(b"\\", start, end) >= 0:
            return None
    elif b'"' in data or b"{" in data:
        return None
    else:
        start, end = 0, len(data)
    size = end - start
    pad = 0
    if size and data[end - 1] == 0x3D:  # "="
        pad = 2 if size > 1 and data[end - 2] == 0x3D else 1
    return max(0, size * 3 // 4 - pad)


def _is_call(item_type: Any) -> bool:
    return isinstance(item_type, str) and item_type.endswith("_call")
