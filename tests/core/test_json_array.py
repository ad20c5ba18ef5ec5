"""Google's streams on the meter's batch path say what the long way says.

The batch path reads whole events of a piece a run at a time with the
interpreter's byte template: a streamed JSON array's elements
(``JSONArrayFramer.runner``, in C ``Reader.run_objects``) and SSE events with
CRLF line ends (``SSEFramer.runner`` with ``\\r\\n\\r\\n``). Here generated
Gemini bodies (text with brackets, braces, escaped quotes and backslashes,
thoughts, tool calls, nested arrays, other keys; compact, spaced or indented
JSON; other separators between elements), damaged (bytes flipped, dropped or
added, cut short, junk, a bare error) and cut anywhere, are metered three ways:
``feed_many`` with templates, ``feed`` piece by piece with templates, and
``feed`` piece by piece with every event parsed in full. The first two (the
second is the long way, unchanged) leave the same state, field for field; the
third the same record too, for every body not damaged. (A damaged one may
differ there: a chunk whose usage key is damaged, in a stream cut before its
end, reads the prompt count with templates and not without them; the batch
path changes nothing of that.)
Elements past a small cap (a bomb) are bounded alike.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorder.core import StreamMeter
from recorder.core.json_array import JSONArrayFramer, object_end
from recorder.core.protocols import gemini, template
from recorder.core.protocols.observations import Observations
from recorder.core.sse import SSEFramer

# every test twice: the template reader in C, then in Python (tests/core/conftest.py)
pytestmark = pytest.mark.usefixtures("both_readers")
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TEXTS = ["Hi", " the", "]}", '"', '\\"', "\\", "[{", '"},{"', "東京", "ü", "\n", "\r\n,\r\n", ""]
DAMAGE = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b"\r", b"\n", b"\r\n,\r\n", b"0", b"\xff"]


def chunk(rng: random.Random, i: int, last: bool) -> dict[str, Any]:
    """A generateContent chunk: mostly one text part, sometimes more or other."""
    text = "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4)))
    part: dict[str, Any] = {"text": text}
    what = rng.random()
    if what < 0.1:
        part["thought"] = True
    elif what < 0.15:
        part = {"functionCall": {"name": "f", "args": {"a": [[1, [2]], {"b": "]"}]}}}
    cand: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
    if last:
        cand["finishReason"] = "STOP"
    usage = {"promptTokenCount": 7, "candidatesTokenCount": i + 1, "totalTokenCount": 9 + i}
    doc: dict[str, Any] = {"candidates": [cand], "usageMetadata": usage, "modelVersion": "m"}
    if rng.random() < 0.05:
        doc["nested"] = [[[]], [{"x": "[]"}]]
    return doc


def encode(rng: random.Random, doc: dict[str, Any], style: int) -> bytes:
    ascii_only = rng.random() < 0.3
    if style == 0:
        return json.dumps(doc, ensure_ascii=ascii_only, separators=(",", ":")).encode()
    if style == 1:
        return json.dumps(doc, ensure_ascii=ascii_only).encode()
    return json.dumps(doc, ensure_ascii=ascii_only, indent=2).encode()


def damage(rng: random.Random, body: bytes) -> bytes:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(body) + 1)
        what = rng.random()
        if what < 0.4 and at < len(body):
            body = body[:at] + rng.choice(DAMAGE)[:1] + body[at + 1 :]
        elif what < 0.7 and at < len(body):
            body = body[:at] + body[at + 1 :]
        else:
            body = body[:at] + rng.choice(DAMAGE) + body[at:]
    return body


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bool, bool, list[bytes], list[float], list[int], int]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    array = draw(st.booleans())
    n = draw(st.integers(1, 30))
    style = draw(st.sampled_from([0, 0, 1, 2])) if array else draw(st.sampled_from([0, 1]))
    docs = [chunk(rng, i, i == n - 1 and rng.random() < 0.8) for i in range(n)]
    if draw(st.booleans()):  # the same text again and again: the template reads them
        docs = docs[:1] + [dict(docs[1 % n], usageMetadata=d["usageMetadata"]) for d in docs[1:]]
    chunks = [encode(rng, d, style) for d in docs]
    if array:
        sep = draw(st.sampled_from([b",\r\n", b",\r\n", b",", b"\r\n,\r\n", b", "]))
        body = b"[" + sep.join(chunks) + draw(st.sampled_from([b"]", b"]\r\n", b""]))
    else:
        eol = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
        body = b"".join(b"data: " + c + eol + eol for c in chunks)
    damaged = draw(st.integers(0, 3)) == 0
    if damaged:
        body = damage(rng, body)
    if draw(st.integers(0, 5)) == 0:  # a bare error after status 200
        body += b'{\n  "error": {"code": 500, "status": "INTERNAL", "message": "x]"}\n}\n'
    if draw(st.integers(0, 5)) == 0:
        body = body[: rng.randrange(len(body) + 1)]
    if draw(st.integers(0, 2)) == 0:  # cut anywhere
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=40))))
    else:  # pieces of a few elements, cut at random points
        cuts = sorted({rng.randrange(1, max(2, len(body))) for _ in range(len(body) // 700)})
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    steps = [0.0, 0.001, 0.3, 2.0]
    stamps = list(itertools.accumulate(rng.choice(steps) for _ in pieces))
    batches = draw(st.lists(st.integers(1, 12), max_size=10))
    cap = draw(st.sampled_from([4 * 1024 * 1024, 4 * 1024 * 1024, 300, 120]))
    return array, damaged, pieces, stamps, batches, cap


def state(meter: StreamMeter) -> dict[str, Any]:
    obs = meter.interpreter.obs
    return {
        "events": meter.events,
        "keepalives": meter.keepalives,
        "last_output_at": meter.last_output_at,
        "intervals": list(meter.output_intervals),
        "pending": meter.framer.pending_bytes,
        "obs": {name: getattr(obs, name) for name in Observations.__slots__},
    }


def meter(
    array: bool, pieces: list[bytes], stamps: list[float], batches: list[int], cap: int, **how: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    m = StreamMeter("generate_content", start=0.0, stall_after=0.5, max_event_bytes=cap)
    if array:
        assert m.frames_json_array()
    m.headers(0.001, 200)
    seen = []
    sizes = iter(batches)
    i = 0
    while i < len(pieces):
        j = min(len(pieces), i + next(sizes, 8))
        if how["many"]:
            m.feed_many(pieces[i:j], stamps[i:j])
        else:
            for piece, now in zip(pieces[i:j], stamps[i:j], strict=True):
                m.feed(piece, now)
        seen.append(state(m))
        i = j
    rec = m.finish((stamps[-1] if stamps else 0.0) + 1.0).to_dict(with_gaps=True)
    return rec, seen


@SETTINGS
@given(stream=bodies())
def test_the_batch_path_says_what_the_long_way_says(
    stream: tuple[bool, bool, list[bytes], list[float], list[int], int],
) -> None:
    array, damaged, pieces, stamps, batches, cap = stream
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gemini, "FAST_PATH", False)
        reference, _ = meter(array, pieces, stamps, batches, cap, many=False)
    one = meter(array, pieces, stamps, batches, cap, many=False)
    many = meter(array, pieces, stamps, batches, cap, many=True)
    assert many == one
    if not damaged:
        assert many[0] == reference


def elements(n: int, text: str = "a", indent: int | None = None) -> list[bytes]:
    return [
        json.dumps(
            {
                "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}}],
                "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 9 + i},
            },
            indent=indent,
        ).encode()
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("sep", "indent"), [(b",\r\n", None), (b"\r\n,\r\n", None), (b"\n,\n", 2), (b",", 2)]
)
def test_a_json_array_cut_anywhere_is_read_a_run_at_a_time(
    monkeypatch: pytest.MonkeyPatch, sep: bytes, indent: int | None
) -> None:
    """Most elements of pieces cut at random points never reach the framer,
    whatever the separator (Vertex AI's array is indented, ``\\n,\\n`` apart)."""
    body = b"[" + sep.join(elements(400, 'a]}\\"[{', indent)) + b"]"
    rng = random.Random(5)
    cuts = sorted(rng.sample(range(1, len(body)), 20))
    pieces = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    stamps = [0.01 * i for i in range(len(pieces))]
    fed: list[int] = []
    scan = JSONArrayFramer.feed_next

    def counted(self: JSONArrayFramer, data: bytes, pos: int) -> Any:
        fed.append(pos)
        return scan(self, data, pos)

    monkeypatch.setattr(JSONArrayFramer, "feed_next", counted)
    rec, _ = meter(True, pieces, stamps, [32], 4 * 1024 * 1024, many=True)
    assert (rec["events"], rec["output_chars"], rec["parse_issues"]) == (400, 400 * 7, 0)
    assert len(fed) < 100  # the pieces' first and last elements, not the 400


def test_crlf_sse_cut_anywhere_is_read_a_run_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Google's CRLF events: a run reads them, as it reads LF ones."""
    body = b"".join(b"data: " + c + b"\r\n\r\n" for c in elements(400, "bé"))
    rng = random.Random(6)
    cuts = sorted(rng.sample(range(1, len(body)), 20))
    pieces = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    stamps = [0.01 * i for i in range(len(pieces))]
    fed: list[int] = []
    scan = SSEFramer.feed_next

    def counted(self: SSEFramer, data: bytes, pos: int) -> Any:
        fed.append(pos)
        return scan(self, data, pos)

    monkeypatch.setattr(SSEFramer, "feed_next", counted)
    rec, _ = meter(False, pieces, stamps, [32], 4 * 1024 * 1024, many=True)
    assert (rec["events"], rec["output_chars"], rec["parse_issues"]) == (400, 400 * 2, 0)
    assert len(fed) < 100


@settings(max_examples=500, deadline=None)
@given(
    data=st.lists(st.sampled_from(list(b'{}[]"\\ ax,')), max_size=40).map(bytes),
    pos=st.integers(0, 40),
    stop=st.integers(0, 45),
)
def test_object_end_is_where_the_framer_ends_an_element(data: bytes, pos: int, stop: int) -> None:
    """Where a run guesses an element ends is where the framer would end it: an
    idle framer fed ``data[pos:end]`` after ``[`` hands it over whole and is idle."""
    stop = min(stop, len(data))
    end = object_end(data, pos, stop)
    if end < 0:
        return
    assert pos < end <= stop
    framer = JSONArrayFramer()
    framer.feed(b"[")
    assert framer.idle
    gap = data[pos:end]
    first = min(i for i in range(len(gap)) if gap[i] in b'[{"]}')
    items = framer.feed(gap)
    if gap[first] == 0x7B:  # an element: handed over whole, the framer idle again
        assert [item.data for item in items] == [gap[first:]]  # type: ignore[union-attr]
        assert framer.idle


def test_a_bomb_is_bounded_alike() -> None:
    """An element nested 100,000 deep, past the cap, between readable ones: skipped
    and reported once either way, the memory held bounded, the rest read."""
    good = elements(30)
    bomb = b'{"a":' + b"[" * 100_000 + b'"]"' + b"]" * 100_000 + b"}"
    body = b"[" + b",\r\n".join([*good[:15], bomb, *good[15:]]) + b"]"
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    stamps = [0.01 * i for i in range(len(pieces))]
    one = meter(True, pieces, stamps, [16], 64 * 1024, many=False)
    many = meter(True, pieces, stamps, [16], 64 * 1024, many=True)
    assert many == one
    rec, seen = many
    assert (rec["events"], rec["oversized_events"], rec["output_chars"]) == (31, 1, 30)
    assert max(s["pending"] for s in seen) <= 64 * 1024 + 4096


def framed(pieces: list[bytes], cap: int, *, in_c: bool) -> tuple[list[Any], list[Any]]:
    """The items of each piece, and the framer's state after it (the C scan or not)."""
    saved = template.native
    framer = JSONArrayFramer(cap)
    items: list[Any] = []
    states: list[Any] = []
    try:
        if not in_c:
            template.native = None
        for piece in [*pieces, b""]:
            items.append(framer.feed(piece))
            states.append((framer.pending_bytes, framer.idle, framer.settle()))
    finally:
        template.native = saved
    return items, states


@pytest.mark.skipif(template.native is None, reason="the C reader is not built")
@settings(max_examples=500, deadline=None)
@given(
    body=st.one_of(
        st.lists(st.sampled_from(list(b'{}[]"\\ a,"{')), max_size=80).map(bytes),
        st.lists(st.sampled_from(['{"a":', "[", "]", "}", '"x\\"]"', ",", '"\\\\"', "{}"]))
        .map("".join)
        .map(str.encode),
    ),
    lead=st.sampled_from([b"[", b"", b"[[", b"{"]),
    cuts=st.lists(st.integers(1, 100), max_size=12),
    cap=st.sampled_from([5, 20, 4096]),
)
def test_the_c_scan_frames_as_the_python_loop(
    body: bytes, lead: bytes, cuts: list[int], cap: int
) -> None:
    """Inside an element the C reader's ``scan`` walks it in one call: the same
    items, the same state after every piece, for any bytes and any chunking."""
    data = lead + body
    bounds = [0, *sorted({c for c in cuts if c < len(data)}), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    assert framed(pieces, cap, in_c=True) == framed(pieces, cap, in_c=False)


VERTEX = Path(__file__).resolve().parents[1] / "fixtures" / "gemini" / "array"


@pytest.mark.parametrize("seed", range(8))
def test_a_real_vertex_array_cut_anywhere_reads_alike(seed: int) -> None:
    """Vertex AI's indented array (a real body), its first element again and again
    with running counts, cut at random points: the three ways agree."""
    body = (VERTEX / "elastic-vertex-chat-completion-doc.json").read_bytes()
    first, last = body[1:-2].split(b"\n,\n")
    again = [
        first.replace(b'"trafficType"', f'"totalTokenCount": {i},\n    "trafficType"'.encode())
        for i in range(60)
    ]
    body = b"[" + b"\n,\n".join([*again, last]) + b"\n]"
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), 40))
    pieces = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    stamps = [0.01 * i for i in range(len(pieces))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gemini, "FAST_PATH", False)
        reference, _ = meter(True, pieces, stamps, [8], 4 * 1024 * 1024, many=False)
    one = meter(True, pieces, stamps, [8], 4 * 1024 * 1024, many=False)
    many = meter(True, pieces, stamps, [8], 4 * 1024 * 1024, many=True)
    assert many == one
    assert many[0] == reference
    assert (reference["events"], reference["outcome"], reference["parse_issues"]) == (
        61,
        "completed",
        0,
    )
