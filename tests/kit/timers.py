"""A scheduler the test drives (``recorder.proxy.scheduling.Scheduler``), on the
test's clock: what the recorder puts off runs when the test moves the clock
(``advance``) or asks for what is due (``run_due``), never on its own. Callbacks
posted from other threads (a request body read on a worker thread) wait in a
thread-safe list until then."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Protocol


class _Clock(Protocol):
    now: float


class _Handle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """Runs callbacks at their time on ``clock``, when the test says."""

    # more callbacks in one run than this is a loop that never ends (a bug)
    RUN_LIMIT = 100_000

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, _Handle, Callable[[], None]]] = []
        self._order = itertools.count()
        self._posted: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.ran = 0  # callbacks run so far

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Handle:
        handle = _Handle()
        heapq.heappush(
            self._heap, (self.clock.now + max(0.0, delay), next(self._order), handle, fn)
        )
        return handle

    def poster(self) -> Callable[[Callable[[], None]], None]:
        def post(fn: Callable[[], None]) -> None:
            with self._lock:
                self._posted.append(fn)

        return post

    @property
    def next_due(self) -> float | None:
        """When the earliest callback is due (None: none waits)."""
        due = [t for t, _, h, _ in self._heap if not h.cancelled]
        return min(due) if due else None

    @property
    def pending(self) -> int:
        """Callbacks waiting (not called off), posted ones included."""
        with self._lock:
            posted = len(self._posted)
        return posted + sum(1 for _, _, h, _ in self._heap if not h.cancelled)

    def run_due(self) -> int:
        """Run what is due by now (and what that schedules for now), in order; the
        number run."""
        n = 0
        while True:
            with self._lock:
                posted, self._posted = self._posted, []
            for fn in posted:
                fn()
                n += 1
            if self._heap and self._heap[0][0] <= self.clock.now:
                _, _, handle, fn = heapq.heappop(self._heap)
                if not handle.cancelled:
                    fn()
                    n += 1
            elif not posted:
                break
            if n > self.RUN_LIMIT:
                raise RuntimeError("callbacks keep scheduling each other for now")
        self.ran += n
        return n

    def step(self) -> bool:
        """Run the one callback that is due first (posted ones first); whether any was."""
        with self._lock:
            if self._posted:
                fn = self._posted.pop(0)
                self.ran += 1
        if "fn" in locals():
            fn()
            return True
        while self._heap and self._heap[0][0] <= self.clock.now:
            _, _, handle, fn = heapq.heappop(self._heap)
            if not handle.cancelled:
                self.ran += 1
                fn()
                return True
        return False

    def advance(self, seconds: float) -> int:
        """Move the clock by ``seconds``, running what falls due on the way, each at
        its own time."""
        end = self.clock.now + seconds
        n = self.run_due()
        while self._heap and self._heap[0][0] <= end:
            self.clock.now = max(self.clock.now, self._heap[0][0])
            n += self.run_due()
        self.clock.now = end
        return n + self.run_due()
