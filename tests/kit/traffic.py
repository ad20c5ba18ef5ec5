"""Simulated traffic for the metrics tests: the addon driven in-process.

Real fixture bodies go through the addon's hooks (mitmproxy's taddons/tflow)
with a fake clock, so every kind of ending and every rhythm metric is exercised
without a network upstream: completed streams of all three protocols, a stall
with keepalives, cuts by the upstream and by the client, error events, a
truncated body, an HTTP error, a non-streamed body, and more model names than
the label cap allows.

``WiredRecorder`` shows the wiring the proxy needs: ``stream_started`` when a
tapped request arrives, ``stream_ended`` and ``observe`` when its record is
finished. ``fake_billing`` stands in for the price table until billing fills
``cost_usd`` and the estimated token figures itself.

``post_stream`` is the other kind: one real request to a running proxy.
"""

from __future__ import annotations

import asyncio
import math
import urllib.request
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import orjson
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord, combine_sources
from recorder.metrics import Metrics
from recorder.proxy.addon import Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.observers import RecordCallback
from recorder.store.sinks import MemorySink
from tests.kit import framing
from tests.kit.flows import CHAT_SSE, MESSAGES_SSE, SECRET, Clock, pieces_of
from tests.kit.timers import Timers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


RESPONSES_SSE: bytes = framing.load_body(
    FIXTURES / "payload-only" / "openai-responses" / "openai-web-search-tool.1.chunks.txt"
)
RESPONSES_ERROR_SSE: bytes = framing.load_body(
    FIXTURES / "payload-only" / "openai-responses" / "openai-error.1.chunks.txt"
)
ANTHROPIC_ERROR_SSE = (
    MESSAGES_SSE[: MESSAGES_SSE.index(b"event: content_block_stop")]
    + b"event: error\n"
    + b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)
KEEPALIVE = b": keepalive\n\n"


def fake_billing(rec: StreamRecord) -> None:
    """Estimate missing usage and price the record, the way billing will."""
    if rec.output_tokens is None and rec.output_chars > 0:
        rec.output_tokens = math.ceil(rec.output_chars / 4)
        rec.output_source = "estimated"
    if rec.input_tokens is None and rec.outcome != "http_error":
        rec.input_tokens = 100
        rec.input_source = "estimated"
    rec.usage_source = combine_sources(rec.input_source, rec.output_source)
    if rec.input_tokens is None and rec.output_tokens is None:
        return
    if (rec.model or "").startswith("junk-model-"):  # a model the price table lacks
        rec.unpriced_reason = f"no price for model {rec.model!r}"
        return
    cost = Decimal(rec.input_tokens or 0) * Decimal("0.0000025") + Decimal(
        rec.output_tokens or 0
    ) * Decimal("0.00001")
    rec.cost_usd = str(cost.quantize(Decimal("0.000000000001")))


class WiredRecorder(Recorder):
    """The addon with the metrics wired in as the proxy will wire them."""

    def __init__(self, metrics: Metrics, sink: MemorySink, clock: Clock, **config: object) -> None:
        self.metrics = metrics

        def on_record(rec: StreamRecord, meter: StreamMeter) -> None:
            fake_billing(rec)
            metrics.stream_ended(rec.endpoint, rec.provider)
            metrics.observe_later(rec, meter)  # as MetricsObserver: counted by the scrape

        super().__init__(
            sink,
            RecorderConfig(key_secret=SECRET, **config),  # type: ignore[arg-type]
            clock=clock,
            scheduler=Timers(clock),
            observers=[RecordCallback(on_record)],
        )
        metrics.watch_health(self.health)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        super().requestheaders(flow)
        state = self.streams.get(flow.id)
        if state is not None:
            self.metrics.stream_started(state.record.endpoint, state.record.provider)


def make_flow(path: str, body: dict[str, object]) -> http.HTTPFlow:
    req = tutils.treq(
        method=b"POST",
        host="api.example.com",
        port=443,
        scheme=b"https",
        path=path.encode(),
        headers=http.Headers([(b"content-type", b"application/json")]),
        content=orjson.dumps(body),
    )
    flow = tflow.tflow(req=req)
    flow.response = None
    return flow


def sse_response(status: int = 200) -> http.Response:
    headers = http.Headers([(b"content-type", b"text/event-stream; charset=utf-8")])
    return tutils.tresp(status_code=status, headers=headers, content=None)


PATHS = {
    "chat.completions": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}


