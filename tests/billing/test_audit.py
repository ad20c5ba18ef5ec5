"""The billing audit (recorder.billing.audit): group sums equal row sums for every
grouping, on random streams in memory, on SQLite and on PostgreSQL; the
figures' definitions; exact money."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))

from storedb import db_url, pg_admin, pg_template, sqlite_template

from recorder.billing import audit
from recorder.core import money
from recorder.core.protocols import ENDPOINTS
from recorder.core.record import (
    INTERRUPTED_OUTCOMES,
    OUTCOMES,
    SOURCES,
    StreamRecord,
    combine_sources,
)
from recorder.proxy.ids import new_record_id
from recorder.store.audit_sql import read_frame
from recorder.store.engine import make_engine
from recorder.store.queries import SessionFilter
from recorder.store.writer import SqlSink

__all__ = ["db_url", "pg_admin", "pg_template", "sqlite_template"]

BASE = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
KEYS = [None, "…1111:aaaaaaaaaaaa", "…2222:bbbbbbbbbbbb"]
PROJECTS = [None, "proj_a", "proj_b"]
MODELS = [None, "gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5"]


def random_records(rng: random.Random, n: int) -> list[StreamRecord]:
    """``n`` streams with every kind of value an audit meets: unknown keys,
    projects and models, every outcome and source, unknown figures, unpriced
    streams, and costs up to the column's limit (12 integer digits)."""
    out = []
    for _ in range(n):
        outcome = rng.choice(OUTCOMES)
        in_src = rng.choice(SOURCES)
        out_src = rng.choice(SOURCES)
        usage = combine_sources(in_src, out_src)

        def tokens(source: str, hi: int = 50_000) -> int | None:
            return None if source == "none" else rng.randint(0, hi)

        priced = usage != "none" and rng.random() < 0.8
        if priced:
            if rng.random() < 0.05:
                cost = f"{rng.randint(0, 10**12 - 1)}.{rng.randint(0, 10**12 - 1):012d}"
            else:
                cost = f"0.{rng.randint(0, 10**12 - 1):012d}"
        started = BASE + timedelta(milliseconds=rng.randint(0, 3 * 86_400_000))
        out.append(
            StreamRecord(
                id=new_record_id(),
                started_at=started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                endpoint=rng.choice(ENDPOINTS),
                provider="openai",
                model=rng.choice(MODELS),
                project=rng.choice(PROJECTS),
                api_key_id=rng.choice(KEYS),
                outcome=outcome,
                interrupted=outcome in INTERRUPTED_OUTCOMES,
                input_tokens=tokens(in_src),
                cache_read_tokens=tokens(in_src, 1000) if rng.random() < 0.5 else None,
                cache_write_tokens=tokens(in_src, 1000) if rng.random() < 0.3 else None,
                output_tokens=tokens(out_src),
                reasoning_tokens=tokens(out_src, 500) if rng.random() < 0.3 else None,
                input_source=in_src,
                output_source=out_src,
                usage_source=usage,
                cost_usd=cost if priced else None,
                price_version="t:m@d" if priced else None,
            )
        )
    return out


def _n(v: int | None) -> int:
    return v or 0


def _c(r: StreamRecord) -> Decimal:
    return Decimal(r.cost_usd) if r.cost_usd is not None else Decimal(0)


# Each figure of the audit, per stream, written out independently of the code.
PER_STREAM: dict[str, Callable[[StreamRecord], Any]] = {
    "requests": lambda r: 1,
    "input_tokens": lambda r: _n(r.input_tokens),
    "output_tokens": lambda r: _n(r.output_tokens),
    "cache_read_tokens": lambda r: _n(r.cache_read_tokens),
    "cache_write_tokens": lambda r: _n(r.cache_write_tokens),
    "reasoning_tokens": lambda r: _n(r.reasoning_tokens),
    "cost_usd": _c,
    "estimated_input_tokens": lambda r: _n(r.input_tokens) if r.input_source == "estimated" else 0,
    "estimated_output_tokens": lambda r: (
        _n(r.output_tokens) if r.output_source == "estimated" else 0
    ),
    "estimated_cost_usd": lambda r: _c(r) if r.usage_source in ("estimated", "mixed") else 0,
    "interrupted_requests": lambda r: int(r.interrupted),
    "interrupted_cost_usd": lambda r: _c(r) if r.interrupted else 0,
    "unpriced_requests": lambda r: int(r.price_version is None and r.usage_source != "none"),
}


