"""`recorder replay FILE --endpoint E`: meter a captured SSE body offline.

A body alone cannot tell timings, stalls, the HTTP status or the key: those
fields are null. Unreported output is estimated from what the body carried and
the stream is costed with the price table, as the proxy would. ``outcome`` is
judged from the body alone, so a body without its terminal event is ``truncated``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recorder.cli.render import emit
from recorder.core.billing import complete_usage
from recorder.core.meter import StreamMeter
from recorder.core.pricing import PriceTable, PriceTableError
from recorder.core.protocols import ENDPOINTS
from recorder.core.record import StreamRecord
from recorder.prices import load_price_file

READ_SIZE = 64 * 1024


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `replay` command."""
    p = sub.add_parser("replay", help="meter a captured SSE body offline and print its record")
    p.add_argument("file", help="the captured response body ('-' for standard input)")
    p.add_argument("--endpoint", required=True, choices=ENDPOINTS, help="protocol of the body")
    p.add_argument("--prices", metavar="FILE", help="price table (default: the shipped one)")
    p.add_argument(
        "--format",
        choices=("json", "table"),
        default=None,
        help="output format (default: table on a terminal, json otherwise)",
    )
    p.set_defaults(func=run)


def replay_stream(
    stream: object, endpoint: str, *, prices: PriceTable | None = None
) -> StreamRecord:
    """Meter a readable binary stream as one SSE body (no timings).

    With ``prices``, the record is completed for billing as the proxy would:
    unreported output estimated from what the body carried (there is no request,
    so unreported input stays unknown), and costed.
    """
    meter = StreamMeter(endpoint, record=StreamRecord(http_status=None))
    read = stream.read  # type: ignore[attr-defined]
    while chunk := read(READ_SIZE):
        meter.feed(chunk)
    record = meter.finish()
    record.events = meter.events
    record.keepalives = meter.keepalives
    if prices is not None:
        complete_usage(record, meter.interpreter.obs, None, prices, None, learn=False)
    return record


def run(args: argparse.Namespace) -> int:
    """Execute `recorder replay`."""
    try:
        prices = load_price_file(args.prices)
    except PriceTableError as e:
        print(f"recorder replay: --prices {e}", file=sys.stderr)
        return 2
    try:
        if args.file == "-":
            record = replay_stream(sys.stdin.buffer, args.endpoint, prices=prices)
        else:
            with Path(args.file).open("rb") as fh:
                record = replay_stream(fh, args.endpoint, prices=prices)
    except OSError as e:
        print(f"recorder replay: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    emit(record.to_dict(), args.format, single=True)
    return 0
