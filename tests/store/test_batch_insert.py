"""BatchInsert: a batch in one transaction, stored once however often it is
committed; a refused record set aside alone; an outage leaves the batch whole."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from recorder.core.captured import CapturedBody, CapturedRecord
from recorder.core.record import StreamRecord
from recorder.store.batch_insert import BatchInsert
from recorder.store.counters import Counters
from recorder.store.engine import make_engine
from recorder.store.link import DatabaseLink, Unavailable
from recorder.store.spool import REJECTED_FILE
from tests.kit.databases import count_rows, ids_in_db, outage
from tests.kit.records import simple_record


@pytest.fixture
def parts(db_url: str, tmp_path: Path) -> tuple[BatchInsert, DatabaseLink, Counters]:
    link = DatabaseLink(db_url)
    counters = Counters()
    return BatchInsert(link, counters, tmp_path / "spool"), link, counters


def test_a_batch_committed_twice_is_stored_once(
    db_url: str, parts: tuple[BatchInsert, DatabaseLink, Counters]
) -> None:
    inserter, link, _ = parts
    records = [simple_record(i) for i in range(40)]
    assert inserter.commit(records) == 40
    assert inserter.commit(records[10:]) == 30  # a replay after a crash
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in records)
    assert count_rows(db_url, "stream_gaps") == 40
    assert link.available
    link.dispose()


def test_a_refused_record_is_set_aside_alone(
    db_url: str, tmp_path: Path, parts: tuple[BatchInsert, DatabaseLink, Counters]
) -> None:
    inserter, link, counters = parts
    good = [simple_record(i) for i in range(9)]
    bad = simple_record(99, outcome=None)  # NOT NULL
    unbindable = simple_record(98, max_output_tokens=2**70)
    stored = inserter.commit([*good[:3], bad, *good[3:6], unbindable, *good[6:]])
    assert stored == 9
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in good)
    kept = [
        orjson.loads(line)
        for line in (tmp_path / "spool" / REJECTED_FILE).read_bytes().splitlines()
    ]
    assert sorted(d["id"] for d in kept) == sorted([bad.id, unbindable.id])
    assert all(d["rejected_because"] for d in kept)
    assert counters.writer.failed == 2 and counters.writer.dropped == 0
    assert link.available  # a refused record is no outage
    link.dispose()


def test_an_outage_leaves_the_batch_whole(tmp_path: Path, sqlite_template: Path) -> None:
    db = tmp_path / "r.db"
    db.write_bytes(sqlite_template.read_bytes())
    url = f"sqlite:///{db}"
    engine = make_engine(url, sqlite_busy_timeout_ms=50)
    link = DatabaseLink(url, engine=engine, retry_min=0.5)
    counters = Counters()
    inserter = BatchInsert(link, counters, tmp_path / "spool")
    records = [simple_record(i) for i in range(5)]
    with outage(url), pytest.raises(Unavailable):
        inserter.commit(records)
    assert not link.available and link.last_error
    assert count_rows(url) == 0
    assert counters.totals() == Counters().totals()  # nothing counted: the caller spools it
    assert not (tmp_path / "spool" / REJECTED_FILE).exists()
    assert inserter.commit(records) == 5  # the database is back
    assert link.available and count_rows(url) == 5
    engine.dispose()


def test_a_body_that_cannot_be_packed_leaves_its_record_stored(
    db_url: str, parts: tuple[BatchInsert, DatabaseLink, Counters]
) -> None:
    inserter, link, counters = parts
    rec = simple_record(1)
    values = {f.name: getattr(rec, f.name) for f in dataclasses.fields(StreamRecord)}
    cap = CapturedBody(100.0, 100.1, stall_after=30.0)
    cap.add(b"data: {}\n\n", 100.2)
    cap.end(100.3, "eof")
    cap.chunks.append("not bytes")  # type: ignore[arg-type]
    good = CapturedRecord(**values, body=cap)
    assert inserter.commit([good]) == 1
    assert ids_in_db(db_url) == [rec.id] and count_rows(db_url, "stream_bodies") == 0
    assert counters.writer.bodies_failed == 1 and counters.writer.bodies_written == 0
    assert good.body is None  # spooled or retried, it goes without the body too
    link.dispose()
