"""The finishing pipeline: from an exchange's end to its record in the sink.

An exchange that ended (ENDED, ``recorder.proxy.lifecycle``) is closed: its meter
meters what is left and finishes the record (CLOSED). A record whose request body
is still being read on a worker thread waits for it (DEFERRED); then the request's
facts go on the record and echoes of its keys are masked (SETTLED); then it is
completed: usage, cost, health, its place in a retry chain (``retry_of``,
``attempt``: ``recorder.core.retries``, resolved in this process), the observers
(``recorder.proxy.observers``), the sink (COMPLETED).

With ``finish_delay`` the hook that ended the exchange only notes how it ended:
the exchanges that ended meanwhile are closed and completed a few per loop
callback (``FINISH_SLICE``), and a slice's records stage by stage (usage and cost
of each, then each observer for each, then the sink, every stage in the order the
exchanges ended), so that each stage's code is warm after its first record.

At shutdown (``drain``) everything that waits is finished at once; request bodies
still being read are waited for, ``DONE_READ_WAIT_S`` for all of them together.
"""

from __future__ import annotations

import contextlib
import time

from recorder.core.billing import complete_usage
from recorder.core.captured import CapturedBody, CapturedRecord
from recorder.core.estimate import Estimator
from recorder.core.keys import scrub_key
from recorder.core.record import StreamRecord, Transport, ending_outcome
from recorder.core.request import read_error_body
from recorder.core.retries import RetryChains, did_not_complete
from recorder.core.sink import Sink
from recorder.metrics.health import Health
from recorder.proxy.config import RecorderConfig
from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.lifecycle import (
    CLOSED,
    COMPLETED,
    DEFERRED,
    DROPPED,
    ENDED,
    SETTLED,
    IllegalMove,
)
from recorder.proxy.observers import Done, Observers
from recorder.proxy.scheduling import Scheduler, Sliced
from recorder.proxy.state import NO_UPSTREAM, Ending, FlowState, RequestNotRead, apply_facts
from recorder.proxy.tap import CAPTURED, STREAMED, BodyKind
from recorder.proxy.unpriced import WARNINGS as UNPRICED

# At shutdown, how long ``drain`` waits for request bodies still being read, in all.
DONE_READ_WAIT_S = 1.0
# Records completed per loop callback: each slice is one short block, the loop
# serves the connections between two slices.
FINISH_SLICE = 4


