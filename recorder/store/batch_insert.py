"""The writer's SQL: a batch of records into the database in one transaction.

Every insert is ``ON CONFLICT (id) DO NOTHING`` (``recorder.store.models.BulkRows``),
so a record written twice is stored once. A batch the database refuses as data is
searched for the record that causes it, which is rejected alone (kept in
``recorder-rejected.jsonl``): one bad record never holds back the ones after it.
An outage raises ``Unavailable`` and starts the backoff of the database link
(``outage``); the next write that succeeds ends it (``recovered``).

These are the writer thread's steps, taking the ``SqlSink`` whose state they
keep (``recorder.store.writer`` holds the theory of operation).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import (
    DataError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from recorder.core.captured import CapturedRecord, PackedBody, body_of
from recorder.core.record import StreamRecord
from recorder.store import handover, migrate
from recorder.store.spool import append_rejected

if TYPE_CHECKING:
    from recorder.store.writer import SqlSink

log = logging.getLogger("recorder.store")

# Exceptions that say something about one record, not about the database.
DATA_ERRORS = (IntegrityError, DataError)
# Exceptions that say the database is away (or busy): the batch waits in the spool.
# Anything else a batch raises (a value a driver cannot bind, a statement the
# database refuses) is searched for the record that causes it, which is then
# rejected alone: one bad record must never hold back the ones after it.
OUTAGE_ERRORS = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
RECORD_ERRORS = (SQLAlchemyError, ValueError, TypeError, OverflowError, UnicodeError)
# Building rows is pure Python, holding the GIL the event loop needs; handing it
# over every few dozen records (about 0.5 ms of work) keeps the loop's wait far
# below the interpreter's 5 ms switch interval.
YIELD_EVERY = 32


class Unavailable(Exception):
    """The database could not take a batch (unreachable, locked, not migrated...)."""


def commit(sink: SqlSink, records: Sequence[StreamRecord]) -> int:
    """Insert a batch in one transaction; return how many records were stored.
    Records that cannot be stored are rejected one by one. Raises Unavailable
    when the database is the problem."""
    rows, gaps, bodies, good = build_rows(sink, records)
    if not rows:
        return 0
    try:
        ensure_schema(sink)
        with sink._engine.connect() as conn:
            insert(sink, conn, rows, gaps, bodies)
    except DATA_ERRORS as e:
        return split_batch(sink, good, e)
    except OUTAGE_ERRORS as e:
        outage(sink, e)
        raise Unavailable(str(e)) from e
    except Unavailable:
        raise
    except RECORD_ERRORS as e:
        return split_batch(sink, good, e)
    sink._bodies_written += len(bodies)
    recovered(sink)
    return len(good)


def split_batch(sink: SqlSink, good: list[StreamRecord], error: Exception) -> int:
    """A batch the database refused: commit its records one by one, rejecting
    whichever it refuses alone (each is kept in the rejected file)."""
    if len(good) == 1:
        reject(sink, good[0], error)
        return 0
    return sum(commit(sink, [rec]) for rec in good)


def build_rows(
    sink: SqlSink, records: Sequence[StreamRecord]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], list[StreamRecord]]:
    now = datetime.now(UTC)
    enc = sink._rows_for
    rows: list[tuple[Any, ...]] = []
    gaps: list[tuple[Any, ...]] = []
    bodies: list[tuple[Any, ...]] = []
    good: list[StreamRecord] = []
    for n, rec in enumerate(records, 1):
        if not n % YIELD_EVERY:
            time.sleep(0)  # let the event loop have the GIL (see YIELD_EVERY)
        try:
            row = enc.stream(rec, now)
            rec_gaps = enc.gaps(rec)
        except (TypeError, ValueError, AttributeError) as e:
            reject(sink, rec, e)
            continue
        rows.append(row)
        gaps.extend(rec_gaps)
        good.append(rec)
        body = body_of(rec)
        if body is not None:
            packed = pack_body(sink, rec)
            if packed is not None:
                bodies.append(enc.body(rec, packed))
            time.sleep(0)  # a body is a lot of work for one record: hand the GIL over
    return rows, gaps, bodies, good


def pack_body(sink: SqlSink, rec: StreamRecord) -> PackedBody | None:
    """A record's body packed (compressed) here, off the event loop; None, logged
    and counted, if that fails (the record is stored without it)."""
    body = body_of(rec)
    if body is None:
        return None
    try:
        return body.pack()
    except Exception as e:
        sink._bodies_failed += 1
        log.error(
            "recorder: cannot pack the body of record %s (%s: %s); stored without it",
            rec.id,
            type(e).__name__,
            e,
        )
        if isinstance(rec, CapturedRecord):
            rec.body = None  # spooled or retried, it goes without the body too
        return None


def insert(
    sink: SqlSink,
    conn: Connection,
    rows: list[tuple[Any, ...]],
    gaps: list[tuple[Any, ...]],
    bodies: list[tuple[Any, ...]],
) -> None:
    conn = conn.execution_options(**sink._begin) if sink._begin else conn
    enc = sink._rows_for
    with conn.begin():
        conn.exec_driver_sql(enc.streams_sql, rows)
        if gaps:
            conn.exec_driver_sql(enc.gaps_sql, gaps)
        if bodies:
            conn.exec_driver_sql(enc.bodies_sql, bodies)


def reject(sink: SqlSink, rec: StreamRecord, e: BaseException) -> None:
    reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if append_rejected(sink.spool_dir, rec, reason):
        sink._failed += 1
        log.error(
            "recorder: the database refused record %s (%s); kept in %s",
            rec.id,
            reason,
            sink.spool_dir / "recorder-rejected.jsonl",
        )
    else:
        sink._dropped += 1
        handover.log_drop(sink, 1, f"refused by the database ({reason}), and unkeepable", rec.id)


def ensure_schema(sink: SqlSink) -> None:
    if not sink._needs_upgrade:
        return
    try:
        # usually already done at start: then one SELECT, and Alembic stays idle
        if not migrate.is_current(sink._engine):
            migrate.upgrade(sink._engine)
    except SQLAlchemyError as e:
        outage(sink, e)
        raise Unavailable(str(e)) from e
    except Exception as e:  # e.g. a database newer than this code
        outage(sink, e)
        raise Unavailable(str(e)) from e
    sink._needs_upgrade = False


def outage(sink: SqlSink, e: BaseException) -> None:
    reason = short_error(e)
    now = time.monotonic()
    if sink._db_ok:
        log.warning(
            "recorder: database %s unavailable (%s); spooling records in %s",
            sink.url,
            reason,
            sink.spool_dir,
        )
        sink._backoff = sink.retry_min
    else:
        sink._backoff = min(sink._backoff * 2, sink.retry_max)
    sink._db_ok = False
    sink._last_error = reason
    sink._retry_at = now + sink._backoff


def recovered(sink: SqlSink) -> None:
    if not sink._db_ok:
        log.warning("recorder: database %s is back; replaying the spool", sink.url)
        sink._db_ok = True
        sink._next_orphan_scan = 0.0  # look for spool files right away


def short_error(e: BaseException) -> str:
    """An exception in a few words for a log line: its type and first line."""
    orig = getattr(e, "orig", None)
    text = str(orig if orig is not None else e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(orig if orig is not None else e).__name__}: {first}"
