"""What token estimation works from: counts, never text.

:class:`OutputCounts` is a stream's output as the interpreter counted it
(characters by kind and writing system, deltas, tool calls);
:class:`InputCounts` is a request body's, taken by :func:`count_request` off
the event loop. Both travel on the record as ``output_breakdown`` and
``input_breakdown``, so a stored record can be estimated again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from recorder.core.json_object import json_object

# -- what estimation works from -----------------------------------------------


@dataclass(slots=True)
class OutputCounts:
    """The output of one stream, as counts (see ``Observations.add_*``)."""

    latin: int = 0
    alphabetic: int = 0
    cjk: int = 0
    tool: int = 0
    reasoning: int = 0  # of latin + alphabetic + cjk: full reasoning text
    summary: int = 0  # reasoning summaries: output, but not billed as output tokens
    deltas: int = 0  # non-empty output deltas, summaries excluded
    unstreamed: int = 0  # tool arguments sent whole in an output item, not as deltas
    tool_calls: int = 0

    @property
    def text(self) -> int:
        """Characters of billed text (latin + alphabetic + cjk)."""
        return self.latin + self.alphabetic + self.cjk

    @classmethod
    def from_observations(cls, obs: Any) -> OutputCounts:
        """The counts an interpreter's ``Observations`` accumulated."""
        text = int(obs.text_chars)
        alphabetic, cjk = int(obs.alphabetic_chars), int(obs.cjk_chars)
        return cls(
            latin=max(0, text - alphabetic - cjk),
            alphabetic=alphabetic,
            cjk=cjk,
            tool=int(obs.tool_chars),
            reasoning=int(obs.reasoning_chars),
            summary=int(obs.summary_chars),
            deltas=int(obs.output_deltas),
            unstreamed=int(obs.unstreamed_chars),
            tool_calls=int(obs.tool_calls),
        )

    def to_breakdown(self) -> dict[str, int]:
        """The record's ``output_breakdown`` (``tool_calls`` lives on the record)."""
        return {
            "latin": self.latin,
            "alphabetic": self.alphabetic,
            "cjk": self.cjk,
            "tool": self.tool,
            "reasoning": self.reasoning,
            "summary": self.summary,
            "deltas": self.deltas,
            "unstreamed": self.unstreamed,
        }

    @classmethod
    def from_breakdown(cls, breakdown: Mapping[str, Any], tool_calls: int = 0) -> OutputCounts:
        """Counts back from a record's ``output_breakdown``."""
        counts = cls(tool_calls=tool_calls)
        for key in _OUTPUT_KEYS:
            setattr(counts, key, _count(breakdown.get(key)))
        return counts


_OUTPUT_KEYS = (
    "latin",
    "alphabetic",
    "cjk",
    "tool",
    "reasoning",
    "summary",
    "deltas",
    "unstreamed",
)


