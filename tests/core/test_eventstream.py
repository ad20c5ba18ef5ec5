"""The event-stream framer, held to botocore's own reader (``EventStreamBuffer``):
what botocore encodes and decodes, the framer reads alike, at any split; damage
is counted and never stops the stream; a huge message is never held."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path
from zlib import crc32

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.core.eventstream import EventStreamFramer, encode_message, read_headers
from recorder.core.framing import Event, FramingIssue, IssueKind

CAPTURES = sorted((Path(__file__).parent.parent / "fixtures" / "bedrock").glob("*.bin"))


def botocore_read(body: bytes) -> list[tuple[str, str, bytes]]:
    """(message type, name, payload) of each message, as botocore reads them."""
    buf = EventStreamBuffer()
    buf.add_data(body)
    out = []
    for msg in buf:
        h = msg.headers
        mtype = h.get(":message-type", "event")
        name = h.get(":exception-type") if mtype == "exception" else h.get(":event-type")
        out.append((mtype, name, msg.payload))
    return out


def ours(pieces: list[bytes]) -> tuple[list[tuple[str | None, str, bytes]], list[FramingIssue]]:
    framer = EventStreamFramer()
    events, issues = [], []
    for piece in [*pieces, b""]:
        for item in framer.feed(piece):
            if isinstance(item, Event):
                events.append((item.id, item.event, item.data))
            else:
                assert isinstance(item, FramingIssue)
                issues.append(item)
    return events, issues


def message(name: str, payload: bytes, mtype: str = "event") -> bytes:
    key = ":exception-type" if mtype == "exception" else ":event-type"
    headers = {key: name, ":content-type": "application/json", ":message-type": mtype}
    return encode_message(headers, payload)


def body_of(n: int) -> bytes:
    parts = [message("messageStart", b'{"role":"assistant"}')]
    parts += [message("contentBlockDelta", b'{"delta":{"text":"w%d"}}' % i) for i in range(n)]
    parts.append(message("throttlingException", b'{"message":"slow down"}', "exception"))
    return b"".join(parts)


@pytest.mark.parametrize("capture", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_a_real_capture_reads_as_botocore_reads_it(capture: Path) -> None:
    body = capture.read_bytes()
    events, issues = ours([body])
    assert issues == []
    assert events == botocore_read(body)
    assert events  # (the captures run from one exception message to 37 events)


@pytest.mark.parametrize("capture", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_every_split_of_a_real_capture_reads_alike(capture: Path) -> None:
    body = capture.read_bytes()
    expected = botocore_read(body)
    for cut in range(1, len(body), 7):
        events, issues = ours([body[:cut], body[cut:]])
        assert (events, issues) == (expected, []), cut
    events, issues = ours([body[i : i + 1] for i in range(len(body))])
    assert (events, issues) == (expected, [])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 12), cuts=st.lists(st.integers(0, 4000), max_size=12))
def test_any_split_reads_as_botocore(n: int, cuts: list[int]) -> None:
    body = body_of(n)
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    events, issues = ours([p for p in pieces if p])
    assert issues == []
    assert events == botocore_read(body)


def test_every_header_type_of_the_spec_reads_as_botocore_reads_it() -> None:
    block = b"".join(
        [
            b"\x04true\x00",
            b"\x05false\x01",
            b"\x04byte\x02\xff",
            b"\x05short\x03" + struct.pack(">h", -2),
            b"\x07integer\x04" + struct.pack(">i", 123456),
            b"\x04long\x05" + struct.pack(">q", -(2**40)),
            b"\x05bytes\x06" + struct.pack(">H", 3) + b"\x00\x01\x02",
            b"\x06string\x07" + struct.pack(">H", 5) + "h\u00e9l".encode() + b"o",
            b"\x09timestamp\x08" + struct.pack(">q", 1_700_000_000_000),
            b"\x04uuid\x09" + uuid.UUID(int=7).bytes,
        ]
    )
    total = 16 + len(block)
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", crc32(prelude))
    raw = prelude + block
    raw += struct.pack(">I", crc32(raw))
    buf = EventStreamBuffer()
    buf.add_data(raw)
    (theirs,) = list(buf)
    mine = read_headers(block)
    assert mine["uuid"] == uuid.UUID(int=7)
    mine["uuid"] = mine["uuid"].bytes  # botocore keeps a UUID's bytes
    assert mine == theirs.headers


def test_a_bad_message_crc_is_counted_and_the_stream_goes_on() -> None:
    good = message("contentBlockDelta", b'{"delta":{"text":"a"}}')
    bad = bytearray(good)
    bad[-6] ^= 0x01  # a payload byte: the message CRC no longer matches
    events, issues = ours([good + bytes(bad) + good])
    assert [e[1] for e in events] == ["contentBlockDelta", "contentBlockDelta"]
    assert [i.kind for i in issues] == [IssueKind.BAD_CRC]


def test_a_bad_prelude_crc_stops_framing_once_and_never_raises() -> None:
    good = message("contentBlockDelta", b'{"delta":{"text":"a"}}')
    bad = bytearray(good)
    bad[9] ^= 0x10  # the prelude CRC
    events, issues = ours([good, bytes(bad), good, good])
    assert len(events) == 1
    assert [i.kind for i in issues] == [IssueKind.BAD_CRC]


def test_a_50_mb_message_is_skipped_without_being_held() -> None:
    payload_len = 50 << 20
    header = {":event-type": "chunk", ":message-type": "event"}
    small = message("contentBlockDelta", b'{"delta":{"text":"a"}}')
    huge = encode_message(header, b"x" * payload_len)
    framer = EventStreamFramer()
    items = []
    peak = 0
    for i in range(0, len(huge), 1 << 20):
        items += framer.feed(huge[i : i + (1 << 20)])
        peak = max(peak, framer.pending_bytes)
    items += framer.feed(small) + framer.feed(b"")
    assert peak < 64
    assert [type(i) for i in items] == [FramingIssue, Event]
    assert items[0].kind is IssueKind.OVERSIZED
    assert items[0].size == len(huge)


def test_a_cut_message_is_unterminated() -> None:
    good = message("contentBlockDelta", b'{"delta":{"text":"a"}}')
    events, issues = ours([good, good[:20]])
    assert len(events) == 1
    assert [i.kind for i in issues] == [IssueKind.UNTERMINATED]


@pytest.mark.parametrize("junk", [b"\x00" * 40, b"\xff" * 40, b"not an event stream at all"])
def test_garbage_is_damage_not_an_exception(junk: bytes) -> None:
    events, issues = ours([junk])
    assert events == []
    assert issues


def test_feed_one_takes_exactly_one_sound_message() -> None:
    good = message("contentBlockDelta", b'{"delta":{"text":"a"}}')
    framer = EventStreamFramer()
    event = framer.feed_one(good)
    assert event is not None and event.event == "contentBlockDelta"
    assert framer.feed_one(good + good) is None
    assert framer.feed_one(good[:-1] + b"\x00") is None


def test_a_message_with_unreadable_headers_is_malformed_and_the_rest_is_read() -> None:
    good = message("contentBlockDelta", b'{"delta":{"text":"a"}}')
    block = b"\x04name\x0b"  # header type 11: no such type
    total = 16 + len(block)
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", crc32(prelude))
    raw = prelude + block
    raw += struct.pack(">I", crc32(raw))
    assert EventStreamFramer().feed_one(raw) is None
    for pieces in ([raw, good], [raw + good]):
        events, issues = ours(pieces)
        assert [e[1] for e in events] == ["contentBlockDelta"]
        assert [i.kind for i in issues] == [IssueKind.MALFORMED]
