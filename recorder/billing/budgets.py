"""Budgets that tell: ``budgets.yml``, a monthly amount per key, project or tag.

The recorder never blocks traffic; it tells. ``recorder audit --budgets FILE``
says where each budget stands in its calendar month (UTC): what was spent, its
share of the budget, and a forecast to the month's end at the rate of the last
24 hours (exit 1 when one is over); ``recorder budgets rules FILE`` writes
Prometheus rules that alert on the rate of spend against each budget the metrics
can see (``recorder.metrics.budget_rules``).

The file::

    budgets:
      - name: search team          # unique; names the budget in alerts and the audit
        tag: team=search           # what it covers: exactly one of tag, project, key, all
        monthly_usd: 500           # US dollars per calendar month (a number or a string)
      - name: production
        project: proj_abc
        monthly_usd: "1200.50"
      - name: batch key
        key: "…3456"               # a key's fingerprint, its hex part or its last four
      - name: everything
        all: true
        monthly_usd: 5000

Every mistake is one line naming the file, the line and the budget
(:class:`BudgetError`). A key is never written in the file: only the forms of
its fingerprint that `recorder audit --by key` and `recorder sessions` show.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from recorder.billing import audit
from recorder.core import money
from recorder.core.errors import UsageError
from recorder.core.money import EXACT, QUANTUM, ZERO
from recorder.core.record_time import parse_started_at

KINDS = ("tag", "project", "key", "all")
FIELDS = ("name", "monthly_usd", *KINDS)
MAX_NAME = 100
MAX_USD = Decimal(10) ** 12  # the store's NUMERIC(24, 12) holds less per stream
# the rate a forecast goes on at: the spend of the last day (a whole daily cycle)
RATE_WINDOW = timedelta(hours=24)
# what the store reads of a stream for a budget
COLUMNS = (
    "started_at",
    "api_key_id",
    "project",
    "usage_source",
    "cost_usd",
    "price_version",
    *audit.OPTIONAL_COLUMNS,
)
STATUSES = ("over", "forecast over", "ok")

_HEX12 = re.compile(r"[0-9a-f]{12}")
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BudgetError(UsageError, ValueError):
    """A budgets file that cannot be used; the message is one line."""


@dataclass(frozen=True, slots=True)
class Budget:
    """One budget: a monthly amount for the streams its selector covers."""

    name: str
    monthly_usd: Decimal
    kind: str  # one of KINDS
    value: str | None  # the tag as NAME=VALUE, the project, the key's form; None for all
    line: int | None = None  # where the file has it (1-based)

    @property
    def tag(self) -> tuple[str, str] | None:
        """``(NAME, VALUE)`` of a tag budget."""
        if self.kind != "tag" or self.value is None:
            return None
        name, _, value = self.value.partition("=")
        return name, value

    @property
    def selector(self) -> str:
        """What it covers, for people: ``tag team=search``, ``project p``, ``all``."""
        return "all" if self.kind == "all" else f"{self.kind} {self.value}"

    def covers(self, row: Mapping[Any, Any]) -> bool:
        """Whether a stream (a record's fields) counts against this budget."""
        if self.kind == "all":
            return True
        if self.kind == "project":
            return row.get("project") == self.value
        if self.kind == "tag":
            tag = self.tag
            assert tag is not None
            return audit.tag_value(row.get("tags"), tag[0]) == tag[1]
        return key_matches(self.value or "", row.get("api_key_id"))


def key_form(text: str) -> str | None:
    """Which form of a key's fingerprint ``text`` is: ``fingerprint``
    (``…3456:0a1b2c3d4e5f``), ``hex`` (its hex part) or ``last4`` (``…3456`` or
    ``3456``); None for anything else (a key itself, say)."""
    k = text.strip()
    if ":" in k:
        return "fingerprint"
    if _HEX12.fullmatch(k):
        return "hex"
    if len(k) <= 4 or k.startswith(("…", "...")):
        return "last4"
    return None


def key_matches(form: str, api_key_id: Any) -> bool:
    """Whether a stream's ``api_key_id`` is the key ``form`` names (as
    `recorder sessions --key` matches it)."""
    if not isinstance(api_key_id, str):
        return False
    k = form.strip()
    kind = key_form(k)
    if kind == "fingerprint":
        return api_key_id == k
    if kind == "hex":
        return api_key_id.endswith(":" + k)
    if kind == "last4":
        return api_key_id.startswith("…" + k.removeprefix("…").removeprefix("...") + ":")
    return False


# -- reading the file ----------------------------------------------------------


def load_budgets(text: str, source: str = "budgets.yml") -> list[Budget]:
    """The budgets of a file's text; :class:`BudgetError` (one line: the file, the
    line, what is wrong) for anything else."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        doc = YAML(typ="rt", pure=True).load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise BudgetError(f"{source}{where}: not YAML: {e.problem or e.context}") from None
    except YAMLError as e:
        raise BudgetError(f"{source}: not YAML: {str(e).splitlines()[0]}") from None
    if doc is None:
        raise BudgetError(f"{source}: empty: a budgets file has a list under 'budgets:'")
    if not isinstance(doc, Mapping) or "budgets" not in doc:
        raise BudgetError(f"{source} line 1: a budgets file is a mapping with a list 'budgets:'")
    unknown = [k for k in doc if k != "budgets"]
    if unknown:
        line = _line_of(doc, unknown[0])
        raise BudgetError(f"{source}{line}: unknown field {unknown[0]!r} (the file has: budgets)")
    entries = doc["budgets"]
    if not isinstance(entries, list) or not entries:
        line = _line_of(doc, "budgets")
        raise BudgetError(f"{source}{line}: 'budgets' must be a list of budgets, one at least")
    budgets: list[Budget] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        budget = _budget(entry, i, source, _item_line(entries, i))
        if budget.name in seen:
            where = f" line {budget.line}" if budget.line else ""
            raise BudgetError(
                f"{source}{where}: budgets[{i}]: the name {budget.name!r} is taken by"
                f" budgets[{seen[budget.name]}]"
            )
        seen[budget.name] = i
        budgets.append(budget)
    return budgets


def _line_of(mapping: Any, key: Any) -> str:
    """`` line N`` of ``key`` in a mapping ruamel read (empty when unknown)."""
    try:
        return f" line {mapping.lc.key(key)[0] + 1}"
    except (AttributeError, KeyError, TypeError):
        return ""


def _item_line(items: Any, i: int) -> int | None:
    try:
        return int(items.lc.item(i)[0]) + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        return None


def _budget(entry: Any, i: int, source: str, line: int | None) -> Budget:
    here = f"{source}{f' line {line}' if line else ''}: budgets[{i}]"
    if not isinstance(entry, Mapping):
        raise BudgetError(f"{here}: a budget is a mapping (name, monthly_usd, and what it covers)")

    def fail(key: str | None, why: str) -> BudgetError:
        where = _line_of(entry, key) if key is not None else ""
        head = f"{source}{where or (f' line {line}' if line else '')}: budgets[{i}]"
        name = entry.get("name")
        named = f" ({name!r})" if isinstance(name, str) and name else ""
        return BudgetError(f"{head}{named}: {why}")

    unknown = [k for k in entry if k not in FIELDS]
    if unknown:
        raise fail(
            str(unknown[0]),
            f"unknown field {unknown[0]!r} (a budget has name, monthly_usd, and one of"
            f" {', '.join(KINDS)})",
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail("name" if "name" in entry else None, "needs a name (a non-empty string)")
    name = name.strip()
    if len(name) > MAX_NAME or _CONTROL.search(name):
        raise fail("name", f"a name is at most {MAX_NAME} printable characters")
    if "monthly_usd" not in entry:
        raise fail(None, "needs monthly_usd (US dollars per month)")
    amount = _amount(entry["monthly_usd"])
    if amount is None:
        raise fail(
            "monthly_usd",
            "monthly_usd must be an amount of US dollars above 0 (a number or a decimal"
            f" string, at most 12 decimal places), not {entry['monthly_usd']!r}",
        )
    kinds = [str(k) for k in entry if k in KINDS]  # in the file's order
    if len(kinds) != 1:
        which = ", ".join(kinds) if kinds else "none"
        raise fail(
            kinds[1] if len(kinds) > 1 else None,
            f"needs exactly one of {', '.join(KINDS)} (what the budget covers); it has {which}",
        )
    kind = kinds[0]
    raw = entry[kind]
    value: str | None
    if kind == "all":
        if raw is not True:
            raise fail(kind, "all: true (every stream) is the only value of 'all'")
        value = None
    elif not isinstance(raw, str) or not raw.strip():
        raise fail(kind, f"{kind} must be a non-empty string")
    else:
        value = raw.strip()
        if kind == "tag":
            tag_name, eq, tag_value = value.partition("=")
            if not eq or not tag_name.strip() or not tag_value.strip():
                raise fail(kind, f"a tag is NAME=VALUE (team=search), not {value!r}")
            value = f"{tag_name.strip()}={tag_value.strip()}"
        elif kind == "key" and key_form(value) is None:
            raise fail(
                kind,
                "a key is named by its fingerprint as `recorder audit --by key` shows it"
                " (…3456:0a1b2c3d4e5f), its hex part or its last four characters (…3456);"
                " this looks like a key itself, which a budgets file must never hold",
            )
    return Budget(name, amount, kind, value, line)


def _amount(raw: Any) -> Decimal | None:
    """A monthly amount: above 0, finite, at most 12 places, below 10^12."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        amount = Decimal(str(raw).strip())
    except decimal.InvalidOperation:
        return None
    if not amount.is_finite() or amount <= 0 or amount >= MAX_USD:
        return None
    try:
        return money.quantize(amount)
    except decimal.Inexact:
        return None


# -- where each budget stands ---------------------------------------------------


def month_bounds(month: str | None, now: datetime) -> tuple[datetime, datetime]:
    """The start and end (UTC) of the month ``YYYY-MM`` (``now``'s when None)."""
    if month is None:
        year, number = now.year, now.month
    else:
        m = _MONTH.fullmatch(month.strip())
        if m is None or not 1 <= int(m.group(2)) <= 12:
            raise BudgetError(f"--month {month!r}: a month is YYYY-MM (2026-05)")
        year, number = int(m.group(1)), int(m.group(2))
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + (number == 12), number % 12 + 1, 1, tzinfo=UTC)
    return start, end


