"""The store's side of `recorder reconcile`: the recorded streams of a period
(the comparison is :mod:`recorder.billing.comparison`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, select

from recorder.billing.recorded_streams import STREAM_COLUMNS, Stream, streams_from_row
from recorder.store.models import STREAMS


def read_streams(
    engine: Engine,
    since: datetime,
    until: datetime,
    providers: Iterable[str] = (),
) -> list[Stream]:
    """The streams started in [since, until), of ``providers`` if any are named;
    a stream of several priced parts as one per part (``streams_from_row``)."""
    c = STREAMS.c
    where: list[ColumnElement[bool]] = [c.started_at >= since, c.started_at < until]
    names = sorted(set(providers))
    if names:
        where.append(c.provider.in_(names))
    stmt = select(*(c[n] for n in STREAM_COLUMNS)).where(*where).order_by(c.started_at, c.id)
    with engine.connect() as conn:
        rows = conn.execute(stmt).mappings()
        return [stream for row in rows for stream in streams_from_row(row)]
