"""The state of one metered exchange (the addon's configuration:
``recorder.proxy.config``).

An exchange's phase (``recorder.proxy.lifecycle``) says which of its parts are
there: until its record is made (NOTED) only what the hooks read of it
(:class:`Pending`); from then on its record, meter and key mask; once ended, how it
ended (:class:`Ending`); a tapped body has its :class:`~recorder.proxy.tap.Tap`.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from mitmproxy import http

from recorder.core.attribution import bounded_tags
from recorder.core.counts import InputCounts, count_request
from recorder.core.keys import KeyMask
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord
from recorder.core.request import Reading, RequestFacts, read_request
from recorder.proxy.decoding import decoder_for
from recorder.proxy.lifecycle import LIVE, NOTED, OPEN, Phase, move
from recorder.proxy.tap import REQUEST_MAX_BYTES, Tap
from recorder.proxy.tokenizers import counter_for


class Maker(Protocol):
    """What makes an exchange's record, meter and key mask (``recorder.proxy.making``)."""

    def make(self, state: FlowState) -> None:
        """Make them from ``state.pending``, or drop the exchange (never raises)."""


@dataclass(slots=True)
class Answer:
    """A response's headers, as ``responseheaders`` read them."""

    at: float
    status: int
    request_id: str | None
    sse: bool
    # Amazon Bedrock's InvokeModel answers its metrics in headers when not streamed
    # (x-amzn-bedrock-*: token counts, invocation latency), lower-case names
    provider_metrics: dict[str, str] | None = None


