"""SqlSink: batches, never blocks, spools through outages, replays exactly once."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from recorder.core.record import StreamRecord
from recorder.store.engine import make_engine
from recorder.store.identity import StoreIdentity, store_key
from recorder.store.link import DatabaseLink
from recorder.store.models import BulkRows
from recorder.store.record_queue import RecordQueue
from recorder.store.spool import REJECTED_FILE, Spool, header_line, record_line
from recorder.store.writer import SqlSink
from tests.kit.databases import (
    count_rows,
    ids_in_db,
    kind_of,
    outage,
    spool_files,
    spooled_docs,
    unreachable_url,
    wait_for,
)
from tests.kit.processes import python_env
from tests.kit.records import simple_record

ROOT = Path(__file__).resolve().parents[2]


def admin_for(request: pytest.FixtureRequest, url: str) -> Engine | None:
    return request.getfixturevalue("pg_admin") if kind_of(url) == "postgresql" else None


def test_writes_in_batches(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool", batch_size=100)
    records = [simple_record(i) for i in range(1234)]
    for r in records:
        sink.submit(r)
    sink.close()
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)
    assert count_rows(db_url, "stream_gaps") == 1234
    stats = sink.stats()
    assert stats["written"] == 1234
    assert stats["spooled"] == stats["dropped"] == stats["failed"] == 0
    assert stats["queue_depth"] == 0
    assert spool_files(tmp_path / "spool") == []


@pytest.mark.parametrize("journal", [False, True])
def test_flush_returns_once_every_record_submitted_is_stored(
    db_url: str, tmp_path: Path, journal: bool
) -> None:
    """``flush`` waits for every record submitted before it, not only for those in
    the queue: with the journal, records still with the journal thread count too
    (before, flush returned at once, with the queue still empty). And it has them
    committed now: a batch's interval of a minute is not waited for."""
    sink = SqlSink(
        db_url, tmp_path / "spool", journal=journal, journal_interval=60.0, flush_interval=60.0
    )
    try:
        for burst in range(3):
            records = [simple_record(burst * 1000 + i) for i in range(300)]
            for r in records:
                sink.submit(r)
            assert sink.flush(30.0)
            assert count_rows(db_url, "streams") == 300 * (burst + 1)
    finally:
        sink.close()


def test_flush_with_the_writer_stuck_in_a_locked_database_gives_up_in_time(
    tmp_path: Path,
) -> None:
    """The writer hangs in a locked database (a minute's busy timeout): ``flush``
    returns False once its timeout has passed, not after the lock, with every record
    journaled to disk meanwhile; once the lock clears, ``flush`` returns True and
    every record is stored once."""
    db = migrated_sqlite(tmp_path)
    engine = make_engine(db, sqlite_busy_timeout_ms=60_000)
    spool = tmp_path / "spool"
    sink = SqlSink(db, spool, engine=engine, journal=True, retry_min=0.05)
    records = [simple_record(i) for i in range(50)]
    try:
        with outage(db):
            for r in records:
                sink.submit(r)
            t0 = time.monotonic()
            assert not sink.flush(1.0)
            assert time.monotonic() - t0 < 30  # not the busy timeout's minute
            assert len(spooled_docs(spool)) == 50  # on disk, whatever the database does
        assert sink.flush(90.0)
        assert sorted(ids_in_db(db)) == sorted(r.id for r in records)
    finally:
        sink.close()
        engine.dispose()