class Finishing:
    """Closes, settles and completes the records of ended exchanges."""

    def __init__(
        self,
        config: RecorderConfig,
        sink: Sink,
        health: Health,
        errors: InternalErrors,
        observers: Observers,
        estimator: Estimator,
        scheduler: Scheduler,
    ) -> None:
        self.config = config
        self.sink = sink
        self._health = health
        self._errors = errors
        self._observers = observers
        self._estimator = estimator
        self._scheduler = scheduler
        # with finish_delay: ENDED and SETTLED exchanges, in the order they came
        self._queue: Sliced[FlowState] = Sliced(
            scheduler, config.finish_delay, FINISH_SLICE, self._finish_slice
        )
        self._deferred: dict[int, FlowState] = {}  # DEFERRED, by id()
        self._draining = False  # shutting down: nothing is put off any more
        self._read_deadline = 0.0  # once draining: when waiting for bodies ends
        self._closed = False
        # the attempts that did not complete, while a retry of theirs may come
        self.chains = RetryChains(config.retry_window)

    @property
    def waiting(self) -> int:
        """Exchanges ended but not completed yet."""
        return len(self._queue) + len(self._deferred)

    # -- the steps, each named after the phase it produces ---------------------

    def end(self, state: FlowState, ending: Ending) -> None:
        """The exchange is over (``response``, ``error``, shutdown); it has left the
        registry of open streams. Closed now, or in the next slice."""
        state.move(ENDED)
        state.ending = ending
        if self.config.finish_delay > 0 and not self._draining:
            self._queue.add(state)
            return
        if self._close(state) is not None and self._settle_or_defer(state):
            self._complete([state])

    def _close(self, state: FlowState) -> StreamRecord | None:
        """ENDED -> CLOSED: the meter meters what is left and finishes the record;
        None if the record could not be made (the exchange is DROPPED)."""
        ending = state.ending
        if ending is None:
            raise RuntimeError("an ended exchange without its ending")
        state.ending = None
        state.make()  # if it was not made yet; a failure drops the exchange
        if state.phase is DROPPED:
            return None
        state.move(CLOSED)
        tap = state.tap
        body, status = ending.body, ending.status
        if tap is not None:
            tap.meter_waiting(final=True)
            body, status = tap.json_body, state.record.http_status
        if body is not None and status is not None:
            try:
                if 200 <= status < 300:
                    state.meter.read_body(body, ending.at)
                else:
                    rec = state.record
                    rec.error_type, rec.error_code, rec.error_message = read_error_body(body)
            except Exception:
                self._errors("response")
        return self._finish_meter(state, ending)

    def _finish_meter(self, state: FlowState, ending: Ending) -> StreamRecord:
        """The finished record; if the meter itself fails, still a record, marked."""
        tap = state.tap
        if tap is not None:
            tap.end_capture(ending.at, ending.how)
            if tap.kind is not None and tap.unmetered is None:
                rec = state.record
                rec.streamed = tap.kind in STREAMED  # what the body was
                rec.transport = _TRANSPORTS[tap.kind]
            elif state.record.streamed is False and tap.kind is not BodyKind.ARRAY:
                state.record.transport = "json"
        try:
            how = "upstream_disconnect" if ending.how == NO_UPSTREAM else ending.how
            rec = state.meter.finish(ending.at, ending=how, transport_error=ending.transport_error)
            if ending.how == NO_UPSTREAM:
                _no_upstream(rec)
            if tap is not None:
                rec.content_mismatch = tap.mismatch
                if tap.unmetered is not None:
                    # the figures of the events are missing, not zero: say so on the record
                    rec.recorder_error = f"events not metered: {tap.unmetered}"
            return rec
        except Exception as e:
            self._errors("finishing a record")
            rec = state.record
            rec.outcome = ending_outcome(ending.how)
            rec.interrupted = True
            rec.transport_error = ending.transport_error
            rec.duration_ms = round((ending.at - state.t0) * 1000.0, 3)
            rec.recorder_error = f"{type(e).__name__}: {e}"
            return rec

    def _settle_or_defer(self, state: FlowState) -> bool:
        """CLOSED -> SETTLED (True), or DEFERRED while its request body is read."""
        reading = state.reading
        if reading is not None and not reading.done():
            if not self._draining:
                self._defer(state)
                return False
            # shutting down: what is left of one bound for all the records
            with contextlib.suppress(Exception):
                reading.result(timeout=max(0.0, self._read_deadline - time.monotonic()))
        self._settle(state)
        return True

    def _defer(self, state: FlowState) -> None:
        """CLOSED -> DEFERRED: finished once the body is read, back on the loop."""
        state.move(DEFERRED)
        reading = state.reading
        assert reading is not None
        key = id(state)
        self._deferred[key] = state
        post = self._scheduler.poster()
        reading.add_done_callback(lambda _: post(lambda: self._body_read(key)))

    def _body_read(self, key: int) -> None:
        state = self._deferred.pop(key, None)
        if state is None:  # drain finished it already
            return
        try:
            self._settle(state)
            if self.config.finish_delay > 0 and not self._draining:
                self._queue.add(state)
            else:
                self._complete([state])
        except Exception:
            self._errors("reading the request")

    def _settle(self, state: FlowState) -> None:
        """-> SETTLED: the request's facts on the record, and echoes of its keys
        masked (an upstream may echo a key of the request, or another one)."""
        state.move(SETTLED)
        reading, state.reading = state.reading, None
        # (a read that shutdown called off before it began leaves no facts)
        if reading is not None and reading.done() and not reading.cancelled():
            try:
                apply_facts(state, *reading.result())
            except RequestNotRead as e:
                rec = state.record
                said = f"request not read: {e}"
                rec.recorder_error = f"{rec.recorder_error}; {said}" if rec.recorder_error else said
            except Exception:
                self._errors("reading the request")
        rec, mask = state.record, state.key
        rec.error_message = scrub_key(rec.error_message, mask)
        rec.transport_error = scrub_key(rec.transport_error, mask)
        rec.recorder_error = scrub_key(rec.recorder_error, mask)
        rec.error_type = scrub_key(rec.error_type, mask)
        rec.error_code = scrub_key(rec.error_code, mask)
        state.forget_key()

    def _finish_slice(self, batch: list[FlowState]) -> None:
        """A slice of the queue: each closed and settled if need be, then completed
        together."""
        ready = []
        for state in batch:
            try:
                if state.phase is ENDED and (
                    self._close(state) is None or not self._settle_or_defer(state)
                ):
                    continue
            except Exception:  # its record could not be made: the others still are
                self._errors("response")
                continue
            ready.append(state)
        self._complete(ready)

    def _complete(self, states: list[FlowState]) -> None:
        """SETTLED -> COMPLETED, each in order, stage by stage: each stage's code runs
        for every record of the batch before the next stage's (warm in the CPU's
        caches after the first record, which between two of mitmproxy's callbacks
        it is not). Each record sees the stages in the same order, and each stage
        sees the records in order, as one by one."""
        moved = []
        for state in states:
            try:
                state.move(COMPLETED)
            except IllegalMove:  # a bug of ours: that record only is lost, counted
                self._errors("completing a record")
            else:
                moved.append(state)
        states = moved
        self._cost(states)
        self._chain(states)
        records = [state.record for state in states]
        if self._observers.wants_finishes:
            dones = [self._done(state) for state in states]
            self._observers.finished(dones)
        self._submit(records)

    def _cost(self, states: list[FlowState]) -> None:
        prices, estimator, health = self.config.prices, self._estimator, self._health
        for state in states:
            rec = state.record
            try:
                complete_usage(
                    rec, state.meter.interpreter.obs, state.input_counts, prices, estimator
                )
            except Exception:
                self._errors("completing usage")
            try:
                UNPRICED.check(rec)  # one warning line per unpriced model per process
            except Exception:
                self._errors("unpriced warning")
            health.records += 1
            health.parse_issues += rec.parse_issues
            capture = _capture_of(state)
            if capture is not None and isinstance(rec, CapturedRecord):
                rec.body = capture  # packed (compressed) by the sink, off the loop

    def _chain(self, states: list[FlowState]) -> None:
        """Each record's place in a retry chain, in the order they ended."""
        link = self.chains.link
        for state in states:
            rec = state.record
            try:
                ended = state.t0 + (rec.duration_ms or 0.0) / 1000.0
                # by key and model: Bedrock and Google name the model in the path,
                # which the fingerprint (of the body) does not see
                rec.retry_of, rec.attempt = link(
                    f"{rec.api_key_id}\0{rec.model}",
                    rec.request_fingerprint,
                    rec.id or "",
                    started=state.t0,
                    ended=ended,
                    complete=not did_not_complete(rec.outcome, rec.http_status),
                )
            except Exception:
                self._errors("retry chain")

    @staticmethod
    def _done(state: FlowState) -> Done:
        trace = state.trace or (None, None)
        capture = _capture_of(state)
        done = Done(state.record, state.meter, state.flow, capture, trace[0], trace[1])
        state.flow = None  # before the sink: its writer may pack (and let go of) the body
        return done

    def _submit(self, records: list[StreamRecord]) -> None:
        submit = self.sink.submit
        for rec in records:
            # a sink takes every record (it spools what it cannot write); one that
            # raises loses that record only, not the rest of the batch
            try:
                submit(rec)
            except Exception:
                # not handed over after all: records_submitted counts what the sink took
                self._health.records -= 1
                self._errors("sink")

    # -- shutdown ---------------------------------------------------------------

    def drain(self) -> None:
        """Finish everything that waits, now (shutdown); bodies still being read are
        waited for a bounded time in all, then finished without their facts."""
        if not self._draining:
            self._draining = True
            self._read_deadline = time.monotonic() + DONE_READ_WAIT_S
        self._finish_slice(self._queue.take_all())
        for key in list(self._deferred):
            state = self._deferred.pop(key)
            reading = state.reading
            if reading is not None:
                with contextlib.suppress(Exception):
                    reading.result(timeout=max(0.0, self._read_deadline - time.monotonic()))
                if not reading.done():
                    state.reading = None  # finish without its facts rather than lose it
            try:
                self._settle(state)
                self._complete([state])
            except Exception:
                self._errors("done")

    def close(self) -> None:
        """Finish what waits, then flush and close the sink (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.drain()
        except Exception:
            self._errors("close")
        try:
            self.sink.close()
        except Exception:
            self._errors("sink close")


_TRANSPORTS: dict[BodyKind, Transport] = {
    BodyKind.SSE: "sse",
    BodyKind.ARRAY: "json-array",
    BodyKind.JSON: "json",
    BodyKind.EVENTSTREAM: "eventstream",
}


def _capture_of(state: FlowState) -> CapturedBody | None:
    """The event stream kept of an exchange, if any (a JSON body is not kept)."""
    tap = state.tap
    if tap is None or tap.kind not in CAPTURED:
        return None
    return tap.capture


def _no_upstream(rec: StreamRecord) -> None:
    """A request sent to the proxy itself (a regular-mode proxy used as a base URL):
    no upstream was asked; what the client got is mitmproxy's 502."""
    rec.outcome = "http_error"
    rec.interrupted = False
    rec.http_status = 502
    rec.upstream = None
    rec.error_type = "no_upstream"
    rec.error_message = (
        "the request was sent to the proxy itself (502 Request destination unknown):"
        " a base URL needs reverse mode, --mode reverse:https://api.openai.com@8081"
    )
    rec.transport_error = None
    rec.streamed = False  # (mitmproxy's page, one answer: no output stream to stall)
    rec.transport = "json"
    rec.stalls, rec.stall_ms, rec.max_output_gap_ms = 0, 0.0, None
    rec.gaps = [g for g in rec.gaps if g.kind != "stall"]
