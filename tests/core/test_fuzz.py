"""Fuzzing the SSE framer and the three stream meters (issue 8, "Hardening").

What test_sse.py, test_properties.py and test_fixtures.py already check is not
repeated here (the WHATWG grammar at random split points, the fixtures whole,
byte by byte and at 20 cuts, garbage inserted into fixtures). This file adds:

1. raw random bytes, biased towards SSE syntax, at random chunkings, through the
   framer and through a meter of each endpoint, down to ``to_dict()``;
   and random JSON events built from each protocol's own vocabulary;
2. every fixture cut at every k-th byte, and damaged (bits flipped, bytes
   dropped or inserted, events duplicated, JSON broken in counted places);
3. hostile shapes: JSON nested 100,000 deep, events just under and over the
   4 MiB cap, invalid UTF-8 and NUL bytes in every field, a 32 MiB line;
4. valid streams unchanged by their framing: CRLF, lone CR, keepalive
   comments and ignored fields interleaved, under any chunking;
5. memory bounded over a 50 MiB stream of junk, outputs and keepalives.

Every input is deterministic (seeded ``random.Random`` or hypothesis with a
bounded ``max_examples``), so a failure replays.
"""

from __future__ import annotations

import gc
import itertools
import json
import random
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorder.core.framing import Comment, Event, FramingIssue
from recorder.core.meter import MAX_INTERVALS, MAX_STALL_GAPS, StreamMeter
from recorder.core.record import INTERRUPTED_OUTCOMES, OUTCOMES, SOURCES
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES, SSEFramer
from tests.kit import framing

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ENDPOINTS = ("chat.completions", "responses", "messages")
CAP = DEFAULT_MAX_EVENT_BYTES
MIB = 1024 * 1024
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


FIXTURE_BODIES: list[tuple[str, str, bytes]] = [
    (framing.fixture_name(p), framing.endpoint_for(p), framing.load_body(p))
    for p in framing.fixture_files()
]
NAMES = [name for name, _, _ in FIXTURE_BODIES]


# -- helpers --------------------------------------------------------------------


