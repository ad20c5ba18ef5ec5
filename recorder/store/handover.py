"""Handing records over to the spool: what the caller's thread (``submit``, the
journal, ``close``) and the writer do when a record cannot go to the database now.

``submit_spool_first`` and ``journal_group`` append records to the spool before
they are queued (each record's line numbered by a sequence number, so a replay
takes only what did not reach the database); ``spill_now`` spools from the
caller's thread when the queue is full or the sink is closed; ``spill_items`` is
the writer's fallback during an outage; ``rescue`` is ``close``'s, when the
writer is stuck in the database. A record is dropped only when the spool cannot
be written, and that is logged (``log_drop``) and counted.

They take the ``SqlSink`` whose state they keep (``recorder.store.writer`` holds
the theory of operation).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from recorder.core.captured import body_of
from recorder.core.record import StreamRecord
from recorder.store.spool import Segment, os_error_text, record_line

if TYPE_CHECKING:
    from recorder.store.writer import SqlSink

log = logging.getLogger("recorder.store")

LOG_FIRST = 10  # log every one of the first N drops, then every 1000th
# Encoding a group of records for the spool holds the GIL the event loop needs:
# hand it over every few dozen records (the writer's rows do the same).
YIELD_EVERY = 32


def submit_spool_first(sink: SqlSink, record: StreamRecord) -> None:
    line = record_line(record)
    with sink._spool.lock:
        sink._seq += 1
        seq = sink._seq
        try:
            seg = sink._spool.append_locked(line, 1, seq)
        except OSError as e:
            seg, seq = None, 0
            sink._seq -= 1  # seqs stay those of the lines in the files
            log.error("recorder: cannot write spool in %s: %s", sink.spool_dir, os_error_text(e))
        if sink._closed:
            if seg is None:
                sink._loop_dropped += 1
                log_drop(sink, 1, "spool unwritable after close", record.id)
            else:
                seg.mark(seq, seq)
                sink._loop_spooled += 1
                sink._spool.close_locked()
            return
        try:
            sink._queue.put_nowait((seq, record))
            return
        except queue.Full:
            pass
        if seg is not None:
            seg.mark(seq, seq)
            sink._loop_spooled += 1
            return
    sink._loop_dropped += 1
    log_drop(sink, 1, "queue full and spool unwritable", record.id)


def journal_group(sink: SqlSink, records: list[StreamRecord]) -> None:
    """The journal's thread: append a group of records to the spool (one
    ``os.write``), then queue them, as ``_submit_spool_first`` does one."""
    lines: list[bytes] = []
    good: list[StreamRecord] = []
    for n, r in enumerate(records, 1):
        if not n % YIELD_EVERY:
            time.sleep(0)  # let the event loop have the GIL, as the writer does
        try:
            lines.append(record_line(r))
            good.append(r)
        except Exception as e:
            sink._loop_dropped += 1
            log_drop(sink, 1, f"cannot encode it for the spool: {e}", getattr(r, "id", None))
    if not good:
        return
    with sink._spool.lock:
        first = sink._seq + 1
        sink._seq += len(good)
        seg: Segment | None
        try:
            seg = sink._spool.append_locked(b"".join(lines), len(good), first)
            seg.last_seq = sink._seq
        except OSError as e:
            seg, first = None, 0
            sink._seq -= len(good)  # seqs stay those of the lines in the files
            log.error("recorder: cannot write spool in %s: %s", sink.spool_dir, os_error_text(e))
        for n, r in enumerate(good):
            body = body_of(r)
            size = body.queued_bytes if body is not None else 0
            try:
                if size and sink._body_bytes_in - sink._body_bytes_out + size > (
                    sink.body_queue_bytes
                ):
                    raise queue.Full  # bodies pile up: it waits in the spool alone
                sink._queue.put_nowait((first + n if seg else 0, r))
                sink._body_bytes_in += size
            except queue.Full:
                if seg is not None:
                    seg.mark(first + n, first + n)
                    sink._loop_spooled += 1
                else:
                    sink._loop_dropped += 1
                    log_drop(sink, 1, "queue full and spool unwritable", r.id)


def spill_now(sink: SqlSink, records: Sequence[StreamRecord]) -> None:
    """Spool from the caller's thread (queue full, or after close)."""
    append_encoded(sink, records, writer=False, why="queue full and spool unwritable")


