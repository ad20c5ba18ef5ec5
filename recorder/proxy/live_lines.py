"""The live view's console lines: a record's summary, its line (text, coloured on
a terminal, or JSON), and the thread that writes them (``Printer``). Pure
formatting, apart from the printer's thread; ``recorder.proxy.live`` uses it, and
`recorder top` reads the same summaries from ``/streams``."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, TextIO

from mitmproxy.contrib import click as miniclick

from recorder.core.printable import printable
from recorder.core.record import StreamRecord
from recorder.core.short_id import SHORT_ID_CHARS
from recorder.core.short_id import short_id as short_id

# The characters of a record id the console shows (recorder.core.short_id: its end)
ID_CHARS = SHORT_ID_CHARS


def key_last4(api_key_id: str | None) -> str | None:
    """The key's last four characters, from a record's ``api_key_id`` (``…abcd:…``)."""
    if not api_key_id:
        return None
    return api_key_id.split(":", 1)[0].lstrip("…") or None


def summary(rec: StreamRecord) -> dict[str, Any]:
    """A finished record's summary: the console line's figures, and ``/streams``'s."""
    return {
        "id": rec.id,
        "started_at": rec.started_at,
        "endpoint": rec.endpoint,
        "provider": rec.provider,
        "model": rec.model or rec.response_model,
        "key_last4": key_last4(rec.api_key_id),
        "http_status": rec.http_status,
        "outcome": rec.outcome,
        "ttft_ms": rec.ttft_ms,
        "duration_ms": rec.duration_ms,
        "input_tokens": rec.input_tokens,
        "input_source": rec.input_source,
        "output_tokens": rec.output_tokens,
        "output_source": rec.output_source,
        "cost_usd": rec.cost_usd,
        "stalls": rec.stalls,
        "stall_ms": rec.stall_ms,
        "keepalives": rec.keepalives,
        "events": rec.events,
        "transport": rec.transport,
        "connection_id": rec.connection_id,
        # the provider's own measure of the request (Amazon Bedrock), beside duration_ms
        "provider_latency_ms": rec.provider_latency_ms,
    }


# -- console text -----------------------------------------------------------------


def _paint(text: str, colour: str | None, on: bool) -> str:
    """``text`` styled as mitmdump styles its flow lines (mitmproxy's own helper)."""
    if not on or colour is None:
        return text
    if colour == "dim":
        return str(miniclick.style(text, dim=True))
    return str(miniclick.style(text, fg=colour))


def duration(ms: float | None) -> str:
    """A duration as the console line and `recorder top` show it: milliseconds
    under a second (``3.2ms``, ``28ms``: a stream of a few milliseconds is not
    ``0.00s``), then seconds (``1.52s``, ``80.2s``, ``123s``)."""
    if ms is None:
        return "-"
    if ms < 9.95:
        return f"{ms:.1f}ms"
    if ms < 999.5:
        return f"{ms:.0f}ms"
    s = ms / 1000.0
    return f"{s:.2f}s" if s < 9.995 else f"{s:.1f}s" if s < 99.95 else f"{s:.0f}s"


def _tokens(value: int | None, source: str) -> str:
    if value is None:
        return "-"
    return f"~{value}" if source == "estimated" else str(value)


def money(cost: str | None) -> str:
    """A cost as the console shows it: ``$0.00047`` (``$-``: not costed)."""
    if cost is None:
        return "$-"
    try:
        return "$" + format(Decimal(cost).normalize(), "f")
    except (InvalidOperation, ValueError):
        return f"${cost}"


def _outcome_colour(outcome: str | None) -> str:
    if outcome == "completed":
        return "green"
    if outcome in ("http_error", "client_disconnect"):
        return "yellow"
    return "red"


