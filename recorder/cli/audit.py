"""`recorder audit`: usage and cost of recorded streams, grouped (a billing audit).

``--format json`` prints one array, one object per group, then a totals object
whose first key is ``TOTAL``; ``csv`` the same rows and columns; ``table`` the same
again under the same column names, money rounded to the micro-dollar (json, csv and
parquet are exact). A group whose streams are unpriced and that has no cost shows
its cost as unknown (null, empty, ``-``), never 0. ``parquet`` writes ``--output
FILE`` (one row per group, no totals; money as ``decimal128(38, 12)``), never
standard output.

``--interruptions`` groups the same way and prints, in the same formats, what the
attempts that did not complete cost (``recorder.billing.interruptions``): a
:class:`View` of other figures.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, TextIO

from recorder.billing import audit, interruptions
from recorder.cli.db import CliError, add_db_option, add_filter_options, db_url, filter_from
from recorder.cli.extras import require
from recorder.cli.render import add_table_options, default_format, emit, table
from recorder.cli.subcommands import Subcommands
from recorder.core import money
from recorder.core.price_files import load_price_file
from recorder.store.audit_sql import read_frame
from recorder.store.reading import reading_store

FORMATS = ("table", "json", "csv", "parquet")
SUFFIX_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".txt": "table"}
_MICRO = Decimal("0.000001")
TOTAL = "TOTAL"
TABLE_KEEP = ("requests", "cost_usd")  # an audit without its cost answers nothing


@dataclass(frozen=True)
class View:
    """The figures one mode of the command prints: their names in order, which are
    money, the totals row, and the columns a narrow table keeps."""

    metrics: tuple[str, ...]
    money: frozenset[str]
    totals: Callable[[Sequence[dict[str, Any]]], dict[str, Any]]
    keep: tuple[str, ...]


AUDIT = View(audit.METRICS, audit.MONEY_METRICS, audit.totals, TABLE_KEEP)
INTERRUPTIONS = View(
    interruptions.METRICS,
    interruptions.MONEY_METRICS,
    interruptions.totals,
    ("interrupted_attempts", "interruption_cost_usd", interruptions.SHARE),
)


def add_parser(sub: Subcommands) -> None:
    """Register the `audit` command."""
    p = sub.add_parser(
        "audit",
        help="usage and cost, grouped (billing audit)",
        description="Usage and cost of recorded streams, grouped. Sums over groups equal "
        "sums over streams; money is exact (decimal strings).",
    )
    p.add_argument(
        "--by",
        metavar="KEYS",
        help=f"group by these, comma-separated: {', '.join(audit.GROUP_KEYS)}, "
        f"{audit.TAG_PREFIX}NAME (a tag's value); 'none' for one group of everything "
        f"(default: {','.join(audit.DEFAULT_BY)})",
    )
    p.add_argument(
        "--interruptions",
        action="store_true",
        help="what the attempts that did not complete cost: their billed cost (reported or "
        "estimated), the input their retries sent again, and their share of all spend",
    )
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="with --interruptions: prices the resent input is costed with, overlaid on the "
        "shipped table",
    )
    p.add_argument(
        "--budgets",
        metavar="FILE",
        help="where each budget of FILE (budgets.yml) stands this month: spent, share, "
        "forecast to the month's end at the last 24 hours' rate; exit 1 when one is over",
    )
    p.add_argument(
        "--month",
        metavar="YYYY-MM",
        help="with --budgets: the month (UTC) to judge (default: this one)",
    )
    add_filter_options(p)
    p.add_argument("--project", help="only this project (OpenAI-Project / Anthropic workspace)")
    add_db_option(p)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="output format (default: by --output's suffix, else table on a terminal and "
        "json otherwise; parquet needs --output)",
    )
    p.add_argument(
        "--output", "-o", metavar="FILE", help="write to FILE instead of standard output"
    )
    add_table_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder audit`."""
    by = audit.parse_by(args.by)
    fmt = args.format or _format_for(args.output)
    if fmt == "parquet" and not args.output:
        raise CliError("--format parquet writes a file: give --output FILE", 2)
    if args.prices is not None and not args.interruptions:
        raise CliError("--prices prices the resent input of --interruptions: add it", 2)
    if args.budgets is not None:
        return run_budgets(args, fmt)
    if args.month is not None:
        raise CliError("--month is the month of --budgets: add it", 2)
    require("pandas")
    if fmt == "parquet":
        require("pyarrow", what="--format parquet")
    f = filter_from(args, limit=None)
    view = INTERRUPTIONS if args.interruptions else AUDIT
    if args.interruptions:
        table_of_prices = load_price_file(args.prices)
        with reading_store(db_url(args)) as engine:
            df = read_frame(engine, f, project=args.project, columns=interruptions.COLUMNS)
        groups = interruptions.aggregate(df, by, table_of_prices)
    else:
        with reading_store(db_url(args)) as engine:
            df = read_frame(engine, f, project=args.project)
        groups = audit.aggregate(df, by)
    if fmt == "parquet":
        write_parquet(groups, by, Path(args.output), view)
        return 0
    with _output(args.output) as out:
        if fmt == "table":
            out.write(render_table(groups, by, view) + "\n")
        else:
            with contextlib.redirect_stdout(out):
                emit(document(groups, by, view), fmt, columns=columns(by, view))
    if fmt == "table" and not groups:
        print("(no streams)", file=sys.stderr)
    return 0


