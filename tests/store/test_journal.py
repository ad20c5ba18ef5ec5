"""Unit tests of recorder/store/journal.py: every record added is written once, in
order, soon after it was added, whether the journal's thread slept or was busy."""

from __future__ import annotations

import random
import threading
import time

from recorder.core.record import StreamRecord
from recorder.store.journal import Journal
from tests.kit.databases import wait_for
from tests.kit.records import simple_record


class Writes:
    """What the journal handed to ``write``, group by group; can hold a group."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.inside = threading.Event()

    def __call__(self, records: list[StreamRecord]) -> None:
        self.inside.set()
        self.gate.wait(10)
        self.groups.append([r.id for r in records if r.id])

    @property
    def ids(self) -> list[str]:
        return [i for group in self.groups for i in group]


def test_an_idle_journal_writes_a_record_without_waiting_for_its_backstop() -> None:
    # The thread sleeps while nothing waits (no wake-up every 50 ms to look): the
    # record's arrival wakes it. With an hour's backstop, only that can write it.
    writes = Writes()
    journal = Journal(writes, interval=3600)
    try:
        records = [simple_record(i) for i in range(3)]
        time.sleep(0.1)  # the thread is asleep now
        for i, record in enumerate(records):
            journal.add(record)
            wait_for(lambda i=i: len(writes.ids) == i + 1, 10)  # type: ignore[misc]
            time.sleep(0.05)  # asleep again before the next one
        assert writes.ids == [r.id for r in records]
    finally:
        journal.stop()


def test_records_added_while_a_group_is_written_are_all_written_once_in_order() -> None:
    # The wake-up is sent only when the journal goes from empty to not empty: records
    # added while the thread writes, or just after it looked, must not be left behind.
    writes = Writes()
    journal = Journal(writes, interval=3600, group=5)
    rng = random.Random(3)
    sent: list[str] = []
    try:
        for burst in range(40):
            if burst % 4 == 0:  # now and then, the thread is held inside a write
                writes.gate.clear()
                writes.inside.clear()
                journal.add(rec := simple_record(len(sent)))
                sent.append(rec.id or "")
                assert writes.inside.wait(10)
            for _ in range(rng.randint(1, 12)):
                journal.add(rec := simple_record(len(sent)))
                sent.append(rec.id or "")
                if rng.random() < 0.3:
                    time.sleep(rng.random() / 500)
            writes.gate.set()
            if rng.random() < 0.5:
                wait_for(lambda: len(writes.ids) == len(sent), 10)
        wait_for(lambda: len(writes.ids) == len(sent), 10)
        assert writes.ids == sent
        assert max(len(g) for g in writes.groups) <= 5
        assert journal.waiting == 0
    finally:
        writes.gate.set()
        journal.stop()


def test_stop_writes_what_waits() -> None:
    writes = Writes()
    writes.gate.clear()
    journal = Journal(writes, interval=3600)
    records = [simple_record(i) for i in range(4)]
    journal.add(records[0])
    assert writes.inside.wait(10)  # the first is being written, held
    for record in records[1:]:
        journal.add(record)
    writes.gate.set()
    journal.stop()
    assert writes.ids == [r.id for r in records]
