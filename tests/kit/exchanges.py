"""A raw HTTP/1.1 client, so an end-to-end test owns the timing: ``exchange`` sends
a request and reads the response (leaving when told to, by reset or clean close),
``parse`` reads what came so far (``Received``); the streamed request bodies
(``REQUESTS``: the three protocols and Google's Interactions API) and the simulator
that keeps what it sent (the ``sim`` fixture)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from recorder.simulate import Simulator, run_in_thread

CHAT = "/v1/chat/completions"


RESPONSES = "/v1/responses"


MESSAGES = "/v1/messages"


INTERACTIONS = "/v1beta/interactions"  # Google's Interactions API


PATHS = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES, "interactions": INTERACTIONS}


USER = [{"role": "user", "content": "Say something about harmony."}]


REQUESTS: dict[str, dict[str, object]] = {
    CHAT: {
        "model": "gpt-4o",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": USER,
    },
    RESPONSES: {"model": "gpt-5", "stream": True, "input": "Say something about harmony."},
    MESSAGES: {"model": "claude-sonnet-4-5", "max_tokens": 400, "stream": True, "messages": USER},
    INTERACTIONS: {
        "model": "gemini-3-flash-preview",
        "stream": True,
        "input": "Say something about harmony.",
    },
}


IO_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    """The simulator keeping the body bytes it writes (import it to override
    tests/e2e/conftest.py's)."""
    with run_in_thread(keep_bodies=True) as simulator:
        yield simulator


@dataclass
class Received:
    """What a raw client read, parsed (a truncated chunk's bytes are kept)."""

    raw: bytes
    ended: str  # complete | eof | reset | left (the client went away) | timeout
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False  # the framing said the body was whole

    @property
    def head_done(self) -> bool:
        return self.status is not None

    def events(self) -> int:
        """SSE events fully received (the simulator ends lines with LF)."""
        return self.body.count(b"\n\n")


def parse(raw: bytes, ended: str) -> Received:
    got = Received(raw, ended)
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return got
    lines = head.decode("latin-1").split("\r\n")
    got.status = int(lines[0].split(" ")[1])
    for line in lines[1:]:
        name, _, value = line.partition(":")
        got.headers[name.strip().lower()] = value.strip()
    if "chunked" in got.headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line, nl, after = rest.partition(b"\r\n")
            if not nl:
                break
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                got.complete = True
                break
            body += after[:size]
            if len(after) < size + 2:
                break
            rest = after[size + 2 :]
        got.body = bytes(body)
    elif "content-length" in got.headers:
        length = int(got.headers["content-length"])
        got.body = rest[:length]
        got.complete = len(rest) >= length
    else:
        got.body = rest
    return got


def request_bytes(
    path: str, body: bytes, headers: dict[str, str] | None = None, method: str = "POST"
) -> bytes:
    """An HTTP/1.1 request to 127.0.0.1 as bytes (``content-length`` given, no framing
    added to ``body``)."""
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1"]
    if method != "GET" or body:
        lines.append(f"content-length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def exchange(
    port: int,
    data: bytes,
    *,
    leave_when: Callable[[Received], bool] | None = None,
    reset: bool = True,
    timeout: float = IO_TIMEOUT,
) -> Received:
    """Send ``data``, read until the response is complete or the server ends it (or
    ``leave_when`` says go, then leave: a TCP reset with SO_LINGER 0, or a clean close)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.settimeout(0.02 if leave_when is not None else timeout)
    raw = b""
    ended = "timeout"
    deadline = time.monotonic() + timeout
    try:
        sock.sendall(data)
        while time.monotonic() < deadline:
            if leave_when is not None and leave_when(parse(raw, "")):
                ended = "left"
                break
            try:
                piece = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                ended = "reset"
                break
            if not piece:
                ended = "eof"
                break
            raw += piece
            if parse(raw, "").complete:
                ended = "complete"
                break
    finally:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    return parse(raw, ended)
