"""The SQL schema: one row per recorded stream, its notable gaps, its captured
body (only with ``--capture-bodies``), and settings.

Columns carry the record's field names (``recorder.core.record.FIELDS``) so a
user's SQL reads like ``recorder sessions --format json``. The rules the schema
keeps:

- Unknown is NULL, never 0: every figure a stream may not have is nullable.
- Money is exact. ``cost_usd`` is ``NUMERIC(24, 12)`` on PostgreSQL. SQLite has
  no decimal type (a NUMERIC column keeps only 15 significant digits, as a
  float), so there it is a ``VARCHAR`` holding the canonical decimal string with
  12 fractional digits; either way Python sees a ``Decimal``.
- Times are timezone-aware UTC. SQLite stores naive text, so ``UTCDateTime``
  normalises to UTC on the way in and attaches UTC on the way out; stored text
  sorts by time.
- The provider's raw usage object is kept as JSON (JSONB on PostgreSQL) beside
  the normalised token columns.

Conversions: ``stream_row``/``gap_rows`` build plain dicts for the writer's
bulk inserts; ``from_record``/``to_record`` go between ``StreamRecord`` and the
ORM objects.
"""

from __future__ import annotations

import operator
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, cast

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator, TypeEngine

from recorder import __version__
from recorder.core.captured import PackedBody
from recorder.core.money import PLACES, QUANTUM
from recorder.core.record import FIELDS, Gap, GapKind, StreamRecord

# The record's time form lives in the core (billing reads it too); re-exported for the store.
from recorder.core.record_time import format_started_at as format_started_at
from recorder.core.record_time import parse_started_at as parse_started_at

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

