"""Faults end to end, through the real proxy: the transport breaking at every phase.

The upstream (the simulator) resets or closes at each phase of a response, and
the client (a raw socket, so the test owns the timing) leaves at each phase.
For every case: the client got exactly the simulator's bytes (all of them, or a
prefix where the client left), the proxy wrote exactly one record, released the
flow, and the record agrees with the simulator's ground truth as far as it got
(events fully delivered are counted; a half-delivered one is reported as partial).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
import pytest

from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator
from tests.kit.exchanges import (
    PATHS,
    REQUESTS,
    Received,
    exchange,
    request_bytes,
)
from tests.kit.exchanges import sim as sim
from tests.kit.proxy_thread import RunningProxy

K = 6  # events before a cut: every protocol has output by then
# A client that leaves does so at the start of a pause this long; the simulator
# notices within 50 ms once the proxy drops the upstream, so the pause only
# bounds a test that fails (the simulator would then go on and complete).
PAUSE = 3.0


# -- a raw HTTP/1.1 client -----------------------------------------------------------


def sse_request(path: str, sid: str, fault: str) -> bytes:
    body = orjson.dumps(REQUESTS[path])
    headers = {"content-type": "application/json", "x-sim-id": sid, "x-sim-fault": fault}
    return request_bytes(path, body, headers)


def the_record(proxy: RunningProxy) -> StreamRecord:
    """The one record of the request, once the proxy has let go of the flow."""
    (rec,) = proxy.sink.wait_for(1)
    deadline = time.monotonic() + 5
    while proxy.recorder.open_flows and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # a duplicate would be submitted with the first one
    assert len(proxy.sink.records) == 1, [r.outcome for r in proxy.sink.records]
    assert proxy.recorder.open_flows == 0
    assert proxy.recorder.health.in_flight == 0
    assert proxy.recorder.health.internal_errors == 0
    return rec


def sent_body(sent: SentRecord) -> bytes:
    assert sent.body is not None
    return bytes(sent.body)


def assert_ground_truth(rec: StreamRecord, sent: SentRecord, *, partial: bool) -> None:
    """The record says what the simulator sent, as far as it got."""
    assert rec.outcome == sent.outcome, (rec.outcome, sent.outcome, rec.transport_error)
    assert rec.interrupted is True
    assert rec.endpoint == sent.endpoint
    assert rec.http_status == sent.http_status
    assert (rec.events or 0) == sent.events
    assert rec.output_chars == sent.output_chars
    assert rec.tool_calls == sent.tool_calls
    assert rec.partial_event_at_end is partial
    assert rec.parse_issues == 0 and rec.recorder_error is None
    if sent.http_status is not None:
        assert rec.request_id == sent.request_id
        assert rec.response_id == (sent.response_id if sent.events else None)
    if sent.usage is not None:  # Anthropic's message_start reports the input
        assert rec.input_tokens == sent.usage["input_tokens"]
        assert rec.input_source == "reported"
    elif sent.http_status is not None:
        assert rec.input_source == "estimated"  # billed all the same


# -- the upstream breaks ---------------------------------------------------------------

UPSTREAM_CUTS = [
    # (cut, phase, simulator fault, a half event on the wire)
    ("rst", "before_headers", "drop=rst", False),
    ("rst", "after_headers", "rst=0", False),
    ("rst", "mid_event", f"rst={K},midevent", True),
    ("rst", "between_events", f"rst={K}", False),
    ("fin", "before_headers", "drop", False),
    ("fin", "after_headers", "fin=0", False),
    ("fin", "mid_event", f"fin={K},midevent", True),
    ("fin", "between_events", f"fin={K}", False),
]


@pytest.mark.parametrize("endpoint", list(PATHS))
@pytest.mark.parametrize(
    ("fault", "partial", "phase"),
    [pytest.param(f, p, ph, id=f"upstream-{cut}-{ph}") for cut, ph, f, p in UPSTREAM_CUTS],
)
def test_upstream_breaks(
    records: RunningProxy, sim: Simulator, endpoint: str, fault: str, partial: bool, phase: str
) -> None:
    sid = f"up-{phase}-{fault}-{endpoint}".replace(",", "-")
    got = exchange(records.port(), sse_request(PATHS[endpoint], sid, fault))
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    assert sent.outcome == "upstream_disconnect"
    if phase == "before_headers":
        # nothing came from the upstream: mitmproxy answers 502 itself
        assert sent_body(sent) == b"" and sent.http_status is None
        assert got.status == 502 and got.complete
        assert b"server closed connection" in got.body
        assert rec.transport_error == "server closed connection"
    else:
        # every byte the upstream wrote, and not a byte more; the framing is left open
        assert got.status == 200 and not got.complete and got.ended in ("eof", "reset")
        assert got.body == sent_body(sent)
        assert got.events() == sent.events
        assert got.headers["x-sim-request"] == sid
        assert rec.transport_error is not None
        assert rec.transport_error.startswith("HTTP/1 protocol error: peer closed connection")
        if phase == "between_events":
            assert sent.events == K
    assert_ground_truth(rec, sent, partial=partial)


# -- the client leaves -----------------------------------------------------------------


def _events_then_partial(got: Received) -> bool:
    return got.events() >= K and not got.body.endswith(b"\n\n")


CLIENT_LEAVES: list[tuple[str, str, Callable[[Simulator, str], Callable[[Received], bool]]]] = [
    # (phase, simulator fault, when the client leaves)
    # before the headers: once the request has reached the upstream
    ("before_headers", f"header_delay={PAUSE}", lambda sim, sid: lambda got: sid in sim.sent),
    ("after_headers", f"body_delay={PAUSE}", lambda sim, sid: lambda got: got.head_done),
    ("mid_event", f"split={PAUSE}@{K}", lambda sim, sid: _events_then_partial),
    ("between_events", f"stall={PAUSE}@{K}", lambda sim, sid: lambda got: got.events() >= K),
]


@pytest.mark.parametrize(
    ("endpoint", "how"),
    [
        pytest.param("chat", "rst", id="chat-rst"),
        pytest.param("responses", "rst", id="responses-rst"),
        pytest.param("messages", "rst", id="messages-rst"),
        pytest.param("interactions", "rst", id="interactions-rst"),
        pytest.param("chat", "fin", id="chat-fin"),
    ],
)
@pytest.mark.parametrize(
    ("phase", "fault", "leave"),
    [pytest.param(ph, f, w, id=f"client-leaves-{ph}") for ph, f, w in CLIENT_LEAVES],
)
def test_client_leaves(
    records: RunningProxy,
    sim: Simulator,
    endpoint: str,
    how: str,
    phase: str,
    fault: str,
    leave: Callable[[Simulator, str], Callable[[Received], bool]],
) -> None:
    sid = f"client-{phase}-{endpoint}-{how}"
    started = time.monotonic()
    got = exchange(
        records.port(),
        sse_request(PATHS[endpoint], sid, fault),
        leave_when=leave(sim, sid),
        reset=how == "rst",
    )
    assert got.ended == "left"
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    # the proxy dropped the upstream at once: the simulator stopped inside its pause
    assert time.monotonic() - started < PAUSE
    assert sent.transport == "client_gone" and sent.outcome == "client_disconnect"
    body = sent_body(sent)
    assert body.startswith(got.body)
    assert got.events() == sent.events
    if phase == "before_headers":
        assert not got.head_done and sent.http_status is None
    else:
        assert got.status == 200 and got.headers["x-sim-request"] == sid
    if phase in ("mid_event", "between_events"):
        # the simulator paused there: the client had every byte it wrote
        assert sent.events == K and got.body == body
        assert got.body.endswith(b"\n\n") is (phase == "between_events")
    assert rec.transport_error == "Client disconnected."
    assert_ground_truth(rec, sent, partial=phase == "mid_event")


@pytest.mark.parametrize("how", ["rst", "fin"])
@pytest.mark.parametrize("endpoint", list(PATHS))
def test_client_leaves_in_the_middle_of_its_request_body(
    records: RunningProxy, sim: Simulator, endpoint: str, how: str
) -> None:
    """Headers and part of the body, then the client goes: the upstream never saw
    the request, so it is the client's disconnect, not the upstream's."""
    sid = f"client-mid-request-{endpoint}-{how}"
    whole = sse_request(PATHS[endpoint], sid, "")
    cut = whole[: whole.index(b"\r\n\r\n") + 4 + 10]  # 10 bytes of the body

    def leave(_: Received) -> bool:
        time.sleep(0.2)  # the proxy has read what was sent
        return True

    got = exchange(records.port(), cut, leave_when=leave, reset=how == "rst")
    assert got.ended == "left" and not got.head_done
    rec = the_record(records)
    assert rec.outcome == "client_disconnect", (rec.outcome, rec.transport_error)
    assert rec.interrupted is True and rec.http_status is None
    assert rec.endpoint == endpoint.replace("chat", "chat.completions")
    assert sid not in sim.sent  # the upstream never saw it
