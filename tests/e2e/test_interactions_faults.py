"""Google's Interactions API end to end: the simulator's ``/v1beta/interactions``
through the real proxy (reverse mode, in a thread, as the Gemini SDK tests run),
with each fault the simulator has. Every record says what the recorder should:
the outcome, the usage to the token for a stream that completed (and for a whole
interaction), the error of an error event after status 200, and for a cut stream
its output estimated from what came. The google-genai SDK's own
``client.interactions.create`` is checked through the same route."""

from __future__ import annotations

import orjson
import pytest
from google import genai
from google.genai import types

from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator
from tests.e2e.test_faults import assert_ground_truth, sent_body, the_record
from tests.kit.exchanges import Received, exchange, request_bytes
from tests.kit.exchanges import sim as sim
from tests.kit.proxy_thread import STALL_AFTER, RunningProxy

PATH = "/v1beta/interactions"
MODEL = "gemini-3-flash-preview"
K = 6  # events before a cut: the first text delta has come by then


def ask(
    proxy: RunningProxy, sid: str, fault: str, *, stream: bool = True, **extra: object
) -> Received:
    doc = {"model": MODEL, "input": "Say something about harmony.", "stream": stream, **extra}
    headers = {
        "content-type": "application/json",
        "x-goog-api-key": "AIza-e2e-interactions-0001",
        "x-sim-id": sid,
        "x-sim-fault": fault,
    }
    return exchange(proxy.port(), request_bytes(PATH, orjson.dumps(doc), headers))


def assert_usage_to_the_token(rec: StreamRecord, sent: SentRecord) -> None:
    assert sent.usage is not None
    assert rec.usage_source == "reported" and rec.output_source == "reported"
    assert (rec.input_tokens, rec.output_tokens) == (
        sent.usage["input_tokens"],
        sent.usage["output_tokens"],
    )
    assert rec.reasoning_tokens == sent.usage["reasoning_tokens"]
    assert rec.cache_read_tokens == sent.usage["cache_read_tokens"]
    assert rec.cost_usd is not None


def assert_agrees(rec: StreamRecord, sent: SentRecord) -> None:
    assert (rec.endpoint, rec.provider, rec.model) == ("interactions", "gcp.gemini", MODEL)
    assert rec.outcome == sent.outcome, (rec.outcome, sent.outcome, rec.transport_error)
    assert rec.streamed is sent.streamed
    assert rec.request_id == sent.request_id
    assert rec.response_id == (sent.response_id if sent.events or not sent.streamed else None)
    assert (rec.output_chars, rec.tool_calls) == (sent.output_chars, sent.tool_calls)
    assert rec.finish_reason == sent.finish_reason
    if sent.streamed:
        assert (rec.events, rec.keepalives) == (sent.events, sent.keepalives)
    assert rec.parse_issues == 0 and rec.recorder_error is None


COMPLETED = {
    # fault: what the stream is (the outcome: completed, usage reported)
    "": "a clean stream",
    "reasoning,cache_read=4": "thought summaries and a cache read",
    "tools=2": "two function calls: requires_action",
    "compress=gzip,crlf": "gzip and CRLF line ends",
    # (a short answer: some 5,000 one-byte writes take seconds through the proxy)
    "bytewise,deltas=6": "one byte per write",
    "compress=br,cr,bom": "brotli, CR line ends, a byte order mark",
    "length,close": "a Content-Length, then the connection closed",
    "header_delay=0.05,body_delay=0.05,ttft=0.1,delay=0.002,split=0.05": "waits everywhere",
    "eof": "the body ends with the connection",
    f"keepalive=0.25,stall={STALL_AFTER + 0.2:g}": "keepalives through a stall",
}


@pytest.mark.parametrize("fault", list(COMPLETED))
def test_a_completed_stream_is_billed_to_the_token(
    records: RunningProxy, sim: Simulator, fault: str
) -> None:
    sid = f"int-ok-{fault}"
    got = ask(records, sid, fault)
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    assert got.status == 200 and got.body == sent_body(sent)
    assert sent.outcome == "completed" and rec.interrupted is False
    assert_agrees(rec, sent)
    assert_usage_to_the_token(rec, sent)
    if "tools" in fault:
        assert (rec.tool_calls, rec.finish_reason) == (2, "requires_action")
    if "stall" in fault:
        assert rec.stalls == 1 and rec.keepalives == sent.keepalives >= 4
    if "ttft" in fault:  # the planned waits, at least (a bound, never a measure)
        assert rec.ttft_ms is not None and rec.ttft_ms >= 150


def test_the_output_cap_is_incomplete(records: RunningProxy, sim: Simulator) -> None:
    ask(records, "int-cap", "", generation_config={"max_output_tokens": 5})
    sent = sim.wait_sent_blocking("int-cap")
    rec = the_record(records)
    assert (rec.outcome, rec.finish_reason) == ("incomplete", "incomplete")
    assert_agrees(rec, sent)
    assert_usage_to_the_token(rec, sent)
    assert rec.output_tokens == 5


def test_usage_left_out_is_estimated(records: RunningProxy, sim: Simulator) -> None:
    ask(records, "int-nousage", "usage=off")
    sent = sim.wait_sent_blocking("int-nousage")
    rec = the_record(records)
    assert rec.outcome == "completed" and sent.usage is None
    assert_agrees(rec, sent)
    assert rec.output_source == "estimated" and rec.input_source == "estimated"
    assert rec.output_tokens and rec.cost_usd is not None


