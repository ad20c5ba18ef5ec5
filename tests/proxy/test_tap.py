"""The body tap, on its own: what it meters does not depend on how the body was cut."""

from __future__ import annotations

import pytest

from recorder.core.meter import StreamMeter
from recorder.metrics.health import Health
from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.tap import BATCH_PIECES, Tap

# named events, short lines: a line's end falls in the first batch of one-byte pieces
STREAM = (
    b"\r\n"  # white space before the first sign: says nothing
    b"event: response.created\n"
    b'data: {"type":"response.created","response":{"id":"resp_1","model":"gpt-5"}}\n\n'
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta","delta":"Hi"}\n\n'
    b"event: response.completed\n"
    b'data: {"type":"response.completed","response":{"id":"resp_1","status":"completed",'
    b'"usage":{"input_tokens":7,"output_tokens":1,"total_tokens":8}}}\n\n'
)


def _metered(pieces: list[bytes], batch: int) -> tuple[int, str | None, str | None]:
    meter = StreamMeter("responses", start=0.0)
    meter.headers(0.01, 200)
    tap = Tap(lambda: meter, None, InternalErrors(Health()), "text/event-stream")
    for n, piece in enumerate(pieces):
        tap.pieces.append(piece)
        tap.stamps.append(0.02 + n / 1000)
        if len(tap.pieces) >= batch:
            tap.meter_waiting()
    tap.meter_waiting(final=True)
    rec = meter.finish(1.0, ending="eof")
    return rec.events or 0, rec.outcome, rec.response_id


@pytest.mark.parametrize("batch", [1, 7, BATCH_PIECES])
def test_one_byte_pieces_meter_as_the_whole_body(batch: int) -> None:
    """White space is left out only before the first sign: a line's end that comes
    as a piece of its own in the batch that tells what the body is still ends its
    line."""
    whole = _metered([STREAM], 1)
    assert whole == (3, "completed", "resp_1")
    assert _metered([STREAM[i : i + 1] for i in range(len(STREAM))], batch) == whole
