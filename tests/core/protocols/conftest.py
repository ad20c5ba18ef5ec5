"""Small builders shared by the protocol edge-case tests (the ``wire`` fixture).

Each test writes its body by hand; these helpers only frame it and meter it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from recorder.core import StreamMeter, StreamRecord

Payload = dict[str, Any] | str | bytes


def _raw(payload: Payload) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload, ensure_ascii=False).encode()


class Wire:
    """Framing and metering helpers, reached through the ``wire`` fixture."""

    @staticmethod
    def data(payload: Payload) -> bytes:
        """``data: <payload>`` and a blank line (Chat Completions framing)."""
        return b"data: " + _raw(payload) + b"\n\n"

    @staticmethod
    def event(payload: Payload, event: str | None = None) -> bytes:
        """``event: <type>`` then ``data: <payload>`` (Responses / Messages framing)."""
        if event is None:
            assert isinstance(payload, dict)
            event = payload["type"]
        return b"event: " + event.encode() + b"\n" + Wire.data(payload)

    @staticmethod
    def meter(endpoint: str, body: bytes | Iterable[bytes]) -> StreamRecord:
        """Replay a body offline (no timings); also checks byte-at-a-time agrees."""
        pieces = [body] if isinstance(body, bytes) else list(body)
        m = StreamMeter(endpoint)
        for piece in pieces:
            m.feed(piece)
        rec = m.finish()
        joined = b"".join(pieces)
        m2 = StreamMeter(endpoint)
        for i in range(len(joined)):
            m2.feed(joined[i : i + 1])
        assert m2.finish().to_dict() == rec.to_dict()
        return rec

    @staticmethod
    def timed(
        endpoint: str, pieces: Iterable[tuple[float, bytes]], end: float, *, eof: str = "eof"
    ) -> StreamRecord:
        """Meter pieces arriving at the given times (seconds after a start at 0.0)."""
        m = StreamMeter(endpoint, start=0.0)
        m.headers(0.05, 200)
        for now, piece in pieces:
            m.feed(piece, now)
        return m.finish(end, ending=eof)

    @staticmethod
    def body(endpoint: str, payload: Payload, status: int | None = 200) -> StreamRecord:
        """A whole non-streamed JSON response body (``stream: false``)."""
        m = StreamMeter(endpoint)
        m.headers(None, status)
        m.read_body(_raw(payload))
        return m.finish()


@pytest.fixture
def wire() -> type[Wire]:
    return Wire
