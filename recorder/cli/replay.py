"""`recorder replay FILE`: meter a captured SSE body offline (its protocol is told
from its first events; ``--endpoint`` overrides).
`recorder replay --id ID`: meter a body the proxy stored (``--capture-bodies``) again.
`recorder replay FILE.ws.jsonl`: meter a WebSocket capture (a connection's messages
with their times, one JSON line each: ``{"t": 0.41, "dir": "s2c", "text": "..."}``;
docs/record.md, "OpenAI over a WebSocket"): each response one record, with its timings.

A body alone cannot tell timings, stalls, the HTTP status or the key: with FILE
those fields are null. Unreported output is estimated from what the body carried
and the stream is costed with the price table, as the proxy would. ``outcome`` is
judged from the body alone, so a body without its terminal event is ``truncated``.

With ``--id`` the body comes from the database with the times its pieces arrived,
and is fed to the meter at those times (the request start is 0), with the stall
threshold the proxy used (``--stall-after`` overrides it): timings, stalls and
the outcome come out as the proxy measured them. What no body holds (the
request's model, key and counts, the HTTP status, the transport's words for an
ending) is taken from the stored record, so the two compare field for field.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import BinaryIO

from recorder.cli.db import CliError, add_db_option, db_url
from recorder.cli.render import add_format_option, emit
from recorder.cli.subcommands import Subcommands
from recorder.core.billing import complete_usage
from recorder.core.captured import BodyFormatError, remeter
from recorder.core.detect import NotSSE, detect_endpoint, is_eventstream
from recorder.core.meter import DEFAULT_STALL_AFTER_S, StreamMeter
from recorder.core.price_files import load_price_file
from recorder.core.pricing import PriceTable, PriceTableError
from recorder.core.protocols import ENDPOINTS
from recorder.core.record import StreamRecord
from recorder.core.ws_capture import (
    NotACapture,
    looks_like_capture,
    read_capture,
    replay_capture,
)
from recorder.store.queries import get_body
from recorder.store.reading import reading_store

READ_SIZE = 64 * 1024
# A WebSocket capture's name ends so (a file whose first byte is "{" is one too)
WS_SUFFIX = ".ws.jsonl"
# Enough for the first events of any body (a Responses response.created event
# echoes the request's instructions and tools, which can be long).
DETECT_SIZE = 256 * 1024
MAX_DETECT_SIZE = 4 * 1024 * 1024  # read at most this far to tell a damaged body's protocol


def add_parser(sub: Subcommands) -> None:
    """Register the `replay` command."""
    p = sub.add_parser(
        "replay",
        help="meter a captured SSE body (a file, or one the proxy stored) and print its record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", nargs="?", help="the captured response body ('-' for standard input)")
    p.add_argument(
        "--endpoint",
        choices=ENDPOINTS,
        help="protocol of the body (with FILE; default: told from its first events)",
    )
    p.add_argument(
        "--id",
        dest="stream_id",
        metavar="ID",
        help="instead of FILE: the stream whose stored body to meter again (id or prefix)",
    )
    add_db_option(p)
    p.add_argument(
        "--stall-after",
        type=float,
        metavar="SECONDS",
        help="with --id or a WebSocket capture: the stall threshold (default: the one"
        " the proxy used; 30 for a capture)",
    )
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="prices to overlay on the shipped table (its models replace the shipped ones)",
    )
    add_format_option(p, ("json", "table"))
    p.set_defaults(func=run, replay_parser=p)


def replay_stream(
    stream: object, endpoint: str, *, prices: PriceTable | None = None, head: bytes = b""
) -> StreamRecord:
    """Meter a readable binary stream as one SSE body (no timings).

    With ``prices``, the record is completed for billing as the proxy would:
    unreported output estimated from what the body carried (there is no request,
    so unreported input stays unknown), and costed.
    """
    meter = StreamMeter(endpoint, record=StreamRecord(http_status=None))
    read = stream.read  # type: ignore[attr-defined]
    start = head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    if start == b"{" and meter.interpreter.json_array:
        # one whole answer (Google's generateContent), as the proxy reads one
        meter.read_body(head + read())
        return _completed(meter, meter.finish(), prices)
    if start == b"[":
        meter.frames_json_array()  # (Google's stream without alt=sse)
    if head:
        meter.feed(head)
    while chunk := read(READ_SIZE):
        meter.feed(chunk)
    return _completed(meter, meter.finish(), prices)


def _completed(meter: StreamMeter, record: StreamRecord, prices: PriceTable | None) -> StreamRecord:
    if record.streamed:
        record.events = meter.events
        record.keepalives = meter.keepalives
    if prices is not None:
        complete_usage(record, meter.interpreter.obs, None, prices, None, learn=False)
    return record


def replay_stored(
    url: str, ident: str, *, prices: PriceTable | None, stall_after: float | None = None
) -> StreamRecord:
    """Meter the stored body of stream ``ident`` again. Raises RecorderError."""
    with reading_store(url) as engine:
        stored, body = get_body(engine, ident)
    if body.truncated:
        print(
            f"recorder replay: the stored body of {stored.id} is incomplete "
            f"(over the capture limit, or the tap gave up): it holds part of "
            f"{body.size:,} bytes, so the record cannot be reproduced exactly",
            file=sys.stderr,
        )
    try:
        return remeter(body, stored, prices=prices, stall_after=stall_after)
    except BodyFormatError as e:
        raise CliError(f"stream {stored.id}: {e}") from None


def run(args: argparse.Namespace) -> int:
    """Execute `recorder replay`."""
    usage_error = args.replay_parser.error  # prints the usage, exits 2
    if (args.file is None) == (args.stream_id is None):
        usage_error("give either FILE or --id ID")
    if args.stall_after is not None and not args.stall_after > 0:
        usage_error("--stall-after must be positive")
    try:
        prices = load_price_file(args.prices)
    except PriceTableError as e:
        raise CliError(f"--prices {e}", 2) from None
    if args.stream_id is not None:
        record = replay_stored(
            db_url(args), args.stream_id, prices=prices, stall_after=args.stall_after
        )
        emit(record.to_dict(), args.format, single=True)
        return 0
    try:
        if args.file == "-":
            stdin = sys.stdin.buffer
            head = stdin.peek(DETECT_SIZE) if hasattr(stdin, "peek") else b""
            if looks_like_capture(head):
                return _replay_websocket(stdin, "standard input", args, prices)
            record = _replay_file(sys.stdin.buffer, "standard input", args.endpoint, prices)
        else:
            with Path(args.file).open("rb") as fh:
                if args.file.endswith(WS_SUFFIX) or looks_like_capture(fh.peek(DETECT_SIZE)):
                    return _replay_websocket(fh, args.file, args, prices)
                record = _replay_file(fh, args.file, args.endpoint, prices)
    except OSError as e:
        raise CliError(f"cannot read {args.file}: {e.strerror or e}", 2) from None
    emit(record.to_dict(), args.format, single=True)
    return 0


def _replay_websocket(
    fh: BinaryIO, name: str, args: argparse.Namespace, prices: PriceTable | None
) -> int:
    """A WebSocket capture (``recorder.core.ws_capture``): every response of it one
    record, printed as a list, in the order they ended."""
    try:
        capture = read_capture(fh)
    except NotACapture as e:
        raise CliError(f"{name} is not a WebSocket capture: {e}", 2) from None
    endpoint = args.endpoint or capture.endpoint
    if endpoint not in ("responses", "realtime"):
        raise CliError(f"{name}: a WebSocket capture is of responses or realtime", 2)
    if args.endpoint is None:
        print(f"recorder replay: {name}: {endpoint} over a WebSocket", file=sys.stderr)
    if capture.skipped:
        print(f"recorder replay: {name}: {capture.skipped} line(s) skipped", file=sys.stderr)
    stall_after = args.stall_after if args.stall_after is not None else DEFAULT_STALL_AFTER_S
    records = []
    for meter, record in replay_capture(capture, endpoint, stall_after=stall_after):
        if prices is not None:
            complete_usage(record, meter.interpreter.obs, None, prices, None, learn=False)
        records.append(record.to_dict())
    emit(records, args.format)
    return 0


def _enough_to_tell(fh: BinaryIO, head: bytes) -> bytes:
    """``head`` and as much more of the body as it takes its events to tell the
    protocol (a capture damaged before its first whole line may frame nothing
    in its first bytes), up to ``MAX_DETECT_SIZE``."""
    while len(head) < MAX_DETECT_SIZE:
        try:
            if detect_endpoint(head) is not None:
                return head
        except NotSSE:
            pass
        more = fh.read(DETECT_SIZE)
        if not more:
            return head
        head += more
    return head


def _replay_file(
    fh: BinaryIO, name: str, endpoint: str | None, prices: PriceTable | None
) -> StreamRecord:
    """Meter an open body; its protocol told from its head unless given."""
    head = fh.read(DETECT_SIZE)
    if endpoint is None:
        head = _enough_to_tell(fh, head)
    try:
        found = detect_endpoint(head)
    except NotSSE as e:
        if endpoint is None:
            raise CliError(f"{name} is not an SSE body: {e}", 2) from None
        # the endpoint is given: a body cut or damaged before its first whole
        # line is still metered (truncated, its damage counted), never refused
        print(f"recorder replay: {name}: {e}; metered as {endpoint}", file=sys.stderr)
        found = None
    if endpoint is None:
        if found is None and is_eventstream(head):
            # an exception alone (throttled before the first event) is either API's
            raise CliError(
                f"{name} is an AWS event stream whose first messages name no event of"
                " ConverseStream or InvokeModelWithResponseStream (an exception alone?):"
                " give --endpoint converse or --endpoint invoke_model",
                2,
            )
        if found is None:
            raise CliError(
                f"cannot tell the protocol of {name} from its first events: "
                f"give --endpoint ({', '.join(ENDPOINTS)})",
                2,
            )
        endpoint = found
        print(f"recorder replay: {name}: {endpoint} (told from its events)", file=sys.stderr)
    return replay_stream(fh, endpoint, prices=prices, head=head)
