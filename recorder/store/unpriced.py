"""The recorded models without a price (`recorder prices missing`).

A stream is unpriced when its usage is known (``usage_source`` is not ``none``)
and its ``cost_usd`` is null: no price for its model, or none for its service
tier (``unpriced_reason``; null on rows written before that column existed,
until ``recorder reprice`` fills it). Grouped by the model that served the
request (the response's model, the requested one when the response named
none), its service tier and the reason, with since when and until when.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, select

from recorder.store.models import STREAMS, parse_started_at


@dataclass(frozen=True, slots=True)
class UnpricedModel:
    """One model (and tier, and reason) recorded without a cost."""

    model: str | None
    service_tier: str | None
    reason: str | None
    streams: int
    first_seen: datetime
    last_seen: datetime


def unpriced_models(engine: Engine, since: datetime | None = None) -> list[UnpricedModel]:
    """Every model recorded without a price since ``since`` (all time without it),
    the longest-unpriced first."""
    c = STREAMS.c
    served = func.coalesce(c.response_model, c.model).label("served")
    stmt = (
        select(
            served,
            c.service_tier,
            c.unpriced_reason,
            func.count().label("streams"),
            func.min(c.started_at).label("first_seen"),
            func.max(c.started_at).label("last_seen"),
        )
        .where(c.cost_usd.is_(None), c.usage_source != "none")
        .group_by(served, c.service_tier, c.unpriced_reason)
    )
    if since is not None:
        stmt = stmt.where(c.started_at >= since)
    with engine.connect() as conn:
        rows = list(conn.execute(stmt))
    out = [
        UnpricedModel(
            r.served,
            r.service_tier,
            r.unpriced_reason,
            int(r.streams),
            _aware(r.first_seen),
            _aware(r.last_seen),
        )
        for r in rows
    ]
    return sorted(out, key=lambda u: (u.first_seen, u.model or "", u.service_tier or ""))


def _aware(value: datetime | str) -> datetime:
    """A UTC datetime whatever the driver returned (SQLite may give a string)."""
    if isinstance(value, str):
        parsed = parse_started_at(value)
        assert parsed is not None
        return parsed
    return parse_started_at(value.isoformat()) or value