ERRORS = {
    # fault: (error code, message)
    "error=4": ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    "error=5,error_code=RESOURCE_EXHAUSTED": ("RESOURCE_EXHAUSTED", None),
    "interrupt=7": ("UNAVAILABLE", "Response stream interrupted, please retry"),
}


@pytest.mark.parametrize("fault", list(ERRORS))
def test_an_error_event_after_200_is_an_error(
    records: RunningProxy, sim: Simulator, fault: str
) -> None:
    sid = f"int-err-{fault}"
    got = ask(records, sid, fault)
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    assert got.status == 200 and b"event: error" in got.body
    assert_agrees(rec, sent)
    code, message = ERRORS[fault]
    assert (rec.outcome, rec.error_type, rec.error_code) == ("error", "error", code)
    assert rec.error_message == (message or sent.error_message)
    if sent.output_chars:  # billed for what came: the output estimated
        assert rec.output_source == "estimated" and rec.output_tokens


CUTS = {
    # fault: (outcome, a half event on the wire)
    f"rst={K}": ("upstream_disconnect", False),
    f"rst={K},midevent": ("upstream_disconnect", True),
    f"fin={K}": ("upstream_disconnect", False),
    f"fin={K},midevent": ("upstream_disconnect", True),
    "rst=0": ("upstream_disconnect", False),
    f"eof,fin={K}": ("truncated", False),
}


@pytest.mark.parametrize("fault", list(CUTS))
def test_a_cut_stream_has_its_output_estimated(
    records: RunningProxy, sim: Simulator, fault: str
) -> None:
    sid = f"int-cut-{fault}".replace(",", "-")
    got = ask(records, sid, fault)
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    outcome, partial = CUTS[fault]
    assert sent.outcome == outcome and got.body == sent_body(sent)
    assert_ground_truth(rec, sent, partial=partial)
    assert_agrees(rec, sent)
    assert rec.input_source == "estimated" and rec.cost_usd is not None
    if sent.output_chars:
        # what came is billed: its output estimated from the deltas that arrived
        assert rec.output_source == "estimated"
        assert rec.output_tokens and rec.output_tokens >= sent.output_deltas // 2


def test_a_flaky_upstream_cuts_then_answers_the_retry(
    records: RunningProxy, sim: Simulator
) -> None:
    """``fail_first``: the first request of a body is cut, the same body again is
    answered; the two records say so, the retry billed to the token."""
    outcomes = []
    for attempt in (1, 2):
        # (its own question: the simulator counts the attempts of each body)
        ask(records, f"int-flaky-{attempt}", f"rst={K},fail_first", input="Is it flaky?")
        sent = sim.wait_sent_blocking(f"int-flaky-{attempt}")
        assert sent.attempt == attempt
        rec = the_record(records)
        with records.sink._cond:
            records.sink.records.clear()
        assert_agrees(rec, sent)
        outcomes.append(rec.outcome)
    assert outcomes == ["upstream_disconnect", "completed"]
    assert_usage_to_the_token(rec, sent)


@pytest.mark.parametrize("fault", ["drop", "drop=rst"])
def test_a_dropped_request_is_an_upstream_disconnect(
    records: RunningProxy, sim: Simulator, fault: str
) -> None:
    sid = f"int-{fault}"
    got = ask(records, sid, fault)
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    assert got.status == 502 and sent.http_status is None
    assert (rec.outcome, rec.endpoint) == ("upstream_disconnect", "interactions")
    assert rec.output_chars == 0


@pytest.mark.parametrize("status", [429, 503])
def test_an_error_status_is_an_http_error(
    records: RunningProxy, sim: Simulator, status: int
) -> None:
    sid = f"int-status-{status}"
    got = ask(records, sid, f"status={status}")
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    assert got.status == status == rec.http_status
    err = orjson.loads(got.body)["error"]
    assert (rec.outcome, rec.error_type, rec.error_code) == (
        "http_error",
        err["status"],
        str(status),
    )
    assert (rec.error_type, rec.error_code) == (sent.error_type, sent.error_code)


@pytest.mark.parametrize("fault", ["", "tools", "reasoning"])
def test_a_whole_interaction_is_billed_to_the_token(
    records: RunningProxy, sim: Simulator, fault: str
) -> None:
    sid = f"int-json-{fault}"
    got = ask(records, sid, fault, stream=False)
    sent = sim.wait_sent_blocking(sid)
    rec = the_record(records)
    assert got.status == 200 and got.headers["content-type"] == "application/json"
    assert (rec.streamed, rec.transport) == (False, "json")
    assert_agrees(rec, sent)
    assert_usage_to_the_token(rec, sent)


def test_a_whole_interaction_cut_in_half(records: RunningProxy, sim: Simulator) -> None:
    ask(records, "int-json-cut", "fin=0", stream=False)
    sent = sim.wait_sent_blocking("int-json-cut")
    rec = the_record(records)
    assert sent.outcome == rec.outcome == "upstream_disconnect"
    assert rec.interrupted is True and rec.input_source == "estimated"


def test_the_sdk_streams_through_the_proxy(records: RunningProxy, sim: Simulator) -> None:
    client = genai.Client(
        api_key="AIza-e2e-interactions-0002",
        http_options=types.HttpOptions(base_url=records.url(), timeout=20_000),
    )
    text = ""
    stream = client.interactions.create(model=MODEL, input="Tell me about harmony.", stream=True)
    for event in stream:
        if event.event_type == "step.delta" and event.delta.type == "text":
            text += event.delta.text or ""
    rec = the_record(records)
    sent = sim.wait_sent_blocking(rec.request_id or "")
    assert text == sent.text and sent.path == "/v1/interactions"
    assert_agrees(rec, sent)
    assert_usage_to_the_token(rec, sent)
