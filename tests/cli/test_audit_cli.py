"""`recorder audit`, on SQLite and PostgreSQL: the JSON shape of docs/record.md,
CSV, the table's totals line, Parquet (exact decimals), filters, errors."""

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

from recorder.billing import audit as audit_lib
from recorder.cli import audit
from recorder.core.record import StreamRecord
from tests.kit.billing import PER_STREAM, row_sums, store
from tests.kit.cli import Cli
from tests.kit.hostile import HOSTILE_MODEL, assert_inert
from tests.kit.records import random_records, rec


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    records = random_records(random.Random(11), 80)
    store(db_url, tmp_path / "spool", records)
    return records


def test_json_shape(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("audit", "--db", db_url, "--by", "key,day", "--format", "json")
    assert code == 0
    doc = json.loads(out, parse_float=Decimal)
    assert isinstance(doc, list) and doc
    *groups, totals = doc
    assert (totals["key"], totals["day"]) == ("TOTAL", None)
    for g in doc:
        assert list(g) == ["key", "day", *audit_lib.METRICS]
        for name in audit_lib.MONEY_METRICS:
            if g[name] is None:  # a cost unknown: every stream of the group unpriced
                assert name == "cost_usd" and g["unpriced_requests"] > 0
                continue
            assert isinstance(g[name], str)  # money is a decimal string, never a float
            assert len(g[name].split(".")[1]) == 12
    sums = row_sums(stored)
    for name in PER_STREAM:
        total = sum((Decimal(g[name] or 0) for g in groups), Decimal(0))
        assert total == sums[name] == Decimal(totals[name]), name


def test_default_grouping_is_day_and_model(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    code, out, _ = cli("audit", "--db", db_url, "--format", "json")
    assert code == 0
    assert list(json.loads(out)[0])[:2] == ["day", "model"]


def test_csv(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("audit", "--db", db_url, "--by", "outcome", "--format", "csv")
    assert code == 0
    *rows, totals = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["outcome", *audit_lib.METRICS]
    assert totals["outcome"] == "TOTAL"
    assert sum(int(r["requests"]) for r in rows) == len(stored) == int(totals["requests"])
    cost = sum(Decimal(r["cost_usd"] or 0) for r in rows)
    assert cost == row_sums(stored)["cost_usd"] == Decimal(totals["cost_usd"])


def test_table_has_a_totals_line(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("audit", "--db", db_url, "--by", "endpoint", "--format", "table")
    assert code == 0
    lines = out.splitlines()
    # the same column names as CSV and JSON
    assert lines[0].split() == ["endpoint", *audit_lib.METRICS]
    assert lines[-1].startswith("TOTAL")
    assert int(lines[-1].split()[1]) == len(stored)


def test_table_without_grouping(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("audit", "--db", db_url, "--by", "none", "--format", "table")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith("all") and lines[2].startswith("TOTAL")


def test_parquet_is_exact(
    cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path
) -> None:
    path = tmp_path / "audit.parquet"
    code, out, _ = cli("audit", "--db", db_url, "--by", "model,hour", "-o", str(path))
    assert code == 0 and out == ""  # the suffix chose parquet; nothing on stdout
    table = pq.read_table(path)
    assert table.column_names == ["model", "hour", *audit_lib.METRICS]
    assert table.schema.field("cost_usd").type == pa.decimal128(38, 12)
    assert table.schema.field("requests").type == pa.int64()
    rows = table.to_pylist()
    assert sum(r["requests"] for r in rows) == len(stored)
    assert sum((r["cost_usd"] for r in rows), Decimal(0)) == row_sums(stored)["cost_usd"]


def test_parquet_needs_an_output_file(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, err = cli("audit", "--db", db_url, "--format", "parquet")
    assert code == 2 and out == "" and "--output" in err


def test_output_file_json(
    cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path
) -> None:
    path = tmp_path / "audit.json"
    code, out, _ = cli("audit", "--db", db_url, "--by", "project", "--output", str(path))
    assert code == 0 and out == ""
    *doc, totals = json.loads(path.read_text())
    assert sum(g["requests"] for g in doc) == len(stored) == totals["requests"]


def test_filters(cli: Cli, db_url: str, tmp_path: Path) -> None:
    records = [
        rec(started_at="2026-05-05T10:00:00.000Z", model="gpt-4o", project="p1"),
        rec(started_at="2026-05-06T10:00:00.000Z", model="gpt-4o-mini", project="p1"),
        rec(
            started_at="2026-05-06T11:00:00.000Z",
            model="gpt-4o",
            outcome="error",
            interrupted=True,
            api_key_id="…4242:0123456789ab",
            endpoint="messages",
        ),
    ]
    store(db_url, tmp_path / "spool", records)

    def requests(*extra: str) -> int:
        code, out, err = cli("audit", "--db", db_url, "--by", "none", "--format", "json", *extra)
        assert code == 0, err
        doc = json.loads(out)
        return int(doc[0]["requests"]) if doc else 0

    assert requests() == 3
    assert requests("--since", "2026-05-06") == 2
    assert requests("--until", "2026-05-06") == 1
    assert requests("--model", "gpt-4o") == 2
    assert requests("--model", "gpt-4o*") == 3
    assert requests("--outcome", "error") == 1
    assert requests("--endpoint", "messages") == 1
    assert requests("--key", "4242") == 1
    assert requests("--project", "p1") == 2
    assert requests("--project", "nope") == 0


def test_bad_by_is_a_usage_error(cli: Cli, db_url: str) -> None:
    code, _, err = cli("audit", "--db", db_url, "--by", "week")
    assert code == 2 and "week" in err


def test_missing_database(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    code, _, err = cli("audit", "--db", f"sqlite:///{path}")
    assert code == 1 and "no database" in err
    assert not path.exists()


def test_empty_store(cli: Cli, db_url: str) -> None:
    code, out, _ = cli("audit", "--db", db_url, "--format", "json")
    assert code == 0 and json.loads(out) == []
    code, _, err = cli("audit", "--db", db_url, "--format", "table")
    assert code == 0 and "no streams" in err


def test_registered_in_main() -> None:
    from recorder.cli.main import build_parser

    args = build_parser().parse_args(["audit", "--by", "model"])
    assert args.func is audit.run


def test_every_format_has_the_same_columns_and_totals(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    by = ("--by", "model,project")
    _, as_json, _ = cli("audit", "--db", db_url, *by, "--format", "json")
    _, as_csv, _ = cli("audit", "--db", db_url, *by, "--format", "csv")
    _, as_table, _ = cli("audit", "--db", db_url, *by, "--format", "table")
    doc = json.loads(as_json)
    rows = list(csv.reader(io.StringIO(as_csv)))
    lines = as_table.splitlines()
    assert list(doc[0]) == rows[0] == lines[0].split()
    assert len(doc) == len(rows) - 1 == len(lines) - 1  # every group, then the totals
    assert doc[-1]["model"] == rows[-1][0] == lines[-1].split()[0] == "TOTAL"
    assert [str(doc[-1][m]) for m in ("requests", "input_tokens")] == rows[-1][2:4]


def test_an_unpriced_model_shows_no_cost_rather_than_zero(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    store(
        db_url,
        tmp_path / "spool",
        [
            rec(model="gpt-4o"),
            rec(model="gpt-9-preview", cost_usd=None, price_version=None),
        ],
    )
    _, out, _ = cli("audit", "--db", db_url, "--by", "model", "--format", "json")
    groups = {g["model"]: g for g in json.loads(out)}
    assert groups["gpt-9-preview"]["cost_usd"] is None
    assert groups["gpt-9-preview"]["unpriced_requests"] == 1
    assert groups["gpt-4o"]["cost_usd"] == groups["TOTAL"]["cost_usd"] == "0.000350000000"
    _, out, _ = cli("audit", "--db", db_url, "--by", "model", "--format", "csv")
    unpriced = next(r for r in csv.DictReader(io.StringIO(out)) if r["model"] == "gpt-9-preview")
    assert unpriced["cost_usd"] == ""
    _, out, _ = cli("audit", "--db", db_url, "--by", "model", "--format", "table")
    header, *lines = out.splitlines()
    line = next(x for x in lines if x.startswith("gpt-9-preview"))
    cost = line.split()[header.split().index("cost_usd")]
    assert cost == "-"  # not 0.000000 (its estimated and interrupted costs are 0: none)


def test_a_hostile_model_name_is_escaped_in_the_table_and_exact_in_json(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, db_url: str, tmp_path: Path
) -> None:
    """Issue 34 §4: a group named by a client's model prints escaped in the table
    (piped: every column whole), exact in JSON and CSV."""
    monkeypatch.delenv("COLUMNS", raising=False)
    store(db_url, tmp_path / "spool", [rec(model=HOSTILE_MODEL), rec()])
    code, out, _ = cli("audit", "--db", db_url, "--by", "model", "--format", "table")
    assert code == 0
    assert_inert(out)
    assert len(out.splitlines()) == 4  # header, two models, totals: no forged line
    code, out, _ = cli("audit", "--db", db_url, "--by", "model", "--format", "json")
    assert code == 0 and "\x1b" not in out
    assert HOSTILE_MODEL in {g["model"] for g in json.loads(out)}
    code, out, _ = cli("audit", "--db", db_url, "--by", "model", "--format", "csv")
    assert HOSTILE_MODEL in {r["model"] for r in csv.DictReader(io.StringIO(out, newline=""))}
