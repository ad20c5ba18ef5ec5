"""The bounded queue between ``SqlSink.submit`` and the writer thread.

``RecordQueue`` owns the queue, the budget of captured bodies waiting in it, the
batch the writer has taken (in flight), and the hand-over of both to ``close``
when the writer is stuck in the database. Invariants:

- ``offer`` never blocks: it puts the record or returns False (queue full, or
  its body would take the bodies waiting past ``body_budget`` bytes). Bodies
  waiting = ``body_bytes_in - body_bytes_out``: the bodies queued or in the
  batch being gathered. The caller's side counts a body in when it is queued;
  the writer counts it out once its batch is gathered (``abandon`` when it takes
  it from the queue), each exactly once.
- Every item queued is taken exactly once: into the writer's batch
  (``take_batch``), or by ``abandon`` (``close`` giving up on the writer). Once
  abandoned, what the writer still takes comes back as "late", never into a
  batch, and ``settle`` no longer runs the writer's fallback: what close took,
  close spools; what the writer holds, the writer does; nothing is both.
- ``done`` marks a batch dealt with (committed or spooled): ``join`` (``flush``)
  returns once every record queued is, and ``done_seq`` is the highest spool
  sequence number dealt with (records spooled before they were queued, see
  ``recorder.store.handover``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence

from recorder.core.captured import body_of
from recorder.core.record import StreamRecord

# (spool sequence number or 0, record, bytes of its body counted in the budget)
Item = tuple[int, StreamRecord, int]

_STOP: StreamRecord = object()  # type: ignore[assignment]  # wakes the writer


class RecordQueue:
    """Records waiting for the writer, with the bodies' budget and the batch in flight."""

    def __init__(self, maxsize: int, body_budget: int) -> None:
        self._q: queue.Queue[Item] = queue.Queue(maxsize=maxsize)
        self.body_budget = body_budget
        self._bytes_in = 0  # the caller's side
        self._bytes_out = 0  # the writer's side (close's once it abandoned the writer)
        # close() taking over from a stuck writer, and the writer, agree under it
        self._handoff = threading.Lock()
        self._abandoned = False
        self._inflight: list[Item] = []
        self._done_seq = 0
        # The writer gathering a batch sleeps until its flush deadline, woken early
        # only when the queue could fill the batch (``_wanted`` items) or by
        # ``wake``: not once per record, which on a virtual machine costs each
        # thread tens of microseconds of CPU per wake-up (docs/performance.md).
        self._wanted = 0  # the writer's batch wants this many more (0: not waiting)
        self._ready = threading.Event()
        self._hurried = False  # hurry: the next gathering does not wait

    # -- the caller's side: never blocks ----------------------------------------

    def offer(self, record: StreamRecord, seq: int = 0, *, budgeted: bool = True) -> bool:
        """Queue ``record`` (spooled as ``seq``, 0 if not); False when the queue is
        full or (``budgeted``) its body would not fit in the bodies' budget."""
        size = 0
        if budgeted:
            body = body_of(record)
            if body is not None:
                size = body.queued_bytes
                if self._bytes_in - self._bytes_out + size > self.body_budget:
                    return False
        try:
            self._q.put_nowait((seq, record, size))
        except queue.Full:
            return False
        if size:
            self._bytes_in += size
        wanted = self._wanted  # read after the put: see _gather
        if wanted and self._q.qsize() >= wanted:
            self._ready.set()
        return True

    def wake(self) -> None:
        """Wake the writer if it waits for records (it then stops waiting)."""
        with contextlib.suppress(queue.Full):
            self._q.put_nowait((0, _STOP, 0))
        self._ready.set()

    def hurry(self) -> None:
        """Have the writer take what is queued now, not at its batch's deadline:
        the batch it is gathering, or else the next it gathers."""
        self._hurried = True
        self._ready.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every record queued is dealt with (``done``); False on timeout."""
        q = self._q
        end = None if timeout is None else time.monotonic() + timeout
        with q.all_tasks_done:
            while q.unfinished_tasks:
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                q.all_tasks_done.wait(remaining)
        return True

    # -- the writer's side --------------------------------------------------------

    def take_batch(
        self, size: int, flush_interval: float, *, wait: bool, first_within: float = 0.0
    ) -> tuple[list[Item], list[Item]]:
        """Up to ``size`` records: what is waiting, plus (``wait``) what arrives
        within ``flush_interval`` of the first, which is waited for up to
        ``first_within`` seconds (at least ``flush_interval``). Returns the batch,
        in flight from now on, and the items taken after ``abandon`` (the writer
        spools those). Both are to be passed to ``done`` once dealt with."""
        batch: list[Item] = []
        late: list[Item] = []
        self._inflight = batch  # close() spools it if the writer stalls
        if wait:
            try:
                first = self._q.get(timeout=max(flush_interval, first_within))
            except queue.Empty:
                return batch, late
            wait = self._keep(first, batch, late)
            deadline = time.monotonic() + flush_interval
            wait = self._drain(size, batch, late) and wait
            remaining = deadline - time.monotonic()
            if wait and len(batch) < size and remaining > 0:
                self._gather(size - len(batch), remaining)
        self._drain(size, batch, late)
        # the batch is gathered: its bodies no longer wait in the queue
        taken = sum(i[2] for i in batch) + sum(i[2] for i in late)
        if taken:
            with self._handoff:
                self._bytes_out += taken
        return batch, late

    def _gather(self, wanted: int, timeout: float) -> None:
        """Sleep until ``timeout`` has passed, ``wanted`` items wait in the queue,
        or ``wake`` or ``hurry``. The order matters: ``offer`` puts, then reads ``_wanted``;
        here ``_wanted`` is set before the queue is looked at, so an item put
        meanwhile is either seen here or sets the event."""
        self._wanted = wanted
        self._ready.clear()
        try:
            # (hurry sets the flag, then the event: one of the two is seen here)
            if not self._hurried and self._q.qsize() < wanted:
                self._ready.wait(timeout)
        finally:
            self._wanted = 0
            self._hurried = False

    def _drain(self, size: int, batch: list[Item], late: list[Item]) -> bool:
        """Take what waits, up to a batch of ``size``; False once ``wake``'s
        marker was among it (the writer is to stop waiting)."""
        go_on = True
        while len(batch) < size:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            go_on = self._keep(item, batch, late) and go_on
        return go_on

    def _keep(self, item: Item, batch: list[Item], late: list[Item]) -> bool:
        """One item taken: into the batch, or ``late`` once abandoned; False for
        ``wake``'s marker (marked done at once)."""
        if item[1] is _STOP:
            self._q.task_done()
            return False
        with self._handoff:
            (late if self._abandoned else batch).append(item)
        return True

    def done(self, items: Sequence[Item]) -> None:
        """``items`` are committed or spooled: no longer in flight."""
        seqs = [s for s, _, _ in items if s]
        if seqs:
            self._done_seq = max(self._done_seq, max(seqs))
        if self._inflight is items:
            self._inflight = []
        for _ in items:
            self._q.task_done()

    def settle(self, items: Sequence[Item], spill: Callable[[Sequence[Item]], None]) -> None:
        """The writer could not commit ``items``: ``spill`` them, unless ``close``
        took them over already (it spooled them itself)."""
        with self._handoff:
            if not self._abandoned:
                spill(items)
                if self._inflight is items:  # spooled: not close's to spool again
                    self._inflight = []

    def stranded(self) -> list[Item]:
        """The batch in flight, taken back after an error in the writer."""
        items, self._inflight = self._inflight, []
        return items

    # -- close's side -------------------------------------------------------------

    def abandon(self) -> list[Item]:
        """Give up on the writer: take the batch in flight and everything queued
        (each marked done); from now on the writer commits and spools nothing more."""
        with self._handoff:
            self._abandoned = True
            items = list(self._inflight)
            self._inflight = []
            while True:
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
                self._q.task_done()
                if item[1] is not _STOP:
                    self._bytes_out += item[2]
                    items.append(item)
        return items

    # -- state ----------------------------------------------------------------------

    @property
    def abandoned(self) -> bool:
        """Whether ``close`` gave up on the writer."""
        return self._abandoned

    @property
    def depth(self) -> int:
        """Records waiting in the queue."""
        return self._q.qsize()

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight; never once abandoned (what ``close``
        took is spooled, not committed). Under the hand-over lock: ``abandon``
        empties both at once."""
        with self._handoff:
            return not self._abandoned and self._q.empty() and not self._inflight

    @property
    def done_seq(self) -> int:
        """Every spooled-first record up to this sequence number is dealt with."""
        return self._done_seq

    @property
    def body_bytes_in(self) -> int:
        """Bytes of captured bodies queued, since start."""
        return self._bytes_in

    @property
    def body_bytes_out(self) -> int:
        """Bytes of captured bodies taken off the queue, since start."""
        return self._bytes_out
