"""The event-stream framer's run of sound messages in C must frame as the Python framer does.

The Python framer (``EventStreamFramer(in_c=False)``) is the reference, itself held
to botocore's reader (tests/core/test_eventstream.py). Here both get the same
bodies, generated (events of several names, exceptions, error messages, enough
distinct header blocks to fill the framer's cache) then cut at any bytes and
damaged (bytes flipped, dropped or added, the prelude or message CRC broken, a
message over the cap): every ``feed`` and ``feed_one`` must return the same items
and leave the same pending bytes; and the meter must make the same record of an
InvokeModel and a Converse stream with either framer.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.core import eventstream
from recorder.core.eventstream import EventStreamFramer, encode_message
from recorder.core.framing import Item
from recorder.core.meter import StreamMeter
from recorder.core.protocols import invoke_model

native = eventstream.native
needs_c = pytest.mark.skipif(native is None, reason="the C framer is not built")

NAMES = ["contentBlockDelta", "chunk", "messageStart", "metadata", "x" * 40, "\u00e9v\u00e9nement"]


def message(rng: random.Random, names: int) -> bytes:
    kind = rng.random()
    payload = bytes(rng.choice(b'{}"ab:,') for _ in range(rng.randint(0, 60)))
    if kind < 0.08:
        headers = {":exception-type": "throttlingException", ":message-type": "exception"}
    elif kind < 0.14:
        headers = {":error-code": "E", ":error-message": "no", ":message-type": "error"}
    else:
        name = NAMES[rng.randrange(len(NAMES))] if names < 0 else f"e{rng.randrange(names)}"
        headers = {":event-type": name, ":content-type": "application/json"}
        if rng.random() < 0.8:
            headers[":message-type"] = "event"
    return encode_message(headers, payload)


def damage(rng: random.Random, body: bytes) -> bytes:
    raw = bytearray(body)
    for _ in range(rng.randint(1, 3)):
        if not raw:
            break
        at = rng.randrange(len(raw))
        what = rng.random()
        if what < 0.5:
            raw[at] ^= 1 << rng.randrange(8)
        elif what < 0.75:
            del raw[at]
        else:
            raw.insert(at, rng.randrange(256))
    return bytes(raw)


def cut(rng: random.Random, body: bytes) -> list[bytes]:
    points = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(0, 12))))
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


def frame_both(pieces: list[bytes], cap: int, one: bool) -> None:
    """Feed both framers the same pieces (``feed_one`` first when ``one``), compare."""
    c, py = EventStreamFramer(cap), EventStreamFramer(cap, in_c=False)
    for piece in [*pieces, b""]:
        if one:
            assert c.feed_one(piece) == py.feed_one(piece)
        got: list[Item] = c.feed(piece)
        assert got == py.feed(piece)
        assert (c.pending_bytes, c.idle) == (py.pending_bytes, py.idle)


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n=st.integers(0, 30),
    names=st.sampled_from([-1, 3, 100]),
    damaged=st.booleans(),
    cap=st.sampled_from([16, 40, 90, 1 << 20]),
)
def test_any_body_cut_anywhere_frames_alike(
    seed: int, n: int, names: int, damaged: bool, cap: int
) -> None:
    rng = random.Random(seed)
    body = b"".join(message(rng, names) for _ in range(n))
    if damaged:
        body = damage(rng, body)
    if body:
        frame_both(cut(rng, body), cap, one=False)
        # one message a piece, the usual chunking, where feed_one takes each
        frame_both([message(rng, names) for _ in range(n)], cap, one=True)


@needs_c
@pytest.mark.parametrize(
    "where", ["prelude_crc", "prelude_crc_resealed", "message_crc", "length", "payload"]
)
def test_each_kind_of_damage_frames_alike_at_every_split(where: str) -> None:
    rng = random.Random(where)
    msgs = [message(rng, 3) for _ in range(6)]
    bad = bytearray(msgs[3])
    at = {"message_crc": len(bad) - 2, "length": 2, "payload": len(bad) - 6}
    bad[at.get(where, 9)] ^= 0x40
    if where == "prelude_crc_resealed":  # a message CRC that matches the bad prelude CRC
        bad[-4:] = zlib.crc32(bad[:-4]).to_bytes(4, "big")
    body = b"".join([*msgs[:3], bytes(bad), *msgs[4:]])
    for split in range(len(body) + 1):
        frame_both([p for p in (body[:split], body[split:]) if p], 1 << 20, one=True)
    frame_both([body], 50, one=True)  # some of them over the cap


@needs_c
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), crc=st.integers(0, 2**32 - 1))
def test_the_crc_is_zlibs(data: bytes, crc: int) -> None:
    assert native.crc32(data, crc) == zlib.crc32(data, crc)
    assert native.crc32(data) == zlib.crc32(data)


B64_PARTS = [b"QUJD", b"QQ==", b"QR==", b"QUI=", b"QUJ=", b"=", b"==", b"A", b"+/", b"-_",
             b" ", b"\n", b"\\", b"\xff"]  # fmt: skip


@needs_c
@settings(max_examples=600, deadline=None)
@given(
    raw=st.one_of(
        st.lists(st.sampled_from(B64_PARTS), max_size=6).map(b"".join),
        st.binary(max_size=12),
        st.binary(max_size=40).map(base64.b64encode),
    ),
    after=st.sampled_from([b'"}', b'","p":"ab"}', b"", b"}"]),
)
def test_a_chunks_base64_decodes_as_binascii_decodes_it(raw: bytes, after: bytes) -> None:
    data = b'{"bytes":"' + raw + after
    got = native.chunk_bytes(data)
    member = raw.split(b'"')[0]
    if got is not None:  # (None: the interpreter decodes it in Python)
        assert after.startswith(b'"') or b'"' in raw
        assert got == binascii.a2b_base64(member, strict_mode=True)
    assert native.chunk_bytes(b' {"bytes":"' + raw + after) is None


@needs_c
@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=200))
def test_what_an_encoder_writes_is_decoded_in_c(payload: bytes) -> None:
    data = b'{"bytes":"' + base64.b64encode(payload) + b'","p":"abcd"}'
    assert native.chunk_bytes(data) == payload


def chunk(obj: object, separators: tuple[str, str] = (",", ":")) -> bytes:
    """A chunk as Bedrock writes one (compact JSON, inside and out)."""
    raw = base64.b64encode(json.dumps(obj, separators=separators).encode()).decode()
    return encode_message(
        {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
        json.dumps({"bytes": raw, "p": "ab"}, separators=(",", ":")).encode(),
    )


def converse(name: str, obj: object) -> bytes:
    return encode_message(
        {":event-type": name, ":content-type": "application/json", ":message-type": "event"},
        json.dumps(obj).encode(),
    )


def invoke_body(rng: random.Random) -> list[bytes]:
    text = ["Hi", " th\u00e9re", "\u65e5", "", "a\\b"]
    events: list[object] = [
        {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
    ]
    for _ in range(rng.randint(0, 30)):
        delta = {"type": "text_delta", "text": rng.choice(text)}
        events.append({"type": "content_block_delta", "index": 0, "delta": delta})
    events += [
        {"type": "message_delta", "delta": {"stop_reason": "x"}, "usage": {"output_tokens": 7}},
        {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}},
    ]
    return [chunk(e) for e in events]


def converse_body(rng: random.Random) -> list[bytes]:
    msgs = [converse("messageStart", {"role": "assistant", "p": "abc"})]
    for i in range(rng.randint(0, 30)):
        delta = {"contentBlockIndex": 0, "delta": {"text": f"w{i}"}, "p": "x" * rng.randint(1, 9)}
        msgs.append(converse("contentBlockDelta", delta))
    msgs.append(converse("messageStop", {"stopReason": "end_turn"}))
    msgs.append(converse("metadata", {"usage": {"inputTokens": 3, "outputTokens": 5}}))
    return msgs


def odd_chunks(rng: random.Random, msgs: list[bytes]) -> list[bytes]:
    """Some chunks written otherwise: base64 unpadded or broken, another family's
    JSON, an envelope with its member second, an exception."""
    head = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    odd = [
        encode_message(head, b'{"bytes":"eyJ0eXBlIjoicGluZyJ9"}'),  # {"type":"ping"}
        encode_message(head, b'{"bytes":"eyJ0eXBlIjoicGluZyJ"}'),  # cut short
        encode_message(head, b'{"bytes":"eyJ0eXBl IjoicGluZyJ9"}'),
        encode_message(head, b'{"p":"a","bytes":"eyJ0eXBlIjoicGluZyJ9"}'),
        chunk({"outputText": "titan text", "completionReason": "FINISH"}),
        chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}),
        chunk({"type": "ping"}, separators=(", ", ": ")),  # (JSON written with spaces)
        encode_message(
            {":exception-type": "throttlingException", ":message-type": "exception"},
            b'{"message":"slow down"}',
        ),
    ]
    out = list(msgs)
    for _ in range(rng.randint(0, 3)):
        out.insert(rng.randint(0, len(out)), rng.choice(odd))
    return out


def record(endpoint: str, pieces: list[bytes], in_c: bool) -> dict[str, object]:
    saved = eventstream.native, invoke_model.chunk_bytes, invoke_model.ChunkReader
    if not in_c:  # the reference: framed and decoded in Python
        eventstream.native, invoke_model.chunk_bytes, invoke_model.ChunkReader = None, None, None
    try:
        meter = StreamMeter(endpoint, start=0.0)
        meter.headers(0.001, 200)
        half = len(pieces) // 2
        for i, piece in enumerate(pieces[:half]):
            meter.feed(piece, 0.01 * (i + 1))
        meter.feed_many(pieces[half:], [0.5 + 0.01 * i for i in range(len(pieces) - half)])
        return meter.finish(2.0).to_dict(with_gaps=True)
    finally:
        eventstream.native, invoke_model.chunk_bytes, invoke_model.ChunkReader = saved


@needs_c
@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    endpoint=st.sampled_from(["invoke_model", "converse"]),
    chunking=st.sampled_from(["message", "cut", "damaged"]),
)
def test_the_meter_records_alike_in_c_and_in_python(
    seed: int, endpoint: str, chunking: str
) -> None:
    rng = random.Random(seed)
    msgs = odd_chunks(rng, (invoke_body if endpoint == "invoke_model" else converse_body)(rng))
    pieces = msgs
    if chunking != "message":
        body = b"".join(msgs)
        pieces = cut(rng, damage(rng, body) if chunking == "damaged" else body)
    assert record(endpoint, pieces, in_c=True) == record(endpoint, pieces, in_c=False)


@needs_c
def test_the_framer_uses_the_c_run_where_built() -> None:
    # (so that the comparisons above compare two framings, not one twice)
    rng = random.Random(1)
    body = b"".join(message(rng, 3) for _ in range(5))
    c = EventStreamFramer()
    c.feed(body)
    assert eventstream.native is not None and c.scans_in_c
    assert not EventStreamFramer(in_c=False).scans_in_c


class Recorded:
    """A reader of an event's data that says what it was given: the data's length,
    or -1 (nothing read) for data holding ``b"!"``."""

    def __init__(self) -> None:
        self.given: list[bytes] = []

    def __call__(self, data: bytes) -> int:
        self.given.append(data)
        return -1 if b"!" in data else len(data)


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n=st.integers(1, 20),
    damaged=st.booleans(),
    cap=st.sampled_from([16, 60, 1 << 20]),
    name=st.sampled_from(["contentBlockDelta", "chunk", "e1"]),
)
def test_a_message_reader_reads_what_feed_one_hands_the_interpreter(
    seed: int, n: int, damaged: bool, cap: int, name: str
) -> None:
    """``message_reader(read, name)(piece)`` is ``read(event.data)`` exactly when
    ``feed_one`` would return an event of that name (an event message, its payload
    as data), and -1 otherwise, having given ``read`` nothing; framing nothing."""
    rng = random.Random(seed)
    msgs = [message(rng, [-1, 3][rng.randrange(2)]) for _ in range(n)]
    # an exception and an error message named as the events read are (neither is one)
    msgs += [
        encode_message({":exception-type": name, ":message-type": "exception"}, b"{}"),
        encode_message({":error-code": name, ":message-type": "error"}, b""),
    ]
    framer = EventStreamFramer(cap)
    for piece in msgs:  # (the framer names the header blocks as it frames them)
        framer.feed(piece)
    pieces = [damage(rng, m) if damaged and rng.random() < 0.3 else m for m in msgs]
    pieces += [m[:-1] for m in msgs[:2]] + [msgs[0] + msgs[-1], b"", b"\x00" * 20]
    read = Recorded()
    reader = framer.message_reader(read, name)
    assert reader is not None
    reference = EventStreamFramer(cap, in_c=False)
    for piece in msgs:
        reference.feed(piece)
    for piece in pieces:
        read.given.clear()
        got = reader(piece)
        event = reference.feed_one(piece)
        if event is None or event.event != name or event.id != "event":
            assert (got, read.given) == (-1, [])
        else:
            assert read.given == [event.data]
            assert got == (-1 if b"!" in event.data else len(event.data))
        assert framer.idle and framer.pending_bytes == 0


@needs_c
def test_a_message_reader_gives_the_payload_whole() -> None:
    payload = b'{"contentBlockIndex":0,"delta":{"text":"hi"},"p":"abc"}'
    head = {":event-type": "contentBlockDelta", ":message-type": "event"}
    piece = encode_message(head, payload)
    framer = EventStreamFramer()
    framer.feed(piece)
    read = Recorded()
    reader = framer.message_reader(read, "contentBlockDelta")
    assert reader is not None
    assert reader(piece) == len(payload)
    assert read.given == [payload]
    assert framer.message_reader(read, "messageStop") is not None
    assert framer.message_reader(read, "messageStop")(piece) == -1  # another event's
    assert EventStreamFramer(in_c=False).message_reader(read, "x") is None


@needs_c
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_a_chunk_reader_reads_what_handle_hands_the_messages_template(seed: int) -> None:
    """``ChunkReader(read)(payload)`` is ``read`` of the Anthropic event inside the
    usual chunk (as ``InvokeModelInterpreter.handle`` hands it to the Messages
    template: base64 as Bedrock writes it, not the metrics' chunk), else -1."""
    rng = random.Random(seed)
    compact = [  # as Bedrock writes them: no spaces; the last chunk with the metrics
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}},
        {"outputText": "titan", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}},
    ]
    msgs = odd_chunks(rng, invoke_body(rng)) + [chunk(c) for c in compact]
    framer = EventStreamFramer()
    for piece in msgs:
        event = framer.feed_one(piece)
        assert event is not None
        data = event.data
        read = Recorded()
        got = native.ChunkReader(read)(data)
        inner = native.chunk_bytes(data)
        usual = (
            event.event == "chunk"
            and inner is not None
            and inner.startswith(b'{"type":"')
            and invoke_model.METRICS_BYTES not in inner
        )
        assert read.given == ([inner] if usual else [])
        assert got == (len(inner) if usual and inner is not None else -1)