def split(body: bytes, cuts: Iterable[int]) -> list[bytes]:
    bounds = [0, *sorted(min(max(c, 0), len(body)) for c in cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def random_pieces(body: bytes, rng: random.Random, n: int = 20) -> list[bytes]:
    return split(body, [rng.randrange(len(body) + 1) for _ in range(n)])


def frame(pieces: Iterable[bytes], cap: int = CAP) -> list[Any]:
    """Framer items for these pieces; checks the framer's own promises on the way."""
    framer = SSEFramer(cap)
    items: list[Any] = []
    for piece in pieces:
        if piece:
            items += framer.feed(piece)
            assert framer.pending_bytes <= max(cap, 2)  # 2: a held BOM prefix
    items += framer.feed(b"")
    assert framer.feed(b"data: late\n\n") == []  # ended: nothing more comes out
    check_items(items, cap)
    return items


def check_items(items: list[Any], cap: int) -> None:
    for i, item in enumerate(items):
        kind = type(item)
        if kind is Event:
            assert isinstance(item.event, str) and isinstance(item.data, bytes)
            assert b"\r" not in item.data  # CR is always a line end
            assert "\n" not in item.event and "\r" not in item.event
            assert item.id is None or (isinstance(item.id, str) and "\0" not in item.id)
            assert len(item.data) <= cap
        elif kind is Comment:
            assert isinstance(item.text, str) and "\n" not in item.text
        else:
            assert kind is FramingIssue, item
            # never "internal_error": that is the last-resort catch of a framer bug
            assert item.kind in ("oversized_event", "unterminated_event"), item
            if item.kind == "oversized_event":
                assert item.size > cap
            else:
                assert i == len(items) - 1  # only the end of the stream reports it


def shape(items: list[Any]) -> list[Any]:
    """Items as every chunking must give them: once an event was skipped, issue
    sizes are blanked (by design they depend on how much had arrived when the
    cap was passed), as test_properties does."""
    if not any(type(i) is FramingIssue and i.kind == "oversized_event" for i in items):
        return items
    return [FramingIssue(i.kind, -1) if type(i) is FramingIssue else i for i in items]


def check_record(rec: dict[str, Any]) -> None:
    """What docs/record.md promises of any record, whatever the input."""
    assert rec["outcome"] in OUTCOMES
    assert rec["interrupted"] == (rec["outcome"] in INTERRUPTED_OUTCOMES)
    for key in ("input_source", "output_source"):
        assert rec[key] in SOURCES
    assert rec["usage_source"] in (*SOURCES, "mixed")
    assert rec["events"] >= 0 and rec["keepalives"] >= 0
    assert 0 <= rec["parse_issues"] <= rec["events"]
    assert 0 <= rec["oversized_events"] <= rec["events"]
    assert rec["output_chars"] >= 0 and rec["tool_calls"] >= 0
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens"):
        assert rec[key] is None or (type(rec[key]) is int and rec[key] >= 0)
    for key in ("finish_reason", "response_id", "response_model", "error_type", "error_message"):
        assert rec[key] is None or isinstance(rec[key], str)
    orjson.dumps(rec)  # the record serialises (the store and `--format json` do this)


def meter(
    endpoint: str,
    pieces: Iterable[bytes],
    *,
    timed: bool = True,
    ending: str = "eof",
    cap: int = CAP,
) -> dict[str, Any]:
    """The finished record's dict; timed: request 0, headers 0.25, pieces 1.0, end 2.5."""
    if timed:
        m = StreamMeter(endpoint, start=0.0, stall_after=1.0, max_event_bytes=cap)
        m.headers(0.25, 200)
        for piece in pieces:
            m.feed(piece, 1.0)
        rec = m.finish(2.5, ending=ending).to_dict(with_gaps=True)
    else:
        m = StreamMeter(endpoint, max_event_bytes=cap)
        for piece in pieces:
            m.feed(piece)
        rec = m.finish(ending=ending).to_dict(with_gaps=True)
    check_record(rec)
    return rec


def events_of(body: bytes) -> tuple[list[bytes], bytes]:
    """A LF-framed fixture as its blocks (each ending in its blank line) and a tail."""
    blocks = []
    pos = 0
    while True:
        end = body.find(b"\n\n", pos)
        if end < 0:
            return blocks, body[pos:]
        blocks.append(body[pos : end + 2])
        pos = end + 2


def json_data(block: bytes) -> tuple[int, int] | None:
    """The span of a block's data if it is one data line holding a JSON object."""
    for line_start in itertools.chain([0], (i + 1 for i, b in enumerate(block) if b == 0x0A)):
        if block.startswith(b"data: ", line_start):
            start = line_start + 6
            end = block.index(b"\n", start)
            try:
                obj = orjson.loads(block[start:end])
            except orjson.JSONDecodeError:
                return None
            return (start, end) if isinstance(obj, dict) and end - start >= 2 else None
    return None


def test_fixture_bodies_are_lf_framed_with_one_data_line_per_event() -> None:
    # what the variants below rely on to know where events and their JSON are
    assert len(FIXTURE_BODIES) >= 90
    for _, _, body in FIXTURE_BODIES:
        assert b"\r" not in body
        blocks, _ = events_of(body)
        assert all(block.count(b"\ndata:") + block.startswith(b"data:") <= 1 for block in blocks)


# -- 1. random bytes, random chunkings ------------------------------------------

_TOKENS = [
    b"data:",
    b"data: ",
    b"event: ",
    b"event:",
    b"id: ",
    b"retry: ",
    b":",
    b": keepalive",
    b"\n",
    b"\n\n",
    b"\r",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xe3\x81",
    b"\xef\xbb\xbf",
    b"{",
    b"}",
    b"[",
    b'"',
    b"[DONE]",
    b"9" * 5000,  # a retry with more digits than int() converts
    b'{"choices":[{"delta":{"content":"x"}}]}',
    b'{"type":"response.output_text.delta","delta":"x"}',
    b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}',
    b'{"type":"message_stop"}',
    b'{"type":"response.completed","response":{}}',
]
random_bodies = st.lists(
    st.one_of(st.sampled_from(_TOKENS), st.binary(min_size=1, max_size=24)), max_size=60
).map(b"".join)


@SETTINGS
@given(data=st.data(), body=random_bodies, cap=st.sampled_from([8, 64, 4096, CAP]))
def test_framer_random_bytes_any_chunking(data: st.DataObject, body: bytes, cap: int) -> None:
    whole = frame([body], cap)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    assert shape(frame(split(body, cuts), cap)) == shape(whole)
    assert shape(frame([body[i : i + 1] for i in range(len(body))], cap)) == shape(whole)
    # dispatched data never exceeds what came in
    assert sum(len(i.data) for i in whole if type(i) is Event) <= len(body)


@SETTINGS
@given(data=st.data(), body=random_bodies, cap=st.sampled_from([64, 4096, CAP]))
def test_meter_random_bytes_any_chunking(data: st.DataObject, body: bytes, cap: int) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    for endpoint in ENDPOINTS:
        whole = meter(endpoint, [body], cap=cap)
        assert meter(endpoint, split(body, cuts), cap=cap) == whole
        ending = data.draw(st.sampled_from(["eof", "upstream_disconnect", "client_disconnect"]))
        cut = meter(endpoint, split(body, cuts), ending=ending, cap=cap, timed=False)
        assert cut["outcome"] in (ending if ending != "eof" else "truncated", whole["outcome"])


# Random JSON events from each protocol's own vocabulary: right keys, any values.
_KEYS = [
    "type", "delta", "choices", "index", "content", "refusal", "reasoning_content",
    "reasoning", "tool_calls", "function", "arguments", "id", "finish_reason", "usage",
    "error", "message", "code", "model", "service_tier", "response", "item", "status",
    "incomplete_details", "reason", "output", "text", "partial_json", "thinking",
    "content_block", "stop_reason", "input_tokens", "output_tokens", "prompt_tokens",
    "completion_tokens", "total_tokens", "cache_creation", "cache_read_input_tokens",
    "server_tool_use", "prompt_tokens_details", "completion_tokens_details",
    "input_tokens_details", "output_tokens_details", "cached_tokens", "reasoning_tokens",
    "action", "input", "obfuscation", "sequence_number", "summary",
]  # fmt: skip
_TYPES = [
    "response.output_text.delta", "response.function_call_arguments.delta",
    "response.reasoning_summary_text.delta", "response.audio.delta", "response.x.delta",
    "response.output_item.added", "response.output_item.done", "response.created",
    "response.completed", "response.incomplete", "response.failed", "error",
    "content_block_delta", "content_block_start", "message_start", "message_delta",
    "message_stop", "text_delta", "input_json_delta", "thinking_delta", "compaction_delta",
    "function_call", "web_search_call", "mcp_call", "tool_use", "program", "ping",
]  # fmt: skip
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),  # past 64 bits: orjson reads a float
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=8),  # no lone surrogates
    st.sampled_from(_TYPES),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5),
    ),
    max_leaves=24,
)
_objects = st.fixed_dictionaries(
    {"type": st.sampled_from(_TYPES)},
    optional={k: _json for k in ("delta", "choices", "usage", "item", "response", "error")},
) | st.dictionaries(st.sampled_from(_KEYS), _json, max_size=6)


