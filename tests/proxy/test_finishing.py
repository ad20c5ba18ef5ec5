"""Records completed in batches (``finish_delay``), stage by stage: each record is the
record completed alone, the sink and every observer see the records in the order
their flows ended, an observer or a sink that fails on one record misses only that
one, and closing waits for hung request-body reads once for all records."""

from __future__ import annotations

import time
from concurrent.futures import Future

import orjson
import pytest
from mitmproxy.test import taddons, tflow
from prometheus_client import CollectorRegistry

from recorder.core.counts import InputCounts
from recorder.core.record import FIELDS, StreamRecord
from recorder.core.request import RequestFacts
from recorder.metrics.exporter import Metrics
from recorder.proxy import finishing
from recorder.proxy.addon import BATCH_PIECES, Recorder
from recorder.proxy.finishing import FINISH_SLICE
from recorder.proxy.observers import Done, MetricsObserver, Observer, RecordCallback
from tests.kit.flows import (
    CHAT_SSE,
    MESSAGES_SSE,
    Clock,
    make,
    make_flow,
    pieces_of,
    sse_response,
    start,
    stream_through,
    timers_of,
)

# more flows than one slice completes, so that the batch comes back for the rest
FLOWS = 2 * FINISH_SLICE + 3


class Seen(Observer):
    """Notes the records it is shown and their request ids; fails on the ``fail_on``-th."""

    def __init__(self, fail_on: int = 0) -> None:
        self.ids: list[str] = []
        self.flows: list[str] = []
        self.fail_on = fail_on

    def stream_finished(self, done: Done) -> None:
        if len(self.ids) + 1 == self.fail_on:
            self.fail_on = 0
            raise RuntimeError("observer bug")
        assert done.record.id is not None and done.record.request_id is not None
        self.ids.append(done.record.id)
        self.flows.append(done.record.request_id)


async def _flows(addon: Recorder, clock: Clock) -> list[str]:
    """FLOWS flows of three kinds (completed chats, cut Messages streams that are
    estimated, a 401), begun together and ended one after the other; their request
    ids (the upstream's, on each response) in the order they ended."""
    flows = []
    for i in range(FLOWS):
        if i % 3 == 1:
            body = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 64}
            flow = make_flow("/v1/messages", body=body)
        else:
            flow = make_flow()
        await start(addon, flow, clock)
        flows.append(flow)
    for i, flow in enumerate(flows):
        clock.now += 0.5
        flow.response = sse_response()
        flow.response.headers["x-request-id"] = f"req_{i}"
        if i % 3 == 2:
            flow.response.status_code = 401
            flow.response.headers["content-type"] = "application/json"
            flow.response.content = orjson.dumps({"error": {"message": "bad key"}})
            addon.responseheaders(flow)
            addon.response(flow)
            continue
        addon.responseheaders(flow)
        if i % 3 == 1:
            stream_through(flow, pieces_of(MESSAGES_SSE[: 300 + 40 * i], 50), clock)
            flow.error = tflow.terr("Client disconnected.")
            addon.error(flow)
        else:
            stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
            addon.response(flow)
    return [f"req_{i}" for i in range(FLOWS)]


def _figures(rec: StreamRecord) -> dict[str, object]:
    out = {name: getattr(rec, name) for name in FIELDS if name not in ("id", "started_at")}
    out["gaps"] = rec.gaps
    return out


async def _run(finish_delay: float, *observers: Observer) -> tuple[list[StreamRecord], Recorder]:
    addon, sink, clock = make(finish_delay=finish_delay)
    order = Seen()
    for observer in (order, *observers):
        addon.add_observer(observer)
    with taddons.context(addon):
        ended = await _flows(addon, clock)
        if finish_delay:
            assert sink.records == []  # they wait for the batch
            timers_of(addon).advance(finish_delay + 0.2)
        assert len(sink.records) == FLOWS
    addon.done()
    # completed in the order the flows ended, and so submitted
    assert order.flows == ended
    assert order.ids == [r.id for r in sink.records]
    return sink.records, addon


async def test_a_batch_completes_each_record_as_alone_and_in_order() -> None:
    alone, _ = await _run(0.0)
    seen = [Seen(), Seen()]
    batched, addon = await _run(0.05, *seen)
    assert addon.health.internal_errors == 0
    assert [_figures(r) for r in batched] == [_figures(r) for r in alone]
    assert {r.output_source for r in batched} >= {"reported", "estimated"}
    for observer in seen:  # every observer saw every record, in the sink's order
        assert observer.ids == [r.id for r in batched]