MONEY_SCALE = PLACES
_QUANTUM = QUANTUM


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (naive input is taken as UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":  # stored as text: keep it naive and UTC so it sorts
            value = value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Money(TypeDecorator[Decimal]):
    """An exact decimal amount of USD with 12 fractional digits (never a float)."""

    impl = Numeric(24, MONEY_SCALE, asdecimal=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(40))
        return dialect.type_descriptor(Numeric(24, MONEY_SCALE, asdecimal=True))

    def process_bind_param(self, value: Decimal | str | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        amount = to_money(value)
        return f"{amount:f}" if dialect.name == "sqlite" else amount

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if isinstance(value, float):  # a float never goes in; be exact about what came out
            value = repr(value)
        return Decimal(value).quantize(_QUANTUM)


def to_money(value: Decimal | str | int) -> Decimal:
    """``value`` as a Decimal with exactly 12 fractional digits.

    Raises ValueError for anything that is not a finite decimal number.
    """
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"not a decimal amount: {value!r}") from None
    if not amount.is_finite():
        raise ValueError(f"not a finite amount: {value!r}")
    return amount.quantize(_QUANTUM)


JSONDoc = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


class Base(DeclarativeBase):
    """The one declarative base; constraint and index names follow the convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Stream(Base):
    """One recorded stream: ``StreamRecord``'s fields, plus what an audit needs."""

    __tablename__ = "streams"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    endpoint: Mapped[str | None] = mapped_column(String(32))
    provider: Mapped[str | None] = mapped_column(String(32))
    upstream: Mapped[str | None] = mapped_column(String(255))
    model: Mapped[str | None] = mapped_column(String(255))
    response_model: Mapped[str | None] = mapped_column(String(255))
    request_id: Mapped[str | None] = mapped_column(String(255))
    response_id: Mapped[str | None] = mapped_column(String(255))
    project: Mapped[str | None] = mapped_column(String(255))
    streamed: Mapped[bool] = mapped_column(Boolean())
    http_status: Mapped[int | None] = mapped_column(Integer())
    outcome: Mapped[str] = mapped_column(String(32))
    interrupted: Mapped[bool] = mapped_column(Boolean())
    finish_reason: Mapped[str | None] = mapped_column(String(64))
    error_type: Mapped[str | None] = mapped_column(String(255))
    error_code: Mapped[str | None] = mapped_column(String(255))
    error_message: Mapped[str | None] = mapped_column(Text())
    ttfb_ms: Mapped[float | None] = mapped_column(Double())
    first_event_ms: Mapped[float | None] = mapped_column(Double())
    ttft_ms: Mapped[float | None] = mapped_column(Double())
    duration_ms: Mapped[float | None] = mapped_column(Double())
    events: Mapped[int | None] = mapped_column(Integer())
    keepalives: Mapped[int | None] = mapped_column(Integer())
    max_keepalive_gap_ms: Mapped[float | None] = mapped_column(Double())
    max_silence_ms: Mapped[float | None] = mapped_column(Double())
    max_output_gap_ms: Mapped[float | None] = mapped_column(Double())
    stalls: Mapped[int | None] = mapped_column(Integer())
    stall_ms: Mapped[float | None] = mapped_column(Double())
    output_chars: Mapped[int] = mapped_column(BigInteger())
    tool_calls: Mapped[int] = mapped_column(Integer())
    input_tokens: Mapped[int | None] = mapped_column(BigInteger())
    cache_read_tokens: Mapped[int | None] = mapped_column(BigInteger())
    cache_write_tokens: Mapped[int | None] = mapped_column(BigInteger())
    output_tokens: Mapped[int | None] = mapped_column(BigInteger())
    reasoning_tokens: Mapped[int | None] = mapped_column(BigInteger())
    input_source: Mapped[str] = mapped_column(String(16))
    output_source: Mapped[str] = mapped_column(String(16))
    usage_source: Mapped[str] = mapped_column(String(16))
    estimate_method: Mapped[str | None] = mapped_column(String(64))
    cost_usd: Mapped[Decimal | None] = mapped_column(Money())
    price_version: Mapped[str | None] = mapped_column(String(255))
    api_key_id: Mapped[str | None] = mapped_column(String(64))
    organization: Mapped[str | None] = mapped_column(String(255))
    include_usage: Mapped[bool | None] = mapped_column(Boolean())
    max_output_tokens: Mapped[int | None] = mapped_column(BigInteger())
    parse_issues: Mapped[int] = mapped_column(Integer())
    oversized_events: Mapped[int] = mapped_column(Integer())
    partial_event_at_end: Mapped[bool] = mapped_column(Boolean())
    transport_error: Mapped[str | None] = mapped_column(Text())
    recorder_error: Mapped[str | None] = mapped_column(Text())
    raw_usage: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    service_tier: Mapped[str | None] = mapped_column(String(32))
    requested_tier: Mapped[str | None] = mapped_column(String(32))
    cache_write_5m_tokens: Mapped[int | None] = mapped_column(BigInteger())
    cache_write_1h_tokens: Mapped[int | None] = mapped_column(BigInteger())
    server_tool_requests: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    output_breakdown: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    input_breakdown: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    unpriced_reason: Mapped[str | None] = mapped_column(Text())
    content_mismatch: Mapped[str | None] = mapped_column(Text())
    transport: Mapped[str | None] = mapped_column(String(16))
    # issue 31 (OpenAI over WebSocket)
    connection_id: Mapped[str | None] = mapped_column(String(64))
    input_audio_tokens: Mapped[int | None] = mapped_column(BigInteger())
    cache_read_audio_tokens: Mapped[int | None] = mapped_column(BigInteger())
    input_image_tokens: Mapped[int | None] = mapped_column(BigInteger())
    cache_read_image_tokens: Mapped[int | None] = mapped_column(BigInteger())
    output_audio_tokens: Mapped[int | None] = mapped_column(BigInteger())
    output_audio_ms: Mapped[float | None] = mapped_column(Double())
    # issue 32: attribution and retry chains
    user_id: Mapped[str | None] = mapped_column(String(255))
    session_id: Mapped[str | None] = mapped_column(String(255))
    prompt_cache_key: Mapped[str | None] = mapped_column(String(255))
    tags: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    request_fingerprint: Mapped[str | None] = mapped_column(String(32))
    retry_of: Mapped[str | None] = mapped_column(String(36))
    attempt: Mapped[int | None] = mapped_column(Integer())
    # issue 30: the priced parts of the usage (Anthropic's iterations), each with its model
    usage_parts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONDoc)
    # issue 31 (Amazon Bedrock): the provider's own timing
    provider_latency_ms: Mapped[float | None] = mapped_column(Double())
    provider_first_byte_ms: Mapped[float | None] = mapped_column(Double())
    # Beyond the record: for the audit.
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())  # started_at + duration
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())  # when the writer stored it
    recorder_version: Mapped[str | None] = mapped_column(String(32))  # which meter measured it

    gaps: Mapped[list[StreamGap]] = relationship(
        back_populates="stream",
        order_by="StreamGap.seq",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="raise",
    )

    __table_args__ = (
        Index("ix_streams_started_at", "started_at"),
        Index("ix_streams_model_started_at", "model", "started_at"),
        Index("ix_streams_api_key_id_started_at", "api_key_id", "started_at"),
        Index("ix_streams_outcome_started_at", "outcome", "started_at"),
        Index("ix_streams_endpoint_started_at", "endpoint", "started_at"),
        Index("ix_streams_retry_of", "retry_of"),
    )


