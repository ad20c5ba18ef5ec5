"""Replaying the spool between batches: the writer's upkeep of spool files.

``SpoolReplayer`` runs on the writer thread, after the queue's batches. It owns
the files waiting to be replayed (this process's own, retired from the spool,
and those it claimed from dead processes of the same store), the file being
replayed and how far, when to look for orphaned files next, and whether the
store's id has been read. Invariants:

- Every spooled record is replayed until it is committed: a file is removed
  only once every record it holds that did not reach the database otherwise
  (``Segment.replays``) is committed. A replay cut short by an outage starts the
  file again later, keeping it locked meanwhile; ``ON CONFLICT DO NOTHING``
  stores its records once however often it is replayed.
- Files are replayed only while the database may be tried, one batch at a time,
  and only while fewer than a batch of records wait in the queue (the queue
  comes first).
- Orphaned files (no live process holds them) of this store are claimed at the
  first scan, every ``scan_interval`` seconds after that, and at the next step
  after writing resumed (``DatabaseLink.resumed``: an outage ended, or a
  transaction waited on a lock). A process that died while the database was
  away or locked left records no one else writes; the others find them as
  soon as they can write again, not a scan interval later. A scan costs one
  directory listing and one ``open`` + ``flock`` per file not this process's,
  at most once a second from locks (a transaction that waited a second), once
  per outage, and once per ``scan_interval``.
- Other stores' files are never touched (beyond the lock of a look at their
  header); what waits for them is said once, in one line.
- Once ``close`` gave up on the writer (``RecordQueue.abandon``), nothing is
  sorted, claimed, replayed or removed: what ``close`` took is spooled, not
  committed, and every file held is let go of (``release``) for the next writer.
- The store id is read from the database once, before the first scan (files
  are claimed by it), and from then on named in every new spool file.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from recorder.core.record import StreamRecord
from recorder.store.batch_insert import BatchInsert
from recorder.store.counters import Counters
from recorder.store.identity import StoreIdentity, cache_id
from recorder.store.link import DatabaseLink, Unavailable
from recorder.store.record_queue import RecordQueue
from recorder.store.spool import BadLine, Segment, Spool, SpoolFile, describe, read_records

log = logging.getLogger("recorder.store")


@dataclass(slots=True, frozen=True)
class ReplayConfig:
    """How the replayer works: batches, the spool's mode, and the scan period."""

    spool_dir: Path
    batch_size: int = 500
    spool_first: bool = False  # retire own files as they age (``segment_seconds``)
    segment_seconds: float = 2.0
    scan_interval: float = 10.0


