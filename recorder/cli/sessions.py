"""`recorder sessions` (recorded streams, newest first) and `recorder show ID`
(one stream in full, with a timeline of its gaps and stalls).

``--format json`` prints one document: an array of streams for ``sessions``,
one object with ``gaps`` for ``show``. ``csv`` has every field as a column.
``table`` (the default on a terminal) is for reading: tokens that were
estimated, not reported, carry a ``~``.
"""

from __future__ import annotations

import argparse
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from recorder.cli.db import CliError, add_db_option, add_filter_options, db_url, filter_from
from recorder.cli.extras import require
from recorder.cli.render import (
    add_format_option,
    add_table_options,
    default_format,
    emit,
    fold,
    table,
    vertical,
)
from recorder.cli.subcommands import Subcommands
from recorder.core import money
from recorder.core.captured import PackedBody
from recorder.core.record import FIELDS, StreamRecord
from recorder.core.retries import did_not_complete
from recorder.core.short_id import short_id
from recorder.store.queries import (
    QueryError,
    count_sessions,
    get_body,
    get_stream,
    list_sessions,
    retry_chain,
)
from recorder.store.reading import reading_store

FORMATS = ("table", "json", "csv")
# Most useful first: a narrow terminal keeps the first ones (render.table), and
# always those of KEEP: what tells how a stream went and what it cost.
TABLE_COLUMNS = (
    "id",
    "model",
    "outcome",
    "stalls",
    "cost_usd",
    "ttft_ms",
    "output",
    "started_at",
    "duration_ms",
    "input",
    "endpoint",
    "key",
)
KEEP = ("id", "model", "outcome", "stalls", "cost_usd")
# the table's short names of record fields (`--columns` takes them in every format)
ALIASES = {"input": "input_tokens", "output": "output_tokens", "key": "api_key_id"}
LEGEND = "~ estimated: not reported by the provider, counted from what was streamed"
TIMELINE_WIDTH = 60
# One lane per kind of gap, with the mark drawn over its extent.
LANES = (("stall", "#"), ("keepalive", "~"), ("silence", "!"))


def add_parser(sub: Subcommands) -> None:
    """Register the `sessions` and `show` commands."""
    p = sub.add_parser("sessions", help="list recorded streams, newest first")
    add_filter_options(p)
    p.add_argument(
        "--limit", type=int, default=50, help="at most this many streams (default 50; 0: all)"
    )
    _common(p)
    add_table_options(p)
    p.set_defaults(func=run)

    s = sub.add_parser("show", help="one stream in full, with its timeline of gaps and stalls")
    s.add_argument(
        "id",
        help="the stream's id, its short form (as the console, sessions and top show it),"
        " or any part of it only this stream's id holds",
    )
    s.add_argument(
        "--plot",
        metavar="FILE",
        type=Path,
        help="draw the stream's timeline to FILE (.svg, .png or .pdf) instead of printing it",
    )
    _common(s)
    s.set_defaults(func=run)


