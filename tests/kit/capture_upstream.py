"""An upstream that keeps every request exactly as the bytes it received (its head
and its body) and answers each with one short, complete Chat Completions stream:
what a test needs to see what the proxy forwarded, byte for byte. Loopback only,
a free port, one thread per connection."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# a whole stream: a role chunk, one delta, the finish with its usage, [DONE]
ANSWER = (
    b'data: {"id":"chatcmpl-cap","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"id":"chatcmpl-cap","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
    b'data: {"id":"chatcmpl-cap","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}\n\n'
    b"data: [DONE]\n\n"
)


@dataclass
class Received:
    """One request as it arrived: the head (request line and header lines, through
    the blank line) and the body."""

    head: bytes
    body: bytes

    @property
    def header_lines(self) -> list[bytes]:
        """The header lines, in order, as sent."""
        return self.head.split(b"\r\n")[1:-2]


@dataclass
class CaptureUpstream:
    url: str = ""
    received: list[Received] = field(default_factory=list)


def _read_request(sock: socket.socket) -> Received | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    head += b"\r\n\r\n"
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        body += chunk
    return Received(head, body)


@contextmanager
def capture_upstream() -> Iterator[CaptureUpstream]:
    upstream = CaptureUpstream()
    lock = threading.Lock()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            while True:
                got = _read_request(sock)
                if got is None:
                    return
                with lock:
                    upstream.received.append(got)
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    + b"Content-Length: %d\r\n\r\n" % len(ANSWER)
                    + ANSWER
                )

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    upstream.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
