"""Faults chosen per request: the ``x-sim-fault`` header and the model-name suffix.

A fault spec is a list of ``name`` or ``name=value`` items. In the header they
are separated by commas (``x-sim-fault: keepalive=0.5,stall=2``); in a model
name they follow the model, each after a ``+`` (``gpt-4o+keepalive=0.5+stall=2``).
Both may be used at once; the header wins where they disagree. The simulator's
``default_faults`` apply first, under both. Times are seconds as floats, so a
test can ask for ``stall=0.05``.

Unknown names and bad values are refused with a 400 whose message lists the
known names: a typo must not silently run a clean stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

ENCODINGS = ("identity", "gzip", "deflate", "br", "zstd")
FRAMINGS = ("chunked", "length", "eof")
LINE_ENDS = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}
USAGE_MODES = ("default", "on", "off", "finish")
ERROR_SHAPES = ("both", "failed", "error")

# One line per fault, for `recorder simulate` and the 400 message.
FAULT_HELP = """\
keepalive=N       ': hopbase-keepalive' comment every N s of the stream (between events)
stall=S[@K]       pause S s before event K (default: right after the first output delta)
delay=S           pause S s before every event after the first
ttft=S            pause S s before the first output delta
body_delay=S      pause S s between the response headers and the first event
header_delay=S    pause S s before the status line
rst=K             after K events: TCP reset (SO_LINGER 0, then close)
fin=K             after K events: close (FIN) without ending the body framing
midevent          with rst/fin: also send the first half of the next event
split=S[@K]       write event K in two halves, S s apart (default: the first output delta)
drop[=rst]        close (or reset) the connection without any response
eof | length | chunked   body framing (default: chunked for streams, length for JSON)
error=K           after K events: the protocol's error event (Anthropic: overloaded_error)
error_code=CODE   the code/type of error= and status=
error_done        Chat: 'data: [DONE]' after the error event
error_shape=both|failed|error   Responses: 'error' + 'response.failed' (both), or one
interrupt=K       after K events: the gateway's 'Response stream interrupted, please retry'
status=CODE       HTTP error status with the provider's JSON error body (429, 500, 529...)
retry_after=S     Retry-After header value for status=
usage=on|off|finish   usage forced on, off, or (Chat) on the finish chunk
tools[=N]         call N tools (default 1) even if the request has none
notools           never call a tool
reasoning         stream reasoning (Chat reasoning_content, Responses summary, thinking)
hidden=N          N reasoning tokens reported in usage but never streamed
lang=en|ja        answer language (default: ja when the last user message has Japanese)
deltas=N          number of text deltas in the answer
cache_read=N      N prompt tokens read from cache
cache_write=N     N prompt tokens written to cache
compress[=ENC]    compress per Accept-Encoding, or force gzip|br|zstd|deflate|identity
crlf | cr         line ends of the SSE body (lineend=lf|crlf|cr)
bytewise[=S]      one byte per write (and per chunk), S s between bytes
close             'Connection: close' and close after the response
bom               a UTF-8 BOM before the first event
dup_start         Anthropic: send message_start twice
ws_close=K        WebSocket: after K events of a response, a close frame (1011)
deflate           WebSocket: compress messages (permessage-deflate) when the client offers it
fail_first[=N]    the failures above (rst, fin, drop, error, interrupt, status) only for
                  the first N requests (default 1) of the same body; later ones are
                  answered clean, as a flaky upstream answers a client that retries