def key_of(r: StreamRecord, key: str) -> str | None:
    assert r.started_at is not None
    when = datetime.fromisoformat(r.started_at.replace("Z", "+00:00"))
    if key == "day":
        return when.strftime("%Y-%m-%d")
    if key == "hour":
        return when.strftime("%Y-%m-%dT%H:00Z")
    value: str | None = getattr(r, audit.KEY_COLUMNS[key])
    return value


def brute_force(records: Sequence[StreamRecord], by: Sequence[str]) -> list[dict[str, Any]]:
    """The audit computed the slow, obvious way."""
    groups: dict[tuple[str | None, ...], dict[str, Any]] = {}
    for r in records:
        k = tuple(key_of(r, key) for key in by)
        g = groups.setdefault(k, {**dict(zip(by, k, strict=True)), **dict.fromkeys(PER_STREAM, 0)})
        for name, f in PER_STREAM.items():
            g[name] += f(r)
    return sorted(
        groups.values(),
        key=lambda g: tuple((g[k] is None, g[k] or "") for k in by),
    )


def row_sums(records: Sequence[StreamRecord]) -> dict[str, Any]:
    return {name: sum((f(r) for r in records), 0) for name, f in PER_STREAM.items()}


def check_every_grouping(
    groups_for: Callable[[tuple[str, ...]], list[dict[str, Any]]], records: Sequence[StreamRecord]
) -> int:
    """For every --by: the sums over groups equal the sums over streams, and the
    groups are those of the brute-force computation. Returns how many were checked."""
    expected_sums = row_sums(records)
    checked = 0
    for by in audit.key_combinations():
        groups = groups_for(by)
        for name in audit.METRICS:
            total = sum((g[name] for g in groups), 0)
            assert total == expected_sums[name], (by, name)
        assert groups == brute_force(records, by), by
        for g in groups:
            assert list(g) == [*by, *audit.METRICS]
            for name in audit.MONEY_METRICS:
                assert isinstance(g[name], Decimal)
        checked += 1
    return checked


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_group_sums_equal_row_sums_for_every_grouping(seed: int) -> None:
    records = random_records(random.Random(seed), 300)
    df = audit.frame(r.to_dict() for r in records)
    assert check_every_grouping(lambda by: audit.aggregate(df, by), records) == 2 ** len(
        audit.GROUP_KEYS
    )


def test_key_order_changes_only_the_order() -> None:
    records = random_records(random.Random(7), 200)
    df = audit.frame(r.to_dict() for r in records)
    one = audit.aggregate(df, ("model", "day"))
    two = audit.aggregate(df, ("day", "model"))
    assert len(one) == len(two)
    assert {frozenset(g.items()) for g in one} == {frozenset(g.items()) for g in two}


def store(url: str, spool: Path, records: Sequence[StreamRecord]) -> None:
    sink = SqlSink(url, spool)
    for r in records:
        sink.submit(r)
    sink.close()


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
    assert checked == 128


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


def rec(**kw: Any) -> StreamRecord:
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at="2026-05-05T10:30:00.000Z",
        endpoint="chat.completions",
        model="gpt-4o",
        outcome="completed",
        interrupted=False,
        input_tokens=100,
        output_tokens=10,
        input_source="reported",
        output_source="reported",
        usage_source="reported",
        cost_usd="0.000350000000",
        price_version="t:gpt-4o@d",
    )
    values.update(kw)
    return StreamRecord(**values)


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
        rec(  # an http_error: nothing known, not unpriced
            outcome="http_error",
            input_tokens=None,
            output_tokens=None,
            input_source="none",
            output_source="none",
            usage_source="none",
            cost_usd=None,
            price_version=None,
        ),
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
    ],
)
def test_parse_by(text: str | None, want: tuple[str, ...]) -> None:
    assert audit.parse_by(text) == want


@pytest.mark.parametrize("text", ["week", "model,model", "key,api_key_id"])
def test_parse_by_refuses(text: str) -> None:
    with pytest.raises(audit.AuditError):
        audit.parse_by(text)
