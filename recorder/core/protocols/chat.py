"""OpenAI Chat Completions (and the many servers that speak it).

Output is ``delta.content``, ``delta.refusal``, ``delta.reasoning_content`` /
``delta.reasoning`` (DeepSeek, xAI, OpenRouter) and tool-call ``arguments``;
the role chunk (``content: ""`` or ``null``) is not. Usage is found by a
non-null ``usage``, wherever it comes (OpenAI: a last chunk with empty
``choices``; DeepSeek: the finish chunk). ``data: [DONE]`` is terminal; an
``{"error": ...}`` payload is an error event even after status 200.
"""

from __future__ import annotations

from typing import Any

from recorder.core.protocols.base import Interpreter
from recorder.core.sse import Event
from recorder.core.usage import from_openai_chat

_DONE = b"[DONE]"
_TEXT_KEYS = frozenset({"content", "refusal"})
_REASONING_KEYS = frozenset({"reasoning_content", "reasoning"})  # DeepSeek, xAI / OpenRouter


class ChatCompletionsInterpreter(Interpreter):
    """Interpreter for ``/v1/chat/completions``."""

    endpoint = "chat.completions"
    provider = "openai"

    __slots__ = ("_finish", "_tools")

    def __init__(self) -> None:
        super().__init__()
        self._tools: dict[tuple[int, int], Any] = {}  # (choice, tool index) -> last call id
        self._finish: dict[int, str] = {}  # choice index -> finish reason

    def handle(self, event: Event) -> int:
        data = event.data
        if data == _DONE:
            self.obs.decide("completed")
            return 0
        obj = self.parse(data)
        if obj is None:
            return 0
        return self._chunk(obj, streamed=True)

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
            obs.usage = from_openai_chat(usage)
            obs.raw_usage = usage
            obs.output_final = True
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

    def _delta(self, index: int, delta: dict[str, Any]) -> int:
        obs = self.obs
        chars = 0
        # Only the keys present are visited (a delta mostly holds one): counting
        # an absent key is a no-op, so this is the same as asking for each.
        for key, value in delta.items():
            if key in _TEXT_KEYS:
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