@dataclass(slots=True)
class Pending:
    """What the hooks read of an exchange before its record is made: read then, so
    that another addon changing the request afterwards changes nothing recorded."""

    headers: dict[str, str]  # the wanted ones, lower-case names (making.pick_headers)
    query: object  # the URL's query (a multidict), when the path has one
    host: str
    port: int
    path: str
    wall_ms: int  # Unix milliseconds at requestheaders: the record's id and started_at
    body: bytes | None = None  # the request body, its facts read with the record
    answer: Answer | None = None  # the response's headers, put on the record with it
    # who the request is from, when read before (a WebSocket connection's responses
    # share it); the maker reads it from the headers otherwise, and leaves it here
    caller: Caller | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request is from, as its headers, URL and upstream say (never the key
    itself but in the mask): read once per request, or once per WebSocket connection
    for all of its responses."""

    upstream: str
    api_key_id: str | None
    project: str | None
    organization: str | None
    session_id: str | None
    tags: dict[str, str] | None  # copied onto each record (a record's own to replace)
    mask: KeyMask | None
    trace: tuple[str, str | None] | None  # traceparent, tracestate


# how an exchange ended that never had an upstream: a request sent to a regular-mode
# proxy itself (a base URL), which answered 502 "Request destination unknown"
NO_UPSTREAM = "no_upstream"


@dataclass(slots=True)
class Ending:
    """How an exchange ended, kept until its record is closed (``finish_delay``)."""

    at: float
    how: str  # "eof", "client_disconnect", "upstream_disconnect", NO_UPSTREAM
    transport_error: str | None
    body: bytes | None = None  # a response that was not streamed
    status: int | None = None


class FlowState:
    """One metered exchange: its phase, and what that phase holds.

    Its record, meter and key mask are made from :class:`Pending` by the
    :class:`Maker`: under ``recorder proxy`` a few hundred milliseconds after the
    request came, with those of the exchanges that came meanwhile (the code then
    runs with the CPU's caches warm, docs/performance.md), and at once whenever
    anything asks for them before that (``meter``, ``record``, ``key``).
    """

    __slots__ = (
        "_key",
        "_maker",
        "_meter",
        "_record",
        "ending",
        "endpoint",
        "flow",
        "input_counts",
        "pending",
        "phase",
        "reading",
        "t0",
        "tap",
        "trace",
    )

    def __init__(self, endpoint: str, t0: float, pending: Pending, maker: Maker) -> None:
        self.phase = NOTED
        self.endpoint = endpoint
        self.t0 = t0
        self.pending: Pending | None = pending
        self._maker = maker
        self._meter: StreamMeter | None = None
        self._record: StreamRecord | None = None
        # every credential of the request, held only to mask echoes of them; never stored
        self._key: KeyMask | None = None
        self.tap: Tap | None = None  # a tapped (streamed) body
        self.ending: Ending | None = None  # ENDED: how, until the record is closed
        self.input_counts: InputCounts | None = None  # for estimating unreported input
        # a large request body being read on a worker thread (facts, input counts)
        self.reading: Future[tuple[RequestFacts, InputCounts | None]] | None = None
        self.flow: http.HTTPFlow | None = None  # kept only for the web UI (keep_for_ui)
        # the request's W3C trace context (traceparent, tracestate), for the span observer
        self.trace: tuple[str, str | None] | None = None

    def move(self, to: Phase) -> None:
        """The next phase of its life (``lifecycle.MOVES``); raises IllegalMove."""
        self.phase = move(self.phase, to)

    @property
    def live(self) -> bool:
        """Whether the exchange is still under way (NOTED or OPEN)."""
        return self.phase in LIVE

    @property
    def made(self) -> bool:
        """Whether the record and meter exist."""
        return self._meter is not None

    def started(self, meter: StreamMeter, record: StreamRecord, key: KeyMask | None) -> None:
        """The maker made them: a NOTED exchange is OPEN now."""
        self._meter, self._record, self._key = meter, record, key
        self.pending = None
        if self.phase is NOTED:
            self.move(OPEN)

    def make(self) -> None:
        """Make the record now if it is not made yet (once: a failure is not tried
        again on every piece)."""
        if self.pending is not None and self._meter is None:
            self._maker.make(self)
            self.pending = None

    @property
    def meter(self) -> StreamMeter:
        if self._meter is None:
            self.make()
            if self._meter is None:
                raise RuntimeError("the exchange has no meter (its record could not be made)")
        return self._meter

    @property
    def record(self) -> StreamRecord:
        if self._record is None:
            self.make()
            if self._record is None:
                raise RuntimeError("the exchange has no record (it could not be made)")
        return self._record

    @property
    def key(self) -> KeyMask | None:
        if self._meter is None:
            self.make()
        return self._key

    def forget_key(self) -> None:
        """The record is settled: the credentials are not needed any more."""
        self._key = None

    def catch_up(self) -> None:
        """Meter what the tap keeps waiting (never raises)."""
        tap = self.tap
        if tap is not None and tap.pieces:
            tap.meter_waiting()


def read_request_facts(
    body: bytes, endpoint: str, reading: Reading | None = None
) -> tuple[RequestFacts, InputCounts | None]:
    """The request's facts and the counts input estimation needs (never its text);
    with ``reading``, its attribution and fingerprint too.

    With a tokenizer installed for the model (``recorder.proxy.tokenizers``), prompt
    text is counted exactly; otherwise by characters.
    """
    facts = read_request(body, reading, endpoint)
    found = counter_for(facts.model, endpoint)
    if found is None:
        return facts, count_request(body, endpoint)
    encoding, counter = found
    return facts, count_request(body, endpoint, counter=counter, encoding=encoding)


class RequestNotRead(ValueError):
    """A request body whose facts cannot be read (bad input, not a fault of ours)."""


def read_encoded_request(
    raw: bytes, encoding: str | None, endpoint: str, reading: Reading | None = None
) -> tuple[RequestFacts, InputCounts | None]:
    """``read_request_facts`` of a body as it came, content-encoded or not: decoded
    here (on a worker thread), never to more than ``REQUEST_MAX_BYTES``."""
    decoder = decoder_for(encoding)
    if decoder is not None:
        out = [decoder.decode(raw, REQUEST_MAX_BYTES + 1)]
        size = len(out[0])
        while decoder.backlog and size <= REQUEST_MAX_BYTES:
            more = decoder.decode(b"", REQUEST_MAX_BYTES + 1 - size)
            if not more:
                break
            out.append(more)
            size += len(more)
        if size > REQUEST_MAX_BYTES:
            raise RequestNotRead(
                f"the request body decodes to more than {REQUEST_MAX_BYTES >> 20} MiB"
            )
        raw = b"".join(out)
    return read_request_facts(raw, endpoint, reading)


def apply_facts(state: FlowState, facts: RequestFacts, counts: InputCounts | None) -> None:
    """The request's facts on the exchange's record."""
    state.input_counts = counts
    rec = state.record
    if facts.model is not None or rec.model is None:
        rec.model = facts.model  # (Bedrock and Google name it in the path, kept then)
    rec.include_usage = facts.include_usage
    rec.max_output_tokens = facts.max_output_tokens
    rec.requested_tier = facts.service_tier
    # attribution: the headers' (on the record since it was made) win
    rec.user_id = facts.user_id
    rec.prompt_cache_key = facts.prompt_cache_key
    if rec.session_id is None:
        rec.session_id = facts.session_id
    if facts.tags:
        rec.tags = bounded_tags(facts.tags, (rec.tags or {}).items())
    rec.request_fingerprint = facts.request_fingerprint
