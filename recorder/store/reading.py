"""Opening an existing store for a command: ``with reading_store(url) as engine:``.

Every command that reads the store (``sessions``, ``show``, ``audit``,
``reprice``, ``reconcile``, ``replay --id``, ``prices missing``, ``db prune``,
``db purge-bodies``) opens it here, so each meets a missing, unreachable,
unmigrated, locked or forbidden database the same way: a ``StoreError``
subclass (a ``RecorderError``, exit 1) whose one-line message names the
database, never its password. A bad URL is a ``DatabaseURLError`` (exit 2).
Database errors raised inside the ``with`` block are mapped the same way, and
the engine is disposed on the way out, whatever happened.

A reading command never creates a database: a SQLite file that does not exist
is an error, not an empty store.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from recorder.store.engine import (
    StoreDenied,
    StoreError,
    StoreLocked,
    StoreNotMigrated,
    StoreUnavailable,
    display_url,
    make_engine,
    normalize_url,
    sqlite_path,
)
from recorder.store.migrate import current_revision

# SQLite's primary result codes (sqlite3.Error.sqlite_errorname) by what they mean
# to the user; "no such table" is a plain SQLITE_ERROR, told by its text.
_SQLITE = {
    "SQLITE_BUSY": StoreLocked,
    "SQLITE_LOCKED": StoreLocked,
    "SQLITE_CANTOPEN": StoreUnavailable,
    "SQLITE_READONLY": StoreDenied,
    "SQLITE_PERM": StoreDenied,
    "SQLITE_AUTH": StoreDenied,
}
# PostgreSQL's SQLSTATE (psycopg's Error.sqlstate): exact codes first, then classes.
_PG_CODES = {
    "42P01": StoreNotMigrated,  # undefined_table
    "42501": StoreDenied,  # insufficient_privilege
    "55P03": StoreLocked,  # lock_not_available
    "40P01": StoreLocked,  # deadlock_detected
    "3D000": StoreUnavailable,  # invalid_catalog_name: no such database
}
_PG_CLASSES = {
    "08": StoreUnavailable,  # connection exception
    "28": StoreDenied,  # invalid authorization (password, pg_hba.conf)
    "57": StoreUnavailable,  # operator intervention (shutdown, too many connections)
    "53": StoreUnavailable,  # insufficient resources
}


@contextlib.contextmanager
def reading_store(url: str | URL) -> Iterator[Engine]:
    """An engine on the existing, migrated store at ``url``, disposed on exit.

    Raises DatabaseURLError for a bad URL, StoreNotMigrated for a missing SQLite
    file or a database without the recorder's tables, and the StoreError that
    ``database_error`` maps any database error to, at opening or inside the block.
    """
    u = normalize_url(url)
    shown = display_url(u)
    path = sqlite_path(u)
    if path is not None and not path.startswith("file:"):
        file = Path(path).expanduser()
        if not file.is_file():
            raise StoreNotMigrated(f"no database at {path}", suggest=("proxy", "db upgrade"))
        if not os.access(file, os.R_OK):
            raise StoreDenied(f"no permission to read {shown}: {file} is not readable")
    engine = make_engine(u)
    try:
        with engine.connect() as conn:
            revision = current_revision(conn)
        if revision is None:
            raise StoreNotMigrated(f"{shown} holds no recorder tables", suggest=("db upgrade",))
        yield engine
    except SQLAlchemyError as e:
        raise database_error(e, u) from None
    finally:
        engine.dispose()


def database_error(e: SQLAlchemyError, url: str | URL) -> StoreError:
    """The StoreError to show for a database error on ``url``: one line naming the
    database (password hidden, also if the driver's message repeats it)."""
    u = normalize_url(url)
    shown = display_url(u)
    orig = getattr(e, "orig", None)
    lines = str(orig if orig is not None else e).strip().splitlines()
    reason = lines[0].strip() if lines else type(orig or e).__name__
    if u.password:
        reason = reason.replace(str(u.password), "***")
    kind = _kind(orig, reason, connecting=getattr(e, "connection_invalidated", False))
    if kind is StoreUnavailable:
        return StoreUnavailable(f"cannot connect to {shown}: {reason}")
    if kind is StoreNotMigrated:
        return StoreNotMigrated(
            f"{shown} lacks the recorder's tables ({reason})", suggest=("db upgrade",)
        )
    if kind is StoreLocked:
        return StoreLocked(f"{shown} is locked by another process ({reason})")
    if kind is StoreDenied:
        return StoreDenied(f"no permission to use {shown}: {reason}")
    return StoreError(f"cannot read {shown}: {reason}")


def _kind(orig: object, reason: str, *, connecting: bool) -> type[StoreError]:
    name = getattr(orig, "sqlite_errorname", None)
    if isinstance(name, str):
        if reason.startswith("no such table"):
            return StoreNotMigrated
        return _SQLITE.get(name, StoreError)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return _PG_CODES.get(sqlstate) or _PG_CLASSES.get(sqlstate[:2], StoreError)
    # psycopg raises OperationalError without a SQLSTATE when it cannot connect
    if connecting or type(orig).__name__ == "OperationalError":
        return StoreUnavailable
    return StoreError
