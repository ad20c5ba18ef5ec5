"""Content decoding on the side of a tapped stream, piece by piece."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from recorder.proxy.decoding import decoder_for, zstd

BODY = ("data: " + "調和 harmony " * 50 + "\n\n").encode() * 20


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize(
    ("coding", "compress"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as the RFC says
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw, as many servers send
        ("br", brotli.compress),
        ("zstd", zstd.compress),
        ("zstd", lambda b: zstd.compress(b[:100]) + zstd.compress(b[100:])),  # two frames
    ],
)
@pytest.mark.parametrize("size", [1, 7, 4096])
@pytest.mark.parametrize("limit", [1, 100, 1 << 20])
def test_decoders_restore_the_body(coding: str, compress: object, size: int, limit: int) -> None:
    """Whatever the pieces and however little is asked for each time, the backlog
    drained gives the body, never more than asked for per call."""
    decoder = decoder_for(coding)
    assert decoder is not None
    encoded = compress(BODY)  # type: ignore[operator]
    out = []
    for p in pieces(encoded, size):
        got = decoder.decode(p, limit)
        # (brotli's buffer grows in steps past what is asked for: at most about twice)
        assert len(got) <= (2 * limit + (1 << 16) if coding == "br" else limit)
        out.append(got)
        while decoder.backlog and (more := decoder.decode(b"", limit)):
            out.append(more)
    assert b"".join(out) == BODY
    assert not decoder.backlog


BOMB = b"data: " + b"x" * (64 << 20) + b"\n\n"  # 64 MiB of one letter: a few KiB encoded


@pytest.mark.parametrize(
    ("coding", "compress"),
    [("gzip", gzip.compress), ("br", brotli.compress), ("zstd", zstd.compress)],
)
def test_a_bomb_gives_no_more_than_asked_for_and_waits(coding: str, compress: object) -> None:
    encoded = compress(BOMB)  # type: ignore[operator]
    assert len(encoded) < len(BOMB) // 500
    decoder = decoder_for(coding)
    assert decoder is not None
    # (brotli's buffer grows in steps past what is asked for: at most about twice)
    bound = (2 << 20 if coding == "br" else 1 << 20) + (1 << 16)
    first = decoder.decode(encoded, 1 << 20)
    assert 0 < len(first) <= bound  # a slice, not 64 MiB
    assert decoder.backlog  # the rest waits for later calls
    total = len(first)
    while decoder.backlog and (more := decoder.decode(b"", 1 << 20)):
        assert len(more) <= bound
        total += len(more)
    assert total == len(BOMB)


def test_identity_and_absent_need_no_decoder() -> None:
    assert decoder_for(None) is None
    assert decoder_for("") is None
    assert decoder_for("identity") is None


@pytest.mark.parametrize("coding", ["compress", "gzip, br", "snappy"])
def test_unsupported_codings_are_refused(coding: str) -> None:
    with pytest.raises(ValueError):
        decoder_for(coding)