@dataclass(slots=True)
class InputCounts:
    """A request body, as counts: characters by kind, messages, images, files."""

    latin: int = 0
    alphabetic: int = 0
    cjk: int = 0
    tool: int = 0  # tool / function definitions and output schemas, as JSON
    messages: int = 0  # messages or input items, plus the system prompt / instructions
    images: int = 0
    files: int = 0  # documents, audio and files: not counted in the figures
    tools: int = 0  # tools defined
    text_tokens: int | None = None  # every counted string, by a real tokenizer
    encoding: str | None = None  # that tokenizer's vocabulary

    def add_text(self, value: str) -> None:
        """Count one string of prompt text by writing system."""
        n = len(value)
        if value.isascii():
            self.latin += n
            return
        ascii_n = len(value.encode("ascii", "ignore"))
        extra = len(value.encode("utf-8", "surrogatepass")) - (
            len(value.encode("utf-16-le", "surrogatepass")) >> 1
        )
        rest = n - ascii_n
        cjk = extra - rest
        self.latin += ascii_n
        self.cjk += cjk
        self.alphabetic += rest - cjk

    def to_breakdown(self) -> dict[str, int]:
        """The record's ``input_breakdown``."""
        out = {k: int(getattr(self, k)) for k in _INPUT_KEYS}
        if self.text_tokens is not None:
            out["text_tokens"] = self.text_tokens
        return out

    @classmethod
    def from_breakdown(cls, breakdown: Mapping[str, Any]) -> InputCounts:
        """Counts back from a record's ``input_breakdown``."""
        counts = cls()
        for key in _INPUT_KEYS:
            setattr(counts, key, _count(breakdown.get(key)))
        tokens = breakdown.get("text_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            counts.text_tokens = tokens
        return counts


_INPUT_KEYS = ("latin", "alphabetic", "cjk", "tool", "messages", "images", "files", "tools")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# -- request bodies -------------------------------------------------------------

TokenCounter = Callable[[str], int]

# top-level keys holding the conversation, and those holding schemas
_CONTENT_KEYS = ("system", "instructions", "messages", "input", "prompt")
_SCHEMA_KEYS = ("tools", "functions", "response_format", "text", "output_format")
_IMAGE_TYPES = frozenset({"image_url", "image", "input_image"})
_FILE_TYPES = frozenset({"file", "input_file", "document", "input_audio", "audio"})
_SKIP_KEYS = frozenset(
    {
        "type",
        "role",
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "signature",
        "encrypted_content",
        "cache_control",
        "status",
        "annotations",
        "logprobs",
        "citations",
    }
)
_MAX_DEPTH = 64


def count_request(
    body: bytes,
    endpoint: str,
    *,
    counter: TokenCounter | None = None,
    encoding: str | None = None,
) -> InputCounts | None:
    """Counts of a JSON request body (None if it is not a JSON object).

    Costs a JSON parse and one pass over the strings: call it off the event
    loop. ``counter`` (a tokenizer's ``len(encode(text))``) also counts every
    string exactly into ``text_tokens``.
    """
    obj = json_object(body)
    if obj is None:
        return None
    counts = InputCounts()
    # Context the provider holds and the body only names (a previous response, a
    # stored conversation or prompt) is billed input that cannot be counted here:
    # like a file, it makes the estimate a lower bound and the request unfit to
    # calibrate from.
    if (
        obj.get("previous_response_id")
        or obj.get("conversation")
        or isinstance(obj.get("prompt"), dict)
    ):
        counts.files += 1
    walker = _Walker(counts, counter)
    for key in _CONTENT_KEYS:
        value = obj.get(key)
        if value is None:
            continue
        if key in ("messages", "input") and isinstance(value, list):
            counts.messages += len(value)
        elif value:
            counts.messages += 1
        walker.walk(value, 0)
    for key in _SCHEMA_KEYS:
        value = obj.get(key)
        if not value or (key == "text" and not isinstance(value, dict)):
            continue
        if key in ("tools", "functions") and isinstance(value, list):
            counts.tools += len(value)
        try:
            schema = orjson.dumps(value).decode()
        except TypeError:  # pragma: no cover - parsed JSON always dumps
            continue
        counts.tool += len(schema)
        if counter is not None:
            walker.tokens += counter(schema)
    if counter is not None:
        counts.text_tokens = walker.tokens
        counts.encoding = encoding
    return counts


class _Walker:
    __slots__ = ("counter", "counts", "tokens")

    def __init__(self, counts: InputCounts, counter: TokenCounter | None) -> None:
        self.counts = counts
        self.counter = counter
        self.tokens = 0

    def text(self, value: str, *, tool: bool = False) -> None:
        if not value:
            return
        if tool:
            self.counts.tool += len(value)
        else:
            self.counts.add_text(value)
        if self.counter is not None:
            self.tokens += self.counter(value)

    def walk(self, value: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if isinstance(value, str):
            self.text(value)
        elif isinstance(value, list):
            for item in value:
                self.walk(item, depth + 1)
        elif isinstance(value, dict):
            kind = value.get("type")
            if kind in _IMAGE_TYPES:
                self.counts.images += 1
                return
            if kind in _FILE_TYPES:
                self.counts.files += 1
                return
            for key, item in value.items():
                if key in _SKIP_KEYS:
                    continue
                if key in ("arguments", "input", "partial_json") and not isinstance(item, list):
                    # tool-call arguments in the history: JSON, at the tool ratio
                    if isinstance(item, str):
                        self.text(item, tool=True)
                    elif item:
                        self.text(orjson.dumps(item).decode(), tool=True)
                    continue
                self.walk(item, depth + 1)
