"""The one periodic walk over the open streams.

Every ``WALK_S`` it meters what the taps keep waiting in every open exchange
(and what else waits: the messages WebSocket connections hold), a slice at a
time (about ``WALK_SLICE`` pieces per loop callback, a short block):
pieces never wait much longer than that for the meter, and exchanges are metered
one after the other, so the meter's code stays in the CPU's caches from one to
the next (docs/performance.md). Then it shows the open streams, as of now, to
its watchers: the live view (stalls while they last, the stall gauges) and
mitmweb's view (each flow's comment).

It runs while exchanges are open or watchers watch, and stops at shutdown.
"""

from __future__ import annotations

from collections.abc import Callable

from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.open_streams import Held, OpenStreams, StreamView
from recorder.proxy.scheduling import Handle, Scheduler, cancel_quietly
from recorder.proxy.state import FlowState

WALK_S = 1.0
WALK_SLICE = 256

Watcher = Callable[[list[StreamView], float], None]


class Walk:
    """Meters what waits, then tells the watchers, once every ``WALK_S``."""

    def __init__(
        self,
        scheduler: Scheduler,
        streams: OpenStreams,
        clock: Callable[[], float],
        errors: InternalErrors,
    ) -> None:
        self._scheduler = scheduler
        self._streams = streams
        self._clock = clock
        self._errors = errors
        self._watchers: list[Watcher] = []
        self._handle: Handle | None = None
        self._again = False  # wanted while a walk was coming or under way
        self._stopped = False

    @property
    def watched(self) -> bool:
        """Whether anyone watches the walk."""
        return bool(self._watchers)

    @property
    def scheduled(self) -> bool:
        """Whether a walk (or the rest of one) is coming."""
        return self._handle is not None

    def watch(self, watcher: Watcher) -> None:
        """Show ``watcher`` the open streams after every walk (on the loop)."""
        self._watchers.append(watcher)

    def want(self) -> None:
        """Make sure a walk is coming (a stream opened, a watcher started, a
        WebSocket connection holds messages): one, however often it is asked."""
        if self._stopped:
            return
        if self._handle is None:
            self._handle = self._scheduler.call_later(WALK_S, self._start)
        else:  # one is coming, or under way: the one after it too, if this came during it
            self._again = True

    def stop(self) -> None:
        cancel_quietly(self._handle)
        self._handle = None
        self._stopped = True

    def _start(self) -> None:
        self._again = False
        try:
            held = self._streams.held()
        except Exception:
            self._errors("walk")
            held = []
        todo = [state for state in self._streams if state.tap is not None and state.tap.waiting]
        self._go_on(held, todo)

    def _go_on(self, held: list[Held], todo: list[FlowState]) -> None:
        # The handle stays this walk's until the slice is done: an exchange that
        # begins in it (a WebSocket response whose request was held) wants no
        # second walk beside this one, only the one after it (``_again``).
        try:
            budget = WALK_SLICE
            while held and budget > 0:
                holder = held.pop()
                budget -= holder.waiting
                holder.meter_waiting()
            while todo and budget > 0:
                state = todo.pop()
                tap = state.tap
                # an exchange that ended since was metered by its end
                if state.live and tap is not None and tap.waiting:
                    budget -= len(tap.pieces)
                    tap.meter_waiting()
        except Exception:
            self._errors("walk")
            held, todo = [], []
        if self._stopped:
            self._handle = None
            return
        if held or todo:  # the rest after the loop's other callbacks
            self._handle = self._scheduler.call_later(0, lambda: self._go_on(held, todo))
            return
        self._handle = None
        self._tell()
        if len(self._streams) or self._watchers or self._again:
            self._again = False
            self.want()

    def _tell(self) -> None:
        if not self._watchers:
            return
        try:
            views = self._streams.views(catch_up=True)  # (what came during the walk)
            now = self._clock()
        except Exception:
            self._errors("walk")
            return
        for watcher in self._watchers:
            try:
                watcher(views, now)
            except Exception:
                self._errors("walk")
