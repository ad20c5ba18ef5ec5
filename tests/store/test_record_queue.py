"""RecordQueue: never blocks, bounds the bodies waiting, and hands every record
over exactly once, to the writer or to close."""

from __future__ import annotations

import dataclasses
import threading

from recorder.core.captured import CapturedBody, CapturedRecord
from recorder.core.record import StreamRecord
from recorder.store.record_queue import Item, RecordQueue
from tests.kit.records import simple_record


def with_body(i: int, size: int) -> CapturedRecord:
    """A record carrying a captured body of ``size`` bytes."""
    rec = simple_record(i)
    values = {f.name: getattr(rec, f.name) for f in dataclasses.fields(StreamRecord)}
    cap = CapturedBody(100.0, 100.1, stall_after=30.0)
    cap.add(b"x" * size, 100.2)
    cap.end(100.3, "eof")
    return CapturedRecord(**values, body=cap)


def ids(items: list[Item]) -> list[str]:
    return [r.id or "" for _, r, _ in items]


def test_offer_never_blocks_and_refuses_past_the_size() -> None:
    q = RecordQueue(3, body_budget=1 << 20)
    records = [simple_record(i) for i in range(5)]
    assert [q.offer(r) for r in records] == [True, True, True, False, False]
    assert q.depth == 3


def test_the_bodies_waiting_stay_within_the_budget() -> None:
    q = RecordQueue(100, body_budget=2500)
    accepted = [q.offer(with_body(i, 1000)) for i in range(4)]
    assert accepted == [True, True, False, False]  # a third would take it past 2500
    assert q.offer(simple_record(9))  # a record without a body is not held back
    assert q.body_bytes_in - q.body_bytes_out == 2000
    batch, late = q.take_batch(10, 0.01, wait=False)
    assert len(batch) == 3 and late == []
    assert q.body_bytes_in == q.body_bytes_out == 2000  # gathered: no longer waiting
    assert q.offer(with_body(5, 1000)) and q.offer(with_body(6, 1000))


def test_records_spooled_first_are_not_held_to_the_budget() -> None:
    """Without the budget (spool-first, the record is on disk already) only the
    queue's size bounds them."""
    q = RecordQueue(100, body_budget=10)
    assert q.offer(with_body(0, 1000), 7, budgeted=False)
    assert q.body_bytes_in == 0
    batch, _ = q.take_batch(10, 0.01, wait=False)
    assert [(s, n) for s, _, n in batch] == [(7, 0)] and q.body_bytes_out == 0


def test_a_batch_is_at_most_its_size_and_keeps_the_order() -> None:
    q = RecordQueue(100, body_budget=1 << 20)
    records = [simple_record(i) for i in range(25)]
    for r in records:
        q.offer(r)
    seen: list[str] = []
    while q.depth:
        batch, _ = q.take_batch(10, 0.01, wait=False)
        assert len(batch) <= 10
        seen += ids(batch)
        q.done(batch)
    assert seen == [r.id for r in records]


def test_join_waits_for_every_record_to_be_done() -> None:
    q = RecordQueue(10, body_budget=1 << 20)
    q.offer(simple_record(1), 4, budgeted=False)
    q.offer(simple_record(2), 3, budgeted=False)
    assert q.join(timeout=0) is False  # queued, not done
    batch, _ = q.take_batch(10, 0.01, wait=False)
    assert not q.idle  # in flight
    assert q.join(timeout=0) is False
    q.done(batch)
    assert q.join(timeout=0) is True and q.idle
    assert q.done_seq == 4  # the highest spool number dealt with


def test_wake_ends_the_writers_wait_without_a_record() -> None:
    q = RecordQueue(10, body_budget=1 << 20)
    q.wake()
    batch, late = q.take_batch(10, 60.0, wait=True)  # would wait a minute otherwise
    assert batch == late == [] and q.join(timeout=0)


def gathering(q: RecordQueue, size: int, flush: float) -> tuple[threading.Thread, list[Item]]:
    """A writer taking a batch on a thread of its own (its batch, once back)."""
    out: list[Item] = []

    def take() -> None:
        batch, late = q.take_batch(size, flush, wait=True)
        out.extend(batch + late)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, out


