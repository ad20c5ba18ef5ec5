"""The facts one stream's interpreter accumulates: :class:`Observations`.

Outcome precedence (docs/record.md, "Outcomes"): the first terminal or error event decides;
whatever follows it is still counted (events, output, usage) but cannot change
the outcome. Error fields are filled by the first event that carries them.

What estimation needs of the output (``recorder.core.estimate``) is counted as
the deltas pass, never kept: the interpreters hand every output string to one of
the ``add_*`` methods, which count its characters by kind (:class:`OutputKind`:
text, reasoning, tool arguments, reasoning summaries) and by writing system, and
count the deltas. An ASCII string costs one ``str.isascii`` check (constant time
in CPython); only other strings are classified, by UTF-8 width:

- ``alphabetic``: U+0080..U+07FF (accented Latin, Greek, Cyrillic, Hebrew, Arabic, ...);
- ``cjk``: U+0800 and above (CJK, kana, Hangul, Indic scripts, Thai, typographic
  punctuation, emoji): the wide scripts, at one or two characters a token.

ASCII (``latin``) is what remains: ``text + reasoning - alphabetic - cjk``.
"""

from __future__ import annotations

from codecs import utf_16_le_encode
from enum import IntEnum
from typing import Any

from recorder.core.record import Outcome
from recorder.core.usage import Usage


class OutputKind(IntEnum):
    """A kind of output, each counted by one ``add_*`` method (see :meth:`Observations.add`).

    Integers because the C template reader (``_reader.c``) takes them as such."""

    TEXT = 0  # text, refusal, transcripts (billed output)
    REASONING = 1  # full reasoning text (billed output, a part of the text)
    TOOL = 2  # tool-call arguments, code, commands
    SUMMARY = 3  # reasoning summaries (not billed as output tokens)


class Observations:
    """Facts derived from the events of one stream (or from one JSON body)."""

    __slots__ = (
        "alphabetic_chars",
        "cjk_chars",
        "error_code",
        "error_message",
        "error_type",
        "finish_reason",
        "output_chars",
        "output_deltas",
        "output_final",
        "parse_issues",
        "raw_usage",
        "reasoning_chars",
        "response_id",
        "response_model",
        "server_tools",
        "service_tier",
        "summary_chars",
        "terminal",
        "text_chars",
        "tool_calls",
        "tool_chars",
        "unstreamed_chars",
        "usage",
    )

    def __init__(self) -> None:
        self.output_chars = 0
        self.tool_calls = 0
        self.finish_reason: str | None = None
        self.response_model: str | None = None
        self.response_id: str | None = None
        self.usage: Usage | None = None
        self.raw_usage: dict[str, Any] | None = None
        self.output_final = False
        self.terminal: Outcome | None = None  # completed | incomplete | error
        self.error_type: str | None = None
        self.error_code: str | None = None
        self.error_message: str | None = None
        self.parse_issues = 0
        # the output, by kind (their sum is output_chars) and writing system
        self.text_chars = 0  # text, refusal, transcripts, reasoning (billed output)
        self.reasoning_chars = 0  # the part of text_chars that is full reasoning
        self.tool_chars = 0  # tool-call arguments, code, commands
        self.summary_chars = 0  # reasoning summaries (not billed as output tokens)
        self.alphabetic_chars = 0  # of text_chars: U+0080..U+07FF
        self.cjk_chars = 0  # of text_chars: U+0800 and above
        self.output_deltas = 0  # non-empty output strings, summaries excluded
        self.unstreamed_chars = 0  # tool arguments that came whole in an item, not as deltas
        self.service_tier: str | None = None
        self.server_tools: dict[str, int] | None = None  # e.g. {"web_search": 2}

    def decide(self, outcome: Outcome) -> None:
        """Record a terminal or error event; only the first one counts."""
        if self.terminal is None:
            self.terminal = outcome

    def report_usage(self, usage: Usage, raw: dict[str, Any]) -> None:
        """The provider's final usage (normalised: ``usage``; as sent: ``raw``)."""
        self.usage = usage
        self.raw_usage = raw
        self.output_final = True

    def set_error(self, etype: Any, code: Any, message: Any) -> None:
        """Fill the error fields that are still empty."""
        if self.error_type is None and etype is not None:
            self.error_type = str(etype)
        if self.error_code is None and code is not None:
            self.error_code = str(code)
        if self.error_message is None and message is not None:
            self.error_message = str(message)

    def error_event(self, obj: dict[str, Any]) -> None:
        """An OpenAI ``error`` event: the error is its nested ``error`` object, or the
        event itself (Realtime and Responses send both shapes)."""
        self.decide("error")
        nested = obj.get("error")
        err = nested if isinstance(nested, dict) else obj
        self.set_error(err.get("type") or "error", err.get("code"), err.get("message"))

    def add_text(self, value: Any) -> int:
        """Count one piece of output text (or refusal); return its length."""
        if type(value) is not str or not value:
            return 0
        n = len(value)
        self.text_chars += n
        self.output_deltas += 1
        if not value.isascii():
            self._scripts(value, n, len(value.encode("utf-8", "surrogatepass")))
        return n

    def add_reasoning(self, value: Any) -> int:
        """Count one piece of full reasoning text (billed as output); return its length."""
        n = self.add_text(value)
        self.reasoning_chars += n
        return n

    def add_tool(self, value: Any) -> int:
        """Count one piece of tool-call arguments (or code, commands); return its length."""
        if type(value) is not str or not value:
            return 0
        n = len(value)
        self.tool_chars += n
        self.output_deltas += 1
        return n

    def add_unstreamed(self, value: str) -> None:
        """Count tool arguments the model wrote but the stream sent whole, not as deltas."""
        self.unstreamed_chars += len(value)

    def add_summary(self, value: Any) -> int:
        """Count one piece of a reasoning summary (output, but not billed); return its length."""
        if type(value) is not str:
            return 0
        n = len(value)
        self.summary_chars += n
        return n

    def add(self, kind: OutputKind, value: Any) -> int:
        """Count one piece of output of this kind with its add_* method; return its length."""
        if kind is OutputKind.TEXT:
            return self.add_text(value)
        if kind is OutputKind.REASONING:
            return self.add_reasoning(value)
        if kind is OutputKind.TOOL:
            return self.add_tool(value)
        return self.add_summary(value)

    def add_server_tool(self, name: str) -> None:
        """Count one request of a provider-side tool (web search, file search, ...)."""
        tools = self.server_tools
        if tools is None:
            self.server_tools = {name: 1}
        else:
            tools[name] = tools.get(name, 0) + 1

    def _scripts(self, value: str, n: int, utf8: int) -> None:
        # Exact counts from encodings done in C (``utf8`` is the length of
        # value.encode("utf-8", "surrogatepass")): ``ascii`` ASCII characters;
        # UTF-8 minus UTF-16 length is (alphabetic + 2 cjk) less what astral
        # characters (4 UTF-8 bytes, 2 UTF-16 units) cancel, hence the formula.
        # (utf_16_le_encode is what str.encode("utf-16-le") calls, without the
        # codec lookup that costs more than the encoding of a short string)
        ascii_n = len(value.encode("ascii", "ignore"))
        extra = utf8 - (len(utf_16_le_encode(value, "surrogatepass")[0]) >> 1)
        rest = n - ascii_n
        cjk = extra - rest
        self.cjk_chars += cjk
        self.alphabetic_chars += rest - cjk
