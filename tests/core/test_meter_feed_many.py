"""``StreamMeter.feed_many`` must leave exactly what ``feed``, piece by piece, leaves.

Every captured stream in tests/fixtures, split one event a piece (where the
batch path reads a whole piece with the interpreter's template) or at random
points, with its deltas repeated (so templates are learned and used), fed in
batches of any size with arrival times that make gaps, stalls and silences: the
record (every field, gaps included), the intervals, every ``Observations`` slot
and what the live view reads after each batch are those of ``feed``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorder.core import StreamMeter, eventstream, rhythm
from recorder.core import meter as meter_module
from recorder.core.framing import Event
from recorder.core.protocols.observations import Observations
from recorder.core.sse import SSEFramer
from tests.kit import framing

# every test twice: the template reader in C, then in Python (tests/core/conftest.py)
pytestmark = pytest.mark.usefixtures("both_readers")
FILES = framing.fixture_files()
BODIES = [(framing.endpoint_for(p), framing.load_body(p)) for p in FILES]
SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class LongWay(SSEFramer):
    """A framer whose shortcut never applies: ``feed`` always goes the long way."""

    def feed_one(self, data: bytes) -> Event | None:
        return None


def per_event(body: bytes) -> list[bytes]:
    """One event a piece, as an HTTP/1 chunked stream hands them over."""
    blocks = body.replace(b"\r\n", b"\n").split(b"\n\n")
    pieces = [block + b"\n\n" for block in blocks[:-1] if block]
    if blocks[-1]:
        pieces.append(blocks[-1])
    return pieces


def state(meter: StreamMeter) -> dict[str, Any]:
    obs = meter.interpreter.obs
    return {
        "events": meter.events,
        "keepalives": meter.keepalives,
        "last_output_at": meter.last_output_at,
        "first_output_at": meter.first_output_at,
        "intervals": list(meter.output_intervals),
        "pending": meter.framer.pending_bytes,
        # (an AWS event stream has no event ids)
        "last_id": getattr(meter.framer, "last_event_id", None),
        "obs": {name: getattr(obs, name) for name in Observations.__slots__},
    }


def run(
    endpoint: str,
    pieces: list[bytes],
    stamps: list[float | None],
    batches: list[int],
    *,
    many: bool,
    start: float | None = 0.0,
    stall_after: float = 0.5,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    meter = StreamMeter(endpoint, start=start, stall_after=stall_after)
    meter.headers(0.01, 200)
    seen = []
    i = 0
    sizes = iter(batches)
    while i < len(pieces):
        j = min(len(pieces), i + max(1, next(sizes, 32)))
        if many:
            meter.feed_many(pieces[i:j], stamps[i:j])
        else:
            for piece, now in zip(pieces[i:j], stamps[i:j], strict=True):
                meter.feed(piece, now)
        seen.append(state(meter))
        i = j
    end = (stamps[-1] or 0.0) + 3.0 if stamps else 1.0
    rec = meter.finish(end).to_dict(with_gaps=True)
    rec["_state"] = state(meter)
    rec["_keepalive_intervals"] = list(meter.keepalive_intervals)
    return rec, seen


@st.composite
def streams(draw: st.DrawFn) -> tuple[str, list[bytes], list[float | None], list[int]]:
    endpoint, body = draw(st.sampled_from(BODIES))
    pieces = per_event(body)
    if draw(st.booleans()):  # the deltas again, so that templates are learned and read
        repeat = draw(st.integers(1, 4))
        middle = pieces[1:-1] * repeat
        pieces = [*pieces[:1], *middle, *pieces[-1:]]
    if draw(st.integers(0, 3)) == 0:  # cut at random points instead
        pieces = cut_anywhere(draw, pieces)
    if draw(st.booleans()):  # junk, an empty piece, a keepalive, a CRLF event in between
        extra = st.sampled_from([b"", b": ping\n\n", b"data: {\r\n\r\n", b"id: 7\n", b"junk"])
        for _ in range(draw(st.integers(0, 3))):
            pieces.insert(draw(st.integers(0, len(pieces))), draw(extra))
    return endpoint, pieces, *timed(draw, pieces)


def cut_anywhere(draw: st.DrawFn, pieces: list[bytes]) -> list[bytes]:
    """The pieces' bytes cut again at up to 40 random points."""
    joined = b"".join(pieces)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(joined) - 1)), max_size=40))))
    bounds = [0, *cuts, len(joined)]
    return [joined[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def timed(draw: st.DrawFn, pieces: list[bytes]) -> tuple[list[float | None], list[int]]:
    """Arrival times that make gaps, stalls and silences (now and then a piece
    without one), and the sizes of the batches the pieces are fed in."""
    steps = st.sampled_from([0.0, 0.0, 0.001, 0.002, 0.3, 0.6, 2.0])
    stamps: list[float | None] = []
    now = 0.02
    for _ in pieces:
        now += draw(steps)
        stamps.append(now)
    if draw(st.integers(0, 9)) == 0 and stamps:  # a piece without a time
        stamps[draw(st.integers(0, len(stamps) - 1))] = None
    return stamps, draw(st.lists(st.integers(1, 40), max_size=20))


@SETTINGS
@given(stream=streams(), stall_after=st.sampled_from([0.0, 0.5, 1.5, 30.0]))
def test_feed_many_is_feed_piece_by_piece(
    stream: tuple[str, list[bytes], list[float | None], list[int]], stall_after: float
) -> None:
    endpoint, pieces, stamps, batches = stream
    one = run(endpoint, pieces, stamps, batches, many=False, stall_after=stall_after)
    many = run(endpoint, pieces, stamps, batches, many=True, stall_after=stall_after)
    assert many == one


@pytest.mark.parametrize(("endpoint", "body"), BODIES, ids=[framing.fixture_name(p) for p in FILES])
def test_every_fixture_one_event_a_piece(endpoint: str, body: bytes) -> None:
    pieces = per_event(body)
    pieces = [*pieces[:1], *pieces[1:-1] * 3, *pieces[-1:]]
    stamps: list[float | None] = [0.02 + 0.4 * i for i in range(len(pieces))]
    for start in (0.0, None):
        one = run(endpoint, pieces, stamps, [32], many=False, start=start)
        assert run(endpoint, pieces, stamps, [32], many=True, start=start) == one


def test_the_batch_path_reads_whole_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most pieces of a stream of repeated deltas never reach ``feed``."""
    head = b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"'
    pieces = [head + text + b'"}}]}\n\n' for text in [b"a", b"bb", b"\\n", b"\xe6\x97\xa5"] * 50]
    pieces.append(b"data: [DONE]\n\n")
    stamps: list[float | None] = [0.01 * i for i in range(len(pieces))]
    calls = []
    feed = StreamMeter.feed

    def counted(self: StreamMeter, data: bytes, now: float | None = None) -> None:
        calls.append(data)
        feed(self, data, now)

    monkeypatch.setattr(StreamMeter, "feed", counted)
    one = run("chat.completions", pieces, stamps, [32], many=False)
    calls.clear()
    many = run("chat.completions", pieces, stamps, [32], many=True)
    assert many == one
    assert many[0]["output_chars"] == 50 * (1 + 2 + 1 + 1)
    assert len(calls) < 10  # the first delta (it teaches the template), [DONE]


def test_a_template_learned_from_several_data_lines_reads_no_piece() -> None:
    """Its bytes hold a line end: a piece of the same bytes is two lines to the framer."""
    head = b'{"type":"content_block_delta","index":0,\n'
    first = (
        b"data: "
        + head.replace(b"\n", b"\ndata: ")
        + b'"delta":{"type":"text_delta","text":"a"}}\n\n'
    )
    same = b"data: " + head + b'"delta":{"type":"text_delta","text":"b"}}\n\n'
    pieces = [first, same, first, same]
    stamps: list[float | None] = [0.1, 0.2, 0.3, 0.4]
    one = run("messages", pieces, stamps, [4], many=False)
    assert run("messages", pieces, stamps, [4], many=True) == one
    assert one[0]["output_chars"] == 2


_pieces = st.lists(
    st.one_of(
        st.sampled_from(
            [
                b"data: x\n\n",
                b"event: a\ndata: y\n\n",
                b"data: x\n",
                b"\n",
                b"\r",
                b"\r\n",
                b": c\n\n",
                b"id: 7\n",
                b"event: a\n",
                b"retry: 5\n",
                b"\xef\xbb\xbf",
                b"data: held",
            ]
        ),
        st.binary(max_size=6),
    ),
    max_size=25,
)


@settings(max_examples=1500, deadline=None)
@given(pieces=_pieces, cap=st.sampled_from([4, 12, 64]))
def test_a_settled_framer_frames_as_one_that_never_settled(pieces: list[bytes], cap: int) -> None:
    """``settle`` says nothing is pending only when nothing is: the shortcut it
    opens (``feed_one``, then ``feed``) frames every later piece alike."""
    settled, plain = SSEFramer(cap), LongWay(cap)
    for piece in [*pieces, b""]:
        if settled.settle():
            assert settled.pending_bytes == 0
            event = settled.feed_one(piece)
            got = [event] if event is not None else settled.feed(piece)
        else:
            assert settled.feed_one(piece) is None
            got = settled.feed(piece)
        assert got == plain.feed(piece)
        assert settled.pending_bytes == plain.pending_bytes
        assert settled.last_event_id == plain.last_event_id


# AWS's event stream (Amazon Bedrock): the real captures, one message a piece as
# the proxy's tap sees them, or cut anywhere, some damaged; its framer has no
# piece reader, so feed_many's own loop for one whole message a piece is held to
# feed here
BEDROCK = sorted((framing.FIXTURES / "bedrock").glob("*.bin"))


def es_messages(body: bytes) -> list[bytes]:
    """The body's messages, each as it is written (a 4-byte total length first)."""
    out, pos = [], 0
    while pos + 4 <= len(body):
        size = int.from_bytes(body[pos : pos + 4], "big")
        if size < 16:
            break
        out.append(body[pos : pos + size])
        pos += size
    return out


@st.composite
def es_streams(draw: st.DrawFn) -> tuple[str, list[bytes], list[float | None], list[int]]:
    path = draw(st.sampled_from(BEDROCK))
    endpoint = "invoke_model" if path.name.startswith("invoke") else "converse"
    pieces = es_messages(path.read_bytes())
    if len(pieces) > 2 and draw(st.booleans()):  # the deltas again
        pieces = [*pieces[:1], *pieces[1:-1] * draw(st.integers(1, 4)), *pieces[-1:]]
    how = draw(st.sampled_from(["message", "message", "cut", "damaged"]))
    if how == "damaged":  # a byte flipped in one message (a CRC then fails)
        i = draw(st.integers(0, len(pieces) - 1))
        raw = bytearray(pieces[i])
        raw[draw(st.integers(0, len(raw) - 1))] ^= 1 << draw(st.integers(0, 7))
        pieces[i] = bytes(raw)
    if how == "cut":
        pieces = cut_anywhere(draw, pieces)
    if draw(st.booleans()):  # an empty piece, or a stray byte, somewhere
        pieces.insert(draw(st.integers(0, len(pieces))), draw(st.sampled_from([b"", b"\x00"])))
    return endpoint, pieces, *timed(draw, pieces)


def test_the_bedrock_captures_are_here() -> None:
    assert len(BEDROCK) >= 5
    assert all(len(es_messages(p.read_bytes())) >= 1 for p in BEDROCK)


@SETTINGS
@given(stream=es_streams(), stall_after=st.sampled_from([0.0, 0.5, 1.5, 30.0]))
def test_feed_many_is_feed_piece_by_piece_on_an_aws_event_stream(
    stream: tuple[str, list[bytes], list[float | None], list[int]], stall_after: float
) -> None:
    endpoint, pieces, stamps, batches = stream
    one = run(endpoint, pieces, stamps, batches, many=False, stall_after=stall_after)
    many = run(endpoint, pieces, stamps, batches, many=True, stall_after=stall_after)
    assert many == one


@pytest.mark.parametrize("path", BEDROCK, ids=[p.name for p in BEDROCK])
def test_an_aws_event_stream_past_the_intervals_kept(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intervals kept stop at their cap alike both ways (a cap of 5 here, so
    that the captures reach it)."""
    for module in (rhythm, meter_module):
        monkeypatch.setattr(module, "MAX_INTERVALS", 5)
    endpoint = "invoke_model" if path.name.startswith("invoke") else "converse"
    pieces = es_messages(path.read_bytes())
    pieces = [*pieces[:1], *pieces[1:-1] * 4, *pieces[-1:]]
    stamps: list[float | None] = [0.02 + 0.01 * i for i in range(len(pieces))]
    one = run(endpoint, pieces, stamps, [7], many=False)
    assert run(endpoint, pieces, stamps, [7], many=True) == one


@pytest.mark.parametrize(
    "name", ["converse_stream_nova_micro.bin", "invoke_stream_claude_3_5_sonnet_max_tokens.bin"]
)
def test_the_batch_path_reads_whole_messages(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the template is learned, a Bedrock delta a piece never reaches ``feed``:
    the framer's message reader reads it (where the C framer is built)."""
    if eventstream.native is None:
        pytest.skip("the C framer is not built")
    path = framing.FIXTURES / "bedrock" / name
    endpoint = "invoke_model" if name.startswith("invoke") else "converse"
    pieces = es_messages(path.read_bytes())
    pieces = [*pieces[:1], *pieces[1:-1] * 6, *pieces[-1:]]
    stamps: list[float | None] = [0.02 + 0.01 * i for i in range(len(pieces))]
    calls = []
    feed = StreamMeter.feed

    def counted(self: StreamMeter, data: bytes, now: float | None = None) -> None:
        calls.append(data)
        feed(self, data, now)

    monkeypatch.setattr(StreamMeter, "feed", counted)
    one = run(endpoint, pieces, stamps, [32], many=False)
    calls.clear()
    assert run(endpoint, pieces, stamps, [32], many=True) == one
    assert len(pieces) > 120
    assert len(calls) < len(pieces) // 4  # the other events, and those before the template