def test_a_gathering_writer_takes_its_batch_once_it_can_fill() -> None:
    """The writer waits for a batch's flush deadline (a minute here) without being
    woken by each record; the record that makes the batch full ends the wait."""
    q = RecordQueue(100, body_budget=1 << 20)
    records = [simple_record(i) for i in range(5)]
    thread, out = gathering(q, 5, 60.0)
    for i, rec in enumerate(records):
        assert q.offer(rec)
        thread.join(0.02)
        assert thread.is_alive() == (i < 4)  # not back before the batch can fill
    thread.join(5)
    assert not thread.is_alive() and ids(out) == [r.id for r in records]


def test_what_comes_while_the_writer_gathers_joins_its_batch_at_the_deadline() -> None:
    q = RecordQueue(100, body_budget=1 << 20)
    thread, out = gathering(q, 50, 0.5)
    for i in range(3):
        assert q.offer(simple_record(i))
        thread.join(0.05)
    thread.join(5)
    assert not thread.is_alive() and len(out) == 3  # one batch, not three


def test_wake_ends_a_gathering_writers_wait_with_what_it_has() -> None:
    q = RecordQueue(100, body_budget=1 << 20)
    rec = simple_record(1)
    thread, out = gathering(q, 50, 60.0)
    assert q.offer(rec)
    thread.join(0.1)
    assert thread.is_alive()  # gathering, until the deadline a minute away
    q.wake()
    thread.join(5)
    assert not thread.is_alive() and ids(out) == [rec.id]


def test_settle_spills_unless_close_took_the_batch() -> None:
    q = RecordQueue(10, body_budget=1 << 20)
    q.offer(simple_record(1))
    batch, _ = q.take_batch(10, 0.01, wait=False)
    spilled: list[Item] = []
    q.settle(batch, spilled.extend)
    assert spilled == batch
    q.offer(simple_record(2))
    batch, _ = q.take_batch(10, 0.01, wait=False)
    taken = q.abandon()  # close gives up on the writer: it takes the batch in flight
    assert ids(taken) == ids(batch)
    q.settle(batch, spilled.extend)  # the writer's fallback no longer runs
    assert len(spilled) == 1


def test_a_batch_the_writer_spooled_is_not_close_s_to_spool_again() -> None:
    """close may give up on the writer between its spooling a batch and marking
    it done: that batch is no longer in flight."""
    q = RecordQueue(10, body_budget=1 << 20)
    q.offer(simple_record(1))
    batch, _ = q.take_batch(10, 0.01, wait=False)
    spilled: list[Item] = []
    q.settle(batch, spilled.extend)
    assert q.abandon() == [] and len(spilled) == 1
    q.done(batch)
    assert q.join(timeout=0)


def spooled_by_writer_and_close(abandon_at: int, n: int = 300) -> tuple[list[str], list[str]]:
    """A writer takes batches while ``n`` records come in and spools each (the
    database is away); close abandons it after ``abandon_at`` records and spools
    what it takes. The ids each of them spooled."""
    q = RecordQueue(1000, body_budget=1 << 20)
    by_writer: list[Item] = []
    by_close: list[Item] = []
    stop = threading.Event()

    def writer() -> None:
        while not q.abandoned and not stop.is_set():
            batch, late = q.take_batch(7, 0.001, wait=True)
            q.settle(batch, by_writer.extend)
            by_writer.extend(late)  # taken after the abandon: the writer's to spool
            q.done(batch)
            q.done(late)

    t = threading.Thread(target=writer)
    t.start()
    for i in range(n):
        assert q.offer(simple_record(i))
        if i == abandon_at:
            by_close += q.abandon()
    stop.set()
    t.join(10)
    by_close += q.abandon()  # what came after the first abandon
    assert q.join(timeout=5)
    return ids(by_writer), ids(by_close)


def test_every_record_is_spooled_once_by_the_writer_or_by_close() -> None:
    """Each record is spooled by the writer or by close: never both, never
    neither, whatever the interleaving."""
    for abandon_at in range(100, 300, 10):
        by_writer, by_close = spooled_by_writer_and_close(abandon_at)
        both = by_writer + by_close
        assert len(both) == 300 and len(set(both)) == 300
