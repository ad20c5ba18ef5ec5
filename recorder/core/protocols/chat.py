"""OpenAI Chat Completions (and the many servers that speak it).

Output is ``delta.content``, ``delta.refusal``, ``delta.reasoning_content`` /
``delta.reasoning`` (DeepSeek, xAI, OpenRouter), content given as a list of
parts (Mistral: ``text`` parts, and ``thinking`` parts of reasoning text) and
tool-call ``arguments``; the role chunk (``content: ""`` or ``null``) is not.
Usage is found by a non-null ``usage``, wherever it comes (OpenAI: a last chunk
with empty ``choices``; DeepSeek: the finish chunk); older Groq models send it
only in the last chunk's ``x_groq.usage``, Moonshot in the finishing choice
(``choices[0].usage``): those are read when no top-level ``usage`` came.
``data: [DONE]`` is terminal; an ``{"error": ...}`` payload is an error event
even after status 200.

Fast path: most events of a stream are content deltas that differ only in
their text (same id, model, fingerprint, index; ``finish_reason: null``), and
in OpenAI's ``obfuscation`` padding when the stream has it. The first such
event is parsed in full and kept as a byte template (recorder.core.protocols.
template); a later event that matches it is known to say exactly what a full
parse would (that text, nothing else), so only the text is decoded. Anything
else (usage, a finish reason, tool calls, an error, a new shape) misses the
template and is parsed in full.
"""

from __future__ import annotations

from typing import Any

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.protocols.template import HoleKind
from recorder.core.usage import from_openai_chat

_DONE = b"[DONE]"
_TEXT_KEYS = frozenset({"content", "refusal"})
_REASONING_KEYS = frozenset({"reasoning_content", "reasoning"})  # DeepSeek, xAI / OpenRouter
_IGNORED = (("obfuscation", HoleKind.STRING),)  # OpenAI's padding, another on every event
FAST_PATH = True  # tests turn it off to check that both paths agree


class ChatCompletionsInterpreter(Interpreter):
    """Interpreter for ``/v1/chat/completions``."""

    endpoint = "chat.completions"
    provider = "openai"

    __slots__ = ("_finish", "_tools")

    def __init__(self) -> None:
        super().__init__(fast=FAST_PATH)
        self._tools: dict[tuple[int, int], Any] = {}  # (choice, tool index) -> last call id
        self._finish: dict[int, str] = {}  # choice index -> finish reason

    def interpret(self, event: Event) -> int:
        data = event.data
        if data == _DONE:
            self.obs.decide("completed")
            return 0
        obj = self.parse(data)
        if obj is None:
            return 0
        chars = self._chunk(obj, streamed=True)
        if chars and self._learnable:
            self._learn(event, obj)
        return chars

    def _learn(self, event: Event, obj: dict[str, Any]) -> None:
        """Learn from the event if it is a plain text delta and nothing else."""
        choices = obj.get("choices")
        if (
            obj.get("usage") is not None
            or "x_groq" in obj
            or "error" in obj
            or type(choices) is not list
        ):
            return
        if len(choices) != 1 or type(choices[0]) is not dict:
            return
        choice = choices[0]
        delta = choice.get("delta")
        if choice.get("finish_reason") is not None or type(delta) is not dict or len(delta) != 1:
            return
        ((key, value),) = delta.items()
        if type(value) is not str or not value or key not in _TEXT_KEYS | _REASONING_KEYS:
            return
        kind = OutputKind.REASONING if key in _REASONING_KEYS else OutputKind.TEXT
        self.learn_from(event, obj, ("choices", 0, "delta", key), kind, _IGNORED)

    def read_body(self, body: bytes) -> int:
        obj = self.parse(body)
        if obj is None:
            return 0
        chars = self._chunk(obj, streamed=False)
        if self.obs.terminal is None:
            self.obs.decide("completed")
        return chars

    def _chunk(self, obj: dict[str, Any], *, streamed: bool) -> int:
        obs = self.obs
        error = obj.get("error")
        if error is not None:
            if isinstance(error, dict):
                obs.set_error(error.get("type") or "error", error.get("code"), error.get("message"))
            else:
                obs.set_error("error", None, error)
            obs.decide("error")
        if obs.response_id is None:
            rid = obj.get("id")
            if rid:
                obs.response_id = str(rid)
        if obs.response_model is None:
            model = obj.get("model")
            if model:
                obs.response_model = str(model)
        if obs.service_tier is None:
            tier = obj.get("service_tier")
            if isinstance(tier, str) and tier:
                obs.service_tier = tier
        usage = obj.get("usage")
        if isinstance(usage, dict):
            obs.report_usage(from_openai_chat(usage), usage)
        elif not obs.output_final:
            usage = _elsewhere(obj)
            if usage is not None:  # a top-level usage wins over it, wherever it comes
                obs.report_usage(from_openai_chat(usage), usage)
        choices = obj.get("choices")
        chars = 0
        if isinstance(choices, list):
            key = "delta" if streamed else "message"
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                index = choice.get("index")
                index = index if isinstance(index, int) else 0
                delta = choice.get(key)
                if isinstance(delta, dict):
                    chars += self._delta(index, delta)
                reason = choice.get("finish_reason")
                if reason and index not in self._finish:
                    # with n > 1 choices, the first choice's reason speaks for the stream
                    self._finish[index] = str(reason)
                    obs.finish_reason = self._finish.get(0) or self._finish[min(self._finish)]
        obs.output_chars += chars
        return chars

    def _parts(self, parts: list[Any]) -> int:
        """Content as a list of parts (Mistral's reasoning models): ``text`` parts
        are text; a ``thinking`` part holds a list of text parts of reasoning."""
        obs = self.obs
        chars = 0
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text":
                chars += obs.add_text(part.get("text"))
            elif kind == "thinking" and isinstance(part.get("thinking"), list):
                for inner in part["thinking"]:
                    if isinstance(inner, dict) and inner.get("type") == "text":
                        chars += obs.add_reasoning(inner.get("text"))
        return chars

    def _delta(self, index: int, delta: dict[str, Any]) -> int:
        obs = self.obs
        chars = 0
        # Only the keys present are visited (a delta mostly holds one): counting
        # an absent key is a no-op, so this is the same as asking for each.
        for key, value in delta.items():
            if key in _TEXT_KEYS:
                if type(value) is list:
                    chars += self._parts(value)
                else:
                    chars += obs.add_text(value)
            elif key in _REASONING_KEYS:
                chars += obs.add_reasoning(value)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for n, call in enumerate(calls):
                if not isinstance(call, dict):
                    continue
                tindex = call.get("index")
                slot = (index, tindex if isinstance(tindex, int) else n)
                cid = call.get("id")
                # A new call is a new (choice, index) slot, or a new id in a used
                # slot (some servers send every call with index 0).
                if slot not in self._tools or (cid and cid != self._tools[slot]):
                    self.obs.tool_calls += 1
                    self._tools[slot] = cid
                function = call.get("function")
                if isinstance(function, dict):
                    chars += obs.add_tool(function.get("arguments"))
        return chars


def _elsewhere(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The usage of a chunk without a top-level one: Groq's ``x_groq.usage``, or
    Moonshot's in the finishing choice (``choices[i].usage``)."""
    groq = obj.get("x_groq")
    usage = groq.get("usage") if isinstance(groq, dict) else None
    if isinstance(usage, dict):
        return usage
    choices = obj.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            usage = choice.get("usage") if isinstance(choice, dict) else None
            if isinstance(usage, dict):
                return usage
    return None
