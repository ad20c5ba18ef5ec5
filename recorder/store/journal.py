"""The journal: finished records on disk within a few tens of milliseconds,
whatever the database is doing, so that a kill -9 loses (almost) nothing.

Theory of operation. ``add`` runs on the caller's thread (mitmproxy's event
loop): one ``deque.append``, and, when the journal was empty, one
``Event.set`` that wakes the journal's thread (records come in bursts: the
finishing pipeline completes those that ended together, so a burst costs one
wake-up). The thread takes what is waiting and hands it, in groups of up to
``group``, to ``write``: the ``SqlSink`` appends the group to
its spool file with one ``os.write`` (the records' JSON encoding happens on this
thread, not on the loop) and only then queues the records for the database.
The writer thread may be stuck in a database that hangs or is locked, with its
queue full behind it: the journal does not wait for it.

The thread sleeps while nothing waits, so an idle proxy spends no CPU on it
(a timed wake-up is not free on a virtual machine: docs/performance.md); it also
wakes every ``interval`` seconds, a backstop that finds nothing to do unless a
wake-up was missed.

An ``os.write`` puts the bytes in the kernel's page cache, which a killed
process does not take with it (no ``fsync``: a power cut may still lose the last
seconds). A record is thus safe from a kill -9 as soon as the thread gets the
interpreter lock after ``add`` (the event loop gives it up within the
interpreter's switch interval, 5 ms, or sooner when it waits for the network).
The spool file is
removed once every record in it is committed; a process that dies leaves it,
and the next process of the same store replays it: ``INSERT ... ON CONFLICT DO
NOTHING`` on the record id, so the records already committed are stored once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from recorder.core.record import StreamRecord

log = logging.getLogger("recorder.store")

DEFAULT_INTERVAL = 1.0  # the backstop: add wakes the thread
DEFAULT_GROUP = 256


class Journal:
    """Groups of records handed to ``write`` on a thread of their own."""

    def __init__(
        self,
        write: Callable[[list[StreamRecord]], None],
        *,
        interval: float = DEFAULT_INTERVAL,
        group: int = DEFAULT_GROUP,
    ) -> None:
        if interval <= 0 or group < 1:
            raise ValueError("interval must be > 0, group >= 1")
        self.interval = interval
        self.group = group
        self._write = write
        self._pending: deque[StreamRecord] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._lock = threading.Lock()  # one group written at a time, in order
        self._thread = threading.Thread(target=self._run, name="recorder-journal", daemon=True)
        self._thread.start()

    def add(self, record: StreamRecord) -> None:
        """Take a record (the caller's thread; never blocks)."""
        pending = self._pending
        pending.append(record)
        # The thread clears the event before it drains: a record appended after its
        # last look makes the deque's length 1 again, and so sets the event.
        if len(pending) == 1:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self._drain()
            except Exception:  # the thread must outlive any bug
                log.exception("recorder: internal error in the journal")

    def _drain(self) -> None:
        with self._lock:
            self._write_pending()

    def _write_pending(self) -> None:
        """Hand what waits to ``write``, in groups (the lock held)."""
        while self._pending:
            records: list[StreamRecord] = []
            pending = self._pending
            while pending and len(records) < self.group:
                records.append(pending.popleft())
            self._write(records)

    def flush(self, timeout: float | None = None) -> bool:
        """Return once every record taken so far is handed to ``write`` (those
        still waiting are handed over on the caller's thread); False if a group
        being written did not finish within ``timeout``."""
        if not self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        try:
            self._write_pending()
        finally:
            self._lock.release()
        return True

    def stop(self, timeout: float = 2.0) -> None:
        """Write what waits and stop the thread; what it could not write in
        ``timeout`` is written on the caller's thread."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
        if self._lock.acquire(timeout=timeout):
            try:
                self._write_pending()
            finally:
                self._lock.release()
        elif self._pending:
            log.error(
                "recorder: the journal is stuck writing; %d record(s) not journaled",
                len(self._pending),
            )

    @property
    def waiting(self) -> int:
        """Records taken and not yet handed to ``write``."""
        return len(self._pending)
