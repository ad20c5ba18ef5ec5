"""Repricing stored streams with another price table (`recorder reprice`).

Each row is costed again from its stored figures alone, by the rule the proxy
used (``recorder.core.billing.apply_prices``: tokens, cache writes by lifetime,
service tier, server tools; null when the usage is unknown or the model has no
price). A row whose cost or ``price_version`` differs is updated, both columns
together. Usage is not estimated again: estimates stay as recorded.

The report says what changed: rows examined and changed, old and new totals
(overall and per requested model), and which price versions gave way to which.
Money is ``Decimal`` throughout, summed in a context wide enough to be exact.

Rows are read and written a chunk at a time (keyset order on ``started_at``,
``id``), one transaction per chunk, so a large reprice never holds SQLite's
write lock for long and a proxy writing meanwhile goes on. This module is the
pure part (:func:`plan`); :func:`recorder.store.reprice_sql.reprice` reads and
writes the store.
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from recorder.core import money
from recorder.core.billing import apply_prices
from recorder.core.money import EXACT, ZERO
from recorder.core.pricing import PriceTable
from recorder.core.record import StreamRecord


def _money(value: str | Decimal | None) -> Decimal | None:
    return None if value is None else money.quantize(value)


@dataclass(slots=True)
class Tally:
    """Rows, changed rows, and the old and new cost of a set of rows."""

    rows: int = 0
    changed: int = 0
    old_cost: Decimal = ZERO
    new_cost: Decimal = ZERO

    def add(self, old: Decimal | None, new: Decimal | None, changed: bool) -> None:
        """Count one row."""
        self.rows += 1
        self.changed += changed
        with decimal.localcontext(EXACT):
            self.old_cost += old or ZERO
            self.new_cost += new or ZERO

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape: counts, then money as decimal strings."""
        with decimal.localcontext(EXACT):
            diff = self.new_cost - self.old_cost
        return {
            "rows": self.rows,
            "changed": self.changed,
            "old_cost_usd": money.exact(self.old_cost),
            "new_cost_usd": money.exact(self.new_cost),
            "difference_usd": money.exact(diff),
        }


@dataclass(slots=True)
class Change:
    """One row's new cost (None: unpriced under the new table)."""

    id: str
    cost_usd: Decimal | None
    price_version: str | None
    unpriced_reason: str | None = None
    usage_parts: list[dict[str, Any]] | None = None  # each part's cost, for parts' rows


@dataclass(slots=True)
class Report:
    """What a reprice found (and, unless a dry run, stored)."""

    prices: str
    since: datetime | None = None
    until: datetime | None = None
    dry_run: bool = False
    total: Tally = field(default_factory=Tally)
    models: dict[str | None, Tally] = field(default_factory=dict)
    # (old price_version, new price_version) -> rows, changed
    versions: dict[tuple[str | None, str | None], Tally] = field(default_factory=dict)
    newly_priced: int = 0
    now_unpriced: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON document `recorder reprice --format json` prints."""

        def iso(t: datetime | None) -> str | None:
            return None if t is None else t.isoformat().replace("+00:00", "Z")

        def order(key: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
            return tuple((k is None, k or "") for k in key)

        return {
            "prices": self.prices,
            "since": iso(self.since),
            "until": iso(self.until),
            "dry_run": self.dry_run,
            **self.total.as_dict(),
            "newly_priced": self.newly_priced,
            "now_unpriced": self.now_unpriced,
            "models": [
                {"model": m, **self.models[m].as_dict()}
                for m in sorted(self.models, key=lambda m: order((m,)))
            ],
            "price_versions": [
                {"old": old, "new": new, "rows": t.rows, "changed": t.changed}
                for (old, new), t in sorted(self.versions.items(), key=lambda kv: order(kv[0]))
            ],
        }


def reprice_record(record: StreamRecord, table: PriceTable) -> tuple[Decimal | None, str | None]:
    """The cost and price version of a stored record under ``table`` (the record
    itself is left as it was)."""
    copy = dataclasses.replace(record)
    apply_prices(copy, table)
    return _money(copy.cost_usd), copy.price_version


def _repriced(record: StreamRecord, table: PriceTable) -> StreamRecord:
    copy = dataclasses.replace(record)
    apply_prices(copy, table)
    return copy


def plan(records: Iterable[StreamRecord], table: PriceTable, report: Report) -> list[Change]:
    """Price ``records`` with ``table``; count them in ``report``; return the rows to update."""
    changes: list[Change] = []
    for rec in records:
        old_cost, old_version = _money(rec.cost_usd), rec.price_version
        new = _repriced(rec, table)
        new_cost, new_version = _money(new.cost_usd), new.price_version
        changed = old_cost != new_cost or old_version != new_version
        # a row from before unpriced_reason was kept gets one, without counting as a change
        noted = new.unpriced_reason != rec.unpriced_reason
        report.total.add(old_cost, new_cost, changed)
        report.models.setdefault(rec.model, Tally()).add(old_cost, new_cost, changed)
        report.versions.setdefault((old_version, new_version), Tally()).add(
            old_cost, new_cost, changed
        )
        if old_version is None and new_version is not None:
            report.newly_priced += 1
        elif old_version is not None and new_version is None:
            report.now_unpriced += 1
        if changed or noted:
            assert rec.id is not None
            changes.append(
                Change(rec.id, new_cost, new_version, new.unpriced_reason, new.usage_parts)
            )
    return changes
