"""The SSE framer, rule by rule (WHATWG "event stream interpretation").

Every case runs under every chunking (the ``frame`` fixture): whole, one byte at
a time, at random split points, and split in two at every position; each
chunking must give exactly the items the whole body gives. The only exception is
the size carried by a ``FramingIssue`` once the cap was hit: the framer reports
an oversized event as soon as it crosses the cap, so that size is "at least the
cap" and depends on how much had arrived (asserted with :class:`AtLeast`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable

import pytest

from recorder.core.framing import Comment, Event, FramingIssue, Item
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES, SSEFramer

BOM = "\ufeff".encode()
JA = "こんにちは、世界".encode()  # 3 bytes per character


def ev(
    data: bytes | str, event: str = "message", id: str | None = None, retry: int | None = None
) -> Event:
    """An expected Event (data given as text is UTF-8 encoded)."""
    if isinstance(data, str):
        data = data.encode()
    return Event(event, data, id, retry)


class AtLeast:
    """Equal to any int at least ``n`` (the size of an oversized event)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and other >= self.n

    def __repr__(self) -> str:
        return f"AtLeast({self.n})"


class Positive(AtLeast):
    def __init__(self) -> None:
        super().__init__(1)


def unterminated() -> FramingIssue:
    return FramingIssue("unterminated_event", Positive())  # type: ignore[arg-type]


def oversized(cap: int) -> FramingIssue:
    return FramingIssue("oversized_event", AtLeast(cap))  # type: ignore[arg-type]


# -- feeding ------------------------------------------------------------------