@SETTINGS
@given(
    objects=st.lists(st.tuples(st.sampled_from(["", *_TYPES]), _objects), max_size=12),
    data=st.data(),
)
def test_meters_survive_random_protocol_json(
    objects: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    body = b"".join(
        (f"event: {name}\n".encode() if name else b"")
        + b"data: "
        + json.dumps(obj, ensure_ascii=False).encode()  # json: big ints are fine
        + b"\n\n"
        for name, obj in objects
    )
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=8), label="cuts")
    for endpoint in ENDPOINTS:
        whole = meter(endpoint, [body])
        assert whole["events"] == len(objects)
        assert whole["parse_issues"] == 0  # json.dumps wrote valid objects
        assert meter(endpoint, split(body, cuts)) == whole


# -- 2. truncated and damaged fixtures -------------------------------------------

CUTS_PER_FIXTURE = 60


@pytest.mark.parametrize(("name", "endpoint", "body"), FIXTURE_BODIES, ids=NAMES)
def test_fixture_cut_at_every_kth_byte(name: str, endpoint: str, body: bytes) -> None:
    full = meter(endpoint, [body], timed=False)
    step = max(1, len(body) // CUTS_PER_FIXTURE)
    rng = random.Random(name)
    before = None
    for cut in [*range(0, len(body), step), len(body)]:
        pieces = random_pieces(body[:cut], rng, 3)
        ending = ("eof", "upstream_disconnect")[cut % 2]
        rec = meter(endpoint, pieces, timed=False, ending=ending)
        # a prefix shows the full outcome once its first terminal event passed, else the cut
        assert rec["outcome"] in (full["outcome"], "truncated" if ending == "eof" else ending)
        # a cut never invents a parse issue (the cut event is not dispatched)
        assert rec["parse_issues"] <= full["parse_issues"]
        if before is not None:  # the facts only grow as more of the body arrives
            for key in ("events", "output_chars", "tool_calls", "parse_issues", "keepalives"):
                assert before[key] <= rec[key], key
        before = rec
    assert {k: v for k, v in before.items() if k != "outcome" and k != "interrupted"} == {  # type: ignore[union-attr]
        k: v for k, v in full.items() if k != "outcome" and k != "interrupted"
    }


def flip_bits(body: bytes, rng: random.Random) -> bytes:
    out = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(out))
        out[at] ^= 1 << rng.randrange(8)
    return bytes(out)