def reading_window(start: datetime, end: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The streams :func:`standings` needs: the month, and the day before the
    moment it forecasts from (which may reach into the month before)."""
    until = min(now, end)
    return min(start, until - RATE_WINDOW), until


def standings(
    rows: Iterable[Mapping[Any, Any]],
    budgets: Sequence[Budget],
    *,
    start: datetime,
    end: datetime,
    now: datetime,
) -> list[dict[str, Any]]:
    """Where each budget stands in the month ``[start, end)`` at ``now``: one dict
    per budget, in the file's order.

    ``spent_usd`` is the cost of the streams it covers that started in the month
    (before ``now``); ``last_24h_usd`` of those that started in the 24 hours
    before ``now`` (or before the month's end, for a month gone by);
    ``forecast_usd`` is what was spent plus the rest of the month at that rate
    (what was spent, for a month gone by). ``share`` and ``forecast_share`` are of
    the budget; ``status`` is ``over`` (spent more than the budget), ``forecast
    over`` or ``ok``. An unpriced stream adds nothing but counts in
    ``unpriced_requests``: the spend is then a floor.
    """
    if now < start:
        raise BudgetError(f"the month from {start:%Y-%m-%d} has not begun")
    until = min(now, end)
    since_rate = until - RATE_WINDOW
    found: list[list[Any]] = [[ZERO, ZERO, 0, 0] for _ in budgets]  # spent, day, n, unpriced
    with decimal.localcontext(EXACT):
        for row in rows:
            when = _started(row.get("started_at"))
            if when is None or when >= until:
                continue
            in_month, in_day = when >= start, when >= since_rate
            if not (in_month or in_day):
                continue
            cost = audit.cost_value(row.get("cost_usd"))
            unpriced = row.get("price_version") in (None, "") and row.get("usage_source") not in (
                None,
                "none",
            )
            for figures, budget in zip(found, budgets, strict=True):
                if not budget.covers(row):
                    continue
                if in_month:
                    figures[0] += cost
                    figures[2] += 1
                    figures[3] += int(unpriced)
                if in_day:
                    figures[1] += cost
    left = max((end - until).total_seconds(), 0.0)
    out = []
    for (spent, day, n, unpriced), budget in zip(found, budgets, strict=True):
        forecast = spent + (day * Decimal(left) / Decimal(RATE_WINDOW.total_seconds()))
        forecast = forecast.quantize(QUANTUM, rounding=ROUND_HALF_EVEN)
        status = "over" if spent > budget.monthly_usd else "ok"
        if status == "ok" and forecast > budget.monthly_usd:
            status = "forecast over"
        out.append(
            {
                "month": f"{start:%Y-%m}",
                "name": budget.name,
                "selector": budget.selector,
                "budget_usd": budget.monthly_usd,
                "spent_usd": spent,
                "share": audit.share(spent, budget.monthly_usd),
                "forecast_usd": forecast,
                "forecast_share": audit.share(forecast, budget.monthly_usd),
                "status": status,
                "last_24h_usd": day,
                "requests": n,
                "unpriced_requests": unpriced,
            }
        )
    return out


COLUMNS_OUT = (
    "month",
    "name",
    "selector",
    "budget_usd",
    "spent_usd",
    "share",
    "forecast_usd",
    "forecast_share",
    "status",
    "last_24h_usd",
    "requests",
    "unpriced_requests",
)
MONEY = frozenset({"budget_usd", "spent_usd", "forecast_usd", "last_24h_usd"})
SHARES = frozenset({"share", "forecast_share"})


def _started(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return parse_started_at(value) if value else None
