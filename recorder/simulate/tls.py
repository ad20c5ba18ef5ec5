"""Serving HTTPS: the TLS context the simulator listens with.

The simulator speaks HTTP/1.1 only, so it offers ``http/1.1`` by ALPN: a client
that offers ``h2`` too (mitmproxy does, towards an upstream) then knows at once
that it must speak HTTP/1.1, instead of guessing from the absence of an answer.
"""

from __future__ import annotations

import ssl
from pathlib import Path

ALPN = ("http/1.1",)


def server_context(certfile: str | Path, keyfile: str | Path | None = None) -> ssl.SSLContext:
    """A server TLS context with ``certfile`` (PEM, the chain after the leaf) and
    its key (``keyfile``, or in ``certfile`` itself). Raises ``OSError`` for a file
    it cannot read and ``ssl.SSLError`` for one that is not a certificate or key."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(certfile), str(keyfile) if keyfile is not None else None)
    ctx.set_alpn_protocols(list(ALPN))
    return ctx
