"""What every protocol interpreter shares: the facts it accumulates.

Outcome precedence (INTERFACES.md): the first terminal or error event decides;
whatever follows it is still counted (events, output, usage) but cannot change
the outcome. Error fields are filled by the first event that carries them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from recorder.core.sse import Event
from recorder.core.usage import Usage

JSONDecodeError = orjson.JSONDecodeError
loads = orjson.loads


class Observations:
    """Facts derived from the events of one stream (or from one JSON body)."""

    __slots__ = (
        "error_code",
        "error_message",
        "error_type",
        "finish_reason",
        "output_chars",
        "output_final",
        "parse_issues",
        "raw_usage",
        "response_id",
        "response_model",
        "terminal",
        "tool_calls",
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
        self.terminal: str | None = None  # completed | incomplete | error
        self.error_type: str | None = None
        self.error_code: str | None = None
        self.error_message: str | None = None
        self.parse_issues = 0

    def decide(self, outcome: str) -> None:
        """Record a terminal or error event; only the first one counts."""
        if self.terminal is None:
            self.terminal = outcome

    def set_error(self, etype: Any, code: Any, message: Any) -> None:
        """Fill the error fields that are still empty."""
        if self.error_type is None and etype is not None:
            self.error_type = str(etype)
        if self.error_code is None and code is not None:
            self.error_code = str(code)
        if self.error_message is None and message is not None:
            self.error_message = str(message)


class Interpreter:
    """Base class: one instance per stream, fed events in order."""

    endpoint: ClassVar[str]
    provider: ClassVar[str]

    __slots__ = ("obs",)

    def __init__(self) -> None:
        self.obs = Observations()

    def handle(self, event: Event) -> int:
        """Interpret one event; return the output characters it carried (0: no output)."""
        raise NotImplementedError

    def read_body(self, body: bytes) -> int:
        """Interpret a whole non-streamed JSON response body; return output chars."""
        raise NotImplementedError

    def parse(self, data: bytes) -> dict[str, Any] | None:
        """JSON object of an event, or None (counted as a parse issue)."""
        try:
            obj = loads(data)
        except JSONDecodeError:
            self.obs.parse_issues += 1
            return None
        if not isinstance(obj, dict):
            self.obs.parse_issues += 1
            return None
        return obj


def text_len(value: Any) -> int:
    """Length of an output string; anything else (None, numbers) is no output."""
    return len(value) if isinstance(value, str) else 0
