"""Budgets (recorder.billing.budgets): the file's schema, each mistake one line
naming the file, the line and the budget; what each budget covers; where it
stands in its month: spent, share, the forecast at the last day's rate, and
whether it is over, exactly (Decimal money)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from recorder.billing.budgets import (
    Budget,
    BudgetError,
    key_matches,
    load_budgets,
    month_bounds,
    reading_window,
    standings,
)

GOOD = """\
# the team's budgets
budgets:
  - name: search team
    tag: team=search
    monthly_usd: 500
  - name: production
    project: proj_abc
    monthly_usd: "1200.50"
  - name: batch key
    key: "…3456"
    monthly_usd: 75.25
  - name: everything
    all: true
    monthly_usd: 5000
"""


def test_a_good_file() -> None:
    budgets = load_budgets(GOOD, "budgets.yml")
    assert [(b.name, b.kind, b.value, b.monthly_usd, b.line) for b in budgets] == [
        ("search team", "tag", "team=search", Decimal(500), 3),
        ("production", "project", "proj_abc", Decimal("1200.50"), 6),
        ("batch key", "key", "…3456", Decimal("75.25"), 9),
        ("everything", "all", None, Decimal(5000), 12),
    ]
    assert budgets[0].tag == ("team", "search")
    assert [b.selector for b in budgets] == [
        "tag team=search",
        "project proj_abc",
        "key …3456",
        "all",
    ]


ONE = "budgets:\n  - name: b\n    all: true\n    monthly_usd: 5\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "budgets.yml: empty"),
        ("budgets: [\n", "budgets.yml line 2: not YAML"),
        ("- a\n- b\n", "budgets.yml line 1: a budgets file is a mapping"),
        ("budget:\n  - name: b\n", "budgets.yml line 1: a budgets file is a mapping"),
        (ONE + "extra: 1\n", "budgets.yml line 5: unknown field 'extra'"),
        ("budgets: []\n", "budgets.yml line 1: 'budgets' must be a list of budgets"),
        ("budgets:\n  - just text\n", "budgets.yml line 2: budgets[0]: a budget is a mapping"),
        (
            "budgets:\n  - name: b\n    all: true\n    montly_usd: 5\n",
            "budgets.yml line 4: budgets[0] ('b'): unknown field 'montly_usd'",
        ),
        ("budgets:\n  - all: true\n    monthly_usd: 5\n", "budgets[0]: needs a name"),
        (
            "budgets:\n  - name: b\n    all: true\n",
            "budgets.yml line 2: budgets[0] ('b'): needs monthly_usd",
        ),
        (
            "budgets:\n  - name: b\n    all: true\n    monthly_usd: -5\n",
            "budgets.yml line 4: budgets[0] ('b'): monthly_usd must be an amount",
        ),
        ("budgets:\n  - name: b\n    all: true\n    monthly_usd: 0\n", "must be an amount"),
        ("budgets:\n  - name: b\n    all: true\n    monthly_usd: lots\n", "not 'lots'"),
        ("budgets:\n  - name: b\n    all: true\n    monthly_usd: .nan\n", "must be an amount"),
        ("budgets:\n  - name: b\n    all: true\n    monthly_usd: true\n", "must be an amount"),
        (
            "budgets:\n  - name: b\n    all: true\n    monthly_usd: '0.0000000000001'\n",
            "at most 12 decimal places",
        ),
        (
            "budgets:\n  - name: b\n    monthly_usd: 5\n",
            "budgets[0] ('b'): needs exactly one of tag, project, key, all",
        ),
        (
            "budgets:\n  - name: b\n    monthly_usd: 5\n    all: true\n    project: p\n",
            "budgets.yml line 5: budgets[0] ('b'): needs exactly one of tag, project, key, all"
            " (what the budget covers); it has all, project",
        ),
        ("budgets:\n  - name: b\n    monthly_usd: 5\n    all: false\n", "all: true"),
        ("budgets:\n  - name: b\n    monthly_usd: 5\n    tag: team\n", "a tag is NAME=VALUE"),
        ("budgets:\n  - name: b\n    monthly_usd: 5\n    tag: =x\n", "a tag is NAME=VALUE"),
        ("budgets:\n  - name: b\n    monthly_usd: 5\n    project: ''\n", "non-empty string"),
        (
            "budgets:\n  - name: b\n    monthly_usd: 5\n    key: sk-proj-abcdefghijklmnop\n",
            "which a budgets file must never hold",
        ),
        (ONE + "  - name: b\n    all: true\n    monthly_usd: 6\n", "line 5: budgets[1]: the name"),
        ('budgets:\n  - name: "a\\x07b"\n    all: true\n    monthly_usd: 5\n', "printable"),
    ],
)
def test_every_mistake_is_one_line_naming_where(text: str, says: str) -> None:
    with pytest.raises(BudgetError) as caught:
        load_budgets(text, "budgets.yml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("budgets.yml")
    assert says in message, message


def test_a_key_in_the_file_is_never_echoed() -> None:
    secret = "sk-ant-api03-0123456789abcdefghij"
    with pytest.raises(BudgetError) as caught:
        load_budgets(f"budgets:\n  - name: k\n    key: {secret}\n    monthly_usd: 1\n")
    assert secret not in str(caught.value)


@pytest.mark.parametrize(
    ("form", "matches"),
    [
        ("…3456:0a1b2c3d4e5f", True),
        ("…3456:0a1b2c3d4e5e", False),
        ("0a1b2c3d4e5f", True),
        ("0a1b2c3d4e5e", False),
        ("…3456", True),
        ("...3456", True),
        ("3456", True),
        ("3457", False),
        ("456", False),
    ],
)
def test_a_key_in_each_of_its_forms(form: str, matches: bool) -> None:
    assert key_matches(form, "…3456:0a1b2c3d4e5f") is matches
    assert key_matches(form, None) is False


# -- where each budget stands -------------------------------------------------------

NOW = datetime(2026, 5, 11, 12, 0, tzinfo=UTC)  # 10.5 days into May: 20.5 days left


def row(when: datetime, cost: str | None, **fields: Any) -> dict[str, Any]:
    return {
        "started_at": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "cost_usd": cost,
        "price_version": None if cost is None else "t:m@d",
        "usage_source": "reported",
        **fields,
    }


def budget(kind: str, value: str | None, amount: str) -> Budget:
    return Budget(f"{kind} budget", Decimal(amount), kind, value)


def test_spent_share_forecast_and_status() -> None:
    start, end = month_bounds(None, NOW)
    assert (start, end) == (datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC))
    rows = [
        row(datetime(2026, 4, 30, 23, 0, tzinfo=UTC), "7.000000000001"),  # April: not spent in May
        row(datetime(2026, 5, 1, 0, 0, tzinfo=UTC), "10.100000000001"),
        row(NOW - timedelta(hours=30), "0.300000000001"),
        row(NOW - timedelta(hours=2), "1.200000000000"),  # the last day's spend
        row(NOW - timedelta(hours=1), "0.100000000000"),
        row(NOW - timedelta(hours=1), None, usage_source="estimated"),  # unpriced
        row(NOW + timedelta(minutes=5), "99"),  # after now: not yet
    ]
    (all_,) = standings(rows, [budget("all", None, "20")], start=start, end=end, now=NOW)
    spent = Decimal("10.100000000001") + Decimal("0.300000000001") + Decimal("1.3")
    assert all_["spent_usd"] == spent
    assert all_["last_24h_usd"] == Decimal("1.3")
    # the rest of the month (20.5 days) at the last day's rate
    assert all_["forecast_usd"] == spent + Decimal("1.3") * Decimal("20.5")
    assert all_["share"] == Decimal("0.585000")  # 11.700000000002 / 20, to six places
    assert all_["forecast_share"] == (all_["forecast_usd"] / 20).quantize(Decimal("0.000001"))
    assert all_["status"] == "forecast over"
    assert (all_["requests"], all_["unpriced_requests"]) == (5, 1)
    assert all(isinstance(all_[k], Decimal) for k in ("spent_usd", "forecast_usd", "share"))
    over, ok = standings(
        rows,
        [budget("all", None, "11.7"), budget("all", None, "40")],
        start=start,
        end=end,
        now=NOW,
    )
    assert over["status"] == "over"  # 11.700000000002 > 11.7: to the last place
    assert ok["status"] == "ok"


def test_a_month_gone_by_forecasts_what_it_spent() -> None:
    start, end = month_bounds("2026-04", NOW)
    assert (start, end) == (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    since, until = reading_window(start, end, NOW)
    assert (since, until) == (start, end)
    rows = [
        row(datetime(2026, 4, 30, 23, 0, tzinfo=UTC), "7"),
        row(datetime(2026, 4, 2, tzinfo=UTC), "3"),
        row(datetime(2026, 5, 1, 0, 0, tzinfo=UTC), "100"),  # May
    ]
    (got,) = standings(rows, [budget("all", None, "9")], start=start, end=end, now=NOW)
    assert (got["spent_usd"], got["forecast_usd"], got["status"]) == (10, 10, "over")
    assert got["last_24h_usd"] == 7  # the month's last day


def test_the_first_hours_of_a_month_forecast_from_the_day_before() -> None:
    now = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
    start, end = month_bounds(None, now)
    since, until = reading_window(start, end, now)
    assert (since, until) == (now - timedelta(hours=24), now)
    rows = [row(datetime(2026, 5, 31, 12, 0, tzinfo=UTC), "2.4"), row(start, "1")]
    (got,) = standings(rows, [budget("all", None, "100")], start=start, end=end, now=now)
    assert got["spent_usd"] == 1
    assert got["last_24h_usd"] == Decimal("3.4")
    left_days = Decimal(29) + Decimal(18) / 24
    assert got["forecast_usd"] == 1 + Decimal("3.4") * left_days


def test_what_each_budget_covers() -> None:
    start, end = month_bounds(None, NOW)
    when = NOW - timedelta(days=3)
    rows = [
        row(when, "1", tags={"team": "search"}, project="p1", api_key_id="…1111:aaaaaaaaaaaa"),
        row(when, "2", tags='{"team": "ads"}', project="p1", api_key_id="…2222:bbbbbbbbbbbb"),
        row(when, "4", tags=None, project="p2", api_key_id="…1111:aaaaaaaaaaaa"),
        row(when, "8"),
    ]
    chosen = [
        budget("tag", "team=search", "100"),
        budget("tag", "team=ads", "100"),
        budget("project", "p1", "100"),
        budget("key", "…1111", "100"),
        budget("key", "bbbbbbbbbbbb", "100"),
        budget("all", None, "100"),
    ]
    got = standings(rows, chosen, start=start, end=end, now=NOW)
    assert [g["spent_usd"] for g in got] == [1, 2, 3, 5, 2, 15]


def test_a_month_not_begun_and_a_bad_month() -> None:
    start, end = month_bounds("2026-07", NOW)
    with pytest.raises(BudgetError, match="has not begun"):
        standings([], [budget("all", None, "1")], start=start, end=end, now=NOW)
    for bad in ("2026-13", "May", "2026-5-1"):
        with pytest.raises(BudgetError, match="YYYY-MM"):
            month_bounds(bad, NOW)
    assert month_bounds("2026-12", NOW)[1] == datetime(2027, 1, 1, tzinfo=UTC)