class StreamGap(Base):
    """A notable gap of a stream (every stall, the longest keepalive gaps, the
    longest silence): what `recorder show` draws."""

    __tablename__ = "stream_gaps"

    stream_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("streams.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer(), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    start_ms: Mapped[float] = mapped_column(Double())
    length_ms: Mapped[float] = mapped_column(Double())

    stream: Mapped[Stream] = relationship(back_populates="gaps", lazy="raise")


class StreamBody(Base):
    """A stream's captured SSE response body (``--capture-bodies``): the bytes the
    meter saw, compressed, and the times they arrived, for `recorder replay --id`.
    Never a request body. Formats: ``recorder.core.captured``."""

    __tablename__ = "stream_bodies"

    stream_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("streams.id", ondelete="CASCADE"), primary_key=True
    )
    encoding: Mapped[str] = mapped_column(String(16))  # compression of body and timings
    body: Mapped[bytes] = mapped_column(LargeBinary())
    size: Mapped[int] = mapped_column(BigInteger())  # bytes received, beyond the cap too
    timings: Mapped[bytes] = mapped_column(LargeBinary())  # compressed JSON timeline
    truncated: Mapped[bool] = mapped_column(Boolean())  # the body stored is not all of it


class Setting(Base):
    """Small named values shared by every process on the database (the key secret)."""

    __tablename__ = "settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


STREAMS = cast(Table, Stream.__table__)
STREAM_GAPS = cast(Table, StreamGap.__table__)
STREAM_BODIES = cast(Table, StreamBody.__table__)
SETTINGS = cast(Table, Setting.__table__)

# Record fields whose column is not a plain copy.
_SPECIAL = frozenset({"id", "started_at", "cost_usd"})
# A field the schema lacks is left out rather than failing every insert; a test
# (tests/store/test_models.py) makes sure there is none.
_PLAIN = tuple(f for f in FIELDS if f not in _SPECIAL and f in STREAMS.columns)


# Bounded text columns: longer values are cut (a record is worth more than a long
# model name); NUL, which PostgreSQL text cannot hold, becomes U+FFFD.
_LIMITS = {c.name: getattr(c.type, "length", None) for c in STREAMS.columns if c.name in _PLAIN}


def _text(name: str, value: str) -> str:
    return _clip(value, _LIMITS.get(name) or sys.maxsize)


def _clip(value: str, limit: int) -> str:
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return value


def stream_row(rec: StreamRecord, recorded_at: datetime) -> dict[str, Any]:
    """The ``streams`` row of a record, as a dict for a bulk insert.

    Raises ValueError (or TypeError) for a record that cannot be stored: no id,
    an unparsable time or amount.
    """
    if not rec.id:
        raise ValueError("record has no id")
    row = {}
    for name in _PLAIN:
        value = getattr(rec, name)
        row[name] = _text(name, value) if type(value) is str else value
    row["id"] = rec.id
    started = parse_started_at(rec.started_at)
    if started is None:  # the addon always sets it; a record without one is stamped on arrival
        started = recorded_at
    row["started_at"] = started
    row["cost_usd"] = None if rec.cost_usd is None else to_money(rec.cost_usd)
    row["ended_at"] = (
        None if rec.duration_ms is None else started + timedelta(milliseconds=rec.duration_ms)
    )
    row["recorded_at"] = recorded_at
    row["recorder_version"] = __version__
    return row


def gap_rows(rec: StreamRecord) -> list[dict[str, Any]]:
    """The ``stream_gaps`` rows of a record."""
    return [
        {
            "stream_id": rec.id,
            "seq": i,
            "kind": g.kind,
            "start_ms": g.start_ms,
            "length_ms": g.length_ms,
        }
        for i, g in enumerate(rec.gaps)
    ]


_JSON_COLUMNS = frozenset(c.name for c in STREAMS.columns if isinstance(c.type, JSON))


