"""`recorder demo`: simulator + proxy on free ports + traffic through the official
SDKs, then a summary of what was recorded and where to look next."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from recorder.cli.render import emit
from recorder.keys import load_secret
from recorder.sinks import JsonlSink

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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `demo` command."""
    p = sub.add_parser(
        "demo",
        help="simulator + proxy on free ports + traffic through the official SDKs, then a summary",
        description=__doc__,
    )
    p.add_argument(
        "--jsonl",
        metavar="FILE",
        default="recorder-demo.jsonl",
        help="where the demo's records are appended (default recorder-demo.jsonl)",
    )
    p.add_argument("--format", choices=("table", "json", "csv"), default=None)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder demo`."""
    from recorder.demo import SCENARIOS, run_demo

    path = Path(args.jsonl)
    try:
        secret = load_secret(path.resolve().parent / ".recorder-key-secret")
        sink = JsonlSink(path)
    except OSError as e:
        print(f"recorder demo: {e}", file=sys.stderr)
        return 1
    chatty = (args.format is None and sys.stdout.isatty()) or args.format == "table"
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if chatty else None
    if say:
        say(f"recorder demo: {len(SCENARIOS)} requests through the official SDKs, via the proxy")
    confdir = os.path.expanduser("~/.mitmproxy")
    records = run_demo(sink, secret, confdir=confdir, progress=say)
    rows = [r.to_dict() for r in records]
    emit(rows, args.format, columns=COLUMNS)
    if say:
        say(
            f"\n{len(records)} streams recorded, appended to {path}.\n"
            "Where to look next:\n"
            f"  every field of a record:   tail -n 1 {path} | python3 -m json.tool\n"
            "  your own traffic:          scripts/run   (then point your SDK at it, see README)\n"
            "  a captured body, offline:  recorder replay FILE --endpoint messages\n"
            "  what each field means:     docs/record.md"
        )
    return 0
