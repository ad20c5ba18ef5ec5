"""The finishing pipeline: from a stream's end to its record in the sink.

A flow that ended (``_end``) is closed: its meter meters what is left and
finishes the record (``_close``). With ``finish_delay`` that too waits, in
``_finishing``, until a timer closes and completes it with the others that ended
meanwhile, a few per loop callback (``FINISH_SLICE``), so that mitmproxy's
``response`` hook only notes the end. A record whose request body is still being
read on a worker thread waits for it (``_deferred``); then the record is completed:
usage, cost, health, the observers (``recorder.proxy.observers``), then the sink;
a batch's records stage by stage (``_complete_many``).
``Recorder`` inherits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from recorder.core.billing import complete_usage
from recorder.core.captured import CapturedRecord
from recorder.core.estimate import Estimator
from recorder.core.keys import scrub_key
from recorder.core.record import StreamRecord
from recorder.core.request import read_error_body
from recorder.metrics.health import Health
from recorder.proxy.config import RecorderConfig
from recorder.proxy.observers import Done
from recorder.proxy.state import FlowState, _apply_facts
from recorder.proxy.unpriced import WARNINGS as UNPRICED
from recorder.store.sinks import Sink

# At shutdown, how long ``done`` waits for request bodies still being read, in all.
DONE_READ_WAIT_S = 1.0


class Finishing:
    """The finishing pipeline of ``Recorder`` (a mixin: the state is the Recorder's)."""

    config: RecorderConfig
    health: Health
    sink: Sink
    estimator: Estimator
    _closed: bool
    _read_deadline: float  # once closed: when waiting for request bodies ends
    _deferred: dict[int, tuple[FlowState, StreamRecord]]
    # with finish_delay: (state, its closed record), or (state, None) for a flow
    # that ``_end`` left to the batch to close (``state.end``)
    _finishing: list[tuple[FlowState, StreamRecord | None]]
    _finish_timer: asyncio.TimerHandle | None
    _sweep_timer: asyncio.Handle | None
    _start_timer: asyncio.TimerHandle | None
    _starting: list[FlowState]
    _finished_observers: list[Callable[[Done], None]]

    _flows: dict[str, FlowState]
    _readers: ThreadPoolExecutor | None
    _clock: Callable[[], float]
    cut_at_shutdown: int
    close_sink_on_done: bool

    def _internal_error(self, where: str) -> None:
        raise NotImplementedError

    def _close_meter(
        self, state: FlowState, now: float, ending: str, transport_error: str | None
    ) -> StreamRecord:
        raise NotImplementedError

    def _end(
        self,
        state: FlowState,
        at: float,
        ending: str,
        transport_error: str | None,
        body: bytes | None = None,
        status: int | None = None,
    ) -> None:
        """The flow ended (``response``, ``error``; it has left ``_flows``). With
        ``finish_delay`` its record is closed later, in the batch that completes it:
        the meter's last pieces and ``finish`` then run with the others'; ``body``
        and ``status`` are a non-streamed response's, read when it is closed."""
        self.health.in_flight -= 1
        if self.config.finish_delay > 0 and not self._closed:
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                state.end = (at, ending, transport_error, body, status)
                self._finishing.append((state, None))
                if self._finish_timer is None:
                    self._finish_timer = loop.call_later(
                        self.config.finish_delay, self._complete_some
                    )
                return
        self._finish(state, self._close(state, at, ending, transport_error, body, status))

    def _close(
        self,
        state: FlowState,
        at: float,
        ending: str,
        transport_error: str | None,
        body: bytes | None,
        status: int | None,
    ) -> StreamRecord:
        """The record of a flow that ended, its meter closed (``_close_meter``)."""
        if body is not None and status is not None:
            try:
                if 200 <= status < 300:
                    state.meter.read_body(body, at)
                else:
                    rec = state.record
                    rec.error_type, rec.error_code, rec.error_message = read_error_body(body)
            except Exception:
                self._internal_error("response")
        return self._close_meter(state, at, ending, transport_error)

    def _finish(self, state: FlowState, rec: StreamRecord) -> None:
        """A closed record: once settled, completed now, or with ``finish_delay``."""
        if not self._settle(state, rec):
            return
        delay = self.config.finish_delay
        if delay > 0 and not self._closed:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not None:
                self._finishing.append((state, rec))
                if self._finish_timer is None:
                    self._finish_timer = running.call_later(delay, self._complete_some)
                return
        self._complete(state, rec)

    def _settle(self, state: FlowState, rec: StreamRecord) -> bool:
        """The request's facts on the record, and echoes of its keys masked; False if
        its body is still being read (the record is finished once it is)."""
        reading = state.reading
        if reading is not None:
            if not reading.done():
                try:
                    loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
                except RuntimeError:
                    loop = None
                if loop is not None and not self._closed:
                    # finish once the body is read, back on the loop
                    self._deferred[id(state)] = (state, rec)
                    reading.add_done_callback(
                        lambda _: loop.call_soon_threadsafe(self._finish_deferred, id(state))
                    )
                    return False
                # no loop, or shutting down: wait a little; once closed, what is left
                # of one bound for all the records (``close``), not a bound each
                wait = max(0.0, self._read_deadline - time.monotonic()) if self._closed else 10
                with contextlib.suppress(Exception):
                    reading.result(timeout=wait)
            state.reading = None
            if reading.done():
                try:
                    _apply_facts(state, *reading.result())
                except Exception:
                    self._internal_error("reading the request")
        # an upstream may echo a key of the request (or another one) in an error
        mask = state.key
        rec.error_message = scrub_key(rec.error_message, mask)
        rec.transport_error = scrub_key(rec.transport_error, mask)
        rec.recorder_error = scrub_key(rec.recorder_error, mask)
        rec.error_type = scrub_key(rec.error_type, mask)
        rec.error_code = scrub_key(rec.error_code, mask)
        state.key = None
        return True

    def _complete_entry(self, state: FlowState, rec: StreamRecord | None) -> None:
        """Close (if ``_end`` left that to the batch), settle, complete."""
        rec = self._ready(state, rec)
        if rec is not None:
            self._complete(state, rec)

    def _ready(self, state: FlowState, rec: StreamRecord | None) -> StreamRecord | None:
        """The closed and settled record of a waiting entry (closed here if ``_end``
        left that to the batch); None if it cannot be made, or waits for its body."""
        if rec is None:
            end = state.end
            assert end is not None
            state.end = None
            try:
                rec = self._close(state, *end)
            except Exception:  # its record could not be made: the others still are
                self._internal_error("response")
                return None
            if not self._settle(state, rec):
                return None
        return rec

    # Records completed per loop callback: each slice is one short block, the loop
    # serves the connections between two slices.
    FINISH_SLICE = 4

    def _complete_some(self) -> None:
        """Complete the oldest waiting records; come back for the rest."""
        self._finish_timer = None
        batch = self._finishing[: self.FINISH_SLICE]
        del self._finishing[: self.FINISH_SLICE]
        ready = []
        for state, rec in batch:
            closed = self._ready(state, rec)
            if closed is not None:
                ready.append((state, closed))
        self._complete_many(ready)
        if self._finishing:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._complete_all()
                return
            self._finish_timer = loop.call_later(0, self._complete_some)

    def _complete_all(self) -> None:
        """Complete every waiting record now (shutdown)."""
        if self._finish_timer is not None:
            with contextlib.suppress(Exception):  # the loop may be gone already
                self._finish_timer.cancel()
            self._finish_timer = None
        while self._finishing:
            state, rec = self._finishing.pop(0)
            self._complete_entry(state, rec)

    def _complete(self, state: FlowState, rec: StreamRecord) -> None:
        """Usage, cost, health, metrics; then the record goes to the sink."""
        self._complete_many([(state, rec)])

    def _complete_many(self, entries: list[tuple[FlowState, StreamRecord]]) -> None:
        """``_complete`` for each entry, in order, stage by stage: each stage's code
        runs for every record of the batch before the next stage's (warm in the
        CPU's caches after the first record, which between two of mitmproxy's
        callbacks it is not). Each record sees the stages in the same order, and
        each stage sees the records in the entries' order, as one by one."""
        prices, estimator = self.config.prices, self.estimator
        for state, rec in entries:
            try:
                complete_usage(
                    rec, state.meter.interpreter.obs, state.input_counts, prices, estimator
                )
            except Exception:
                self._internal_error("completing usage")
        health = self.health
        for state, rec in entries:
            try:
                UNPRICED.check(rec)  # one warning line per unpriced model per process
            except Exception:
                self._internal_error("unpriced warning")
            health.records += 1
            health.parse_issues += rec.parse_issues
            if state.capture is not None and isinstance(rec, CapturedRecord):
                rec.body = state.capture  # packed (compressed) by the sink, off the loop
        observers = self._finished_observers
        if observers:
            dones = []
            for state, rec in entries:
                trace = state.trace or (None, None)
                dones.append(Done(rec, state.meter, state.flow, state.capture, trace[0], trace[1]))
                state.flow = None  # before the sink: its writer may pack (and let go of) the body
            for observe in observers:
                for done in dones:
                    try:
                        observe(done)
                    except Exception:
                        self._internal_error("observer")
        submit = self.sink.submit
        for _, rec in entries:
            # a sink takes every record (it spools what it cannot write); one that
            # raises loses that record only, not the rest of the batch
            try:
                submit(rec)
            except Exception:
                # not handed over after all: records_submitted counts what the sink took
                self.health.records -= 1
                self._internal_error("sink")

    def _finish_deferred(self, key: int) -> None:
        entry = self._deferred.pop(key, None)
        if entry is not None:  # else done() finished it already
            self._finish(*entry)

    def done(self) -> None:
        """Shutdown: finish what is still open, then (unless the runner does) close
        the sink."""
        try:
            now = self._clock()
            self.cut_at_shutdown += len(self._flows)
            for flow_id in list(self._flows):
                state = self._flows.pop(flow_id)
                self.health.in_flight -= 1
                try:
                    rec = self._close_meter(state, now, "client_disconnect", "proxy shut down")
                except Exception:  # its record could not be made: the others still are
                    self._internal_error("done")
                    continue
                self._finish(state, rec)
            # the ended flows the batch was to close: closed now (a body still being
            # read joins the others waited for below)
            waiting, self._finishing = self._finishing, []
            for state, closed in waiting:
                if closed is not None:
                    self._finishing.append((state, closed))
                    continue
                end = state.end
                assert end is not None
                state.end = None
                try:
                    rec = self._close(state, *end)
                except Exception:
                    self._internal_error("done")
                    continue
                if self._settle(state, rec):
                    self._finishing.append((state, rec))
            # shutting down: wait for their bodies, a bounded time for all of them
            # (the loop, and so every client, waits meanwhile)
            deadline = time.monotonic() + DONE_READ_WAIT_S
            for key in list(self._deferred):
                state, rec = self._deferred.pop(key)
                if state.reading is not None:
                    with contextlib.suppress(Exception):
                        state.reading.result(timeout=max(0.0, deadline - time.monotonic()))
                    if not state.reading.done():
                        state.reading = None  # finish without its facts rather than lose it
                self._finish(state, rec)
            self._complete_all()
        except Exception:
            self._internal_error("done")
        if self.close_sink_on_done:
            self.close()

    def close(self) -> None:
        """Flush and close the sink (once)."""
        if self._closed:
            return
        self._closed = True
        self._read_deadline = time.monotonic() + DONE_READ_WAIT_S
        for timer in (self._sweep_timer, self._start_timer):
            if timer is not None:
                with contextlib.suppress(Exception):  # the loop may be gone already
                    timer.cancel()
        self._sweep_timer = self._start_timer = None
        # flows whose records were still to be made: made when they end (done)
        self._starting.clear()
        try:
            self._complete_all()
        except Exception:
            self._internal_error("close")
        if self._readers is not None:
            self._readers.shutdown(wait=False, cancel_futures=True)
        try:
            self.sink.close()
        except Exception:
            self._internal_error("sink close")
