"""Spooled records reach only their own store (recorder.store.identity)."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest

from recorder.store.identity import CACHE_FILE, default_spool_dir, store_key
from recorder.store.spool import describe
from recorder.store.writer import SqlSink
from tests.kit.databases import count_rows, ids_in_db, kind_of, spool_files, unreachable_url
from tests.kit.records import simple_record


def test_the_store_key_is_the_normalised_url_without_its_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert store_key("postgres://rec:hunter2@DB.Example/audit") == (
        "postgresql://rec@db.example:5432/audit"
    )
    assert store_key("postgresql+psycopg://rec@db.example:5432/audit") == store_key(
        "postgresql://rec:other@db.example/audit"
    )
    monkeypatch.chdir(tmp_path)
    assert store_key("sqlite:///sub/r.db") == f"sqlite:///{tmp_path.resolve()}/sub/r.db"


def test_two_stores_never_share_a_default_spool_directory(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    dirs = {
        default_spool_dir(f"sqlite:///{tmp_path}/recorder.db", env),
        default_spool_dir(f"sqlite:///{tmp_path}/recorder-demo.db", env),
        default_spool_dir("postgresql://rec:pw1@db1/audit", env),
        default_spool_dir("postgresql://rec:pw1@db1/other", env),
        default_spool_dir("postgresql://rec@db2/audit", env),
    }
    assert len(dirs) == 5
    assert default_spool_dir(f"sqlite:///{tmp_path}/recorder.db", env) == (
        tmp_path / "recorder.db.spool"
    )
    pg = default_spool_dir("postgresql://rec:pw1@db1/audit", env)
    assert pg.parent == tmp_path / "state" / "recorder" / "spool" and "pw1" not in str(pg)
    # the same store, however its URL is spelled, keeps one directory
    assert pg == default_spool_dir("postgres://rec@DB1:5432/audit", env)


def _spool_while_unreachable(tmp_path: Path, kind: str, spool: Path, n: int) -> str:
    """A process of a store that cannot be reached spools ``n`` records; its URL."""
    down = unreachable_url(kind, tmp_path)
    sink = SqlSink(down, spool, batch_size=10)
    for i in range(n):
        sink.submit(simple_record(i))
    sink.close()
    assert sink.stats()["spooled"] == n
    return down


def test_another_stores_spool_is_left_untouched_and_told_once(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: one spool directory, two stores. The one that is up must
    not import the records meant for the one that is down; it says once, in one
    line, what waits there and for which store."""
    spool = tmp_path / "shared"
    down = _spool_while_unreachable(tmp_path, kind_of(db_url), spool, 30)
    files = spool_files(spool)
    assert files
    with caplog.at_level(logging.WARNING, logger="recorder.store"):
        sink = SqlSink(db_url, spool, orphan_scan_interval=0.1)
        sink.submit(simple_record(99))  # its own traffic goes on
        time.sleep(1.0)  # several scans
        sink.close()
    assert count_rows(db_url) == 1
    assert spool_files(spool) == files  # left where they were, whole
    assert sum(describe(p).records for p in files) == 30
    told = [r.getMessage() for r in caplog.records if "other stores" in r.getMessage()]
    assert len(told) == 1, told
    assert f"30 for {store_key(down)}" in told[0]


def test_a_store_replaced_at_the_same_address_does_not_take_the_old_ones_records(
    sqlite_template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store once reached leaves its id beside the spool; its records spooled
    later carry it. A new database at the same path is another store: it leaves
    them alone (by the URL alone it could not tell)."""
    path = tmp_path / "recorder.db"
    url = f"sqlite:///{path}"
    spool = tmp_path / "spool"
    shutil.copyfile(sqlite_template, path)
    first = SqlSink(url, spool)
    first.submit(simple_record(0))
    first.close()
    assert count_rows(url) == 1
    assert (spool / CACHE_FILE).stat().st_mode & 0o777 == 0o600
    old_id = first.identity.store_id
    assert old_id
    # the database goes (a directory in its place: it cannot be opened)
    path.unlink()
    path.mkdir()
    away = SqlSink(url, spool, batch_size=5)
    for i in range(10):
        away.submit(simple_record(i))
    away.close()
    assert away.stats()["spooled"] == 10
    assert {describe(p).store_id for p in spool_files(spool)} == {old_id}
    # a new, empty store at the same path
    path.rmdir()
    shutil.copyfile(sqlite_template, path)
    with caplog.at_level(logging.WARNING, logger="recorder.store"):
        new = SqlSink(url, spool, orphan_scan_interval=0.1)
        time.sleep(1.0)
        new.close()
    assert count_rows(url) == 0
    assert new.identity.store_id not in (None, old_id)
    assert sum(describe(p).records for p in spool_files(spool)) == 10
    assert "another store than the one this spool directory knew" in caplog.text
    assert f"10 for {store_key(url)} (store id {old_id})" in caplog.text


def test_a_store_never_reached_gets_its_records_by_its_url(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Records spooled by a process that never reached its store (no id known)
    are its by the normalised URL, and replayed exactly once by the next process."""
    path = tmp_path / "recorder.db"
    url = f"sqlite:///{path}"
    spool = tmp_path / "spool"
    path.mkdir()  # where the database should be: it cannot be opened
    sink = SqlSink(url, spool, batch_size=5)
    records = [simple_record(i) for i in range(20)]
    for r in records:
        sink.submit(r)
    sink.close()
    assert {(describe(p).store, describe(p).store_id) for p in spool_files(spool)} == {
        (store_key(url), None)
    }
    path.rmdir()
    shutil.copyfile(sqlite_template, path)
    again = SqlSink(url, spool)
    deadline = time.monotonic() + 30
    while spool_files(spool) and time.monotonic() < deadline:
        time.sleep(0.05)
    again.close()
    assert not spool_files(spool)
    assert sorted(ids_in_db(url)) == sorted(r.id for r in records)
    assert again.stats()["replayed"] == 20
