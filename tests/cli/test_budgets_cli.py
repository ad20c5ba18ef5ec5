"""`recorder audit --budgets FILE` on SQLite and PostgreSQL (where each budget
stands this month or a month gone by; exit 1 when one is over, saying which on
standard error), and `recorder budgets check` / `rules` (one-line errors, the
rule file on standard output, a line for each budget no metric can see)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from recorder.billing.budgets import month_bounds
from tests.kit.billing import store
from tests.kit.cli import Cli
from tests.kit.records import rec

BUDGETS = """\
budgets:
  - name: project one
    project: p1
    monthly_usd: 10
  - name: key 1111
    key: "…1111"
    monthly_usd: "2.5"
  - name: everything
    all: true
    monthly_usd: 1000
"""


def stamp(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def budgets_file(tmp_path: Path) -> Path:
    path = tmp_path / "budgets.yml"
    path.write_text(BUDGETS)
    return path


def last_month(now: datetime) -> tuple[str, datetime]:
    start, _ = month_bounds(None, now)
    before = start - timedelta(days=1)
    return f"{before:%Y-%m}", before


def test_a_month_gone_by_over_its_budget_exits_1(
    cli: Cli, db_url: str, tmp_path: Path, budgets_file: Path
) -> None:
    month, when = last_month(datetime.now(UTC))
    store(
        db_url,
        tmp_path / "spool",
        [
            rec(started_at=stamp(when), project="p1", cost_usd="6.000000000001"),
            rec(started_at=stamp(when), project="p1", cost_usd="4"),
            rec(started_at=stamp(when), api_key_id="…1111:aaaaaaaaaaaa", cost_usd="2.5"),
            rec(started_at=stamp(when + timedelta(days=2)), project="p1", cost_usd="99"),
        ],
    )
    args = ("audit", "--db", db_url, "--budgets", budgets_file, "--month", month)
    code, out, err = cli(*args, "--format", "json")
    assert code == 1
    doc = {row["name"]: row for row in json.loads(out)}
    assert list(doc) == ["project one", "key 1111", "everything"]
    one = doc["project one"]
    assert one["month"] == month and one["selector"] == "project p1"
    assert one["spent_usd"] == "10.000000000001" == one["forecast_usd"]  # the month is over
    assert (one["status"], one["share"]) == ("over", "1.000000")
    assert doc["key 1111"]["status"] == "ok"  # 2.5 of 2.5 is not over
    assert doc["everything"]["spent_usd"] == "12.500000000001"
    assert err.strip().splitlines() == [
        f"recorder audit: budget 'project one' is over: 10.000000000001 of 10.000000 USD spent"
        f" in {month}"
    ]
    code, out, _ = cli(*args, "--format", "csv")
    assert code == 1
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["status"] for r in rows] == ["over", "ok", "ok"]
    assert list(rows[0])[:4] == ["month", "name", "selector", "budget_usd"]


def test_this_month_forecast_at_the_last_days_rate(
    cli: Cli, db_url: str, tmp_path: Path, budgets_file: Path
) -> None:
    now = datetime.now(UTC)
    start, _ = month_bounds(None, now)
    # halfway between the month's start and now: in the month, and before now
    when = start + (now - start) / 2
    store(db_url, tmp_path / "spool", [rec(started_at=stamp(when), project="p1", cost_usd="1")])
    code, out, err = cli("audit", "--db", db_url, "--budgets", budgets_file, "--format", "json")
    assert code == 0, err
    one = json.loads(out)[0]
    assert one["spent_usd"] == "1.000000000000" and one["requests"] == 1
    assert one["month"] == f"{now:%Y-%m}"
    # the forecast adds the rest of the month at the last 24 hours' rate
    forecast, last_day = Decimal(one["forecast_usd"]), Decimal(one["last_24h_usd"])
    assert last_day in (0, 1)
    assert forecast >= 1 and (forecast > 1) == (last_day > 0)
    assert one["status"] in ("ok", "forecast over")


def test_the_table_keeps_names_spend_and_status(
    cli: Cli, db_url: str, budgets_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = cli("audit", "--db", db_url, "--budgets", budgets_file, "--format", "table")
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert lines[1].split()[:2] == ["project", "one"] and lines[1].split()[-1] == "ok"


@pytest.mark.parametrize(
    "extra",
    [
        ("--by", "model"),
        ("--interruptions",),
        ("--since", "7d"),
        ("--model", "gpt-4o"),
        ("--format", "parquet", "-o", "x.parquet"),
        ("--month", "2026-13"),
    ],
)
def test_what_budgets_do_not_take(
    cli: Cli, db_url: str, budgets_file: Path, extra: tuple[str, ...]
) -> None:
    code, out, err = cli("audit", "--db", db_url, "--budgets", budgets_file, *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1


def test_a_month_without_budgets_is_refused(cli: Cli, db_url: str) -> None:
    code, _, err = cli("audit", "--db", db_url, "--month", "2026-05")
    assert code == 2 and "--budgets" in err


def test_a_bad_budgets_file_is_one_line(cli: Cli, db_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "budgets.yml"
    bad.write_text("budgets:\n  - name: x\n    all: true\n    monthly_usd: -1\n")
    for argv in (
        ("audit", "--db", db_url, "--budgets", bad),
        ("budgets", "check", bad),
        ("budgets", "rules", bad),
    ):
        code, out, err = cli(*argv)
        assert code == 2 and out == ""
        (line,) = err.strip().splitlines()
        assert f"{bad} line 4: budgets[0] ('x'): monthly_usd must be" in line
    code, _, err = cli("budgets", "check", tmp_path / "absent.yml")
    assert code == 2 and "cannot read" in err


def test_check_lists_the_budgets(cli: Cli, budgets_file: Path) -> None:
    code, out, _ = cli("budgets", "check", budgets_file)
    assert code == 0
    assert out.splitlines() == [
        "project one: project p1, 10.000000 USD a month",
        "key 1111: key …1111, 2.500000 USD a month",
        "everything: all, 1000.000000 USD a month",
    ]


def test_rules_on_standard_output_or_a_file(cli: Cli, budgets_file: Path, tmp_path: Path) -> None:
    code, out, err = cli("budgets", "rules", budgets_file)
    assert code == 0
    assert out.startswith("# Generated by `recorder budgets rules ")
    assert "budget: everything" in out and "project one" not in out
    assert err.splitlines() == [
        "recorder budgets rules: no rule for 'project one' (project p1): no metric carries"
        " projects; `recorder audit --budgets` watches this budget",
        "recorder budgets rules: no rule for 'key 1111' (key …1111): no metric carries keys;"
        " `recorder audit --budgets` watches this budget",
    ]
    target = tmp_path / "budgets-rules.yml"
    code, written, _ = cli("budgets", "rules", budgets_file, "-o", target)
    assert code == 0 and written == "" and target.read_text() == out
    code, _, err = cli("budgets", "rules", budgets_file, "--metrics-tag", "no-such")
    assert code == 2 and "--metrics-tag 'no-such'" in err