def _sqlite_time(value: datetime | None) -> str | None:
    """What ``UTCDateTime`` stores on SQLite (SQLAlchemy's DATETIME text format)."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


class BulkRows:
    """The writer's INSERT statements and their parameters, built straight from
    records.

    The same rows as ``stream_row``/``gap_rows`` through the ORM types, without
    SQLAlchemy's per-row parameter processing, which would double the writer's
    CPU time, and the writer shares the GIL with the event loop. The round-trip
    tests write through this path and read back through the ORM types.
    """

    def __init__(self, dialect: str) -> None:
        self.sqlite = dialect == "sqlite"
        plain = list(_PLAIN)
        cols = [*plain, "id", "started_at", "cost_usd", "ended_at", "recorded_at"]
        cols.append("recorder_version")
        ph = "?" if self.sqlite else "%s"
        self.streams_sql = (
            f"INSERT INTO streams ({', '.join(cols)}) VALUES ({', '.join([ph] * len(cols))})"
            " ON CONFLICT (id) DO NOTHING"
        )
        body_cols = ("stream_id", "encoding", "body", "size", "timings", "truncated")
        self.bodies_sql = (
            f"INSERT INTO stream_bodies ({', '.join(body_cols)})"
            f" VALUES ({', '.join([ph] * len(body_cols))}) ON CONFLICT (stream_id) DO NOTHING"
        )
        gap_cols = ("stream_id", "seq", "kind", "start_ms", "length_ms")
        self.gaps_sql = (
            f"INSERT INTO stream_gaps ({', '.join(gap_cols)})"
            f" VALUES ({', '.join([ph] * len(gap_cols))}) ON CONFLICT (stream_id, seq) DO NOTHING"
        )
        self._get = operator.attrgetter(*plain)
        self._texts = [
            (i, _LIMITS.get(name) or sys.maxsize)
            for i, name in enumerate(plain)
            if isinstance(STREAMS.c[name].type, String) and name not in _JSON_COLUMNS
        ]
        self._jsons = [i for i, name in enumerate(plain) if name in _JSON_COLUMNS]
        if self.sqlite:
            self._json: Any = lambda v: orjson.dumps(v).decode("utf-8")
        else:
            from psycopg.types.json import Jsonb

            self._json = Jsonb

    def stream(self, rec: StreamRecord, recorded_at: datetime) -> tuple[Any, ...]:
        """The ``streams`` parameters of a record. Raises ValueError or TypeError for
        a record that cannot be stored (as ``stream_row`` does)."""
        if not rec.id:
            raise ValueError("record has no id")
        vals = list(self._get(rec))
        for i, limit in self._texts:
            v = vals[i]
            if type(v) is str and (len(v) > limit or "\x00" in v):
                vals[i] = _clip(v, limit)
        for i in self._jsons:
            if vals[i] is not None:
                vals[i] = self._json(vals[i])
        started = parse_started_at(rec.started_at) or recorded_at
        ended = (
            None if rec.duration_ms is None else started + timedelta(milliseconds=rec.duration_ms)
        )
        cost = None if rec.cost_usd is None else to_money(rec.cost_usd)
        if self.sqlite:
            money: Any = None if cost is None else f"{cost:f}"
            return (
                *vals,
                rec.id,
                _sqlite_time(started),
                money,
                _sqlite_time(ended),
                _sqlite_time(recorded_at),
                __version__,
            )
        return (*vals, rec.id, started, cost, ended, recorded_at, __version__)

    @staticmethod
    def gaps(rec: StreamRecord) -> list[tuple[Any, ...]]:
        """The ``stream_gaps`` parameters of a record."""
        return [(rec.id, i, g.kind, g.start_ms, g.length_ms) for i, g in enumerate(rec.gaps)]

    @staticmethod
    def body(rec: StreamRecord, packed: PackedBody) -> tuple[Any, ...]:
        """The ``stream_bodies`` parameters of a record's packed body."""
        return (rec.id, packed.encoding, packed.data, packed.size, packed.timings, packed.truncated)


def from_record(rec: StreamRecord, recorded_at: datetime | None = None) -> Stream:
    """An ORM ``Stream`` (with its gaps) for a record."""
    row = stream_row(rec, recorded_at or datetime.now(UTC))
    stream = Stream(**row)
    stream.gaps = [StreamGap(**g) for g in gap_rows(rec)]
    return stream


def record_from_row(row: Any, gaps: list[Gap] | None = None) -> StreamRecord:
    """A ``StreamRecord`` from anything with the columns as attributes (an ORM
    ``Stream`` or a Core row)."""
    values = {name: getattr(row, name) for name in _PLAIN}
    cost = row.cost_usd
    return StreamRecord(
        id=row.id,
        started_at=format_started_at(row.started_at),
        cost_usd=None if cost is None else f"{to_money(cost):f}",
        gaps=list(gaps or []),
        **values,
    )


def to_record(stream: Stream) -> StreamRecord:
    """The ``StreamRecord`` of an ORM ``Stream`` whose gaps are loaded."""
    # the kinds the writer stored (the column holds no other)
    gaps = [Gap(cast(GapKind, g.kind), g.start_ms, g.length_ms) for g in stream.gaps]
    return record_from_row(stream, gaps)
