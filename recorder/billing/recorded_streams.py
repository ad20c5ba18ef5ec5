"""What reconciliation needs of a recorded stream (the store reads them:
:func:`recorder.store.reconcile_sql.read_streams`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from recorder.core.record_time import parse_started_at

STREAM_COLUMNS = (
    "id",
    "started_at",
    "provider",
    "model",
    "response_model",
    "api_key_id",
    "project",
    "outcome",
    "interrupted",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "input_source",
    "output_source",
    "usage_source",
    "cost_usd",
    "price_version",
)


@dataclass(frozen=True, slots=True)
class Stream:
    """What reconciliation needs of a recorded stream."""

    id: str
    started_at: datetime
    provider: str | None
    model: str | None  # the model that served it, else the requested one
    api_key_id: str | None
    project: str | None
    outcome: str
    interrupted: bool
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    input_source: str
    output_source: str
    usage_source: str
    cost_usd: Decimal | None
    price_version: str | None

    @property
    def day(self) -> str:
        """The UTC date it started."""
        return self.started_at.astimezone(UTC).date().isoformat()

    @property
    def billed(self) -> bool:
        """Whether the stream counts in the recorded figures (its usage is known)."""
        return self.usage_source != "none"


def stream_from_row(row: Mapping[Any, Any]) -> Stream:
    """A :class:`Stream` from a store row or ``StreamRecord.to_dict()``."""
    started = row["started_at"]
    when = started if isinstance(started, datetime) else parse_started_at(started)
    if when is None:
        raise ValueError(f"stream {row['id']} has no started_at")
    cost = row.get("cost_usd")
    return Stream(
        id=row["id"],
        started_at=when if when.tzinfo else when.replace(tzinfo=UTC),
        provider=row.get("provider"),
        model=row.get("response_model") or row.get("model"),
        api_key_id=row.get("api_key_id"),
        project=row.get("project"),
        outcome=row.get("outcome") or "truncated",
        interrupted=bool(row.get("interrupted")),
        input_tokens=row.get("input_tokens"),
        output_tokens=row.get("output_tokens"),
        cache_read_tokens=row.get("cache_read_tokens"),
        cache_write_tokens=row.get("cache_write_tokens"),
        input_source=row.get("input_source") or "none",
        output_source=row.get("output_source") or "none",
        usage_source=row.get("usage_source") or "none",
        cost_usd=None if cost is None else Decimal(cost),
        price_version=row.get("price_version"),
    )
