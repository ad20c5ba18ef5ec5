"""Repricing stored streams (recorder.billing.reprice, recorder.store.reprice_sql),
on SQLite and PostgreSQL: costs recomputed exactly, stored with their price
version, and the report of what changed."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from recorder.billing.reprice import Report, plan, reprice_record
from recorder.core.record import StreamRecord
from recorder.store.engine import make_engine
from recorder.store.queries import SessionFilter
from recorder.store.reprice_sql import reprice
from tests.kit.billing import check_report, rows_by_id
from tests.kit.billing import stored as stored
from tests.kit.prices import V1, V2, expected_cost, prices
from tests.kit.records import fixture_records

SINCE = datetime(2026, 4, 1, tzinfo=UTC)


def test_v1_costs_are_the_cores() -> None:
    """The test's own arithmetic agrees with recorder.core.pricing: repricing
    with the table the rows were costed with changes nothing."""
    report = Report("v1")
    assert plan(fixture_records(), prices(V1), report) == []
    assert report.total.changed == 0


def test_reprice_stores_new_costs_and_reports_exactly(
    db_url: str, stored: list[StreamRecord]
) -> None:
    engine = make_engine(db_url)
    try:
        report = reprice(engine, prices(V2), SessionFilter(since=SINCE, limit=None), chunk=3)
    finally:
        engine.dispose()
    check_report(report.as_dict(), stored, dry_run=False)
    after = rows_by_id(db_url)
    for r in stored:
        got = after[r.id or ""]
        if r.started_at and r.started_at < "2026-04":
            assert (got.cost_usd, got.price_version) == (r.cost_usd, r.price_version)
            continue
        want = (
            expected_cost(V2, r.model or "", r.input_tokens, r.output_tokens or 0)
            if r.input_tokens is not None
            else None
        )
        assert got.cost_usd == (None if want is None else f"{want:f}"), r.model
        assert got.price_version == (None if want is None else f"v2:{r.model}@2026-01-01")
        # nothing else moved
        assert (got.input_tokens, got.output_tokens, got.usage_source) == (
            r.input_tokens,
            r.output_tokens,
            r.usage_source,
        )


def test_reprice_twice_changes_nothing_the_second_time(
    db_url: str, stored: list[StreamRecord]
) -> None:
    engine = make_engine(db_url)
    try:
        reprice(engine, prices(V2), SessionFilter(since=SINCE, limit=None))
        again = reprice(engine, prices(V2), SessionFilter(since=SINCE, limit=None))
    finally:
        engine.dispose()
    assert again.total.changed == 0 and again.total.rows == 7
    assert again.total.old_cost == again.total.new_cost


def test_dry_run_stores_nothing(db_url: str, stored: list[StreamRecord]) -> None:
    before = rows_by_id(db_url)
    engine = make_engine(db_url)
    try:
        report = reprice(engine, prices(V2), SessionFilter(since=SINCE, limit=None), dry_run=True)
    finally:
        engine.dispose()
    check_report(report.as_dict(), stored, dry_run=True)
    assert rows_by_id(db_url) == before


def test_filters(db_url: str, stored: list[StreamRecord]) -> None:
    engine = make_engine(db_url)
    try:
        f = SessionFilter(
            since=SINCE, until=datetime(2026, 4, 2, 11, tzinfo=UTC), model="gpt-4o", limit=None
        )
        report = reprice(engine, prices(V2), f)
    finally:
        engine.dispose()
    assert report.total.rows == 2 and report.total.changed == 2
    after = rows_by_id(db_url)
    changed = {i for i, r in after.items() if r.price_version and r.price_version.startswith("v2")}
    assert changed == {stored[0].id, stored[1].id}


def test_reprice_record_leaves_the_record_alone() -> None:
    r = fixture_records()[0]
    before = r.to_dict()
    cost, version = reprice_record(r, prices(V2))
    assert r.to_dict() == before
    assert cost == Decimal("0.006500000000") and version == "v2:gpt-4o@2026-01-01"
