"""`recorder audit`: usage and cost of recorded streams, grouped (a billing audit).

``--format json`` prints one array, one object per group and no totals element
(INTERFACES.md); ``csv`` the same columns; ``table`` adds a totals line and shows
money rounded to the micro-dollar (json, csv and parquet are exact); ``parquet``
writes ``--output FILE`` (money as ``decimal128(38, 12)``), never standard output.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.exc import SQLAlchemyError

from recorder import audit
from recorder.cli.db import CliError, add_db_option, add_filter_options, db_url, open_for_reading
from recorder.cli.render import add_table_options, default_format, emit, table
from recorder.store.queries import QueryError, SessionFilter, parse_when

FORMATS = ("table", "json", "csv", "parquet")
SUFFIX_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".txt": "table"}
_MICRO = Decimal("0.000001")
# Short headings for the table (json/csv/parquet use the full names).
TABLE_HEADINGS = {
    "requests": "requests",
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_tokens": "cache_read",
    "cache_write_tokens": "cache_write",
    "reasoning_tokens": "reasoning",
    "cost_usd": "cost_usd",
    "estimated_input_tokens": "est_input",
    "estimated_output_tokens": "est_output",
    "estimated_cost_usd": "est_cost_usd",
    "interrupted_requests": "interrupted",
    "interrupted_cost_usd": "interrupted_usd",
    "unpriced_requests": "unpriced",
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        help=f"group by these, comma-separated: {', '.join(audit.GROUP_KEYS)}; 'none' for "
        f"one group of everything (default: {','.join(audit.DEFAULT_BY)})",
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
    try:
        return _run(args)
    except CliError as e:
        print(f"recorder audit: {e}", file=sys.stderr)
        return e.code
    except (QueryError, audit.AuditError) as e:
        print(f"recorder audit: {e}", file=sys.stderr)
        return 2


def _outcomes(values: Sequence[str] | None) -> list[str]:
    return [o.strip() for v in values or [] for o in v.split(",") if o.strip()]


def _run(args: argparse.Namespace) -> int:
    by = audit.parse_by(args.by)
    fmt = args.format or _format_for(args.output)
    if fmt == "parquet" and not args.output:
        raise CliError("--format parquet writes a file: give --output FILE", 2)
    f = SessionFilter(
        since=parse_when(args.since) if args.since else None,
        until=parse_when(args.until) if args.until else None,
        endpoint=args.endpoint,
        model=args.model,
        outcomes=_outcomes(args.outcome),
        key=args.key,
        limit=None,
    )
    engine = open_for_reading(db_url(args))
    try:
        df = audit.read_frame(engine, f, project=args.project)
    except SQLAlchemyError as e:
        raise CliError(f"cannot read the store: {getattr(e, 'orig', None) or e}") from None
    finally:
        engine.dispose()
    groups = audit.aggregate(df, by)
    if fmt == "parquet":
        write_parquet(groups, by, Path(args.output))
        return 0
    with _output(args.output) as out:
        if fmt == "table":
            out.write(render_table(groups, by) + "\n")
        else:
            columns = (*by, *audit.METRICS)
            with contextlib.redirect_stdout(out):
                emit(audit.as_document(groups), fmt, columns=columns)
    if fmt == "table" and not groups:
        print("(no streams)", file=sys.stderr)
    return 0


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


def _micro(value: Decimal) -> str:
    return f"{value.quantize(_MICRO, rounding=ROUND_HALF_EVEN):f}"


def render_table(groups: Sequence[dict[str, Any]], by: Sequence[str]) -> str:
    """The groups as an aligned table with a totals line; money to the micro-dollar."""
    keys = list(by) or ["group"]
    columns = [*keys, *(TABLE_HEADINGS[m] for m in audit.METRICS)]

    def row(group: dict[str, Any], label: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = dict(label)
        for m in audit.METRICS:
            v = group[m]
            out[TABLE_HEADINGS[m]] = _micro(v) if m in audit.MONEY_METRICS else v
        return out

    rows = [row(g, {k: g[k] for k in by} if by else {"group": "all"}) for g in groups]
    if len(groups) > 1 or not by:
        rows.append(row(audit.totals(groups), {keys[0]: "TOTAL"}))
    return table(rows, columns)


def write_parquet(groups: Sequence[dict[str, Any]], by: Sequence[str], path: Path) -> None:
    """The groups as a Parquet file: keys as strings, counts as int64, money as
    ``decimal128(38, 12)`` (exact)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    fields = [pa.field(k, pa.string()) for k in by]
    for m in audit.METRICS:
        kind = pa.decimal128(38, audit.MONEY_PLACES) if m in audit.MONEY_METRICS else pa.int64()
        fields.append(pa.field(m, kind, nullable=False))
    schema = pa.schema(fields)
    rows = [
        {
            k: (
                v.quantize(Decimal(1).scaleb(-audit.MONEY_PLACES))
                if k in audit.MONEY_METRICS
                else v
            )
            for k, v in g.items()
        }
        for g in groups
    ]
    try:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e}") from None
