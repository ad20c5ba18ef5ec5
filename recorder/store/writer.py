"""``SqlSink``: finished records into SQL, off the event loop, never lost quietly.

Theory of operation. ``submit`` runs on mitmproxy's event loop. It puts the
record on a bounded queue (``put_nowait``: a mutex held for a few instructions)
and returns. One writer thread takes records off the queue and commits them in
batches: as soon as ``batch_size`` are waiting, or ``flush_interval`` seconds
after the first of a batch arrived. Every insert is ``ON CONFLICT (id) DO
NOTHING``, so writing a record twice stores it once.

Nothing waits on the database but the writer thread. When the queue is full,
``submit`` appends the record to this process's spool file itself (one
``os.write`` of one JSON line, see ``recorder.store.spool``): a few
microseconds on the loop, and it happens only while the database is slower
than the traffic. When the database is unreachable or a commit fails, the
writer appends the batch to the spool and retries the database with a backoff
(``retry_min`` doubling up to ``retry_max`` seconds); once a write succeeds
again it replays the spool, its own files and those of dead processes on the
same directory, a batch at a time between batches from the queue. A record is
dropped only when the spool itself cannot be written; that is logged at error
level and counted (``dropped``). Records the database refuses as data (not as
an outage) go to ``recorder-rejected.jsonl`` and count as ``failed``.

``close`` drains: everything submitted before it is committed or spooled,
within a bounded time (``close(timeout)``, 5 s by default: a shutdown must not
wait on a database). If the writer is still inside the database then (a hung
server, a lock held elsewhere), ``close`` spools the queue and the batch in
flight itself, from the caller's thread, without touching the database, and
the writer is abandoned: whatever it returns with later is not written again
(the handover is under ``_handoff``, so no record is both spooled by ``close``
and lost by the writer, or spooled twice). The writer is a daemon thread, so a
call that never returns cannot keep the process alive. A record that both
commits late and sits in the spool is still stored once.

What a kill -9 can lose. By default, the records in the queue and the batch
being committed: at most ``queue_size + batch_size``, in practice the records
that finished in the last ``flush_interval`` seconds (the queue only fills
while the database is slower than the traffic, and what overflows it is
already on disk). With ``spool_first=True`` nothing: ``submit`` appends every
record to the spool before queueing it, and a spool file is removed only once
every record in it is committed. That costs one JSON encoding and one
``os.write`` per record on the loop (``bench/bench_store.py`` measures it).
Either way a power cut can also lose what the kernel had not yet written out.

Captured bodies (``--capture-bodies``) ride on their records
(``recorder.core.captured.CapturedRecord``). The writer packs (compresses) each
one on its thread and inserts it into ``stream_bodies`` in the same
transaction as its record; spooled, the line carries the packed body. Waiting
bodies are bounded in memory too: past ``body_queue_bytes`` of them in the
queue, ``submit`` spools the record instead of queueing it (packing the body on
the caller's thread, as ``spool_first`` does for every record). A body that
cannot be packed is logged and counted (``bodies_failed``); its record is
stored without it.

With ``journal=True`` (what ``recorder proxy`` runs) the same holds, without the
work on the loop: ``submit`` hands the record to a journal thread
(``recorder.store.journal``), which appends records to the spool in groups,
every ``journal_interval`` seconds, and then queues them. A kill -9 loses at
most what finished in the last ``journal_interval``.

Every spool file names the store its records are meant for
(``recorder.store.identity``); the writer replays only its own store's files
and says, once, what waits in the directory for other stores.

Health: ``stats()`` gives ``queue_depth``, ``written``, ``spooled``,
``replayed``, ``dropped``, ``failed``, ``bodies_written``, ``bodies_failed`` and
the state of the database link.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import (
    DataError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from recorder.core.captured import CapturedRecord, PackedBody, body_of
from recorder.core.record import StreamRecord
from recorder.store import migrate
from recorder.store.engine import SUPPORTED, StoreError, display_url, make_engine
from recorder.store.identity import (
    StoreIdentity,
    cache_id,
    get_or_create_store_id,
    read_cached_id,
    store_key,
)
from recorder.store.journal import DEFAULT_INTERVAL, Journal
from recorder.store.models import BulkRows
from recorder.store.spool import (
    BadLine,
    Segment,
    Spool,
    SpoolFile,
    append_rejected,
    describe,
    os_error_text,
    read_records,
    record_line,
)

log = logging.getLogger("recorder.store")

_STOP = object()
# Exceptions that say something about one record, not about the database.
_DATA_ERRORS = (IntegrityError, DataError)
# Exceptions that say the database is away (or busy): the batch waits in the spool.
# Anything else a batch raises (a value a driver cannot bind, a statement the
# database refuses) is searched for the record that causes it, which is then
# rejected alone: one bad record must never hold back the ones after it.
_OUTAGE_ERRORS = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
_RECORD_ERRORS = (SQLAlchemyError, ValueError, TypeError, OverflowError, UnicodeError)
_LOG_FIRST = 10  # log every one of the first N drops, then every 1000th
# Building rows is pure Python, holding the GIL the event loop needs; handing it
# over every few dozen records (about 0.5 ms of work) keeps the loop's wait far
# below the interpreter's 5 ms switch interval.
_YIELD_EVERY = 32
# Captured bodies waiting in the queue, in bytes, before records with a body are
# spooled instead (a queue of 10,000 records must not hold 10,000 bodies).
DEFAULT_BODY_QUEUE_BYTES = 256 * 1024 * 1024
# How long ``close`` gives the writer to drain before it spools what is left
# itself: a shutdown is bounded whatever the database does (docs/reliability.md).
CLOSE_TIMEOUT_S = 5.0


class _Unavailable(Exception):
    """The database could not take a batch (unreachable, locked, not migrated...)."""


class SqlSink:
    """A Sink writing records to a SQL database through a queue and one writer
    thread, with a spool on disk for when the database cannot keep up or is away."""

    def __init__(
        self,
        url: str | URL,
        spool_dir: str | Path,
        *,
        batch_size: int = 500,
        flush_interval: float = 0.2,
        queue_size: int = 10_000,
        spool_first: bool = False,
        upgrade: bool = True,
        retry_min: float = 0.5,
        retry_max: float = 30.0,
        orphan_scan_interval: float = 60.0,
        segment_seconds: float = 2.0,
        engine: Engine | None = None,
        start: bool = True,
        body_queue_bytes: int = DEFAULT_BODY_QUEUE_BYTES,
        journal: bool = False,
        journal_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        if batch_size < 1 or queue_size < 1 or flush_interval <= 0:
            raise ValueError("batch_size and queue_size must be >= 1, flush_interval > 0")
        self.url = display_url(url)
        self.spool_dir = Path(spool_dir)
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        # the journal is spool-first with the spooling done on its own thread
        self.spool_first = spool_first or journal
        self.retry_min = retry_min
        self.retry_max = retry_max
        self.orphan_scan_interval = orphan_scan_interval
        self.segment_seconds = segment_seconds
        self.body_queue_bytes = body_queue_bytes
        self._own_engine = engine is None
        self._engine = engine if engine is not None else make_engine(url)
        if self._engine.dialect.name not in SUPPORTED:
            raise StoreError(f"unsupported database {self._engine.dialect.name!r}")
        self._rows_for = BulkRows(self._engine.dialect.name)
        self._begin: dict[str, Any] = (
            {"sqlite_begin": "IMMEDIATE"} if self._engine.dialect.name == "sqlite" else {}
        )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        key = store_key(url)
        self.identity = StoreIdentity(key, read_cached_id(self.spool_dir, key))
        self._identity_read = False
        self._reported: set[Path] = set()  # other stores' spool files already told of
        self._spool = Spool(self.spool_dir, self.identity)
        self._stop = threading.Event()
        self._closed = False
        # close() gave up on the writer: what it holds was spooled by close (under
        # _handoff), and it must not touch the database or the spool again
        self._handoff = threading.Lock()
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="recorder-sql-writer", daemon=True)
        self._started = False
        # Counters: the caller's thread (submit, close) and the writer each have their own.
        self._seq = 0
        self._loop_spooled = 0
        self._loop_dropped = 0
        self._written = 0
        self._spooled = 0
        self._replayed = 0
        self._dropped = 0
        self._failed = 0
        self._drop_logged = 0
        self._bodies_written = 0
        self._bodies_failed = 0
        # Bytes of captured bodies queued (the caller adds) and taken (the writer adds).
        self._body_bytes_in = 0
        self._body_bytes_out = 0
        # Writer state.
        self._needs_upgrade = upgrade
        self._db_ok = True  # optimistic until a write says otherwise
        self._retry_at = 0.0
        self._backoff = retry_min
        self._last_error: str | None = None
        self._done_seq = 0  # spool-first: every record up to this seq is dealt with
        self._inflight: list[tuple[int, StreamRecord]] = []
        self._replay_queue: deque[Segment] = deque()
        self._replay_iter: Iterator[list[StreamRecord | BadLine]] | None = None
        self._replay_seg: Segment | None = None
        self._replay_pos = 0  # record lines of the file being replayed read so far
        self._next_orphan_scan = 0.0
        self._close_deadline = 0.0
        self._journal: Journal | None = None
        if journal:
            self._journal = Journal(self._journal_group, interval=journal_interval)
        if start:
            self.start()

    # -- the caller's side: never blocks, never raises ----------------------------

    def start(self) -> None:
        """Start the writer thread (the constructor does unless ``start=False``)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def submit(self, record: StreamRecord) -> None:
        """Queue a record for writing; spool it if the queue is full."""
        try:
            if self._journal is not None and not self._closed:
                self._journal.add(record)
                return
            if self.spool_first:
                self._submit_spool_first(record)
                return
            if self._closed:  # late: leave it on disk, unlocked, for the next process
                self._spill_now([record])
                self._spool.close()
                return
            body = body_of(record)
            if body is not None:
                n = body.queued_bytes
                if self._body_bytes_in - self._body_bytes_out + n > self.body_queue_bytes:
                    self._spill_now([record])  # bodies pile up: the writer is behind
                    return
            try:
                self._queue.put_nowait((0, record))
            except queue.Full:
                self._spill_now([record])
                return
            if body is not None:
                self._body_bytes_in += n
        except Exception as e:  # a sink must not raise into the event loop
            self._loop_dropped += 1
            self._log_drop(1, f"unexpected {type(e).__name__}: {e}", getattr(record, "id", None))

    def _submit_spool_first(self, record: StreamRecord) -> None:
        line = record_line(record)
        with self._spool.lock:
            self._seq += 1
            seq = self._seq
            try:
                seg = self._spool.append_locked(line, 1, seq)
            except OSError as e:
                seg, seq = None, 0
                self._seq -= 1  # seqs stay those of the lines in the files
                log.error(
                    "recorder: cannot write spool in %s: %s", self.spool_dir, os_error_text(e)
                )
            if self._closed:
                if seg is None:
                    self._loop_dropped += 1
                    self._log_drop(1, "spool unwritable after close", record.id)
                else:
                    seg.mark(seq, seq)
                    self._loop_spooled += 1
                    self._spool.close_locked()
                return
            try:
                self._queue.put_nowait((seq, record))
                return
            except queue.Full:
                pass
            if seg is not None:
                seg.mark(seq, seq)
                self._loop_spooled += 1
                return
        self._loop_dropped += 1
        self._log_drop(1, "queue full and spool unwritable", record.id)

    def _journal_group(self, records: list[StreamRecord]) -> None:
        """The journal's thread: append a group of records to the spool (one
        ``os.write``), then queue them, as ``_submit_spool_first`` does one."""
        lines: list[bytes] = []
        good: list[StreamRecord] = []
        for n, r in enumerate(records, 1):
            if not n % _YIELD_EVERY:
                time.sleep(0)  # let the event loop have the GIL, as the writer does
            try:
                lines.append(record_line(r))
                good.append(r)
            except Exception as e:
                self._loop_dropped += 1
                self._log_drop(1, f"cannot encode it for the spool: {e}", getattr(r, "id", None))
        if not good:
            return
        with self._spool.lock:
            first = self._seq + 1
            self._seq += len(good)
            seg: Segment | None
            try:
                seg = self._spool.append_locked(b"".join(lines), len(good), first)
                seg.last_seq = self._seq
            except OSError as e:
                seg, first = None, 0
                self._seq -= len(good)  # seqs stay those of the lines in the files
                log.error(
                    "recorder: cannot write spool in %s: %s", self.spool_dir, os_error_text(e)
                )
            for n, r in enumerate(good):
                body = body_of(r)
                size = body.queued_bytes if body is not None else 0
                try:
                    if size and self._body_bytes_in - self._body_bytes_out + size > (
                        self.body_queue_bytes
                    ):
                        raise queue.Full  # bodies pile up: it waits in the spool alone
                    self._queue.put_nowait((first + n if seg else 0, r))
                    self._body_bytes_in += size
                except queue.Full:
                    if seg is not None:
                        seg.mark(first + n, first + n)
                        self._loop_spooled += 1
                    else:
                        self._loop_dropped += 1
                        self._log_drop(1, "queue full and spool unwritable", r.id)

    def _spill_now(self, records: Sequence[StreamRecord]) -> None:
        """Spool from the caller's thread (queue full, or after close)."""
        data, n = self._encode(records, writer=False)
        if not n:
            return
        try:
            self._spool.append(data, n)
        except OSError as e:
            self._loop_dropped += n
            self._log_drop(n, f"queue full and spool unwritable: {os_error_text(e)}", records[0].id)
            return
        self._loop_spooled += n

    def _encode(self, records: Sequence[StreamRecord], *, writer: bool) -> tuple[bytes, int]:
        """Spool lines for ``records``; one that cannot be encoded is dropped, loudly."""
        lines = []
        for r in records:
            try:
                lines.append(record_line(r))
            except (TypeError, ValueError) as e:
                if writer:
                    self._dropped += 1
                else:
                    self._loop_dropped += 1
                self._log_drop(1, f"cannot encode it for the spool: {e}", getattr(r, "id", None))
        return b"".join(lines), len(lines)

    def _log_drop(self, n: int, reason: str, record_id: str | None) -> None:
        self._drop_logged += 1
        k = self._drop_logged
        if k <= _LOG_FIRST or k % 1000 == 0:
            log.error(
                "recorder: DROPPED %d record(s) (e.g. %s): %s; %d dropped so far",
                n,
                record_id,
                reason,
                self._loop_dropped + self._dropped,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued record is committed or spooled; False on timeout."""
        q = self._queue
        end = None if timeout is None else time.monotonic() + timeout
        with q.all_tasks_done:
            while q.unfinished_tasks:
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                q.all_tasks_done.wait(remaining)
        return True

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Write or spool everything submitted, stop the writer, release the spool;
        back within about ``timeout`` seconds whatever the database does."""
        if self._closed:
            return
        self._closed = True  # first: a late submit now takes the spool's path
        if self._journal is not None:  # what it holds goes to the spool and the queue
            self._journal.stop()
        self._close_deadline = time.monotonic() + timeout / 2
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait((0, _STOP))  # wake the writer if it is idle
        if self._started:
            self._thread.join(timeout)
        if self._thread.is_alive() or not self._started:
            self._rescue()
        else:
            self._spool.close()
            if self._own_engine:
                self._engine.dispose()
        s = self.stats()
        log.info(
            "recorder: SQL writer closed: %d written, %d spooled, %d replayed, "
            "%d dropped, %d failed",
            s["written"],
            s["spooled"],
            s["replayed"],
            s["dropped"],
            s["failed"],
        )

    def _rescue(self) -> None:
        """The writer is stuck in the database (or never ran): spool what it holds."""
        if self._started:
            log.error(
                "recorder: the SQL writer did not finish in time; spooling what is left in %s",
                self.spool_dir,
            )
        with self._handoff:
            self._abandoned = True
            items = list(self._inflight)
            self._inflight = []
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
                self._queue.task_done()
            records = [r for seq, r in items if isinstance(r, StreamRecord) and not seq]
            in_spool = [seq for seq, r in items if isinstance(r, StreamRecord) and seq]
            if in_spool:
                self._spool.mark_dirty(min(in_spool), max(in_spool))
            if records:
                self._spill_now(records)
        self._spool.close()

    def stats(self) -> dict[str, Any]:
        """The writer's health: counters since start and the database link."""
        return {
            "queue_depth": self._queue.qsize(),
            "written": self._written,
            "spooled": self._spooled + self._loop_spooled,
            "replayed": self._replayed,
            "dropped": self._dropped + self._loop_dropped,
            "failed": self._failed,
            "bodies_written": self._bodies_written,
            "bodies_failed": self._bodies_failed,
            # files holding records that wait for the database (not the journal's)
            "spool_files": self._spool.dirty_files()
            + len(self._replay_queue)
            + (self._replay_seg is not None),
            "db_available": self._db_ok,
            "last_error": self._last_error,
        }

    # -- the writer thread --------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                stopping = self._stop.is_set()
                # with spool files to replay, do not idle on an empty queue
                replaying = (self._replay_iter is not None or bool(self._replay_queue)) and (
                    self._may_use_db()
                )
                batch = self._take_batch(wait=not stopping and not replaying)
                if batch:
                    self._write_queued(batch)
                if self._abandoned:  # close() spooled what was left; the process is going
                    return
                if stopping and self._queue.empty():
                    self._finish()
                    return
                if not stopping:
                    self._housekeeping()
            except Exception:  # the thread must outlive any bug
                log.exception("recorder: internal error in the SQL writer")
                if self._inflight:
                    self._spill_items(self._inflight)
                    self._inflight = []
                time.sleep(0.05)

    def _take_batch(self, *, wait: bool) -> list[tuple[int, StreamRecord]]:
        """Up to ``batch_size`` records: what is waiting, plus what arrives within
        ``flush_interval`` of the first. ``task_done`` is left to the caller, once
        the batch is committed or spooled (``flush`` waits for that)."""
        q = self._queue
        batch: list[tuple[int, StreamRecord]] = []
        # in flight from the moment it is taken: close() spools it if the writer stalls
        self._inflight = batch
        deadline: float | None = None
        while len(batch) < self.batch_size:
            try:
                idle_wait = wait and not batch
                item = q.get(timeout=self.flush_interval) if idle_wait else q.get_nowait()
            except queue.Empty:
                if not batch or not wait:
                    break
                assert deadline is not None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = q.get(timeout=remaining)
                except queue.Empty:
                    break
            if item[1] is _STOP:
                q.task_done()
                wait = False
                continue
            with self._handoff:
                if self._abandoned:  # close() took the batch: spool this one too
                    self._spill_late(item)
                    q.task_done()
                    continue
                batch.append(item)
            if deadline is None:
                deadline = time.monotonic() + self.flush_interval
        return batch

    def _may_use_db(self) -> bool:
        return self._db_ok or time.monotonic() >= self._retry_at

    def _write_queued(self, batch: list[tuple[int, StreamRecord]]) -> None:
        self._inflight = batch
        for seq, r in batch:  # their bodies no longer wait in the queue
            body = body_of(r)
            if body is not None and (not seq or self._journal is not None):
                self._body_bytes_out += body.queued_bytes
        try:
            if not self._may_use_db():
                self._spill_items(batch)
                return
            records = [r for _, r in batch]
            try:
                stored = self._commit(records)
            except _Unavailable:
                self._spill_items(batch)
                return
            except Exception as e:  # a bug, or a driver error SQLAlchemy did not wrap
                log.exception("recorder: unexpected error writing a batch; spooling it")
                self._outage(e)
                self._spill_items(batch)
                return
            self._written += stored  # the rejected ones are counted as failed
        finally:
            seqs = [s for s, _ in batch if s]
            if seqs:
                self._done_seq = max(self._done_seq, max(seqs))
            self._inflight = []
            for _ in batch:
                self._queue.task_done()

    def _spill_late(self, item: tuple[int, StreamRecord]) -> None:
        """A record the writer took after close() gave up on it (caller holds _handoff)."""
        seq, rec = item
        if seq:
            self._spool.mark_dirty(seq, seq)
            self._spooled += 1
        else:
            self._spill_now([rec])

    def _spill_items(self, items: Sequence[tuple[int, StreamRecord]]) -> None:
        """The writer's fallback: records not already in the spool are appended to it."""
        with self._handoff:
            if self._abandoned:  # close() spooled them already
                return
            self._spill_items_locked(items)

    def _spill_items_locked(self, items: Sequence[tuple[int, StreamRecord]]) -> None:
        in_spool = [s for s, _ in items if s]
        if in_spool:  # spool-first: already on disk, now waiting there for a replay
            self._spool.mark_dirty(min(in_spool), max(in_spool))
            self._spooled += len(in_spool)
        records = [r for s, r in items if not s]
        data, n = self._encode(records, writer=True)
        if not n:
            return
        try:
            self._spool.append(data, n)
        except OSError as e:
            self._dropped += n
            reason = f"database unavailable and spool unwritable: {os_error_text(e)}"
            self._log_drop(n, reason, records[0].id)
            return
        self._spooled += n

    def _commit(self, records: Sequence[StreamRecord]) -> int:
        """Insert a batch in one transaction; return how many records were stored.
        Records that cannot be stored are rejected one by one. Raises _Unavailable
        when the database is the problem."""
        rows, gaps, bodies, good = self._rows(records)
        if not rows:
            return 0
        try:
            self._ensure_schema()
            with self._engine.connect() as conn:
                self._insert(conn, rows, gaps, bodies)
        except _DATA_ERRORS as e:
            return self._split(good, e)
        except _OUTAGE_ERRORS as e:
            self._outage(e)
            raise _Unavailable(str(e)) from e
        except _Unavailable:
            raise
        except _RECORD_ERRORS as e:
            return self._split(good, e)
        self._bodies_written += len(bodies)
        self._recovered()
        return len(good)

    def _split(self, good: list[StreamRecord], error: Exception) -> int:
        """A batch the database refused: commit its records one by one, rejecting
        whichever it refuses alone (each is kept in the rejected file)."""
        if len(good) == 1:
            self._reject(good[0], error)
            return 0
        return sum(self._commit([rec]) for rec in good)

    def _rows(
        self, records: Sequence[StreamRecord]
    ) -> tuple[
        list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], list[StreamRecord]
    ]:
        now = datetime.now(UTC)
        enc = self._rows_for
        rows: list[tuple[Any, ...]] = []
        gaps: list[tuple[Any, ...]] = []
        bodies: list[tuple[Any, ...]] = []
        good: list[StreamRecord] = []
        for n, rec in enumerate(records, 1):
            if not n % _YIELD_EVERY:
                time.sleep(0)  # let the event loop have the GIL (see _YIELD_EVERY)
            try:
                row = enc.stream(rec, now)
                rec_gaps = enc.gaps(rec)
            except (TypeError, ValueError, AttributeError) as e:
                self._reject(rec, e)
                continue
            rows.append(row)
            gaps.extend(rec_gaps)
            good.append(rec)
            body = body_of(rec)
            if body is not None:
                packed = self._pack(rec)
                if packed is not None:
                    bodies.append(enc.body(rec, packed))
                time.sleep(0)  # a body is a lot of work for one record: hand the GIL over
        return rows, gaps, bodies, good

    def _pack(self, rec: StreamRecord) -> PackedBody | None:
        """A record's body packed (compressed) here, off the event loop; None, logged
        and counted, if that fails (the record is stored without it)."""
        body = body_of(rec)
        if body is None:
            return None
        try:
            return body.pack()
        except Exception as e:
            self._bodies_failed += 1
            log.error(
                "recorder: cannot pack the body of record %s (%s: %s); stored without it",
                rec.id,
                type(e).__name__,
                e,
            )
            if isinstance(rec, CapturedRecord):
                rec.body = None  # spooled or retried, it goes without the body too
            return None

    def _insert(
        self,
        conn: Connection,
        rows: list[tuple[Any, ...]],
        gaps: list[tuple[Any, ...]],
        bodies: list[tuple[Any, ...]],
    ) -> None:
        conn = conn.execution_options(**self._begin) if self._begin else conn
        enc = self._rows_for
        with conn.begin():
            conn.exec_driver_sql(enc.streams_sql, rows)
            if gaps:
                conn.exec_driver_sql(enc.gaps_sql, gaps)
            if bodies:
                conn.exec_driver_sql(enc.bodies_sql, bodies)

    def _reject(self, rec: StreamRecord, e: BaseException) -> None:
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if append_rejected(self.spool_dir, rec, reason):
            self._failed += 1
            log.error(
                "recorder: the database refused record %s (%s); kept in %s",
                rec.id,
                reason,
                self.spool_dir / "recorder-rejected.jsonl",
            )
        else:
            self._dropped += 1
            self._log_drop(1, f"refused by the database ({reason}), and unkeepable", rec.id)

    def _ensure_schema(self) -> None:
        if not self._needs_upgrade:
            return
        try:
            # usually already done at start: then one SELECT, and Alembic stays idle
            if not migrate.is_current(self._engine):
                migrate.upgrade(self._engine)
        except SQLAlchemyError as e:
            self._outage(e)
            raise _Unavailable(str(e)) from e
        except Exception as e:  # e.g. a database newer than this code
            self._outage(e)
            raise _Unavailable(str(e)) from e
        self._needs_upgrade = False

    def _outage(self, e: BaseException) -> None:
        reason = _short(e)
        now = time.monotonic()
        if self._db_ok:
            log.warning(
                "recorder: database %s unavailable (%s); spooling records in %s",
                self.url,
                reason,
                self.spool_dir,
            )
            self._backoff = self.retry_min
        else:
            self._backoff = min(self._backoff * 2, self.retry_max)
        self._db_ok = False
        self._last_error = reason
        self._retry_at = now + self._backoff

    def _recovered(self) -> None:
        if not self._db_ok:
            log.warning("recorder: database %s is back; replaying the spool", self.url)
            self._db_ok = True
            self._next_orphan_scan = 0.0  # look for spool files right away

    # -- spool upkeep, between batches -----------------------------------------

    def _housekeeping(self) -> None:
        if not self._may_use_db():
            return
        now = time.monotonic()
        if self._needs_upgrade:
            try:
                self._ensure_schema()
            except _Unavailable:
                return
        self._sort_own_segments()
        if now >= self._next_orphan_scan and self._read_identity():
            self._next_orphan_scan = now + self.orphan_scan_interval
            exclude = self._spool.owned_paths() | {s.path for s in self._replay_queue}
            if self._replay_seg is not None:
                exclude.add(self._replay_seg.path)
            mine, others = self._spool.claim_orphans(exclude)
            for seg in mine:
                log.warning("recorder: replaying spool file %s left by another process", seg.path)
                self._replay_queue.append(seg)
            self._tell_of_others(others)
        if self._queue.qsize() < self.batch_size:  # the queue comes first
            self._replay_step()

    def _read_identity(self) -> bool:
        """Read the store id from the database once (creating it on first use) and
        cache it beside the spool; False while the database cannot be read."""
        if self._identity_read:
            return True
        try:
            self._ensure_schema()
            store_id = get_or_create_store_id(self._engine)
        except _Unavailable:
            return False
        except SQLAlchemyError as e:
            self._outage(e)
            return False
        known = self.identity.store_id
        if known is not None and known != store_id:
            log.warning(
                "recorder: %s is another store than the one this spool directory knew"
                " there (store id %s, was %s); the old one's spool files are left alone",
                self.url,
                store_id,
                known,
            )
        with self._spool.lock:  # new spool files carry the id from now on
            self.identity.store_id = store_id
        cache_id(self.spool_dir, self.identity.key, store_id)
        self._identity_read = True
        return True

    def _tell_of_others(self, others: list[SpoolFile]) -> None:
        """Say once, in one line, what waits in the spool directory for other stores."""
        new = [f for f in others if f.path not in self._reported]
        if not new:
            return
        self._reported.update(f.path for f in new)
        waiting: dict[str, int] = {}
        for f in map(describe, (f.path for f in others)):  # read through, to count
            name = f.store or "no store named (an older recorder's files)"
            if f.store_id:
                name += f" (store id {f.store_id})"
            waiting[name] = waiting.get(name, 0) + f.records
        log.warning(
            "recorder: spool directory %s holds records for other stores, left untouched: %s",
            self.spool_dir,
            "; ".join(f"{n} for {name}" for name, n in waiting.items()),
        )

    def _sort_own_segments(self) -> None:
        spool = self._spool
        cur = spool.current
        if cur is not None and cur.records:
            # a spilled record waits in the current file: retire it so it can be replayed
            # (once the database may be tried); spool-first: retire files as they age, so
            # the committed ones can be removed
            age = time.monotonic() - cur.opened_at
            if (cur.dirty and self._may_use_db()) or (
                self.spool_first and age >= self.segment_seconds
            ):
                spool.seal()
        for seg in spool.sealed():
            if seg.dirty:
                with spool.lock:
                    spool.segments.remove(seg)
                self._replay_queue.append(seg)
            elif seg.last_seq <= self._done_seq or (self._queue.empty() and not self._inflight):
                spool.forget(seg, remove=True)  # every record in it is committed

    def _replay_step(self) -> None:
        """Replay one batch from the spool."""
        if self._replay_iter is None:
            if not self._replay_queue:
                return
            first = self._replay_queue.popleft()
            self._replay_seg = first
            self._replay_iter = read_records(first.path, self.batch_size)
            self._replay_pos = 0
        seg = self._replay_seg
        assert seg is not None
        try:
            chunk = next(self._replay_iter)
        except StopIteration:
            self._replay_iter = None
            self._replay_seg = None
            seg.release(remove=True)
            log.info("recorder: spool file %s replayed", seg.path.name)
            return
        except OSError as e:
            log.error("recorder: cannot read spool file %s: %s", seg.path, e)
            self._replay_iter = None
            self._replay_seg = None
            seg.release(remove=False)
            return
        records: list[StreamRecord] = []
        for item in chunk:
            self._replay_pos += 1
            if not seg.replays(self._replay_pos - 1):
                continue  # one of this process's records that is in the database already
            if isinstance(item, BadLine):
                self._dropped += 1
                self._log_drop(
                    1, f"unreadable line {item.lineno} of {seg.path.name}: {item.reason}", None
                )
            else:
                records.append(item)
        try:
            stored = self._commit(records)
        except Exception as e:
            if not isinstance(e, _Unavailable):
                log.exception("recorder: unexpected error replaying %s", seg.path.name)
                self._outage(e)
            # start this file again later (idempotent); keep its lock meanwhile
            self._replay_iter = None
            self._replay_seg = None
            self._replay_queue.appendleft(seg)
            return
        self._replayed += stored  # the rejected ones are counted as failed

    def _finish(self) -> None:
        """Stopping: the queue is empty. Replay this process's own spool files while
        the database takes them and time allows (half of ``close``'s timeout), then
        release the spool; files still holding records stay for the next process."""
        while self._db_ok and not self._abandoned and time.monotonic() < self._close_deadline:
            self._spool.seal()
            self._sort_own_segments()
            if self._replay_iter is None and not self._replay_queue:
                break
            self._replay_step()
        if self._replay_iter is not None:
            self._replay_iter = None
        if self._replay_seg is not None:
            self._replay_seg.release(remove=False)
            self._replay_seg = None
        while self._replay_queue:
            self._replay_queue.popleft().release(remove=False)
        spool = self._spool
        if self.spool_first:
            spool.seal()
            for seg in spool.sealed():
                if not seg.dirty:
                    spool.forget(seg, remove=True)


def _short(e: BaseException) -> str:
    orig = getattr(e, "orig", None)
    text = str(orig if orig is not None else e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(orig if orig is not None else e).__name__}: {first}"