def drop_bytes(body: bytes, rng: random.Random) -> bytes:
    out = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(out))
        del out[at : at + rng.randint(1, 16)]
    return bytes(out)


_INSERTS = [b"\x00", b"\r", b"\n", b"\n\n", b"\xff", b"\xc3", b'"', b"}", b"data: ", b":"]


def insert_bytes(body: bytes, rng: random.Random) -> bytes:
    out = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(out) + 1)
        out[at:at] = rng.choice([*_INSERTS, bytes([rng.randrange(256)])])
    return bytes(out)


DAMAGE: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip": flip_bits,
    "drop": drop_bytes,
    "insert": insert_bytes,
}
DAMAGED_PER_FIXTURE = 4  # of each kind


@pytest.mark.parametrize(("name", "endpoint", "body"), FIXTURE_BODIES, ids=NAMES)
def test_damaged_fixture_never_raises(name: str, endpoint: str, body: bytes) -> None:
    rng = random.Random(name)
    for kind, damage in DAMAGE.items():
        for _ in range(DAMAGED_PER_FIXTURE):
            bad = damage(body, rng)
            whole = meter(endpoint, [bad])
            assert meter(endpoint, random_pieces(bad, rng)) == whole, kind
            # under the other interpreters too: a gateway may mislabel a stream
            for other in ENDPOINTS:
                meter(other, random_pieces(bad, rng), timed=False)


