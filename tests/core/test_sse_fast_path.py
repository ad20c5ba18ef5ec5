"""The framer's shortcut for a piece that is one whole event (``feed_one``, which
``feed`` and the meter call first) must change nothing: every returned item,
``pending_bytes`` and ``last_event_id`` after every piece are what the long way
gives, whatever came before (a BOM, a split CRLF, a held line, an event being
skipped for its size, the end of the stream)."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorder.core.framing import Event, Item
from recorder.core.meter import StreamMeter
from recorder.core.protocols.observations import Observations, OutputKind
from recorder.core.protocols.template import HoleKind, Template, learn
from recorder.core.sse import SSEFramer

SETTINGS = settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_value = st.one_of(
    st.sampled_from([b"", b"x", b"{}", b'{"a":1}', b"\xe6\x97\xa5", b"\xe6", b" lead", b"a:b"]),
    st.binary(max_size=6),
)
_name = st.sampled_from([b"", b"a", b"b", b"message", b"\xe6\x97", b"a b"])
_block = st.one_of(
    st.builds(lambda v: b"data: " + v + b"\n\n", _value),
    st.builds(lambda n, v: b"event: " + n + b"\ndata: " + v + b"\n\n", _name, _value),
)
_other = st.sampled_from(
    [
        b": keepalive\n\n",
        b"id: 7\n",
        b"id\n",
        b"retry: 5\n",
        b"event: a\n",
        b"data:x\n",
        b"\n",
        b"\r",
        b"\r\n",
        b"\n\n",
        b"\xef\xbb\xbf",
        b"data: a\r\n\r\n",
        b"data: a\ndata: b\n\n",
        b"event: a\ndata: b\nid: 9\n\n",
        b"junk",
        b"event: a",  # a line held until a later piece ends it
        b"data: held",
        b"retry: 9",
        b": comment",
    ]
)
_piece = st.one_of(_block, _block, _block, _other, st.binary(max_size=5))
streams = st.lists(st.lists(_piece, min_size=1, max_size=3).map(b"".join), max_size=20)


class LongWay(SSEFramer):
    """A framer whose shortcut never applies: ``feed`` always goes the long way."""

    def feed_one(self, data: bytes) -> Event | None:
        return None


@SETTINGS
@given(pieces=streams, cap=st.sampled_from([4, 8, 12, 20, 64, 4 * 1024 * 1024]))
def test_the_shortcut_changes_nothing(pieces: list[bytes], cap: int) -> None:
    slow, fast, meterlike = LongWay(cap), SSEFramer(cap), SSEFramer(cap)
    for piece in [*pieces, b""]:
        expected: list[Item] = slow.feed(piece)
        assert fast.feed(piece) == expected
        event = meterlike.feed_one(piece)
        if event is not None:
            assert [event] == expected
            assert type(event) is Event
        else:
            assert meterlike.feed(piece) == expected
        for framer in (fast, meterlike):
            assert framer.pending_bytes == slow.pending_bytes
            assert framer.last_event_id == slow.last_event_id


@SETTINGS
@given(pieces=streams)
def test_the_shortcut_needs_one_whole_event(pieces: list[bytes]) -> None:
    """It takes only a piece that is exactly one event, and then nothing else is held."""
    framer = SSEFramer()
    for piece in pieces:
        pending = framer.pending_bytes
        event = framer.feed_one(piece)
        if event is None:
            framer.feed(piece)
        else:
            assert pending == framer.pending_bytes == 0
            if piece.endswith(event.data + b"\r\n\r\n"):  # Google's CRLF form
                assert piece == b"data: " + event.data + b"\r\n\r\n"
                assert b"\r" not in event.data and b"\n" not in event.data
                continue
            assert piece.endswith(event.data + b"\n\n")
            assert piece.count(b"\n") == (2 if piece.startswith(b"data: ") else 3)


def chat_events(n: int) -> list[bytes]:
    texts = [b"a", b"bb", b"", b"ccc", b"\\n", b"\xe6\x97\xa5"]
    return [
        b'data: {"choices":[{"index":0,"delta":{"content":"' + texts[i % 6] + b'"}}]}\n\n'
        for i in range(n)
    ]


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_meter_counts_alike_one_event_a_piece_or_not(chunk: int) -> None:
    events = [b": ping\n\n", *chat_events(30), b"data: [DONE]\n\n"]
    body = b"".join(events)
    records = []
    for pieces in ([body[i : i + chunk] for i in range(0, len(body), chunk)], events):
        m = StreamMeter("chat.completions", start=0.0, stall_after=0.25)
        m.headers(0.01, 200)
        for i, piece in enumerate(pieces):
            m.feed(piece, 0.1 + i * 0.1)
        records.append(m.finish(100.0))
    a, b = records
    assert a.outcome == b.outcome == "completed"
    assert a.events == b.events == 31
    assert a.keepalives == b.keepalives == 1
    assert a.output_chars == b.output_chars == 5 * (1 + 2 + 0 + 3 + 1 + 1)


def test_meter_matches_the_long_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record figure and interval, fed one event a piece, with and without
    the shortcuts (the framer's, then the meter's own for one event and output)."""
    body = [b": ping\n\n", *chat_events(40), b": ping\n\n", b"data: [DONE]\n\n"]
    steps = itertools.cycle([0.3, 0.0, 0.0, 1.2, 0.01, 2.5])
    stamps = list(itertools.accumulate(next(steps) for _ in body))

    def run() -> dict[str, object]:
        m = StreamMeter("chat.completions", start=0.0, stall_after=1.0)
        m.headers(0.05, 200)
        for piece, now in zip(body, stamps, strict=True):
            m.feed(piece, now)
        rec = m.finish(stamps[-1] + 5.0).to_dict(with_gaps=True)
        rec["_intervals"] = list(m.output_intervals)
        rec["_keepalives"] = list(m.keepalive_intervals)
        return rec

    fast = run()
    assert fast["stalls"] and fast["ttft_ms"] and len(fast["_intervals"]) > 20
    monkeypatch.setattr(SSEFramer, "feed_one", lambda self, data: None)
    assert run() == fast


