"""Bad requests and odd responses through the real proxy (regular mode, plain HTTP).

The rules (recorder/core/endpoints.py, recorder/proxy/addon.py):
- only ``POST`` to a path ending in one of the three endpoints is metered; anything
  else (another method, ``/v1/embeddings``, ``/v1/messages/count_tokens``) passes
  through untouched (not even its Accept-Encoding is removed) and is not recorded;
- a metered request is recorded whatever its body (not JSON, empty, no model, 8 MiB):
  the body is only read for its facts, and a body that says nothing leaves them None;
- the response's content type decides how it is read: ``text/event-stream`` is tapped
  as a stream; anything else is one body, read once complete (JSON; SSE text under
  another content type is not metered as events);
- the status decides ``http_error``; an error event in a 200 stream is ``error``;
  a body shorter than its Content-Length is ``upstream_disconnect``.
In every case the client gets the upstream's bytes unchanged.
"""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator
from tests.kit.exchanges import CHAT, MESSAGES, REQUESTS, Received, exchange, request_bytes
from tests.kit.exchanges import sim as sim
from tests.kit.ports import free_port
from tests.kit.proxy_thread import RunningProxy, running_proxy

MIB = 1024 * 1024
CHUNKS = [
    b'data: {"id":"chatcmpl-canned","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"id":"chatcmpl-canned","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n',
    b'data: {"id":"chatcmpl-canned","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":" there"}}]}\n\n',
    b'data: {"id":"chatcmpl-canned","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]
SSE_TEXT = b"".join(CHUNKS)


def _chunked(pieces: list[bytes]) -> list[bytes]:
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]


def _head(status: str, *headers: str) -> bytes:
    return (
        "\r\n".join([f"HTTP/1.1 {status}", *headers, "connection: close"]) + "\r\n\r\n"
    ).encode()


# name -> (the pieces the canned upstream writes, 20 ms apart, then it closes)
CANNED: dict[str, list[bytes]] = {
    "sse-as-json": [
        _head("200 OK", "content-type: application/json", f"content-length: {len(SSE_TEXT)}"),
        *CHUNKS,
    ],
    "sse-as-text": [
        _head("200 OK", "content-type: text/plain", "transfer-encoding: chunked"),
        *_chunked(CHUNKS),
    ],
    "sse-without-type": [_head("200 OK", "transfer-encoding: chunked"), *_chunked(CHUNKS)],
}


