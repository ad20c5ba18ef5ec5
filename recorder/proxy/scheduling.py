"""When the recorder's deferred work runs: one scheduler, injected as the clock is.

The recorder puts off three kinds of work so that mitmproxy's hooks stay short:
making a new flow's record (``start_delay``), completing an ended flow's record
(``finish_delay``), the periodic walk over the open streams
(``recorder.proxy.walk``) and the live view's snapshot for ``GET /streams``. Each
is the same pattern, "wait, then work through what waits a slice per loop callback,
and come back for the rest", written once here (:class:`Sliced`), on a
:class:`Scheduler`.

Under mitmproxy the scheduler is the event loop's (:class:`LoopScheduler`): the
hooks run on it, so it is always there when work is put off. Tests that call the
hooks by hand pass a scheduler of their own (``tests/kit/timers.py``) that runs the
work when the test says so, as they pass a clock of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol


class Handle(Protocol):
    """A callback that was scheduled, and can be called off."""

    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Runs callbacks later, on the thread the hooks run on."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> Handle:
        """Run ``fn`` after ``delay`` seconds (0: after what is ready to run now)."""
        ...

    def poster(self) -> Callable[[Callable[[], None]], None]:
        """A function any thread may call to have ``fn`` run by this scheduler;
        asked for on the scheduler's own thread."""
        ...


class LoopScheduler:
    """The running asyncio event loop's (mitmproxy's): the hooks run on it."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> Handle:
        loop = asyncio.get_running_loop()
        if delay <= 0:
            return loop.call_soon(fn)
        return loop.call_later(delay, fn)

    def poster(self) -> Callable[[Callable[[], None]], None]:
        loop = asyncio.get_running_loop()

        def post(fn: Callable[[], None]) -> None:
            loop.call_soon_threadsafe(fn)

        return post


def cancel_quietly(handle: Handle | None) -> None:
    """Call off ``handle``; at shutdown its loop may be closed already."""
    if handle is not None:
        with contextlib.suppress(Exception):
            handle.cancel()


class Sliced[T]:
    """Items wait ``delay`` seconds, then are handed to ``work`` at most ``size`` at a
    time, one slice per scheduler callback, oldest first, until none waits.

    A slice is one short block of the event loop; the loop serves its connections
    between two slices. ``work`` must not raise (the caller counts its own errors);
    if it does, the rest still runs in later slices. ``drained`` is told each time a
    run leaves nothing waiting.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        delay: float,
        size: int,
        work: Callable[[list[T]], None],
        drained: Callable[[], None] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a slice holds one item at least")
        self._scheduler = scheduler
        self._delay = delay
        self._size = size
        self._work = work
        self._drained = drained
        self._waiting: list[T] = []
        self._handle: Handle | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, item: T) -> None:
        """``item`` waits for the next run (one starts ``delay`` after the first)."""
        self._waiting.append(item)
        if self._handle is None:
            self._handle = self._scheduler.call_later(self._delay, self._run)

    def take_all(self) -> list[T]:
        """Everything that waits, now, in order (shutdown); no run is left pending."""
        cancel_quietly(self._handle)
        self._handle = None
        waiting, self._waiting = self._waiting, []
        return waiting

    def _run(self) -> None:
        self._handle = None
        batch = self._waiting[: self._size]
        del self._waiting[: self._size]
        try:
            self._work(batch)
        finally:
            if self._waiting:
                if self._handle is None:
                    self._handle = self._scheduler.call_later(0, self._run)
            elif self._drained is not None:
                self._drained()
