"""The protocols and request facts added since the first three, through the real
proxy in both routes (`recorder proxy` and `mitmdump -s addons/recorder_addon.py`).

Gemini and Vertex AI: each transport (SSE with ``alt=sse``, the
JSON array without it, one JSON answer) is metered as the endpoint
``generate_content`` with the provider its path names, the model from the path and
the usage as reported; Google's keys (``x-goog-api-key``, ``?key=``, a Vertex OAuth
bearer) are fingerprinted and stored nowhere as sent. Amazon Bedrock's binary event
stream passes byte for byte and is metered, its SigV4 signature stored nowhere.
Attribution (a tag header, the body's user) is read alike in both routes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit.databases import sqlite_stream_rows
from tests.kit.lockstep import Lockstep, fetch, lockstep
from tests.kit.ports import free_port
from tests.kit.processes import start_mitmdump, start_proxy, stop, wait_listening

pytestmark = pytest.mark.slow

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "gemini" / "vercel-ai-google-tool-call.jsonl"
)
PAYLOADS = [line for line in FIXTURE.read_bytes().splitlines() if line.strip()]
LAST_USAGE = json.loads(PAYLOADS[-1])["usageMetadata"]  # the independent reading
INPUT = LAST_USAGE["promptTokenCount"]
OUTPUT = LAST_USAGE["candidatesTokenCount"] + LAST_USAGE["thoughtsTokenCount"]

SSE = [b"data: " + p + b"\r\n\r\n" for p in PAYLOADS]
ARRAY = [b"[" + PAYLOADS[0], b",\r\n" + PAYLOADS[1] + b"]"]
GEMINI = "/v1beta/models/gemini-3-pro-preview"
VERTEX = "/v1/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-pro"
KEY = "AIzaSyD-example-gemini-key-0123456789abc"
BEARER = "ya29.a0Example-vertex-oauth-token-0123456789"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Lockstep]:
    with lockstep() as server:
        yield server


class Route:
    def __init__(self, name: str, port: int, db: Path) -> None:
        self.name, self.port, self.db = name, port, db


@pytest.fixture(scope="module", params=["recorder proxy", "mitmdump -s"])
def route(
    request: pytest.FixtureRequest, upstream: Lockstep, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Route]:
    tmp = tmp_path_factory.mktemp("gemini")
    if request.param == "recorder proxy":
        proc, port, _, _ = start_proxy(tmp, upstream)  # type: ignore[arg-type]
        yield Route(request.param, port, tmp / "recorder.db")
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
        yield Route(request.param, port, tmp / "mitm.db")
    stop(proc)


CASES = {
    # path, pieces, content type, headers, provider, transport, streamed
    "gemini sse": (
        GEMINI + ":streamGenerateContent?alt=sse",
        SSE,
        "text/event-stream",
        {"x-goog-api-key": KEY},
        "gcp.gemini",
        "sse",
        True,
    ),
    "gemini array, key in the query": (
        GEMINI + f":streamGenerateContent?key={KEY}",
        ARRAY,
        "application/json; charset=UTF-8",
        {},
        "gcp.gemini",
        "json-array",
        True,
    ),
    "vertex answer": (
        VERTEX + ":generateContent",
        [PAYLOADS[0][:-1] + b',"x":1}'],
        "application/json; charset=UTF-8",
        {"authorization": f"Bearer {BEARER}"},
        "gcp.vertex_ai",
        "json",
        False,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_generate_content_is_metered(route: Route, upstream: Lockstep, case: str) -> None:
    path, pieces, ctype, headers, provider, transport, streamed = CASES[case]
    before = len(sqlite_stream_rows(route.db, 0))
    reply = upstream.respond(pieces, ctype)
    got = fetch(
        route.port,
        path,
        reply,
        b'{"contents":[],"generationConfig":{"maxOutputTokens":300}}',
        headers,
    )
    assert got == b"".join(pieces)
    rec = sqlite_stream_rows(route.db, before + 1)[-1]
    assert (rec["endpoint"], rec["provider"], rec["transport"]) == (
        "generate_content",
        provider,
        transport,
    )
    assert rec["model"] == path.rsplit("/", 1)[1].split(":")[0]
    assert bool(rec["streamed"]) is streamed
    assert rec["max_output_tokens"] == 300
    assert rec["input_tokens"] == INPUT
    if streamed:
        assert (rec["outcome"], rec["output_tokens"], rec["finish_reason"]) == (
            "completed",
            OUTPUT,
            "STOP",
        )
        assert rec["tool_calls"] == 1
    assert rec["api_key_id"]  # fingerprinted
    stored = " ".join(str(v) for v in dict(rec).values())
    assert KEY not in stored and BEARER not in stored
    raw = route.db.read_bytes()
    assert KEY.encode() not in raw and BEARER.encode() not in raw


CLAUDE = [
    b'event: message_start\ndata: {"type":"message_start",'
    b'"message":{"id":"msg_vrtx_01","type":"message",'
    b'"role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":21,"output_tokens":1}}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hello"}}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":5}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]


def test_anthropic_on_vertex_is_messages(route: Route, upstream: Lockstep) -> None:
    """Claude on Vertex AI (``:streamRawPredict``) speaks Messages: ``messages``, with
    Vertex AI as the provider and the model from the path."""
    before = len(sqlite_stream_rows(route.db, 0))
    path = (
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/"
        "claude-sonnet-4-5@20250929:streamRawPredict"
    )
    reply = upstream.respond(CLAUDE, "text/event-stream")
    body = b'{"anthropic_version":"vertex-2023-10-16","messages":[],"stream":true}'
    fetch(route.port, path, reply, body, {"authorization": f"Bearer {BEARER}"})
    rec = sqlite_stream_rows(route.db, before + 1)[-1]
    assert (rec["endpoint"], rec["provider"]) == ("messages", "gcp.vertex_ai")
    assert rec["model"] == "claude-sonnet-4-5@20250929"
    assert (rec["outcome"], rec["input_tokens"], rec["output_tokens"]) == ("completed", 21, 5)
    assert rec["cost_usd"] is not None  # priced by the model that answered
    assert rec["api_key_id"] and BEARER.encode() not in route.db.read_bytes()


BEDROCK_BODY = (
    (Path(__file__).resolve().parents[1] / "fixtures" / "bedrock")
    .joinpath("converse_stream_nova_micro.bin")
    .read_bytes()
)
SIGNATURE = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
SIGV4 = (
    "AWS4-HMAC-SHA256 Credential=AKIAROUTESEXAMPLE0001/20261206/us-east-1/bedrock/"
    f"aws4_request, SignedHeaders=host;x-amz-date, Signature={SIGNATURE}"
)


def test_bedrock_converse_stream_in_both_routes(route: Route, upstream: Lockstep) -> None:
    from botocore.eventstream import EventStreamBuffer

    buf = EventStreamBuffer()
    buf.add_data(BEDROCK_BODY)
    messages = list(buf)
    usage = json.loads(messages[-1].payload)["usage"]  # botocore's reading
    pieces = [BEDROCK_BODY[i : i + 97] for i in range(0, len(BEDROCK_BODY), 97)]
    before = len(sqlite_stream_rows(route.db, 0))
    reply = upstream.respond(pieces, "application/vnd.amazon.eventstream")
    path = "/model/us.amazon.nova-micro-v1%3A0/converse-stream"
    body = b'{"messages":[{"role":"user","content":[{"text":"hi"}]}]}'
    got = fetch(route.port, path, reply, body, {"authorization": SIGV4})
    assert got == BEDROCK_BODY
    rec = sqlite_stream_rows(route.db, before + 1)[-1]
    assert (rec["endpoint"], rec["provider"], rec["transport"], rec["outcome"]) == (
        "converse",
        "aws.bedrock",
        "eventstream",
        "completed",
    )
    assert rec["model"] == "us.amazon.nova-micro-v1:0" and rec["events"] == len(messages)
    assert (rec["input_tokens"], rec["output_tokens"]) == (
        usage["inputTokens"],
        usage["outputTokens"],
    )
    assert rec["api_key_id"] and SIGNATURE.encode() not in route.db.read_bytes()


CHAT = [
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":'
    b'[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}\n\n',
    b"data: [DONE]\n\n",
]


def test_attribution_is_read_alike_in_both_routes(route: Route, upstream: Lockstep) -> None:
    """The tag header and the body's user land on the record in both routes; the
    user as a fingerprint, never as sent."""
    before = len(sqlite_stream_rows(route.db, 0))
    reply = upstream.respond(CHAT, "text/event-stream")
    body = json.dumps(
        {"model": "gpt-4o", "stream": True, "user": "alice@example.com", "messages": []}
    ).encode()
    headers = {"authorization": "Bearer sk-routes-0001", "x-recorder-tag": "team=search"}
    fetch(route.port, "/v1/chat/completions", reply, body, headers)
    rec = sqlite_stream_rows(route.db, before + 1)[-1]
    assert json.loads(rec["tags"]) == {"team": "search"}
    assert rec["user_id"].startswith("u:") and len(rec["user_id"]) == 18
    assert b"alice@example.com" not in route.db.read_bytes()