@pytest.mark.parametrize(("name", "endpoint", "body"), FIXTURE_BODIES, ids=NAMES)
def test_duplicated_events_count_twice_and_keep_the_outcome(
    name: str, endpoint: str, body: bytes
) -> None:
    blocks, tail = events_of(body)
    doubled = b"".join(block + block for block in blocks) + tail
    base = meter(endpoint, [body])
    rec = meter(endpoint, random_pieces(doubled, random.Random(name)))
    assert rec["outcome"] == base["outcome"]  # the first terminal event decides
    assert rec["events"] == 2 * base["events"]
    assert rec["parse_issues"] == 2 * base["parse_issues"]
    assert rec["output_chars"] == 2 * base["output_chars"]


def _break_truncate(raw: bytes, rng: random.Random) -> bytes:
    return raw[: rng.randrange(1, len(raw) - 1)]


def _break_nul(raw: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(raw) + 1)
    return raw[:at] + b"\x00" + raw[at:]


def _break_utf8(raw: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(raw) + 1)
    return raw[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + raw[at:]


BREAKS = {"truncate": _break_truncate, "nul": _break_nul, "bad_utf8": _break_utf8}


@pytest.mark.parametrize("how", list(BREAKS))
@pytest.mark.parametrize(("name", "endpoint", "body"), FIXTURE_BODIES, ids=NAMES)
def test_broken_json_is_counted_exactly(name: str, endpoint: str, body: bytes, how: str) -> None:
    """Each event whose JSON is broken is one parse issue, and nothing raises."""
    rng = random.Random(f"{name}/{how}")
    blocks, tail = events_of(body)
    broken = 0
    out = []
    for block in blocks:
        span = json_data(block)
        if span is not None and rng.random() < 0.3:
            start, end = span
            block = block[:start] + BREAKS[how](block[start:end], rng) + block[end:]
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(block[start : block.index(b"\n", start)])
            broken += 1
        out.append(block)
    bad = b"".join(out) + tail
    base = meter(endpoint, [body])
    rec = meter(endpoint, random_pieces(bad, rng))
    assert rec["parse_issues"] == base["parse_issues"] + broken
    assert rec["events"] == base["events"]


# -- 3. hostile shapes ------------------------------------------------------------

DEPTH = 100_000
_DEEP = {
    "arrays": b"[" * DEPTH + b"]" * DEPTH,
    "objects": b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
    "mixed": b'[{"a":' * (DEPTH // 2) + b"1" + b"}]" * (DEPTH // 2),
    "unclosed": b"[" * DEPTH,
    "in_a_delta": b'{"choices":[{"delta":{"content":' + b"[" * DEPTH + b"]" * DEPTH + b"}}]}",
}
_VALID = {
    "chat.completions": b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
    b"data: [DONE]\n\n",
    "responses": b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"delta":"ok"}\n\nevent: response.completed\ndata: {"type":"response.completed",'
    b'"response":{"status":"completed"}}\n\n',
    "messages": b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"ok"}}\n\nevent: message_stop\n'
    b'data: {"type":"message_stop"}\n\n',
}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("deep", list(_DEEP))
def test_deeply_nested_json_is_a_parse_issue(endpoint: str, deep: str) -> None:
    body = b"data: " + _DEEP[deep] + b"\n\n" + _VALID[endpoint]
    rec = meter(endpoint, [body])
    assert rec["parse_issues"] == 1
    assert rec["events"] == 3
    assert rec["output_chars"] == 2 and rec["outcome"] == "completed"  # what follows counts
    assert meter(endpoint, random_pieces(body, random.Random(deep), 50)) == rec


@pytest.mark.parametrize("depth", [200, 254, 255, 256, 1000])
def test_deep_but_parseable_tool_arguments(depth: int) -> None:
    # orjson reads 1024 levels but writes only 255: the Responses interpreter
    # re-serialises an item's arguments, which must not raise past the meter
    deep = b"[" * depth + b"]" * depth
    body = (
        b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
        b'"item":{"type":"function_call"}}\n\n'
        b'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
        b'"item":{"type":"function_call","arguments":' + deep + b"}}\n\n" + _VALID["responses"]
    )
    rec = meter("responses", [body])
    assert rec["events"] == 4 and rec["parse_issues"] == 0
    assert rec["tool_calls"] == 1 and rec["outcome"] == "completed" and rec["output_chars"] == 2
    assert meter("responses", [body[i : i + 1] for i in range(len(body))]) == rec


