"""`recorder reconcile FILE...`: recorded usage against a provider's usage export.

The export is what the provider returns: its usage and cost API responses (JSON
pages, files or directories), their flattened CSV, or the recorder's own CSV;
``--fetch`` asks the APIs itself (:mod:`recorder.billing`). ``--keys`` maps the
provider's key ids to the recorded fingerprints from its list-keys response.

Prints the (day, model, key or project) groups whose figures differ beyond the
tolerance, each with the recorded and exported figures, the difference, and the
streams that may explain it (``--all``: every group). Exit status: 0 when every
group is within tolerance, 1 when some differ, 2 when the comparison could not
be made (a file that cannot be read, a bad option, no database). A summary, with
the tolerance applied and the batch traffic left out, goes to standard error.
"""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from recorder.billing import fetch, key_hints
from recorder.billing.comparison import DIMENSIONS, Result, Tolerance, reconcile
from recorder.billing.export_model import FIGURES, Export, export_period
from recorder.billing.exports import read_exports
from recorder.billing.id_mapping import IdMapping, read_mapping
from recorder.billing.reconcile_report import result_document
from recorder.cli.db import CliError, add_db_option, db_url
from recorder.cli.render import add_format_option, add_table_options, default_format, table, to_json
from recorder.cli.subcommands import Subcommands
from recorder.core import money
from recorder.core.errors import RecorderError
from recorder.store.queries import parse_when
from recorder.store.reading import reading_store
from recorder.store.reconcile_sql import read_streams

FORMATS = ("table", "json", "csv")


def _percent(text: str) -> Decimal:
    value = text.strip()
    try:
        number = Decimal(value.removesuffix("%"))
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not number.is_finite() or number < 0:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}")
    return number / 100


def _usd(text: str) -> Decimal:
    try:
        number = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not an amount: {text!r}") from None
    if not number.is_finite() or number < 0:
        raise argparse.ArgumentTypeError(f"not an amount: {text!r}")
    return number


def _count(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r}")
    return number


def add_parser(sub: Subcommands) -> None:
    """Register the `reconcile` command."""
    p = sub.add_parser(
        "reconcile",
        help="recorded usage against a provider's usage export",
        description="Compare recorded usage with the provider's usage and cost API "
        "responses (as returned, or --fetch), or a usage export (CSV), per day, model and "
        "key or project; print the differences beyond the tolerance with the streams that "
        "explain them. Exit 0: reconciled; 1: differences found; 2: could not compare.",
    )
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="usage export(s) or directories of them: the providers' usage and cost API "
        "responses as returned (JSON, one page or many), their flattened CSV, or the "
        "recorder's CSV format (docs/billing.md)",
    )
    p.add_argument(
        "--fetch",
        choices=fetch.names(),
        help="ask the provider's usage and cost APIs for the period (--since, --until), "
        "paging through, with the admin key in OPENAI_ADMIN_KEY / ANTHROPIC_ADMIN_KEY",
    )
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="with --fetch: the API's base URL (default the provider's; https, or plain "
        "http to this machine only)",
    )
    p.add_argument(
        "--keys",
        action="append",
        metavar="KEYS.json",
        help="the provider's list-keys response as returned (OpenAI admin_api_keys or "
        "project api_keys, Anthropic api_keys): maps its key ids to the recorded key "
        "fingerprints by the last characters both show (repeatable)",
    )
    p.add_argument(
        "--mapping",
        metavar="FILE",
        help="JSON or CSV mapping the provider's key / project ids to api_key_id / project",
    )
    _add_comparison_options(p)
    add_db_option(p)
    add_format_option(p, FORMATS)
    add_table_options(p)
    p.set_defaults(func=run)


