"""SpoolReplayer: every spooled record replayed until it is stored, each once;
only what did not reach the database; orphaned files claimed on schedule."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from recorder.store.batch_insert import BatchInsert
from recorder.store.counters import Counters
from recorder.store.engine import make_engine
from recorder.store.identity import StoreIdentity, store_key
from recorder.store.link import DatabaseLink
from recorder.store.record_queue import RecordQueue
from recorder.store.spool import Spool, header_line, record_line
from recorder.store.spool_replay import ReplayConfig, SpoolReplayer
from tests.kit.databases import count_rows, ids_in_db, outage, spool_files
from tests.kit.records import simple_record


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Replay:
    """A replayer on a store and a spool directory, with its parts."""

    def __init__(
        self, url: str, spool_dir: Path, *, batch_size: int = 500, scan_interval: float = 10.0
    ) -> None:
        self.clock = Clock()
        self.engine = make_engine(url, sqlite_busy_timeout_ms=50)
        self.link = DatabaseLink(url, engine=self.engine, retry_min=1.0, clock=self.clock)
        self.counters = Counters()
        self.identity = StoreIdentity(store_key(url))
        self.spool = Spool(spool_dir, self.identity)
        self.replayer = SpoolReplayer(
            ReplayConfig(spool_dir, batch_size=batch_size, scan_interval=scan_interval),
            spool=self.spool,
            identity=self.identity,
            link=self.link,
            inserter=BatchInsert(self.link, self.counters, spool_dir),
            records=RecordQueue(100, 1 << 20),
            counters=self.counters,
            clock=self.clock,
        )

    def until_done(self, steps: int = 500) -> None:
        """Step until nothing waits to be replayed (at most ``steps``)."""
        for _ in range(steps):
            self.replayer.step()
            if not self.replayer.pending:
                return
        raise AssertionError("still replaying")

    def close(self) -> None:
        self.replayer.finish(0.0)
        self.spool.close()
        self.engine.dispose()


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "recorder.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def replay(sqlite_url: str, tmp_path: Path) -> Iterator[Replay]:
    r = Replay(sqlite_url, tmp_path / "spool", batch_size=10)
    yield r
    r.close()


def left_by_a_dead_process(d: Path, url: str, lines: list[bytes], n: int = 1) -> Path:
    """A spool file of ``url``'s store that no live process holds."""
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"recorder-spool-99999-1-{n:04d}.jsonl"
    path.write_bytes(header_line(StoreIdentity(store_key(url))) + b"".join(lines))
    return path


def test_every_spooled_record_is_replayed_and_stored_once(
    sqlite_url: str, tmp_path: Path, replay: Replay
) -> None:
    spool = tmp_path / "spool"
    records = [simple_record(i) for i in range(90)]
    early = records[:10]  # committed before its process died, spooled all the same
    BatchInsert(replay.link, Counters(), spool).commit(early)
    torn = record_line(simple_record(777))[:-20]  # killed mid-write
    left_by_a_dead_process(spool, sqlite_url, [record_line(r) for r in records[:50]], 1)
    left_by_a_dead_process(spool, sqlite_url, [record_line(r) for r in records[50:]] + [torn], 2)
    replay.until_done()
    assert sorted(ids_in_db(sqlite_url)) == sorted(r.id for r in records)
    assert spool_files(spool) == []  # each removed once all its records are stored
    assert replay.counters.writer.replayed == 90
    assert replay.counters.writer.dropped == 1  # the torn line, counted


def test_a_replay_cut_short_by_an_outage_starts_again_and_stores_once(
    sqlite_url: str, tmp_path: Path, replay: Replay
) -> None:
    spool = tmp_path / "spool"
    records = [simple_record(i) for i in range(55)]
    path = left_by_a_dead_process(spool, sqlite_url, [record_line(r) for r in records])
    replay.replayer.step()  # claims it, replays the first batch of 10
    replay.replayer.step()
    assert count_rows(sqlite_url) == 20
    with outage(sqlite_url):
        replay.replayer.step()  # the database is locked: the file waits, still locked
        assert not replay.link.available and replay.replayer.pending
        for _ in range(5):
            replay.replayer.step()  # backing off: not tried
    assert count_rows(sqlite_url) == 20 and path.exists()
    replay.clock.t = replay.link.retry_at
    replay.until_done()
    assert sorted(ids_in_db(sqlite_url)) == sorted(r.id for r in records)
    assert not path.exists()
    assert replay.counters.writer.replayed == 20 + 55  # the file again, from its start


def test_only_the_records_that_did_not_reach_the_database_are_replayed(
    sqlite_url: str, replay: Replay
) -> None:
    """This process's own spool-first file: a replay takes the lines it marked
    (the queue could not take them, or the database was away), not the others,
    which the queue committed."""
    records = [simple_record(i) for i in range(10)]
    with replay.spool.lock:
        seg = replay.spool.append_locked(b"".join(map(record_line, records)), 10, 1)
        seg.last_seq = 10
    seg.mark(3, 5)
    replay.spool.seal()
    replay.until_done()
    assert sorted(ids_in_db(sqlite_url)) == sorted(r.id for r in records[2:5])
    assert not seg.path.exists()


def test_orphans_are_claimed_at_the_first_scan_then_every_interval(
    sqlite_url: str, tmp_path: Path, replay: Replay
) -> None:
    spool = tmp_path / "spool"
    replay.replayer.step()  # the first scan: nothing yet
    first = left_by_a_dead_process(spool, sqlite_url, [record_line(simple_record(1))], 1)
    replay.clock.t = 9.9
    replay.until_done()
    assert first.exists() and count_rows(sqlite_url) == 0  # not before the interval
    replay.clock.t = 10.0
    replay.until_done()
    assert not first.exists() and count_rows(sqlite_url) == 1


def test_orphans_are_claimed_as_soon_as_an_outage_ends(
    sqlite_url: str, tmp_path: Path, replay: Replay
) -> None:
    """A process that died while the database was away left records no one else
    writes: the others look for them once it is back, not at the next interval."""
    spool = tmp_path / "spool"
    replay.replayer.step()
    left_by_a_dead_process(spool, sqlite_url, [record_line(simple_record(1))], 1)
    replay.clock.t = 1.0
    replay.link.outage(OperationalError("INSERT", {}, Exception("gone")))
    replay.link.succeeded()  # a write went through again
    replay.until_done()
    assert count_rows(sqlite_url) == 1 and spool_files(spool) == []
