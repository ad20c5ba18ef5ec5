"""The writer's SQL: a batch of records into the database in one transaction.

``BatchInsert`` owns the dialect's INSERT statements and rows
(``recorder.store.models.BulkRows``) and the place refused records are kept. It
runs on the writer thread, through the ``DatabaseLink``, and counts on the
writer's ``Tally``. Invariants:

- Every insert is ``ON CONFLICT DO NOTHING`` (on the record id, and on
  ``(stream_id, seq)`` for gaps): a record committed twice is stored once.
- ``commit`` returns how many records of the batch are stored; each other
  record is either refused (kept in ``recorder-rejected.jsonl`` and counted as
  ``failed``, or counted as ``dropped`` if even that fails), or the whole batch
  is left to the caller by ``Unavailable`` (the database is away: nothing of it
  is counted). A batch the database refuses as data is split until the record
  that causes it is alone: one bad record never holds back the ones after it.
- A captured body is inserted in the same transaction as its record; one that
  cannot be packed is counted (``bodies_failed``) and its record stored without it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
from recorder.store.counters import Counters
from recorder.store.link import DatabaseLink, Unavailable
from recorder.store.models import BulkRows
from recorder.store.spool_format import REJECTED_FILE, append_rejected

log = logging.getLogger("recorder.store")

# Exceptions that say something about one record, not about the database.
DATA_ERRORS = (IntegrityError, DataError)
# Exceptions that say the database is away (or busy): the batch waits in the spool.
# Anything else a batch raises (a value a driver cannot bind, a statement the
# database refuses) is searched for the record that causes it, which is then
# rejected alone: one bad record must never hold back the ones after it.
OUTAGE_ERRORS = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
RECORD_ERRORS = (SQLAlchemyError, ValueError, TypeError, OverflowError, UnicodeError)
# Building rows is pure Python, holding the GIL the event loop needs: hand it
# over every few dozen records (docs/storage.md, "The GIL").
YIELD_EVERY = 32

Rows = list[tuple[Any, ...]]


class BatchInsert:
    """Commits batches of records through ``link``; refused records go to
    ``spool_dir``/recorder-rejected.jsonl."""

    def __init__(self, link: DatabaseLink, counters: Counters, spool_dir: Path) -> None:
        self._link = link
        self._counters = counters
        self._spool_dir = spool_dir
        self._rows = BulkRows(link.dialect)

    def commit(self, records: Sequence[StreamRecord]) -> int:
        """Insert a batch in one transaction; return how many records were stored.
        Records that cannot be stored are rejected one by one. Raises Unavailable
        when the database is the problem."""
        rows, gaps, bodies, good = self._build_rows(records)
        if not rows:
            return 0
        link = self._link
        try:
            link.ensure_schema()
            self._insert(rows, gaps, bodies)
        except DATA_ERRORS as e:
            return self._split(good, e)
        except OUTAGE_ERRORS as e:
            link.outage(e)
            raise Unavailable(str(e)) from e
        except Unavailable:
            raise
        except RECORD_ERRORS as e:
            return self._split(good, e)
        self._counters.writer.bodies_written += len(bodies)
        link.succeeded()
        return len(good)

    def _split(self, good: list[StreamRecord], error: Exception) -> int:
        """A batch the database refused: commit its records one by one, rejecting
        whichever it refuses alone (each is kept in the rejected file)."""
        if len(good) == 1:
            self._reject(good[0], error)
            return 0
        return sum(self.commit([rec]) for rec in good)

    def _build_rows(
        self, records: Sequence[StreamRecord]
    ) -> tuple[Rows, Rows, Rows, list[StreamRecord]]:
        now = datetime.now(UTC)
        enc = self._rows
        rows: Rows = []
        gaps: Rows = []
        bodies: Rows = []
        good: list[StreamRecord] = []
        for n, rec in enumerate(records, 1):
            if not n % YIELD_EVERY:
                time.sleep(0)  # let the event loop have the GIL (see YIELD_EVERY)
            try:
                row = enc.stream(rec, now)
                rec_gaps = enc.gaps(rec)
            except (TypeError, ValueError, AttributeError) as e:
                self._reject(rec, e)
                continue
            rows.append(row)
            gaps.extend(rec_gaps)
            good.append(rec)
            if body_of(rec) is not None:
                packed = self._pack_body(rec)
                if packed is not None:
                    bodies.append(enc.body(rec, packed))
                time.sleep(0)  # a body is a lot of work for one record: hand the GIL over
        return rows, gaps, bodies, good

    def _pack_body(self, rec: StreamRecord) -> PackedBody | None:
        """A record's body packed (compressed) here, off the event loop; None, logged
        and counted, if that fails (the record is stored without it)."""
        body = body_of(rec)
        if body is None:
            return None
        try:
            return body.pack()
        except Exception as e:
            self._counters.writer.bodies_failed += 1
            log.error(
                "recorder: cannot pack the body of record %s (%s: %s); stored without it",
                rec.id,
                type(e).__name__,
                e,
            )
            if isinstance(rec, CapturedRecord):
                rec.body = None  # spooled or retried, it goes without the body too
            return None

    def _insert(self, rows: Rows, gaps: Rows, bodies: Rows) -> None:
        enc = self._rows
        with self._link.transaction() as conn:
            conn.exec_driver_sql(enc.streams_sql, rows)
            if gaps:
                conn.exec_driver_sql(enc.gaps_sql, gaps)
            if bodies:
                conn.exec_driver_sql(enc.bodies_sql, bodies)

    def _reject(self, rec: StreamRecord, e: BaseException) -> None:
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if append_rejected(self._spool_dir, rec, reason):
            self._counters.writer.failed += 1
            log.error(
                "recorder: the database refused record %s (%s); kept in %s",
                rec.id,
                reason,
                self._spool_dir / REJECTED_FILE,
            )
        else:
            self._counters.drop(
                self._counters.writer,
                1,
                f"refused by the database ({reason}), and unkeepable",
                rec.id,
            )
