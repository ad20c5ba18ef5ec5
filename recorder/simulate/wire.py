"""Bytes on the wire: content codings and HTTP/1.1 body framing.

Compression is streaming: every piece (an event, a keepalive) is compressed
and flushed on its own, as a streaming server must, so the client can decode
each event when it arrives. The compressors are deterministic (gzip's header
carries no time), so the same request still gives the same bytes.

``brotli`` and ``zstd`` are optional: brotli from the ``brotli`` package,
zstd from ``compression.zstd`` (Python 3.14) or ``backports.zstd``. When one is
missing it is simply not offered.
"""

from __future__ import annotations

import importlib
import zlib
from types import ModuleType
from typing import Any


def _optional(*names: str) -> ModuleType | None:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_brotli = _optional("brotli")
_zstd = _optional("compression.zstd", "backports.zstd")

# The server's preference when the client accepts several (ties in q-value).
PREFERENCE = ("zstd", "br", "gzip", "deflate")


def available() -> tuple[str, ...]:
    """The content codings this process can produce (``identity`` always)."""
    out = ["identity", "gzip", "deflate"]
    if _brotli is not None:
        out.append("br")
    if _zstd is not None:
        out.append("zstd")
    return tuple(out)


def negotiate(accept_encoding: str | None) -> str:
    """The best coding for an ``Accept-Encoding`` header (``identity`` if none fits)."""
    if not accept_encoding:
        return "identity"
    offered = available()
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights[name.strip().lower()] = q
    best, best_q = "identity", 0.0
    for coding in PREFERENCE:
        if coding not in offered:
            continue
        q = weights.get(coding, weights.get("*", 0.0))
        if q > best_q:
            best, best_q = coding, q
    return best


class Encoder:
    """A streaming content coder: ``piece()`` per write, ``finish()`` at the end."""

    def __init__(self, coding: str) -> None:
        if coding not in available():
            raise ValueError(f"content coding {coding!r} is not available here")
        self.coding = coding
        self._c: Any = None
        if coding == "gzip":
            self._c = zlib.compressobj(6, zlib.DEFLATED, 31)
        elif coding == "deflate":
            self._c = zlib.compressobj(6, zlib.DEFLATED, 15)  # zlib-wrapped, per RFC 9110
        elif coding == "br":
            assert _brotli is not None
            self._c = _brotli.Compressor()
        elif coding == "zstd":
            assert _zstd is not None
            self._c = _zstd.ZstdCompressor()

    def piece(self, data: bytes) -> bytes:
        """Compress ``data`` and flush, so the client can decode it now."""
        c = self._c
        if c is None:
            return data
        if self.coding in ("gzip", "deflate"):
            return bytes(c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH))
        if self.coding == "br":
            return bytes(c.process(data) + c.flush())
        assert _zstd is not None
        return bytes(c.compress(data, _zstd.ZstdCompressor.FLUSH_BLOCK))

    def finish(self) -> bytes:
        """The coding's trailer (empty for identity)."""
        c = self._c
        if c is None:
            return b""
        if self.coding in ("gzip", "deflate"):
            return bytes(c.flush(zlib.Z_FINISH))
        if self.coding == "br":
            return bytes(c.finish())
        assert _zstd is not None
        return bytes(c.flush(_zstd.ZstdCompressor.FLUSH_FRAME))


def decode(coding: str, data: bytes) -> bytes:
    """Decompress a whole body (for tests and the simulator's own checks)."""
    if coding == "identity":
        return data
    if coding == "gzip":
        return zlib.decompress(data, 31)
    if coding == "deflate":
        return zlib.decompress(data, 15)
    if coding == "br":
        assert _brotli is not None
        return bytes(_brotli.decompress(data))
    if coding == "zstd":
        assert _zstd is not None
        return bytes(_zstd.decompress(data))
    raise ValueError(f"unknown content coding {coding!r}")


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (empty data gives nothing: an empty chunk ends the body)."""
    if not data:
        return b""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
