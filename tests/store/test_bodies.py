"""Captured bodies in the store: one transaction with their record, through the
spool, deleted with their streams (prune) or alone (purge-bodies)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import inspect, text

from recorder.core.captured import CapturedBody, CapturedRecord, PackedBody, body_of
from recorder.core.record import StreamRecord
from recorder.store.engine import make_engine
from recorder.store.queries import (
    QueryError,
    count_bodies,
    get_body,
    prune,
    purge_bodies,
)
from recorder.store.spool import SPOOL_PREFIX, read_records, record_from_doc, record_line
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.databases import count_rows, ids_in_db, kind_of, outage, spool_files, wait_for
from tests.kit.records import simple_record

ROOT = Path(__file__).resolve().parents[2]
SSE = (ROOT / "tests" / "fixtures" / "openai-chat" / "d61558011839.sse").read_bytes()


def captured(i: int = 0, *, body: bytes = SSE, **overrides: Any) -> CapturedRecord:
    """A small record carrying a captured body, cut in pieces 10 ms apart."""
    rec = simple_record(i, **overrides)
    values = {f.name: getattr(rec, f.name) for f in dataclasses.fields(StreamRecord)}
    cap = CapturedBody(100.0, 100.2, stall_after=30.0)
    for k in range(0, len(body), 200):
        cap.add(body[k : k + 200], 100.3 + k / 20_000)
    cap.end(101.0, "eof")
    return CapturedRecord(**values, body=cap)


def stored_body(url: str, ident: str) -> PackedBody:
    engine = make_engine(url)
    try:
        return get_body(engine, ident)[1]
    finally:
        engine.dispose()


def test_the_table_is_migrated(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        insp = inspect(engine)
        cols = {c["name"] for c in insp.get_columns("stream_bodies")}
        assert cols == {"stream_id", "encoding", "body", "size", "timings", "truncated"}
        (fk,) = insp.get_foreign_keys("stream_bodies")
        assert fk["referred_table"] == "streams" and fk["options"].get("ondelete") == "CASCADE"
        assert insp.get_pk_constraint("stream_bodies")["constrained_columns"] == ["stream_id"]
    finally:
        engine.dispose()


def test_a_body_is_written_with_its_record(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool", batch_size=10)
    with_body = [captured(i) for i in range(25)]
    without = [simple_record(100 + i) for i in range(5)]
    for r in [*with_body, *without]:
        sink.submit(r)
    sink.close()
    assert sorted(ids_in_db(db_url)) == sorted(r.id for r in with_body + without)
    assert count_rows(db_url, "stream_bodies") == 25
    stats = sink.stats()
    assert stats["bodies_written"] == 25 and stats["bodies_failed"] == 0
    assert (
        sink.queue.body_bytes_in == sink.queue.body_bytes_out == 25 * len(SSE)
    )  # the budget's count
    rec = with_body[3]
    got = stored_body(db_url, rec.id)
    assert got == rec.body.pack()  # type: ignore[union-attr]
    assert got.body() == SSE and got.size == len(SSE) and not got.truncated
    assert got.timeline().chunks[:2] == [(300_000, 200), (310_000, 200)]
    engine = make_engine(db_url)
    with pytest.raises(QueryError, match="no stored body"):
        get_body(engine, without[0].id)
    engine.dispose()


def test_a_record_written_twice_keeps_one_body(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool")
    rec = captured()
    sink.submit(rec)
    sink.flush(10)
    sink.submit(rec)
    sink.close()
    assert count_rows(db_url) == 1 and count_rows(db_url, "stream_bodies") == 1


def test_bodies_wait_in_the_spool_through_an_outage(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    engine = make_engine(db_url, sqlite_busy_timeout_ms=100)
    first = SqlSink(db_url, spool, batch_size=20, engine=engine)
    admin = request.getfixturevalue("pg_admin") if kind_of(db_url) == "postgresql" else None
    records = [captured(i) for i in range(30)]
    with outage(db_url, admin):
        for r in records:
            first.submit(r)
        first.close(timeout=10)
    engine.dispose()
    assert first.stats()["spooled"] == 30 and first.stats()["dropped"] == 0
    (path,) = spool_files(spool)
    line = orjson.loads(path.read_bytes().splitlines()[1])  # after the header
    assert line["body"]["encoding"] == "zstd" and line["body"]["size"] == len(SSE)
    second = SqlSink(db_url, spool, batch_size=20)
    wait_for(lambda: count_rows(db_url, "stream_bodies") == 30 and not spool_files(spool))
    second.close()
    assert second.stats()["bodies_written"] == 30
    assert stored_body(db_url, records[7].id).body() == SSE


def test_an_outage_in_process_loses_no_body(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    engine = make_engine(db_url, sqlite_busy_timeout_ms=100)
    sink = SqlSink(db_url, spool, engine=engine, batch_size=10, retry_min=0.1, retry_max=0.5)
    admin = request.getfixturevalue("pg_admin") if kind_of(db_url) == "postgresql" else None
    records = [captured(i) for i in range(40)]
    with outage(db_url, admin):
        for r in records:
            sink.submit(r)
        wait_for(lambda: sink.stats()["spooled"] >= 40)
    wait_for(lambda: count_rows(db_url, "stream_bodies") == 40 and not spool_files(spool))
    sink.close()
    engine.dispose()
    assert stored_body(db_url, records[-1].id).body() == SSE


@pytest.mark.parametrize("journal", [False, True])
def test_too_many_waiting_bodies_go_to_the_spool(tmp_path: Path, journal: bool) -> None:
    """Past ``body_queue_bytes`` of queued bodies, a record with a body is spooled
    (its body packed there) rather than queued; all arrive in the end. With the
    journal too: every record is in the spool already, it is just not queued."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    from recorder.store.migrate import upgrade

    upgrade(db)
    engine = make_engine(db, sqlite_busy_timeout_ms=60_000)
    spool = tmp_path / "spool"
    sink = SqlSink(
        db,
        spool,
        engine=engine,
        body_queue_bytes=3 * len(SSE),
        retry_min=0.05,
        journal=journal,
    )
    records = [captured(i) for i in range(20)]
    with outage(db):  # the writer waits in the database: the queue does not drain
        for r in records:
            sink.submit(r)
        wait_for(lambda: sink.stats()["spooled"] >= 20 - 4, 10)
        assert sink.stats()["queue_depth"] <= 4
    wait_for(lambda: count_rows(db, "stream_bodies") == 20 and not spool_files(spool))
    sink.close()
    engine.dispose()