# what --budgets cannot take: it reads every stream of the month
_NOT_WITH_BUDGETS = (
    ("by", "--by"),
    ("interruptions", "--interruptions"),
    ("since", "--since"),
    ("until", "--until"),
    ("endpoint", "--endpoint"),
    ("model", "--model"),
    ("outcome", "--outcome"),
    ("key", "--key"),
    ("project", "--project"),
)


def run_budgets(args: argparse.Namespace, fmt: str) -> int:
    """`recorder audit --budgets FILE`: where each budget stands in its month; 1
    when one is over (each said on standard error), else 0."""
    from recorder.billing import budgets
    from recorder.cli.budgets import read_budgets
    from recorder.store.audit_sql import read_rows
    from recorder.store.queries import SessionFilter

    given = [flag for name, flag in _NOT_WITH_BUDGETS if getattr(args, name, None)]
    if given:
        raise CliError(
            f"--budgets reads every stream of the month (--month): not with {given[0]}", 2
        )
    if fmt == "parquet":
        raise CliError("--budgets prints a table, JSON or CSV, not Parquet", 2)
    chosen = read_budgets(args.budgets)
    now = datetime.now(UTC)
    try:
        start, end = budgets.month_bounds(args.month, now)
    except budgets.BudgetError as e:
        raise CliError(str(e), 2) from None
    since, until = budgets.reading_window(start, end, now)
    with reading_store(db_url(args)) as engine:
        rows = read_rows(
            engine, SessionFilter(since=since, until=until, limit=None), budgets.COLUMNS
        )
    try:
        standing = budgets.standings(rows, chosen, start=start, end=end, now=now)
    except budgets.BudgetError as e:
        raise CliError(str(e), 2) from None
    doc = [
        {
            k: (
                money.exact(v)
                if k in budgets.MONEY
                else f"{v:f}"
                if k in budgets.SHARES and v is not None
                else v
            )
            for k, v in row.items()
        }
        for row in standing
    ]
    with _output(args.output) as out:
        if fmt == "table":
            shown = [
                {k: _micro(v) if k in budgets.MONEY else v for k, v in row.items()} for row in doc
            ]
            keep = ["name", "spent_usd", "budget_usd", "share", "status"]
            out.write(table(shown, list(budgets.COLUMNS_OUT), keep=keep) + "\n")
        else:
            with contextlib.redirect_stdout(out):
                emit(doc, fmt, columns=list(budgets.COLUMNS_OUT))
    over = [row for row in standing if row["status"] == "over"]
    for row in over:
        print(
            f"recorder audit: budget {row['name']!r} is over: {money.display(row['spent_usd'])}"
            f" of {money.display(row['budget_usd'])} USD spent in {row['month']}",
            file=sys.stderr,
        )
    return 1 if over else 0