def test_commits_after_the_flush_interval(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool", batch_size=1000, flush_interval=0.05)
    sink.submit(simple_record())
    assert sink.flush(timeout=10)
    assert count_rows(db_url) == 1  # written without close and without a full batch
    sink.close()


def test_the_same_record_twice_is_stored_once(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool")
    rec = simple_record()
    sink.submit(rec)
    sink.submit(rec)
    sink.flush(10)
    sink.submit(rec)
    sink.close()
    assert ids_in_db(db_url) == [rec.id]
    assert count_rows(db_url, "stream_gaps") == 1


def test_a_record_the_database_refuses_is_kept_aside(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    sink = SqlSink(db_url, spool)
    good = [simple_record(i) for i in range(5)]
    bad = simple_record(99, outcome=None)  # NOT NULL
    for r in [*good[:2], bad, *good[2:]]:
        sink.submit(r)
    sink.close()
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in good)
    assert sink.stats()["failed"] == 1 and sink.stats()["dropped"] == 0
    assert bad.id in (spool / REJECTED_FILE).read_text()
    assert "refused record" in caplog.text


@pytest.mark.parametrize(
    "poison",
    [
        {"max_output_tokens": 2**70},  # no driver binds it: not a database outage
        {"project": "caf\udcff"},  # a lone surrogate from a header decoded with surrogateescape
    ],
)
def test_a_record_no_driver_can_bind_is_rejected_alone(
    db_url: str, tmp_path: Path, poison: dict[str, object]
) -> None:
    spool = tmp_path / "spool"
    sink = SqlSink(db_url, spool)
    good = [simple_record(i) for i in range(6)]
    bad = simple_record(77)
    for name, value in poison.items():
        setattr(bad, name, value)
    for r in [*good[:3], bad, *good[3:]]:
        sink.submit(r)
    sink.close()
    stats = sink.stats()
    # the records around it are written, the database is not taken for down,
    # and the counters agree with the table
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in good)
    assert stats["written"] == len(good) and stats["spooled"] == 0
    assert stats["db_available"] is True
    assert stats["failed"] + stats["dropped"] == 1


def migrated_sqlite(tmp_path: Path) -> str:
    """The URL of a SQLite store at ``tmp_path``/r.db brought to head."""
    from recorder.store.migrate import upgrade

    db = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(db)
    return db


def test_queue_full_spools_and_never_blocks(tmp_path: Path) -> None:
    """The database is locked for as long as the writer would wait (a minute):
    submit still returns at once, the overflow going to the spool."""
    db = migrated_sqlite(tmp_path)
    engine = make_engine(db, sqlite_busy_timeout_ms=60_000)
    spool = tmp_path / "spool"
    sink = SqlSink(db, spool, queue_size=10, batch_size=5, engine=engine, retry_min=0.05)
    records = [simple_record(i) for i in range(500)]
    with outage(db):
        t0 = time.monotonic()
        for r in records:
            sink.submit(r)
        elapsed = time.monotonic() - t0
        stats = sink.stats()
        assert elapsed < 30  # a blocked submit would have waited on the 60 s busy timeout
        assert stats["spooled"] >= 500 - 10 - 5
        assert stats["dropped"] == 0
        assert spool_files(spool)
    wait_for(lambda: count_rows(db) == 500 and not spool_files(spool))
    sink.close()
    assert sorted(ids_in_db(db)) == sorted(r.id for r in records)
    engine.dispose()


def test_outage_then_a_new_process_replays(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    engine = make_engine(db_url, sqlite_busy_timeout_ms=100)
    first = SqlSink(db_url, spool, batch_size=50, engine=engine)
    records = [simple_record(i) for i in range(300)]
    with outage(db_url, admin_for(request, db_url)):
        for r in records:
            first.submit(r)
        first.close(timeout=10)
    engine.dispose()
    stats = first.stats()
    assert stats["spooled"] == 300 and stats["written"] == 0 and stats["dropped"] == 0
    assert not stats["db_available"] and stats["last_error"]
    assert spool_files(spool)

    second = SqlSink(db_url, spool, batch_size=50)
    wait_for(lambda: count_rows(db_url) == 300 and not spool_files(spool))
    second.close()
    assert second.stats()["replayed"] == 300
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)


def test_outage_and_recovery_in_process(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    engine = make_engine(db_url, sqlite_busy_timeout_ms=100)
    sink = SqlSink(db_url, spool, engine=engine, batch_size=20, retry_min=0.1, retry_max=0.5)
    before = [simple_record(i) for i in range(50)]
    for r in before:
        sink.submit(r)
    sink.flush(10)
    assert count_rows(db_url) == 50
    during = [simple_record(i) for i in range(200)]
    with outage(db_url, admin_for(request, db_url)):
        for r in during:
            sink.submit(r)
        wait_for(lambda: sink.stats()["spooled"] >= 200)
        assert not sink.stats()["db_available"]
    wait_for(lambda: count_rows(db_url) == 250 and not spool_files(spool))
    after = [simple_record(i) for i in range(30)]
    for r in after:
        sink.submit(r)
    sink.close()
    assert sink.stats()["db_available"]
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in before + during + after)
    engine.dispose()


def _spool_file(
    d: Path, store: str, lines: list[bytes], name: str = "recorder-spool-1-2-0001.jsonl"
) -> Path:
    """A spool file a dead process of ``store`` left."""
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_bytes(header_line(StoreIdentity(store_key(store))) + b"".join(lines))
    return path


def test_a_dead_process_spool_is_replayed_exactly_once(db_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    records = [simple_record(i) for i in range(40)]
    # some already made it to the database before the process died
    early = SqlSink(db_url, tmp_path / "other")
    for r in records[:10]:
        early.submit(r)
    early.close()
    torn = record_line(simple_record(77))[:-20]  # killed mid-write
    path = _spool_file(spool, db_url, [record_line(r) for r in records] + [torn])
    sink = SqlSink(db_url, spool)
    wait_for(lambda: not path.exists())
    sink.close()
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)
    assert sink.stats()["replayed"] == 40
    assert sink.stats()["dropped"] == 1  # the torn line, counted and logged


def test_a_live_process_spool_is_left_alone(db_url: str, tmp_path: Path) -> None:
    import fcntl

    spool = tmp_path / "spool"
    records = [simple_record(i) for i in range(5)]
    path = _spool_file(spool, db_url, [record_line(r) for r in records])
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as its live owner holds it
    sink = SqlSink(db_url, spool, orphan_scan_interval=0.2)
    time.sleep(1.0)
    assert path.exists() and count_rows(db_url) == 0
    os.close(fd)  # the owner dies
    wait_for(lambda: count_rows(db_url) == 5 and not path.exists())
    sink.close()


@pytest.mark.parametrize("journal", [False, True])
def test_an_idle_writer_sleeps_until_a_record_or_its_upkeep_is_due(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: bool
) -> None:
    """Nothing to write, nothing in the spool: the writer waits for a record (or its
    next orphan scan, a minute away here), not one flush interval after another;
    a record that comes is written at once, and the journal's file is retired and
    removed as before."""
    looks = 0
    take = RecordQueue.take_batch

    def counted(self: RecordQueue, *args: Any, **kw: Any) -> Any:
        nonlocal looks
        looks += 1
        return take(self, *args, **kw)

    monkeypatch.setattr(RecordQueue, "take_batch", counted)
    spool = tmp_path / "spool"
    sink = SqlSink(
        db_url,
        spool,
        flush_interval=0.01,
        orphan_scan_interval=60.0,
        segment_seconds=0.2,
        journal=journal,
    )
    assert sink.flush(5)
    time.sleep(0.3)  # settled: schema checked, first scan done
    before = looks
    time.sleep(1.0)
    assert looks - before <= 2  # not 100 looks at an empty queue
    rec = simple_record(1)
    sink.submit(rec)
    wait_for(lambda: count_rows(db_url) == 1)
    wait_for(lambda: not spool_files(spool))  # the journal's file: retired, removed
    time.sleep(0.3)
    before = looks
    time.sleep(1.0)
    assert looks - before <= 2  # quiet again
    sink.close()
    assert count_rows(db_url) == 1


def test_a_sink_closed_while_the_database_is_locked_is_replayed_once_the_lock_clears(
    tmp_path: Path,
) -> None:
    """Two sinks on one SQLite file and one spool directory. While another
    connection locks the database, one sink journals records and goes (closed,
    or killed: either way its files are no longer held); the other was waiting on
    the lock to write. When the lock clears, the other replays the orphaned files
    at once, not at its next periodic scan (a minute away here)."""
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    waits = make_engine(db, sqlite_busy_timeout_ms=60_000)
    other = SqlSink(db, spool, engine=waits, flush_interval=0.05, orphan_scan_interval=60.0)
    other.submit(simple_record(0))
    wait_for(lambda: count_rows(db) == 1 and (spool / ".recorder-store.cache").exists())
    gives_up = make_engine(db, sqlite_busy_timeout_ms=100)
    records = [simple_record(i) for i in range(50)]
    with outage(db):
        going = SqlSink(db, spool, engine=gives_up, journal=True, retry_min=0.05)
        for r in records:
            going.submit(r)
        going.close(timeout=2)  # its records wait in its spool files, now held by no one
        assert going.stats()["dropped"] == 0 and spool_files(spool)
        other.submit(simple_record(1))  # its commit waits for the lock
        time.sleep(1.5)  # the lock is held past LOCK_WAIT_S
    wait_for(lambda: count_rows(db) == 52 and not spool_files(spool), 20)
    assert other.stats()["replayed"] >= 50
    other.close()
    waits.dispose()
    gives_up.dispose()


def test_unwritable_spool_drops_loudly(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    down = unreachable_url(kind_of(db_url), tmp_path)
    sink = SqlSink(down, blocker / "spool", queue_size=5, batch_size=5)
    with caplog.at_level(logging.ERROR, logger="recorder.store"):
        for i in range(20):
            sink.submit(simple_record(i))  # never raises
        sink.close()
    stats = sink.stats()
    assert stats["dropped"] == 20 and stats["spooled"] == 0
    assert "DROPPED" in caplog.text


def test_submit_never_raises(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool", queue_size=1, start=False)
    sink.submit(simple_record())
    sink.submit(object())  # type: ignore[arg-type]  # queue full, and not even a record
    assert sink.stats()["dropped"] == 1
    sink.close()  # never started: what is queued is spooled
    assert sink.stats()["spooled"] == 1


def test_submit_after_close_is_spooled(db_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sink = SqlSink(db_url, spool)
    sink.close()
    late = simple_record()
    sink.submit(late)
    assert sink.stats()["spooled"] == 1
    again = SqlSink(db_url, spool)
    wait_for(lambda: count_rows(db_url) == 1)
    again.close()
    assert ids_in_db(db_url) == [late.id]


def sink_waiting_on_locks(tmp_path: Path, busy_ms: int) -> tuple[str, Path, Engine, SqlSink]:
    """A migrated SQLite store and a sink (batches of 10) whose writer waits up to
    ``busy_ms`` on a lock: the database URL, the spool, the engine, the sink."""
    db = migrated_sqlite(tmp_path)
    engine = make_engine(db, sqlite_busy_timeout_ms=busy_ms)
    spool = tmp_path / "spool"
    return db, spool, engine, SqlSink(db, spool, engine=engine, batch_size=10, flush_interval=0.01)


def test_close_with_a_stuck_writer_spools_the_rest(tmp_path: Path) -> None:
    """The writer hangs inside the database past close's timeout: close spools the
    batch in flight and the queue; whatever the stuck writer commits later too is
    still stored once."""
    db, spool, engine, sink = sink_waiting_on_locks(tmp_path, 3_000)
    records = [simple_record(i) for i in range(100)]
    with outage(db):
        for r in records:
            sink.submit(r)
        time.sleep(0.3)  # the writer is now waiting on the lock
        sink.close(timeout=0.2)
        assert sink.stats()["spooled"] >= 90
    time.sleep(3.5)  # let the stuck writer finish whatever it does
    again = SqlSink(db, spool)
    wait_for(lambda: count_rows(db) == 100 and not spool_files(spool))
    again.close()
    assert sorted(ids_in_db(db)) == sorted(r.id for r in records)
    engine.dispose()


def test_a_writer_abandoned_by_close_spools_nothing_twice(tmp_path: Path) -> None:
    """close gives up on a writer waiting on a lock and spools what it holds; when
    the writer's wait ends in failure, it does not spool its batch again: the spool
    holds every record exactly once."""
    db, spool, engine, sink = sink_waiting_on_locks(tmp_path, 1_500)
    records = [simple_record(i) for i in range(50)]
    with outage(db):
        for r in records:
            sink.submit(r)
        time.sleep(0.3)  # the writer is now waiting on the lock with a batch
        t0 = time.monotonic()
        sink.close(timeout=0.2)
        assert time.monotonic() - t0 < 1.0  # close did not wait out the lock
        time.sleep(2.5)  # the writer's wait ends: "database is locked"
    spooled = [doc["id"] for doc in spooled_docs(spool)]
    assert sorted(spooled) == sorted(r.id for r in records)  # each once, none missing
    assert count_rows(db) == 0
    engine.dispose()


def test_a_writer_abandoned_inside_the_replayer_leaves_the_spool_to_the_next(
    tmp_path: Path,
) -> None:
    """The writer, idle, waits on a lock in its spool upkeep (the store's id, read
    before the first scan) when close gives up on it. Once the lock is gone it
    claims and replays nothing more, and holds no spool file: the next writer of
    the store stores every record (a CI failure: the abandoned writer claimed the
    file close had spooled, replayed one batch, and kept it locked)."""
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    engine = make_engine(db, sqlite_busy_timeout_ms=3_000)
    records = [simple_record(i) for i in range(100)]
    with outage(db):
        sink = SqlSink(db, spool, engine=engine, batch_size=10, flush_interval=0.01)
        time.sleep(0.2)  # nothing queued: the writer is in its upkeep, on the lock
        for r in records:
            sink.submit(r)
        time.sleep(0.2)
        sink.close(timeout=0.2)
        assert sink.stats()["spooled"] == 100
    time.sleep(0.5)  # the abandoned writer's wait ends
    again = SqlSink(db, spool)
    # (if its first scan finds the file still held, the next comes 10 s later)
    wait_for(lambda: count_rows(db) == 100 and not spool_files(spool))
    again.close()
    assert sorted(ids_in_db(db)) == sorted(r.id for r in records)
    engine.dispose()


def test_a_record_the_abandoned_writer_took_late_stays_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close gives up on the writer between its taking a record off the queue and
    its claiming it for a batch: the writer spools that record itself, into a file
    it lets go of at once (not one locked until the process ends)."""
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    taken = threading.Event()
    keep = RecordQueue._keep

    def slow_keep(self: RecordQueue, item: Any, *batches: Any) -> Any:
        if isinstance(item[1], StreamRecord) and not taken.is_set():
            taken.set()
            time.sleep(0.5)  # descheduled here: close gives up meanwhile
        return keep(self, item, *batches)

    monkeypatch.setattr(RecordQueue, "_keep", slow_keep)
    sink = SqlSink(db, spool, batch_size=10, flush_interval=0.01)
    records = [simple_record(i) for i in range(5)]
    for r in records:
        sink.submit(r)
    assert taken.wait(5)
    sink.close(timeout=0.1)
    monkeypatch.undo()
    time.sleep(0.8)  # the writer wakes, spools what it took, and ends
    assert sorted(d["id"] for d in spooled_docs(spool)) == sorted(r.id for r in records)
    again = SqlSink(db, spool)
    wait_for(lambda: count_rows(db) == 5 and not spool_files(spool))
    again.close()


@pytest.mark.parametrize("mode", ["journal", "spool_first"])
def test_a_writer_abandoned_in_the_schema_check_removes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Records spooled before they are queued (the journal, spool_first): the writer
    hangs in its upkeep's schema check, close gives up on it and is descheduled
    before it marks the spooled records for a replay. The writer, back, must not
    take the abandoned queue for an idle one and remove the file as committed:
    every record is on disk or in the database."""
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    ensure, mark = DatabaseLink.ensure_schema, Spool.mark_dirty
    in_upkeep = threading.Event()

    def hung_schema_check(self: DatabaseLink) -> None:
        if threading.current_thread().name == "recorder-sql-writer" and not in_upkeep.is_set():
            in_upkeep.set()
            time.sleep(0.6)  # a hung database
        ensure(self)

    def late_mark(self: Spool, lo: int, hi: int) -> None:
        if threading.current_thread().name != "recorder-sql-writer":
            time.sleep(1.0)  # close descheduled between abandon and marking
        mark(self, lo, hi)

    monkeypatch.setattr(DatabaseLink, "ensure_schema", hung_schema_check)
    monkeypatch.setattr(Spool, "mark_dirty", late_mark)
    how: dict[str, Any] = (
        {"journal": True, "journal_interval": 0.01} if mode == "journal" else {"spool_first": True}
    )
    sink = SqlSink(db, spool, segment_seconds=0.05, batch_size=10, flush_interval=0.01, **how)
    assert in_upkeep.wait(5)
    records = [simple_record(i) for i in range(5)]
    for r in records:
        sink.submit(r)
    sink.close(timeout=0.2)
    monkeypatch.undo()
    time.sleep(1.0)  # the writer's wait ends
    kept = {d["id"] for d in spooled_docs(spool)} | set(ids_in_db(db))
    assert kept == {r.id for r in records}


def test_two_writers_on_one_database_lose_nothing(db_url: str, tmp_path: Path) -> None:
    per_writer = 3000
    batches = [[simple_record(i) for i in range(per_writer)] for _ in range(2)]
    sinks = [SqlSink(db_url, tmp_path / f"spool{i}", batch_size=200) for i in range(2)]
    barrier = threading.Barrier(2)

    def feed(sink: SqlSink, records: list) -> None:  # type: ignore[type-arg]
        barrier.wait()
        for r in records:
            sink.submit(r)
        sink.close()

    threads = [
        threading.Thread(target=feed, args=(s, b)) for s, b in zip(sinks, batches, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    expected = sorted(r.id for b in batches for r in b)
    stored = sorted(ids_in_db(db_url))
    if stored != expected:  # whatever could not be written waits in a spool
        for i in range(2):
            replay = SqlSink(db_url, tmp_path / f"spool{i}")
            wait_for(lambda i=i: not spool_files(tmp_path / f"spool{i}"))
            replay.close()
        stored = sorted(ids_in_db(db_url))
    assert stored == expected
    assert all(s.stats()["dropped"] == 0 for s in sinks)


def test_two_processes_on_one_database(db_url: str, tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from tests.kit.records import simple_record
        from recorder.store.writer import SqlSink
        sink = SqlSink(sys.argv[1], sys.argv[2], batch_size=200)
        for i in range(2000):
            sink.submit(simple_record(i))
        sink.close()
        s = sink.stats()
        print(s["written"], s["spooled"], s["dropped"])
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, db_url, str(tmp_path / "spool")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=python_env(),
        )
        for _ in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.split()[2] == "0"  # nothing dropped
    if spool_files(tmp_path / "spool"):
        replay = SqlSink(db_url, tmp_path / "spool")
        wait_for(lambda: not spool_files(tmp_path / "spool"))
        replay.close()
    assert count_rows(db_url) == 4000
    assert len(set(ids_in_db(db_url))) == 4000


_CHILD = """
import os, signal, sys, time
from tests.kit.records import simple_record
from recorder.store.engine import make_engine
from recorder.store.writer import SqlSink

url, spool, mode = sys.argv[1], sys.argv[2], sys.argv[3]
engine = make_engine(url, sqlite_busy_timeout_ms=600_000)
sink = SqlSink(url, spool, engine=engine, spool_first=(mode == "spool_first"),
               journal=(mode == "journal"), batch_size=50, queue_size=100_000)

def stop(signum, frame):
    sink.close(timeout=2)
    print("closed", sink.stats()["written"], sink.stats()["spooled"], flush=True)
    os._exit(0)

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
for i in range(1000):
    sink.submit(simple_record(i))
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def _child(db: str, spool: Path, mode: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", _CHILD, db, str(spool), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_drains_the_queue_to_the_database(db_url: str, tmp_path: Path, sig: int) -> None:
    if kind_of(db_url) == "postgresql" and sig == signal.SIGINT:
        pytest.skip("one signal is enough on PostgreSQL")
    p = _child(db_url, tmp_path / "spool", "queue")
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert count_rows(db_url) + int(out.split()[2]) >= 1000
    if spool_files(tmp_path / "spool"):
        replay = SqlSink(db_url, tmp_path / "spool")
        wait_for(lambda: not spool_files(tmp_path / "spool"))
        replay.close()
    assert count_rows(db_url) == 1000


def assert_a_new_sink_replays_all(db: str, spool: Path) -> None:
    """Nothing of the child's 1000 records reached ``db``; a new sink replays them
    from ``spool``: every one stored, each once, the spool emptied."""
    assert count_rows(db) == 0
    replay = SqlSink(db, spool)
    wait_for(lambda: count_rows(db) == 1000 and not spool_files(spool))
    replay.close()
    assert len(set(ids_in_db(db))) == 1000


def test_sigterm_with_the_database_locked_spools_everything(tmp_path: Path) -> None:
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    with outage(db):
        p = _child(db, spool, "queue")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.split()[0] == "closed"
    assert_a_new_sink_replays_all(db, spool)


def test_kill_9_loses_nothing_when_spooling_first(tmp_path: Path) -> None:
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    with outage(db):
        p = _child(db, spool, "spool_first")
        p.kill()
        p.communicate(timeout=30)
    assert_a_new_sink_replays_all(db, spool)


def test_kill_9_loses_nothing_the_journal_wrote(tmp_path: Path) -> None:
    """The writer is stuck in a locked database; the journal still puts every record
    in the spool, off the caller's thread. A kill -9 then loses none of them, and the
    next process stores each once."""
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"

    def journaled() -> int:
        return sum(
            line.count(b'"id"')
            for p in spool_files(spool)
            for line in p.read_bytes().splitlines()
            if b"recorder_spool" not in line
        )

    with outage(db):
        p = _child(db, spool, "journal")
        wait_for(lambda: journaled() == 1000, 30)
        p.kill()
        p.communicate(timeout=30)
    assert_a_new_sink_replays_all(db, spool)


def test_spool_first_removes_files_once_committed(db_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sink = SqlSink(db_url, spool, spool_first=True, segment_seconds=0.1, flush_interval=0.05)
    records = [simple_record(i) for i in range(300)]
    for r in records[:150]:
        sink.submit(r)
    assert spool_files(spool)  # on disk before any commit
    wait_for(lambda: count_rows(db_url) == 150)
    wait_for(lambda: not spool_files(spool) or sink.stats()["spool_files"] <= 1)
    for r in records[150:]:
        sink.submit(r)
    sink.close()
    assert not spool_files(spool)
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)
    assert sink.stats()["written"] == 300 and sink.stats()["replayed"] == 0


def test_spool_first_through_an_outage(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    engine = make_engine(db_url, sqlite_busy_timeout_ms=100)
    sink = SqlSink(
        db_url,
        spool,
        engine=engine,
        spool_first=True,
        retry_min=0.1,
        retry_max=0.3,
        segment_seconds=0.2,
        queue_size=50,
    )
    records = [simple_record(i) for i in range(200)]
    with outage(db_url, admin_for(request, db_url)):
        for r in records:
            sink.submit(r)
        wait_for(lambda: not sink.stats()["db_available"])
    wait_for(lambda: count_rows(db_url) == 200)
    sink.close()
    assert not spool_files(spool)
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)
    engine.dispose()


def test_stats_has_the_health_counters(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool")
    keys = {"queue_depth", "written", "spooled", "replayed", "dropped", "failed"}
    assert keys <= set(sink.stats())
    sink.close()


def test_an_unexpected_error_spools_the_batch(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = tmp_path / "spool"
    sink = SqlSink(db_url, spool, retry_min=0.1, start=False)
    real = BulkRows.stream
    calls = {"n": 0}

    def buggy(rows: BulkRows, rec: object, now: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug")
        return real(rows, rec, now)  # type: ignore[arg-type]

    monkeypatch.setattr(BulkRows, "stream", buggy)  # the writer's rows, built on its thread
    sink.start()
    records = [simple_record(i) for i in range(10)]
    for r in records:
        sink.submit(r)
    wait_for(lambda: count_rows(db_url) == 10 and not spool_files(spool))
    sink.close()
    assert sink.stats()["spooled"] == 10 and sink.stats()["replayed"] == 10
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)


def test_the_rejected_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """recorder-rejected.jsonl holds whole records: mode 0600, like the spool."""
    db = migrated_sqlite(tmp_path)
    spool = tmp_path / "spool"
    bad = simple_record(1, max_output_tokens=2**70)  # no driver binds it
    old = os.umask(0o022)
    try:
        sink = SqlSink(db, spool)
        sink.submit(bad)
        sink.close()
    finally:
        os.umask(old)
    assert sink.stats()["failed"] == 1
    assert (spool / REJECTED_FILE).stat().st_mode & 0o777 == 0o600
