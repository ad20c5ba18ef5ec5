"""The store's side of `recorder audit`: the streams it groups, read as the
audit's DataFrame (the grouping is :mod:`recorder.billing.audit`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, Engine, RowMapping, select

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
    return frame(read_rows(engine, f, columns, where=where), columns)


def read_rows(
    engine: Engine,
    f: SessionFilter,
    columns: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
    where: Sequence[ColumnElement[bool]] | None = None,
) -> list[RowMapping]:
    """The ``columns`` the schema has of the streams matching ``f`` (or ``where``,
    when given: the conditions already made of it), as mappings."""
    if where is None:
        where = list(filter_conditions(engine, f, environ))
    wanted = dict.fromkeys(name for name in columns if name in STREAMS.c)
    stmt = select(*(STREAMS.c[name] for name in wanted)).where(*where)
    with engine.connect() as conn:
        return list(conn.execute(stmt).mappings())
