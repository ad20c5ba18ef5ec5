"""Schema migrations: Alembic, driven from code.

The Alembic configuration is built here rather than read from ``alembic.ini``,
so ``recorder db upgrade`` and the proxy work from any working directory. The
scripts live in the repository's top-level ``migrations/`` and are found
relative to this package: that holds for the source tree and its editable
install (``pip install -e .``), the supported way to install the recorder.
``alembic.ini`` at the top level serves the ``alembic`` command for developers.

Two processes may upgrade at once (two proxies starting together). On
PostgreSQL the upgrade runs under a session advisory lock, so the second waits
and then finds nothing to do. On SQLite it runs in one ``BEGIN IMMEDIATE``
transaction, which serialises the same way (DDL is transactional there too,
see ``recorder.store.engine``).
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError

from recorder.store.engine import (
    StoreError,
    StoreUnavailable,
    create_sqlite_file,
    make_engine,
    normalize_url,
    sqlite_path,
)

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# pg_advisory_lock key: the bytes of "recorder" as a signed 64-bit integer.
ADVISORY_LOCK_KEY = int.from_bytes(b"recorder", "big")
# Alembic keeps its running context in module globals (``alembic.context``): one
# command at a time per process. Between processes, the database's lock serialises.
_ALEMBIC = threading.Lock()


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config for the recorder's migrations, optionally bound to a
    connection (``env.py`` then uses it instead of opening its own)."""
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise StoreError(
            f"migration scripts not found at {MIGRATIONS_DIR}: install the recorder "
            "from its source tree (pip install -e .)"
        )
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def head_revision() -> str:
    """The newest revision the code knows (read from the scripts once)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise StoreError("no migration scripts")
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision the database is at (None before the first upgrade)."""
    return MigrationContext.configure(conn).get_current_revision()


def _engine_for(target: str | URL | Engine) -> tuple[Engine, bool]:
    if isinstance(target, Engine):
        return target, False
    return make_engine(target), True


def _prepare_sqlite_file(target: str | URL | Engine) -> None:
    """A SQLite file that cannot be created is a mistake in its URL, not an outage:
    say so in one line. Its directory must exist (a typo must not create a tree of
    directories); the file is created mode 0600 (``create_sqlite_file``)."""
    url = target.url if isinstance(target, Engine) else normalize_url(target)
    path = sqlite_path(url)
    if not path or path.startswith("file:"):
        return
    file = Path(path).expanduser()
    parent = file.absolute().parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise StoreError(f"cannot create the SQLite database {file}: {parent} {what}")
    try:
        create_sqlite_file(url)
    except OSError as e:  # no permission, a file system that takes no files (/proc)...
        raise StoreError(
            f"cannot create the SQLite database {file}: {(e.strerror or str(e)).lower()}"
        ) from e


def upgrade(target: str | URL | Engine, revision: str = "head") -> str | None:
    """Bring the database to ``revision`` (default: the newest); return the
    revision it is at afterwards.

    Raises StoreUnavailable when the database cannot be reached, StoreError when
    it cannot be migrated (a revision this code does not know, no permission...).
    """
    _prepare_sqlite_file(target)
    engine, own = _engine_for(target)
    try:
        with _ALEMBIC, _migration_connection(engine) as conn:
            command.upgrade(alembic_config(conn), revision)
            if conn.in_transaction():
                conn.commit()
            return current_revision(conn)
    except (OperationalError, DBAPIError) as e:
        if isinstance(e, OperationalError) or e.connection_invalidated:
            raise StoreUnavailable(f"database unreachable: {_reason(e)}") from e
        raise StoreError(f"cannot migrate the database: {_reason(e)}") from e
    except CommandError as e:
        raise StoreError(f"cannot migrate the database: {e}") from e
    finally:
        if own:
            engine.dispose()


def downgrade(target: str | URL | Engine, revision: str) -> None:
    """Take the database back to ``revision`` (``base`` removes every table)."""
    engine, own = _engine_for(target)
    try:
        with _ALEMBIC, _migration_connection(engine) as conn:
            command.downgrade(alembic_config(conn), revision)
            if conn.in_transaction():
                conn.commit()
    finally:
        if own:
            engine.dispose()


def check(target: str | URL | Engine) -> None:
    """``alembic check``: raise if the models and the migrations have drifted
    apart (the database must be at head)."""
    engine, own = _engine_for(target)
    try:
        with _ALEMBIC, engine.connect() as conn:
            command.check(alembic_config(conn))
    finally:
        if own:
            engine.dispose()


def is_current(engine: Engine) -> bool:
    """Whether the database is at the newest revision."""
    with engine.connect() as conn:
        return current_revision(conn) == head_revision()


class _migration_connection:
    """A connection holding the migration lock (PG advisory lock, or SQLite's
    write lock through ``BEGIN IMMEDIATE``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.conn: Connection | None = None
        self.pg = engine.dialect.name == "postgresql"

    def __enter__(self) -> Connection:
        conn = self.engine.connect()
        try:
            if self.pg:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
                conn.commit()
            else:
                conn = conn.execution_options(sqlite_begin="IMMEDIATE")
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        return conn

    def __exit__(self, *exc: object) -> None:
        conn = self.conn
        assert conn is not None
        try:
            if conn.in_transaction():
                conn.rollback()
            if self.pg and not conn.invalidated:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_LOCK_KEY})
                conn.commit()
        except DBAPIError:
            pass  # the session ends with the connection below, and its lock with it
        finally:
            conn.close()


def _reason(e: DBAPIError) -> str:
    first = str(e.orig).strip().splitlines()
    return first[0] if first else type(e.orig).__name__


def default_env_url() -> str:
    """The database ``alembic`` uses from the command line: ``-x db=URL``, else
    ``RECORDER_DB``, else ``sqlite:///recorder.db``."""
    return os.environ.get("RECORDER_DB") or "sqlite:///recorder.db"