class SpoolReplayer:
    """This process's upkeep of the spool directory: retire, claim, replay, remove."""

    def __init__(
        self,
        config: ReplayConfig,
        *,
        spool: Spool,
        identity: StoreIdentity,
        link: DatabaseLink,
        inserter: BatchInsert,
        records: RecordQueue,
        counters: Counters,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cfg = config
        self._spool = spool
        self._identity = identity
        self._link = link
        self._inserter = inserter
        self._queue = records
        self._counters = counters
        self._clock = clock  # the scan schedule's
        self._waiting: deque[Segment] = deque()  # files to replay, oldest first
        self._reading: Iterator[list[StreamRecord | BadLine]] | None = None
        self._seg: Segment | None = None  # the file being replayed
        self._pos = 0  # record lines of that file read so far
        self._next_scan = 0.0
        self._seen_resumed = -1  # link.resumed at the last scan
        self._identity_read = False
        self._reported: set[Path] = set()  # other stores' files already told of

    @property
    def waiting_files(self) -> int:
        """Files claimed or retired for a replay, the one being replayed included."""
        return len(self._waiting) + (self._seg is not None)

    @property
    def pending(self) -> bool:
        """Whether files wait to be replayed."""
        return self._reading is not None or bool(self._waiting)

    def quiet_for(self) -> float:
        """Seconds this upkeep has nothing to do unless a record comes (0: it has
        work now: files to replay, retire or remove, the schema or the store id
        to read, a scan due). The writer waits that long for a record, not one
        flush interval after another: a thread woken for nothing costs CPU."""
        if (
            self.pending
            or not self._link.schema_checked
            or not self._identity_read
            or self._link.resumed != self._seen_resumed
            or self._queue.abandoned
        ):
            return 0.0
        cfg = self._cfg
        files = self._spool.next_upkeep(cfg.segment_seconds if cfg.spool_first else None)
        return max(0.0, min(self._next_scan - self._clock(), files - time.monotonic()))

    def step(self) -> None:
        """The upkeep between two batches: retire own files, scan for orphans when
        due, and replay one batch if the queue leaves room."""
        link = self._link
        if not link.may_try():
            return
        if not link.schema_checked:
            try:
                link.ensure_schema()
            except Unavailable:
                return
        # close() may have given up on the writer while it waited on the database:
        # then sort, claim and replay nothing more (close spooled the rest for the
        # next writer of the store; the writer lets go of what it holds)
        if self._queue.abandoned:
            return
        self._sort_own_files()
        now = self._clock()
        if self._scan_due(now) and not self._queue.abandoned and self._read_identity():
            self._scan(now)
        if self._queue.depth < self._cfg.batch_size and not self._queue.abandoned:
            self.replay_batch()

    def _scan_due(self, now: float) -> bool:
        return now >= self._next_scan or self._link.resumed != self._seen_resumed

    def _scan(self, now: float) -> None:
        """Claim the orphaned files of this store, and tell of the others'."""
        self._next_scan = now + self._cfg.scan_interval
        self._seen_resumed = self._link.resumed
        exclude = self._spool.owned_paths() | {s.path for s in self._waiting}
        if self._seg is not None:
            exclude.add(self._seg.path)
        mine, others = self._spool.claim_orphans(exclude)
        for seg in mine:
            log.warning("recorder: replaying spool file %s left by another process", seg.path)
            self._waiting.append(seg)
        self._tell_of_others(others)

    def _read_identity(self) -> bool:
        """Read the store id from the database once (creating it on first use) and
        cache it beside the spool; False while the database cannot be read."""
        if self._identity_read:
            return True
        store_id = self._link.read_store_id()
        if store_id is None:
            return False
        known = self._identity.store_id
        if known is not None and known != store_id:
            log.warning(
                "recorder: %s is another store than the one this spool directory knew"
                " there (store id %s, was %s); the old one's spool files are left alone",
                self._link.url,
                store_id,
                known,
            )
        self._spool.name_store(store_id)  # new spool files carry the id from now on
        cache_id(self._cfg.spool_dir, self._identity.key, store_id)
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
            self._cfg.spool_dir,
            "; ".join(f"{n} for {name}" for name, n in waiting.items()),
        )

    def _sort_own_files(self) -> None:
        """Retire this process's files: those holding records that did not reach
        the database go to the replay; the others are removed once every record
        in them is committed."""
        spool = self._spool
        cur = spool.current
        if cur is not None and cur.records:
            # a spilled record waits in the current file: retire it so it can be
            # replayed (once the database may be tried); spool-first: retire files
            # as they age, so the committed ones can be removed
            age = time.monotonic() - cur.opened_at
            if (cur.dirty and self._link.may_try()) or (
                self._cfg.spool_first and age >= self._cfg.segment_seconds
            ):
                spool.seal()
        for seg in spool.sealed():
            if seg.dirty:
                spool.detach(seg)
                self._waiting.append(seg)
            elif seg.last_seq <= self._queue.done_seq or self._queue.idle:
                spool.forget(seg, remove=True)  # every record in it is committed

    def replay_batch(self) -> None:
        """Replay one batch from the spool."""
        if self._reading is None:
            if not self._waiting:
                return
            self._seg = self._waiting.popleft()
            self._reading = read_records(self._seg.path, self._cfg.batch_size)
            self._pos = 0
        seg = self._seg
        assert seg is not None
        try:
            chunk = next(self._reading)
        except StopIteration:
            self._let_go(remove=True)
            log.info("recorder: spool file %s replayed", seg.path.name)
            return
        except OSError as e:
            log.error("recorder: cannot read spool file %s: %s", seg.path, e)
            self._let_go(remove=False)
            return
        records = self._records_of(seg, chunk)
        try:
            stored = self._inserter.commit(records)
        except Exception as e:
            if not isinstance(e, Unavailable):
                log.exception("recorder: unexpected error replaying %s", seg.path.name)
                self._link.outage(e)
            # start this file again later (idempotent); keep its lock meanwhile
            self._reading = None
            self._seg = None
            self._waiting.appendleft(seg)
            return
        self._counters.writer.replayed += stored  # the rejected ones are counted as failed

    def _records_of(self, seg: Segment, chunk: list[StreamRecord | BadLine]) -> list[StreamRecord]:
        """The records of ``chunk`` to replay: the lines ``seg`` says did not reach
        the database (every line, for another process's file); an unreadable line
        is counted as dropped."""
        records: list[StreamRecord] = []
        for item in chunk:
            self._pos += 1
            if not seg.replays(self._pos - 1):
                continue  # one of this process's records that is in the database already
            if isinstance(item, BadLine):
                self._counters.drop(
                    self._counters.writer,
                    1,
                    f"unreadable line {item.lineno} of {seg.path.name}: {item.reason}",
                    None,
                )
            else:
                records.append(item)
        return records

    def _let_go(self, *, remove: bool) -> None:
        """Stop replaying the current file, releasing it (removed if asked)."""
        seg = self._seg
        self._reading = None
        self._seg = None
        if seg is not None:
            seg.release(remove=remove)

    def release(self) -> None:
        """Let go of every file claimed or retired for a replay, none removed:
        those still holding records stay for the next process."""
        self._let_go(remove=False)
        while self._waiting:
            self._waiting.popleft().release(remove=False)

    def finish(self, deadline: float) -> None:
        """Stopping, the queue empty: replay this process's own files while the
        database takes them and ``deadline`` (``time.monotonic``) is not past,
        then let go of every file; those still holding records stay for the
        next process."""
        while self._link.available and not self._queue.abandoned and time.monotonic() < deadline:
            self._spool.seal()
            self._sort_own_files()
            if not self.pending:
                break
            self.replay_batch()
        self.release()
        if self._cfg.spool_first and not self._queue.abandoned:
            spool = self._spool
            spool.seal()
            for seg in spool.sealed():
                if not seg.dirty:
                    spool.forget(seg, remove=True)
