"""Engines for the two supported databases: SQLite (the default) and PostgreSQL.

SQLite runs in WAL mode (readers never block the writer, one fsync per commit
is cheap) with ``synchronous=NORMAL`` (a committed batch survives a crash of the
process; a power cut may lose the last commits, never corrupt the file), a
busy timeout (another process's commit waits instead of failing) and foreign
keys on. Python's sqlite3 module decides by itself when to open a transaction
and never does for DDL; SQLAlchemy's documented recipe takes that over, so a
migration is one transaction and a write can start as ``BEGIN IMMEDIATE``
(execution option ``sqlite_begin="IMMEDIATE"``), which takes the write lock up
front and so cannot deadlock against another writer.

PostgreSQL goes through psycopg 3: ``postgresql://`` and ``postgres://`` URLs
are mapped to ``postgresql+psycopg://``. Connections are checked before use (a
database that restarted is noticed at the next batch, not as a failed commit)
and give up connecting after ``connect_timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from recorder.core.errors import RecorderError, UsageError

SUPPORTED = ("sqlite", "postgresql")
SQLITE_BUSY_TIMEOUT_MS = 5000
PG_CONNECT_TIMEOUT_S = 5
_BEGIN_MODES = ("", "DEFERRED", "IMMEDIATE", "EXCLUSIVE")


class StoreError(RecorderError):
    """A database URL or database the store cannot work with (exit 1)."""


class DatabaseURLError(StoreError, UsageError):
    """A ``--db`` that is no database URL, or names a database other than SQLite
    or PostgreSQL: a usage mistake (exit 2)."""

    exit_code = UsageError.exit_code


class StoreUnavailable(StoreError):
    """The database could not be reached (or refused the connection)."""


class StoreNotMigrated(StoreError):
    """No such database file, or a database without the recorder's tables: a reading
    command never creates one."""


class StoreLocked(StoreError):
    """Another process holds the database longer than the busy timeout."""


class StoreDenied(StoreError):
    """The database (or its file) refuses this user."""


def normalize_url(url: str | URL) -> URL:
    """The SQLAlchemy URL to connect with: PostgreSQL URLs use psycopg 3.

    Raises DatabaseURLError for an unparsable URL or a database other than SQLite or
    PostgreSQL.
    """
    try:
        u = make_url(url) if isinstance(url, str) else url
    except ArgumentError as e:
        if isinstance(url, str) and "://" not in url:  # a path: say how to write it
            raise DatabaseURLError(
                f"not a database URL: {url!r} (for a SQLite file, write sqlite:///{url})"
            ) from None
        raise DatabaseURLError(f"not a database URL: {url!r} ({e})") from None
    backend, _, driver = u.drivername.partition("+")
    if backend == "postgres":
        backend = "postgresql"
    if backend not in SUPPORTED:
        raise DatabaseURLError(
            f"unsupported database {u.drivername!r}: use sqlite:///FILE or "
            "postgresql+psycopg://USER@HOST/DB"
        )
    if backend == "postgresql" and driver in ("", "psycopg2"):
        driver = "psycopg"
    name = backend + ("+" + driver if driver else "")
    return u.set(drivername=name) if name != u.drivername else u


def display_url(url: str | URL) -> str:
    """The URL with its password hidden, for messages and logs."""
    try:
        return normalize_url(url).render_as_string(hide_password=True)
    except StoreError:
        return "<invalid database URL>"


def sqlite_path(url: str | URL) -> str | None:
    """The file of a SQLite URL (None for PostgreSQL and in-memory databases)."""
    u = normalize_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return u.database


def create_sqlite_file(url: str | URL) -> bool:
    """Create the SQLite file of ``url`` empty, mode 0600, if it does not exist yet;
    True if this call created it. SQLite then creates the ``-wal`` and ``-shm``
    files with the database file's mode: all three hold records (and the key
    secret), so none is readable by other users whatever the umask. Raises
    OSError when the file cannot be created (no such directory, no permission);
    a URL that asks SQLite for an ``open`` mode (``?mode=ro``) is left to it."""
    u = normalize_url(url)
    path = sqlite_path(u)
    if not path or "mode" in u.query or path.startswith("file:"):
        return False
    try:
        fd = os.open(Path(path).expanduser(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def make_engine(
    url: str | URL,
    *,
    sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    pg_connect_timeout_s: int = PG_CONNECT_TIMEOUT_S,
    **kwargs: Any,
) -> Engine:
    """An Engine for ``url`` with the pragmas and timeouts the store relies on."""
    u = normalize_url(url)
    if u.get_backend_name() == "postgresql":
        args: dict[str, Any] = {"application_name": "recorder"}
        if "connect_timeout" not in u.query:
            args["connect_timeout"] = pg_connect_timeout_s
        kwargs.setdefault("pool_pre_ping", True)
        kwargs.setdefault("connect_args", {}).update(args)
        return create_engine(u, **kwargs)
    engine = create_engine(u, **kwargs)
    _sqlite_events(engine, sqlite_busy_timeout_ms)
    return engine


def _sqlite_events(engine: Engine, busy_timeout_ms: int) -> None:
    memory = engine.url.database in (None, "", ":memory:")

    @event.listens_for(engine, "do_connect")
    def _private_file(*_: Any) -> None:
        # before SQLite creates the file with the umask's mode (0644, usually)
        if not memory:  # if it cannot, SQLite says why, as an outage of the store
            with contextlib.suppress(OSError):
                create_sqlite_file(engine.url)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if not memory:
                cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "")
        if mode not in _BEGIN_MODES:
            raise StoreError(f"sqlite_begin must be one of {_BEGIN_MODES}, not {mode!r}")
        conn.exec_driver_sql(f"BEGIN {mode}".strip())
