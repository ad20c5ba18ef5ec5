"""``SqlSink``: finished records into SQL, off the event loop, never lost quietly.

Theory of operation. ``submit`` runs on mitmproxy's event loop. It puts the
record on a bounded queue (``put_nowait``: a mutex held for a few instructions)
and returns. One writer thread takes records off the queue and commits them in
batches: as soon as ``batch_size`` are waiting, or ``flush_interval`` seconds
after the first of a batch arrived (0.2 s; 1 s with the journal, below). Every
insert is ``ON CONFLICT (id) DO NOTHING``, so writing a record twice stores it
once.

Nothing waits on the database but the writer thread. When the queue is full,
``submit`` appends the record to this process's spool file itself (one
``os.write`` of one JSON line, see ``recorder.store.spool``), which happens only
while the database is slower than the traffic. When the database is unreachable
or a commit fails, the writer appends the batch to the spool and retries the
database with a backoff (``retry_min`` doubling up to ``retry_max`` seconds);
once a write succeeds again it replays the spool, its own files and those of
dead processes on the same directory, a batch at a time between batches from
the queue. A record is dropped only when the spool itself cannot be written;
that is logged at error level and counted (``dropped``). Records the database
refuses as data (not as an outage) go to ``recorder-rejected.jsonl`` and count
as ``failed``.

``close`` drains: everything submitted before it is committed or spooled,
within a bounded time (``close(timeout)``, 5 s by default: a shutdown must not
wait on a database). If the writer is still inside the database then (a hung
server, a lock held elsewhere), ``close`` spools the queue and the batch in
flight itself, from the caller's thread, without touching the database, and
the writer is abandoned (``RecordQueue.abandon``: no record is both spooled by
``close`` and lost by the writer, or spooled twice). Once its wait ends, an
abandoned writer sorts, claims, replays and removes no spool file and lets go of
every one it holds, so that the next writer of the store finds them. The writer is a daemon
thread, so a call that never returns cannot keep the process alive. A record
that both commits late and sits in the spool is still stored once.

What a kill -9 can lose. By default, the records in the queue and the batch
being committed: at most ``queue_size + batch_size``, in practice the records
that finished in the last ``flush_interval`` seconds (the queue only fills
while the database is slower than the traffic, and what overflows it is
already on disk). With ``spool_first=True`` nothing: ``submit`` appends every
record to the spool before queueing it, and a spool file is removed only once
every record in it is committed. That costs one JSON encoding and one
``os.write`` per record on the loop (``bench/bench_store.py`` measures it).
With ``journal=True`` (what ``recorder proxy`` runs) the same holds, without the
work on the loop: ``submit`` hands the record to a journal thread
(``recorder.store.journal``), which appends records to the spool in groups and
then queues them. Either way a power cut can also lose what the kernel had not
yet written out.

Captured bodies (``--capture-bodies``) ride on their records
(``recorder.core.captured.CapturedRecord``); the writer packs each on its
thread and inserts it in the same transaction as its record. Past
``body_queue_bytes`` of bodies waiting in the queue, ``submit`` spools a record
with a body instead of queueing it.

Every spool file names the store its records are meant for
(``recorder.store.identity``); the writer replays only its own store's files.

Who owns what. ``SqlSink`` owns the configuration, the writer thread and the
closing; each part owns its own state and keeps its own invariants:

- ``DatabaseLink`` (``link``): the engine, the schema's state, the backoff.
- ``RecordQueue`` (``record_queue``): the queue, the bodies' budget, the batch
  in flight and its hand-over to ``close``.
- ``Handover`` (``handover``): records into the spool, numbered when spooled
  before they are queued; the spills of the caller and of the writer.
- ``BatchInsert`` (``batch_insert``): a batch into the database, refused records
  set aside.
- ``SpoolReplayer`` (``spool_replay``): retiring, claiming and replaying spool files.
- ``Counters`` (``counters``): what became of every record, per thread.

Health: ``stats()`` gives ``queue_depth``, ``written``, ``spooled``,
``replayed``, ``dropped``, ``failed``, ``bodies_written``, ``bodies_failed``,
``spool_files`` and the state of the database link.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from recorder.core.record import StreamRecord
from recorder.store.batch_insert import BatchInsert
from recorder.store.counters import Counters
from recorder.store.handover import Handover
from recorder.store.identity import StoreIdentity, read_cached_id, store_key
from recorder.store.journal import DEFAULT_INTERVAL, Journal
from recorder.store.link import DatabaseLink, Unavailable
from recorder.store.record_queue import Item, RecordQueue
from recorder.store.spool import Spool
from recorder.store.spool_replay import ReplayConfig, SpoolReplayer

log = logging.getLogger("recorder.store")

# Captured bodies waiting in the queue, in bytes, before records with a body are
# spooled instead (a queue of 10,000 records must not hold 10,000 bodies).
DEFAULT_BODY_QUEUE_BYTES = 256 * 1024 * 1024
# How long ``close`` gives the writer to drain before it spools what is left
# itself: a shutdown is bounded whatever the database does (docs/reliability.md).
CLOSE_TIMEOUT_S = 5.0
# How often the writer looks for spool files left by dead processes of its store,
# besides right after writing resumed (docs/storage.md, "The spool directory").
ORPHAN_SCAN_INTERVAL_S = 10.0
# How long a batch gathers after its first record. Without the journal, what a
# kill -9 can lose (below): kept short. With it, records are on disk before they
# are queued, so only how soon rows show in SQL depends on it, and a commit costs
# the writer's thread about as much for one record as for twenty (a wake-up and a
# transaction on a cold cache): at the rates streams end, a longer batch costs it
# much less per record (docs/performance.md).
FLUSH_INTERVAL_S = 0.2
JOURNAL_FLUSH_INTERVAL_S = 1.0


class SqlSink:
    """A Sink writing records to a SQL database through a queue and one writer
    thread, with a spool on disk for when the database cannot keep up or is away."""

    def __init__(
        self,
        url: str | URL,
        spool_dir: str | Path,
        *,
        batch_size: int = 500,
        flush_interval: float | None = None,
        queue_size: int = 10_000,
        spool_first: bool = False,
        upgrade: bool = True,
        retry_min: float = 0.5,
        retry_max: float = 30.0,
        orphan_scan_interval: float = ORPHAN_SCAN_INTERVAL_S,
        segment_seconds: float = 2.0,
        engine: Engine | None = None,
        start: bool = True,
        body_queue_bytes: int = DEFAULT_BODY_QUEUE_BYTES,
        journal: bool = False,
        journal_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        if flush_interval is None:
            flush_interval = JOURNAL_FLUSH_INTERVAL_S if journal else FLUSH_INTERVAL_S
        if batch_size < 1 or queue_size < 1 or flush_interval <= 0:
            raise ValueError("batch_size and queue_size must be >= 1, flush_interval > 0")
        self.spool_dir = Path(spool_dir)
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        # the journal is spool-first with the spooling done on its own thread
        self.spool_first = spool_first or journal
        self._link = DatabaseLink(
            url,
            engine=engine,
            upgrade=upgrade,
            retry_min=retry_min,
            retry_max=retry_max,
            spool_dir=self.spool_dir,
        )
        self.url = self._link.url
        key = store_key(url)
        self.identity = StoreIdentity(key, read_cached_id(self.spool_dir, key))
        self._counters = Counters()
        self.queue = RecordQueue(queue_size, body_queue_bytes)
        self._spool = Spool(self.spool_dir, self.identity)
        self._handover = Handover(self._spool, self.queue, self._counters, self.spool_dir)
        self._inserter = BatchInsert(self._link, self._counters, self.spool_dir)
        self._replayer = SpoolReplayer(
            ReplayConfig(
                self.spool_dir, batch_size, self.spool_first, segment_seconds, orphan_scan_interval
            ),
            spool=self._spool,
            identity=self.identity,
            link=self._link,
            inserter=self._inserter,
            records=self.queue,
            counters=self._counters,
        )
        self._journal: Journal | None = None
        if journal:
            self._journal = Journal(self._handover.group, interval=journal_interval)
        self._stop = threading.Event()
        self._closed = False
        self._close_deadline = 0.0
        self._thread = threading.Thread(target=self._run, name="recorder-sql-writer", daemon=True)
        self._started = False
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
            elif self.spool_first:
                self._handover.numbered(record)
            elif self._closed:  # late: leave it on disk, unlocked, for the next process
                self._handover.after_close(record)
            elif not self.queue.offer(record):  # full, or bodies pile up: the writer is behind
                self._handover.spill([record])
        except Exception as e:  # a sink must not raise into the event loop
            self._counters.drop(
                self._counters.caller,
                1,
                f"unexpected {type(e).__name__}: {e}",
                getattr(record, "id", None),
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Commit (or spool) every record submitted so far, now, and wait for it;
        False on timeout. (With the journal, what it holds is journaled first, on
        the caller's thread if its own has not taken it yet.)"""
        end = None if timeout is None else time.monotonic() + timeout
        journal = self._journal
        if journal is not None and not journal.flush(timeout):
            return False
        self.queue.hurry()  # a batch gathering is written at once, not at its deadline
        return self.queue.join(None if end is None else max(0.0, end - time.monotonic()))

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Write or spool everything submitted, stop the writer, release the spool;
        back within about ``timeout`` seconds whatever the database does."""
        if self._closed:
            return
        self._closed = True  # first: a late submit now takes the spool's path
        self._handover.close()
        if self._journal is not None:  # what it holds goes to the spool and the queue
            self._journal.stop()
        self._close_deadline = time.monotonic() + timeout / 2
        self._stop.set()
        self.queue.wake()
        if self._started:
            self._thread.join(timeout)
        if self._thread.is_alive() or not self._started:
            if self._started:
                log.error(
                    "recorder: the SQL writer did not finish in time; spooling what is left in %s",
                    self.spool_dir,
                )
            self._handover.rescue(self.queue.abandon())
        else:
            self._spool.close()
            self._link.dispose()
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
        totals = self._counters.totals()
        return {
            "queue_depth": self.queue.depth,
            **totals,
            # files holding records that wait for the database (not the journal's)
            "spool_files": self._spool.dirty_files() + self._replayer.waiting_files,
            "db_available": self._link.available,
            "last_error": self._link.last_error,
        }

    # -- the writer thread --------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if self._step():
                    return
            except Exception:  # the thread must outlive any bug
                log.exception("recorder: internal error in the SQL writer")
                stranded = self.queue.stranded()
                if stranded:
                    self.queue.settle(stranded, self._handover.writer_spill)
                    self.queue.done(stranded)
                time.sleep(0.05)

    def _step(self) -> bool:
        """One batch from the queue, then the spool's upkeep; True once the
        writer is done (stopped and drained, or abandoned by ``close``)."""
        stopping = self._stop.is_set()
        # with spool files to replay, do not idle on an empty queue
        replaying = self._replayer.pending and self._link.may_try()
        wait = not stopping and not replaying
        batch, late = self.queue.take_batch(
            self.batch_size,
            self.flush_interval,
            wait=wait,
            first_within=max(self.flush_interval, self._replayer.quiet_for()) if wait else 0.0,
        )
        if late:  # taken after close() gave up on the writer: spooled by the writer
            self._handover.writer_spill(late)
            self.queue.done(late)
        if batch:
            self._write(batch)
        if self.queue.abandoned:  # close() spooled what was left; the process is going
            # let go of the files it claimed or opened since (late records): a
            # file kept locked would wait for the process to end
            self._replayer.release()
            self._spool.close()
            return True
        if stopping and self.queue.depth == 0:
            self._replayer.finish(self._close_deadline)
            return True
        if not stopping:
            self._replayer.step()
        return False

    def _write(self, batch: list[Item]) -> None:
        """Commit a batch from the queue, or spool it when the database cannot
        take it (unless ``close`` took it over already)."""
        spill = self._handover.writer_spill
        try:
            if not self._link.may_try():
                self.queue.settle(batch, spill)
                return
            try:
                stored = self._inserter.commit([r for _, r, _ in batch])
            except Unavailable:
                self.queue.settle(batch, spill)
                return
            except Exception as e:  # a bug, or a driver error SQLAlchemy did not wrap
                log.exception("recorder: unexpected error writing a batch; spooling it")
                self._link.outage(e)
                self.queue.settle(batch, spill)
                return
            self._counters.writer.written += stored  # the rejected ones are counted as failed
        finally:
            self.queue.done(batch)
