"""Replaying the spool between batches: the writer's upkeep of spool files.

While the database takes writes, the writer retires the spool files holding
records that did not reach it, claims those left by dead processes of the same
store (and says once what waits for other stores), reads the store's id once,
and replays one batch of a file at a time, after the queue's batches. Replaying
is idempotent (``ON CONFLICT DO NOTHING``): a file is removed only once every
record in it is committed. ``finish`` is the last replay, at ``close``.

They take the ``SqlSink`` whose state they keep (``recorder.store.writer`` holds
the theory of operation).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from recorder.core.record import StreamRecord
from recorder.store import batch_insert, handover
from recorder.store.batch_insert import Unavailable
from recorder.store.identity import cache_id, get_or_create_store_id
from recorder.store.spool import BadLine, SpoolFile, describe, read_records

if TYPE_CHECKING:
    from recorder.store.writer import SqlSink

log = logging.getLogger("recorder.store")


def housekeeping(sink: SqlSink) -> None:
    if not sink._may_use_db():
        return
    now = time.monotonic()
    if sink._needs_upgrade:
        try:
            batch_insert.ensure_schema(sink)
        except Unavailable:
            return
    sort_own_segments(sink)
    if now >= sink._next_orphan_scan and read_identity(sink):
        sink._next_orphan_scan = now + sink.orphan_scan_interval
        exclude = sink._spool.owned_paths() | {s.path for s in sink._replay_queue}
        if sink._replay_seg is not None:
            exclude.add(sink._replay_seg.path)
        mine, others = sink._spool.claim_orphans(exclude)
        for seg in mine:
            log.warning("recorder: replaying spool file %s left by another process", seg.path)
            sink._replay_queue.append(seg)
        tell_of_others(sink, others)
    if sink._queue.qsize() < sink.batch_size:  # the queue comes first
        replay_step(sink)


def read_identity(sink: SqlSink) -> bool:
    """Read the store id from the database once (creating it on first use) and
    cache it beside the spool; False while the database cannot be read."""
    if sink._identity_read:
        return True
    try:
        batch_insert.ensure_schema(sink)
        store_id = get_or_create_store_id(sink._engine)
    except Unavailable:
        return False
    except SQLAlchemyError as e:
        batch_insert.outage(sink, e)
        return False
    known = sink.identity.store_id
    if known is not None and known != store_id:
        log.warning(
            "recorder: %s is another store than the one this spool directory knew"
            " there (store id %s, was %s); the old one's spool files are left alone",
            sink.url,
            store_id,
            known,
        )
    with sink._spool.lock:  # new spool files carry the id from now on
        sink.identity.store_id = store_id
    cache_id(sink.spool_dir, sink.identity.key, store_id)
    sink._identity_read = True
    return True


def tell_of_others(sink: SqlSink, others: list[SpoolFile]) -> None:
    """Say once, in one line, what waits in the spool directory for other stores."""
    new = [f for f in others if f.path not in sink._reported]
    if not new:
        return
    sink._reported.update(f.path for f in new)
    waiting: dict[str, int] = {}
    for f in map(describe, (f.path for f in others)):  # read through, to count
        name = f.store or "no store named (an older recorder's files)"
        if f.store_id:
            name += f" (store id {f.store_id})"
        waiting[name] = waiting.get(name, 0) + f.records
    log.warning(
        "recorder: spool directory %s holds records for other stores, left untouched: %s",
        sink.spool_dir,
        "; ".join(f"{n} for {name}" for name, n in waiting.items()),
    )


def sort_own_segments(sink: SqlSink) -> None:
    spool = sink._spool
    cur = spool.current
    if cur is not None and cur.records:
        # a spilled record waits in the current file: retire it so it can be replayed
        # (once the database may be tried); spool-first: retire files as they age, so
        # the committed ones can be removed
        age = time.monotonic() - cur.opened_at
        if (cur.dirty and sink._may_use_db()) or (sink.spool_first and age >= sink.segment_seconds):
            spool.seal()
    for seg in spool.sealed():
        if seg.dirty:
            with spool.lock:
                spool.segments.remove(seg)
            sink._replay_queue.append(seg)
        elif seg.last_seq <= sink._done_seq or (sink._queue.empty() and not sink._inflight):
            spool.forget(seg, remove=True)  # every record in it is committed


def replay_step(sink: SqlSink) -> None:
    """Replay one batch from the spool."""
    if sink._replay_iter is None:
        if not sink._replay_queue:
            return
        first = sink._replay_queue.popleft()
        sink._replay_seg = first
        sink._replay_iter = read_records(first.path, sink.batch_size)
        sink._replay_pos = 0
    seg = sink._replay_seg
    assert seg is not None
    try:
        chunk = next(sink._replay_iter)
    except StopIteration:
        sink._replay_iter = None
        sink._replay_seg = None
        seg.release(remove=True)
        log.info("recorder: spool file %s replayed", seg.path.name)
        return
    except OSError as e:
        log.error("recorder: cannot read spool file %s: %s", seg.path, e)
        sink._replay_iter = None
        sink._replay_seg = None
        seg.release(remove=False)
        return
    records: list[StreamRecord] = []
    for item in chunk:
        sink._replay_pos += 1
        if not seg.replays(sink._replay_pos - 1):
            continue  # one of this process's records that is in the database already
        if isinstance(item, BadLine):
            sink._dropped += 1
            handover.log_drop(
                sink, 1, f"unreadable line {item.lineno} of {seg.path.name}: {item.reason}", None
            )
        else:
            records.append(item)
    try:
        stored = batch_insert.commit(sink, records)
    except Exception as e:
        if not isinstance(e, Unavailable):
            log.exception("recorder: unexpected error replaying %s", seg.path.name)
            batch_insert.outage(sink, e)
        # start this file again later (idempotent); keep its lock meanwhile
        sink._replay_iter = None
        sink._replay_seg = None
        sink._replay_queue.appendleft(seg)
        return
    sink._replayed += stored  # the rejected ones are counted as failed


def finish(sink: SqlSink) -> None:
    """Stopping: the queue is empty. Replay this process's own spool files while
    the database takes them and time allows (half of ``close``'s timeout), then
    release the spool; files still holding records stay for the next process."""
    while sink._db_ok and not sink._abandoned and time.monotonic() < sink._close_deadline:
        sink._spool.seal()
        sort_own_segments(sink)
        if sink._replay_iter is None and not sink._replay_queue:
            break
        replay_step(sink)
    if sink._replay_iter is not None:
        sink._replay_iter = None
    if sink._replay_seg is not None:
        sink._replay_seg.release(remove=False)
        sink._replay_seg = None
    while sink._replay_queue:
        sink._replay_queue.popleft().release(remove=False)
    spool = sink._spool
    if sink.spool_first:
        spool.seal()
        for seg in spool.sealed():
            if not seg.dirty:
                spool.forget(seg, remove=True)
