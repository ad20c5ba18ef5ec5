"""`recorder demo`: simulator + proxy on free ports + traffic through the official
SDKs, then a summary of what was recorded and where to look next.

The demo is for people: it prints its table and hints also when its output is
piped (``--format json`` or ``csv`` for the records themselves). Each run starts
fresh: the records an earlier demo sent with the demo's key are removed first
(``--keep`` appends instead); nothing else in the database is touched."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from recorder.cli.db import CliError
from recorder.cli.demo_time import DEMO_STALL_AFTER
from recorder.cli.extras import require
from recorder.cli.render import add_table_options, command, emit, fold
from recorder.cli.subcommands import Subcommands

# Most useful first: a narrow terminal keeps the first ones (render.table).
COLUMNS = (
    "id",
    "model",
    "outcome",
    "ttft_ms",
    "stalls",
    "keepalives",
    "output_tokens",
    "usage_source",
    "cost_usd",
    "endpoint",
    "finish_reason",
    "duration_ms",
    "events",
    "output_chars",
    "input_tokens",
)


DEMO_DB = "sqlite:///recorder-demo.db"

# `demo --help` shows this as plain text (the module's docstring is for the code)
DESCRIPTION = (
    "A simulator and a recording proxy on free ports, some fifteen requests through the"
    " official OpenAI, Anthropic, AWS and Google SDKs, then a table of what was recorded"
    " and where to look next. The table and hints are printed also when the output is piped"
    " (--format json or csv for the records themselves). Each run starts fresh: the"
    " records an earlier demo sent with the demo's key are removed first (--keep"
    " appends instead); nothing else in the database is touched. Time is scaled: a"
    f" stall is {DEMO_STALL_AFTER:g} s of output silence here, 30 s by default."
)


def add_parser(sub: Subcommands) -> None:
    """Register the `demo` command."""
    p = sub.add_parser(
        "demo",
        help="simulator + proxy on free ports + traffic through the official SDKs, then a summary",
        description=DESCRIPTION,
    )
    p.add_argument(
        "--db",
        default=DEMO_DB,
        help=f"where the demo's records go (default {DEMO_DB}, apart from your own)",
    )
    p.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (default, also when piped) and hints; json or csv: the records alone",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="append to the records of earlier demos (default: start fresh)",
    )
    add_table_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder demo`."""
    require("openai", "anthropic", "boto3", "google.genai")
    from recorder.cli.proxy import open_store
    from recorder.cli.scenarios import DEMO_KEY, REQUESTS, run_demo
    from recorder.core.keys import fingerprint
    from recorder.store import StoreError
    from recorder.store.identity import default_spool_dir

    try:
        spool_dir = default_spool_dir(args.db)
    except StoreError as e:
        raise CliError(f"--db {e}", 2) from None
    opened = open_store(args.db, spool_dir, "demo")
    if opened is None:
        return 1
    secret, sink = opened
    chatty = args.format == "table"

    def say(line: str) -> None:
        if chatty:
            print(fold(line), file=sys.stderr, flush=True)

    if not args.keep:
        removed = _start_fresh(args.db, fingerprint(DEMO_KEY, secret))
        if removed:
            say(
                f"recorder demo: starting fresh, {removed} records of earlier demos removed"
                " (--keep appends)"
            )
    say(f"recorder demo: {REQUESTS} requests through the official SDKs, via the proxy")
    confdir = os.path.expanduser("~/.mitmproxy")
    try:
        records = run_demo(sink, secret, confdir=confdir, progress=say if chatty else None)
    except KeyboardInterrupt:
        sink.close()
        stats = sink.stats()
        print(
            f"\nrecorder demo: interrupted; {stats['written']} records written to {args.db}"
            f" ({stats['spooled']} spooled)",
            file=sys.stderr,
        )
        return 130
    rows = [r.to_dict() for r in records]
    emit(rows, args.format, columns=COLUMNS)
    if chatty:
        stats = sink.stats()
        db = f" --db {args.db}"
        # the end of an id is enough for `show` (ids of one millisecond share their start)
        first = (records[3].id or "ID")[-12:] if len(records) > 3 else "ID"
        # only what exists once the demo is over (its proxy and /metrics are gone)
        hints = [
            ("the same, from the database", [command(f"sessions{db}")]),
            ("one stream and its timeline", [command(f"show {first}{db}")]),
            ("what it cost, by model", [command(f"audit --by model{db}")]),
            ("what the interruptions cost", [command(f"audit --interruptions --by model{db}")]),
            (
                "your own traffic (README: pointing the SDKs at it), with /metrics on"
                " 127.0.0.1:9464 while it runs",
                [command("proxy")],
            ),
            ("what each field means", ["docs/record.md"]),
        ]
        say(
            f"\n{len(records)} streams recorded ({stats['written']} written to {args.db},"
            f" {stats['spooled']} spooled)."
        )
        say(interruption_lines(rows))
        say("Where to look next:")
        for label, lines in hints:
            say(f"  {label}")
            for line in lines:
                say(f"    {line}")
    return 0


def interruption_lines(rows: list[dict[str, Any]]) -> str:
    """What the demo's interruptions cost, in a sentence or two: the attempts that
    did not complete, their billed cost and its share of the demo's spend, and
    the input their retries sent again (`recorder audit --interruptions`)."""
    from recorder.billing.interruptions import summary
    from recorder.core.money import display
    from recorder.core.price_files import shipped_prices

    total = summary(rows, shipped_prices())
    share = total["interruption_share"]
    estimated = total["estimated_interruption_cost_usd"]
    line = (
        f"What the interruptions cost: {total['interrupted_attempts']} requests did not"
        f" complete, billed ${display(total['interruption_cost_usd'])}"
        f" (${display(estimated)} of it estimated)"
    )
    if share is not None:
        line += f", {share * 100:.1f}% of the demo's ${display(total['cost_usd'])}"
    line += "."
    retries = total["retries"]
    if retries:
        line += (
            f" {retries} {'retry' if retries == 1 else 'retries'} sent"
            f" {total['resent_input_tokens']} input tokens again"
            f" (${display(total['resent_input_cost_usd'])})."
        )
    return line


def _start_fresh(url: str, demo_key_id: str) -> int:
    """Remove the records earlier demos sent with the demo key; 0 when the store
    cannot be reached (the run still goes on: its records are spooled)."""
    from sqlalchemy.exc import SQLAlchemyError

    from recorder.store.engine import make_engine
    from recorder.store.queries import forget_key

    engine = make_engine(url)
    try:
        return forget_key(engine, demo_key_id)
    except SQLAlchemyError:
        return 0
    finally:
        engine.dispose()
