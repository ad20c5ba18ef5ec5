"""Records made later (``start_delay``): a flow's record, meter and key mask are made
from what the hooks noted, in a batch, or sooner when something needs them. Whenever
they are made, the record is the one made at once; what requestheaders read is what
is recorded, whatever changes the request afterwards; a record that cannot be made
costs its flow's record and nothing else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from recorder.core.keys import fingerprint
from recorder.core.record import FIELDS, StreamRecord
from recorder.proxy import addon as addon_module
from recorder.proxy import making
from recorder.proxy.addon import INLINE_PARSE_LIMIT, Recorder
from recorder.proxy.observers import Observer
from tests.kit.flows import (
    CHAT_SSE,
    MESSAGES_SSE,
    SECRET,
    Clock,
    make,
    make_flow,
    pieces_of,
    sse_response,
    start,
    stream_through,
    timers_of,
)

# a gateway's key, of no provider's shape: only the request's key mask can find it
KEY = "gw7STARTSECRET00000001abcdef"
KEY_HEADERS = [
    (b"authorization", f"Bearer {KEY}".encode()),
    (b"openai-project", b"proj_1"),
    (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
]

Run = Callable[[Recorder, Clock, float], Awaitable[None]]


async def _pause(addon: Recorder, wait: float) -> None:
    if wait:
        # the loop runs (the test's clock stands still): a batch of starts may come now
        timers_of(addon).run_due()


async def _chat(addon: Recorder, clock: Clock, wait: float, flow: http.HTTPFlow, size: int) -> None:
    await start(addon, flow, clock)
    await _pause(addon, wait)
    flow.response = sse_response()
    addon.responseheaders(flow)
    stream_through(flow, pieces_of(CHAT_SSE, size), clock)
    addon.response(flow)


async def sse_chat(addon: Recorder, clock: Clock, wait: float) -> None:
    await _chat(addon, clock, wait, make_flow(headers=KEY_HEADERS), 97)


async def sse_chat_in_small_pieces(addon: Recorder, clock: Clock, wait: float) -> None:
    # more pieces than a batch holds: the tap's full batch needs the meter mid-stream
    assert len(CHAT_SSE) // 5 > addon_module.BATCH_PIECES
    await _chat(addon, clock, wait, make_flow(headers=KEY_HEADERS), 5)


async def sse_messages_cut(addon: Recorder, clock: Clock, wait: float) -> None:
    body = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 64, "messages": []}
    flow = make_flow(
        "/v1/messages", body=body, headers=[(b"x-api-key", b"sk-ant-api03-STARTSECRET0002")]
    )
    await start(addon, flow, clock)
    flow.response = sse_response()
    addon.responseheaders(flow)
    await _pause(addon, wait)
    stream_through(flow, pieces_of(MESSAGES_SSE[:900], 50), clock)
    clock.now += 1.0
    flow.error = tflow.terr("Client disconnected.")
    addon.error(flow)


async def json_error_echoing_the_key(addon: Recorder, clock: Clock, wait: float) -> None:
    flow = make_flow(headers=KEY_HEADERS)
    await start(addon, flow, clock)
    flow.response = tutils.tresp(
        status_code=401,
        headers=http.Headers([(b"content-type", b"application/json"), (b"request-id", b"r9")]),
        content=orjson.dumps({"error": {"message": f"Incorrect API key provided: {KEY}."}}),
    )
    addon.responseheaders(flow)
    await _pause(addon, wait)
    addon.response(flow)


async def large_prompt(addon: Recorder, clock: Clock, wait: float) -> None:
    text = "word " * (INLINE_PARSE_LIMIT // 4)  # read on a worker thread
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": text}]}
    await _chat(addon, clock, wait, make_flow(body=body, headers=KEY_HEADERS), 500)


RUNS = [
    sse_chat,
    sse_chat_in_small_pieces,
    sse_messages_cut,
    json_error_echoing_the_key,
    large_prompt,
]


def _figures(rec: StreamRecord) -> dict[str, object]:
    # the id and start stamp differ from run to run by nature
    out = {name: getattr(rec, name) for name in FIELDS if name not in ("id", "started_at")}
    out["gaps"] = rec.gaps
    return out


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.__name__)
async def test_a_record_made_later_is_the_record_made_at_once(run: Run) -> None:
    records = []
    # (start_delay, finish_delay, a pause of the loop mid-flow): at once; made when
    # the flow's end needs it; made by the batch between the request and the
    # response (a 10 ms delay, and 50 ms of loop); closed (and so made) by the batch
    # that completes it; closed at shutdown
    for delay, finish, wait in (
        (0.0, 0.0, 0.0),
        (60.0, 0.0, 0.0),
        (0.01, 0.0, 0.05),
        (60.0, 0.01, 0.0),
        (0.01, 60.0, 0.05),
    ):
        addon, sink, clock = make(start_delay=delay, finish_delay=finish)
        with taddons.context(addon):
            await run(addon, clock, wait)
            assert addon.open_flows == 0 and addon.health.in_flight == 0
            if finish < 1:
                timers_of(addon).advance(0.1)
                assert len(sink.records) == 1  # by the batch, not by done
        addon.done()
        (rec,) = sink.records
        assert addon.health.internal_errors == 0 and addon.health.in_flight == 0
        assert rec.id and rec.started_at and rec.recorder_error is None
        records.append(rec)
    for rec in records[1:]:
        assert _figures(rec) == _figures(records[0])
    for rec in records:  # the key, masked wherever the upstream echoed it
        assert "STARTSECRET" not in orjson.dumps(rec.to_dict()).decode()


async def test_records_wait_for_their_batch_and_are_made_in_order() -> None:
    started: list[str] = []

    class Starts(Observer):
        def stream_started(self, rec: StreamRecord) -> None:
            assert rec.id is not None
            started.append(rec.id)

    addon, sink, _clock = make(start_delay=0.05)
    addon.add_observer(Starts())
    flows = [make_flow(headers=KEY_HEADERS) for _ in range(3 * addon_module.START_SLICE + 1)]
    with taddons.context(addon):
        for flow in flows:
            addon.requestheaders(flow)
            addon.request(flow)
        assert started == [] and addon.open_flows == len(flows)
        assert addon.health.in_flight == len(flows)  # counted at once
        timers = timers_of(addon)
        timers.advance(0.05)
        # the batch, in slices of START_SLICE, each its own callback
        assert len(started) == len(flows) and timers.ran == 4
        states = [addon.streams.get(f.id) for f in flows]
        assert [s.record.id for s in states] == started  # made in the order they came
        for state in states:
            assert state.record.model == "gpt-4o"  # the body's facts, read with it
            assert state.record.api_key_id == fingerprint(KEY, SECRET)
            assert state.record.project == "proj_1"
        addon.done()
    assert len(sink.records) == len(flows) == addon.cut_at_shutdown


def answer_and_end(addon: Recorder, flow: http.HTTPFlow, clock: Clock) -> None:
    """The rest of a noted flow: its request hook, a streamed chat answer, its end."""
    addon.request(flow)
    flow.response = sse_response()
    addon.responseheaders(flow)
    stream_through(flow, pieces_of(CHAT_SSE, 300), clock)
    addon.response(flow)


async def test_what_requestheaders_read_is_recorded_though_the_request_changes() -> None:
    addon, sink, clock = make(start_delay=60.0)
    with taddons.context(addon):
        flow = make_flow(headers=KEY_HEADERS)
        addon.requestheaders(flow)
        assert "accept-encoding" not in flow.request.headers  # removed at once
        # another addon rewrites the request before the record is made
        flow.request.headers["authorization"] = "Bearer sk-proj-OTHERKEY0000000000001"
        flow.request.headers["openai-project"] = "proj_other"
        flow.request.host = "elsewhere.example.com"
        answer_and_end(addon, flow, clock)
    (rec,) = sink.records
    assert rec.api_key_id == fingerprint(KEY, SECRET)
    assert rec.project == "proj_1" and rec.upstream == "api.example.com:443"


async def test_a_key_in_the_query_is_read_at_requestheaders_too() -> None:
    """A gateway that takes its key in the URL (``?key=``): the query is read when
    the headers are, not from mitmproxy's live view of the URL when the record is
    made (another addon may rewrite it meanwhile); the record fingerprints the
    key the request was sent with."""
    addon, sink, clock = make(start_delay=60.0)
    with taddons.context(addon):
        flow = make_flow(path=f"/v1/chat/completions?key={KEY}&alt=sse")
        addon.requestheaders(flow)
        flow.request.query["key"] = "gwOTHERSECRET0000000000000000"
        answer_and_end(addon, flow, clock)
    (rec,) = sink.records
    assert rec.api_key_id == fingerprint(KEY, SECRET)


@pytest.mark.parametrize("in_batch_of", ["starts", "ends", "shutdown"])
async def test_a_record_that_cannot_be_made_costs_only_its_flow(
    monkeypatch: pytest.MonkeyPatch, in_batch_of: str
) -> None:
    real = making.StreamMeter
    made = 0

    def meter(*args: object, **kwargs: object) -> object:
        nonlocal made
        made += 1
        if made == 2:
            raise RuntimeError("bug making the meter")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(making, "StreamMeter", meter)
    # made by the batch of starts, before the responses; or by the batch that closes
    # the ended flows' records, one after the other
    starts = in_batch_of == "starts"
    addon, sink, clock = make(start_delay=0.01 if starts else 60.0, finish_delay=0.01)
    flows = [make_flow(headers=KEY_HEADERS) for _ in range(3)]
    with taddons.context(addon):
        for flow in flows:
            addon.requestheaders(flow)
            addon.request(flow)
        if in_batch_of == "shutdown":  # made as done ends the open flows
            addon.done()
            assert len(sink.records) == 2 and addon.cut_at_shutdown == 3
            assert addon.health.in_flight == 0 and addon.open_flows == 0
            return
        timers_of(addon).advance(0.1)
        assert addon.open_flows == (2 if starts else 3)
        got = []
        for flow in flows:
            flow.response = sse_response()
            addon.responseheaders(flow)
            if starts and flow is flows[1]:
                # not tapped: mitmproxy forwards it as without the recorder
                assert flow.response.stream is False
                continue
            got.append(stream_through(flow, pieces_of(CHAT_SSE, 200), clock))
            addon.response(flow)
        timers_of(addon).advance(0.1)
    assert got == [CHAT_SSE] * len(got)  # the client got every byte
    assert len(sink.records) == 2 and all(r.events for r in sink.records)
    assert addon.health.internal_errors >= 1
    assert addon.health.in_flight == 0 and addon.open_flows == 0


async def test_shutdown_makes_closes_and_completes_what_waits() -> None:
    addon, sink, clock = make(start_delay=60.0, finish_delay=60.0)
    with taddons.context(addon):
        flows = [make_flow(headers=KEY_HEADERS) for _ in range(3)]
        for flow in flows:
            await start(addon, flow, clock)
        flow = flows[0]  # ended: waits, unmade and unclosed, for its batches
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream_through(flow, pieces_of(CHAT_SSE, 300), clock)
        addon.response(flow)
        assert sink.records == [] and addon.health.in_flight == 2
        addon.done()  # no waiting a minute, nothing lost
    assert len(sink.records) == 3 and addon.cut_at_shutdown == 2
    assert addon.health.in_flight == 0 and addon.health.internal_errors == 0
    by_outcome = sorted(r.outcome for r in sink.records)
    assert by_outcome == ["client_disconnect", "client_disconnect", "completed"]
    # closed without done (the runner's last resort): the ended flow is still recorded
    addon2, sink2, clock2 = make(start_delay=60.0, finish_delay=60.0)
    with taddons.context(addon2):
        await sse_chat(addon2, clock2, 0.0)
    addon2.close()
    assert len(sink2.records) == 1 and sink2.records[0].outcome == "completed"
