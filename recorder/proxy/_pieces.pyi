# The body tap's piece taker in C (_pieces.c); see PieceTaker in piece_tap.py.
from collections.abc import Callable

class PieceTaker:
    broken: bool
    seen: bool
    buffered: int
    @property
    def ended_at(self) -> float | None: ...
    def __init__(
        self, pieces: list[bytes], stamps: list[float], on_error: Callable[[Exception], object], /
    ) -> None: ...
    def start(
        self,
        clock: Callable[[], float],
        on_batch: Callable[[], None],
        batch_pieces: int,
        batch_bytes: int,
        /,
    ) -> None: ...
    def __call__(self, data: bytes, /) -> bytes: ...