def _format_for(output: str | None) -> str:
    """Without --format: by the output file's suffix (json if none fits), else as
    every reading command does."""
    if output is None:
        return default_format(None)
    return SUFFIX_FORMATS.get(Path(output).suffix.lower(), "json")


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    try:
        with open(path, "w", encoding="utf-8", newline="") as out:
            yield out
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None


def columns(by: Sequence[str], view: View = AUDIT) -> list[str]:
    """The columns of every format but Parquet: the group's keys (``group`` when
    there are none), then the view's figures."""
    return [*(by or ["group"]), *view.metrics]


def shown_cost(group: dict[str, Any]) -> Decimal | None:
    """A group's ``cost_usd`` as shown: unknown (None) when it has unpriced streams
    and no cost at all, so that an unpriced model never reads as free."""
    cost: Decimal = group["cost_usd"]
    return None if group["unpriced_requests"] and not cost else cost


def document(
    groups: Sequence[dict[str, Any]], by: Sequence[str], view: View = AUDIT
) -> list[dict[str, Any]]:
    """The groups as JSON and CSV print them, money and shares as decimal strings
    (an unknown cost null), then the totals: a last object whose first key is
    ``TOTAL`` (none when there are no groups)."""
    keys = list(by) or ["group"]

    def row(group: dict[str, Any], label: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: label.get(k) for k in keys}
        for m in view.metrics:
            v = shown_cost(group) if view is AUDIT and m == "cost_usd" else group[m]
            out[m] = _text(v, m, view)
        return out

    rows = [row(g, {k: g[k] for k in by} if by else {"group": "all"}) for g in groups]
    if groups:
        rows.append(row(view.totals(groups), {keys[0]: TOTAL}))
    return rows


def _text(value: Any, name: str, view: View) -> Any:
    """A figure as JSON and CSV print it: money and shares as decimal strings."""
    if value is None:
        return None
    if name in view.money:
        return money.exact(value)
    if name == interruptions.SHARE:
        return f"{value:f}"
    return value


def _micro(value: str | None) -> str | None:
    if value is None:
        return None
    return f"{Decimal(value).quantize(_MICRO, rounding=ROUND_HALF_EVEN):f}"


def render_table(groups: Sequence[dict[str, Any]], by: Sequence[str], view: View = AUDIT) -> str:
    """The rows of :func:`document` as an aligned table, under the same column
    names; money rounded to the micro-dollar, an unknown cost ``-``. A narrow
    terminal keeps the groups' keys and the view's answer (the audit: requests
    and cost)."""
    rows = [
        {k: _micro(v) if k in view.money else v for k, v in r.items()}
        for r in document(groups, by, view)
    ]
    return table(rows, columns(by, view), keep=[*(by or ["group"]), *view.keep])


def write_parquet(
    groups: Sequence[dict[str, Any]], by: Sequence[str], path: Path, view: View = AUDIT
) -> None:
    """The groups as a Parquet file: keys as strings, counts as int64, money as
    ``decimal128(38, 12)`` (exact), the interruptions' share as ``decimal128(9, 6)``
    (null without spend)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    fields = [pa.field(k, pa.string()) for k in by]
    for m in view.metrics:
        if m == interruptions.SHARE:
            fields.append(pa.field(m, pa.decimal128(9, 6), nullable=True))
            continue
        kind = pa.decimal128(38, money.PLACES) if m in view.money else pa.int64()
        fields.append(pa.field(m, kind, nullable=False))
    schema = pa.schema(fields)
    rows = [
        {k: (v.quantize(money.QUANTUM) if k in view.money else v) for k, v in g.items()}
        for g in groups
    ]
    try:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e}") from None
