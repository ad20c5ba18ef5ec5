"""`recorder simulate`: run the local LLM upstream until SIGINT/SIGTERM.

The simulator speaks OpenAI Chat Completions, OpenAI Responses and Anthropic
Messages, with faults chosen per request (docs/simulator.md). It listens on
127.0.0.1:9000 by default, the upstream that the usual reverse-mode
example names (``--mode reverse:http://127.0.0.1:9000@8081``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys

from recorder.cli.subcommands import Subcommands
from recorder.simulate import (
    FAULT_HELP,
    FaultError,
    SentRecord,
    Simulator,
    parse_faults,
    server_context,
)

DEFAULT_PORT = 9000


def add_parser(sub: Subcommands) -> None:
    """Register the `simulate` command."""
    p = sub.add_parser(
        "simulate",
        help="run a local upstream that streams the LLM protocols, with faults on request",
        description=(
            "A local LLM upstream: /v1/chat/completions, /v1/responses and /v1/messages, "
            "Amazon Bedrock's /model/{id}/converse(-stream) and "
            "/model/{id}/invoke(-with-response-stream), Gemini's "
            "/v1beta/models/{model}:streamGenerateContent (and :generateContent) and "
            "/v1beta/interactions, streamed or not, "
            "with faults chosen per request by the x-sim-fault header "
            "(comma-separated) or a model-name suffix (gpt-4o+keepalive=0.5+stall=2)."
        ),
        epilog="faults:\n" + FAULT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free port)",
    )
    p.add_argument(
        "--fault",
        default="",
        metavar="SPEC",
        help="faults applied to every request, under the header's and the model's",
    )
    p.add_argument(
        "--tls-cert",
        "--certfile",
        dest="certfile",
        metavar="PEM",
        help="serve HTTPS (HTTP/1.1) with this certificate, its chain after it",
    )
    p.add_argument(
        "--tls-key",
        "--keyfile",
        dest="keyfile",
        metavar="PEM",
        help="private key of --tls-cert (if not in the same file)",
    )
    p.add_argument("--quiet", action="store_true", help="do not print one line per request")
    p.set_defaults(func=run)


def _line(rec: SentRecord) -> None:
    mode = "stream" if rec.streamed else "json"
    faults = f" faults={rec.faults}" if rec.faults else ""
    print(
        f"{rec.request_id} {rec.endpoint} {rec.requested_model} {mode} "
        f"status={rec.http_status} outcome={rec.outcome} events={rec.events} "
        f"keepalives={rec.keepalives} output_chars={rec.output_chars}{faults}",
        file=sys.stderr,
        flush=True,
    )


async def serve(args: argparse.Namespace) -> int:
    """Listen until SIGINT or SIGTERM."""
    tls = None
    if args.certfile:
        try:
            tls = server_context(args.certfile, args.keyfile)
        except (OSError, ssl.SSLError) as e:
            print(f"recorder simulate: --tls-cert/--tls-key: {e}", file=sys.stderr)
            return 2
    elif args.keyfile:
        print("recorder simulate: --tls-key needs --tls-cert", file=sys.stderr)
        return 2
    sim = Simulator(
        args.host,
        args.port,
        tls,
        default_faults=args.fault,
        log=None if args.quiet else _line,
    )
    try:
        await sim.start()
    except OSError as e:
        print(f"recorder simulate: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"recorder simulate: listening on {sim.url}", flush=True)
    print(f"  OpenAI base URL:    {sim.openai_base_url}", flush=True)
    print(f"  Anthropic base URL: {sim.url}", flush=True)
    print("  faults: x-sim-fault header (a,b=1) or model suffix (gpt-4o+a+b=1):", flush=True)
    for line in FAULT_HELP.splitlines():
        print(f"    {line}", flush=True)
    try:
        await stop.wait()
    finally:
        await sim.stop()
    print("recorder simulate: stopped", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Execute `recorder simulate`."""
    try:
        parse_faults(args.fault)
    except FaultError as e:
        print(f"recorder simulate: --fault: {e}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"recorder simulate: --port {args.port} is not a port", file=sys.stderr)
        return 2
    return asyncio.run(serve(args))
