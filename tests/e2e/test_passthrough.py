"""Nothing held back, nothing passes unseen, through the real proxy in both routes
(`recorder proxy`, and `mitmdump -s addons/recorder_addon.py`): a streamed response
reaches the client piece by piece as the upstream sends it, metered or not,
whatever it declares itself to be (the upstream sends each next piece only once the
client has the one before: a proxy that buffers is caught, not timed); a metered
path's body is metered as what it is; what is not metered is counted and said."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.kit.databases import sqlite_stream_rows
from tests.kit.lockstep import Lockstep, fetch, lockstep
from tests.kit.ports import free_port
from tests.kit.processes import start_mitmdump, start_proxy, stop, wait_listening

pytestmark = pytest.mark.slow


def _chunk(text: str) -> bytes:
    doc = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return b"data: " + orjson.dumps(doc) + b"\n\n"


CHAT_PIECES = [_chunk("Hel"), _chunk("lo"), _chunk(" there"), _chunk("!"), b"data: [DONE]\n\n"]
GEMINI = [
    b'data: {"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}\r\n\r\n',
    b'data: {"candidates":[{"content":{"parts":[{"text":" you"}]}}]}\r\n\r\n',
    b'data: {"candidates":[{"content":{"parts":[{"text":"."}]},"finishReason":"STOP"}]}\r\n\r\n',
]
GEMINI_ARRAY = [
    b"[" + GEMINI[0][6:-4],
    b",\r\n" + GEMINI[1][6:-4],
    b",\r\n" + GEMINI[2][6:-4] + b"]",
]
NDJSON = [
    b'{"response":"a","done":false}\n',
    b'{"response":"b","done":false}\n',
    b'{"done":true}\n',
]
MCP = [b"event: message\ndata: {}\n\n", b": ping\n\n", b"event: message\ndata: {}\n\n"]
JSON_ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
    }
)

CASES = {
    # path, content type, pieces, sized
    "gemini sse": (
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
        "text/event-stream",
        GEMINI,
        False,
    ),
    "gemini json array": (
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
        "application/json; charset=UTF-8",
        GEMINI_ARRAY,
        False,
    ),
    "unknown sse": ("/mcp/events", "text/event-stream", MCP, False),
    "ndjson": ("/api/generate", "application/x-ndjson", NDJSON, False),
    "chat sse": ("/v1/chat/completions", "text/event-stream", CHAT_PIECES, False),
    "chat, a lying type": ("/v1/chat/completions", "text/plain", CHAT_PIECES, False),
    "chat json, sized": (
        "/v1/chat/completions",
        "application/json",
        [JSON_ANSWER[:40], JSON_ANSWER[40:90], JSON_ANSWER[90:]],
        True,
    ),
}


class Route:
    def __init__(self, name: str, port: int, db: Path | None, metrics_port: int | None) -> None:
        self.name, self.port, self.db, self.metrics_port = name, port, db, metrics_port


@pytest.fixture(scope="module")
def upstream() -> Iterator[Lockstep]:
    with lockstep() as server:
        yield server


@pytest.fixture(scope="module", params=["recorder proxy", "mitmdump -s"])
def route(
    request: pytest.FixtureRequest, upstream: Lockstep, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Route]:
    tmp = tmp_path_factory.mktemp("route")
    if request.param == "recorder proxy":
        proc, port, metrics_port, _ = start_proxy(tmp, upstream)  # type: ignore[arg-type]
        yield Route(request.param, port, tmp / "recorder.db", metrics_port)
    else:
        port = free_port()
        proc = start_mitmdump(
            tmp,
            upstream.url,
            port,
            f"recorder_db=sqlite:///{tmp / 'mitm.db'}",
            "recorder_metrics_port=0",
        )
        wait_listening(port, proc)
        yield Route(request.param, port, tmp / "mitm.db", None)
    stop(proc)


@pytest.mark.parametrize("case", list(CASES))
def test_every_stream_reaches_the_client_as_it_arrives(
    route: Route, upstream: Lockstep, case: str
) -> None:
    path, content_type, pieces, sized = CASES[case]
    reply = upstream.respond(pieces, content_type, sized=sized)
    got = fetch(route.port, path, reply)
    assert got == b"".join(pieces)  # the bytes, unchanged
    assert not reply.held_back, f"{route.name} held the body of {case!r} back"


def test_a_lying_type_is_metered_as_what_the_body_is(route: Route, upstream: Lockstep) -> None:
    assert route.db is not None
    before = len(sqlite_stream_rows(route.db, 0))
    reply = upstream.respond(CHAT_PIECES, "text/plain")
    fetch(
        route.port, "/v1/chat/completions", reply, orjson.dumps({"model": "gpt-4o", "stream": True})
    )
    rows = sqlite_stream_rows(route.db, before + 1)
    rec = rows[-1]
    assert rec["outcome"] == "completed" and rec["output_chars"] == len("Hello there!")
    assert rec["content_mismatch"] == "declared text/plain, body is an event stream"


def test_what_is_not_metered_is_counted_and_said_once(upstream: Lockstep, tmp_path: Path) -> None:
    proc, port, metrics_port, _ = start_proxy(tmp_path, upstream)  # type: ignore[arg-type]
    try:
        for path in ("/mcp/events", "/mcp/events?session=2", "/mcp/events"):
            fetch(port, path, upstream.respond(MCP, "text/event-stream"))
        fetch(port, "/api/generate", upstream.respond(NDJSON, "application/x-ndjson"))
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    finally:
        out = stop(proc)
    counted = [
        line
        for line in text.splitlines()
        if line.startswith("llm_recorder_unmetered_requests_total{")
    ]
    assert counted == [
        'llm_recorder_unmetered_requests_total{host="127.0.0.1",'
        'reason="a stream the recorder does not meter"} 4.0'
    ]
    said = [line for line in out.splitlines() if "not metered:" in line]
    assert len(said) == 2, out  # once per path shape
    assert "POST 127.0.0.1 /mcp/events (a stream the recorder does not meter)" in said[0]
    assert "POST 127.0.0.1 /api/generate (a stream the recorder does not meter)" in said[1]