class CannedUpstream(socketserver.ThreadingTCPServer):
    """Answers each request with ``CANNED[x-canned]``; otherwise echoes the request's
    headers as a JSON body (what arrived upstream: the proxy's changes show)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _CannedHandler)
        self.port = int(self.server_address[1])


class _CannedHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock = self.request
        sock.settimeout(10)
        buf = b""
        while b"\r\n\r\n" not in buf:
            piece = sock.recv(65536)
            if not piece:
                return
            buf += piece
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            piece = sock.recv(65536)
            if not piece:
                return
            body += piece
        canned = CANNED.get(headers.get("x-canned", ""))
        if canned is None:
            doc = orjson.dumps({"path": lines[0].split(" ")[1], "headers": headers})
            canned = [
                _head("200 OK", "content-type: application/json", f"content-length: {len(doc)}"),
                doc,
            ]
        for piece in canned:
            sock.sendall(piece)
            time.sleep(0.02)


@pytest.fixture(scope="module")
def canned() -> Iterator[CannedUpstream]:
    server = CannedUpstream()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def forward(confdir: Path) -> Iterator[RunningProxy]:
    """A regular-mode proxy: one listener in front of both upstreams."""
    with running_proxy([f"regular@{free_port()}"], str(confdir), stall_after=1.0) as running:
        yield running


@pytest.fixture
def fwd(forward: RunningProxy) -> RunningProxy:
    with forward.sink._cond:
        forward.sink.records.clear()
    return forward


def via(proxy: RunningProxy, port: int, path: str, body: bytes, **headers: str) -> Received:
    """One request in absolute form (``POST http://127.0.0.1:port/path``) through the proxy."""
    return via_method(proxy, "POST", port, path, body, **headers)


def via_method(
    proxy: RunningProxy, method: str, port: int, path: str, body: bytes, **headers: str
) -> Received:
    hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
    data = request_bytes(f"http://127.0.0.1:{port}{path}", body, hdrs, method=method)
    return exchange(proxy.port(), data)


def one_record(proxy: RunningProxy) -> StreamRecord:
    (rec,) = proxy.sink.wait_for(1)
    time.sleep(0.05)
    assert len(proxy.sink.records) == 1
    assert proxy.recorder.open_flows == 0 and proxy.recorder.health.in_flight == 0
    assert proxy.recorder.health.internal_errors == 0
    return rec


def assert_not_recorded(proxy: RunningProxy, sim: Simulator) -> None:
    """The request just made left no record: a metered request made after it is
    the first (and only) record."""
    body = orjson.dumps(REQUESTS[CHAT])
    got = via(proxy, sim.port, CHAT, body, content_type="application/json", x_sim_id="after")
    assert got.status == 200 and got.complete
    rec = one_record(proxy)
    assert rec.request_id == "after" and rec.outcome == "completed"
    sim.sent.pop("after", None)


def sent_of(sim: Simulator, sid: str) -> SentRecord:
    sent = sim.wait_sent_blocking(sid)
    assert sent.body is not None
    return sent


# -- bad requests to a metered path: recorded, whatever the body -------------------------


BIG_PROMPT = "harmony " * (MIB)  # 8 MiB of prompt text


@pytest.mark.parametrize(
    ("case", "body", "message"),
    [
        pytest.param("not-json", b"{this is not json", "not a JSON object", id="not-json"),
        pytest.param("empty", b"", "not a JSON object", id="empty-body"),
        pytest.param(
            "no-model",
            orjson.dumps({"stream": True, "messages": [{"role": "user", "content": "Hi"}]}),
            "you must provide a model parameter",
            id="no-model",
        ),
        pytest.param("huge-not-json", b"x" * (8 * MIB), "not a JSON object", id="8MiB-not-json"),
    ],
)
def test_bad_request_bodies_are_recorded_as_the_upstream_answered(
    fwd: RunningProxy, sim: Simulator, case: str, body: bytes, message: str
) -> None:
    got = via(fwd, sim.port, CHAT, body, content_type="application/json", x_sim_id=f"bad-{case}")
    sent = sent_of(sim, f"bad-{case}")
    assert sent.http_status == 400
    assert got.status == 400 and got.complete and got.body == bytes(sent.body or b"")
    rec = one_record(fwd)
    assert rec.outcome == "http_error" == sent.outcome and rec.http_status == 400
    assert rec.model is None and rec.streamed is False
    assert rec.request_id == sent.request_id
    assert rec.error_message is not None and message in rec.error_message
    assert rec.error_message == sent.error_message
    assert rec.output_chars == 0 and rec.events is None


def test_huge_json_prompt_is_metered(fwd: RunningProxy, sim: Simulator) -> None:
    # 8 MiB: read on a worker thread while the request goes on; the record waits for it
    doc = dict(REQUESTS[MESSAGES], messages=[{"role": "user", "content": BIG_PROMPT}])
    body = orjson.dumps(doc)
    assert len(body) > 8 * MIB
    got = via(fwd, sim.port, MESSAGES, body, content_type="application/json", x_sim_id="huge")
    sent = sent_of(sim, "huge")
    assert got.status == 200 and got.complete and got.body == bytes(sent.body or b"")
    rec = one_record(fwd)
    assert rec.outcome == "completed" == sent.outcome
    assert rec.model == "claude-sonnet-4-5" and rec.max_output_tokens == 400
    assert sent.usage is not None and rec.input_tokens == sent.usage["input_tokens"]
    assert rec.input_tokens is not None and rec.input_tokens > 2 * MIB  # ~chars / 4
    assert rec.events == sent.events and rec.output_chars == sent.output_chars


# -- not metered: passed through untouched, not recorded ----------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", CHAT, id="GET-chat-completions"),
        pytest.param("GET", MESSAGES, id="GET-messages"),
        pytest.param("POST", "/v1/embeddings", id="embeddings"),
        pytest.param("POST", "/v1/messages/count_tokens", id="count_tokens"),
        pytest.param("POST", "/v1/completions", id="legacy-completions"),
    ],
)
def test_unmetered_requests_pass_through_unrecorded(
    fwd: RunningProxy, sim: Simulator, canned: CannedUpstream, method: str, path: str
) -> None:
    body = b"" if method == "GET" else orjson.dumps({"model": "gpt-4o", "input": "Hi"})
    # the canned upstream echoes what reached it: every header, Accept-Encoding included
    got = via_method(
        fwd, method, canned.port, path, body, accept_encoding="gzip, br", x_check="kept"
    )
    assert got.status == 200 and got.complete
    echoed = orjson.loads(got.body)
    assert echoed["path"] == path
    assert echoed["headers"]["accept-encoding"] == "gzip, br"
    assert echoed["headers"]["x-check"] == "kept"
    # the simulator: its own answer (404 unknown path, 405 for GET), byte for byte
    direct = exchange(sim.port, request_bytes(path, body, {"x-sim-id": "u"}, method=method))
    proxied = via_method(fwd, method, sim.port, path, body, x_sim_id="u")
    assert proxied.status == direct.status and direct.status in (404, 405)
    assert proxied.body == direct.body
    assert fwd.sink.records == []
    assert_not_recorded(fwd, sim)