def stream_line(s: dict[str, Any], *, colour: bool = False, clock: str = "") -> str:
    """One finished stream, the way ``mitmdump`` prints a flow (estimated figures
    ``~``; what came from the wire with its control characters escaped)."""
    cost = s["cost_usd"]
    stalls = s["stalls"] or 0
    parts = [
        clock,
        # the model is the client's (or the upstream's): shown, never obeyed
        _paint(printable(str(s["endpoint"])), "cyan", colour),
        # one response of many on a WebSocket connection
        "ws" if s.get("transport") == "websocket" else "",
        printable(str(s["model"] or "-")),
        str(s["http_status"] if s["http_status"] is not None else "-"),
        _paint(printable(str(s["outcome"])), _outcome_colour(s["outcome"]), colour),
        f"ttft {duration(s['ttft_ms'])}",
        f"dur {duration(s['duration_ms'])}",
        # what the provider says it took (Bedrock): the rest of dur was the way there
        (
            f"(provider {duration(s['provider_latency_ms'])})"
            if s.get("provider_latency_ms") is not None
            else ""
        ),
        f"in {_tokens(s['input_tokens'], s['input_source'])}",
        f"out {_tokens(s['output_tokens'], s['output_source'])}",
        money(cost),
        _paint(f"stalls {stalls}", "yellow" if stalls else None, colour),
        f"ka {s['keepalives'] or 0}",
        _paint(short_id(s["id"]), "dim", colour),
    ]
    return " ".join(p for p in parts if p)


# -- the console, off the event loop ------------------------------------------------


def _write(out: TextIO, lines: list[str]) -> None:
    try:
        out.write("".join(line + "\n" for line in lines))
        out.flush()
    except (OSError, ValueError):  # a closed or broken console: not the traffic's problem
        pass


# a console line, or a callable that makes it (called on the console's thread)
Line = str | Callable[[], str]


class Printer:
    """Writes console lines on its own thread: a console that does not read (a paused
    terminal, a pipe nobody drains) blocks this thread, never the event loop. At most
    ``limit`` lines wait; past that they are counted in ``dropped`` and not printed.

    ``put`` runs on the event loop once per record, so it takes no lock while the
    thread is busy: a ``queue.Queue`` put takes its mutex and wakes the thread
    through a condition, and a mutex the woken thread holds while it waits for the
    GIL stops the loop, measured at milliseconds per line in a loaded proxy. Lines
    go to a deque (an append needs no lock); the thread is woken through an event
    only when it said it is idle, and while lines keep coming it gathers them for
    ``GATHER_S`` and writes them in one go. A line may also be handed over unmade, as
    a callable this thread calls: the loop then pays for the hand-over only, not for
    the formatting, the dear part of a line (docs/performance.md)."""

    GATHER_S = 0.05

    def __init__(self, out: TextIO, limit: int = 10_000) -> None:
        self.out = out
        self.limit = limit
        self.dropped = 0
        self.failed = 0  # callables that raised: their line is not printed
        self._lines: collections.deque[Line] = collections.deque()
        self._wake = threading.Event()
        self._idle = False  # the thread waits for _wake
        self._busy = False  # the thread holds lines it has not written yet
        self._thread = threading.Thread(target=self._run, name="recorder-console", daemon=True)
        self._thread.start()

    def put(self, line: Line) -> None:
        """Queue one line, or a callable that makes it on this thread (never blocks)."""
        lines = self._lines
        if len(lines) >= self.limit:
            self.dropped += 1
            return
        lines.append(line)
        if self._idle:
            self._idle = False
            self._wake.set()

    def _run(self) -> None:
        lines, wake = self._lines, self._wake
        while True:
            if not lines:
                # said before looking again: a line put after this look sees it
                self._idle = True
                if not lines:
                    wake.wait()
                wake.clear()
                self._idle = False
            self._busy = True
            batch: list[str] = []
            while lines and len(batch) < 256:  # write what has gathered in one go
                item = lines.popleft()
                if not isinstance(item, str):
                    try:
                        item = item()
                    except Exception:  # a line that cannot be made is not printed
                        self.failed += 1
                        continue
                batch.append(item)
            _write(self.out, batch)
            self._busy = False
            time.sleep(self.GATHER_S)

    def flush(self, timeout: float) -> None:
        """Wait until every queued line is written, ``timeout`` seconds at most."""
        deadline = time.monotonic() + timeout
        while (self._lines or self._busy) and time.monotonic() < deadline:
            time.sleep(0.01)
