"""Repricing stored streams (recorder.billing.reprice, recorder.store.reprice_sql),
on SQLite and PostgreSQL: costs recomputed exactly, stored with their price
version, and the report of what changed."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storedb import db_url, pg_admin, pg_template, sqlite_template

from recorder.billing.reprice import Report, plan, reprice_record
from recorder.core.price_files import load_prices, shipped_prices
from recorder.core.pricing import PriceTable
from recorder.core.record import StreamRecord
from recorder.proxy.ids import new_record_id
from recorder.store.engine import make_engine
from recorder.store.queries import SessionFilter, list_sessions
from recorder.store.reprice_sql import reprice
from recorder.store.writer import SqlSink

__all__ = ["db_url", "pg_admin", "pg_template", "sqlite_template"]

Q = Decimal("0.000000000001")


def table(version: str, models: dict[str, tuple[str, str]]) -> dict[str, Any]:
    return {
        "format": "recorder-prices/1",
        "version": version,
        "models": {
            name: {"input": i, "output": o, "as_of": "2026-01-01"}
            for name, (i, o) in models.items()
        },
    }


V1 = table(
    "v1",
    {
        "gpt-4o": ("0.0000025", "0.00001"),
        "claude-x": ("0.000003", "0.000015"),
        "legacy-model": ("0.00003", "0.00006"),
    },
)
V2 = table(
    "v2",
    {
        "gpt-4o": ("0.0000025", "0.00002"),  # output doubled
        "claude-x": ("0.000003", "0.000015"),  # unchanged rates
        "gpt-4o-mini": ("0.00000015", "0.0000006"),  # newly priced
        # legacy-model: gone, so now unpriced
    },
)


def prices(doc: dict[str, Any]) -> PriceTable:
    return load_prices(json.dumps(doc))


def expected_cost(doc: dict[str, Any], model: str, inp: int, out: int) -> Decimal | None:
    """The cost the slow, obvious way: tokens times the table's rates."""
    rates = doc["models"].get(model)
    if rates is None:
        return None
    return (inp * Decimal(rates["input"]) + out * Decimal(rates["output"])).quantize(Q)


def record(
    model: str | None, inp: int | None, out: int | None, started: str, **kw: Any
) -> StreamRecord:
    known = inp is not None or out is not None
    cost = expected_cost(V1, model or "", inp or 0, out or 0) if known else None
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at=started,
        endpoint="chat.completions",
        provider="openai",
        model=model,
        outcome="completed",
        interrupted=False,
        input_tokens=inp,
        output_tokens=out,
        input_source="reported" if inp is not None else "none",
        output_source="reported" if out is not None else "none",
        usage_source="reported" if known else "none",
        cost_usd=None if cost is None else f"{cost:f}",
        price_version=None if cost is None else f"v1:{model}@2026-01-01",
        unpriced_reason=f"no price for model {model!r}" if known and cost is None else None,
    )
    values.update(kw)
    return StreamRecord(**values)


def fixture_records() -> list[StreamRecord]:
    return [
        record("gpt-4o", 1000, 200, "2026-04-01T10:00:00.000Z"),
        record("gpt-4o", 12345, 6789, "2026-04-02T10:00:00.000Z"),
        record(  # an estimated (cut) stream is repriced all the same
            "gpt-4o",
            800,
            33,
            "2026-04-02T11:00:00.000Z",
            outcome="upstream_disconnect",
            interrupted=True,
            output_source="estimated",
            usage_source="mixed",
        ),
        record("claude-x", 5000, 700, "2026-04-02T12:00:00.000Z"),
        record("gpt-4o-mini", 3000, 100, "2026-04-03T12:00:00.000Z"),  # unpriced in v1
        record("legacy-model", 10, 20, "2026-04-03T13:00:00.000Z"),
        record(  # an http_error: no usage, never priced
            "gpt-4o",
            None,
            None,
            "2026-04-03T14:00:00.000Z",
            outcome="http_error",
            http_status=429,
        ),
        record("gpt-4o", 999, 999, "2026-03-01T00:00:00.000Z"),  # before --since
    ]


SINCE = datetime(2026, 4, 1, tzinfo=UTC)


def test_v1_costs_are_the_cores() -> None:
    """The test's own arithmetic agrees with recorder.core.pricing: repricing
    with the table the rows were costed with changes nothing."""
    report = Report("v1")
    assert plan(fixture_records(), prices(V1), report) == []
    assert report.total.changed == 0


def check_report(doc: dict[str, Any], records: list[StreamRecord], dry_run: bool) -> None:
    in_range = [r for r in records if r.started_at and r.started_at >= "2026-04"]
    assert doc["rows"] == len(in_range) == 7
    assert doc["dry_run"] is dry_run
    # alone, or (--prices) overlaid on the shipped table, whose other models keep their prices
    assert doc["prices"] in ("v2", f"{shipped_prices().version}+v2")
    # every priced row changes version; gpt-4o-mini is newly priced; the
    # http_error stays unpriced and unchanged
    assert doc["changed"] == 6
    assert doc["newly_priced"] == 1 and doc["now_unpriced"] == 1
    old = {m: Decimal(0) for m in ("gpt-4o", "claude-x", "gpt-4o-mini", "legacy-model")}
    new = dict(old)
    for r in in_range:
        if r.input_tokens is None:
            continue
        assert r.model is not None
        old[r.model] += expected_cost(V1, r.model, r.input_tokens, r.output_tokens or 0) or 0
        new[r.model] += expected_cost(V2, r.model, r.input_tokens, r.output_tokens or 0) or 0
    models = {m["model"]: m for m in doc["models"]}
    for m in old:
        assert models[m]["old_cost_usd"] == f"{old[m].quantize(Q):f}", m
        assert models[m]["new_cost_usd"] == f"{new[m].quantize(Q):f}", m
        assert Decimal(models[m]["difference_usd"]) == new[m] - old[m]
    # output doubled: the difference is exactly the old output cost
    gpt_out = sum(r.output_tokens or 0 for r in in_range if r.model == "gpt-4o")
    assert Decimal(models["gpt-4o"]["difference_usd"]) == gpt_out * Decimal("0.00001")
    assert models["claude-x"]["difference_usd"] == "0.000000000000"
    assert models["gpt-4o"]["rows"] == 4 and models["gpt-4o"]["changed"] == 3
    assert Decimal(doc["old_cost_usd"]) == sum(old.values())
    assert Decimal(doc["new_cost_usd"]) == sum(new.values())
    versions = {(v["old"], v["new"]): (v["rows"], v["changed"]) for v in doc["price_versions"]}
    assert versions == {
        ("v1:gpt-4o@2026-01-01", "v2:gpt-4o@2026-01-01"): (3, 3),
        ("v1:claude-x@2026-01-01", "v2:claude-x@2026-01-01"): (1, 1),
        (None, "v2:gpt-4o-mini@2026-01-01"): (1, 1),
        ("v1:legacy-model@2026-01-01", None): (1, 1),
        (None, None): (1, 0),
    }


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    records = fixture_records()
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in records:
        sink.submit(r)
    sink.close()
    return records


def rows_by_id(url: str) -> dict[str, StreamRecord]:
    engine = make_engine(url)
    try:
        return {r.id or "": r for r in list_sessions(engine, SessionFilter(limit=None))}
    finally:
        engine.dispose()


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
