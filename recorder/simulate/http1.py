"""The simulator's HTTP/1.1 layer: parsing requests, writing bytes, noticing the
client left, resetting or closing the connection.

Hand-written rather than borrowed so that every fault can be put on the wire as
asked: a write of one byte, a TCP reset once the kernel has sent what was written
(``SO_LINGER`` 0), a close without the last chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http
import socket
import struct
import termios
from dataclasses import dataclass

MAX_BODY = 32 * 1024 * 1024
MAX_HEAD = 64 * 1024
POLL_S = 0.05  # how often a wait looks for a vanished client
RST_FLUSH_S = 1.0  # how long a reset waits for the kernel to send what was written
REASONS = {529: "Site Overloaded"}


class ClientGone(Exception):
    """The client closed or reset the connection."""


class BadHTTP(Exception):
    """A request the server cannot parse; answered with ``status`` and closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Request:
    """A parsed HTTP request."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.split("?", 1)[0]

    def keep_alive(self) -> bool:
        """Whether the client wants the connection kept open."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


class Conn:
    """One client connection: reading, writing, noticing the client left."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.bytewise: float | None = None
        self.written = 0

    def gone(self) -> bool:
        """True once the client closed or reset its side."""
        r = self.reader
        return r.at_eof() or r.exception() is not None or self.writer.transport.is_closing()

    async def send(self, data: bytes) -> None:
        """Write raw bytes (one byte per write with ``bytewise``)."""
        if not data:
            return
        try:
            if self.bytewise is None:
                self.writer.write(data)
                await self.writer.drain()
            else:
                for i in range(len(data)):
                    self.writer.write(data[i : i + 1])
                    await self.writer.drain()
                    if self.bytewise:
                        await asyncio.sleep(self.bytewise)
        except (ConnectionError, OSError) as e:
            raise ClientGone from e
        if self.writer.transport.is_closing():
            raise ClientGone
        self.written += len(data)

    async def sleep(self, seconds: float) -> None:
        """Sleep, but give up as soon as the client goes away."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while True:
            if self.gone():
                raise ClientGone
            left = end - loop.time()
            if left <= 0:
                return
            await asyncio.sleep(min(left, POLL_S))

    async def reset(self) -> None:
        """Abort with a TCP RST, once the kernel has sent what we wrote."""
        sock = self.writer.get_extra_info("socket")
        loop = asyncio.get_running_loop()
        end = loop.time() + RST_FLUSH_S
        transport = self.writer.transport
        while transport.get_write_buffer_size() and loop.time() < end:
            await asyncio.sleep(0.005)
        if sock is not None:
            while loop.time() < end:
                try:
                    buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                    if struct.unpack("i", buf)[0] == 0:
                        break
                except OSError:
                    await asyncio.sleep(0.05)
                    break
                await asyncio.sleep(0.005)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def close(self) -> None:
        """Close (FIN) after flushing."""
        with contextlib.suppress(Exception):
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)


async def read_request(conn: Conn) -> Request | None:
    """The next request on the connection, or None at a clean end."""
    reader = conn.reader
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise BadHTTP(400, "incomplete request head") from e
    except asyncio.LimitOverrunError as e:
        raise BadHTTP(431, "request head too large") from e
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadHTTP(400, f"bad request line {lines[0]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadHTTP(400, f"bad header line {line!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if headers.get("expect", "").lower() == "100-continue":
        await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = b""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise BadHTTP(400, "bad Content-Length") from None
            if length < 0 or length > MAX_BODY:
                raise BadHTTP(413, "request body too large")
            body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise ClientGone from e
    return Request(method, target, version, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadHTTP(400, "bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise BadHTTP(413, "request body too large")
        body += (await reader.readexactly(size + 2))[:-2]


def status_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and headers of a response, up to the blank line."""
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = REASONS.get(status, "Error")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
