"""Handover: every record handed over ends in exactly one place (the queue, the
spool marked for a replay, or counted as dropped), whatever the spool's disk and
the queue do."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from recorder.core.record import StreamRecord
from recorder.store import spool as spool_mod
from recorder.store.counters import Counters
from recorder.store.handover import Handover
from recorder.store.record_queue import Item, RecordQueue
from recorder.store.spool import SPOOL_PREFIX, BadLine, Spool, read_records
from tests.kit.records import simple_record

_real_write = os.write


class FlakyDisk:
    """Every ``every``-th write to a spool file fails (ENOSPC), at the first byte."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.writes = 0
        self.failed = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:
        try:
            spooling = SPOOL_PREFIX in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            spooling = False
        if spooling:
            self.writes += 1
            if self.writes % self.every == 0:
                self.failed += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _real_write(fd, data)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FlakyDisk:
    d = FlakyDisk(every=3)
    monkeypatch.setattr(spool_mod.os, "write", d.write)
    return d


class Parts:
    """A handover with its spool, a small queue and the counters."""

    def __init__(self, directory: Path, queue_size: int = 20) -> None:
        self.spool = Spool(directory)
        self.queue = RecordQueue(queue_size, body_budget=1 << 20)
        self.counters = Counters()
        self.handover = Handover(self.spool, self.queue, self.counters, directory)

    def take(self, n: int) -> list[Item]:
        """What a writer takes off the queue (and deals with)."""
        batch, _ = self.queue.take_batch(n, 0.001, wait=False)
        self.queue.done(batch)
        return batch

    def replayable(self) -> list[str]:
        """The ids a replay of the spool would take: the lines of the files holding
        records that did not reach the database, that the files say are such."""
        out: list[str] = []
        for seg in list(self.spool.segments):
            if not seg.dirty:
                continue
            n = 0
            for chunk in read_records(seg.path, 1000):
                for item in chunk:
                    assert not isinstance(item, BadLine)  # a failed append leaves no torn line
                    if seg.replays(n):
                        out.append(item.id or "")
                    n += 1
        return out


def ids(items: list[Item]) -> list[str]:
    return [r.id or "" for _, r, _ in items]


def assert_each_once(
    parts: Parts, records: list[StreamRecord], taken: list[str], queued: list[str]
) -> None:
    """Taken by the writer, still queued, or waiting in the spool: each record in
    one place at most, and the ones in none are exactly those counted as dropped."""
    spooled = parts.replayable()
    kept = taken + queued + spooled
    assert len(kept) == len(set(kept))  # never in two places
    assert set(kept) <= {r.id for r in records}
    totals = parts.counters.totals()
    assert totals["dropped"] == len(records) - len(kept)  # never in none, unless counted
    assert totals["spooled"] == len(spooled)


def test_journal_groups_are_never_lost_nor_doubled_under_a_failing_disk(
    tmp_path: Path, disk: FlakyDisk
) -> None:
    parts = Parts(tmp_path)
    records = [simple_record(i) for i in range(300)]
    taken: list[str] = []
    for k in range(0, 300, 10):
        parts.handover.group(records[k : k + 10])
        if k % 30 == 0:  # a writer slower than the traffic: the queue fills up
            taken += ids(parts.take(15))
    queued = ids(parts.take(1000))
    assert disk.failed >= 5 and parts.counters.caller.dropped > 0  # both things happened
    assert parts.counters.caller.spooled > 0
    assert_each_once(parts, records, taken, queued)


def test_spooled_first_records_are_never_lost_nor_doubled_under_a_failing_disk(
    tmp_path: Path, disk: FlakyDisk
) -> None:
    parts = Parts(tmp_path, queue_size=8)
    records = [simple_record(i) for i in range(120)]
    taken: list[str] = []
    for n, r in enumerate(records):
        parts.handover.numbered(r)
        if n % 12 == 0:
            taken += ids(parts.take(5))
    queued = ids(parts.take(1000))
    assert disk.failed >= 5 and parts.counters.caller.dropped > 0
    assert_each_once(parts, records, taken, queued)


def test_after_close_records_stay_in_the_spool(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    before, after = simple_record(1), simple_record(2)
    parts.handover.numbered(before)
    parts.handover.close()
    parts.handover.numbered(after)
    assert ids(parts.take(10)) == [before.id]  # nothing more is queued
    assert parts.replayable() == []  # the spool is let go of once closed
    (path,) = tmp_path.glob(f"{SPOOL_PREFIX}*")
    lines = [r.id for chunk in read_records(path, 10) for r in chunk if not isinstance(r, BadLine)]
    assert lines == [before.id, after.id]  # the next process replays the file


def test_the_writers_fallback_spools_a_batch_once(tmp_path: Path) -> None:
    """The database is away: the writer's batch, part of it spooled first (by the
    journal), part not, is spooled; the records already on disk are only marked."""
    parts = Parts(tmp_path, queue_size=100)
    journaled = [simple_record(i) for i in range(10)]
    plain = [simple_record(100 + i) for i in range(5)]
    parts.handover.group(journaled)
    for r in plain:
        assert parts.queue.offer(r)
    batch = parts.take(100)
    assert parts.replayable() == []  # queued: nothing to replay yet
    parts.handover.writer_spill(batch)
    spooled = parts.replayable()
    assert sorted(spooled) == sorted(r.id for r in journaled + plain)
    assert parts.counters.writer.spooled == 15 and parts.counters.caller.spooled == 0


def test_close_rescues_what_the_writer_held(tmp_path: Path) -> None:
    parts = Parts(tmp_path, queue_size=100)
    parts.handover.group([simple_record(i) for i in range(6)])
    for i in range(4):
        parts.queue.offer(simple_record(50 + i))
    items = parts.queue.abandon()
    spool_paths = list(tmp_path.glob(f"{SPOOL_PREFIX}*"))
    parts.handover.rescue(items)
    assert parts.spool.segments == []  # let go of: the files stay for the next process
    waiting = {
        r.id
        for p in tmp_path.glob(f"{SPOOL_PREFIX}*")
        for chunk in read_records(p, 100)
        for r in chunk
        if not isinstance(r, BadLine)
    }
    assert waiting == {r.id for _, r, _ in items}
    assert all(p.exists() for p in spool_paths)
