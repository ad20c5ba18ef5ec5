"""The piece taker: what mitmproxy calls with every piece of a metered body.

It is the one call of the recorder's that runs for every piece before any
batching (``recorder.proxy.tap`` meters the kept pieces in batches), on
mitmproxy's event loop: it keeps the piece and its arrival time in the two lists
the tap shares, counts what they hold, and has them metered (``on_batch``) once
they hold ``batch_pieces`` pieces or ``batch_bytes`` bytes; an empty piece (the
body's end) sets ``ended_at``; once ``broken``, it keeps nothing. It returns the
piece it was given, the same object, whatever happens: an exception (the
clock's, ``on_batch``'s) goes to ``on_error``, and one that ``on_error`` raises
is dropped, so that none reaches mitmproxy.

Where a C compiler was there at install, the taker is C's (``_pieces.c``: a
call of a C object instead of a Python function, for every piece); this class
is the reference, and what an install without a compiler runs. The tests hold
both to the same behaviour (tests/proxy/test_piece_tap.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Protocol

try:  # the taker in C (_pieces.c), built at install when a C compiler is there
    from recorder.proxy._pieces import PieceTaker as NativePieceTaker
except ImportError:  # pragma: no cover - an install without a compiler
    NativePieceTaker = None  # type: ignore[assignment,misc]

__all__ = ["PieceTaker", "Taker", "new_taker"]


class Taker(Protocol):
    """What the tap asks of a taker (either one)."""

    broken: bool  # given up: keeps nothing
    seen: bool  # whether a piece came through
    buffered: int  # bytes in the pieces list

    @property
    def ended_at(self) -> float | None:
        """When the body ended (an empty piece came), or None."""
        ...

    def start(
        self,
        clock: Callable[[], float],
        on_batch: Callable[[], None],
        batch_pieces: int,
        batch_bytes: int,
        /,
    ) -> None:
        """What a call uses from now on (before this, a call keeps nothing)."""
        ...

    def __call__(self, data: bytes, /) -> bytes: ...


class PieceTaker:
    """The taker in Python: see the module docstring."""

    __slots__ = (
        "_batch_bytes",
        "_batch_pieces",
        "_clock",
        "_on_batch",
        "_on_error",
        "_pieces",
        "_stamps",
        "broken",
        "buffered",
        "ended_at",
        "seen",
    )

    def __init__(
        self,
        pieces: list[bytes],
        stamps: list[float],
        on_error: Callable[[Exception], object],
    ) -> None:
        self._pieces = pieces
        self._stamps = stamps
        self._on_error = on_error
        self._clock: Callable[[], float] | None = None
        self._on_batch: Callable[[], object] | None = None
        self._batch_pieces = self._batch_bytes = 1 << 62
        self.broken = False
        self.seen = False
        self.buffered = 0
        self.ended_at: float | None = None

    def start(
        self,
        clock: Callable[[], float],
        on_batch: Callable[[], None],
        batch_pieces: int,
        batch_bytes: int,
    ) -> None:
        self._clock = clock
        self._on_batch = on_batch
        self._batch_pieces = batch_pieces
        self._batch_bytes = batch_bytes

    def __call__(self, data: bytes) -> bytes:
        # Runs on the event loop for every piece of every stream: keep it lean,
        # and whatever happens, hand the bytes on unchanged.
        clock = self._clock
        if clock is None or self._on_batch is None:
            return data
        try:
            if not data:
                self.ended_at = clock()
            elif not self.broken:
                pieces = self._pieces
                pieces.append(data)
                self._stamps.append(clock())
                self.seen = True
                self.buffered += len(data)
                if len(pieces) >= self._batch_pieces or self.buffered >= self._batch_bytes:
                    self._on_batch()
        except Exception as e:
            with suppress(Exception):  # (nothing may reach mitmproxy)
                self._on_error(e)
        return data


def new_taker(
    pieces: list[bytes],
    stamps: list[float],
    on_error: Callable[[Exception], object],
    *,
    in_c: bool = True,
) -> Taker:
    """A taker keeping into these lists: C's where built (``in_c``), else Python's."""
    if in_c and NativePieceTaker is not None:
        return NativePieceTaker(pieces, stamps, on_error)
    return PieceTaker(pieces, stamps, on_error)
