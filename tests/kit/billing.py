"""The billing tests' oracles: the audit computed the slow,
obvious way (``check_every_grouping``), the repricing report checked against
hand arithmetic (``check_report``) and the ``stored`` fixture it runs on;
``store`` writes records through the real sink."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from recorder.billing import audit
from recorder.core.price_files import shipped_prices
from recorder.core.record import StreamRecord
from recorder.store.engine import make_engine
from recorder.store.queries import SessionFilter, list_sessions
from recorder.store.writer import SqlSink
from tests.kit.prices import V1, V2, Q, expected_cost
from tests.kit.records import fixture_records


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


def rows_by_id(url: str) -> dict[str, StreamRecord]:
    engine = make_engine(url)
    try:
        return {r.id or "": r for r in list_sessions(engine, SessionFilter(limit=None))}
    finally:
        engine.dispose()


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


def groupings(most: int = 3) -> list[tuple[str, ...]]:
    """Every ``--by`` of at most ``most`` keys, and the one of all keys: every key,
    pair and triple of keys meets there, and the audit's sums over a grouping do not
    depend on how many keys it has (all 2**11 groupings took 40 s a seed)."""
    every = list(audit.key_combinations())
    return [by for by in every if len(by) <= most or len(by) == len(audit.GROUP_KEYS)]


def check_every_grouping(
    groups_for: Callable[[tuple[str, ...]], list[dict[str, Any]]], records: Sequence[StreamRecord]
) -> int:
    """For every --by of :func:`groupings`: the sums over groups equal the sums over
    streams, and the groups are those of the brute-force computation. Returns how
    many were checked."""
    expected_sums = row_sums(records)
    checked = 0
    for by in groupings():
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


def store(url: str, spool: Path, records: Sequence[StreamRecord]) -> None:
    sink = SqlSink(url, spool)
    for r in records:
        sink.submit(r)
    sink.close()


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    """The repricing tests' streams (``fixture_records``), stored in ``db_url``."""
    records = fixture_records()
    store(db_url, tmp_path / "spool", records)
    return records