async def test_an_observer_that_fails_on_a_record_misses_only_that_one() -> None:
    failing, other = Seen(fail_on=3), Seen()
    records, addon = await _run(0.05, failing, other)
    assert len(records) == FLOWS and addon.health.internal_errors == 1
    ids = [r.id for r in records]
    assert other.ids == ids
    assert failing.ids == ids[:2] + ids[3:]


async def test_a_sink_that_fails_on_a_record_loses_only_that_one() -> None:
    addon, sink, clock = make(finish_delay=0.05)
    order = Seen()
    addon.add_observer(order)
    submit, calls = sink.submit, []

    def failing_once(rec: StreamRecord) -> None:
        calls.append(rec.id)
        if len(calls) == 2:
            raise RuntimeError("sink bug")
        submit(rec)

    sink.submit = failing_once  # type: ignore[method-assign]
    with taddons.context(addon):
        await _flows(addon, clock)
        timers_of(addon).advance(0.25)
    addon.done()
    assert addon.health.internal_errors == 1
    assert addon.health.records == FLOWS - 1  # submitted: what the sink took
    assert len(calls) == FLOWS  # the batch went on past the failure
    assert [r.id for r in sink.records] == calls[:1] + calls[2:] == order.ids[:1] + order.ids[2:]


class Hung(Future[tuple[RequestFacts, InputCounts | None]]):
    """A request body read that never ends: waits out the timeout it is given."""

    def __init__(self, waits: list[float | None]) -> None:
        super().__init__()
        self.waits = waits

    def result(self, timeout: float | None = None) -> tuple[RequestFacts, InputCounts | None]:
        self.waits.append(timeout)
        time.sleep(timeout or 0.0)
        raise TimeoutError


async def test_closing_waits_for_hung_body_reads_once_for_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(finishing, "DONE_READ_WAIT_S", 0.2)
    addon, sink, clock = make(finish_delay=60.0)
    prompt = [{"role": "user", "content": "x" * 100_000}]  # read on a worker thread
    body = {"model": "gpt-4o", "stream": True, "messages": prompt}
    waits: list[float | None] = []
    with taddons.context(addon):
        for _ in range(3):
            flow = make_flow(body=body)
            addon.requestheaders(flow)
            addon.request(flow)
            state = addon.streams.get(flow.id)
            assert state is not None
            state.reading = Hung(waits)
            flow.response = sse_response()
            addon.responseheaders(flow)
            stream_through(flow, [CHAT_SSE], clock)
            addon.response(flow)  # waits for the batch (a minute away)
        assert sink.records == []
        addon.close()  # shutting down: three records whose bodies never finish reading
    assert len(sink.records) == 3  # finished without the request's facts, not lost
    assert len(waits) == 3 and sum(w or 0.0 for w in waits) <= 0.2 + 0.05


async def test_pieces_after_the_end_change_nothing_counted() -> None:
    """Shutdown closes a stream still flowing; what it sends after that (more than a
    batch of pieces) meters nothing (a finished meter takes no more): the metrics,
    which hold the record's interval arrays until the next scrape, count exactly
    those it had when it was completed."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    addon, _sink, clock = make()
    addon.add_observer(MetricsObserver(metrics))
    at_completion: list[int] = []
    meters: list[object] = []

    def note(rec: StreamRecord, meter: object) -> None:
        at_completion.append(len(meter.output_intervals))  # type: ignore[attr-defined]
        meters.append(meter)

    addon.add_observer(RecordCallback(note))
    chunk = (
        b'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o",'
        b'"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    )
    with taddons.context(addon):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response()
        addon.responseheaders(flow)
        assert flow.response.stream is not None and callable(flow.response.stream)
        for _ in range(5):
            clock.now += 0.02
            flow.response.stream(chunk)
        addon.done()  # shutdown: the open stream is closed and its record completed
        for _ in range(3 * BATCH_PIECES):  # the upstream goes on
            clock.now += 0.02
            assert flow.response.stream(chunk) == chunk  # the client still gets every byte
    assert at_completion == [4]
    assert len(meters[0].output_intervals) == 4  # type: ignore[attr-defined]
    count = registry.get_sample_value(
        "gen_ai_client_operation_time_per_output_chunk_seconds_count",
        {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"},
    )
    assert count == 4
