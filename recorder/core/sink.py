"""Where finished records go: the interface the recording edge hands them to.

The proxy knows only this protocol; the composition root (``recorder.app``)
wires a sink of the store's (``recorder.store``: SQL, JSONL, fan-out, memory) or
any other object with these two methods.
"""

from __future__ import annotations

from typing import Protocol

from recorder.core.record import StreamRecord


class Sink(Protocol):
    """Receives finished records.

    ``submit`` is called on mitmproxy's event loop, so it must neither block nor
    raise: it hands the record to a queue and returns; writing happens on the
    sink's own thread. ``close`` writes out everything submitted before it, within
    a bounded time, then releases what the sink holds.
    """

    def submit(self, record: StreamRecord) -> None:
        """Take a record; never blocks, never raises."""

    def close(self) -> None:
        """Write out everything submitted so far, then release resources."""