def _add_comparison_options(p: argparse.ArgumentParser) -> None:
    """How the recorded usage is grouped and compared with the export."""
    p.add_argument(
        "--by",
        choices=("auto", *DIMENSIONS),
        default="auto",
        help="third grouping key (default auto: key if the export names keys, else project)",
    )
    p.add_argument(
        "--tolerance",
        type=_percent,
        default=Decimal("0.02"),
        metavar="PCT",
        help="relative tolerance, of the larger side (default 2%%)",
    )
    p.add_argument(
        "--tolerance-tokens",
        type=_count,
        default=0,
        metavar="N",
        help="and absolute: differences of at most N tokens (or requests) pass (default 0)",
    )
    p.add_argument(
        "--tolerance-usd",
        type=_usd,
        default=Decimal("0.01"),
        metavar="USD",
        help="and absolute for cost (default 0.01)",
    )
    p.add_argument(
        "--since", metavar="TIME", help="recorded streams from (default: the export's first day)"
    )
    p.add_argument(
        "--until", metavar="TIME", help="recorded streams before (default: after its last day)"
    )
    p.add_argument(
        "--exact-models",
        action="store_true",
        help="compare model names as they are (default: without snapshot dates or prefixes)",
    )
    p.add_argument("--all", action="store_true", help="print every group, not only differences")
    p.add_argument(
        "--max-streams",
        type=_count,
        default=50,
        metavar="N",
        help="list at most N explaining streams per group (default 50)",
    )


def run(args: argparse.Namespace) -> int:
    """Execute `recorder reconcile`: 0 reconciled, 1 differences, 2 could not compare."""
    try:
        return _run(args)
    except RecorderError as e:
        e.exit_code = 2  # 1 says the bill differs: any failure is "could not compare"
        raise


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise CliError(f"cannot read {path}: {reason or e}") from None


def _run(args: argparse.Namespace) -> int:
    if not args.files and not args.fetch:
        raise CliError("give export FILEs (or directories of pages), or --fetch PROVIDER")
    fetched: list[tuple[str, str]] = []
    if args.fetch:
        if not args.since:
            raise CliError("--fetch needs --since (and takes --until, default now)")
        start = parse_when(args.since)
        end = parse_when(args.until) if args.until else datetime.now(UTC)
        key = fetch.admin_key(args.fetch)
        fetched = fetch.fetch(args.fetch, start, end, admin_key=key, base_url=args.base_url)
    elif args.base_url:
        raise CliError("--base-url goes with --fetch")
    export = read_exports(args.files, _read, fetched)
    mapping = read_mapping(_read(args.mapping), source=args.mapping) if args.mapping else None
    provider_keys = [
        k for f in args.keys or () for k in key_hints.read_key_list(_read(f), source=f)
    ]
    period = export_period(export)
    since = parse_when(args.since) if args.since else (period[0] if period else None)
    until = parse_when(args.until) if args.until else (period[1] if period else None)
    if since is None or until is None:
        raise CliError("the export has no rows: give --since and --until")
    with reading_store(db_url(args)) as engine:
        streams = read_streams(engine, since, until, export.providers)
    key_lines: list[str] = []
    if provider_keys:
        match = key_hints.match_keys(provider_keys, {s.api_key_id for s in streams})
        mapping = mapping or IdMapping()
        for provider_id, fp in match.keys.items():
            mapping.keys.setdefault(provider_id, fp)  # --mapping, if it names one, wins
        key_lines = key_hints.describe(match)
    tolerance = Tolerance(args.tolerance, args.tolerance_tokens, args.tolerance_usd)
    result = reconcile(
        export,
        streams,
        mapping=mapping,
        by=args.by,
        tolerance=tolerance,
        exact_models=args.exact_models,
    )
    docs = result_document(result, include_all=args.all, max_streams=args.max_streams)
    fmt = default_format(args.format)
    if fmt == "json":
        sys.stdout.write(to_json(docs) + "\n")
    elif fmt == "csv":
        _write_csv(docs, result)
    else:
        sys.stdout.write(render_table(docs, result) + "\n")
    _summary(export, result, len(streams), key_lines)
    return 1 if result.differing else 0


def batch_line(result: Result) -> str | None:
    """The Batch API traffic the export reports, left out of the comparison."""
    if not result.batch_rows:
        return None
    figures = ", ".join(
        f"{f} {money.exact(v) if isinstance(v, Decimal) else v}"
        for f, v in result.batch_total.items()
    )
    rows = f"{result.batch_rows} row{'' if result.batch_rows == 1 else 's'}"
    return f"batch traffic (not proxied, left out of the comparison): {rows}" + (
        f"; {figures}" if figures else ""
    )


