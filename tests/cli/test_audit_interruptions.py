"""`recorder audit --interruptions`, on SQLite and PostgreSQL: exit 0, the JSON and
CSV shapes of the audit (groups, then a totals row), money and shares as exact
decimal strings, every key of --by (tags and upstreams too), the figures of the
stored rows; a retry chain stored whole costs, to the cent, what its rows say."""

from __future__ import annotations

import csv
import io
import json
import random
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recorder.billing import audit, interruptions
from recorder.core.money import ZERO
from recorder.core.record import StreamRecord
from tests.kit.billing import store
from tests.kit.cli import Cli
from tests.kit.records import random_records, rec, retry_chain_records

METRICS = list(interruptions.METRICS)


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    records = random_records(random.Random(23), 90)
    records += [
        rec(outcome="http_error", http_status=429, cost_usd=None, price_version=None),
        rec(outcome="upstream_disconnect", interrupted=True, cost_usd="0.100000000001"),
    ]
    store(db_url, tmp_path / "spool", records)
    return records


def cut_cost(records: list[StreamRecord]) -> Decimal:
    return sum((Decimal(r.cost_usd) for r in records if r.interrupted and r.cost_usd), ZERO)


def test_json_groups_then_totals(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, err = cli(
        "audit", "--interruptions", "--db", db_url, "--by", "day,model", "--format", "json"
    )
    assert code == 0, err
    *groups, total = json.loads(out)
    assert list(total) == ["day", "model", *METRICS]
    assert total["day"] == "TOTAL"
    for g in [*groups, total]:
        for name in interruptions.MONEY_METRICS:
            assert isinstance(g[name], str) and len(g[name].split(".")[1]) == 12
    assert sum(g["requests"] for g in groups) == len(stored) == total["requests"]
    # every stream cut, and the refused 429: attempts that did not complete
    cut = [r for r in stored if r.interrupted]
    assert total["interrupted_attempts"] == len(cut) + 1
    assert Decimal(total["interruption_cost_usd"]) == cut_cost(stored)
    assert sum(Decimal(g["interruption_cost_usd"]) for g in groups) == cut_cost(stored)
    spend = sum((Decimal(r.cost_usd) for r in stored if r.cost_usd), ZERO)
    assert Decimal(total["cost_usd"]) == spend
    assert total["interruption_share"] == str(audit.share(cut_cost(stored), spend))
    assert total["retries"] == 0  # none of these rows retries another


def test_csv_has_the_same_rows(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    by = ("--by", "upstream,outcome")
    _, as_json, _ = cli("audit", "--interruptions", "--db", db_url, *by, "--format", "json")
    code, as_csv, _ = cli("audit", "--interruptions", "--db", db_url, *by, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(as_csv)))
    doc = json.loads(as_json)
    assert list(rows[0]) == ["upstream", "outcome", *METRICS]
    assert len(rows) == len(doc)
    assert rows[-1]["upstream"] == "TOTAL"
    for row, group in zip(rows, doc, strict=True):
        for name in METRICS:
            assert row[name] == ("" if group[name] is None else str(group[name])), name


def test_a_narrow_table_keeps_what_answers_the_question(
    cli: Cli, db_url: str, stored: list[StreamRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    args = ("audit", "--interruptions", "--db", db_url, "--by", "model")
    code, out, _ = cli(*args, "--format", "table")
    assert code == 0
    _, as_json, _ = cli(*args, "--format", "json")
    total = json.loads(as_json)[-1]
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    total_line = next(line for line in lines if line.startswith("TOTAL")).split()
    # the attempts, their cost and their share, whatever else is left out
    assert total_line[1:] == [
        str(total["interrupted_attempts"]),
        f"{Decimal(total['interruption_cost_usd']):.6f}",
        total["interruption_share"],
    ]
    assert "left out to fit 80" in out


def test_a_tag_grouping_of_streams_without_tags(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    code, out, err = cli(
        "audit", "--interruptions", "--db", db_url, "--by", "tag:team", "--format", "json"
    )
    assert code == 0, err
    *groups, total = json.loads(out)
    assert sum(g["requests"] for g in groups) == len(stored) == total["requests"]
    assert total["tag:team"] == "TOTAL"
    # none of these streams has the tag: one group, unknown
    assert [g["tag:team"] for g in groups] == [None]


def test_parquet(cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path) -> None:
    path = tmp_path / "i.parquet"
    code, _, err = cli("audit", "--interruptions", "--db", db_url, "--by", "model", "-o", path)
    assert code == 0, err
    table = pq.read_table(path)
    assert table.column_names == ["model", *METRICS]
    assert table.schema.field("interruption_cost_usd").type == pa.decimal128(38, 12)
    assert table.schema.field("interruption_share").type == pa.decimal128(9, 6)
    rows = table.to_pylist()
    assert sum((r["interruption_cost_usd"] for r in rows), ZERO) == cut_cost(stored)


def test_prices_only_with_interruptions(cli: Cli, db_url: str, tmp_path: Path) -> None:
    code, _, err = cli("audit", "--db", db_url, "--prices", tmp_path / "p.json")
    assert code == 2 and "--interruptions" in err


def test_a_bad_price_file_is_one_line(cli: Cli, db_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{")
    code, out, err = cli("audit", "--interruptions", "--db", db_url, "--prices", bad)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_no_streams(cli: Cli, db_url: str) -> None:
    code, out, _ = cli("audit", "--interruptions", "--db", db_url, "--format", "json")
    assert code == 0 and json.loads(out) == []


def test_a_stored_chain_costs_what_its_rows_say(cli: Cli, db_url: str, tmp_path: Path) -> None:
    chain = retry_chain_records()
    store(db_url, tmp_path / "spool", chain)
    code, out, err = cli(
        "audit", "--interruptions", "--db", db_url, "--by", "none", "--format", "json"
    )
    assert code == 0, err
    group, _total = json.loads(out)
    costs = [Decimal(r.cost_usd or 0) for r in chain]
    assert Decimal(group["interruption_cost_usd"]) == costs[0] + costs[1]
    assert Decimal(group["cost_usd"]) == sum(costs, ZERO)
    assert group["retries"] == 2
    assert group["resent_input_tokens"] == sum(r.input_tokens or 0 for r in chain[1:])
