"""Incremental content decoding on the side of a tapped stream.

mitmproxy hands the stream callable transfer-decoded but NOT content-decoded
bytes. The addon strips Accept-Encoding on tapped requests so that upstreams
normally send plain SSE; an upstream that compresses anyway is decoded here,
piece by piece, for the meter only. The client always receives the original
bytes.
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
    """Turns pieces of an encoded body into pieces of the plain body."""

    def decode(self, data: bytes) -> bytes:
        """Decode one piece (may return b"" while the decoder buffers)."""


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)

    def decode(self, data: bytes) -> bytes:
        return self._d.decompress(data)


class _Deflate:
    """``deflate`` is zlib-wrapped by the RFC, raw by many servers: try both."""

    def __init__(self) -> None:
        self._d: zlib._Decompress | None = None
        self._head = b""

    def decode(self, data: bytes) -> bytes:
        if self._d is None:
            self._head += data
            if len(self._head) < 2:
                return b""
            cmf, flg = self._head[0], self._head[1]
            wrapped = (cmf & 0x0F) == 8 and ((cmf << 8) | flg) % 31 == 0
            self._d = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self._head = self._head, b""
        return self._d.decompress(data)


class _Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def decode(self, data: bytes) -> bytes:
        return bytes(self._d.process(data))


class _Zstd:
    def __init__(self) -> None:
        self._d = zstd.ZstdDecompressor()

    def decode(self, data: bytes) -> bytes:
        out = b""
        while data:
            out += self._d.decompress(data)
            if not self._d.eof:
                break
            data = self._d.unused_data  # a body may hold several frames
            self._d = zstd.ZstdDecompressor()
        return out


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
