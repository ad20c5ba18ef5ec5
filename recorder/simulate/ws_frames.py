"""The simulator's WebSocket layer (RFC 6455, server side): the upgrade, frames
read and written, compression (permessage-deflate, RFC 7692), pings.

Hand-written, as the HTTP/1 layer is, so that a fault can put on the wire what
it asks: a close frame with a given code in the middle of a response, a TCP
reset or a close without any close frame. Compression is negotiated without
context takeover either way (each message compressed on its own), which every
client accepts.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
import zlib
from dataclasses import dataclass

from recorder.simulate.http1 import ClientGone, Conn, Request, status_head

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 16 * 1024 * 1024
DEFLATE_TAIL = b"\x00\x00\xff\xff"
DEFLATE_RESPONSE = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class BadFrame(Exception):
    """A frame the protocol does not allow (the connection is closed with 1002)."""


def is_upgrade(req: Request) -> bool:
    """Whether ``req`` asks to become a WebSocket."""
    upgrade = req.headers.get("upgrade", "").lower()
    connection = {t.strip().lower() for t in req.headers.get("connection", "").split(",")}
    return req.method == "GET" and upgrade == "websocket" and "upgrade" in connection


def accept(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` for a client's key."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def offers_deflate(req: Request) -> bool:
    offers = req.headers.get("sec-websocket-extensions", "")
    return any(o.split(";")[0].strip() == "permessage-deflate" for o in offers.split(","))


@dataclass(slots=True)
class Message:
    """One message the client sent (control frames are answered where they come)."""

    opcode: int
    data: bytes


class WebSocket:
    """One upgraded connection: messages in and out."""

    def __init__(self, conn: Conn, *, deflate: bool) -> None:
        self.conn = conn
        self.deflate = deflate
        self.closed = False  # a close frame was sent or received
        self.close_code: int | None = None  # the client's, when it closed

    @classmethod
    async def upgrade(
        cls, conn: Conn, req: Request, extra: list[tuple[str, str]], *, deflate: bool
    ) -> WebSocket:
        """Answer the upgrade (101) and return the connection."""
        headers = [
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-accept", accept(req.headers.get("sec-websocket-key", ""))),
        ]
        deflate = deflate and offers_deflate(req)
        if deflate:
            headers.append(("sec-websocket-extensions", DEFLATE_RESPONSE))
        protocols = req.headers.get("sec-websocket-protocol")
        if protocols:  # the first one offered (a browser's "realtime, openai-insecure-...")
            headers.append(("sec-websocket-protocol", protocols.split(",")[0].strip()))
        await conn.send(status_head(101, [*headers, *extra]))
        return cls(conn, deflate=deflate)

    # -- writing ----------------------------------------------------------------

    def _frame(self, opcode: int, payload: bytes, *, compress: bool = False) -> bytes:
        first = 0x80 | opcode
        if compress:
            c = zlib.compressobj(wbits=-15)
            payload = c.compress(payload) + c.flush(zlib.Z_SYNC_FLUSH)
            if payload.endswith(DEFLATE_TAIL):
                payload = payload[: -len(DEFLATE_TAIL)]
            first |= 0x40  # RSV1: this message is compressed
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", first, n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", first, 126, n)
        else:
            head = struct.pack("!BBQ", first, 127, n)
        return head + payload

    async def send_text(self, data: bytes) -> None:
        await self.conn.send(self._frame(TEXT, data, compress=self.deflate))

    async def ping(self, payload: bytes = b"") -> None:
        await self.conn.send(self._frame(PING, payload))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """A close frame (once), then the connection closes."""
        if not self.closed:
            self.closed = True
            with _quiet():
                await self.conn.send(self._frame(CLOSE, struct.pack("!H", code) + reason.encode()))
        await self.conn.close()

    # -- reading ----------------------------------------------------------------

    async def _exactly(self, n: int) -> bytes:
        try:
            return await self.conn.reader.readexactly(n)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            raise ClientGone from e

    async def _frame_in(self) -> tuple[bool, int, bool, bytes]:
        b0, b1 = await self._exactly(2)
        fin, rsv1, opcode = bool(b0 & 0x80), bool(b0 & 0x40), b0 & 0x0F
        if not b1 & 0x80:
            raise BadFrame("a client frame must be masked")
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self._exactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self._exactly(8))
        if n > MAX_MESSAGE:
            raise BadFrame("frame too large")
        mask = await self._exactly(4)
        data = bytearray(await self._exactly(n))
        for i in range(n):
            data[i] ^= mask[i & 3]
        return fin, opcode, rsv1, bytes(data)

    async def receive(self) -> Message | None:
        """The client's next message; None once it closed. Pings are answered."""
        parts: list[bytes] = []
        kind = None
        compressed = False
        while True:
            fin, opcode, rsv1, data = await self._frame_in()
            if opcode == PING:
                await self.conn.send(self._frame(PONG, data))
                continue
            if opcode == PONG:
                continue
            if opcode == CLOSE:
                self.close_code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                if not self.closed:
                    self.closed = True
                    with _quiet():
                        await self.conn.send(self._frame(CLOSE, data[:2]))
                return None
            if opcode in (TEXT, BINARY):
                kind, compressed, parts = opcode, rsv1, [data]
            elif opcode == CONT and kind is not None:
                parts.append(data)
            else:
                raise BadFrame(f"unexpected opcode {opcode}")
            if fin:
                payload = b"".join(parts)
                if compressed:
                    payload = zlib.decompressobj(wbits=-15).decompress(payload + DEFLATE_TAIL)
                return Message(kind, payload)


class _quiet:
    """Writing to a client that may be gone already: its absence is not an error."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, ClientGone | ConnectionError | OSError)


def new_key() -> str:
    """A client's ``Sec-WebSocket-Key`` (tests that speak WebSocket by hand)."""
    return base64.b64encode(os.urandom(16)).decode()