def append_encoded(
    sink: SqlSink, records: Sequence[StreamRecord], *, writer: bool, why: str
) -> None:
    """Encode ``records`` and append them to the spool, counted in the writer's
    counters (``writer``) or the caller's, which are kept apart because each is
    written by its own thread; dropped loudly, saying ``why``, when the spool
    cannot be written."""
    data, n = encode(sink, records, writer=writer)
    if not n:
        return
    try:
        sink._spool.append(data, n)
    except OSError as e:
        if writer:
            sink._dropped += n
        else:
            sink._loop_dropped += n
        log_drop(sink, n, f"{why}: {os_error_text(e)}", records[0].id)
        return
    if writer:
        sink._spooled += n
    else:
        sink._loop_spooled += n


def encode(sink: SqlSink, records: Sequence[StreamRecord], *, writer: bool) -> tuple[bytes, int]:
    """Spool lines for ``records``; one that cannot be encoded is dropped, loudly."""
    lines = []
    for r in records:
        try:
            lines.append(record_line(r))
        except (TypeError, ValueError) as e:
            if writer:
                sink._dropped += 1
            else:
                sink._loop_dropped += 1
            log_drop(sink, 1, f"cannot encode it for the spool: {e}", getattr(r, "id", None))
    return b"".join(lines), len(lines)


def log_drop(sink: SqlSink, n: int, reason: str, record_id: str | None) -> None:
    sink._drop_logged += 1
    k = sink._drop_logged
    if k <= LOG_FIRST or k % 1000 == 0:
        log.error(
            "recorder: DROPPED %d record(s) (e.g. %s): %s; %d dropped so far",
            n,
            record_id,
            reason,
            sink._loop_dropped + sink._dropped,
        )


def rescue(sink: SqlSink) -> None:
    """The writer is stuck in the database (or never ran): spool what it holds."""
    if sink._started:
        log.error(
            "recorder: the SQL writer did not finish in time; spooling what is left in %s",
            sink.spool_dir,
        )
    with sink._handoff:
        sink._abandoned = True
        items = list(sink._inflight)
        sink._inflight = []
        while True:
            try:
                items.append(sink._queue.get_nowait())
            except queue.Empty:
                break
            sink._queue.task_done()
        records = [r for seq, r in items if isinstance(r, StreamRecord) and not seq]
        in_spool = [seq for seq, r in items if isinstance(r, StreamRecord) and seq]
        if in_spool:
            sink._spool.mark_dirty(min(in_spool), max(in_spool))
        if records:
            spill_now(sink, records)
    sink._spool.close()


def spill_late(sink: SqlSink, item: tuple[int, StreamRecord]) -> None:
    """A record the writer took after close() gave up on it (caller holds _handoff)."""
    seq, rec = item
    if seq:
        sink._spool.mark_dirty(seq, seq)
        sink._spooled += 1
    else:
        spill_now(sink, [rec])


def spill_items(sink: SqlSink, items: Sequence[tuple[int, StreamRecord]]) -> None:
    """The writer's fallback: records not already in the spool are appended to it."""
    with sink._handoff:
        if sink._abandoned:  # close() spooled them already
            return
        spill_items_locked(sink, items)


def spill_items_locked(sink: SqlSink, items: Sequence[tuple[int, StreamRecord]]) -> None:
    in_spool = [s for s, _ in items if s]
    if in_spool:  # spool-first: already on disk, now waiting there for a replay
        sink._spool.mark_dirty(min(in_spool), max(in_spool))
        sink._spooled += len(in_spool)
    records = [r for s, r in items if not s]
    append_encoded(sink, records, writer=True, why="database unavailable and spool unwritable")