def test_a_retry_longer_than_int_reads_is_ignored() -> None:
    # int() refuses more than 4300 digits: the framer used to fall into its
    # last-resort catch and lose every other event of the piece
    body = b"data: a\n\nretry: " + b"9" * 5000 + b"\ndata: b\n\ndata: c\n\n"
    items = frame([body])
    assert items == [
        Event("message", b"a", None, None),
        Event("message", b"b", None, None),
        Event("message", b"c", None, None),
    ]
    assert frame([body[:20], body[20:]]) == items
    assert frame([b"retry: 17\ndata: d\n\n"]) == [Event("message", b"d", None, 17)]


def _chat_delta(text_bytes: int) -> bytes:
    return b'{"choices":[{"index":0,"delta":{"content":"' + b"x" * text_bytes + b'"}}]}'


_OVERHEAD = len(_chat_delta(0))


@pytest.mark.parametrize("chunk", [CAP * 2, 65536, 4093])
def test_events_just_under_and_over_the_cap(chunk: int) -> None:
    # the cap is on an event's line (with its "data: "): exactly the cap passes
    at_cap = b"data: " + _chat_delta(CAP - 6 - _OVERHEAD) + b"\n\n"
    over = b"data: " + _chat_delta(CAP - 6 - _OVERHEAD + 1) + b"\n\n"
    assert len(at_cap) == CAP + 2
    body = at_cap + over + at_cap + over + _VALID["chat.completions"]
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
    rec = meter("chat.completions", pieces)
    assert rec["events"] == 6
    assert rec["oversized_events"] == 2
    assert rec["parse_issues"] == 0
    assert rec["output_chars"] == 2 * (CAP - 6 - _OVERHEAD) + 2
    assert rec["outcome"] == "completed" and rec["partial_event_at_end"] is False


