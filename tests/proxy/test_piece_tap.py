"""The piece taker (what mitmproxy calls with every piece of a metered body), in
C and in Python: the same behaviour, and the tap's promises.

Whatever happens (the clock raising, the batch raising, the error handler
raising) the piece handed in is the piece handed back, the same object, and no
exception but one that is not an ``Exception`` leaves the call. What is kept is
every non-empty piece, in order, each with the clock's time, until the tap gives
up; the batch is called exactly when the kept pieces reach the batch's count or
bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.proxy import piece_tap
from recorder.proxy.piece_tap import PieceTaker, new_taker

IMPLEMENTATIONS = ["C taker", "Python taker"]


@pytest.fixture(params=IMPLEMENTATIONS)
def in_c(request: pytest.FixtureRequest) -> Iterator[bool]:
    if request.param == "C taker" and piece_tap.NativePieceTaker is None:
        pytest.skip("the C taker is not built")
    yield request.param == "C taker"


class Harness:
    """A taker with a clock, a batch and an error handler that say what they did,
    and can be told to raise."""

    def __init__(self, in_c: bool, batch_pieces: int = 3, batch_bytes: int = 10) -> None:
        self.pieces: list[bytes] = []
        self.stamps: list[float] = []
        self.log: list[Any] = []
        self.now = 0.0
        self.raise_in: set[str] = set()
        self.taker = new_taker(self.pieces, self.stamps, self.on_error, in_c=in_c)
        self.batch = (batch_pieces, batch_bytes)

    def start(self) -> None:
        self.taker.start(self.clock, self.on_batch, *self.batch)

    def clock(self) -> float:
        if "clock" in self.raise_in:
            raise ValueError("clock")
        self.now += 1.0
        return self.now

    def on_batch(self) -> None:
        self.log.append(("batch", len(self.pieces), self.taker.buffered))
        if "batch" in self.raise_in:
            raise RuntimeError("batch")
        self.pieces.clear()
        self.stamps.clear()
        self.taker.buffered = 0

    def on_error(self, e: Exception) -> None:
        self.log.append(("error", type(e).__name__, str(e)))
        self.taker.broken = True
        if "error" in self.raise_in:
            raise KeyError("error handler")

    def state(self) -> dict[str, Any]:
        t = self.taker
        return {
            "pieces": list(self.pieces),
            "stamps": list(self.stamps),
            "log": list(self.log),
            "broken": t.broken,
            "seen": t.seen,
            "buffered": t.buffered,
            "ended_at": t.ended_at,
        }


_step = st.one_of(
    st.binary(min_size=1, max_size=8).map(lambda b: ("piece", b)),
    st.just(("piece", b"")),
    st.sampled_from(
        [("raise", "clock"), ("raise", "batch"), ("raise", "error"), ("calm", ""), ("break", "")]
    ),
)


def play(in_c: bool, steps: list[tuple[str, Any]], batch: tuple[int, int]) -> list[dict[str, Any]]:
    h = Harness(in_c, *batch)
    h.start()
    seen = []
    for what, arg in steps:
        if what == "piece":
            piece = arg if not arg else bytes(arg)  # a fresh object: identity is checked
            assert h.taker(piece) is piece
        elif what == "raise":
            h.raise_in.add(arg)
        elif what == "calm":
            h.raise_in.clear()
        elif what == "break":
            h.taker.broken = True
        seen.append(h.state())
    return seen


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(_step, max_size=30),
    batch=st.tuples(st.integers(1, 5), st.integers(1, 20)),
)
def test_the_c_taker_does_what_the_python_one_does(
    steps: list[tuple[str, Any]], batch: tuple[int, int]
) -> None:
    if piece_tap.NativePieceTaker is None:
        pytest.skip("the C taker is not built")
    assert play(True, steps, batch) == play(False, steps, batch)


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=8), max_size=40),
    batch=st.tuples(st.integers(1, 5), st.integers(1, 20)),
)
def test_every_piece_is_kept_in_order_with_its_time_and_batched_at_the_bounds(
    pieces: list[bytes], batch: tuple[int, int]
) -> None:
    for in_c in (True, False):
        if in_c and piece_tap.NativePieceTaker is None:
            continue
        h = Harness(in_c, *batch)
        h.start()
        kept: list[bytes] = []  # what the batches took, and what waits
        waiting: list[bytes] = []
        for piece in pieces:
            assert h.taker(piece) is piece
            if piece:
                waiting.append(piece)
                if len(waiting) >= batch[0] or sum(map(len, waiting)) >= batch[1]:
                    assert h.log[-1] == ("batch", len(waiting), sum(map(len, waiting)))
                    kept += waiting
                    waiting = []
        assert h.pieces == waiting
        assert len(h.stamps) == len(waiting)
        assert h.stamps == sorted(h.stamps)
        assert [e for e in h.log if e[0] != "batch"] == []
        assert h.taker.seen == any(pieces)
        ends = [i for i, p in enumerate(pieces) if not p]
        assert (h.taker.ended_at is None) == (not ends)


def test_an_empty_piece_ends_the_body_even_after_giving_up(in_c: bool) -> None:
    h = Harness(in_c)
    h.start()
    h.taker.broken = True
    assert h.taker(b"x") == b"x"
    end = b""
    assert h.taker(end) is end
    assert h.pieces == [] and not h.taker.seen
    assert h.taker.ended_at == 1.0


def test_a_taker_not_started_keeps_nothing(in_c: bool) -> None:
    h = Harness(in_c)
    piece = b"data: x\n\n"
    assert h.taker(piece) is piece
    assert h.taker(b"") == b""
    assert h.state()["pieces"] == [] and h.taker.ended_at is None and not h.taker.seen


def test_a_failing_batch_and_a_failing_handler_reach_no_one(in_c: bool) -> None:
    h = Harness(in_c, batch_pieces=1)
    h.start()
    h.raise_in |= {"batch", "error"}
    piece = b"data: x\n\n"
    assert h.taker(piece) is piece  # (the handler's KeyError is dropped)
    assert h.log == [("batch", 1, len(piece)), ("error", "RuntimeError", "batch")]
    assert h.taker.broken


def test_an_interrupt_is_not_swallowed(in_c: bool) -> None:
    h = Harness(in_c)

    def interrupted() -> float:
        raise KeyboardInterrupt

    h.taker.start(interrupted, h.on_batch, 3, 10)
    with pytest.raises(KeyboardInterrupt):
        h.taker(b"x")
    assert h.log == []


def test_the_python_taker_is_the_fallback() -> None:
    taker = new_taker([], [], lambda e: None, in_c=False)
    assert type(taker) is PieceTaker
    if piece_tap.NativePieceTaker is not None:
        assert type(new_taker([], [], lambda e: None)) is piece_tap.NativePieceTaker