def test_metered_request_loses_only_accept_encoding(
    fwd: RunningProxy, canned: CannedUpstream
) -> None:
    # the canned echo is not an LLM answer: recorded as a JSON body without usage
    body = orjson.dumps(REQUESTS[CHAT])
    got = via(fwd, canned.port, CHAT, body, accept_encoding="gzip, br", x_check="kept")
    echoed = orjson.loads(got.body)
    assert "accept-encoding" not in echoed["headers"]
    assert echoed["headers"]["x-check"] == "kept"
    rec = one_record(fwd)
    assert rec.model == "gpt-4o" and rec.streamed is False


# -- odd responses --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sse-as-json", "sse-as-text", "sse-without-type"])
def test_sse_under_another_content_type(
    fwd: RunningProxy, canned: CannedUpstream, name: str
) -> None:
    # the body is told from the body, not from what it declares: an event stream,
    # streamed and metered as one, and the record says what it claimed to be
    body = orjson.dumps(REQUESTS[CHAT])
    got = via(fwd, canned.port, CHAT, body, x_canned=name)
    assert got.status == 200 and got.complete
    if name == "sse-as-json":  # a Content-Length body: every byte, head included
        assert got.raw == b"".join(CANNED[name])
    assert got.body == SSE_TEXT
    rec = one_record(fwd)
    assert rec.streamed is True and rec.http_status == 200
    assert rec.outcome == "completed" and not rec.interrupted
    assert rec.events == len(CHUNKS) and rec.output_chars == len("Hello there")
    assert rec.parse_issues == 0 and rec.finish_reason == "stop"
    declared = {
        "sse-as-json": "application/json",
        "sse-as-text": "text/plain",
        "sse-without-type": "no content type",
    }[name]
    assert rec.content_mismatch == f"declared {declared}, body is an event stream"


@pytest.mark.parametrize(
    ("path", "fault", "outcome"),
    [
        pytest.param(CHAT, "error=4", "error", id="chat-200-error-event"),
        pytest.param(MESSAGES, "interrupt=5", "error", id="messages-200-interrupted"),
        pytest.param(CHAT, "status=429", "http_error", id="chat-429-json"),
        pytest.param(MESSAGES, "status=529", "http_error", id="messages-529-json"),
        pytest.param(CHAT, "length,fin=4", "upstream_disconnect", id="sse-short-content-length"),
    ],
)
def test_error_responses(
    fwd: RunningProxy, sim: Simulator, path: str, fault: str, outcome: str
) -> None:
    sid = f"err-{fault}-{path.rsplit('/', 1)[1]}".replace(",", "-")
    body = orjson.dumps(REQUESTS[path])
    got = via(fwd, sim.port, path, body, x_sim_fault=fault, x_sim_id=sid)
    sent = sent_of(sim, sid)
    assert got.body == bytes(sent.body or b"")
    assert got.status == sent.http_status
    rec = one_record(fwd)
    assert rec.outcome == outcome == sent.outcome, rec.transport_error
    assert rec.http_status == sent.http_status
    assert rec.error_type == sent.error_type and rec.error_message == sent.error_message
    assert rec.output_chars == sent.output_chars
    if outcome == "http_error":
        assert got.complete and rec.streamed is False and rec.events is None
        assert got.headers.get("retry-after") == ("1" if sent.http_status == 429 else None)
    else:
        assert rec.streamed is True and rec.events == sent.events
    if fault.startswith("length"):
        # the announced length was not reached: the client's framing is left open
        assert not got.complete
        assert int(got.headers["content-length"]) > len(got.body)
        assert rec.transport_error is not None and "expected" in rec.transport_error
    else:
        assert got.complete


def test_json_body_shorter_than_its_content_length(fwd: RunningProxy, sim: Simulator) -> None:
    # a JSON body cut short: streamed to the client as it came (never held whole), so
    # the client has the headers and what was sent, and its framing is left open, as
    # the upstream left it; the record says the upstream broke
    doc = dict(REQUESTS[CHAT], stream=False)
    got = via(fwd, sim.port, CHAT, orjson.dumps(doc), x_sim_fault="fin=0", x_sim_id="json-cut")
    sent = sent_of(sim, "json-cut")
    assert sent.framing == "length" and len(sent.body or b"") > 0
    assert got.status == 200 and not got.complete
    assert int(got.headers["content-length"]) > len(got.body)
    rec = one_record(fwd)
    assert rec.outcome == "upstream_disconnect" == sent.outcome
    assert rec.http_status == 200 and rec.output_chars == 0
    assert rec.transport_error is not None and "expected" in rec.transport_error