def _bounded_peak(feed: Callable[[], None]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        feed()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


MONSTER = 32 * MIB
PIECE = 64 * 1024
MEMORY_BOUND = CAP + 3 * MIB  # the cap, a piece, and what Python allocates around them


def _monster(kind: str) -> Iterator[bytes]:
    """32 MiB of one event in 64 KiB pieces, without its blank line."""
    if kind == "one_line":
        piece = b"x" * PIECE
        yield b"data: "
    elif kind == "data_lines":
        line = b"data: " + b"y" * 1018 + b"\n"
        piece = line * (PIECE // len(line))
    else:  # "nul_and_bad_utf8": one line of NULs and invalid UTF-8, no line end
        piece = (b"\x00\xff\xc3\xed\xa0\x80" * (PIECE // 6 + 1))[:PIECE]
        yield b"event: "
    for _ in range(MONSTER // len(piece)):
        yield piece


@pytest.mark.parametrize("kind", ["one_line", "data_lines", "nul_and_bad_utf8"])
def test_framer_memory_bounded_by_a_32_mib_event(kind: str) -> None:
    framer = SSEFramer()
    items: list[Any] = []
    most = 0

    def feed() -> None:
        nonlocal most
        for piece in _monster(kind):
            items.extend(framer.feed(piece))
            most = max(most, framer.pending_bytes)
        items.extend(framer.feed(b"\n\n" + _VALID["messages"]))
        items.extend(framer.feed(b""))

    peak = _bounded_peak(feed)
    assert peak < MEMORY_BOUND, f"{peak / MIB:.1f} MiB"
    assert most <= CAP
    assert [type(i) for i in items] == [FramingIssue, Event, Event]
    assert items[0].kind == "oversized_event"
    assert items[1].event == "content_block_delta" and items[2].event == "message_stop"


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_meter_memory_bounded_by_a_32_mib_line(endpoint: str) -> None:
    m = StreamMeter(endpoint, start=0.0)
    most = 0

    def feed() -> None:
        nonlocal most
        m.headers(0.1, 200)
        for piece in _monster("one_line"):
            m.feed(piece, 1.0)
            most = max(most, m.framer.pending_bytes)
        m.feed(b"\n\n" + _VALID[endpoint], 2.0)

    peak = _bounded_peak(feed)
    rec = m.finish(3.0).to_dict(with_gaps=True)
    check_record(rec)
    assert peak < MEMORY_BOUND, f"{peak / MIB:.1f} MiB"
    assert most <= CAP
    assert rec["oversized_events"] == 1 and rec["events"] == 3
    assert rec["output_chars"] == 2 and rec["outcome"] == "completed"


def _hostile_fields(blocks: list[bytes], rng: random.Random) -> bytes:
    """Each event with ignored lines around its own: ids, retries, unknown field
    names and comments, with invalid UTF-8 and NUL bytes everywhere."""
    junk = [
        b"id: \xff\xfe\x00" + bytes([rng.randrange(256)]) + b"\n",
        b"id: \xc3\n",
        b"retry: 1\x002\n",
        b"retry: 99\n",
        b"retry: " + b"7" * 5000 + b"\n",
        b"\xff\xfe: x\n",
        b"\x00data: x\n",
        b"dat\xff: y\n",
        b"Event: message_stop\n",
        b": \x00\xff\xc3 comment\n",
        b"x\x00\n",
    ]
    out = bytearray()
    for block in blocks:
        lines = block[:-1].split(b"\n")[:-1]
        for line in lines:
            out += b"".join(rng.sample(junk, rng.randint(0, 2))) + line + b"\n"
        out += b"\n"
    return bytes(out)


def _mixed_line_ends(body: bytes, rng: random.Random) -> bytes:
    """Each LF as LF, CR or CRLF at random (never a CR then an LF that would make
    two line ends one)."""
    parts = body.split(b"\n")
    out = bytearray(parts[0])
    after_cr = False
    for part in parts[1:]:
        end = rng.choice([b"\n", b"\r", b"\r\n"] if not after_cr else [b"\r", b"\r\n"])
        out += end + part
        after_cr = end == b"\r" and not part
    return bytes(out)


def _bad_event_names(body: bytes) -> bytes:
    """Invalid UTF-8 and NUL in the event names of events whose JSON is readable:
    the interpreters go by the JSON's ``type``, the line is only their fallback
    for an unreadable event (which a few fixtures have, and keep)."""
    blocks, tail = events_of(body)
    return (
        b"".join(
            block.replace(b"event: ", b"event: \xff\x00\xc3") if json_data(block) else block
            for block in blocks
        )
        + tail
    )


VARIANTS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "crlf": lambda b, r: b.replace(b"\n", b"\r\n"),
    "lone_cr": lambda b, r: b.replace(b"\n", b"\r"),
    "mixed_line_ends": lambda b, r: _mixed_line_ends(b, r),
    "bom": lambda b, r: b"\xef\xbb\xbf" + b,
    "keepalives": lambda b, r: (
        b"".join(
            (b": keepalive\n\n" if r.random() < 0.5 else b"") + block for block in events_of(b)[0]
        )
        + events_of(b)[1]
    ),
    "bad_event_names": lambda b, r: _bad_event_names(b),
    "hostile_fields": lambda b, r: _hostile_fields(events_of(b)[0], r) + events_of(b)[1],
}


def _comparable(rec: dict[str, Any]) -> dict[str, Any]:
    # keepalive comments change the keepalive figures and nothing else
    return {k: v for k, v in rec.items() if k not in ("keepalives", "max_keepalive_gap_ms", "gaps")}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(("name", "endpoint", "body"), FIXTURE_BODIES, ids=NAMES)
def test_valid_stream_unchanged_by_its_framing(
    name: str, endpoint: str, body: bytes, variant: str
) -> None:
    rng = random.Random(f"{name}/{variant}")
    base = meter(endpoint, [body])
    other = VARIANTS[variant](body, rng)
    for pieces in ([other], random_pieces(other, rng, 30), random_pieces(other, rng, 300)):
        rec = meter(endpoint, pieces)
        assert _comparable(rec) == _comparable(base)
        if variant == "keepalives":
            assert rec["keepalives"] == base["keepalives"] + other.count(b": keepalive\n\n")
        elif variant != "hostile_fields":
            assert rec == base


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_valid_stream_any_chunking_any_variant(data: st.DataObject) -> None:
    _, endpoint, body = data.draw(st.sampled_from(FIXTURE_BODIES), label="fixture")
    variant = data.draw(st.sampled_from(list(VARIANTS)), label="variant")
    other = VARIANTS[variant](body, random.Random(data.draw(st.integers(0, 99), label="seed")))
    cuts = data.draw(st.lists(st.integers(0, len(other)), max_size=40), label="cuts")
    assert meter(endpoint, split(other, cuts)) == meter(endpoint, [other])


# -- 5. memory over a long stream -------------------------------------------------

LONG = 50 * MIB
_DELTAS = {
    "chat.completions": b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n',
    "responses": b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta"'
    b',"delta":"tok"}\n\n',
    "messages": b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"tok"}}\n\n',
}


def _long_stream(endpoint: str) -> Iterator[bytes]:
    """50 MiB of random junk in 64 KiB pieces, a blank line now and then, each
    followed by a piece of output deltas and keepalive comments: in all some
    30% more outputs and keepalives than the meter keeps intervals of."""
    rng = random.Random(endpoint)
    junk = []
    for _ in range(8):
        piece = bytearray(rng.randbytes(PIECE).replace(b"\n\n", b"\n."))
        for _ in range(4):  # the occasional blank line
            at = rng.randrange(PIECE - 2)
            piece[at : at + 2] = b"\n\n"
        junk.append(bytes(piece))
    pieces = LONG // PIECE
    per_piece = MAX_INTERVALS * 13 // 10 // pieces + 1
    outputs = (_DELTAS[endpoint] + b": ka\n\n") * per_piece
    for _ in range(pieces):
        yield rng.choice(junk)
        yield b"\n\n" + outputs


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_meter_memory_bounded_over_50_mib(endpoint: str) -> None:
    m = StreamMeter(endpoint, start=0.0, stall_after=0.5)
    pieces = 0

    def feed() -> None:
        nonlocal pieces
        m.headers(0.1, 200)
        for piece in _long_stream(endpoint):
            pieces += 1
            m.feed(piece, float(pieces))

    peak = _bounded_peak(feed)
    rec = m.finish(pieces + 100.0)
    out = rec.to_dict(with_gaps=True)
    check_record(out)
    outputs = out["output_chars"] // 3
    assert outputs > MAX_INTERVALS  # enough outputs to pass every cap
    assert m.keepalives > MAX_INTERVALS
    assert len(m.output_intervals) == MAX_INTERVALS
    assert len(m.keepalive_intervals) == MAX_INTERVALS
    # every piece of outputs follows the one before by 2 s (the first, the request
    # start), and the end its last by 100 s: each a stall of at least 0.5 s
    assert out["stalls"] == pieces // 2 + 1
    assert len(rec.gaps) <= MAX_STALL_GAPS + 5 + 1  # stalls, keepalive top 5, silence
    # measured 2.4 MiB: the two interval arrays (800 KB each) and a piece in flight;
    # a framer holding on to the junk would pass it many times over
    assert peak < 6 * MIB, f"{peak / MIB:.1f} MiB"