def test_spool_first_keeps_bodies_too(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool", spool_first=True)
    records = [captured(i) for i in range(10)]
    for r in records:
        sink.submit(r)
    sink.close()
    assert count_rows(db_url, "stream_bodies") == 10


def test_a_body_that_cannot_be_packed_is_left_out(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = captured()
    rec.body.chunks.append("not bytes")  # type: ignore[arg-type,union-attr]
    sink = SqlSink(db_url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    assert ids_in_db(db_url) == [rec.id]  # the record is stored all the same
    assert count_rows(db_url, "stream_bodies") == 0
    assert sink.stats()["bodies_failed"] == 1 and sink.stats()["failed"] == 0
    assert sink.queue.body_bytes_in == sink.queue.body_bytes_out
    assert "cannot pack the body" in caplog.text


# -- spool lines --------------------------------------------------------------------------


def test_spool_lines_carry_the_packed_body(tmp_path: Path) -> None:
    rec = captured()
    line = record_line(rec)
    doc = orjson.loads(line)
    assert set(doc["body"]) == {"encoding", "data", "timings", "size", "truncated"}
    back = record_from_doc(doc)
    assert isinstance(back, CapturedRecord) and back.body == rec.body.pack()  # type: ignore[union-attr]
    assert back.to_dict(with_gaps=True) == rec.to_dict(with_gaps=True)
    plain = record_from_doc(orjson.loads(record_line(simple_record())))
    assert type(plain) is StreamRecord  # a line without a body, as before


def test_an_unreadable_spooled_body_keeps_its_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = orjson.loads(record_line(captured()))
    doc["body"]["data"] = "@@not base64@@"
    path = tmp_path / f"{SPOOL_PREFIX}1-2-0001.jsonl"
    path.write_bytes(orjson.dumps(doc) + b"\n")
    ((rec,),) = list(read_records(path, 10))
    assert isinstance(rec, StreamRecord) and body_of(rec) is None
    assert rec.id == doc["id"]
    assert "unreadable" in caplog.text


# -- retention ----------------------------------------------------------------------------


def _store(url: str, tmp_path: Path, records: list[StreamRecord]) -> None:
    sink = SqlSink(url, tmp_path / "spool")
    for r in records:
        sink.submit(r)
    sink.close()


def test_prune_deletes_bodies_with_their_streams(db_url: str, tmp_path: Path) -> None:
    old = [captured(i, started_at="2025-01-01T00:00:00.000Z") for i in range(3)]
    new = [captured(i, started_at="2026-06-01T00:00:00.000Z") for i in range(2)]
    _store(db_url, tmp_path, [*old, *new])
    engine = make_engine(db_url)
    try:
        assert prune(engine, datetime(2026, 1, 1, tzinfo=UTC)) == 3
        assert count_rows(db_url, "stream_bodies") == 2
        with engine.begin() as conn:  # and the foreign key cascades on any delete
            conn.execute(text("DELETE FROM streams WHERE id = :i"), {"i": new[0].id})
        assert count_rows(db_url, "stream_bodies") == 1
    finally:
        engine.dispose()


def test_purge_bodies_keeps_the_streams(db_url: str, tmp_path: Path) -> None:
    old = [captured(i, started_at="2025-01-01T00:00:00.000Z") for i in range(3)]
    new = [captured(i, started_at="2026-06-01T00:00:00.000Z") for i in range(2)]
    _store(db_url, tmp_path, [*old, *new, simple_record(9)])
    engine = make_engine(db_url)
    try:
        n, size = count_bodies(engine)
        assert n == 5 and 0 < size < 5 * len(SSE)
        assert count_bodies(engine, datetime(2026, 1, 1, tzinfo=UTC))[0] == 3
        assert purge_bodies(engine, datetime(2026, 1, 1, tzinfo=UTC), chunk=2) == 3
        assert count_rows(db_url) == 6 and count_rows(db_url, "stream_bodies") == 2
        assert purge_bodies(engine) == 2
        assert count_rows(db_url) == 6 and count_rows(db_url, "stream_bodies") == 0
    finally:
        engine.dispose()


def test_db_purge_bodies_command(
    capsys: pytest.CaptureFixture[str], cli: Cli, db_url: str, tmp_path: Path
) -> None:
    old = [captured(i, started_at="2025-01-01T00:00:00.000Z") for i in range(3)]
    new = [captured(i, started_at="2026-06-01T00:00:00.000Z") for i in range(2)]
    _store(db_url, tmp_path, [*old, *new])
    code, out, err = cli(
        "db", "purge-bodies", "--before", "2026-01-01", "--dry-run", "--db", db_url
    )
    assert code == 0, err
    assert out.startswith("3 stored body(ies) of streams started before 2026-01-01")
    assert count_rows(db_url, "stream_bodies") == 5
    code, out, err = cli("db", "purge-bodies", "--before", "2026-01-01", "--db", db_url)
    assert code == 0 and out.startswith("deleted 3 stored body(ies)"), err
    code, out, err = cli("db", "purge-bodies", "--db", db_url)
    assert code == 0 and out.startswith("deleted 2 stored body(ies);"), err
    assert count_rows(db_url) == 5 and count_rows(db_url, "stream_bodies") == 0
    code, _, err = cli("db", "purge-bodies", "--before", "someday", "--db", db_url)
    assert code == 2 and "not a time" in err
    code, _, err = cli("db", "purge-bodies", "--db", f"sqlite:///{tmp_path / 'missing.db'}")
    assert code == 1 and "no database" in err
