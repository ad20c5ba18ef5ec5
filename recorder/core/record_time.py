"""The record's form of a time: ``started_at`` as ISO 8601 UTC with a ``Z``.

Read and written here rather than in the store, so that the billing code (pure)
and the store agree on one form without billing importing the database layer.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_started_at(text: str | None) -> datetime | None:
    """A record's ISO 8601 ``started_at`` as an aware UTC datetime (None if absent)."""
    if not text:
        return None
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def format_started_at(value: datetime) -> str:
    """The record's form of a time: ISO 8601 UTC with a ``Z`` (milliseconds when exact)."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    spec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
    return value.isoformat(timespec=spec).replace("+00:00", "Z")
