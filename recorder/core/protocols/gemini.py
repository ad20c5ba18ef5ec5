"""Google's ``generateContent``: Gemini's API and Vertex AI's, streamed or not.

Every event is a whole ``GenerateContentResponse`` (an SSE ``data:`` line with
``alt=sse``, an element of a streamed JSON array without it, the whole body of
``:generateContent``): candidates whose ``content.parts`` carry the output, a
cumulative ``usageMetadata``, ``modelVersion`` and ``responseId``.

Output is a part's ``text`` (reasoning when the part says ``thought: true``: the
model's thinking, billed as output), a ``functionCall``'s arguments (a tool
call) and ``executableCode``'s code. A candidate's ``finishReason`` (``STOP``,
``MAX_TOKENS``, ``SAFETY``, ``MALFORMED_FUNCTION_CALL``, ...) is kept as sent and
finishes the answer, as does a ``promptFeedback.blockReason`` (the prompt was
refused: no candidate comes): the stream is then ``completed``, whatever
follows. An ``{"error": {...}}`` (after status 200 it comes as bare JSON, which
the framer hands over as an event) is an ``error`` with its ``status`` as the
type and its ``code``.

Usage: the last ``usageMetadata`` is authoritative (``recorder.core.usage.
from_gemini``); its output counts are final once the answer finished. A stream
cut before that has its input as reported and its output estimated from what
was streamed. Vertex AI's ``trafficType`` (``ON_DEMAND``,
``PROVISIONED_THROUGHPUT``, ...) or the Gemini API's ``serviceTier``
(``standard``, ``flex``, ``priority``) is the service tier, lower-cased.

There is no byte-template fast path: every chunk repeats a usage that changes.
"""

from __future__ import annotations

from typing import Any

import orjson

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.usage import from_gemini


class GeminiInterpreter(Interpreter):
    """Interpreter for ``:streamGenerateContent`` and ``:generateContent``."""

    endpoint = "generate_content"
    provider = "gcp.gemini"
    json_array = True
    bare_json = True

    __slots__ = ("_finish", "_finished", "_tools")

    def __init__(self) -> None:
        super().__init__(fast=False)
        self._finish: dict[int, str] = {}  # candidate index -> finish reason
        self._finished = False  # a finish reason or a block reason came
        self._tools: set[tuple[int, str]] = set()

    def interpret(self, event: Event) -> int:
        obj = self.parse(event.data)
        if obj is None:
            return 0
        return self._chunk(obj)

    def read_body(self, body: bytes) -> int:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.obs.parse_issues += 1
            return 0
        # (a streamed array read whole: each element in turn)
        chunks = doc if isinstance(doc, list) else [doc]
        chars = 0
        for obj in chunks:
            if isinstance(obj, dict):
                chars += self._chunk(obj)
            else:
                self.obs.parse_issues += 1
        if self.obs.terminal is None and self.obs.usage is not None:
            self._finished = True  # one whole answer: its usage is final
            self._final_usage()
            self.obs.decide("completed")
        return chars

    def _chunk(self, obj: dict[str, Any]) -> int:
        obs = self.obs
        error = obj.get("error")
        if error is not None:
            if isinstance(error, dict):
                obs.set_error(
                    error.get("status") or "error", error.get("code"), error.get("message")
                )
            else:
                obs.set_error("error", None, error)
            obs.decide("error")
            return 0
        rid = obj.get("responseId")
        if rid and obs.response_id is None:
            obs.response_id = str(rid)
        model = obj.get("modelVersion")
        if model and isinstance(model, str):
            obs.response_model = model
        chars = 0
        candidates = obj.get("candidates")
        if isinstance(candidates, list):
            for n, cand in enumerate(candidates):
                if isinstance(cand, dict):
                    chars += self._candidate(n, cand)
        feedback = obj.get("promptFeedback")
        if isinstance(feedback, dict):
            block = feedback.get("blockReason")
            if isinstance(block, str) and block and not self._finish:
                obs.finish_reason = block
                self._finished = True
        usage = obj.get("usageMetadata")
        if isinstance(usage, dict):
            obs.raw_usage = usage
            # Vertex AI's trafficType, Gemini's serviceTier
            tier = usage.get("trafficType") or usage.get("serviceTier")
            if isinstance(tier, str) and tier:
                obs.service_tier = tier.lower()
        if self._finished:
            self._final_usage()
            obs.decide("completed")
        elif isinstance(usage, dict):
            obs.usage = from_gemini(usage, final=False)
        obs.output_chars += chars
        return chars

    def _final_usage(self) -> None:
        raw = self.obs.raw_usage
        if raw is not None:
            self.obs.report_usage(from_gemini(raw, final=True), raw)

    def _candidate(self, n: int, cand: dict[str, Any]) -> int:
        obs = self.obs
        index = cand.get("index")
        index = index if isinstance(index, int) else n
        chars = 0
        content = cand.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    chars += self._part(index, part)
        reason = cand.get("finishReason")
        if isinstance(reason, str) and reason and index not in self._finish:
            # with several candidates, the first one's reason speaks for the stream
            self._finish[index] = reason
            obs.finish_reason = self._finish.get(0) or self._finish[min(self._finish)]
            self._finished = True
        return chars

    def _part(self, index: int, part: dict[str, Any]) -> int:
        obs = self.obs
        text = part.get("text")
        if text is not None:
            if part.get("thought") is True:
                return obs.add_reasoning(text)
            return obs.add_text(text)
        call = part.get("functionCall")
        if isinstance(call, dict):
            cid = call.get("id") or f"{call.get('name')}#{len(self._tools)}"
            if (index, str(cid)) not in self._tools:
                self._tools.add((index, str(cid)))
                obs.tool_calls += 1
            return obs.add_tool(_compact_json(call.get("args")))
        code = part.get("executableCode")
        if isinstance(code, dict):
            return obs.add_tool(code.get("code"))
        return 0


def _compact_json(value: Any) -> str:
    """Tool arguments as compact JSON (a call's ``args`` come whole, as an object)."""
    if not value:
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return ""