def _learned(data: bytes) -> Template:
    obj = orjson.loads(data)
    ignored = (("obfuscation", HoleKind.STRING),)
    found = learn(data, obj, ("choices", 0, "delta", "content"), ignored)
    assert found is not None
    return found


CHAT = b'{"id":"c1","choices":[{"index":0,"delta":{"content":"%s"}}],"obfuscation":"%s"}'
TEMPLATE = _learned(CHAT % (b"Hi", b"pq"))
_texts = st.one_of(
    st.sampled_from([b"a", b"", b"\\n", b"\xe6\x97\xa5", b"\n", b"\r", b'"', b"\\", b"\x01"]),
    st.binary(max_size=6),
)


@SETTINGS
@given(
    name=st.sampled_from(["message", "delta", "a b"]),
    text=_texts,
    obf=st.sampled_from([b"pq", b"", b"x\ny", b"\r"]),
    cut=st.sampled_from([None, 1, 3, -1, -2]),
    tail=st.sampled_from([b"", b"\n", b"data: x\n\n", b": c\n\n"]),
    cap=st.sampled_from([20, 64, 4 * 1024 * 1024]),
)
def test_a_piece_the_whole_event_template_reads_is_one_event_as_feed_one_frames_it(
    name: str, text: bytes, obf: bytes, cut: int | None, tail: bytes, cap: int
) -> None:
    """What the framer says of SSE (``whole_event``): where its template reads a
    piece, with the framer idle and the piece within ``piece_limit``, the piece is
    exactly one event, as ``feed_one`` returns it, and the plain template reads
    that event's data alike."""
    framer = SSEFramer(cap)
    whole = framer.whole_event(TEMPLATE, name)
    assert whole is not None
    lead = b"data: " if name == "message" else b"event: " + name.encode() + b"\ndata: "
    piece = lead + CHAT % (text, obf) + b"\n\n"
    if cut is not None:
        piece = piece[:cut] + piece[cut + 1 :]
    piece += tail
    framer.feed(b"data: first\n\n")
    assert framer.idle
    whole_obs, plain_obs = Observations(), Observations()
    n = whole.reader(whole_obs, OutputKind.TEXT)(piece)
    if n < 0 or len(piece) > framer.piece_limit:
        return
    event = framer.feed_one(piece)
    assert event is not None and event.event == name
    assert TEMPLATE.reader(plain_obs, OutputKind.TEXT)(event.data) == n
    slots = Observations.__slots__
    assert [getattr(whole_obs, s) for s in slots] == [getattr(plain_obs, s) for s in slots]


def test_no_whole_event_where_a_literal_or_the_name_holds_a_line_end() -> None:
    framer = SSEFramer()
    several_lines = _learned(CHAT.replace(b'"choices"', b'\n"choices"') % (b"Hi", b"pq"))
    assert framer.whole_event(several_lines, "message") is None
    assert framer.whole_event(TEMPLATE, "a\nb") is None
    assert framer.whole_event(TEMPLATE, "a\rb") is None
    assert framer.whole_event(TEMPLATE, "message") is not None
