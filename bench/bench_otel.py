"""What one span costs, against metering its stream, in one run; and bytes per span.

Run: ``.venv/bin/python bench/bench_otel.py`` (about 20 s; ``--quick`` for a smoke run).

- **anchor**: metering one Chat Completions stream of ``--deltas`` deltas with
  ``StreamMeter`` (framing, a JSON parse per event, timing, the record), fed one
  event per piece as mitmproxy hands them over: what the recorder already spends
  on every stream.
- **span (caller)**: ``SpanExport.export`` of that stream's finished record, on the
  caller's thread (the event loop's): building the span and queueing it (that
  thread's CPU time).
- **span (all)**: the same plus what the SDK's batch thread then does with it:
  OTLP protobuf encoding of batches of 512 (the HTTP exporter's encoder; the send
  itself is left out), measured as the process's CPU time for ``--spans`` spans.

Figures are medians of ``--rounds`` rounds, contenders interleaved, with the spread
(min-max); the ratios are against the anchor of the same round. Bytes per span: the
encoded request over the spans in it, plain and gzip-compressed (the exporter's
``OTEL_EXPORTER_OTLP_COMPRESSION=gzip``; spans of one batch share their attribute
names and much of their values, so gzip gains a lot and real traffic gains less).
CPU times are ``time.thread_time`` / ``time.process_time``: other load on the
machine slows them less than wall-clock times, but does not leave them untouched.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from recorder.core.meter import StreamMeter
from recorder.core.record import Gap, StreamRecord
from recorder.otel import SpanExport


def chat_body(deltas: int) -> list[bytes]:
    """A Chat Completions stream, one event per piece."""
    head = b'data: {"id":"chatcmpl-b","object":"chat.completion.chunk","model":"gpt-4o-2024-08-06",'
    pieces = [head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    for i in range(deltas):
        word = f"word{i % 50} ".encode()
        pieces.append(head + b'"choices":[{"index":0,"delta":{"content":"' + word + b'"}}]}\n\n')
    pieces.append(head + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    pieces.append(
        head
        + b'"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":'
        + str(deltas).encode()
        + b',"total_tokens":1}}\n\n'
    )
    pieces.append(b"data: [DONE]\n\n")
    return pieces


def meter_once(pieces: Sequence[bytes]) -> StreamRecord:
    t = 1000.0
    meter = StreamMeter("chat.completions", start=t)
    meter.headers(t + 0.1, 200)
    for i, piece in enumerate(pieces):
        meter.feed(piece, t + 0.2 + i * 0.02)
    return meter.finish(t + 0.2 + len(pieces) * 0.02)


def finished(rec: StreamRecord, i: int) -> StreamRecord:
    """The record as the recorder completes it (usage, cost, key id, a stall)."""
    rec.id = f"rec_{i:08d}"
    rec.started_at = "2026-12-01T10:00:00.250Z"
    rec.upstream = "api.openai.com:443"
    rec.model = "gpt-4o"
    rec.cost_usd = "0.00068500"
    rec.price_version = "2026-11-01"
    rec.api_key_id = "…cdef:8cd344e2c119"
    rec.request_id = f"req_{os.urandom(12).hex()}"  # as unique as real ones
    rec.response_id = f"chatcmpl-{os.urandom(12).hex()}"
    rec.gaps = [Gap("stall", 1200.0, 31000.0)]
    rec.stalls = 1
    return rec


class Encoding(SpanExporter):
    """What the OTLP exporter does before the network: encode each batch."""

    def __init__(self) -> None:
        self.spans = 0
        self.plain = 0
        self.gzipped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = encode_spans(spans).SerializePartialToString()
        self.spans += len(spans)
        self.plain += len(data)
        self.gzipped += len(gzip.compress(data, 6))
        return SpanExportResult.SUCCESS


def median_spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.3g} [{min(values):.3g}-{max(values):.3g}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--spans", type=int, default=5000, help="spans per round")
    ap.add_argument("--deltas", type=int, default=200, help="deltas in the anchor's stream")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.spans = 2, 300
    pieces = chat_body(args.deltas)
    print(
        f"# bench_otel: CPython {platform.python_version()}, {args.spans} spans and"
        f" {args.spans} metered streams of {len(pieces)} events per round, {args.rounds} rounds"
    )
    meter_us, caller_us, all_us = [], [], []
    enc = Encoding()
    for _ in range(args.rounds):
        records = [finished(meter_once(pieces), i) for i in range(args.spans)]
        # anchor: metering the streams
        c0 = time.process_time()
        for _ in range(args.spans):
            meter_once(pieces)
        meter_us.append((time.process_time() - c0) / args.spans * 1e6)
        # spans: the caller's part, then everything until the last batch is encoded
        enc = Encoding()
        spans = SpanExport(exporter=enc, max_queue_size=args.spans + 1, schedule_delay_ms=50)
        t0, c0 = time.thread_time(), time.process_time()
        for rec in records:
            spans.export(rec)
        caller_us.append((time.thread_time() - t0) / args.spans * 1e6)
        spans.close(timeout_s=60)
        all_us.append((time.process_time() - c0) / args.spans * 1e6)
        if spans.dropped or enc.spans != args.spans:
            print(f"FAILED: {enc.spans} spans encoded, {spans.dropped} dropped")
            return 1
    print()
    print("| per stream | µs, median [min-max] | × metering the stream |")
    print("|---|---:|---:|")
    print(f"| metering {len(pieces)} events (anchor) | {median_spread(meter_us)} | 1 |")
    for name, values in (("span, caller's thread", caller_us), ("span, all threads", all_us)):
        ratios = [v / m for v, m in zip(values, meter_us, strict=True)]
        print(f"| {name} | {median_spread(values)} | {median_spread(ratios)} |")
    print()
    print(
        f"Bytes per span (OTLP protobuf, batches of up to 512): {enc.plain / enc.spans:,.0f}"
        f" plain, {enc.gzipped / enc.spans:,.0f} gzip"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
