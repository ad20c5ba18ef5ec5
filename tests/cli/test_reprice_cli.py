"""`recorder reprice`, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recorder.core.record import StreamRecord
from tests.kit.billing import check_report, rows_by_id
from tests.kit.billing import stored as stored
from tests.kit.cli import Cli, parse
from tests.kit.prices import V2


@pytest.fixture
def v2_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices-v2.json"
    path.write_text(json.dumps(V2))
    return path


def test_json(cli: Cli, db_url: str, stored: list[StreamRecord], v2_file: Path) -> None:
    argv = ("--db", db_url, "--since", "2026-04-01", "--prices", str(v2_file), "--format", "json")
    code, out, _ = cli("reprice", *argv)
    assert code == 0
    doc = json.loads(out)
    check_report(doc, stored, dry_run=False)
    assert doc["since"] == "2026-04-01T00:00:00Z" and doc["until"] is None
    assert rows_by_id(db_url)[stored[0].id or ""].price_version == "v2:gpt-4o@2026-01-01"


def test_dry_run_table(cli: Cli, db_url: str, stored: list[StreamRecord], v2_file: Path) -> None:
    before = rows_by_id(db_url)
    argv = ("--db", db_url, "--since", "2026-04-01", "--prices", str(v2_file), "--dry-run")
    code, out, err = cli("reprice", *argv, "--format", "table")
    assert code == 0 and "dry run" in err
    assert rows_by_id(db_url) == before
    lines = out.splitlines()
    assert any(line.split()[:2] == ["changed", "6"] for line in lines)
    gpt = next(line for line in lines if line.startswith("gpt-4o "))
    assert gpt.split()[1:3] == ["4", "3"]  # rows, changed
    assert any(line.startswith("v1:legacy-model@2026-01-01") for line in lines)


def test_shipped_table_by_default(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("reprice", "--db", db_url, "--since", "2026-04-01", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["prices"] != "v2"
    gpt = next(m for m in doc["models"] if m["model"] == "gpt-4o")
    assert gpt["changed"] == 3  # priced by the shipped table now


def test_since_is_required() -> None:
    with pytest.raises(SystemExit) as e:
        parse("reprice", "--db", "sqlite:///x.db")
    assert e.value.code == 2


def test_bad_price_table(cli: Cli, db_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "recorder-prices/1", "models": {"m": {"input": "x"}}}')
    code, _, err = cli("reprice", "--db", db_url, "--since", "7d", "--prices", str(bad))
    assert code == 2 and "bad.json" in err


def test_bad_time(cli: Cli, db_url: str) -> None:
    code, _, err = cli("reprice", "--db", db_url, "--since", "yesterday-ish")
    assert code == 2 and "not a time" in err


def test_a_small_prices_file_is_an_overlay_and_wipes_no_other_cost(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    """A two-model --prices file changes those two models; a model of the shipped
    table it does not name keeps its cost (it used to be wiped to null)."""
    from recorder.core.billing import apply_prices
    from recorder.core.price_files import shipped_prices
    from recorder.store.writer import SqlSink
    from tests.kit.records import priced_record as record

    shipped = record("gpt-5", 1000, 100, "2026-04-05T00:00:00.000Z", cost_usd=None)
    apply_prices(shipped, shipped_prices())
    assert shipped.cost_usd is not None
    mine = record("gpt-4o", 1000, 100, "2026-04-05T00:00:01.000Z")
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in (shipped, mine):
        sink.submit(r)
    sink.close()
    two = tmp_path / "two.json"
    two.write_text(
        json.dumps(V2 | {"models": {k: V2["models"][k] for k in ("gpt-4o", "claude-x")}})
    )
    code, out, _ = cli(
        "reprice", "--db", db_url, "--since", "2026-04-05", "--prices", str(two), "--format", "json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["now_unpriced"] == 0 and doc["rows"] == 2
    rows = rows_by_id(db_url)
    kept = rows[shipped.id or ""]
    assert kept.cost_usd == shipped.cost_usd and kept.price_version == shipped.price_version
    assert kept.price_version is not None and kept.price_version.startswith(
        shipped_prices().version + ":"
    )
    assert rows[mine.id or ""].price_version == "v2:gpt-4o@2026-01-01"
