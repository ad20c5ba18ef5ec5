"""The store's side of `recorder reprice`: the streams read and their new costs
written a chunk at a time (the pure part is :mod:`recorder.billing.reprice`).

Rows are read in keyset order on (``started_at``, ``id``), one transaction per
chunk (``BEGIN IMMEDIATE`` on SQLite), so a large reprice never holds SQLite's
write lock for long and a proxy writing meanwhile goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, and_, bindparam, or_, select, update

from recorder.billing.reprice import Report, plan
from recorder.core.pricing import PriceTable
from recorder.store.models import STREAMS, record_from_row
from recorder.store.queries import SessionFilter, filter_conditions

CHUNK = 1000

_UPDATE = (
    update(STREAMS)
    .where(STREAMS.c.id == bindparam("_id"))
    .values(
        cost_usd=bindparam("_cost", type_=STREAMS.c.cost_usd.type),
        price_version=bindparam("_version"),
        unpriced_reason=bindparam("_reason"),
        usage_parts=bindparam("_parts", type_=STREAMS.c.usage_parts.type),
    )
)


def reprice(
    engine: Engine,
    table: PriceTable,
    f: SessionFilter,
    *,
    dry_run: bool = False,
    chunk: int = CHUNK,
    environ: Mapping[str, str] | None = None,
) -> Report:
    """Reprice the streams matching ``f`` (its ``limit`` ignored) with ``table``;
    store the new costs unless ``dry_run``. Returns the report."""
    report = Report(table.version, f.since, f.until, dry_run)
    where: list[ColumnElement[bool]] = list(filter_conditions(engine, f, environ))
    c = STREAMS.c
    after: tuple[datetime, str] | None = None
    opts = {"sqlite_begin": "IMMEDIATE"} if engine.dialect.name == "sqlite" else {}
    while True:
        stmt = select(STREAMS).where(*where)
        if after is not None:
            stmt = stmt.where(
                or_(c.started_at > after[0], and_(c.started_at == after[0], c.id > after[1]))
            )
        stmt = stmt.order_by(c.started_at, c.id).limit(chunk)
        with engine.connect() as raw:
            conn = raw.execution_options(**opts) if opts and not dry_run else raw
            with conn.begin():
                rows = list(conn.execute(stmt))
                if not rows:
                    return report
                changes = plan((record_from_row(r) for r in rows), table, report)
                if changes and not dry_run:
                    conn.execute(
                        _UPDATE,
                        [
                            {
                                "_id": ch.id,
                                "_cost": ch.cost_usd,
                                "_version": ch.price_version,
                                "_reason": ch.unpriced_reason,
                                "_parts": ch.usage_parts,
                            }
                            for ch in changes
                        ],
                    )
        after = (rows[-1].started_at, rows[-1].id)
