"""An upstream that sends a body in lockstep with its client, to catch a proxy that
holds a body back (buffers it) in the act, with no timed assertion.

``Lockstep`` listens on 127.0.0.1 and answers each request with the response the
test queued (``respond``): its headers and first piece at once, each next piece
only once the client says it has the one before (``fetch`` says so as the bytes
arrive). A proxy that buffers the body keeps the client from ever saying so: the
upstream then waits ``HOLD_S`` (a bound, so that the test ends), notes that it was
``held_back``, and sends the rest.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

HOLD_S = 8.0


@dataclass
class Reply:
    """One queued response, and what became of it."""

    status: int
    headers: list[tuple[str, str]]
    pieces: list[bytes]
    sized: bool = False  # a Content-Length (else chunked)
    path: str | None = None  # the request target it answers (None: any)
    released: list[threading.Event] = field(default_factory=list)
    held_back: bool = False  # a piece waited HOLD_S for the client in vain
    request_head: bytes = b""

    def __post_init__(self) -> None:
        self.released = [threading.Event() for _ in self.pieces]


class Lockstep:
    """The upstream (see the module's docstring); ``url`` is its address."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._queue: list[Reply] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def respond(
        self,
        pieces: list[bytes],
        content_type: str,
        *,
        status: int = 200,
        sized: bool = False,
        headers: list[tuple[str, str]] | None = None,
        path: str | None = None,
    ) -> Reply:
        """Queue the response to the next request (to ``path``, if given)."""
        reply = Reply(
            status, [("content-type", content_type), *(headers or [])], pieces, sized, path
        )
        with self._lock:
            self._queue.append(reply)
        return reply

    def close(self) -> None:
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            head, _, rest = head.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += conn.recv(65536)
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            with self._lock:
                reply = next(r for r in self._queue if r.path in (None, target))
                self._queue.remove(reply)
            reply.request_head = head
            lines = [f"HTTP/1.1 {reply.status} OK"] + [f"{k}: {v}" for k, v in reply.headers]
            total = sum(map(len, reply.pieces))
            lines.append(
                f"content-length: {total}" if reply.sized else "transfer-encoding: chunked"
            )
            conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            for i, piece in enumerate(reply.pieces):
                if i and not reply.held_back and not reply.released[i - 1].wait(HOLD_S):
                    reply.held_back = True
                conn.sendall(piece if reply.sized else b"%x\r\n%s\r\n" % (len(piece), piece))
            if not reply.sized:
                conn.sendall(b"0\r\n\r\n")


@contextmanager
def lockstep() -> Iterator[Lockstep]:
    server = Lockstep()
    try:
        yield server
    finally:
        server.close()


def fetch(
    port: int, path: str, reply: Reply, body: bytes = b"{}", headers: dict[str, str] | None = None
) -> bytes:
    """POST ``body`` to ``path`` through the proxy on 127.0.0.1:``port`` (with
    ``headers`` too); tell the upstream each piece of ``reply`` as soon as it has
    arrived; the body received."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=4 * HOLD_S)
    try:
        conn.request("POST", path, body, {"content-type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        got = b""
        bounds = []
        total = 0
        for piece in reply.pieces:
            total += len(piece)
            bounds.append(total)
        while True:
            data = resp.read1(65536)
            if not data:
                break
            got += data
            for i, bound in enumerate(bounds):
                if len(got) >= bound:
                    reply.released[i].set()
        return got
    finally:
        conn.close()