def feed_all(chunks: Iterable[bytes], max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> list[Item]:
    """Feed the chunks in order, then end the stream; check the memory bound."""
    framer = SSEFramer(max_event_bytes)
    items: list[Item] = []
    for chunk in chunks:
        if chunk:  # b"" would end the stream
            items += framer.feed(chunk)
            # a held BOM prefix (at most 2 bytes) is the only thing beyond the cap
            assert framer.pending_bytes <= max(max_event_bytes, 2)
    items += framer.feed(b"")
    assert framer.pending_bytes == 0
    return items


def _whole(body: bytes) -> list[list[bytes]]:
    return [[body]]


def _bytewise(body: bytes) -> list[list[bytes]]:
    return [[body[i : i + 1] for i in range(len(body))]]


def _random(body: bytes) -> list[list[bytes]]:
    rng = random.Random(len(body))
    out = []
    for _ in range(25):
        cuts = sorted(rng.randint(0, len(body)) for _ in range(rng.randint(1, 12)))
        bounds = [0, *cuts, len(body)]
        out.append([body[a:b] for a, b in itertools.pairwise(bounds)])
    return out


def _every_two(body: bytes) -> list[list[bytes]]:
    return [[body[:i], body[i:]] for i in range(len(body) + 1)]


CHUNKINGS: dict[str, Callable[[bytes], list[list[bytes]]]] = {
    "whole": _whole,
    "bytewise": _bytewise,
    "random": _random,
    "every-two-way-split": _every_two,
}


def _comparable(items: list[Item], cap: int) -> list[Item]:
    """Items as they must agree across chunkings (see the module docstring)."""
    if not any(isinstance(i, FramingIssue) and i.kind == "oversized_event" for i in items):
        return items
    for item in items:
        if isinstance(item, FramingIssue) and item.kind == "oversized_event":
            assert item.size >= cap
    return [FramingIssue(i.kind, -1) if isinstance(i, FramingIssue) else i for i in items]


Frame = Callable[..., list[Item]]


@pytest.fixture(params=list(CHUNKINGS))
def frame(request: pytest.FixtureRequest) -> Frame:
    """Frame a whole body under one chunking strategy; every chunking must agree."""
    chunkings = CHUNKINGS[request.param]

    def run(body: bytes, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> list[Item]:
        reference = feed_all([body], max_event_bytes)
        for chunks in chunkings(body):
            assert b"".join(chunks) == body
            got = feed_all(chunks, max_event_bytes)
            assert _comparable(got, max_event_bytes) == _comparable(reference, max_event_bytes), (
                chunks
            )
        return reference

    return run


Steps = list[tuple[bytes, list[object]]]


def check_feeds(frame: Frame, steps: Steps, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
    """Feed the pieces one by one, checking what each returns, ending with b"".

    The joined body then runs under the fixture's chunking and must give the
    same items in total.
    """
    framer = SSEFramer(max_event_bytes)
    for piece, expected in steps:
        assert framer.feed(piece) == expected, piece
        assert framer.pending_bytes <= max(max_event_bytes, 2)
    if steps[-1][0]:
        assert framer.feed(b"") == []
    body = b"".join(piece for piece, _ in steps)
    assert frame(body, max_event_bytes) == [i for _, expected in steps for i in expected]


# -- the spec's own examples --------------------------------------------------


def test_whatwg_stock_ticker_multiline_data(frame: Frame) -> None:
    body = b"data: YHOO\ndata: +2\ndata: 10\n\n"
    assert frame(body) == [ev("YHOO\n+2\n10")]


def test_whatwg_four_blocks_with_ids(frame: Frame) -> None:
    body = (
        b": test stream\n"
        b"\n"
        b"data: first event\n"
        b"id: 1\n"
        b"\n"
        b"data:second event\n"
        b"id\n"
        b"\n"
        b"data:  third event\n"
        b"\n"
    )
    assert frame(body) == [
        Comment(" test stream"),
        ev("first event", id="1"),
        ev("second event", id=""),
        ev(" third event", id=""),
    ]


def test_whatwg_empty_data_blocks(frame: Frame) -> None:
    # the last block is discarded: it is not followed by a blank line
    body = b"data\n\ndata\ndata\n\ndata:"
    assert frame(body) == [ev(""), ev("\n"), unterminated()]


def test_whatwg_two_identical_events(frame: Frame) -> None:
    assert frame(b"data:test\n\ndata: test\n\n") == [ev("test"), ev("test")]


def test_whatwg_last_block_needs_a_blank_line(frame: Frame) -> None:
    assert frame(b"data: a\n\ndata: b\n") == [ev("a"), unterminated()]


# -- BOM ----------------------------------------------------------------------


def test_bom_dropped_at_start(frame: Frame) -> None:
    assert frame(BOM + b"data: x\n\n") == [ev("x")]


def test_bom_split_across_chunks(frame: Frame) -> None:
    check_feeds(frame, [(BOM[:1], []), (BOM[1:2], []), (BOM[2:] + b"data: x\n\n", [ev("x")])])


def test_only_the_first_bom_is_dropped(frame: Frame) -> None:
    # the second BOM is part of the field name "\ufeffdata", an unknown field
    assert frame(BOM + BOM + b"data: x\n\ndata: y\n\n") == [ev("y")]


def test_bom_at_a_later_line_start_is_not_dropped(frame: Frame) -> None:
    assert frame(b"data: a\n\n" + BOM + b"data: b\n\n") == [ev("a")]


def test_bom_later_is_data(frame: Frame) -> None:
    assert frame(b"data: " + BOM + b"x\n\n") == [ev(BOM + b"x")]


def test_incomplete_bom_is_not_dropped(frame: Frame) -> None:
    # b"\xef\xbb" then a line end: a garbage field name, ignored; not a BOM
    assert frame(BOM[:2] + b"\ndata: x\n\n") == [ev("x")]
    assert frame(BOM[:2] + b"data: x\n\n") == []


def test_stream_of_only_a_bom_reports_nothing(frame: Frame) -> None:
    assert frame(BOM) == []


# -- line ends ----------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"], ids=["lf", "cr", "crlf"])
def test_line_ends(frame: Frame, eol: bytes) -> None:
    body = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    assert frame(body) == [ev("a\nb", event="e"), ev("c")]


def test_mixed_line_ends(frame: Frame) -> None:
    body = b"data: a\rdata: b\ndata: c\r\n\rdata: d\n\r\n"
    assert frame(body) == [ev("a\nb\nc"), ev("d")]


def test_lf_cr_is_two_line_ends(frame: Frame) -> None:
    # "\n\r" is not a line end pair: the CR ends an empty line, which dispatches
    assert frame(b"data: a\n\rdata: b\n\n") == [ev("a"), ev("b")]


def test_crlf_split_across_chunks(frame: Frame) -> None:
    # the LF completes the CRLF: it is not a second line end (a blank line)
    check_feeds(
        frame,
        [(b"data: a\r", []), (b"\ndata: b\r", []), (b"\n", []), (b"\r\n", [ev("a\nb")])],
    )


def test_lone_cr_at_end_of_feed_is_already_a_line_end(frame: Frame) -> None:
    # the event comes out at once, without waiting for the next read
    steps: Steps = [(b"data: a\r\r", [ev("a")]), (b"data: b\r", []), (b"\r", [ev("b")])]
    check_feeds(frame, steps)


def test_lf_after_split_crlf_is_swallowed_only_once(frame: Frame) -> None:
    check_feeds(frame, [(b"data: a\r", []), (b"\n", []), (b"\n", [ev("a")])])


def test_cr_then_other_bytes_in_next_feed(frame: Frame) -> None:
    check_feeds(frame, [(b"data: a\r", []), (b"data: b\r\n\r\n", [ev("a\nb")])])


def test_other_unicode_line_breaks_are_data(frame: Frame) -> None:
    # str.splitlines() would split on all of these; SSE splits only on CR and LF
    odd = "a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\u2029i".encode()
    assert frame(b"data: " + odd + b"\n\n") == [ev(odd)]


# -- fields -------------------------------------------------------------------


def test_one_space_after_colon_is_removed(frame: Frame) -> None:
    assert frame(b"data:x\n\ndata: x\n\n") == [ev("x"), ev("x")]


def test_only_one_space_is_removed(frame: Frame) -> None:
    assert frame(b"data:  x\n\n") == [ev(" x")]


def test_a_tab_after_colon_is_kept(frame: Frame) -> None:
    assert frame(b"data:\tx\n\n") == [ev("\tx")]


def test_trailing_spaces_are_kept(frame: Frame) -> None:
    assert frame(b"data: x  \n\n") == [ev("x  ")]


def test_value_may_contain_colons(frame: Frame) -> None:
    assert frame(b'data: {"a": "b:c"}\n\n') == [ev('{"a": "b:c"}')]


def test_line_without_colon_is_field_with_empty_value(frame: Frame) -> None:
    assert frame(b"data\n\n") == [ev("")]


def test_data_without_colon_between_data_lines(frame: Frame) -> None:
    assert frame(b"data: a\ndata\ndata: b\n\n") == [ev("a\n\nb")]


def test_empty_data_field_dispatches_an_empty_event(frame: Frame) -> None:
    assert frame(b"data:\n\n") == [ev("")]
    assert frame(b"data: \n\n") == [ev("")]


def test_multiline_data_joined_with_lf(frame: Frame) -> None:
    assert frame(b"data: a\ndata: b\ndata:\ndata: c\n\n") == [ev("a\nb\n\nc")]


def test_event_sets_the_type(frame: Frame) -> None:
    body = b"event: content_block_delta\ndata: {}\n\n"
    assert frame(body) == [ev("{}", event="content_block_delta")]


def test_default_type_is_message(frame: Frame) -> None:
    assert frame(b"data: x\n\n") == [ev("x", event="message")]


def test_empty_event_type_is_message(frame: Frame) -> None:
    assert frame(b"event:\ndata: x\n\nevent\ndata: y\n\n") == [ev("x"), ev("y")]


def test_last_event_line_wins(frame: Frame) -> None:
    assert frame(b"event: a\nevent: b\ndata: x\n\n") == [ev("x", event="b")]


def test_event_type_does_not_carry_over(frame: Frame) -> None:
    assert frame(b"event: a\ndata: x\n\ndata: y\n\n") == [ev("x", event="a"), ev("y")]


def test_event_type_may_come_after_data(frame: Frame) -> None:
    assert frame(b"data: x\nevent: late\n\n") == [ev("x", event="late")]


def test_id_kept_across_events(frame: Frame) -> None:
    body = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n"
    assert frame(body) == [ev("a", id="1"), ev("b", id="1"), ev("c", id="2")]


def test_id_applies_to_the_event_it_is_in(frame: Frame) -> None:
    assert frame(b"data: a\nid: 7\n\n") == [ev("a", id="7")]


def test_id_without_data_is_still_remembered(frame: Frame) -> None:
    assert frame(b"id: 7\n\ndata: a\n\n") == [ev("a", id="7")]


def test_id_without_value_resets_to_empty(frame: Frame) -> None:
    assert frame(b"id: 1\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\n") == [
        ev("a", id="1"),
        ev("b", id=""),
        ev("c", id=""),
    ]


def test_id_containing_nul_is_ignored(frame: Frame) -> None:
    body = b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\nid: \x00\ndata: c\n\n"
    assert frame(body) == [ev("a", id="1"), ev("b", id="1"), ev("c", id="1")]


def test_last_event_id_property() -> None:
    framer = SSEFramer()
    seen = [framer.last_event_id]
    framer.feed(b"id: abc\n")
    seen.append(framer.last_event_id)
    assert seen == [None, "abc"]
    framer.feed(b"id: x\x00y\n\n")
    assert framer.last_event_id == "abc"
    framer.feed(b"")
    assert framer.last_event_id == "abc"


def test_retry_takes_digits(frame: Frame) -> None:
    assert frame(b"retry: 1500\ndata: x\n\n") == [ev("x", retry=1500)]
    assert frame(b"retry:0\ndata: x\n\n") == [ev("x", retry=0)]


@pytest.mark.parametrize(
    "value",
    [b"15a", b"-1", b"+1", b"1.5", b" 15", b"15 ", b"", b"1_000", "١٥".encode(), b"\xef\xbc\x91"],
    ids=repr,
)
def test_retry_other_than_ascii_digits_is_ignored(frame: Frame, value: bytes) -> None:
    assert frame(b"retry: " + value + b"\ndata: x\n\n") == [ev("x")]


def test_retry_without_colon_is_ignored(frame: Frame) -> None:
    assert frame(b"retry\ndata: x\n\n") == [ev("x")]


def test_unknown_fields_are_ignored(frame: Frame) -> None:
    body = b"foo: bar\nsomething\nx-data: 1\ndata: x\nbaz:\n\n"
    assert frame(body) == [ev("x")]


@pytest.mark.parametrize("name", [b"Data", b"DATA", b"Event", b"ID", b"Retry", b"data ", b" data"])
def test_field_names_are_case_and_space_sensitive(frame: Frame, name: bytes) -> None:
    assert frame(name + b": 5\ndata: x\n\n") == [ev("x")]


# -- dispatch -----------------------------------------------------------------


def test_event_without_data_dispatches_nothing(frame: Frame) -> None:
    assert frame(b"event: ping\n\n") == []
    assert frame(b"event:\n\n") == []


def test_id_retry_and_unknown_fields_alone_dispatch_nothing(frame: Frame) -> None:
    assert frame(b"id: 1\n\nretry: 10\n\nfoo: bar\n\n") == []


def test_blank_lines_alone_dispatch_nothing(frame: Frame) -> None:
    assert frame(b"\n\n\r\n\r\r\n\n") == []


def test_event_line_without_data_does_not_leak_into_next_event(frame: Frame) -> None:
    assert frame(b"event: ping\n\ndata: x\n\n") == [ev("x")]


def test_undispatched_events_do_not_count_against_the_cap(frame: Frame) -> None:
    # a blank line ends the event even when nothing is dispatched: its bytes are gone
    body = b"event: keepalive\n\n" * 50 + b"data: x\n\n"
    assert frame(body, max_event_bytes=64) == [ev("x")]


def test_pending_bytes_back_to_zero_after_each_event() -> None:
    framer = SSEFramer()
    framer.feed(b"event: a\ndata: 12345")
    assert framer.pending_bytes > 0
    framer.feed(b"\n\n")
    assert framer.pending_bytes == 0
    framer.feed(b"event: ping\nid: 3\n\n")
    assert framer.pending_bytes == 0


# -- comments -----------------------------------------------------------------


def test_gateway_keepalive_comments(frame: Frame) -> None:
    body = b": hopbase-keepalive\n\n:OPENROUTER PROCESSING\n\n"
    assert frame(body) == [Comment(" hopbase-keepalive"), Comment("OPENROUTER PROCESSING")]


def test_sse_starlette_ping_with_crlf(frame: Frame) -> None:
    body = b": ping - 2025-01-01 00:00:00.000000\r\n\r\ndata: x\r\n\r\n"
    assert frame(body) == [Comment(" ping - 2025-01-01 00:00:00.000000"), ev("x")]


def test_empty_comment(frame: Frame) -> None:
    assert frame(b":\n") == [Comment("")]


def test_comment_inside_an_event_does_not_split_it(frame: Frame) -> None:
    body = b"data: a\n: keepalive\ndata: b\n\n"
    assert frame(body) == [Comment(" keepalive"), ev("a\nb")]


def test_comment_looking_like_a_field(frame: Frame) -> None:
    assert frame(b":data: x\n\n") == [Comment("data: x")]


# -- encoding -----------------------------------------------------------------


def test_multibyte_character_split_across_feeds_in_data(frame: Frame) -> None:
    body = b"data: " + JA + b"\n\n"
    cut = len(b"data: ") + 4  # inside the second character
    check_feeds(frame, [(body[:cut], []), (body[cut:], [ev(JA)])])
    assert ev(JA).data.decode() == "こんにちは、世界"


def test_multibyte_character_split_across_feeds_in_comment(frame: Frame) -> None:
    body = b": " + JA + b"\n"
    check_feeds(frame, [(body[:4], []), (body[4:], [Comment(" こんにちは、世界")])])


def test_multibyte_text_everywhere(frame: Frame) -> None:
    body = b"event: " + JA + b"\nid: " + JA + b"\ndata: " + JA + b"\n: " + JA + b"\n\n"
    text = JA.decode()
    assert frame(body) == [Comment(" " + text), ev(JA, event=text, id=text)]


def test_invalid_utf8_never_raises(frame: Frame) -> None:
    body = b"event: \xff\nid: \xc3\ndata: \xfe\xff\x80\n:\xe3\x81\n\n\xff\n"
    assert frame(body) == [Comment("\ufffd"), ev(b"\xfe\xff\x80", event="\ufffd", id="\ufffd")]


def test_nul_bytes_in_data_are_kept(frame: Frame) -> None:
    assert frame(b"data: a\x00b\n\n") == [ev("a\x00b")]


# -- end of stream ------------------------------------------------------------


def test_empty_stream_reports_nothing(frame: Frame) -> None:
    assert frame(b"") == []


def test_end_on_event_boundary_reports_nothing(frame: Frame) -> None:
    assert frame(b"data: a\n\n") == [ev("a")]
    assert frame(b"data: a\r\n\r\n") == [ev("a")]


def test_end_after_trailing_comment_reports_nothing(frame: Frame) -> None:
    assert frame(b"data: a\n\n: bye\n") == [ev("a"), Comment(" bye")]


def test_end_inside_event_reports_unterminated(frame: Frame) -> None:
    assert frame(b"data: a\n\ndata: b\n") == [ev("a"), unterminated()]


def test_end_inside_a_line_reports_unterminated(frame: Frame) -> None:
    assert frame(b'data: a\n\ndata: {"par') == [ev("a"), unterminated()]
    assert frame(b"data: a\n\n: keepal") == [ev("a"), unterminated()]


def test_end_after_event_line_reports_unterminated(frame: Frame) -> None:
    assert frame(b"event: message_stop\n") == [unterminated()]


def test_unterminated_event_is_not_dispatched() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: a\n") == []
    items = framer.feed(b"")
    assert len(items) == 1
    issue = items[0]
    assert isinstance(issue, FramingIssue)
    assert issue.kind == "unterminated_event"
    assert issue.size > 0


def test_feeds_after_the_end_are_ignored() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: a\n\n") == [ev("a")]
    assert framer.feed(b"") == []
    assert framer.feed(b"data: b\n\n") == []
    assert framer.feed(b"") == []
    assert framer.pending_bytes == 0


def test_feeds_after_an_unterminated_end_are_ignored() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: a\n") == []
    assert framer.feed(b"") == [unterminated()]
    assert framer.feed(b"\ndata: b\n\n") == []
    assert framer.feed(b"") == []


def test_second_end_reports_nothing_more() -> None:
    framer = SSEFramer()
    framer.feed(b"data: a")
    assert [i.kind for i in framer.feed(b"")] == ["unterminated_event"]  # type: ignore[union-attr]
    assert framer.feed(b"") == []


# -- the cap ------------------------------------------------------------------

CAP = 32


def test_oversized_event_is_skipped_and_reported_once(frame: Frame) -> None:
    body = (
        b"data: ok1\n\n"
        b"event: big\ndata: " + b"x" * 200 + b"\ndata: more\n: inside\nid: 9\n\n"
        b"data: ok2\n\n"
    )
    assert frame(body, max_event_bytes=CAP) == [ev("ok1"), oversized(CAP), ev("ok2")]


def test_oversized_event_made_of_many_small_lines(frame: Frame) -> None:
    body = b"data: ok1\n\n" + b"data: 0123456789\n" * 10 + b"\ndata: ok2\n\n"
    assert frame(body, max_event_bytes=CAP) == [ev("ok1"), oversized(CAP), ev("ok2")]


def test_several_oversized_events_each_reported(frame: Frame) -> None:
    big = b"data: " + b"y" * 100 + b"\n\n"
    body = big + b"data: a\n\n" + big + big + b"data: b\n\n"
    assert frame(body, max_event_bytes=CAP) == [
        oversized(CAP),
        ev("a"),
        oversized(CAP),
        oversized(CAP),
        ev("b"),
    ]


def test_oversized_event_cut_by_end_of_stream(frame: Frame) -> None:
    body = b"data: ok\n\ndata: " + b"z" * 100 + b"\ndata: more"
    assert frame(body, max_event_bytes=CAP) == [
        ev("ok"),
        oversized(CAP),
        FramingIssue("unterminated_event", AtLeast(CAP)),  # type: ignore[arg-type]
    ]


def test_event_well_under_the_cap_passes(frame: Frame) -> None:
    body = b"event: e\nid: 1\ndata: 0123456789\n\n"
    assert frame(body, max_event_bytes=len(body)) == [ev("0123456789", event="e", id="1")]


def test_id_survives_a_skipped_event(frame: Frame) -> None:
    body = b"id: 1\ndata: a\n\ndata: " + b"q" * 100 + b"\nid: 2\n\ndata: b\n\n"
    # the skipped event's fields are ignored, its id line included
    assert frame(body, max_event_bytes=CAP) == [ev("a", id="1"), oversized(CAP), ev("b", id="1")]


@pytest.mark.parametrize(
    "line",
    [
        b": " + b"c" * 100,  # a huge comment
        b"event: " + b"e" * 100,  # a huge event type
        b"id: " + b"i" * 100,  # a huge id
        b"foo: " + b"f" * 100,  # a huge unknown field
    ],
    ids=["comment", "event", "id", "unknown"],
)
def test_cap_applies_to_any_line_whatever_the_chunking(frame: Frame, line: bytes) -> None:
    # fed byte by byte such a line must be held whole before it is known to be a
    # comment: the cap has to count it, and a whole feed must agree
    body = b"data: a\n\n" + line + b"\ndata: b\n\ndata: c\n\n"
    assert frame(body, max_event_bytes=CAP) == [ev("a"), oversized(CAP), ev("c")]


def test_cap_decision_at_the_boundary_does_not_depend_on_chunking(frame: Frame) -> None:
    # the frame fixture checks that whole, byte-wise and split feeds agree
    for cap in range(6, 24):
        frame(b"event: e\ndata: abcdefgh\ndata: ij\n\ndata: z\n\n", max_event_bytes=cap)


def test_oversized_line_tail_starting_with_lf_in_next_feed(frame: Frame) -> None:
    # the LF ends the oversized line; it is not a blank line ending the event
    steps: Steps = [
        (b"data: ok1\n\ndata: " + b"x" * 100, [ev("ok1"), oversized(CAP)]),
        (b"\ndata: more\n", []),
        (b"\ndata: ok2\n\n", [ev("ok2")]),
    ]
    check_feeds(frame, steps, CAP)


def test_oversized_line_tail_is_a_lone_lf_then_blank_line(frame: Frame) -> None:
    steps: Steps = [
        (b"data: " + b"x" * 100, [oversized(CAP)]),
        (b"\n", []),
        (b"\n", []),
        (b"data: ok\n\n", [ev("ok")]),
    ]
    check_feeds(frame, steps, CAP)


def test_oversized_line_ending_in_split_crlf(frame: Frame) -> None:
    steps: Steps = [
        (b"data: " + b"x" * 100 + b"\r", [oversized(CAP)]),
        (b"\n", []),  # the rest of the CRLF, not a blank line
        (b"data: more\r\n\r\ndata: ok\r\n\r\n", [ev("ok")]),
    ]
    check_feeds(frame, steps, CAP)


def test_oversized_line_tail_then_more_of_the_same_line(frame: Frame) -> None:
    steps: Steps = [
        (b"data: " + b"x" * 100, [oversized(CAP)]),
        (b"x" * 100, []),
        (b"x\n\ndata: ok\n\n", [ev("ok")]),
    ]
    check_feeds(frame, steps, CAP)


def test_pending_bytes_bounded_while_feeding_a_10_mib_event() -> None:
    cap = 64 * 1024
    data_lines = [b"data: " + b"x" * 1017 + b"\n"] * (5 * 1024)  # 1 KiB each
    one_line = [b"data: "] + [b"y" * 1024] * (5 * 1024)  # 5 MiB without a line end
    pieces = [b"data: before\n\n", *data_lines, *one_line, b"\n\ndata: after\n\n"]
    expected = [ev("before"), oversized(cap), ev("after")]
    framer = SSEFramer(max_event_bytes=cap)
    items: list[Item] = []
    for piece in pieces:
        items += framer.feed(piece)
        assert framer.pending_bytes <= cap
    items += framer.feed(b"")
    assert items == expected
    assert framer.pending_bytes == 0
    # the same body whole and at random split points (one byte at a time would be slow)
    body = b"".join(pieces)
    assert len(body) > 10 * 1024 * 1024
    assert feed_all([body], cap) == expected
    rng = random.Random(10)
    for _ in range(3):
        cuts = sorted(rng.randrange(len(body)) for _ in range(200))
        chunks = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
        assert feed_all(chunks, cap) == expected


def test_pending_bytes_bounded_for_one_endless_line() -> None:
    framer = SSEFramer(max_event_bytes=1024)
    items: list[Item] = []
    for _ in range(10 * 1024):
        items += framer.feed(b"z" * 1024)
        assert framer.pending_bytes <= 1024
    items += framer.feed(b"")
    assert [i.kind for i in items] == ["oversized_event", "unterminated_event"]  # type: ignore[union-attr]


def test_never_raises_on_hostile_input() -> None:
    rng = random.Random(7)
    alphabet = b"\r\n: \x00\xef\xbb\xbfdataeventidretry\xff\xe3"
    for _ in range(300):
        body = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for cap in (1, 2, 5, 40, DEFAULT_MAX_EVENT_BYTES):
            feed_all(_random(body)[0], cap)