"""


class FaultError(ValueError):
    """A fault spec that cannot be honoured (unknown name, bad value)."""


@dataclass(slots=True)
class Faults:
    """Every knob a request can turn. Defaults are a clean, prompt stream."""

    keepalive: float | None = None
    stall: float = 0.0
    stall_at: int | None = None
    delay: float = 0.0
    ttft: float = 0.0
    body_delay: float = 0.0
    header_delay: float = 0.0
    cut: str | None = None  # "rst" | "fin"
    cut_after: int = 0
    midevent: bool = False
    split: float | None = None  # pause inside one event (written in two halves)
    split_at: int | None = None
    drop: str | None = None  # "fin" | "rst"
    framing: str | None = None
    error_after: int | None = None
    error_code: str | None = None
    error_done: bool = False
    error_shape: str = "both"
    interrupt_after: int | None = None
    status: int | None = None
    retry_after: float | None = None
    usage: str = "default"
    tools: int | None = None  # None: as the request says; 0: never
    reasoning: bool = False
    hidden: int = 0
    lang: str | None = None
    deltas: int | None = None
    cache_read: int = 0
    cache_write: int = 0
    compress: str | None = None  # None: identity; "auto": per Accept-Encoding
    line_end: str = "lf"
    bytewise: float | None = None
    close: bool = False
    bom: bool = False
    dup_start: bool = False
    ws_close: int | None = None  # WebSocket: a close frame after this many events
    deflate: bool = False  # WebSocket: permessage-deflate when offered
    # the failures apply to the first N requests of the same body only (None: all)
    fail_first: int | None = None
    spec: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The normalised spec, comma-separated, in the order items were given."""
        return ",".join(self.spec)

    def clear_failures(self) -> None:
        """No cut, drop, error event, interruption or error status: the answer a
        retry gets from a flaky upstream (``fail_first``). Timing and content
        faults stay."""
        self.cut = None
        self.cut_after = 0
        self.midevent = False
        self.drop = None
        self.error_after = None
        self.interrupt_after = None
        self.status = None

    def to_dict(self) -> dict[str, Any]:
        """Every field but the spec, for the ground truth."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "spec"}


def _seconds(name: str, value: str | None) -> float:
    if value is None:
        raise FaultError(f"fault {name!r} needs a value in seconds ({name}=0.5)")
    try:
        s = float(value)
    except ValueError:
        raise FaultError(f"fault {name!r}: {value!r} is not a number of seconds") from None
    if not math.isfinite(s) or s < 0:
        raise FaultError(f"fault {name!r}: {value!r} must be a finite number >= 0")
    return s


def _seconds_at(name: str, value: str | None) -> tuple[float, int | None]:
    """``SECONDS`` or ``SECONDS@N``: how long, and at which event (None: where the
    fault puts it when not told)."""
    if value is not None and "@" in value:
        secs, _, at = value.partition("@")
        return _seconds(name, secs), _count(name, at)
    return _seconds(name, value), None


def _count(name: str, value: str | None, default: int | None = None) -> int:
    if value is None:
        if default is None:
            raise FaultError(f"fault {name!r} needs a whole number ({name}=3)")
        return default
    try:
        n = int(value)
    except ValueError:
        raise FaultError(f"fault {name!r}: {value!r} is not a whole number") from None
    if n < 0:
        raise FaultError(f"fault {name!r}: {value!r} must be >= 0")
    return n


def _choice(name: str, value: str | None, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise FaultError(f"fault {name!r}: {value!r} is not one of {', '.join(choices)}")
    return value


def _flag(name: str, value: str | None) -> None:
    if value is not None:
        raise FaultError(f"fault {name!r} takes no value")


def _keepalive(f: Faults, name: str, value: str | None) -> None:
    n = _seconds(name, value)
    if n <= 0:
        raise FaultError("fault 'keepalive' needs an interval > 0")
    f.keepalive = n


def _stall(f: Faults, name: str, value: str | None) -> None:
    f.stall, f.stall_at = _seconds_at(name, value)


def _split(f: Faults, name: str, value: str | None) -> None:
    f.split, f.split_at = _seconds_at(name, value)


def _cut(f: Faults, name: str, value: str | None) -> None:
    f.cut = name
    f.cut_after = _count(name, value)


def _drop(f: Faults, name: str, value: str | None) -> None:
    f.drop = "fin" if value is None else _choice(name, value, ("fin", "rst"))


def _framing_flag(f: Faults, name: str, value: str | None) -> None:
    _flag(name, value)
    f.framing = name


def _framing(f: Faults, name: str, value: str | None) -> None:
    f.framing = _choice(name, value, FRAMINGS)


def _error(f: Faults, name: str, value: str | None) -> None:
    f.error_after = _count(name, value)


def _error_code(f: Faults, name: str, value: str | None) -> None:
    if not value:
        raise FaultError("fault 'error_code' needs a value")
    f.error_code = value


def _error_shape(f: Faults, name: str, value: str | None) -> None:
    f.error_shape = _choice(name, value, ERROR_SHAPES)


def _interrupt(f: Faults, name: str, value: str | None) -> None:
    f.interrupt_after = _count(name, value)


def _status(f: Faults, name: str, value: str | None) -> None:
    code = _count(name, value)
    if not 400 <= code <= 599:
        raise FaultError("fault 'status' takes an HTTP error status, 400 to 599")
    f.status = code


def _usage(f: Faults, name: str, value: str | None) -> None:
    f.usage = _choice(name, value, USAGE_MODES)


def _tools(f: Faults, name: str, value: str | None) -> None:
    f.tools = _count(name, value, default=1)


def _notools(f: Faults, name: str, value: str | None) -> None:
    _flag(name, value)
    f.tools = 0


def _lang(f: Faults, name: str, value: str | None) -> None:
    f.lang = _choice(name, value, ("en", "ja"))


def _deltas(f: Faults, name: str, value: str | None) -> None:
    n = _count(name, value)
    if n < 1:
        raise FaultError("fault 'deltas' needs at least 1")
    f.deltas = n


def _compress(f: Faults, name: str, value: str | None) -> None:
    f.compress = "auto" if value is None else _choice(name, value, ENCODINGS)


def _line_end_flag(f: Faults, name: str, value: str | None) -> None:
    _flag(name, value)
    f.line_end = name


def _line_end(f: Faults, name: str, value: str | None) -> None:
    f.line_end = _choice(name, value, tuple(LINE_ENDS))


def _bytewise(f: Faults, name: str, value: str | None) -> None:
    f.bytewise = 0.0 if value is None else _seconds(name, value)


def _fail_first(f: Faults, name: str, value: str | None) -> None:
    f.fail_first = _count(name, value, default=1)


def _set_seconds(f: Faults, name: str, value: str | None) -> None:
    setattr(f, name, _seconds(name, value))


def _set_count(f: Faults, name: str, value: str | None) -> None:
    setattr(f, name, _count(name, value))


def _set_flag(f: Faults, name: str, value: str | None) -> None:
    _flag(name, value)
    setattr(f, name, True)


_Apply = Callable[[Faults, str, str | None], None]

# Each fault's name, and how its value is read into ``Faults`` (the attribute of the
# same name for the ``_set_*`` ones).
_APPLY: dict[str, _Apply] = {
    "keepalive": _keepalive,
    "stall": _stall,
    "split": _split,
    **dict.fromkeys(("delay", "ttft", "body_delay", "header_delay", "retry_after"), _set_seconds),
    **dict.fromkeys(("rst", "fin"), _cut),
    **dict.fromkeys(("ws_close", "hidden", "cache_read", "cache_write"), _set_count),
    **dict.fromkeys(
        ("midevent", "error_done", "close", "bom", "dup_start", "reasoning", "deflate"), _set_flag
    ),
    "drop": _drop,
    **dict.fromkeys(("eof", "length", "chunked"), _framing_flag),
    "framing": _framing,
    "error": _error,
    "error_code": _error_code,
    "error_shape": _error_shape,
    "interrupt": _interrupt,
    "status": _status,
    "usage": _usage,
    "tools": _tools,
    "notools": _notools,
    "lang": _lang,
    "deltas": _deltas,
    "compress": _compress,
    **dict.fromkeys(("crlf", "cr", "lf"), _line_end_flag),
    "lineend": _line_end,
    "bytewise": _bytewise,
    "fail_first": _fail_first,
}


def apply_item(f: Faults, item: str) -> None:
    """Apply one ``name`` or ``name=value`` item to ``f``."""
    item = item.strip()
    if not item:
        return
    name, sep, raw = item.partition("=")
    name = name.strip().lower().replace("-", "_")
    value: str | None = raw.strip() if sep else None
    apply = _APPLY.get(name)
    if apply is None:
        raise FaultError(f"unknown fault {name!r}; known faults:\n{FAULT_HELP}")
    apply(f, name, value)
    f.spec.append(name if value is None else f"{name}={value}")


def parse_faults(*specs: str, sep: str = ",", into: Faults | None = None) -> Faults:
    """Parse spec strings (items separated by ``sep``) into one :class:`Faults`."""
    f = into if into is not None else Faults()
    for spec in specs:
        for item in spec.split(sep):
            apply_item(f, item)
    return f


def split_model(model: str) -> tuple[str, str]:
    """``"gpt-4o+stall=2+rst=5"`` -> ``("gpt-4o", "stall=2+rst=5")``."""
    base, _, suffix = model.partition("+")
    return base, suffix
