"""`recorder reprice --since DATE [--prices FILE]`: cost stored streams again with
another price table, store the new ``cost_usd`` and ``price_version``, and say
what changed: rows examined and changed, old and new totals per model, which
price versions gave way to which. ``--dry-run`` only reports.

``--format json`` prints one object (``recorder.billing.reprice.Report.as_dict``);
``table`` (the default on a terminal) a summary, then per model and per price
version. Money is exact in every format.
"""

from __future__ import annotations

import argparse
import sys

from recorder.cli.db import add_db_option, db_url
from recorder.cli.render import (
    add_format_option,
    add_table_options,
    default_format,
    emit,
    table,
    vertical,
)
from recorder.cli.subcommands import Subcommands
from recorder.core.price_files import load_price_file
from recorder.store.queries import SessionFilter, parse_when
from recorder.store.reading import reading_store
from recorder.store.reprice_sql import reprice

FORMATS = ("table", "json")


def add_parser(sub: Subcommands) -> None:
    """Register the `reprice` command."""
    p = sub.add_parser(
        "reprice",
        help="recompute costs with another price table, say what changed",
        description="Cost the streams started since DATE again with a price table (the "
        "shipped one by default), store the new cost_usd and price_version, and report "
        "what changed. Usage is not estimated again.",
    )
    p.add_argument(
        "--since",
        required=True,
        metavar="DATE",
        help="streams started at or after this: 2026-01-31, 2026-01-31T12:00Z, or an age (30d)",
    )
    p.add_argument("--until", metavar="DATE", help="and before this")
    p.add_argument("--model", help="only this requested model ('*' matches anything)")
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="prices to overlay on the shipped table (its models replace the shipped ones)",
    )
    p.add_argument("--dry-run", action="store_true", help="report only; store nothing")
    add_db_option(p)
    add_format_option(p, FORMATS)
    add_table_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder reprice`."""
    f = SessionFilter(
        since=parse_when(args.since),
        until=parse_when(args.until) if args.until else None,
        model=args.model,
        limit=None,
    )
    prices = load_price_file(args.prices)
    with reading_store(db_url(args)) as engine:
        report = reprice(engine, prices, f, dry_run=args.dry_run)
    doc = report.as_dict()
    if default_format(args.format) == "json":
        emit(doc, "json", single=True)
        return 0
    summary = {k: v for k, v in doc.items() if k not in ("models", "price_versions")}
    parts = [vertical(summary)]
    if doc["models"]:
        cols = ["model", "rows", "changed", "old_cost_usd", "new_cost_usd", "difference_usd"]
        parts.append(table(doc["models"], cols))
    if doc["price_versions"]:
        parts.append(table(doc["price_versions"], ["old", "new", "rows", "changed"]))
    sys.stdout.write("\n\n".join(parts) + "\n")
    if args.dry_run:
        print("(dry run: nothing stored)", file=sys.stderr)
    return 0
