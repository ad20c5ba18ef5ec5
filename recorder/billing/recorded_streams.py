"""What reconciliation needs of a recorded stream (the store reads them:
:func:`recorder.store.reconcile_sql.read_streams`).

A stream of several priced parts (``usage_parts``: Anthropic's compaction,
advisor and fallback iterations) is one :class:`Stream` per part
(:func:`streams_from_row`): each part's figures under the model it ran on, as a
provider's export bills them (an Opus advisor inside a Sonnet request is on
Opus's line), the request counted once, with the part of the request's own model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
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
    "usage_parts",
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
    requests: int = 1  # 0 for a part of a stream whose request another part counts

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


def streams_from_row(row: Mapping[Any, Any]) -> list[Stream]:
    """The row as :class:`Stream` s: one, or one per priced part of its usage."""
    whole = stream_from_row(row)
    parts = [p for p in row.get("usage_parts") or () if isinstance(p, dict)]
    if not parts:
        return [whole]
    own = next((i for i, p in enumerate(parts) if not p.get("model")), 0)
    out = []
    for i, part in enumerate(parts):
        cost = part.get("cost_usd") if whole.cost_usd is not None else None
        out.append(
            replace(
                whole,
                model=part.get("model") or whole.model,
                input_tokens=_count(part.get("input_tokens")),
                output_tokens=_count(part.get("output_tokens")),
                cache_read_tokens=_count(part.get("cache_read_tokens")),
                cache_write_tokens=_count(part.get("cache_write_tokens")),
                cost_usd=None if cost is None else Decimal(cost),
                price_version=part.get("price_version") or whole.price_version,
                requests=int(i == own),
            )
        )
    return out


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
