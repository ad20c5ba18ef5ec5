"""Incremental content decoding on the side of a tapped body, bounded.

mitmproxy hands the stream callable transfer-decoded but NOT content-decoded
bytes. The addon strips Accept-Encoding on metered requests so that upstreams
normally send plain bodies; an upstream that compresses anyway is decoded here,
piece by piece, for the meter only. The client always receives the original
bytes.

A compressed body can be a bomb (64 KiB of zstd that decodes to 2 GiB), so a
decoder never produces more than it is asked for: ``decode(data, limit)`` takes
``data`` in and returns at most ``limit`` bytes; what the input still holds waits
in the decoder (``backlog``) for the next call, which may bring no new input.
The tap asks for a little at a time, so no call holds the event loop long, and
stops asking past a limit per body (``recorder.proxy.tap``).
"""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli

try:  # the same zstd mitmproxy itself uses
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # Python < 3.14
    from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]


class Decoder(Protocol):
    """Turns pieces of an encoded body into pieces of the plain body, bounded."""

    def decode(self, data: bytes, limit: int) -> bytes:
        """Take ``data`` in; return at most ``limit`` bytes of output (``b""`` while the
        decoder buffers). What is left waits for the next call."""
        ...

    @property
    def backlog(self) -> bool:
        """Whether input taken in may still give output without more input."""
        ...


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)
        self._queued = b""  # input taken in, not yet given to the decompressor

    def decode(self, data: bytes, limit: int) -> bytes:
        self._queued += data
        if not self._queued or limit <= 0:
            return b""
        out = self._d.decompress(self._queued, limit)
        self._queued = self._d.unconsumed_tail
        return out

    @property
    def backlog(self) -> bool:
        return bool(self._queued)


class _Deflate:
    """``deflate`` is zlib-wrapped by the RFC, raw by many servers: try both."""

    def __init__(self) -> None:
        self._d: _Zlib | None = None
        self._head = b""

    def decode(self, data: bytes, limit: int) -> bytes:
        if self._d is None:
            self._head += data
            if len(self._head) < 2:
                return b""
            cmf, flg = self._head[0], self._head[1]
            wrapped = (cmf & 0x0F) == 8 and ((cmf << 8) | flg) % 31 == 0
            self._d = _Zlib(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self._head = self._head, b""
        return self._d.decode(data, limit)

    @property
    def backlog(self) -> bool:
        return self._d is not None and self._d.backlog


class _Brotli:
    """(Its output buffer grows in steps: a call may give up to about twice
    ``limit``.)"""

    def __init__(self) -> None:
        self._d = brotli.Decompressor()
        self._queued = b""

    def decode(self, data: bytes, limit: int) -> bytes:
        self._queued += data
        if limit <= 0:
            return b""
        if not self._d.can_accept_more_data():  # output of earlier input first
            return bytes(self._d.process(b"", output_buffer_limit=limit))
        if not self._queued:
            return b""
        queued, self._queued = self._queued, b""
        return bytes(self._d.process(queued, output_buffer_limit=limit))

    @property
    def backlog(self) -> bool:
        return bool(self._queued) or not self._d.can_accept_more_data()


class _Zstd:
    def __init__(self) -> None:
        self._d = zstd.ZstdDecompressor()
        self._queued = b""

    def decode(self, data: bytes, limit: int) -> bytes:
        self._queued += data
        out = b""
        while len(out) < limit:
            if self._d.needs_input:
                if not self._queued:
                    break
                data, self._queued = self._queued, b""
            else:
                data = b""  # output of earlier input first
            out += self._d.decompress(data, max_length=limit - len(out))
            if self._d.eof:  # a body may hold several frames
                self._queued = self._d.unused_data + self._queued
                self._d = zstd.ZstdDecompressor()
        return out

    @property
    def backlog(self) -> bool:
        return bool(self._queued) or not self._d.needs_input


def decoder_for(content_encoding: str | None) -> Decoder | None:
    """A decoder for a ``Content-Encoding`` value; None for identity.

    Raises ValueError for an encoding we cannot decode.
    """
    if not content_encoding:
        return None
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise ValueError(f"stacked content encodings are not supported: {content_encoding}")
    coding = codings[0]
    if coding in ("gzip", "x-gzip"):
        return _Zlib(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return _Deflate()
    if coding == "br":
        return _Brotli()
    if coding == "zstd":
        return _Zstd()
    raise ValueError(f"unknown content encoding: {content_encoding}")
