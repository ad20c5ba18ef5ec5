"""The store's side of `recorder audit`: the streams it groups, read as the
audit's DataFrame (the grouping is :mod:`recorder.billing.audit`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, Engine, select

from recorder.billing.audit import COLUMNS, OPTIONAL_COLUMNS, frame
from recorder.store.models import STREAMS
from recorder.store.queries import SessionFilter, filter_conditions

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]


def read_frame(
    engine: Engine,
    f: SessionFilter,
    *,
    project: str | None = None,
    environ: Mapping[str, str] | None = None,
    columns: Sequence[str] = (*COLUMNS, *OPTIONAL_COLUMNS),
) -> pd.DataFrame:
    """The streams matching ``f`` (its ``limit`` ignored) and ``project``, as
    :func:`recorder.billing.audit.frame` makes them with ``columns`` (one the
    schema lacks reads as null)."""
    where: list[ColumnElement[bool]] = list(filter_conditions(engine, f, environ))
    if project is not None:
        where.append(STREAMS.c.project == project)
    stmt = select(*(STREAMS.c[name] for name in columns if name in STREAMS.c)).where(*where)
    with engine.connect() as conn:
        rows = list(conn.execute(stmt).mappings())
    return frame(rows, columns)
