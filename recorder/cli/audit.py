"""`recorder audit`: usage and cost of recorded streams, grouped (a billing audit).

``--format json`` prints one array, one object per group, then a totals object
whose first key is ``TOTAL``; ``csv`` the same rows and columns; ``table`` the same
again under the same column names, money rounded to the micro-dollar (json, csv and
parquet are exact). A group whose streams are unpriced and that has no cost shows
its cost as unknown (null, empty, ``-``), never 0. ``parquet`` writes ``--output
FILE`` (one row per group, no totals; money as ``decimal128(38, 12)``), never
standard output.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, TextIO

from recorder.billing import audit
from recorder.cli.db import CliError, add_db_option, add_filter_options, db_url, filter_from
from recorder.cli.extras import require
from recorder.cli.render import add_table_options, default_format, emit, table
from recorder.core import money
from recorder.store.audit_sql import read_frame
from recorder.store.reading import reading_store

FORMATS = ("table", "json", "csv", "parquet")
SUFFIX_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".txt": "table"}
_MICRO = Decimal("0.000001")
TOTAL = "TOTAL"
TABLE_KEEP = ("requests", "cost_usd")  # an audit without its cost answers nothing


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
    by = audit.parse_by(args.by)
    fmt = args.format or _format_for(args.output)
    if fmt == "parquet" and not args.output:
        raise CliError("--format parquet writes a file: give --output FILE", 2)
    require("pandas")
    if fmt == "parquet":
        require("pyarrow", what="--format parquet")
    f = filter_from(args, limit=None)
    with reading_store(db_url(args)) as engine:
        df = read_frame(engine, f, project=args.project)
    groups = audit.aggregate(df, by)
    if fmt == "parquet":
        write_parquet(groups, by, Path(args.output))
        return 0
    with _output(args.output) as out:
        if fmt == "table":
            out.write(render_table(groups, by) + "\n")
        else:
            with contextlib.redirect_stdout(out):
                emit(document(groups, by), fmt, columns=columns(by))
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


def columns(by: Sequence[str]) -> list[str]:
    """The columns of every format but Parquet: the group's keys (``group`` when
    there are none), then :data:`recorder.billing.audit.METRICS`."""
    return [*(by or ["group"]), *audit.METRICS]


def shown_cost(group: dict[str, Any]) -> Decimal | None:
    """A group's ``cost_usd`` as shown: unknown (None) when it has unpriced streams
    and no cost at all, so that an unpriced model never reads as free."""
    cost: Decimal = group["cost_usd"]
    return None if group["unpriced_requests"] and not cost else cost


def document(groups: Sequence[dict[str, Any]], by: Sequence[str]) -> list[dict[str, Any]]:
    """The groups as JSON and CSV print them, money as decimal strings (an unknown
    cost null), then the totals: a last object whose first key is ``TOTAL``
    (none when there are no groups)."""
    keys = list(by) or ["group"]

    def row(group: dict[str, Any], label: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: label.get(k) for k in keys}
        for m in audit.METRICS:
            v = shown_cost(group) if m == "cost_usd" else group[m]
            out[m] = (None if v is None else money.exact(v)) if m in audit.MONEY_METRICS else v
        return out

    rows = [row(g, {k: g[k] for k in by} if by else {"group": "all"}) for g in groups]
    if groups:
        rows.append(row(audit.totals(groups), {keys[0]: TOTAL}))
    return rows


def _micro(value: str | None) -> str | None:
    if value is None:
        return None
    return f"{Decimal(value).quantize(_MICRO, rounding=ROUND_HALF_EVEN):f}"


def render_table(groups: Sequence[dict[str, Any]], by: Sequence[str]) -> str:
    """The rows of :func:`document` as an aligned table, under the same column
    names; money rounded to the micro-dollar, an unknown cost ``-``. A narrow
    terminal keeps the groups' keys, their requests and their cost."""
    rows = [
        {k: _micro(v) if k in audit.MONEY_METRICS else v for k, v in r.items()}
        for r in document(groups, by)
    ]
    return table(rows, columns(by), keep=[*(by or ["group"]), *TABLE_KEEP])


def write_parquet(groups: Sequence[dict[str, Any]], by: Sequence[str], path: Path) -> None:
    """The groups as a Parquet file: keys as strings, counts as int64, money as
    ``decimal128(38, 12)`` (exact)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    fields = [pa.field(k, pa.string()) for k in by]
    for m in audit.METRICS:
        kind = pa.decimal128(38, money.PLACES) if m in audit.MONEY_METRICS else pa.int64()
        fields.append(pa.field(m, kind, nullable=False))
    schema = pa.schema(fields)
    rows = [
        {k: (v.quantize(money.QUANTUM) if k in audit.MONEY_METRICS else v) for k, v in g.items()}
        for g in groups
    ]
    try:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e}") from None
