"""Properties of the whole core: chunking never changes a result, nothing raises.

- The framer, over SSE-ish bytes built from a grammar (fields, comments, blank
  lines, CR/LF/CRLF, Japanese text, raw bytes), fed at random split points and
  one byte at a time, gives exactly what it gives for the whole body, and that
  is what a plain transcription of the WHATWG algorithm (``spec_items``) gives.
- The stream meter, over the real captured bodies in ``tests/fixtures`` with
  garbage inserted, appended or the body cut short, gives the same record for
  any chunking, untimed (``start=None``) and timed (every piece at one instant).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorder.core.framing import Comment, Event, FramingIssue, Item
from recorder.core.meter import StreamMeter
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES, SSEFramer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOM = b"\xef\xbb\xbf"

SETTINGS = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the framer -----------------------------------------------------------------


def feed_all(chunks: Iterable[bytes], max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> list[Item]:
    """Feed the chunks in order, then end the stream; check the memory bound."""
    framer = SSEFramer(max_event_bytes)
    items: list[Item] = []
    for chunk in chunks:
        if chunk:
            items += framer.feed(chunk)
            assert framer.pending_bytes <= max(max_event_bytes, 2)  # 2: a held BOM prefix
    items += framer.feed(b"")
    return items


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    """``body`` cut at the given offsets (clamped, any order, duplicates allowed)."""
    bounds = [0, *sorted(min(c, len(body)) for c in cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def bytewise(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


_LINE_END = re.compile(rb"\r\n|\r|\n")
_DIGITS = re.compile(rb"[0-9]+")


def spec_items(body: bytes) -> list[Any]:
    """The WHATWG algorithm, transcribed plainly (whole body, no cap).

    Data stays bytes as the framer keeps it; an unterminated event is noted
    (size not checked) where the spec silently drops it.
    """
    if body.startswith(BOM):
        body = body[3:]
    elif len(body) < 3 and BOM.startswith(body):
        return []  # cut inside the BOM: no event had begun
    *lines, tail = _LINE_END.split(body)
    out: list[Any] = []
    data: list[bytes] = []
    event_type = ""
    last_id: str | None = None
    retry: int | None = None
    for line in lines:
        if not line:
            if data:
                out.append(Event(event_type or "message", b"\n".join(data), last_id, retry))
            data, event_type, retry = [], "", None
            continue
        if line.startswith(b":"):
            out.append(Comment(line[1:].decode("utf-8", "replace")))
            continue
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event_type = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and _DIGITS.fullmatch(value):
            retry = int(value)
    if data or event_type or tail:
        out.append(FramingIssue("unterminated_event", ANY))
    return out


_CHARS = [*'ab :{}"1 \t\x00é', "こ", "ん", "世", "界", "\u2028", "\x85", "\ufeff"]
_text = st.text(alphabet=st.sampled_from(_CHARS), max_size=12).map(str.encode)
_value = st.one_of(
    _text,
    _text,
    st.binary(max_size=8),
    st.integers(0, 10**6).map(lambda n: str(n).encode()),
)
_name = st.sampled_from(
    [b"data", b"data", b"data", b"event", b"id", b"retry", b"Data", b"foo", b"data ", b""]
)
_sep = st.sampled_from([b"", b":", b": ", b":  ", b":\t"])
_field = st.builds(lambda n, s, v: n + s + v, _name, _sep, _value)
_comment = st.builds(
    lambda v: b":" + v,
    st.one_of(
        _value,
        st.sampled_from(
            [b" hopbase-keepalive", b"OPENROUTER PROCESSING", b" ping - 2025-01-01 00:00:00.000000"]
        ),
    ),
)
# whole events in the shapes providers send (the framer may take a faster path for them)
_block = st.one_of(
    st.builds(lambda v: b"data: " + v + b"\n", _value),
    st.builds(lambda n, v: b"event: " + n + b"\ndata: " + v + b"\n", _text, _value),
)
_line = st.one_of(
    _field, _field, _field, _block, _comment, st.just(b""), st.just(b""), st.binary(max_size=6)
)
_eol = st.sampled_from([b"\n", b"\n", b"\r", b"\r\n"])
sse_bodies = st.one_of(
    st.builds(
        lambda bom, lines, tail: bom + b"".join(line + eol for line, eol in lines) + tail,
        st.sampled_from([b"", b"", BOM, BOM[:1], BOM[:2], BOM + BOM]),
        st.lists(st.tuples(_line, _eol), max_size=30),
        st.one_of(st.just(b""), _line),
    ),
    st.binary(max_size=200),
)


def cuts_for(body: bytes) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, len(body)), max_size=24)


@SETTINGS
@given(data=st.data(), body=sse_bodies)
def test_framer_any_chunking_gives_what_the_whole_body_gives(
    data: st.DataObject, body: bytes
) -> None:
    whole = feed_all([body])
    assert whole == spec_items(body)
    chunks = split(body, data.draw(cuts_for(body), label="cuts"))
    assert feed_all(chunks) == whole
    assert feed_all(bytewise(body)) == whole


def _oversized(items: list[Item]) -> bool:
    return any(isinstance(i, FramingIssue) and i.kind == "oversized_event" for i in items)


def _shape(items: list[Item]) -> list[Item]:
    """Items as chunkings must agree on them: once an event was skipped, issue sizes
    are blanked (it is reported on crossing the cap, so its size is 'at least the cap'
    and depends on how much had arrived)."""
    if not _oversized(items):
        return items
    return [FramingIssue(i.kind, -1) if isinstance(i, FramingIssue) else i for i in items]


def _texts(items: list[Any]) -> list[tuple[Any, ...]]:
    """Events and comments without ids (a skipped event's id line is never applied)."""
    return [
        (i.event, i.data) if isinstance(i, Event) else i
        for i in items
        if type(i) is not FramingIssue
    ]


def _is_subsequence(small: list[Any], big: list[Any]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


@SETTINGS
@given(data=st.data(), body=sse_bodies, cap=st.integers(3, 64))
def test_framer_with_a_small_cap(data: st.DataObject, body: bytes, cap: int) -> None:
    whole = feed_all([body], cap)
    for item in whole:
        if isinstance(item, FramingIssue) and item.kind == "oversized_event":
            assert item.size >= cap
    chunks = split(body, data.draw(cuts_for(body), label="cuts"))
    assert _shape(feed_all(chunks, cap)) == _shape(whole)
    assert _shape(feed_all(bytewise(body), cap)) == _shape(whole)
    spec = spec_items(body)
    if _oversized(whole):
        # skipping drops whole events, never invents or alters one
        assert _is_subsequence(_texts(whole), _texts(spec))
    else:
        assert whole == spec


# -- the meter ------------------------------------------------------------------


def _frame_payloads(path: Path, endpoint: str) -> bytes:
    """A payload-only fixture framed as the wire carries it (PROVENANCE.md)."""
    out = bytearray()
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        if endpoint == "chat.completions":
            out += b"data: " + line + b"\n\n"
        else:
            try:
                kind = orjson.loads(line)["type"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                kind = "message"
            out += b"event: " + str(kind).encode() + b"\ndata: " + line + b"\n\n"
    if endpoint == "chat.completions":
        out += b"data: [DONE]\n\n"
    return bytes(out)


_FOLDERS = {
    "openai-chat": "chat.completions",
    "openai-responses": "responses",
    "anthropic-messages": "messages",
}
MAX_FRAMED = 40_000  # keep each example fast; the raw captures are all included


def _bodies() -> dict[str, list[tuple[str, bytes]]]:
    bodies: dict[str, list[tuple[str, bytes]]] = {e: [] for e in _FOLDERS.values()}
    for folder, endpoint in _FOLDERS.items():
        for path in sorted((FIXTURES / folder).glob("*.sse")):
            bodies[endpoint].append((f"{folder}/{path.name}", path.read_bytes()))
        for path in sorted((FIXTURES / "payload-only" / folder).glob("*")):
            body = path.read_bytes() if path.suffix == ".sse" else _frame_payloads(path, endpoint)
            if len(body) <= MAX_FRAMED:
                bodies[endpoint].append((f"payload-only/{folder}/{path.name}", body))
    return bodies


BODIES = _bodies()
ENDPOINTS = tuple(BODIES)
ALL_BODIES = [b for bs in BODIES.values() for b in bs]


def test_every_endpoint_has_fixture_bodies() -> None:
    assert ENDPOINTS == ("chat.completions", "responses", "messages")
    assert all(len(bodies) >= 5 for bodies in BODIES.values())


_JUNK = [
    b"data: {not json\n\n",
    b"data: [DONE]\n\n",
    b"data: \n\n",
    b": hopbase-keepalive\n\n",
    b": ping - 2025-01-01 00:00:00.000000\r\n\r\n",
    b"\r",
    b"\n",
    b"\r\n\r\n",
    BOM,
    b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n',
    b'data: {"error": {"message": "boom", "type": "server_error", "code": 500}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    b'event: response.completed\ndata: {"type":"response.completed","response":{}}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"\xe3\x81\x93"}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":"2"}}\n\n',
    b"data: null\n\ndata: 42\n\ndata: []\n\n",
    b"id: 7\x00\nretry: x\n\n",
    "こんにちは".encode()[:7],
]
_garbage = st.one_of(st.sampled_from(_JUNK), st.binary(min_size=1, max_size=16))


@st.composite
def damaged_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """An endpoint and a real body for it (sometimes another's), with damage."""
    endpoint = draw(st.sampled_from(ENDPOINTS))
    pool = draw(st.sampled_from([BODIES[endpoint], BODIES[endpoint], ALL_BODIES]))
    _name, body = draw(st.sampled_from(pool))
    inserts = draw(st.lists(st.tuples(st.integers(0, len(body)), _garbage), max_size=4))
    for at, junk in sorted(inserts, reverse=True):
        body = body[:at] + junk + body[at:]
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]  # cut short
    body += b"".join(draw(st.lists(_garbage, max_size=2)))
    return endpoint, body


def meter_record(
    endpoint: str,
    chunks: Iterable[bytes],
    *,
    timed: bool = False,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> dict[str, Any]:
    """Meter the chunks; timed: request at 0, headers at 0.25, all pieces at 1.0, end at 2.5."""
    if timed:
        meter = StreamMeter(endpoint, start=0.0, stall_after=1.0, max_event_bytes=max_event_bytes)
        meter.headers(0.25, 200)
        for chunk in chunks:
            meter.feed(chunk, 1.0)
        record = meter.finish(2.5)
    else:
        meter = StreamMeter(endpoint, max_event_bytes=max_event_bytes)
        for chunk in chunks:
            meter.feed(chunk)  # b"" pieces included: they mean nothing to the meter
        record = meter.finish()
    return record.to_dict(with_gaps=True)


@SETTINGS
@given(data=st.data(), case=damaged_bodies())
def test_meter_record_does_not_depend_on_chunking(
    data: st.DataObject, case: tuple[str, bytes]
) -> None:
    endpoint, body = case
    whole = meter_record(endpoint, [body])
    assert whole["ttft_ms"] is None and whole["duration_ms"] is None  # start=None: no timings
    chunks = split(body, data.draw(cuts_for(body), label="cuts"))
    assert meter_record(endpoint, chunks) == whole


@SETTINGS
@given(data=st.data(), case=damaged_bodies())
def test_timed_meter_record_does_not_depend_on_chunking(
    data: st.DataObject, case: tuple[str, bytes]
) -> None:
    endpoint, body = case
    whole = meter_record(endpoint, [body], timed=True)
    assert whole["duration_ms"] == 2500.0
    chunks = split(body, data.draw(cuts_for(body), label="cuts"))
    assert meter_record(endpoint, chunks, timed=True) == whole


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), case=damaged_bodies(), cap=st.sampled_from([64, 300, 1024, 4096]))
def test_meter_with_a_small_cap_does_not_depend_on_chunking(
    data: st.DataObject, case: tuple[str, bytes], cap: int
) -> None:
    endpoint, body = case
    whole = meter_record(endpoint, [body], timed=True, max_event_bytes=cap)
    chunks = split(body, data.draw(cuts_for(body), label="cuts"))
    assert meter_record(endpoint, chunks, timed=True, max_event_bytes=cap) == whole


_RAW = [(name, body) for name, body in ALL_BODIES if name.endswith(".sse")]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("body", [b for _, b in _RAW], ids=[n for n, _ in _RAW])
def test_meter_fed_one_byte_at_a_time(endpoint: str, body: bytes) -> None:
    # every raw capture, under its own interpreter and under the others
    for timed in (False, True):
        assert meter_record(endpoint, bytewise(body), timed=timed) == meter_record(
            endpoint, [body], timed=timed
        )
