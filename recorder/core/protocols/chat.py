"""OpenAI Chat Completions (and the many servers that speak it).

Output is ``delta.content``, ``delta.refusal``, ``delta.reasoning_content`` /
``delta.reasoning`` (DeepSeek, xAI, OpenRouter) and tool-call ``arguments``;
the role chunk (``content: ""`` or ``null``) is not. Usage is found by a
non-null ``usage``, wherever it comes (OpenAI: a last chunk with empty
``choices``; DeepSeek: the finish chunk). ``data: [DONE]`` is terminal; an
``{"error": ...}`` payload is an error event even after status 200.

Fast path: most events of a stream are content deltas that differ only in
their text (same id, model, fingerprint, index; ``finish_reason: null``). The
first such event is parsed in full, and the bytes around its text are kept as
a template; a later event that matches the template byte for byte around a
valid JSON string is known to say exactly what a full parse would (that text,
nothing else), so only the string is decoded. Anything else (usage, a finish
reason, tool calls, an error, a new shape) misses the template and is parsed in
full. OpenAI's per-event ``obfuscation`` padding is set aside before matching.
"""

from __future__ import annotations

from typing import Any

from recorder.core.protocols.base import Interpreter, JSONDecodeError, loads
from recorder.core.sse import Event
from recorder.core.usage import from_openai_chat

_DONE = b"[DONE]"
_TEXT_KEYS = frozenset({"content", "refusal"})
_REASONING_KEYS = frozenset({"reasoning_content", "reasoning"})  # DeepSeek, xAI / OpenRouter
_OBFUSCATION = b',"obfuscation":"'
FAST_PATH = True  # tests turn it off to check that both paths agree


class ChatCompletionsInterpreter(Interpreter):
    """Interpreter for ``/v1/chat/completions``."""

    endpoint = "chat.completions"
    provider = "openai"

    __slots__ = ("_fast", "_finish", "_head", "_reasoning", "_tail", "_tools")

    def __init__(self) -> None:
        super().__init__()
        self._tools: dict[tuple[int, int], Any] = {}  # (choice, tool index) -> last call id
        self._finish: dict[int, str] = {}  # choice index -> finish reason
        self._fast = FAST_PATH
        self._head = b""  # the template's bytes before the text (b"": no template yet)
        self._tail = b""  # and after it
        self._reasoning = False  # the template's text is reasoning, not content

    def handle(self, event: Event) -> int:
        data = event.data
        head = self._head
        if head and data.startswith(head):
            tail = self._tail
            if data.endswith(tail):
                raw = data[len(head) : len(data) - len(tail)]
                if raw.isascii() and b"\\" not in raw and b'"' not in raw:
                    # the commonest event of all: plain ASCII text, a character a byte
                    n = len(raw)
                    if n:
                        obs = self.obs
                        obs.text_chars += n
                        obs.output_deltas += 1
                        obs.output_chars += n
                        if self._reasoning:
                            obs.reasoning_chars += n
                    return n
                text = _json_string(raw)
            else:
                text = self._match(data, len(head))
            if text is not None:
                obs = self.obs
                n = obs.add_reasoning(text) if self._reasoning else obs.add_text(text)
                obs.output_chars += n
                return n
        if data == _DONE:
            self.obs.decide("completed")
            return 0
        obj = self.parse(data)
        if obj is None:
            return 0
        chars = self._chunk(obj, streamed=True)
        if self._fast and chars:
            self._learn(data, obj)
        return chars

    def _match(self, data: bytes, start: int) -> str | None:
        """The text of an event that matches the template, or None."""
        tail = self._tail
        if not data.endswith(tail):
            cut = data.rfind(_OBFUSCATION)
            if cut < 0 or not data.endswith(b'"}'):
                return None
            if data.find(b'"', cut + len(_OBFUSCATION), -2) >= 0:
                return None
            data = data[:cut] + data[-1:]  # drop the padding field, keep the closing brace
            if not data.endswith(tail):
                return None
        return _json_string(data[start : len(data) - len(tail)])

    def _learn(self, data: bytes, obj: dict[str, Any]) -> None:
        """Keep ``data`` as the template if it is a plain text delta and nothing else."""
        choices = obj.get("choices")
        if obj.get("usage") is not None or "error" in obj or type(choices) is not list:
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
        marker = b'"' + key.encode() + b'":'
        at = data.find(marker)
        if at < 0 or data.find(marker, at + 1) >= 0:
            return
        start = at + len(marker)
        while data[start : start + 1] in (b" ", b"\t"):  # "key": "value" (spaced JSON)
            start += 1
        if data[start : start + 1] != b'"':
            return
        start += 1
        end = _string_end(data, start)
        if end < 0:
            return
        head, tail = data[:start], data[end:]
        cut = tail.rfind(_OBFUSCATION)
        if cut >= 0:
            if tail.find(b'"', cut + len(_OBFUSCATION), -2) >= 0 or not tail.endswith(b'"}'):
                return
            tail = tail[:cut] + tail[-1:]
        self._head, self._tail = head, tail
        self._reasoning = key in _REASONING_KEYS
        if self._match(data, len(head)) != value:  # the template must read its own event
            self._head = self._tail = b""

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


def _json_string(raw: bytes) -> str | None:
    """The text of ``raw`` if it is exactly the inside of one JSON string, else None."""
    if b"\\" not in raw and b'"' not in raw:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        text = loads(b'"' + raw + b'"')  # fails unless raw is exactly one string's inside
    except JSONDecodeError:
        return None
    return text if type(text) is str else None


def _string_end(data: bytes, start: int) -> int:
    """Index of the quote closing the JSON string that starts at ``start``, or -1."""
    i = start
    while True:
        j = data.find(b'"', i)
        if j < 0:
            return -1
        k = j
        while k > start and data[k - 1] == 0x5C:  # count the backslashes before it
            k -= 1
        if (j - k) % 2 == 0:
            return j
        i = j + 1
