"""What the addon holds for one tapped flow (its configuration:
``recorder.proxy.config``)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from mitmproxy import http

from recorder.core.captured import CapturedBody
from recorder.core.counts import InputCounts, count_request
from recorder.core.keys import KeyMask
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord
from recorder.core.request import RequestFacts, read_request
from recorder.proxy.decoding import Decoder
from recorder.proxy.tokenizers import counter_for


class FlowState:
    """What the addon holds for one tapped flow.

    Its record, meter and key mask are made from what ``requestheaders`` noted
    (``pending``), by ``begin``: under ``recorder proxy`` a few hundred milliseconds
    later, for every flow that started meanwhile, one after the other (the code then
    runs with the CPU's caches warm, docs/performance.md), and at once whenever
    anything asks for them before that (``meter``, ``record``, ``key``).
    """

    __slots__ = (
        "_key",
        "_meter",
        "_record",
        "answer",
        "begin",
        "body",
        "broken",
        "buffered",
        "capture",
        "decoder",
        "end",
        "ended_at",
        "endpoint",
        "flow",
        "input_counts",
        "pending",
        "pieces",
        "reading",
        "stamps",
        "streaming",
        "t0",
        "trace",
        "unmetered",
    )

    def __init__(
        self,
        endpoint: str,
        t0: float,
        pending: Pending | None = None,
        begin: Callable[[FlowState], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.t0 = t0
        # what requestheaders read of the request, until ``begin`` makes the record
        self.pending = pending
        self.begin = begin
        self._meter: StreamMeter | None = None
        self._record: StreamRecord | None = None
        # every credential of the request, held only to mask echoes of them; never stored
        self._key: KeyMask | None = None
        # before ``begin``: the request's body (its facts are read with the record)
        # and the response's headers (time, status, request id, whether SSE)
        self.body: bytes | None = None
        self.answer: tuple[float, int, str | None, bool] | None = None
        self.streaming = False
        self.decoder: Decoder | None = None
        self.broken = False  # the tap gave up on this stream (it still forwards)
        self.ended_at: float | None = None
        # with finish_delay, how the flow ended, for the batch that closes its record:
        # (at, ending, transport error, a non-streamed body, its status)
        self.end: tuple[float, str, str | None, bytes | None, int | None] | None = None
        self.input_counts: InputCounts | None = None  # for estimating unreported input
        self.capture: CapturedBody | None = None  # with capture_bodies, a tapped SSE body
        self.unmetered: str | None = None  # why the stream's events could not be metered
        # a large request body being read on a worker thread (facts, input counts)
        self.reading: Future[tuple[RequestFacts, InputCounts | None]] | None = None
        # pieces the tap has passed on but not metered yet, with their arrival times
        self.pieces: list[bytes] = []
        self.stamps: list[float] = []
        self.buffered = 0  # bytes in self.pieces
        self.flow: http.HTTPFlow | None = None  # kept only for the web UI (keep_for_ui)
        # the request's W3C trace context (traceparent, tracestate), for the span observer
        self.trace: tuple[str, str | None] | None = None

    def started(self, meter: StreamMeter, record: StreamRecord, key: KeyMask | None) -> None:
        """``begin`` made them."""
        self._meter, self._record, self._key = meter, record, key
        self.pending = self.begin = None

    @property
    def begun(self) -> bool:
        """Whether ``begin`` has run (or failed: then the flow is not recorded)."""
        return self.begin is None

    @property
    def made(self) -> bool:
        """Whether the record and meter exist."""
        return self._meter is not None

    def begin_now(self) -> None:
        begin = self.begin
        if begin is not None:
            self.begin = None  # once: a failure is not tried again on every piece
            begin(self)

    @property
    def meter(self) -> StreamMeter:
        if self.begin is not None:
            self.begin_now()
        meter = self._meter
        if meter is None:
            raise RuntimeError("the flow has no meter (its record could not be made)")
        return meter

    @property
    def record(self) -> StreamRecord:
        if self.begin is not None:
            self.begin_now()
        record = self._record
        if record is None:
            raise RuntimeError("the flow has no record (it could not be made)")
        return record

    @property
    def key(self) -> KeyMask | None:
        if self.begin is not None:
            self.begin_now()
        return self._key

    @key.setter
    def key(self, value: KeyMask | None) -> None:
        self._key = value


@dataclass(slots=True)
class Pending:
    """What ``requestheaders`` reads of a request for its record (read there, so that
    another addon changing the request afterwards changes nothing recorded)."""

    headers: dict[str, str]  # the wanted ones, lower-case names (addon._pick_headers)
    query: object  # the URL's query (a multidict), when the path has one
    host: str
    port: int
    path: str
    wall_ms: int  # Unix milliseconds at requestheaders: the record's id and started_at


def _read_request(body: bytes, endpoint: str) -> tuple[RequestFacts, InputCounts | None]:
    """The request's facts and the counts input estimation needs (never its text).

    With a tokenizer installed for the model (``recorder.proxy.tokenizers``), prompt
    text is counted exactly; otherwise by characters.
    """
    facts = read_request(body)
    found = counter_for(facts.model, endpoint)
    if found is None:
        return facts, count_request(body, endpoint)
    encoding, counter = found
    return facts, count_request(body, endpoint, counter=counter, encoding=encoding)


def _apply_facts(state: FlowState, facts: RequestFacts, counts: InputCounts | None) -> None:
    state.input_counts = counts
    rec = state.record
    rec.model = facts.model
    rec.include_usage = facts.include_usage
    rec.max_output_tokens = facts.max_output_tokens
    rec.requested_tier = facts.service_tier
