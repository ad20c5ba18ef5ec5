"""Google's generateContent (Gemini's API, Vertex AI): every event a whole
``GenerateContentResponse`` (candidates with parts, a cumulative
``usageMetadata``, ``modelVersion``, ``responseId``), as SSE with ``alt=sse``
(``data:`` lines, CRLF, no ``[DONE]``) or, without it, as one JSON array written
an element at a time. The last chunk carries the ``finishReason`` and the whole
usage; an error after status 200 is a bare, pretty-printed ``{"error": ...}``."""

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
    google_error,
)


class GeminiBuilder(Builder):
    """``/v1beta/models/{model}:streamGenerateContent`` (and ``:generateContent``)."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = ids.b62("gemini", 23)
        self.array = p.body.get("alt") != "sse"  # (the stream's transport)
        self.finish = "MAX_TOKENS" if c.truncated else "STOP"

    def _metadata(self, final: bool) -> dict[str, Any]:
        u = self.usage
        prompt = u.input_tokens
        meta: dict[str, Any] = {"promptTokenCount": prompt}
        if u.cache_read_tokens:
            meta["cachedContentTokenCount"] = u.cache_read_tokens
        if final:
            thoughts = u.reasoning_tokens or 0
            candidates = (u.output_tokens or 0) - thoughts
            meta["candidatesTokenCount"] = candidates
            if thoughts:
                meta["thoughtsTokenCount"] = thoughts
            meta["totalTokenCount"] = prompt + candidates + thoughts
        else:
            meta["totalTokenCount"] = prompt
        return meta

    def _chunk(self, parts: list[dict[str, Any]], *, final: bool = False) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if final:
            cand["finishReason"] = self.finish
        obj: dict[str, Any] = {"candidates": [cand]}
        if self.faults.usage != "off" and (final or self.faults.usage != "finish"):
            obj["usageMetadata"] = self._metadata(final)
        obj["modelVersion"] = self.p.model
        obj["responseId"] = self.id
        return obj

    def _parts(self) -> list[tuple[dict[str, Any], str, int, int]]:
        """Each part with its output, tokens and tool calls."""
        c = self.c
        out: list[tuple[dict[str, Any], str, int, int]] = []
        for piece in c.reasoning:
            out.append(({"text": piece, "thought": True}, piece, 1, 0))
        for piece in c.text:
            out.append(({"text": piece}, piece, 1, 0))
        for call in c.tool_calls:
            try:
                args = orjson.loads(call.arguments)
            except orjson.JSONDecodeError:
                args = {}
            args = args if isinstance(args, dict) else {}
            shown = orjson.dumps(args).decode() if args else ""
            part = {"functionCall": {"name": call.name, "args": args}}
            out.append((part, shown, len(call.pieces), 1))
        return out

    def reply(self) -> Reply:
        events: list[SimEvent] = []
        for part, output, tokens, calls in self._parts():
            chunk = self._chunk([part])
            events.append(SimEvent(None, chunk, output=output, tokens=tokens, tool_calls=calls))
        last = self._chunk([{"text": ""}], final=True)
        usage = None if self.faults.usage == "off" else self.usage
        events.append(
            SimEvent(None, last, finish_reason=self.finish, usage=usage, terminal="completed")
        )
        return Reply(events, self._body(), self.id, self.finish, self.usage)

    def _body(self) -> SimEvent:
        parts = self._parts()
        cand: dict[str, Any] = {
            "content": {"parts": [p for p, _, _, _ in parts], "role": "model"},
            "finishReason": self.finish,
            "index": 0,
        }
        obj: dict[str, Any] = {"candidates": [cand]}
        off = self.faults.usage == "off"
        if not off:
            obj["usageMetadata"] = self._metadata(True)
        obj["modelVersion"] = self.p.model
        obj["responseId"] = self.id
        return SimEvent(
            None,
            obj,
            output="".join(o for _, o, _, _ in parts),
            tokens=self.c.output_tokens - self.c.hidden,
            tool_calls=len(self.c.tool_calls),
            finish_reason=self.finish,
            usage=None if off else self.usage,
            terminal="completed",
        )

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        err: dict[str, Any]
        if interrupt:
            err = {"code": 503, "message": INTERRUPTED_MESSAGE, "status": "UNAVAILABLE"}
        else:
            err = google_error(self.faults.error_code, "UNAVAILABLE")
        raw = orjson.dumps({"error": err}, option=orjson.OPT_INDENT_2)
        fields = (str(err["status"]), str(err["code"]), str(err["message"]))
        return [SimEvent(None, raw=raw, terminal="error", error=fields, bare=True)]

    def finalize(self, events: list[SimEvent]) -> None:
        """Without ``alt=sse`` the events are the elements of one JSON array."""
        if not self.array:
            return
        for n, event in enumerate(events):
            event.prefix = b"[" if n == 0 else b",\r\n"
            event.bare = True
        if events:
            events[-1].suffix = b"]"
