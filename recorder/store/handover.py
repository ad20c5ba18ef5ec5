"""Handing records over to the spool and the queue: what the caller's side
(``submit``, the journal's thread, ``close``) and the writer do with a record
that is not committed straight from the queue.

``Handover`` owns the numbering of records spooled before they are queued (the
spool-first mode and the journal), and whether the sink is closed. It writes
through the ``Spool``, queues through the ``RecordQueue`` and counts on
``Counters`` (the caller's tally, or the writer's for the writer's fallback).
Invariants:

- Every record handed to it ends in exactly one of three places: the queue
  (``offer``), the spool marked to be replayed (``Segment.mark`` or an
  unnumbered append), or counted as dropped and logged, when the spool cannot be
  written (or the record cannot be encoded). Never two of them, never none.
- Spool-first records are numbered (``seq``) in the order of their lines in the
  spool files, under the spool's lock; an append that fails takes no number,
  so a file's n-th numbered line is always ``first_seq + n`` and a replay can
  take exactly the lines that did not reach the database (``Segment.replays``).
- After ``close``, nothing more is queued: a record stays in the spool, for the
  next process of the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from recorder.core.record import StreamRecord
from recorder.store.counters import Counters, Tally
from recorder.store.record_queue import Item, RecordQueue
from recorder.store.spool import Segment, Spool, os_error_text, record_line

log = logging.getLogger("recorder.store")

# Encoding a group of records for the spool holds the GIL the event loop needs:
# hand it over every few dozen records (the writer's rows do the same).
YIELD_EVERY = 32


class Handover:
    """The records' way into the spool (and, spooled first, into the queue)."""

    def __init__(
        self, spool: Spool, records: RecordQueue, counters: Counters, spool_dir: Path
    ) -> None:
        self._spool = spool
        self._queue = records
        self._counters = counters
        self._spool_dir = spool_dir
        self._seq = 0  # the last number given to a spooled-first record
        self._closed = False

    def close(self) -> None:
        """From now on records stay in the spool (``close`` drains the rest)."""
        self._closed = True

    # -- spooled first, then queued (the caller's side) ---------------------------

    def numbered(self, record: StreamRecord) -> None:
        """Spool-first: append ``record`` to the spool, then queue it; a record the
        queue cannot take waits in the spool, marked for a replay."""
        tally = self._counters.caller
        line = record_line(record)
        with self._spool.lock:
            seg, seq = self._append_numbered(line, 1)
            # not on disk (seq 0) but queued: the writer spools it if it must
            if not self._closed and self._queue.offer(record, seq, budgeted=False):
                return
            if seg is not None:
                seg.mark(seq, seq)
                tally.spooled += 1
                if self._closed:
                    self._spool.close_locked()
                return
        why = "spool unwritable after close" if self._closed else "queue full and spool unwritable"
        self._counters.drop(tally, 1, why, record.id)

    def group(self, records: list[StreamRecord]) -> None:
        """The journal's thread: append a group of records to the spool (one
        ``os.write``), then queue them; what the queue cannot take waits in the
        spool, marked for a replay."""
        tally = self._counters.caller
        lines: list[bytes] = []
        good: list[StreamRecord] = []
        for n, r in enumerate(records, 1):
            if not n % YIELD_EVERY:
                time.sleep(0)  # let the event loop have the GIL, as the writer does
            try:
                lines.append(record_line(r))
                good.append(r)
            except Exception as e:
                self._counters.drop(
                    tally, 1, f"cannot encode it for the spool: {e}", getattr(r, "id", None)
                )
        if not good:
            return
        with self._spool.lock:
            seg, first = self._append_numbered(b"".join(lines), len(good))
            for n, r in enumerate(good):
                seq = first + n if seg is not None else 0
                if self._queue.offer(r, seq):
                    continue
                if seg is not None:
                    seg.mark(seq, seq)
                    tally.spooled += 1
                else:
                    self._counters.drop(tally, 1, "queue full and spool unwritable", r.id)

    def _append_numbered(self, data: bytes, n: int) -> tuple[Segment | None, int]:
        """Append ``n`` records' lines, numbered from the next seq on; the file and
        the first number, or (None, 0) when the spool cannot be written (logged).
        The caller holds the spool's lock."""
        first = self._seq + 1
        try:
            seg = self._spool.append_locked(data, n, first)
        except OSError as e:
            log.error("recorder: cannot write spool in %s: %s", self._spool_dir, os_error_text(e))
            return None, 0
        self._seq += n
        seg.last_seq = self._seq
        return seg, first

    # -- spooled instead of queued ------------------------------------------------

    def spill(self, records: Sequence[StreamRecord]) -> None:
        """Spool from the caller's side (queue full, bodies over budget, closed)."""
        self._append(records, self._counters.caller, why="queue full and spool unwritable")

    def after_close(self, record: StreamRecord) -> None:
        """A record submitted after ``close``: spooled, and the file let go at
        once, for the next process of the store."""
        self.spill([record])
        self._spool.close()

    def writer_spill(self, items: Sequence[Item]) -> None:
        """The writer's fallback (the database is away): records already in the
        spool are marked for a replay, the others appended to it."""
        in_spool = [s for s, _, _ in items if s]
        if in_spool:
            self._spool.mark_dirty(min(in_spool), max(in_spool))
            self._counters.writer.spooled += len(in_spool)
        records = [r for s, r, _ in items if not s]
        self._append(
            records, self._counters.writer, why="database unavailable and spool unwritable"
        )

    def rescue(self, items: Sequence[Item]) -> None:
        """``close``'s: the writer is stuck in the database (or never ran); spool
        what it held and what was queued, then let go of the spool."""
        in_spool = [s for s, _, _ in items if s]
        if in_spool:
            self._spool.mark_dirty(min(in_spool), max(in_spool))
        records = [r for s, r, _ in items if not s]
        if records:
            self.spill(records)
        self._spool.close()

    def _append(self, records: Sequence[StreamRecord], tally: Tally, *, why: str) -> None:
        """Encode ``records`` and append them to the spool, counted on ``tally``;
        dropped loudly, saying ``why``, when the spool cannot be written."""
        lines = []
        for r in records:
            try:
                lines.append(record_line(r))
            except (TypeError, ValueError) as e:
                self._counters.drop(
                    tally, 1, f"cannot encode it for the spool: {e}", getattr(r, "id", None)
                )
        if not lines:
            return
        try:
            self._spool.append(b"".join(lines), len(lines))
        except OSError as e:
            self._counters.drop(tally, len(lines), f"{why}: {os_error_text(e)}", records[0].id)
            return
        tally.spooled += len(lines)
