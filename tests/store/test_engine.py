"""Engine creation: URL mapping and SQLite pragmas."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from recorder.store.engine import StoreError, display_url, make_engine, normalize_url, sqlite_path


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
        ("sqlite:///x.db", "sqlite"),
        ("sqlite+pysqlite:///x.db", "sqlite+pysqlite"),
    ],
)
def test_urls_map_to_psycopg3(given: str, driver: str) -> None:
    assert normalize_url(given).drivername == driver


@pytest.mark.parametrize("bad", ["mysql://u@h/db", "not a url", "oracle://x"])
def test_other_databases_are_refused(bad: str) -> None:
    with pytest.raises(StoreError):
        normalize_url(bad)


def test_display_hides_password() -> None:
    shown = display_url("postgresql://user:hunter2@db.example/rec")
    assert "hunter2" not in shown and "db.example" in shown


def test_sqlite_path() -> None:
    assert sqlite_path("sqlite:///some/file.db") == "some/file.db"
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("postgresql://h/db") is None


def test_sqlite_pragmas(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'p.db'}", sqlite_busy_timeout_ms=1234)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1234
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    engine.dispose()


def test_sqlite_transactions_are_real(tmp_path: Path) -> None:
    """DDL rolls back: the engine opens transactions itself."""
    engine = make_engine(f"sqlite:///{tmp_path / 't.db'}")
    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.rollback()
        names = conn.execute(text("SELECT name FROM sqlite_master")).scalars().all()
    assert "t" not in names
    with engine.connect().execution_options(sqlite_begin="IMMEDIATE") as conn:
        conn.execute(text("CREATE TABLE u (x INTEGER)"))
        conn.commit()
    with (
        engine.connect().execution_options(sqlite_begin="bogus") as conn,
        pytest.raises(StoreError),
    ):
        conn.execute(text("SELECT 1"))
    engine.dispose()
