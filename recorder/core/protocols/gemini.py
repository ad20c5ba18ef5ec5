"""Google's ``generateContent``: Gemini's API and Vertex AI's, streamed or not.

Every event is a whole ``GenerateContentResponse`` (an SSE ``data:`` line with
``alt=sse``, an element of a streamed JSON array without it, the whole body of
``:generateContent``): candidates whose ``content.parts`` carry the output, a
cumulative ``usageMetadata``, ``modelVersion`` and ``responseId``.

Output is a part's ``text`` (reasoning when the part says ``thought: true``: the
model's thinking, billed as output), a ``functionCall``'s arguments (a tool
call; with Vertex AI's streamed arguments the call's first part names it and
later nameless parts carry ``partialArgs``) and ``executableCode``'s code. A
candidate's ``finishReason`` (``STOP``, ``MAX_TOKENS``, ``SAFETY``,
``MALFORMED_FUNCTION_CALL``, ...) is kept as sent and finishes the answer, as
does a ``promptFeedback.blockReason`` (the prompt was refused: no candidate
comes): the stream is then ``completed``, whatever follows. An ``{"error":
{...}}`` (after status 200 it comes as bare JSON, which the framer hands over as
an event) is an ``error`` with its ``status`` as the type and its ``code``.

Usage: the last ``usageMetadata`` is authoritative (``recorder.core.usage.
from_gemini``); its output counts are final once the answer finished, and then a
prompt count left out is 0 (a prompt Vertex AI's Model Armor refused carries
only ``trafficType``). A stream cut before that has its input as reported and
its output estimated from what was streamed. Vertex AI's ``trafficType``
(``ON_DEMAND``, ``PROVISIONED_THROUGHPUT``, ...) or the Gemini API's
``serviceTier`` (``standard``, ``flex``, ``priority``) is the service tier,
lower-cased.

Fast path: the chunks of a stream differ mostly in their text and in the running
counts of their ``usageMetadata`` (``candidatesTokenCount``,
``totalTokenCount``, ``thoughtsTokenCount``), which only the last chunk's usage
settles. The first chunk whose whole effect is one text (or thought) part is
parsed in full and kept as a byte template (recorder.core.protocols.template)
with holes for those counts; a later chunk that matches it is read without a
parse. So that both paths say the same, the usage as sent (``raw_usage``) is
kept only when it is final; a cut stream's input is the prompt count every chunk
repeats.
"""

from __future__ import annotations

from typing import Any

import orjson

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.protocols.template import HoleKind
from recorder.core.usage import from_gemini

_TEXT = ("candidates", 0, "content", "parts", 0, "text")
# the running counts, another on every chunk: holes of the template
_IGNORED = tuple(
    (("usageMetadata", name), HoleKind.INT)
    for name in ("candidatesTokenCount", "totalTokenCount", "thoughtsTokenCount")
)
_CHUNK_KEYS = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId", "createTime"})
_CANDIDATE_KEYS = frozenset({"content", "index"})
_CONTENT_KEYS = frozenset({"parts", "role"})
FAST_PATH = True  # tests turn it off to check that both paths agree


class GeminiInterpreter(Interpreter):
    """Interpreter for ``:streamGenerateContent`` and ``:generateContent``."""

    endpoint = "generate_content"
    provider = "gcp.gemini"
    json_array = True
    bare_json = True

    __slots__ = ("_finish", "_finished", "_last_usage", "_tools")

    def __init__(self) -> None:
        super().__init__(fast=FAST_PATH)
        self._finish: dict[int, str] = {}  # candidate index -> finish reason
        self._finished = False  # a finish reason or a block reason came
        self._tools: set[tuple[int, str]] = set()
        self._last_usage: dict[str, Any] | None = None  # the last usageMetadata read

    def interpret(self, event: Event) -> int:
        obj = self.parse(event.data)
        if obj is None:
            return 0
        chars = self._chunk(obj)
        if chars and self._learnable and not self._finished:
            kind = _learnable(obj)
            if kind is not None:
                self.learn_from(event, obj, _TEXT, kind, _IGNORED)
        return chars

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
            self._last_usage = usage
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
        raw = self._last_usage
        if raw is not None:
            # the answer's own usage, final: a prompt count left out (Google omits
            # zeros; Vertex AI's Model Armor refuses a prompt before it is counted
            # and sends only the traffic type) is 0, not unknown
            counted = raw if "promptTokenCount" in raw else {**raw, "promptTokenCount": 0}
            self.obs.report_usage(from_gemini(counted, final=True), raw)

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
            name, cid = call.get("name"), call.get("id")
            # Vertex AI's streamed arguments: the part that names the call opens it,
            # then nameless parts carry ``partialArgs`` until an empty one closes it
            if name or cid:
                key = (index, str(cid or f"{name}#{len(self._tools)}"))
                if key not in self._tools:
                    self._tools.add(key)
                    obs.tool_calls += 1
            args = _compact_json(call.get("args")) + _partial_args(call.get("partialArgs"))
            return obs.add_tool(args)
        code = part.get("executableCode")
        if isinstance(code, dict):
            return obs.add_tool(code.get("code"))
        return 0


def _learnable(obj: dict[str, Any]) -> OutputKind | None:
    """The kind of output of a chunk whose whole effect is one text part (and its
    running usage), else None: only such a chunk may teach a template."""
    if not obj.keys() <= _CHUNK_KEYS:
        return None
    candidates = obj.get("candidates")
    if type(candidates) is not list or len(candidates) != 1 or type(candidates[0]) is not dict:
        return None
    cand = candidates[0]
    content = cand.get("content")
    if not cand.keys() <= _CANDIDATE_KEYS or type(content) is not dict:
        return None
    parts = content.get("parts")
    if not content.keys() <= _CONTENT_KEYS or type(parts) is not list or len(parts) != 1:
        return None
    part = parts[0]
    if type(part) is not dict or type(part.get("text")) is not str:
        return None
    if part.keys() == {"text"}:
        return OutputKind.TEXT
    if part.keys() == {"text", "thought"} and part["thought"] is True:
        return OutputKind.REASONING
    return None


def _partial_args(partials: Any) -> str:
    """The values a streamed call's ``partialArgs`` carry (``stringValue``'s text,
    another value as JSON): the output it adds to the arguments."""
    if type(partials) is not list:
        return ""
    out = []
    for partial in partials:
        if type(partial) is not dict:
            continue
        text = partial.get("stringValue")
        if isinstance(text, str):
            out.append(text)
            continue
        out.extend(orjson.dumps(v).decode() for k, v in partial.items() if k.endswith("Value"))
    return "".join(out)


def _compact_json(value: Any) -> str:
    """Tool arguments as compact JSON (a call's ``args`` come whole, as an object)."""
    if not value:
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return ""
