"""The live view's console lines: a record's summary, its line (text, coloured on
a terminal, or JSON), and the thread that writes them (``Printer``). Pure
formatting, apart from the printer's thread; ``recorder.proxy.live`` uses it, and
`recorder top` reads the same summaries from ``/streams``."""

from __future__ import annotations

import queue
import threading
import time
from decimal import Decimal, InvalidOperation
from typing import Any, TextIO

from mitmproxy.contrib import click as miniclick

from recorder.core.record import StreamRecord

# Characters of the record id shown: a UUIDv7's time (to the millisecond) and
# 12 random bits, a unique prefix `recorder show` takes in practice.
ID_CHARS = 18


def short_id(record_id: str | None) -> str:
    """The first characters of a record id, as the console shows them."""
    return (record_id or "-")[:ID_CHARS]


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
    }


# -- console text -----------------------------------------------------------------


def _paint(text: str, colour: str | None, on: bool) -> str:
    """``text`` styled as mitmdump styles its flow lines (mitmproxy's own helper)."""
    if not on or colour is None:
        return text
    if colour == "dim":
        return str(miniclick.style(text, dim=True))
    return str(miniclick.style(text, fg=colour))


def _secs(ms: float | None) -> str:
    if ms is None:
        return "-"
    s = ms / 1000.0
    return f"{s:.2f}s" if s < 10 else f"{s:.1f}s" if s < 100 else f"{s:.0f}s"


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
    """One finished stream, the way ``mitmdump`` prints a flow (estimated figures ``~``)."""
    cost = s["cost_usd"]
    stalls = s["stalls"] or 0
    parts = [
        clock,
        _paint(str(s["endpoint"]), "cyan", colour),
        str(s["model"] or "-"),
        str(s["http_status"] if s["http_status"] is not None else "-"),
        _paint(str(s["outcome"]), _outcome_colour(s["outcome"]), colour),
        f"ttft {_secs(s['ttft_ms'])}",
        f"dur {_secs(s['duration_ms'])}",
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


class Printer:
    """Writes console lines on its own thread: a console that does not read (a paused
    terminal, a pipe nobody drains) blocks this thread, never the event loop. At most
    ``limit`` lines wait; past that they are counted in ``dropped`` and not printed."""

    def __init__(self, out: TextIO, limit: int = 10_000) -> None:
        self.out = out
        self.dropped = 0
        self._queue: queue.Queue[str] = queue.Queue(limit)
        self._thread = threading.Thread(target=self._run, name="recorder-console", daemon=True)
        self._thread.start()

    def put(self, line: str) -> None:
        """Queue one line (never blocks)."""
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        q = self._queue
        while True:
            lines = [q.get()]
            while len(lines) < 256:  # write what has gathered in one go
                try:
                    lines.append(q.get_nowait())
                except queue.Empty:
                    break
            _write(self.out, lines)
            for _ in lines:
                q.task_done()

    def flush(self, timeout: float) -> None:
        """Wait until every queued line is written, ``timeout`` seconds at most."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
