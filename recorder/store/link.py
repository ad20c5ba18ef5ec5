"""The writer's link to the database: the engine, the schema's state, and whether
the database is to be tried now (the backoff of an outage).

``DatabaseLink`` owns the engine (and disposes of it when it made it), whether
the schema still has to be checked, and the state of the link: available, or
away until ``retry_at``. Only the writer thread uses it. Invariants:

- Available until a write says otherwise. An outage (``outage``) makes it
  unavailable and sets ``retry_at`` to now + the backoff: ``retry_min`` for the
  first failure of an outage, doubled for every further one, never above
  ``retry_max``. ``may_try`` is False until ``retry_at``, so a database that is
  away costs one attempt per backoff, not one per batch.
- The first write that succeeds (``succeeded``) ends the outage: available again,
  and the next outage starts from ``retry_min``.
- With ``upgrade=True`` the schema is checked (and migrated if it is behind)
  before the first write and never again once that succeeded; a check that
  fails is an outage.
- ``resumed`` counts the times writing resumed after the database was away
  (an outage ended) or held by someone else (a transaction that waited
  ``LOCK_WAIT_S`` or more, as on a lock another process held). Another process
  may have died meanwhile, leaving spooled records: the replayer looks for them
  when the count moves (``recorder.store.spool_replay``).
- The clock is injectable (``clock``), so the backoff can be tested without
  waiting for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from recorder.store.engine import SUPPORTED, StoreError, display_url, make_engine
from recorder.store.identity import get_or_create_store_id
from recorder.store.migrate import is_current
from recorder.store.migrate import upgrade as migrate_to_head

log = logging.getLogger("recorder.store")

# A transaction this long waited for the database (a lock held by another
# connection, most likely): whoever held it may have died meanwhile.
LOCK_WAIT_S = 1.0


class Unavailable(Exception):
    """The database could not take a batch (unreachable, locked, not migrated...)."""


def short_error(e: BaseException) -> str:
    """An exception in a few words for a log line: its type and first line."""
    orig = getattr(e, "orig", None)
    text = str(orig if orig is not None else e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(orig if orig is not None else e).__name__}: {first}"


class DatabaseLink:
    """The engine the writer commits through, the schema's state and the backoff."""

    def __init__(
        self,
        url: str | URL,
        *,
        engine: Engine | None = None,
        upgrade: bool = True,
        retry_min: float = 0.5,
        retry_max: float = 30.0,
        spool_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = display_url(url)
        self._own_engine = engine is None
        self.engine = engine if engine is not None else make_engine(url)
        self.dialect = self.engine.dialect.name
        if self.dialect not in SUPPORTED:
            raise StoreError(f"unsupported database {self.dialect!r}")
        # BEGIN IMMEDIATE takes SQLite's write lock up front (no deadlock between writers)
        self._begin: dict[str, Any] = (
            {"sqlite_begin": "IMMEDIATE"} if self.dialect == "sqlite" else {}
        )
        self.retry_min = retry_min
        self.retry_max = retry_max
        self._spool_dir = spool_dir  # only to say where records go meanwhile
        self._clock = clock
        self._needs_upgrade = upgrade
        self._available = True  # optimistic until a write says otherwise
        self._retry_at = 0.0
        self._backoff = retry_min
        self._last_error: str | None = None
        self._resumed = 0

    @property
    def available(self) -> bool:
        """False from an outage until a write succeeds again."""
        return self._available

    @property
    def last_error(self) -> str | None:
        """The last outage's error, in a few words."""
        return self._last_error

    @property
    def resumed(self) -> int:
        """Times writing resumed after an outage or a wait on a lock."""
        return self._resumed

    @property
    def retry_at(self) -> float:
        """When an unavailable database may be tried again (the clock's time)."""
        return self._retry_at

    @property
    def schema_checked(self) -> bool:
        """Whether the schema is known to be current (or was not to be checked)."""
        return not self._needs_upgrade

    def may_try(self) -> bool:
        """Whether to use the database now: available, or its backoff is over."""
        return self._available or self._clock() >= self._retry_at

    def ensure_schema(self) -> None:
        """Bring the schema to head once (usually one SELECT: the proxy upgraded it
        on start). Raises Unavailable, after counting an outage, when it cannot."""
        if not self._needs_upgrade:
            return
        try:
            if not is_current(self.engine):
                migrate_to_head(self.engine)
        except Exception as e:  # an outage, or a database newer than this code
            self.outage(e)
            raise Unavailable(str(e)) from e
        self._needs_upgrade = False

    def read_store_id(self) -> str | None:
        """The store id kept in the database (created on first use); None, after
        counting an outage, when the database cannot be read."""
        try:
            self.ensure_schema()
            return get_or_create_store_id(self.engine)
        except Unavailable:
            return None
        except SQLAlchemyError as e:
            self.outage(e)
            return None

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A connection in a transaction, committed when the block ends. A
        transaction that waited ``LOCK_WAIT_S`` or more counts as ``resumed``."""
        start = self._clock()
        with self.engine.connect() as conn:
            c = conn.execution_options(**self._begin) if self._begin else conn
            with c.begin():
                yield c
        if self._clock() - start >= LOCK_WAIT_S:
            self._resumed += 1

    def outage(self, e: BaseException) -> None:
        """A write (or the schema check) failed because of the database: back off."""
        reason = short_error(e)
        if self._available:
            log.warning(
                "recorder: database %s unavailable (%s); spooling records in %s",
                self.url,
                reason,
                self._spool_dir,
            )
            self._backoff = self.retry_min
        else:
            self._backoff = min(self._backoff * 2, self.retry_max)
        self._available = False
        self._last_error = reason
        self._retry_at = self._clock() + self._backoff

    def succeeded(self) -> None:
        """A write went through: an outage, if there was one, is over."""
        if not self._available:
            log.warning("recorder: database %s is back; replaying the spool", self.url)
            self._available = True
            self._resumed += 1

    def dispose(self) -> None:
        """Close the engine's connections, if this link made the engine."""
        if self._own_engine:
            self.engine.dispose()
