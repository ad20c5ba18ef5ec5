"""The billing audit (recorder.billing.audit): group sums equal row sums for every
grouping, on random streams in memory, on SQLite and on PostgreSQL; the
figures' definitions; exact money."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from recorder.billing import audit
from recorder.core import money
from recorder.core.record import (
    StreamRecord,
)
from recorder.store.audit_sql import read_frame
from recorder.store.engine import make_engine
from recorder.store.queries import SessionFilter
from tests.kit.billing import (
    check_every_grouping,
    groupings,
    store,
)
from tests.kit.records import BASE, KEYS, REFUSED, random_records, rec


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_group_sums_equal_row_sums_for_every_grouping(seed: int) -> None:
    records = random_records(random.Random(seed), 300)
    df = audit.frame(r.to_dict() for r in records)
    assert check_every_grouping(lambda by: audit.aggregate(df, by), records) == len(groupings())


def test_key_order_changes_only_the_order() -> None:
    records = random_records(random.Random(7), 200)
    df = audit.frame(r.to_dict() for r in records)
    one = audit.aggregate(df, ("model", "day"))
    two = audit.aggregate(df, ("day", "model"))
    assert len(one) == len(two)
    assert {frozenset(g.items()) for g in one} == {frozenset(g.items()) for g in two}


def test_group_sums_equal_row_sums_from_the_database(db_url: str, tmp_path: Path) -> None:
    records = random_records(random.Random(42), 250)
    store(db_url, tmp_path / "spool", records)
    engine = make_engine(db_url)
    try:
        df = read_frame(engine, SessionFilter(limit=None))
    finally:
        engine.dispose()
    assert len(df) == len(records)
    checked = check_every_grouping(lambda by: audit.aggregate(df, by), records)
    assert checked == len(groupings())


def test_filters_from_the_database(db_url: str, tmp_path: Path) -> None:
    records = random_records(random.Random(5), 120)
    store(db_url, tmp_path / "spool", records)
    engine = make_engine(db_url)
    try:
        since = BASE + timedelta(days=1)
        f = SessionFilter(since=since, model="gpt-4o*", outcomes=["completed", "error"], limit=None)
        df = read_frame(engine, f, project="proj_a")
        by_key = read_frame(engine, SessionFilter(key="…1111", limit=None))
    finally:
        engine.dispose()

    def started(r: StreamRecord) -> datetime:
        assert r.started_at
        return datetime.fromisoformat(r.started_at.replace("Z", "+00:00"))

    want = [
        r
        for r in records
        if started(r) >= since
        and (r.model or "").startswith("gpt-4o")
        and r.outcome in ("completed", "error")
        and r.project == "proj_a"
    ]
    assert sorted(df["id"]) == sorted(r.id for r in want)
    assert sorted(by_key["id"]) == sorted(r.id for r in records if r.api_key_id == KEYS[1])


def test_definitions() -> None:
    records = [
        rec(),  # reported: not estimated
        rec(  # a cut stream: input reported, output estimated (mixed)
            outcome="upstream_disconnect",
            interrupted=True,
            output_source="estimated",
            usage_source="mixed",
            output_tokens=7,
            cost_usd="0.000320000000",
        ),
        rec(  # include_usage off: both estimated
            input_source="estimated",
            output_source="estimated",
            usage_source="estimated",
            input_tokens=90,
            output_tokens=12,
            cost_usd="0.000345000000",
        ),
        rec(**REFUSED),  # an http_error: nothing known, not unpriced
        rec(model="no-such-model", cost_usd=None, price_version=None),  # unpriced
    ]
    (g,) = audit.aggregate(audit.frame(r.to_dict() for r in records), ())
    assert g["requests"] == 5
    assert g["input_tokens"] == 100 + 100 + 90 + 100
    assert g["output_tokens"] == 10 + 7 + 12 + 10
    assert g["estimated_input_tokens"] == 90
    assert g["estimated_output_tokens"] == 7 + 12
    assert g["cost_usd"] == Decimal("0.001015")
    # as llm_cost_usd_total{source="estimated"}: every cost not wholly reported
    assert g["estimated_cost_usd"] == Decimal("0.000665")
    assert g["interrupted_requests"] == 1
    assert g["interrupted_cost_usd"] == Decimal("0.000320")
    assert g["unpriced_requests"] == 1


def test_money_is_exact_beyond_a_float_and_beyond_28_digits() -> None:
    records = [
        rec(cost_usd="999999999999.999999999999"),
        rec(cost_usd="999999999999.999999999999"),
        rec(cost_usd="0.000000000001"),
        rec(cost_usd="0.100000000000"),
        rec(cost_usd="0.200000000000"),
    ]
    (g,) = audit.aggregate(audit.frame(r.to_dict() for r in records), ())
    assert g["cost_usd"] == Decimal("2000000000000.299999999999")
    (doc,) = audit.as_document([g])
    assert doc["cost_usd"] == "2000000000000.299999999999"
    assert money.exact(Decimal(0)) == "0.000000000000"


def test_day_and_hour_are_utc_and_unknown_keys_sort_last() -> None:
    records = [
        rec(started_at="2026-05-05T23:59:59.999Z", api_key_id=None),
        rec(started_at="2026-05-06T00:00:00.000Z", api_key_id="…9999:ffffffffffff"),
        rec(started_at="2026-05-06T01:30:00+02:00", api_key_id="…1111:aaaaaaaaaaaa"),
    ]
    df = audit.frame(r.to_dict() for r in records)
    days = audit.aggregate(df, ("day",))
    assert [(g["day"], g["requests"]) for g in days] == [("2026-05-05", 2), ("2026-05-06", 1)]
    hours = audit.aggregate(df, ("hour",))
    assert [(g["hour"], g["requests"]) for g in hours] == [
        ("2026-05-05T23:00Z", 2),
        ("2026-05-06T00:00Z", 1),
    ]
    keys = audit.aggregate(df, ("key",))
    assert [g["key"] for g in keys] == ["…1111:aaaaaaaaaaaa", "…9999:ffffffffffff", None]


def test_no_streams_no_groups() -> None:
    assert audit.aggregate(audit.frame([]), ("model",)) == []
    assert audit.aggregate(audit.frame([]), ()) == []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (None, ("day", "model")),
        ("none", ()),
        ("", ()),
        ("key", ("key",)),
        (" Model , day ", ("model", "day")),
        ("hour,project,outcome,endpoint", ("hour", "project", "outcome", "endpoint")),
        ("upstream,TAG:Team,day", ("upstream", "tag:Team", "day")),
    ],
)
def test_parse_by(text: str | None, want: tuple[str, ...]) -> None:
    assert audit.parse_by(text) == want


@pytest.mark.parametrize("text", ["week", "model,model", "key,api_key_id", "tag:", "tag:a,tag:a"])
def test_parse_by_refuses(text: str) -> None:
    with pytest.raises(audit.AuditError):
        audit.parse_by(text)


def test_a_tag_groups_by_its_value_whatever_form_the_row_gives_it() -> None:
    """Tags as a mapping (a record) or as JSON text (a row of some drivers); a
    stream without the tag is unknown, and sorts last."""
    rows = [
        {**rec().to_dict(), "tags": {"team": "search"}},
        {**rec().to_dict(), "tags": '{"team": "ads", "feature": "x"}'},
        {**rec().to_dict(), "tags": {"feature": "x"}},
        rec().to_dict(),
        {**rec().to_dict(), "tags": "not json"},
    ]
    groups = audit.aggregate(audit.frame(rows), ("tag:team",))
    assert [(g["tag:team"], g["requests"]) for g in groups] == [
        ("ads", 1),
        ("search", 1),
        (None, 3),
    ]
    assert sum(g["cost_usd"] for g in groups) == 5 * Decimal(rec().cost_usd or 0)


def test_a_column_named_twice_is_read_once() -> None:
    rows = [{**rec().to_dict(), "tags": {"team": "a"}}]
    df = audit.frame(rows, (*audit.COLUMNS, "tags", "tags"))
    assert list(df.columns).count("tags") == 1
    assert audit.aggregate(df, ("tag:team",))[0]["tag:team"] == "a"
