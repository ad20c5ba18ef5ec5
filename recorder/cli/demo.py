"""`recorder demo`: simulator + proxy on free ports + traffic through the official
SDKs, then a summary of what was recorded and where to look next."""

from __future__ import annotations

import argparse
import os
import sys

from recorder.cli.render import emit

COLUMNS = (
    "endpoint",
    "model",
    "outcome",
    "finish_reason",
    "ttft_ms",
    "duration_ms",
    "events",
    "keepalives",
    "stalls",
    "output_chars",
    "input_tokens",
    "output_tokens",
    "usage_source",
    "cost_usd",
)


DEMO_DB = "sqlite:///recorder-demo.db"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `demo` command."""
    p = sub.add_parser(
        "demo",
        help="simulator + proxy on free ports + traffic through the official SDKs, then a summary",
        description=__doc__,
    )
    p.add_argument(
        "--db",
        default=DEMO_DB,
        help=f"where the demo's records go (default {DEMO_DB}, apart from your own)",
    )
    p.add_argument("--format", choices=("table", "json", "csv"), default=None)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder demo`."""
    from recorder.cli.proxy import open_store
    from recorder.demo import SCENARIOS, run_demo
    from recorder.store import StoreError
    from recorder.store.identity import default_spool_dir

    try:
        spool_dir = default_spool_dir(args.db)
    except StoreError as e:
        print(f"recorder demo: --db {e}", file=sys.stderr)
        return 2
    opened = open_store(args.db, spool_dir, "demo")
    if opened is None:
        return 1
    secret, sink = opened
    chatty = (args.format is None and sys.stdout.isatty()) or args.format == "table"
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if chatty else None
    if say:
        say(f"recorder demo: {len(SCENARIOS)} requests through the official SDKs, via the proxy")
    confdir = os.path.expanduser("~/.mitmproxy")
    records = run_demo(sink, secret, confdir=confdir, progress=say)
    rows = [r.to_dict() for r in records]
    emit(rows, args.format, columns=COLUMNS)
    if say:
        stats = sink.stats()
        db = "" if args.db == DEMO_DB else f" --db {args.db}"
        first = records[3].id if len(records) > 3 else "ID"
        say(
            f"\n{len(records)} streams recorded ({stats['written']} written to {args.db},"
            f" {stats['spooled']} spooled).\n"
            "Where to look next:\n"
            f"  the same, from the database:   recorder sessions --db {args.db}\n"
            f"  one stream and its timeline:   recorder show {first}{db or ' --db ' + args.db}\n"
            "  your own traffic:              scripts/run, then point your SDK at it (README)\n"
            "  metrics of `recorder proxy`:   curl -s 127.0.0.1:9464/metrics\n"
            "  what each field means:         docs/record.md"
        )
    return 0