def _summary(export: Export, result: Result, streams: int, key_lines: list[str]) -> None:
    err = sys.stderr
    n = len(result.differing)
    print(
        f"recorder reconcile: {export.format} export, {len(export.rows)} rows"
        + (f" ({result.batch_rows} batch)" if result.batch_rows else "")
        + f"; {streams} recorded streams; {len(result.groups)} "
        + ("group" if len(result.groups) == 1 else "groups")
        + " by day, model"
        + ("" if result.by == "none" else f", {result.by}")
        + f"; {n} beyond tolerance ({result.tolerance.describe()})",
        file=err,
    )
    batch = batch_line(result)
    if batch:
        print(f"recorder reconcile: {batch}", file=err)
    for line in [*export.notes, *key_lines]:
        print(f"recorder reconcile: {line}", file=err)
    missing = ", ".join(f for f in FIGURES if f not in result.figures)
    if missing:
        print(f"recorder reconcile: the export does not cover {missing}", file=err)
    for kind, ids in (("key", result.unmapped_keys), ("project", result.unmapped_projects)):
        if ids:
            print(
                f"recorder reconcile: {kind} ids the mapping does not name: "
                + ", ".join(sorted(ids)),
                file=err,
            )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:+d}"
    return str(value)


def _signed(amount: str) -> str:
    return amount if amount.startswith("-") else "+" + amount


def _footer(result: Result) -> list[str]:
    lines = [f"({result.tolerance.describe()})"]
    batch = batch_line(result)
    if batch:
        lines.append(f"({batch})")
    return lines


def render_table(docs: list[dict[str, Any]], result: Result) -> str:
    """One line per group and figure, then the explaining streams, indented; the
    tolerance applied and the batch traffic left out, last."""
    if not docs:
        return "\n".join(["(no differences beyond tolerance)", *_footer(result)])
    who = [] if result.by == "none" else [result.by]
    columns = ["day", "model", *who, "figure", "recorded", "exported", "difference", "streams"]
    rows = []
    for doc in docs:
        shown = doc["beyond_tolerance"] or list(result.figures)
        for i, f in enumerate(shown):
            diff = doc["difference"][f]
            row = {
                "day": doc["day"] if i == 0 else "",
                "model": doc["model"] if i == 0 else "",
                "figure": f,
                "recorded": doc["recorded"][f],
                "exported": doc["exported"][f],
                "difference": _cell(diff) if f != "cost_usd" or diff is None else _signed(diff),
                "streams": len(doc["streams"]) + doc["streams_omitted"] if i == 0 else "",
            }
            if who:
                row[who[0]] = doc[who[0]] if i == 0 else ""
            rows.append(row)
    lines = [table(rows, columns)]
    for doc in docs:
        if doc["streams"]:
            label = " ".join(str(doc[k]) for k in ("day", "model", *who))
            lines.append(f"\n{label}:")
            for s in doc["streams"]:
                lines.append(
                    f"  {s['id']}  {s['outcome']}  in {s['input_tokens']}"
                    f"  out {s['output_tokens']}  ({s['why']})"
                )
            if doc["streams_omitted"]:
                lines.append(f"  ... and {doc['streams_omitted']} more")
    lines.append("")
    lines.extend(_footer(result))
    return "\n".join(lines)


def _write_csv(docs: list[dict[str, Any]], result: Result) -> None:
    who = [] if result.by == "none" else [result.by]
    columns = ["day", "model", *who]
    for side in ("recorded", "exported", "difference"):
        columns += [f"{side}_{f}" for f in result.figures]
    columns += ["beyond_tolerance", "stream_ids"]
    writer = csv.DictWriter(sys.stdout, fieldnames=columns)
    writer.writeheader()
    for doc in docs:
        row: dict[str, Any] = {k: doc.get(k) for k in ("day", "model", *who)}
        for side in ("recorded", "exported", "difference"):
            for f in result.figures:
                row[f"{side}_{f}"] = doc[side][f]
        row["beyond_tolerance"] = " ".join(doc["beyond_tolerance"])
        row["stream_ids"] = " ".join(s["id"] for s in doc["streams"])
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
