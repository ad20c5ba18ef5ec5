"""OpenAI Realtime (over a WebSocket): one response's server events, GA names.

``response.created``, then for the answer an output item and its content part,
each piece of text as its audio (``response.output_audio.delta``, base64 pcm16
at 24 kHz, ``AUDIO_BYTES_PER_PIECE`` bytes, two audio tokens at OpenAI's one
token per 50 ms) and its transcript (``response.output_audio_transcript.delta``),
or as text alone when the response asked for text only
(``response.output_text.delta``); function calls as items with their argument
deltas; then ``response.done`` with ``status`` and the usage split by modality
(``input_token_details`` with the cached part by modality,
``output_token_details``). An error after the response began is
``response.done`` with ``status: failed`` and ``status_details.error``.
"""

from __future__ import annotations

import base64
from typing import Any

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import Builder, Reply, SimEvent, SimUsage, openai_error

AUDIO_BYTES_PER_PIECE = 4800  # 100 ms of pcm16 at 24 kHz, mono
AUDIO_TOKENS_PER_PIECE = 2  # one token per 50 ms of an assistant's audio


class RealtimeBuilder(Builder):
    """One response of ``/v1/realtime``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = "resp_" + ids.b62("rt-resp", 22)
        self.item_id = "item_" + ids.b62("rt-item", 22)
        self.audio = p.body.get("output_modalities") != ["text"]
        self.input_audio_tokens = int(p.body.get("input_audio_tokens") or 0)
        self.finish = "max_output_tokens" if c.truncated else "completed"
        self._n = 0
        pieces = len(c.text) if self.audio else 0
        self.audio_tokens = pieces * AUDIO_TOKENS_PER_PIECE
        u = self.usage
        # the conversation's audio is input too; the cached part is text
        self.usage = SimUsage(
            input_tokens=u.input_tokens + self.input_audio_tokens,
            output_tokens=(u.output_tokens or 0) + self.audio_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=None,
            reasoning_tokens=None,
        )

    def _event_id(self) -> str:
        self._n += 1
        return f"event_{self.id[5:13]}{self._n:04d}"

    def _ev(self, typ: str, **fields: Any) -> dict[str, Any]:
        return {"type": typ, "event_id": self._event_id(), **fields}

    def wire_usage(self) -> dict[str, Any]:
        u = self.usage
        cached = u.cache_read_tokens or 0
        text_in = u.input_tokens - self.input_audio_tokens
        text_out = (u.output_tokens or 0) - self.audio_tokens
        return {
            "total_tokens": u.input_tokens + (u.output_tokens or 0),
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "input_token_details": {
                "text_tokens": text_in,
                "audio_tokens": self.input_audio_tokens,
                "image_tokens": 0,
                "cached_tokens": cached,
                "cached_tokens_details": {
                    "text_tokens": cached,
                    "audio_tokens": 0,
                    "image_tokens": 0,
                },
            },
            "output_token_details": {"text_tokens": text_out, "audio_tokens": self.audio_tokens},
        }

    def _response(
        self, status: str, usage: dict[str, Any] | None, details: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return {
            "object": "realtime.response",
            "id": self.id,
            "status": status,
            "status_details": details,
            "output": [],
            "conversation_id": "conv_" + self.ids.b62("rt-conv", 22),
            "output_modalities": ["audio"] if self.audio else ["text"],
            "max_output_tokens": "inf",
            "usage": usage,
            "metadata": None,
        }

    def reply(self) -> Reply:
        c = self.c
        where = {"response_id": self.id, "item_id": self.item_id, "output_index": 0}
        events = [
            SimEvent(
                "response.created",
                self._ev("response.created", response=self._response("in_progress", None)),
            )
        ]
        index = 0
        if c.text:
            item = {"id": self.item_id, "type": "message", "role": "assistant", "content": []}
            events.append(self._plain("response.output_item.added", output_index=0, item=item))
            part = {"type": "audio" if self.audio else "text"}
            events.append(
                self._plain("response.content_part.added", **where, content_index=0, part=part)
            )
            audio = base64.b64encode(b"\x00\x01" * (AUDIO_BYTES_PER_PIECE // 2)).decode()
            for piece in c.text:
                if self.audio:
                    typ = "response.output_audio.delta"
                    obj = self._ev(typ, **where, content_index=0, delta=audio)
                    events.append(SimEvent(typ, obj, tokens=AUDIO_TOKENS_PER_PIECE))
                    typ = "response.output_audio_transcript.delta"
                else:
                    typ = "response.output_text.delta"
                obj = self._ev(typ, **where, content_index=0, delta=piece)
                events.append(SimEvent(typ, obj, output=piece, tokens=1))
            index = 1
        for n, call in enumerate(c.tool_calls):
            item = {"id": call.item_id, "type": "function_call", "call_id": call.call_id}
            obj = self._ev("response.output_item.added", output_index=index + n, item=item)
            events.append(SimEvent("response.output_item.added", obj, tool_calls=1))
            for piece in call.pieces:
                typ = "response.function_call_arguments.delta"
                obj = self._ev(
                    typ,
                    response_id=self.id,
                    item_id=call.item_id,
                    output_index=index + n,
                    call_id=call.call_id,
                    delta=piece,
                )
                events.append(SimEvent(typ, obj, output=piece, tokens=1))
        reported = self.faults.usage != "off"
        usage = self.wire_usage() if reported else None
        sim_usage = self.usage if reported else None
        status = "incomplete" if c.truncated else "completed"
        details = {"type": status, "reason": "max_output_tokens"} if c.truncated else None
        final = self._response(status, usage, details)
        events.append(
            SimEvent(
                "response.done",
                self._ev("response.done", response=final),
                finish_reason=self.finish,
                usage=sim_usage,
                terminal="incomplete" if c.truncated else "completed",
            )
        )
        body = SimEvent(None, final, usage=sim_usage, terminal=status)
        return Reply(events, body, self.id, self.finish, self.usage)

    def _plain(self, typ: str, **fields: Any) -> SimEvent:
        return SimEvent(typ, self._ev(typ, **fields))

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        """A failed response: ``response.done`` with ``status: failed`` and its error
        (Realtime's ``error`` events answer client events, not a response's failure)."""
        code = "stream_interrupted" if interrupt else self.faults.error_code
        err = openai_error(code, "server_error")
        details = {"type": "failed", "error": {"type": err["type"], "code": err["code"]}}
        resp = self._response("failed", None, details)
        return [
            SimEvent(
                "response.done",
                self._ev("response.done", response=resp),
                terminal="error",
                error=(err["type"], err["code"], None),
            )
        ]