def _common(p: argparse.ArgumentParser) -> None:
    add_db_option(p)
    add_format_option(p, FORMATS)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder sessions` or `recorder show`."""
    show = getattr(args, "id", None) is not None
    return run_show(args) if show else run_sessions(args)


def run_sessions(args: argparse.Namespace) -> int:
    """`recorder sessions`: list, filter, render."""
    if args.limit < 0:
        raise CliError("--limit must be 0 (all) or more", 2)
    f = filter_from(args, limit=args.limit or None)
    fmt = default_format(args.format)
    with reading_store(db_url(args)) as engine:
        records = list_sessions(engine, f)
        matching = count_sessions(engine, f) if fmt == "table" and f.limit == len(records) else None
    if fmt == "table":
        rows = [table_row(r) for r in records]
        text = table(rows, TABLE_COLUMNS, keep=KEEP, more=FIELDS)
        notes = []
        if matching is not None and matching > len(records):
            notes.append(
                f"{len(records)} of {matching} streams shown, newest first"
                f" (--limit N for more, 0 for all)"
            )
        if any(str(row[c]).startswith("~") for row in rows for c in ("input", "output")):
            notes.append(LEGEND)
        if records:
            sys.stdout.write("\n".join([text, *map(fold, notes)]) + "\n")
        else:
            print("(no streams)", file=sys.stderr)
    else:
        emit([r.to_dict() for r in records], fmt, columns=FIELDS, aliases=ALIASES)
    return 0


def run_show(args: argparse.Namespace) -> int:
    """`recorder show ID`: one stream with its gaps."""
    if args.plot is not None:
        require("matplotlib", what="--plot")
    body = None
    with reading_store(db_url(args)) as engine:
        record = get_stream(engine, args.id)
        if args.plot is not None and record.id is not None:
            body = _body_if_any(engine, record.id)
        chain = retry_chain(engine, record) if record.attempt is not None else [record]
    if args.plot is not None:
        return _plot(record, body, args.plot)
    fmt = default_format(args.format)
    if fmt == "json":
        doc = record.to_dict(with_gaps=True)
        if len(chain) > 1:
            doc["retry_chain"] = [chain_row(r) for r in chain]
        emit(doc, fmt, single=True)
    elif fmt == "csv":
        emit(record.to_dict(with_gaps=True), fmt, single=True, columns=(*FIELDS, "gaps"))
    else:
        parts = [vertical(record.to_dict()), timeline(record)]
        timing = provider_timing(record)
        if timing:
            parts.append(timing)
        if len(chain) > 1:
            parts.append(chain_text(chain, record))
        sys.stdout.write("\n\n".join(parts) + "\n")
    return 0


# what `recorder show` says of each attempt of a retry chain
CHAIN_FIELDS = ("attempt", "id", "started_at", "outcome", "http_status", "usage_source", "cost_usd")


def chain_row(r: StreamRecord) -> dict[str, Any]:
    """One attempt of a retry chain: how it ended and what it cost."""
    return {name: getattr(r, name) for name in CHAIN_FIELDS}


def chain_text(chain: list[StreamRecord], shown: StreamRecord) -> str:
    """The retry chain as a table, the attempt shown marked, with what the
    attempts that did not complete cost together."""
    rows = []
    for r in chain:
        row = {
            "": ">" if r.id == shown.id else "",
            "attempt": r.attempt,
            "id": short_id(r.id or ""),
            "started_at": r.started_at,
            "outcome": r.outcome,
            "status": r.http_status,
            "cost_usd": None if r.cost_usd is None else money.display(r.cost_usd),
            "usage": r.usage_source,
        }
        rows.append(row)
    failed = [r for r in chain if did_not_complete(r.outcome, r.http_status)]
    spent = sum((Decimal(r.cost_usd) for r in failed if r.cost_usd), Decimal(0))
    head = f"retry chain: {len(chain)} attempts"
    note = (
        f"the {len(failed)} that did not complete cost ${money.display(str(spent))}"
        if failed
        else "every attempt completed"
    )
    return "\n".join(
        [head, table(rows, tuple(rows[0]), keep=("attempt", "outcome", "cost_usd")), note]
    )


def provider_timing(r: StreamRecord) -> str:
    """The provider's own timing beside the measured one (Amazon Bedrock), and their
    difference: what the network and any queue before the provider took."""
    lines = []
    for what, ours, theirs in (
        ("duration", r.duration_ms, r.provider_latency_ms),
        ("first byte", r.ttft_ms, r.provider_first_byte_ms),
    ):
        if theirs is None:
            continue
        line = f"{what:<12}provider {_ms(theirs):>10}"
        if ours is not None:
            gap = ours - theirs
            sign = "+" if gap >= 0 else "-"
            line += f"   measured {_ms(ours):>10}   difference {sign}{_ms(abs(gap))}"
        lines.append(line)
    if not lines:
        return ""
    return "\n".join(["provider timing (its own figures beside the recorder's)", *lines])


def _body_if_any(engine: Engine, ident: str) -> PackedBody | None:
    try:
        return get_body(engine, ident)[1]
    except QueryError:  # no body captured: the picture shows phases and gaps only
        return None


def _plot(record: StreamRecord, body: PackedBody | None, path: Path) -> int:
    from recorder.cli.plot import FORMATS, arrivals, draw

    if path.suffix.lower() not in FORMATS:
        raise CliError(f"--plot {path}: give a .svg, .png or .pdf file", 2)
    seen = arrivals(body, record.endpoint) if body is not None and record.endpoint else None
    try:
        draw(record, path, seen)
    except OSError as e:
        raise CliError(f"--plot {path}: {e.strerror or e}") from None
    what = "with its events" if seen is not None else "phases and gaps (no captured body)"
    print(f"recorder show: {record.id} drawn to {path}, {what}", file=sys.stderr)
    return 0


def _tokens(value: int | None, source: str) -> str | None:
    if value is None:
        return None
    return f"~{value}" if source == "estimated" else str(value)


def table_row(r: StreamRecord) -> dict[str, Any]:
    """The row of `recorder sessions --format table`: every field of the record
    (``--columns`` may choose any), those of TABLE_COLUMNS in their compact form."""
    return {
        **r.to_dict(),
        "id": short_id(r.id),  # as every screen shows it; `show` takes it
        # month-day and time: the year is rarely news (the full time is in JSON/CSV)
        "started_at": (r.started_at or "").replace("T", " ")[5:19],
        "endpoint": r.endpoint,
        "model": r.model,
        "outcome": r.outcome,
        "ttft_ms": None if r.ttft_ms is None else round(r.ttft_ms),
        "duration_ms": None if r.duration_ms is None else round(r.duration_ms),
        "stalls": r.stalls,
        "input": _tokens(r.input_tokens, r.input_source),
        "output": _tokens(r.output_tokens, r.output_source),
        "cost_usd": None if r.cost_usd is None else money.display(r.cost_usd),
        "key": r.api_key_id,
    }


def _ms(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.1f} s"
    return f"{value:,.0f} ms"


def _span(width: int, start: float, length: float, total: float) -> range:
    a = min(width - 1, max(0, math.floor(start / total * width)))
    b = min(width, max(a + 1, math.ceil((start + length) / total * width)))
    return range(a, b)


def timeline(r: StreamRecord, width: int = TIMELINE_WIDTH) -> str:
    """The stream drawn over its duration: the wait for the first output (``.``),
    output (``=``), the ending (``X`` interrupted, ``|`` otherwise), and a lane per
    kind of gap: stalls ``#``, keepalive gaps ``~``, the longest silence ``!``."""
    ends = [g.start_ms + g.length_ms for g in r.gaps]
    total = max([r.duration_ms or 0.0, *ends])
    if total <= 0:
        return "timeline: no timings (nothing to draw)"
    label = 10
    lines = [f"{'timeline':<{label}}0{_ms(total):>{width}}"]
    out = [" "] * width
    first = r.ttft_ms
    if r.duration_ms is not None:
        end = _span(width, 0, r.duration_ms, total)
        for i in end:
            out[i] = "." if first is None or i < _span(width, first, 0, total).start else "="
        for g in r.gaps:  # a stall is no output, however long the stream around it
            if g.kind == "stall":
                for i in _span(width, g.start_ms, g.length_ms, total):
                    if i < end.stop:
                        out[i] = "#"
        out[end.stop - 1] = "X" if r.interrupted else "|"
    lines.append(f"{'stream':<{label}}" + "".join(out).rstrip())
    for kind, mark in LANES:
        lane = [" "] * width
        gaps = [g for g in r.gaps if g.kind == kind]
        for g in gaps:
            for i in _span(width, g.start_ms, g.length_ms, total):
                lane[i] = mark
        if gaps:
            lines.append(f"{kind:<{label}}" + "".join(lane).rstrip())
    ending = "X " + r.outcome if r.interrupted else "| " + r.outcome
    lines.append(
        f"{'':<{label}}. wait  = output  {ending}  # stall  ~ keepalive gap  ! longest silence"
    )
    if r.gaps:
        lines.append("")
        lines.append(f"{'gaps':<{label}}{'start':>12}  {'length':>12}")
        for g in r.gaps:
            lines.append(f"{g.kind:<{label}}{_ms(g.start_ms):>12}  {_ms(g.length_ms):>12}")
    else:
        lines.append(f"{'gaps':<{label}}none recorded")
    return "\n".join(lines)
