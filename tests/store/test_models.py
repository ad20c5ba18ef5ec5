"""The schema and the record <-> row conversions."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session, selectinload

from recorder.core.record import FIELDS, StreamRecord
from recorder.store.models import (
    STREAMS,
    Stream,
    from_record,
    parse_started_at,
    stream_row,
    to_money,
    to_record,
)
from tests.kit.databases import kind_of
from tests.kit.records import full_record, simple_record


def _store(engine: Engine, rec: StreamRecord) -> None:
    with Session(engine) as s, s.begin():
        s.add(from_record(rec))


def _load(engine: Engine, rid: str) -> StreamRecord:
    with Session(engine) as s:
        stream = s.get(Stream, rid, options=[selectinload(Stream.gaps)])
        assert stream is not None
        return to_record(stream)


def test_full_record_sets_every_field() -> None:
    rec = full_record()
    defaults = StreamRecord()
    for f in fields(StreamRecord):
        if getattr(defaults, f.name) in (None, 0, [], False, "none"):
            assert getattr(rec, f.name) not in (None, 0, [], False, "none"), f.name


def test_every_record_field_has_a_column() -> None:
    assert set(FIELDS) <= set(STREAMS.columns.keys())


def test_round_trip_without_database() -> None:
    rec = full_record()
    assert to_record(from_record(rec)) == rec


def test_round_trip_through_database(engine: Engine) -> None:
    rec = full_record()
    _store(engine, rec)
    assert _load(engine, rec.id or "") == rec


def test_unknown_usage_is_null_not_zero(engine: Engine) -> None:
    rec = simple_record(
        input_tokens=None,
        output_tokens=None,
        cost_usd=None,
        ttft_ms=None,
        stalls=None,
        raw_usage=None,
        input_source="none",
        output_source="none",
        usage_source="none",
    )
    _store(engine, rec)
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT input_tokens IS NULL, output_tokens IS NULL, cost_usd IS NULL,"
                " ttft_ms IS NULL, stalls IS NULL, raw_usage IS NULL FROM streams"
            )
        ).one()
    assert all(row), row
    back = _load(engine, rec.id or "")
    assert back.input_tokens is None and back.cost_usd is None and back.raw_usage is None


@pytest.mark.parametrize(
    "amount",
    ["0.000000000001", "123456789012.123456789012", "0.000123450000", "0", "7"],
)
def test_money_is_exact(engine: Engine, amount: str) -> None:
    rec = simple_record(cost_usd=amount)
    _store(engine, rec)
    back = _load(engine, rec.id or "")
    assert back.cost_usd == f"{Decimal(amount):.12f}"
    with engine.connect() as conn:
        value = conn.execute(select(STREAMS.c.cost_usd)).scalar_one()
        assert isinstance(value, Decimal)
        assert value == Decimal(amount)
        if kind_of(str(engine.url)) == "sqlite":
            stored = conn.execute(text("SELECT typeof(cost_usd), cost_usd FROM streams")).one()
            assert stored == ("text", f"{Decimal(amount):.12f}")
        else:
            kind = conn.execute(text("SELECT pg_typeof(cost_usd)::text FROM streams")).scalar()
            assert kind == "numeric"


def test_money_rejects_non_numbers() -> None:
    with pytest.raises(ValueError):
        to_money("abc")
    with pytest.raises(ValueError):
        to_money("NaN")


def test_times_are_aware_utc(engine: Engine) -> None:
    rec = simple_record(started_at="2026-03-04T07:06:07.089+02:00", duration_ms=1000.0)
    _store(engine, rec)
    with engine.connect() as conn:
        started, ended, recorded = conn.execute(
            select(STREAMS.c.started_at, STREAMS.c.ended_at, STREAMS.c.recorded_at)
        ).one()
    for value in (started, ended, recorded):
        assert value.tzinfo is not None and value.utcoffset().total_seconds() == 0
    assert started == datetime(2026, 3, 4, 5, 6, 7, 89000, tzinfo=UTC)
    assert (ended - started).total_seconds() == 1.0
    assert _load(engine, rec.id or "").started_at == "2026-03-04T05:06:07.089Z"


def test_microseconds_survive() -> None:
    when = parse_started_at("2026-03-04T05:06:07.123456Z")
    assert when == datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    rec = simple_record(started_at="2026-03-04T05:06:07.123456Z")
    assert to_record(from_record(rec)).started_at == "2026-03-04T05:06:07.123456Z"


def test_raw_usage_is_json(engine: Engine) -> None:
    rec = full_record()
    _store(engine, rec)
    with engine.connect() as conn:
        if kind_of(str(engine.url)) == "postgresql":
            kind = conn.execute(text("SELECT jsonb_typeof(raw_usage) FROM streams")).scalar()
            assert kind == "object"
            nested = conn.execute(text("SELECT raw_usage->'nested'->'a'->>1 FROM streams"))
        else:
            nested = conn.execute(
                text("SELECT json_extract(raw_usage, '$.nested.a[1]') FROM streams")
            )
        assert str(nested.scalar()) == "2"


def test_long_text_is_cut_and_nul_replaced(engine: Engine) -> None:
    rec = simple_record(model="m" * 300, error_message="bad\x00byte", finish_reason="x" * 100)
    _store(engine, rec)
    back = _load(engine, rec.id or "")
    assert back.model is not None and len(back.model) == 255 and back.model.endswith("…")
    assert back.error_message == "bad\ufffdbyte"
    assert back.finish_reason is not None and len(back.finish_reason) == 64


def test_missing_started_at_is_stamped_on_arrival() -> None:
    now = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    row = stream_row(simple_record(started_at=None), now)
    assert row["started_at"] == now and row["recorded_at"] == now


def test_a_record_without_id_cannot_be_stored() -> None:
    with pytest.raises(ValueError):
        stream_row(simple_record(id=None), datetime.now(UTC))


def test_naming_convention_and_indexes(engine: Engine) -> None:
    insp = inspect(engine)
    assert insp.get_pk_constraint("streams")["name"] in ("pk_streams", None)  # SQLite: unnamed
    indexes = {ix["name"]: ix["column_names"] for ix in insp.get_indexes("streams")}
    assert indexes["ix_streams_started_at"] == ["started_at"]
    assert indexes["ix_streams_model_started_at"] == ["model", "started_at"]
    assert indexes["ix_streams_api_key_id_started_at"] == ["api_key_id", "started_at"]
    assert indexes["ix_streams_outcome_started_at"] == ["outcome", "started_at"]
    fks = insp.get_foreign_keys("stream_gaps")
    assert fks[0]["referred_table"] == "streams"
    assert fks[0]["options"].get("ondelete") == "CASCADE"
    if kind_of(str(engine.url)) == "postgresql":
        assert insp.get_pk_constraint("streams")["name"] == "pk_streams"
        assert fks[0]["name"] == "fk_stream_gaps_stream_id_streams"


def test_deleting_a_stream_deletes_its_gaps(engine: Engine) -> None:
    rec = full_record()
    _store(engine, rec)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM streams"))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM stream_gaps")).scalar() == 0
