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
(``recorder.store.journal``), woken by the first record of a burst, which
appends them to the spool in groups and then queues them. A kill -9 loses at
most what finished in the last few milliseconds (until that thread got the
interpreter lock); ``journal_interval`` is only its backstop wake-up.

Every spool file names the store its records are meant for
(``recorder.store.identity``); the writer replays only its own store's files
and says, once, what waits in the directory for other stores.

Health: ``stats()`` gives ``queue_depth``, ``written``, ``spooled``,
``replayed``, ``dropped``, ``failed``, ``bodies_written``, ``bodies_failed`` and
the state of the database link.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from recorder.core.captured import body_of
from recorder.core.record import StreamRecord
from recorder.store import batch_insert, handover, spool_replay
from recorder.store.batch_insert import Unavailable
from recorder.store.engine import SUPPORTED, StoreError, display_url, make_engine
from recorder.store.identity import StoreIdentity, read_cached_id, store_key
from recorder.store.journal import DEFAULT_INTERVAL, Journal
from recorder.store.models import BulkRows
from recorder.store.spool import BadLine, Segment, Spool

log = logging.getLogger("recorder.store")

_STOP = object()
# Captured bodies waiting in the queue, in bytes, before records with a body are
# spooled instead (a queue of 10,000 records must not hold 10,000 bodies).
DEFAULT_BODY_QUEUE_BYTES = 256 * 1024 * 1024
# How long ``close`` gives the writer to drain before it spools what is left
# itself: a shutdown is bounded whatever the database does (docs/reliability.md).
CLOSE_TIMEOUT_S = 5.0


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
            self._journal = Journal(
                functools.partial(handover.journal_group, self), interval=journal_interval
            )
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
                handover.submit_spool_first(self, record)
                return
            if self._closed:  # late: leave it on disk, unlocked, for the next process
                handover.spill_now(self, [record])
                self._spool.close()
                return
            body = body_of(record)
            if body is not None:
                n = body.queued_bytes
                if self._body_bytes_in - self._body_bytes_out + n > self.body_queue_bytes:
                    handover.spill_now(self, [record])  # bodies pile up: the writer is behind
                    return
            try:
                self._queue.put_nowait((0, record))
            except queue.Full:
                handover.spill_now(self, [record])
                return
            if body is not None:
                self._body_bytes_in += n
        except Exception as e:  # a sink must not raise into the event loop
            self._loop_dropped += 1
            handover.log_drop(
                self, 1, f"unexpected {type(e).__name__}: {e}", getattr(record, "id", None)
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
            handover.rescue(self)
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
                    spool_replay.finish(self)
                    return
                if not stopping:
                    spool_replay.housekeeping(self)
            except Exception:  # the thread must outlive any bug
                log.exception("recorder: internal error in the SQL writer")
                if self._inflight:
                    handover.spill_items(self, self._inflight)
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
                    handover.spill_late(self, item)
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
                handover.spill_items(self, batch)
                return
            records = [r for _, r in batch]
            try:
                stored = batch_insert.commit(self, records)
            except Unavailable:
                handover.spill_items(self, batch)
                return
            except Exception as e:  # a bug, or a driver error SQLAlchemy did not wrap
                log.exception("recorder: unexpected error writing a batch; spooling it")
                batch_insert.outage(self, e)
                handover.spill_items(self, batch)
                return
            self._written += stored  # the rejected ones are counted as failed
        finally:
            seqs = [s for s, _ in batch if s]
            if seqs:
                self._done_seq = max(self._done_seq, max(seqs))
            self._inflight = []
            for _ in batch:
                self._queue.task_done()
