"""The addon's hooks driven directly with mitmproxy's test flows (taddons/tflow)
and a fake clock: a flow, an SSE response, the request hooks, the stream callback
fed piece by piece, and two real fixture bodies."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from recorder.proxy.addon import Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.scheduling import Scheduler
from recorder.store.sinks import MemorySink
from tests.kit.timers import Timers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


SECRET = b"test-secret"


CHAT_SSE = (FIXTURES / "openai-chat" / "d61558011839.sse").read_bytes()


# The SDK stored this capture without the blank line that ends its last event on the wire.
MESSAGES_SSE = (FIXTURES / "anthropic-messages" / "basic_response.sse").read_bytes() + b"\n\n"


class Clock:
    """A fake monotonic clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    scheduler: Scheduler | None = None, **config: object
) -> tuple[Recorder, MemorySink, Clock]:
    """The addon on a memory sink and a fake clock; ``config`` sets RecorderConfig.
    What it puts off runs on ``scheduler`` (``recorder.proxy.scheduling``; the
    event loop's for tests that run the loop), by default on :class:`Timers` driven
    by the fake clock (``timers_of(addon)``), so nothing runs unless the test says."""
    sink = MemorySink()
    clock = Clock()
    rec = Recorder(
        sink,
        RecorderConfig(key_secret=SECRET, **config),  # type: ignore[arg-type]
        clock=clock,
        scheduler=scheduler if scheduler is not None else Timers(clock),
    )
    return rec, sink, clock


def timers_of(addon: Recorder) -> Timers:
    """The test scheduler ``make`` gave ``addon``."""
    assert isinstance(addon.scheduler, Timers)
    return addon.scheduler


def make_flow(
    path: str = "/v1/chat/completions",
    body: dict[str, object] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> http.HTTPFlow:
    """A test flow: a JSON POST to api.example.com (a streamed gpt-4o chat by default)."""
    body = body if body is not None else {"model": "gpt-4o", "stream": True, "messages": []}
    hdrs = headers if headers is not None else []
    hdrs = [*hdrs, (b"content-type", b"application/json"), (b"accept-encoding", b"gzip, br")]
    req = tutils.treq(
        method=b"POST",
        host="api.example.com",
        port=443,
        scheme=b"https",
        path=path.encode(),
        headers=http.Headers(hdrs),
        content=orjson.dumps(body),
    )
    flow = tflow.tflow(req=req)
    flow.response = None
    return flow


def sse_response(
    status: int = 200, extra: list[tuple[bytes, bytes]] | None = None
) -> http.Response:
    """Response headers of an SSE stream (its body comes through ``stream_through``)."""
    headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"x-request-id", b"req_1")]
    return tutils.tresp(
        status_code=status, headers=http.Headers(headers + (extra or [])), content=None
    )


async def start(addon: Recorder, flow: http.HTTPFlow, clock: Clock) -> None:
    """The request goes upstream: its headers and body are read, and the time it takes
    passes (0.25 s on the test's clock; meanwhile a worker thread reads a large body,
    as it would in the proxy)."""
    addon.requestheaders(flow)
    addon.request(flow)
    clock.now += 0.25
    state = addon.streams.get(flow.id)
    for _ in range(2000):  # bounded: a count that never ends fails the test's checks
        if state is None or state.reading is None or state.reading.done():
            break
        await asyncio.sleep(0.005)


def stream_through(
    flow: http.HTTPFlow, pieces: list[bytes], clock: Clock, step: float = 0.01
) -> bytes:
    """Feed ``pieces`` through the response's stream callback as mitmproxy would; the
    bytes the client got (each piece exactly as given)."""
    assert flow.response is not None and callable(flow.response.stream)
    out = b""
    for piece in pieces:
        clock.now += step
        got = flow.response.stream(piece)
        assert got is piece or got == piece  # the client gets exactly the bytes
        out += got
    flow.response.stream(b"")
    return out


def pieces_of(body: bytes, size: int) -> list[bytes]:
    """``body`` cut every ``size`` bytes."""
    return [body[i : i + size] for i in range(0, len(body), size)]
