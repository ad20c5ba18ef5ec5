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
def test_decoders_restore_the_body(coding: str, compress: object, size: int) -> None:
    decoder = decoder_for(coding)
    assert decoder is not None
    encoded = compress(BODY)  # type: ignore[operator]
    assert b"".join(decoder.decode(p) for p in pieces(encoded, size)) == BODY


def test_identity_and_absent_need_no_decoder() -> None:
    assert decoder_for(None) is None
    assert decoder_for("") is None
    assert decoder_for("identity") is None


@pytest.mark.parametrize("coding", ["compress", "gzip, br", "snappy"])
def test_unsupported_codings_are_refused(coding: str) -> None:
    with pytest.raises(ValueError):
        decoder_for(coding)