class Traffic:
    """Drives requests through a :class:`WiredRecorder`."""

    def __init__(self, addon: Recorder, clock: Clock) -> None:
        self.addon = addon
        self.clock = clock

    async def open(self, endpoint: str, model: str | None, stream: bool = True) -> http.HTTPFlow:
        body: dict[str, object] = {"stream": stream, "messages": []}
        if model is not None:
            body["model"] = model
        flow = make_flow(PATHS[endpoint], body)
        self.addon.requestheaders(flow)
        self.addon.request(flow)
        self.clock.now += 0.3
        # while the request is upstream, a worker thread counts its prompt's tokens
        # (with a tokenizer installed): let it, as the proxy's time would
        state = self.addon.streams.get(flow.id)
        for _ in range(2000):
            if state is None or state.reading is None or state.reading.done():
                break
            await asyncio.sleep(0.005)
        return flow

    def headers(self, flow: http.HTTPFlow, status: int = 200) -> None:
        flow.response = sse_response(status)
        self.addon.responseheaders(flow)

    def send(self, flow: http.HTTPFlow, pieces: list[bytes], step: float = 0.02) -> None:
        assert flow.response is not None and callable(flow.response.stream)
        for piece in pieces:
            self.clock.now += step
            assert flow.response.stream(piece) == piece

    def end(self, flow: http.HTTPFlow) -> None:
        assert flow.response is not None and callable(flow.response.stream)
        flow.response.stream(b"")
        self.addon.response(flow)

    def cut(self, flow: http.HTTPFlow, msg: str) -> None:
        flow.error = tflow.terr(msg)
        self.addon.error(flow)

    async def stream(
        self, endpoint: str, model: str | None, body: bytes, size: int = 97, step: float = 0.02
    ) -> None:
        flow = await self.open(endpoint, model)
        self.headers(flow)
        self.send(flow, pieces_of(body, size), step)
        self.end(flow)

    # -- the scenarios ------------------------------------------------------------

    async def completed(self) -> None:
        await self.stream("chat.completions", "gpt-4o", CHAT_SSE)
        await self.stream("messages", "claude-sonnet-4", MESSAGES_SSE, size=61)
        await self.stream("responses", "gpt-5", RESPONSES_SSE, size=4096, step=0.005)

    async def stalled(self, gap: float = 45.0) -> None:
        """A chat stream that goes silent for ``gap`` s mid-answer, with keepalives."""
        flow = await self.open("chat.completions", "gpt-4o")
        self.headers(flow)
        # keepalives come between events
        pieces = [e + b"\n\n" for e in CHAT_SSE.split(b"\n\n") if e]
        half = len(pieces) // 2
        self.send(flow, [KEEPALIVE, *pieces[:half]])
        ticks = max(1, int(gap // 10))
        self.send(flow, [KEEPALIVE] * ticks, step=gap / (ticks + 1))
        self.clock.now += gap / (ticks + 1)
        self.send(flow, pieces[half:])
        self.end(flow)

    async def upstream_cut(self) -> None:
        """A Messages stream the upstream cuts after a long silence."""
        flow = await self.open("messages", "claude-sonnet-4")
        self.headers(flow)
        self.send(flow, [MESSAGES_SSE[: MESSAGES_SSE.index(b"event: content_block_stop")]])
        self.send(flow, [KEEPALIVE, KEEPALIVE], step=15.0)
        self.clock.now += 90.0
        self.cut(
            flow,
            "HTTP/1 protocol error: peer closed connection without sending complete message body",
        )

    async def client_cut(self) -> None:
        flow = await self.open("chat.completions", "gpt-4o")
        self.headers(flow)
        self.send(flow, [CHAT_SSE[:1500]])
        self.clock.now += 2.0
        self.cut(flow, "Client disconnected.")

    async def error_events(self) -> None:
        await self.stream("responses", "gpt-5", RESPONSES_ERROR_SSE, size=512)
        await self.stream("messages", "claude-sonnet-4", ANTHROPIC_ERROR_SSE, size=61)

    async def malformed(self) -> None:
        """A chat stream with one event that is not JSON (a parse issue)."""
        junk = CHAT_SSE.index(b"data: ", 10)
        body = CHAT_SSE[:junk] + b"data: {not json\n\n" + CHAT_SSE[junk:]
        await self.stream("chat.completions", "gpt-4o", body)

    async def truncated(self) -> None:
        await self.stream("chat.completions", "gpt-4o", CHAT_SSE[: CHAT_SSE.index(b"data: [DONE]")])

    async def http_error(self) -> None:
        flow = await self.open("chat.completions", "gpt-4o")
        flow.response = tutils.tresp(
            status_code=429,
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=b'{"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}',
        )
        self.addon.responseheaders(flow)
        self.addon.response(flow)

    async def not_streamed(self) -> None:
        flow = await self.open("chat.completions", "gpt-4o-mini", stream=False)
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
        }
        flow.response = tutils.tresp(
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=orjson.dumps(body),
        )
        self.addon.responseheaders(flow)
        self.clock.now += 0.5
        self.addon.response(flow)

    async def many_models(self, count: int = 8) -> None:
        """More distinct model names than a small cap allows, and one with none."""
        for i in range(count):
            await self.stream("chat.completions", f"junk-model-{i}", CHAT_SSE, size=2048)
        await self.stream("messages", None, MESSAGES_SSE, size=2048)

    async def mix(self) -> None:
        """One of everything."""
        scenarios: list[Callable[[], object]] = [
            self.completed,
            self.stalled,
            self.upstream_cut,
            self.client_cut,
            self.error_events,
            self.malformed,
            self.truncated,
            self.http_error,
            self.not_streamed,
            self.many_models,
        ]
        for scenario in scenarios:
            await scenario()  # type: ignore[misc]


def post_stream(port: int, model: str) -> bytes:
    """One streamed chat request to 127.0.0.1:``port``, with a key; the bytes answered."""
    body = orjson.dumps(
        {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body,
        headers={"content-type": "application/json", "authorization": "Bearer sk-live-test-9876"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        data: bytes = resp.read()
        return data
